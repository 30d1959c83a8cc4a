"""Two detection runs side by side, as decon's `compare` does: ours or decon's report folders.

A side is either an output folder of `contam detect` (it holds contam.duckdb: its
removable flagged matches are read) or a folder of decon report files (every
``*.jsonl`` below it, decon's or ours).  Entries are keyed as decon keys them,
(training_file, training_line, eval_key, eval_line), with decon's naming of the
training file (base name, .gz/.zst/.zstd stripped), so a run of ours and a run of
decon on the same pool and references line up entry by entry.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from contam_assets import store
from contam_assets.decon.decon_outputs import training_file_name
from contam_assets.sources.reference import UNSPECIFIED_SPLIT
from contam_assets.store.tables import REMOVABLE_SQL

Key = tuple[str, int, str, int]  # training_file, training_line, eval_key, eval_line


@dataclass
class Entry:
    key: Key
    eval_instance_index: int | None
    split: str | None
    score: float | None


@dataclass
class Comparison:
    a: dict[Key, Entry]
    b: dict[Key, Entry]
    only_a: list[Key] = field(default_factory=list)
    only_b: list[Key] = field(default_factory=list)
    both: list[Key] = field(default_factory=list)

    @property
    def identical(self) -> bool:
        return not self.only_a and not self.only_b and not self.score_changes()

    def documents(self, side: dict[Key, Entry]) -> set[tuple[str, int]]:
        return {(k[0], k[1]) for k in side}

    def instances(self, side: dict[Key, Entry]) -> set[tuple[str, str | None, int | None]]:
        return {(k[2], e.split, e.eval_instance_index) for k, e in side.items()}

    def score_changes(self, tol: float = 1e-4) -> list[tuple[Key, float, float]]:
        out = []
        for k in self.both:
            sa, sb = self.a[k].score, self.b[k].score
            if sa is not None and sb is not None and abs(sa - sb) > tol:
                out.append((k, sa, sb))
        return out

    def per_eval_key(self) -> list[dict]:
        ca, cb = Counter(k[2] for k in self.a), Counter(k[2] for k in self.b)
        both = Counter(k[2] for k in self.both)
        return [dict(eval_key=e, first=ca[e], second=cb[e], both=both[e]) for e in sorted(set(ca) | set(cb))]

    def summary(self) -> dict:
        da, db = self.documents(self.a), self.documents(self.b)
        ia, ib = self.instances(self.a), self.instances(self.b)
        return dict(
            entries_first=len(self.a), entries_second=len(self.b), entries_both=len(self.both),
            entries_only_first=len(self.only_a), entries_only_second=len(self.only_b),
            documents_first=len(da), documents_second=len(db),
            documents_only_first=sorted(da - db), documents_only_second=sorted(db - da),
            instances_only_first=sorted(ia - ib, key=str), instances_only_second=sorted(ib - ia, key=str),
            score_changes=[dict(key=list(k), first=x, second=y) for k, x, y in self.score_changes()],
            per_eval_key=self.per_eval_key(), identical=self.identical,
        )


def _from_reports(folder: Path) -> dict[Key, Entry]:
    out: dict[Key, Entry] = {}
    for p in sorted(folder.rglob("*.jsonl")):
        for n, line in enumerate(p.read_text(encoding="utf-8").splitlines()):
            if not line.strip():
                continue
            try:
                r = json.loads(line)
                key = (str(r["training_file"]), int(r["training_line"]), str(r.get("eval_key") or r["eval_dataset"]),
                       int(r["eval_line"]))
            except (ValueError, KeyError, TypeError) as exc:
                raise ValueError(f"{p.name}:{n}: not a decon report entry ({exc})") from None
            out[key] = Entry(key, r.get("eval_instance_index"), r.get("split"), r.get("contamination_score"))
    return out


def _from_tables(out_dir: Path) -> dict[Key, Entry]:
    with store.connect(out_dir / "contam.duckdb", read_only=True) as con:
        rows = con.execute(f"""
            select r.shard, r.line, coalesce(i.eval_key, r.suite), coalesce(i.source_line, r.instance_index),
                   r.instance_index, r.split, r.contamination_score
            from ({REMOVABLE_SQL}) r join instances i using (record_id)
            where r.flagged and coalesce(r.decision, '') <> 'reject' and (not r.needs_review or r.decision = 'accept')
        """).fetchall()
    out: dict[Key, Entry] = {}
    for shard, line, eval_key, eval_line, index, split, score in rows:
        key = (training_file_name(shard), int(line), eval_key, int(eval_line))
        out[key] = Entry(key, index, None if split == UNSPECIFIED_SPLIT else split, score)
    return out


def load_side(path: str | Path) -> dict[Key, Entry]:
    """Entries of one side: a `contam detect` output folder, or a folder of decon report files."""
    path = Path(path)
    if not path.is_dir():
        raise FileNotFoundError(f"not a folder: {path}")
    if (path / "contam.duckdb").is_file():
        return _from_tables(path)
    return _from_reports(path)


def compare(a: str | Path, b: str | Path, eval_key: str | None = None, min_score: float | None = None) -> Comparison:
    sides = []
    for side in (load_side(a), load_side(b)):
        sides.append({k: e for k, e in side.items()
                      if (eval_key is None or k[2] == eval_key)
                      and (min_score is None or (e.score is not None and e.score >= min_score))})
    ea, eb = sides
    return Comparison(ea, eb, only_a=sorted(set(ea) - set(eb)), only_b=sorted(set(eb) - set(ea)),
                      both=sorted(set(ea) & set(eb)))
