"""Reference-set build time per instance: the catalogue's specs against today's 7-task registry.

Writes, for every spec of contam_assets/catalogue/, its evaluated (first) split as one Parquet file in the
Hub layout the spec names, ``--rows`` rows of deterministic text of typical lengths (question 40 words,
answer 25, passage 120, each choice 8), then times ``build_reference_set`` (default preset, CPU seconds of
this process, best of ``--repeat``) over the catalogue and over data/tasks' 7 specs on ../shared/data, and
reports seconds per instance (an instance = a benchmark row) of each and their ratio (the target:
at most 2).

    python benchmarks/catalogue_build.py --rows 1000 --json /tmp/catalogue_build.json
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def words(rng: random.Random, vocab: list[str], n: int) -> str:
    return " ".join(rng.choice(vocab) for _ in range(n))


def put(row: dict, path: str, value) -> None:
    import re

    parts = re.findall(r"[^.\[\]]+|\[-?\d+\]", path)
    cur = row
    for i, part in enumerate(parts):
        if part.startswith("["):
            continue
        if i == len(parts) - 1:
            cur[part] = value
        elif parts[i + 1].startswith("["):
            cur[part] = [value]
            return
        else:
            cur = cur.setdefault(part, {})


def rows_for(spec, n: int, rng: random.Random, vocab: list[str]) -> list[dict]:
    f, out = spec.fields, []
    k = 4 if len(f.choices) == 1 else len(f.choices)
    for i in range(n):
        row: dict = {}
        put(row, f.question, words(rng, vocab, 40) + "?")
        if f.answer:
            put(row, f.answer, words(rng, vocab, 25))
        if f.passage:
            put(row, f.passage, words(rng, vocab, 120))
        if f.solution and f.solution != f.answer:
            put(row, f.solution, words(rng, vocab, 25))
        if spec.kind == "multiple-choice":
            choices = [words(rng, vocab, 8) for _ in range(k)]
            if len(f.choices) == 1:
                put(row, f.choices[0], choices)
                if f.choices[0].endswith(".text"):
                    put(row, f.choices[0][:-5] + ".label", list("ABCDEFGHIJ")[:k])
            else:
                row.update(zip(f.choices, choices))
            if f.gold:
                put(row, f.gold, "ABCD"[i % k] if f.gold_labels or spec.name == "race" else i % k + f.gold_base)
        out.append(row)
    return out


def write_catalogue(folder: Path, specs, rows: int, seed: int = 0) -> int:
    import csv

    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = random.Random(seed)
    text = (ROOT / "data" / "demo" / "host_text.md").read_text()  # the project's host text: real English words
    vocab = sorted({w.strip(".,;:!?()\"'`*#").lower() for w in text.split()} - {""})
    total = 0
    for spec in specs:
        split = spec.splits[0]
        data = rows_for(spec, rows, rng, vocab)
        path = folder / spec.hub / split.file.replace("*", "00000-of-00001")
        path.parent.mkdir(parents=True, exist_ok=True)
        if path.suffix == ".csv":
            with open(path, "w", newline="") as fh:
                w = csv.DictWriter(fh, fieldnames=list(data[0]))
                w.writeheader()
                w.writerows(data)
        elif path.suffix == ".parquet":
            pq.write_table(pa.Table.from_pylist(data), path)
        else:
            path.write_text("".join(json.dumps(r) + "\n" for r in data))
        total += rows
    return total


def timed(fn, repeat: int):
    best, out = None, None
    for _ in range(repeat):
        t0 = time.process_time()
        out = fn()
        dt = time.process_time() - t0
        best = dt if best is None else min(best, dt)
    return best, out


def main(argv=None) -> int:
    from contam_assets.detector.config import preset
    from contam_assets.sources.catalogue import CATALOGUE_DIR, DEFAULT_TASKS_DIR
    from contam_assets.sources.reference import build_reference_set
    from contam_assets.sources.registry import load_registry

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=1000, help="rows of each catalogue benchmark's evaluated split")
    ap.add_argument("--shared", default=str(ROOT.parent / "shared" / "data"), help="the 7-task registry's data")
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--json", help="write the figures here")
    a = ap.parse_args(argv)
    if a.rows < 1 or a.repeat < 1:
        print("catalogue_build.py: --rows and --repeat must be at least 1", file=sys.stderr)
        return 2
    if not Path(a.shared).is_dir():
        print(f"catalogue_build.py: benchmark folder not found: {a.shared}", file=sys.stderr)
        return 2
    cfg = preset("default")
    catalogue = load_registry(CATALOGUE_DIR)
    registry = load_registry(DEFAULT_TASKS_DIR)
    with tempfile.TemporaryDirectory(prefix="catalogue_build_") as tmp:
        n_cat = write_catalogue(Path(tmp), catalogue, a.rows)
        t_cat, (recs_cat, _) = timed(lambda: build_reference_set(catalogue, Path(tmp), cfg), a.repeat)
    t_reg, (recs_reg, stats_reg) = timed(lambda: build_reference_set(registry, Path(a.shared), cfg), a.repeat)
    n_reg = sum(r["rows"] for r in stats_reg.availability)
    out = dict(catalogue_specs=len(catalogue), catalogue_instances=n_cat, catalogue_records=recs_cat.height,
               catalogue_cpu_s=round(t_cat, 3), registry_specs=len(registry), registry_instances=n_reg,
               registry_records=recs_reg.height, registry_cpu_s=round(t_reg, 3),
               catalogue_us_per_instance=round(1e6 * t_cat / n_cat, 1), registry_us_per_instance=round(1e6 * t_reg / n_reg, 1))
    out["ratio"] = round(out["catalogue_us_per_instance"] / out["registry_us_per_instance"], 3)
    print(f"catalogue {len(catalogue)} specs, {n_cat:,} instances: {t_cat:.2f} CPU s ({out['catalogue_us_per_instance']} us/instance); "
          f"registry {len(registry)} specs, {n_reg:,} instances: {t_reg:.2f} CPU s ({out['registry_us_per_instance']} us/instance); "
          f"ratio {out['ratio']}")
    if a.json:
        Path(a.json).write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
