"""Arm mixes hold exactly what each arm says: base documents, removed documents 0 / 1 / k times."""

from collections import Counter

import pytest

from contam_assets.model.arms.mix import PoolDoc, build_arm_mix, readded_copies, split_pool


def count_words(texts):
    # stands in for the tokenizer: words + one end-of-text
    return [len(t.split()) + 1 for t in texts]


def make_pool():
    pool = []
    for source, n, words in (("web", 60, 30), ("math", 30, 20), ("code", 20, 40)):
        for i in range(n):
            pool.append(PoolDoc(f"{source}/part-0.jsonl", i, source, " ".join(f"{source}{i}w{j}" for j in range(words))))
    removed = {("math/part-0.jsonl", i) for i in range(0, 30, 3)} | {("code/part-0.jsonl", i) for i in range(0, 20, 4)} \
        | {("web/part-0.jsonl", 7)}
    return split_pool(pool, removed)


DECON, REMOVED = make_pool()
REMOVED_KEYS = {d.key for d in REMOVED}
BUDGET = 1500


def readded(mix):
    return Counter((r.shard, r.line) for r in mix.rows if r.readded)


def base_keys(mix):
    return [(r.shard, r.line) for r in mix.rows if not r.readded]


def test_split_pool_counts():
    assert len(REMOVED) == 10 + 5 + 1
    assert len(DECON) == 110 - 16
    assert not {d.key for d in DECON} & REMOVED_KEYS


def test_decontaminated_arm_never_holds_a_removed_document():
    mix = build_arm_mix("decontaminated", DECON, REMOVED, BUDGET, count_words, seed=0)
    assert mix.n_tokens >= BUDGET
    assert not readded(mix)
    assert not set(base_keys(mix)) & REMOVED_KEYS


def test_natural_arm_reads_the_whole_pool_without_readding():
    mix = build_arm_mix("natural", DECON, REMOVED, 20_000, count_words, seed=0)
    assert not readded(mix)
    keys = Counter(base_keys(mix))
    # 20,000 tokens is several passes over the 3,310-token pool: every document, removed ones included, is read
    assert REMOVED_KEYS <= set(keys)
    assert {d.key for d in DECON} <= set(keys)
    assert mix.epochs_read >= 5


def test_full_arm_readds_every_removed_document_exactly_once():
    mix = build_arm_mix("full", DECON, REMOVED, BUDGET, count_words, seed=0)
    counts = readded(mix)
    assert set(counts) == REMOVED_KEYS and set(counts.values()) == {1}
    assert not set(base_keys(mix)) & REMOVED_KEYS  # the base stays the decontaminated mix
    by_source = {s["source"]: s for s in mix.summary()}
    assert by_source["math"]["readded_docs"] == 10 and by_source["code"]["readded_docs"] == 5
    assert by_source["web"]["readded_copies"] == 1


def test_target_exposure_arm_readds_copies_by_source_exposure():
    target = {"math": 2.0, "code": 0.5, "web": 1.0}
    mix = build_arm_mix("target_exposure", DECON, REMOVED, BUDGET, count_words, seed=3, target_exposure=target)
    counts = readded(mix)
    for d in REMOVED:
        k = counts.get(d.key, 0)
        if d.source == "math":
            assert k == 2
        elif d.source == "web":
            assert k == 1
        else:
            assert k in (0, 1)
        assert mix.copies[d.key] == k  # the recorded copies are what the stream holds


def test_fractional_exposure_averages_out():
    docs = [PoolDoc("math/x.jsonl", i, "math", "a b c") for i in range(4000)]
    copies = readded_copies("target_exposure", docs, {"math": 1.25}, seed=11)
    assert set(copies.values()) == {1, 2}
    assert sum(copies.values()) / len(docs) == pytest.approx(1.25, abs=0.03)


def test_every_readded_copy_lies_inside_the_budget():
    mix = build_arm_mix("full", DECON, REMOVED, BUDGET, count_words, seed=5)
    total = 0
    last_readded_end = 0
    for r in mix.rows:
        total += r.n_tokens
        if r.readded:
            last_readded_end = total
    assert last_readded_end <= BUDGET
    assert not mix.rows[-1].readded


def test_same_seed_same_stream_and_full_shares_the_decontaminated_base_order():
    a = build_arm_mix("full", DECON, REMOVED, BUDGET, count_words, seed=1)
    b = build_arm_mix("full", list(reversed(DECON)), list(reversed(REMOVED)), BUDGET, count_words, seed=1)
    assert [r.to_json() for r in a.rows] == [r.to_json() for r in b.rows]
    c = build_arm_mix("full", DECON, REMOVED, BUDGET, count_words, seed=2)
    assert [r.to_json() for r in a.rows] != [r.to_json() for r in c.rows]
    decon = build_arm_mix("decontaminated", DECON, REMOVED, BUDGET, count_words, seed=1)
    full_base = base_keys(a)
    assert full_base == base_keys(decon)[: len(full_base)]


def test_source_weights_upsample_within_an_epoch():
    mix = build_arm_mix("decontaminated", DECON, REMOVED, 30_000, count_words, seed=0, weights={"math": 2.0, "code": 0.0})
    per_doc = Counter(base_keys(mix))
    sources = Counter(k[0].split("/")[0] for k in per_doc.elements())
    assert "code" not in sources
    math_reads = sources["math"] / 20  # 20 math documents are left after removal
    web_reads = sources["web"] / 59
    assert math_reads / web_reads == pytest.approx(2.0, rel=0.15)


def test_errors_are_clear():
    with pytest.raises(ValueError, match="raise the token budget"):
        build_arm_mix("full", DECON, REMOVED, 50, count_words)
    with pytest.raises(ValueError, match="unknown arm"):
        build_arm_mix("half", DECON, REMOVED, BUDGET, count_words)
    with pytest.raises(ValueError, match="also in the decontaminated mix"):
        build_arm_mix("full", DECON + REMOVED[:1], REMOVED, BUDGET, count_words)
    with pytest.raises(ValueError, match="target exposure"):
        build_arm_mix("target_exposure", DECON, REMOVED, BUDGET, count_words, target_exposure={"math": 1.0})
    with pytest.raises(ValueError, match="empty"):
        build_arm_mix("decontaminated", [], REMOVED, BUDGET, count_words)
