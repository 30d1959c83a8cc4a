"""8-gram contamination: planted cases with known answers, real GSM8K data, streaming memory."""

from __future__ import annotations

import inspect
import json
import tracemalloc
import weakref

import pytest

from contam_assets.detector.ngrams import word_ngrams
from contam_assets.evaluation.contamination import NGRAM, ItemSet, Measurement, measure, words_of
from contam_assets.evaluation.items import BenchmarkSpec, default_specs, load_benchmark
from contam_assets.evaluation.rows import RowStats, iter_training_texts, row_text
from contam_assets.testing.experiments import gsm8k_rows, write_jsonl

# 16 distinct words: 9 eight-grams.
ITEM16 = "alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo lima mike november oscar papa"
W16 = ITEM16.split()


def run(items: list[str], rows: list[str], **batch) -> tuple[dict, Measurement]:
    m = Measurement([ItemSet("b", list(enumerate(items)))])
    m.consume(iter(rows), **batch)
    return m.result(), m


def test_word_definition():
    assert words_of("Janet’s ducks lay $16 eggs, <<16-3-4=9>>9!") == ["janet", "s", "ducks", "lay", "16", "eggs", "16", "3", "4", "9", "9"]
    assert words_of("  MiXeD\tCase\n\nwords ") == ["mixed", "case", "words"]


def test_exact_after_case_and_whitespace_normalisation():
    item = "Hello,  World! This is   item ONE of the planted set."
    res, m = run([item, item.replace(",", "")], ["hello, world!\nthis is item one of the planted set."])
    # the first is exact; the second differs by a comma (not exact) but has the same words -> share 1.0, near
    assert res["exact"] == 1 and res["near"] == 2
    assert list(m.exact) == [True, False]
    assert list(m.shares()) == [1.0, 1.0]


def test_near_at_exactly_half_and_below():
    # 11 leading words hold 8-grams 0..3: 4 of 9 -> below half; 12 words: 5 of 9 -> above.
    # For exactly half use a 15-word item (8 eight-grams): 11 words -> 4 of 8 = 50%.
    item15 = " ".join(W16[:15])
    res, m = run([item15], [" ".join(W16[:11])])
    assert m.found_counts().tolist() == [4] and m.ngram_counts.tolist() == [8]
    assert res["near"] == 1 and res["exact"] == 0 and res["share_mean"] == 0.5
    res, m = run([item15], [" ".join(W16[:10])])  # 3 of 8
    assert res["near"] == 0 and res["share_mean"] == 0.375
    assert res["flagged"] == []


def test_ngrams_do_not_span_training_rows():
    # The item's words are all present, but split over two rows: only 8-grams inside a row count.
    res, m = run([ITEM16], [" ".join(W16[:8]), " ".join(W16[8:])], batch_rows=100)
    assert m.found_counts().tolist() == [2]  # words 0-7 and 8-15 are one 8-gram each
    assert res["near"] == 0


def test_short_items_count_as_near_only_if_exact():
    items = ["What is 2+2?", "seven words only in this short item", "never seen"]
    rows = ["WHAT is   2+2?", "filler seven words only in this short item and more filler text"]
    res, m = run(items, rows)
    assert m.ngram_counts.tolist() == [0, 0, 0]
    assert m.exact.tolist() == [True, False, False]
    assert m.shares().tolist() == [1.0, 0.0, 0.0]
    assert res["near"] == 1 and res["exact"] == 1 and res["short_items"] == 3
    assert res["flagged"] == [{"benchmark": "b", "index": 0}]


def test_counts_rates_and_flagged_limit():
    items = [f"{ITEM16} number{i}" for i in range(30)]
    res, _ = run(items, [items[i] for i in range(0, 30, 2)])
    assert res["items"] == 30 and res["exact"] == 15 and res["exact_rate"] == 0.5
    # every item shares the first 9 eight-grams with the planted rows: 9 of 10 -> near
    assert res["near"] == 30 and res["near_rate"] == 1.0
    assert len(res["flagged"]) == 20 and res["flagged"][0] == {"benchmark": "b", "index": 0}
    assert res["share_mean"] == pytest.approx((15 * 1.0 + 15 * 0.9) / 30)


