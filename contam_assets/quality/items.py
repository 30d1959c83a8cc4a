"""Benchmark items as the planted suite sees them: one per (task, split, instance, subject).

Built from the reference records (``sources.reference.build_reference_set``), so the
suite plants exactly the instances the detector indexes: a multiple-choice item
gathers its per-choice records back into one question with its options, a code
item carries its reference solution (the derived ``<task>_solution`` suite).
"""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

Key = tuple[str, str, int, str]  # (task, split, instance_index, subject or "")


def item_key(task: str, split: str, instance_index: int, subject: str | None) -> Key:
    return (task, split, int(instance_index), subject or "")


@dataclass(frozen=True)
class PlantedItem:
    task: str
    kind: str  # qa | multiple-choice | code
    split: str
    instance_index: int
    subject: str | None
    question: str
    answer: str | None  # qa: the answer; code: the canonical solution (answer field); mc: None
    choices: tuple[str, ...] = ()
    gold: int | None = None
    solution: str | None = None  # code: the derived suite's question (reference solution alone)
    indexed: bool = False  # some record of the primary suite is indexed
    solution_indexed: bool = False  # the derived suite's record is indexed

    @property
    def key(self) -> Key:
        return item_key(self.task, self.split, self.instance_index, self.subject)

    @property
    def gold_text(self) -> str | None:
        if self.gold is None or not (0 <= self.gold < len(self.choices)):
            return None
        return self.choices[self.gold]


def items_from_records(records: pl.DataFrame) -> list[PlantedItem]:
    """One PlantedItem per instance of the primary suites, in (task, split, subject, instance_index) order."""
    prim = records.filter(~pl.col("derived")).sort("task", "split", "subject", "instance_index", "choice_index", nulls_last=False)
    derived = {
        item_key(r["task"], r["split"], r["instance_index"], r["subject"]): r
        for r in records.filter(pl.col("derived") & pl.col("suite").str.ends_with("_solution")).to_dicts()
    }
    groups: dict[Key, list[dict]] = {}
    for r in prim.to_dicts():
        groups.setdefault(item_key(r["task"], r["split"], r["instance_index"], r["subject"]), []).append(r)
    items = []
    for key, rows in groups.items():
        r0 = rows[0]
        d = derived.get(key)
        common = dict(
            task=r0["task"], kind=r0["kind"], split=r0["split"], instance_index=int(r0["instance_index"]),
            subject=r0["subject"], question=r0["question"], indexed=any(r["indexed"] for r in rows),
            solution=d["question"] if d else None, solution_indexed=bool(d and d["indexed"]),
        )
        if r0["kind"] == "multiple-choice":
            rows = sorted(rows, key=lambda r: r["choice_index"])
            gold = next((i for i, r in enumerate(rows) if r["is_correct"]), None)
            items.append(PlantedItem(**common, answer=None, choices=tuple(r["answer"] or "" for r in rows), gold=gold))
        else:
            items.append(PlantedItem(**common, answer=r0["answer"]))
    return items
