"""Source x benchmark matrix: removed documents and tokens per pool source and task.

A removed document is counted under every task with a flagged match in it that is a
reason for the removal (a primary suite, or a derived suite a reviewer accepted), so a
row's cells can add up to more than the row total; the totals count each document once.
Tokens are the scan's token count of the document (cleaned text, the scan's tokenizer).
"""

from __future__ import annotations

import io
from dataclasses import dataclass

import duckdb

from contam_assets.store.tables import REMOVABLE_SQL

_CELLS_SQL = f"""
with reasons as (
    select distinct r.shard, r.line, coalesce(r.source, '(none)') as source, m.task, m.doc_tokens
    from removals r join ({REMOVABLE_SQL}) m on m.shard = r.shard and m.line = r.line
    where m.flagged and (not m.needs_review or m.decision = 'accept') and coalesce(m.decision, '') <> 'reject'
)
select source, task, count(*) as documents, coalesce(sum(doc_tokens), 0) as tokens
from reasons group by 1, 2 order by 1, 2
"""

_TOTALS_SQL = f"""
with docs as (
    select r.shard, r.line, coalesce(r.source, '(none)') as source, max(m.doc_tokens) as tokens
    from removals r left join ({REMOVABLE_SQL}) m on m.shard = r.shard and m.line = r.line
    group by 1, 2, 3
)
select source, count(*) as documents, coalesce(sum(tokens), 0) as tokens from docs group by 1 order by 1
"""


@dataclass
class Matrix:
    sources: list[str]
    tasks: list[str]
    documents: dict[tuple[str, str], int]
    tokens: dict[tuple[str, str], int]
    source_totals: dict[str, tuple[int, int]]  # source -> (documents, tokens), each document once

    @property
    def empty(self) -> bool:
        return not self.documents

    def rows(self) -> list[dict]:
        """One dict per source: documents and tokens per task, and the source's totals."""
        out = []
        for s in self.sources:
            row = {"source": s}
            for t in self.tasks:
                row[f"{t} documents"] = self.documents.get((s, t), 0)
                row[f"{t} tokens"] = self.tokens.get((s, t), 0)
            row["documents"], row["tokens"] = self.source_totals.get(s, (0, 0))
            out.append(row)
        return out


def source_task_matrix(con: duckdb.DuckDBPyConnection) -> Matrix:
    cells = con.execute(_CELLS_SQL).fetchall()
    totals = con.execute(_TOTALS_SQL).fetchall()
    sources = sorted({r[0] for r in totals} | {r[0] for r in cells})
    tasks = sorted({r[1] for r in cells})
    return Matrix(sources, tasks, {(s, t): d for s, t, d, _ in cells}, {(s, t): k for s, t, _, k in cells},
                  {s: (d, k) for s, d, k in totals})


def heatmap_png(matrix: Matrix) -> bytes:
    """Removed documents per (source, task) as a heat map, the count written in each cell."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    data = np.array([[matrix.documents.get((s, t), 0) for t in matrix.tasks] for s in matrix.sources], dtype=float)
    fig, ax = plt.subplots(figsize=(1.2 + 0.9 * len(matrix.tasks), 0.9 + 0.45 * len(matrix.sources)), dpi=100)
    ax.imshow(data, cmap="Reds", aspect="auto", vmin=0, vmax=max(1.0, data.max()))
    ax.set_xticks(range(len(matrix.tasks)), matrix.tasks, rotation=30, ha="right", fontsize=8)
    ax.set_yticks(range(len(matrix.sources)), matrix.sources, fontsize=8)
    for i in range(data.shape[0]):
        for j in range(data.shape[1]):
            ax.text(j, i, f"{int(data[i, j])}", ha="center", va="center", fontsize=8,
                    color="white" if data[i, j] > data.max() / 2 else "black")
    ax.set_title("removed documents per source and task", fontsize=9)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    plt.close(fig)
    return buf.getvalue()