def test_flagged_indices_point_at_source_rows(tmp_path):
    # row 1 lacks `answer`: skipped, but row 2 keeps index 2
    path = write_jsonl(tmp_path / "b.jsonl", [{"question": "q0", "answer": "a0"}, {"question": "q1"}, "",
                                              {"question": ITEM16, "answer": "x"}])
    bench = load_benchmark(BenchmarkSpec("b", str(path), "gsm8k"))
    assert bench.items == [(0, "q0 a0"), (2, f"{ITEM16} x")] and bench.skipped == 1
    res = measure([ItemSet("b", bench.items)], iter([f"{ITEM16} x"]))
    assert res["benchmarks"]["b"]["flagged"] == [2]


def _reference_shares(items: list[str], rows: list[str]) -> list[float]:
    """Plain-Python definition with word tuples (no hashing), for cross-checking."""
    seen = set()
    for r in rows:
        seen.update(word_ngrams(words_of(r), NGRAM))
    out = []
    for t in items:
        grams = word_ngrams(words_of(t), NGRAM)
        out.append(sum(g in seen for g in grams) / len(grams) if grams else 0.0)
    return out


def test_real_gsm8k_test_items_verbatim_and_modified(tmp_path, shared_data):
    test = gsm8k_rows(shared_data)
    rows = []
    with open(shared_data / "gsm8k_train.jsonl", encoding="utf-8") as f:
        rows += [json.loads(line) for line in f]  # {"question", "answer"}: read as "{question} {answer}"
    rows += test[:30]  # verbatim
    rows += [{"text": f"  {r['question'].upper()}\n\n {r['answer']}\t"} for r in test[30:40]]  # case/space changes
    truncated = []
    for r in test[40:50]:  # the first 80% of the item's words: near, not exact
        w = words_of(f"{r['question']} {r['answer']}")
        truncated.append(" ".join(w[: int(len(w) * 0.8) + 1]))
    rows += [{"text": t} for t in truncated]
    for r in test[50:70]:  # every 4th word replaced: every 8-gram is broken
        w = f"{r['question']} {r['answer']}".split()
        rows.append({"text": " ".join("zzz" if i % 4 == 3 else x for i, x in enumerate(w))})
    train = write_jsonl(tmp_path / "train.jsonl", rows + ["{not json", json.dumps({"id": 3})])

    bench = load_benchmark(BenchmarkSpec("gsm8k-test", str(shared_data / "gsm8k_test.jsonl")))
    assert bench.format == "gsm8k" and len(bench.items) == 1319
    stats = RowStats()
    m = Measurement([ItemSet("gsm8k-test", bench.items)])
    m.consume(iter_training_texts(train, stats))
    res = m.result()
    assert stats.as_dict() == {"rows": 7473 + 70 + 2, "rows_used": 7473 + 70,
                               "rows_skipped": {"invalid_json": 1, "no_text": 1}}
    assert res["exact"] == 40
    assert m.exact.nonzero()[0].tolist() == list(range(40))
    near = m.near().nonzero()[0].tolist()
    assert near == list(range(50))
    assert res["near"] == 50 and res["near_rate"] == round(50 / 1319, 6)
    assert res["flagged"] == [{"benchmark": "gsm8k-test", "index": i} for i in range(20)]
    # the hashed computation equals the plain definition, item by item
    texts = [t for _, t in bench.items]
    plain_rows = [row_text(r) if isinstance(r, dict) else r for r in rows]
    ref = _reference_shares(texts, plain_rows)
    assert m.shares().tolist() == pytest.approx(ref, abs=1e-12)
    assert all(ref[i] < 0.5 for i in range(50, 70))


