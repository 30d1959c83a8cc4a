"""Reference overlap: which benchmark instances are near-duplicates of each other (the `reference_overlap` part).

GSM-Hard re-states GSM8K's test items with other numbers (329 of them unchanged),
MMLU repeats questions across subjects, a train split can hold a test item again.
A match for one such instance is a match for its twins, so every instance gets the
list of its twins (records column ``twins``, match rows carry it) and the pairs go to
the ``reference_overlap`` table.

Rules, on the instances' cleaned words (question; multiple choice: and its options; minhash.py):

- candidates: datasketch MinHashLSH (Jaccard threshold ``LSH_THRESHOLD``) over the
  *masked* shingles of every distinct question, queried with each of them; exact
  duplicates are grouped before, without MinHash;
- every candidate pair is verified exactly and gets one relation, or none:
  ``identical`` (same cleaned text), ``same_template`` (same cleaned text once
  every run of number words is masked as one, numbers differ), ``near_duplicate`` (exact Jaccard of the
  unmasked shingles >= ``NEAR_JACCARD`` and at least ``MIN_SHINGLES`` shingles each);
  anything else the LSH proposed is dropped.
"""

from __future__ import annotations

import json
from collections import defaultdict

import polars as pl

from contam_assets.detector.minhash import NUMBER_ID, jaccard, masked_word_ids, minhashes, shingle_sets
from contam_assets.detector.text import CleanOptions, clean_words, join_words

LSH_THRESHOLD = 0.5  # MinHashLSH Jaccard threshold on masked shingles (candidates only)
NEAR_JACCARD = 0.8  # exact Jaccard of unmasked shingles for `near_duplicate`
MIN_SHINGLES = 5  # questions with fewer shingles are twins only when identical or same-template

OVERLAP_SCHEMA = {
    "task_a": pl.Utf8, "split_a": pl.Utf8, "instance_a": pl.Int32, "subject_a": pl.Utf8,
    "task_b": pl.Utf8, "split_b": pl.Utf8, "instance_b": pl.Int32, "subject_b": pl.Utf8,
    "relation": pl.Utf8, "jaccard": pl.Float64, "masked_jaccard": pl.Float64,
}


def instance_name(task: str, split: str, index: int, subject: str | None) -> str:
    return f"{task}/{split}/{index}" + (f"/{subject}" if subject else "")


def instance_texts(records: list[dict]) -> dict[tuple, str]:
    """The text of every primary instance: its question, and a multiple-choice item's options after it
    (two MMLU items with one stem and other options are not twins)."""
    parts: dict[tuple, list[tuple[int, str]]] = defaultdict(list)
    for r in records:
        if r["derived"] or not r["question"]:
            continue
        key = (r["task"], r["split"], r["instance_index"], r["subject"])
        if not parts[key]:
            parts[key].append((-1, r["question"]))
        if r["choice_index"] is not None:
            parts[key].append((r["choice_index"], r["answer"] or ""))
    return {k: "\n".join(t for _, t in sorted(v)) for k, v in parts.items()}


def _number_runs(masked) -> tuple:
    """Masked ids with every run of number words as one ("1,250" and "1.5" clean to two number words, "7" to one)."""
    out: list[int] = []
    for x in masked.tolist():
        if not (out and x == out[-1] == int(NUMBER_ID)):
            out.append(x)
    return tuple(out)


def _relation(qa: str, qb: str, ma: tuple, mb: tuple, sa, sb) -> tuple[str | None, float]:
    if qa == qb:
        return "identical", 1.0
    j = jaccard(sa, sb)
    if ma == mb:
        return "same_template", j
    if j >= NEAR_JACCARD and min(len(sa), len(sb)) >= MIN_SHINGLES:
        return "near_duplicate", j
    return None, j


def reference_overlap(records: list[dict], opts: CleanOptions) -> tuple[pl.DataFrame, dict[tuple, list[dict]]]:
    """(pairs table, twins per instance key (task, split, instance_index, subject)) of the primary records."""
    from datasketch import MinHashLSH

    instances = instance_texts(records)
    keys = list(instances)
    # one entry per distinct cleaned question
    by_text: dict[str, list[int]] = defaultdict(list)
    for i, k in enumerate(keys):
        by_text[join_words(clean_words(instances[k], opts))].append(i)
    texts = list(by_text)
    words = [t.encode("utf-8", "surrogatepass").split() for t in texts]
    ids, masked = masked_word_ids(words)
    plain_sets, masked_sets = shingle_sets(ids), shingle_sets(masked)
    masked_keys = [_number_runs(m) for m in masked]
    mh = minhashes(masked_sets)
    lsh = MinHashLSH(threshold=LSH_THRESHOLD, num_perm=mh[0].hashvalues.size if mh else 128)
    with lsh.insertion_session() as session:
        for t, m in enumerate(mh):
            session.insert(t, m)
    pairs: dict[tuple[int, int], tuple[str, float, float]] = {}
    for members in by_text.values():  # exact duplicates: no MinHash needed
        for x in members:
            for y in members:
                if x < y:
                    pairs[(x, y)] = ("identical", 1.0, 1.0)
    for t, m in enumerate(mh):
        for u in lsh.query(m):
            if u <= t:
                continue
            rel, j = _relation(texts[t], texts[u], masked_keys[t], masked_keys[u], plain_sets[t], plain_sets[u])
            if rel is None:
                continue
            mj = jaccard(masked_sets[t], masked_sets[u])
            for x in by_text[texts[t]]:
                for y in by_text[texts[u]]:
                    pairs[(min(x, y), max(x, y))] = (rel, round(j, 4), round(mj, 4))
    rows, twins = [], defaultdict(list)
    for (x, y), (rel, j, mj) in sorted(pairs.items()):
        a, b = keys[x], keys[y]
        rows.append(dict(task_a=a[0], split_a=a[1], instance_a=a[2], subject_a=a[3], task_b=b[0], split_b=b[1],
                         instance_b=b[2], subject_b=b[3], relation=rel, jaccard=j, masked_jaccard=mj))
        twins[a].append({"instance": instance_name(*b), "relation": rel})
        twins[b].append({"instance": instance_name(*a), "relation": rel})
    df = pl.DataFrame(rows, schema=OVERLAP_SCHEMA) if rows else pl.DataFrame(schema=OVERLAP_SCHEMA)
    return df, dict(twins)


def twins_column(records: list[dict], twins: dict[tuple, list[dict]]) -> list[str | None]:
    """The records' ``twins`` values: JSON list of {instance, relation}, None for an instance without twins."""
    out = []
    for r in records:
        t = twins.get((r["task"], r["split"], r["instance_index"], r["subject"]))
        out.append(json.dumps(sorted(t, key=lambda x: x["instance"])) if t else None)
    return out
