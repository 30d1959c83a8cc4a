"""Small figures for asset metadata (matplotlib imported on use)."""

from __future__ import annotations

import base64
import io


def loss_curve_png(losses: list[float], tokens_per_step: int, title: str = "") -> bytes:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 2.6), dpi=100)
    ax.plot([(i + 1) * tokens_per_step / 1e6 for i in range(len(losses))], losses, color="#2c3e50", lw=1)
    ax.set_xlabel("training tokens (millions)")
    ax.set_ylabel("loss (nats/token)")
    if title:
        ax.set_title(title, fontsize=9)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    plt.close(fig)
    return buf.getvalue()


def markdown_image(png: bytes, alt: str) -> str:
    return f"![{alt}](data:image/png;base64,{base64.b64encode(png).decode()})"