def test_real_gsm_hard_inputs_equal_to_gsm8k_questions(shared_data):
    # shared/data/SOURCES.md: 329 of the 1,319 GSM-Hard inputs equal a GSM8K test question.
    questions = [r["question"] for r in gsm8k_rows(shared_data)]
    bench = load_benchmark(BenchmarkSpec("gsm-hard", str(shared_data / "gsmhard_v2.jsonl"), "gsm-hard"))
    res = measure([ItemSet("gsm-hard", bench.items)], iter(questions))
    assert res["exact"] == 329 and res["items"] == 1319


def test_default_benchmarks_and_item_definitions(shared_data):
    specs = {s.name: s for s in default_specs(shared_data)}
    assert sorted(specs) == ["arc-challenge", "arc-easy", "gsm-hard", "gsm8k-ref", "gsm8k-test",
                             "humaneval", "mbpp", "mmlu"]
    assert specs["gsm8k-ref"].path.endswith("skywork_mock_gsm8k_eval_1419.jsonl")
    he = load_benchmark(specs["humaneval"])
    assert len(he.items) == 164 and he.item_text == "{prompt}{canonical_solution}"
    assert he.items[0][1].startswith("from typing import List") and "return False" in he.items[0][1]
    arc = load_benchmark(specs["arc-challenge"])
    assert len(arc.items) == 1172
    assert arc.items[0][1].endswith("Planetary days will become shorter.")
    mmlu = load_benchmark(specs["mmlu"])
    assert len(mmlu.items) == 14042 and mmlu.skipped == 0
    assert [s.name for s in default_specs(None)] == ["humaneval"]  # embedded default


def test_row_text_rules():
    assert row_text("plain") == "plain"
    assert row_text({"text": "t", "question": "q"}) == "t"
    assert row_text({"question": "q", "answer": "a", "id": "x"}) == "q a"
    assert row_text({"prompt": "p", "completion": "c"}) == "p c"
    assert row_text({"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]}) == "hi\nyo"
    assert row_text({"conversations": [{"from": "human", "value": "v"}]}) == "v"
    assert row_text({"body": "x"}, content_key="body") == "x"
    assert row_text({"id": 1}) is None and row_text([1, 2]) is None


def test_training_rows_are_streamed_not_held(tmp_path):
    """At most one batch of rows is alive at any time, however many rows stream through."""

    class Row(str):  # str subclass so rows can be weak-referenced
        pass

    alive: list[weakref.ref] = []
    max_alive = 0

    def rows():
        nonlocal max_alive
        for i in range(3000):
            r = Row(f"{ITEM16} row {i}" if i % 7 else f"unrelated text number {i}")
            alive.append(weakref.ref(r))
            max_alive = max(max_alive, sum(ref() is not None for ref in alive[-200:]))
            yield r
            del r

    m = Measurement([ItemSet("b", [(0, ITEM16)])])
    assert m.consume(rows(), batch_rows=16) == 3000
    assert max_alive <= 16 + 1
    assert m.result()["near"] == 1
    # the file reader is a generator: it yields before reading the whole file
    path = write_jsonl(tmp_path / "t.jsonl", [{"text": "a"}, {"text": "b"}])
    gen = iter_training_texts(path, RowStats())
    assert inspect.isgenerator(gen) and next(gen) == "a"


def test_memory_stays_bounded_on_a_large_file(tmp_path, shared_data):
    """Peak traced memory while streaming a 10 MB train.jsonl stays far below its size."""
    bench = load_benchmark(BenchmarkSpec("humaneval", str(shared_data / "HumanEval.jsonl.gz")))
    filler = " ".join(f"word{i % 997}" for i in range(2000))
    path = tmp_path / "train.jsonl"
    with open(path, "w") as f:
        for i in range(650):
            f.write(json.dumps({"text": f"{filler} {i}"}) + "\n")
        f.write(json.dumps({"text": bench.items[5][1]}) + "\n")
    size = path.stat().st_size
    assert size > 10_000_000
    m = Measurement([ItemSet("humaneval", bench.items)])
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        m.consume(iter_training_texts(path, RowStats()), batch_chars=100_000)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert m.result()["exact"] == 1
    assert peak < size / 5, f"peak {peak} bytes for a {size}-byte file"
