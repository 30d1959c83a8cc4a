"""Across languages: pool documents holding a translated reference item, found by ``contam detect --crosslingual``
(not a test).

    python benchmarks/crosslingual_pool.py [--benchmarks ../shared/data] [--seed 0] [--items 250] [--clean 1000]
                                           [--out /tmp/crosslingual_pool.json]

Reference set: GSM8K (train and test, less half of the first 250 test problems, drawn with ``--seed``) and XQuAD's
English questions with their paragraphs (less half of the paragraphs).  One pool of two shards:

- ``multilingual``: one document per MGSM problem (es, fr) and per Spanish XQuAD paragraph (the first ``--items`` of
  each: 250 is all of MGSM, 240 all of XQuAD; the items left out are drawn over all of them), each between English
  host paragraphs (quality/hosts.py).  Those whose English item is in the reference set must be held with reason
  ``translation`` for that item (the target: 80 % per language); the others, translations of items left out of the
  reference set, must not (2 %).  The verifier's thresholds (crosslingual.THRESHOLDS) were fitted on the even
  items: the odd ones are shown apart.
- ``english``: ``--clean`` (1,000) clean English host documents (web text, docs, code), none to be held.

The pool is scanned twice, ``--preset default`` with and without ``--crosslingual``; cost is each shard's bytes over
its seconds (shard_stats: a shard is one worker's, so per core), and the stage's share the difference (which holds
its one-time costs: the index over the reference set and the encoder's load).  Then, in this process, the stage alone: the
index's build, the encoder's load, and the English pool searched with both done.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

PROJECT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(PROJECT))

import duckdb  # noqa: E402

from contam_assets.quality.hosts import Hosts  # noqa: E402

GSM_SPEC = '''name = "gsm8k"\nkind = "qa"\nlanguage = "en"\n[fields]\nquestion = "question"\nanswer = "answer"
[[splits]]\nname = "train"\nfile = "{data}/gsm8k_train.jsonl"\n[[splits]]\nname = "test"\nfile = "gsm8k_test.jsonl"\n'''
XQUAD_SPEC = '''name = "xquad_en"\nkind = "qa"\nlanguage = "en"\n[fields]\nquestion = "question"\nanswer = "answer"
passage = "context"\n[[splits]]\nname = "test"\nfile = "xquad_en.jsonl"\n'''


def jsonl(path: Path, rows: list[dict]) -> None:
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))


def build(root: Path, data: Path, seed: int, items: int = 250, clean: int = 1000) -> dict:
    tasks, bench = root / "tasks", root / "bench"
    for p in (tasks, bench, root / "pool" / "multilingual", root / "pool" / "english"):
        p.mkdir(parents=True, exist_ok=True)
    rng = random.Random(seed)
    gsm = [json.loads(line) for line in open(data / "gsm8k_test.jsonl")]
    left_out = set(rng.sample(range(250), 125))
    xq = {lang: json.load(open(data / "crosslingual" / f"xquad.{lang}.json", encoding="utf-8")) for lang in ("en", "es")}
    paras = {lang: [p for a in d["data"] for p in a["paragraphs"]] for lang, d in xq.items()}
    x_left_out = set(rng.sample(range(len(paras["en"])), len(paras["en"]) // 2))
    (tasks / "gsm8k.toml").write_text(GSM_SPEC.format(data=data))
    jsonl(bench / "gsm8k_test.jsonl", [g for i, g in enumerate(gsm) if i not in left_out])
    (tasks / "xquad_en.toml").write_text(XQUAD_SPEC)
    jsonl(bench / "xquad_en.jsonl", [{"question": q["question"], "answer": q["answers"][0]["text"],
                                      "context": p["context"].lstrip("\ufeff")}
                                     for i, p in enumerate(paras["en"]) if i not in x_left_out for q in p["qas"]])
    hosts = Hosts(seed)
    docs, truth = [], {}
    for lang in ("es", "fr"):
        lines = open(data / "crosslingual" / f"mgsm_{lang}.tsv", encoding="utf-8").read().splitlines()
        for i, line in enumerate(lines[:items]):
            doc_id = f"mgsm_{lang}-{i}"
            docs.append({"id": doc_id, "text": hosts.wrap(line.split("\t")[0], "web")[0]})
            truth[doc_id] = (f"mgsm_{lang}", i, i not in left_out, gsm[i]["question"].strip())
    for i, p in enumerate(paras["es"][:items]):
        doc_id = f"xquad_es-{i}"
        docs.append({"id": doc_id, "text": hosts.wrap(p["context"].lstrip("\ufeff"), "web")[0]})
        truth[doc_id] = ("xquad_es", i, i not in x_left_out, paras["en"][i]["context"].lstrip("\ufeff").strip())
    rng.shuffle(docs)
    jsonl(root / "pool" / "multilingual" / "part-0.jsonl", docs)
    jsonl(root / "pool" / "english" / "part-0.jsonl", [{"id": f"c{k}", "text": hosts.clean_document()[1]} for k in range(clean)])
    return truth


def detect(root: Path, crosslingual: bool) -> Path:
    out = root / f"out_{int(crosslingual)}"
    cmd = [sys.executable, "-m", "contam_assets.cli", "detect", "--pool", root / "pool", "--out", out, "--benchmarks",
           root / "bench", "--tasks-dir", root / "tasks", "--preset", "default"] + (["--crosslingual"] if crosslingual else [])
    r = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "DAGSTER_HOME": str(root / "home")})
    if r.returncode != 0:
        sys.exit(f"contam detect failed ({r.returncode}): {r.stderr.strip().splitlines()[-3:]}")
    return out / "contam.duckdb"


def scan_rate(db: Path, pool: str) -> tuple[float, float]:
    con = duckdb.connect(str(db), read_only=True)
    b, s = con.execute("select sum(bytes), sum(seconds) from shard_stats where shard like ?", [f"{pool}/%"]).fetchone()
    con.close()
    return b, s


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--benchmarks", default=str(PROJECT.parent / "shared" / "data"))
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--items", type=int, default=250, help="MGSM problems per language and XQuAD paragraphs (the first)")
    ap.add_argument("--clean", type=int, default=1000, help="clean English documents")
    ap.add_argument("--out", default="/tmp/crosslingual_pool.json")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        truth = build(root, Path(args.benchmarks).resolve(), args.seed, args.items, args.clean)
        result = {"machine": f"{platform.machine()} {os.cpu_count()} cores", "date": time.strftime("%Y-%m-%d"),
                  "seed": args.seed, "items": args.items, "clean": args.clean, "sets": {}, "cost": {}}
        dbs = detect(root, False), detect(root, True)
        for pool in ("english", "multilingual"):
            plain, cross = scan_rate(dbs[0], pool), scan_rate(dbs[1], pool)
            result["cost"][pool] = {"mb": round(plain[0] / 1e6, 3), "default_mb_per_s": round(plain[0] / plain[1] / 1e6, 2),
                                    "crosslingual_mb_per_s": round(cross[0] / cross[1] / 1e6, 3),
                                    "stage_mb_per_s": round(cross[0] / max(cross[1] - plain[1], 1e-6) / 1e6, 3)}
            con = duckdb.connect(str(dbs[1]), read_only=True)
            rows = con.execute("select doc_id, coalesce(eval_passage, ''), eval_question, needs_review, flagged "
                               "from matches where reason = 'translation' and shard like ?", [f"{pool}/%"]).fetchall()
            result["cost"][pool]["removed"] = con.execute("select count(*) from removals where shard like ?",
                                                          [f"{pool}/%"]).fetchone()[0]
            con.close()
            assert all(r[3] and r[4] for r in rows), "a translation row that is not held for review"
            if pool == "english":
                result["english_documents_held"] = len({r[0] for r in rows})
                continue
            held: dict[str, set] = {}
            for doc_id, passage, question, _, _ in rows:
                held.setdefault(doc_id, set()).update({passage.strip(), (question or "").strip()})
            sets: dict[str, dict] = {}
            for doc_id, (name, i, inside, source) in truth.items():
                s = sets.setdefault(name, {k: [0, 0] for k in ("in_even", "in_odd", "out_even", "out_odd")})
                ok = source in held.get(doc_id, set()) if inside else doc_id in held
                cell = s[("in_" if inside else "out_") + ("odd" if i % 2 else "even")]
                cell[0] += ok
                cell[1] += 1
            for name, s in sets.items():
                share = lambda *ks: round(sum(s[k][0] for k in ks) / max(1, sum(s[k][1] for k in ks)), 4)  # noqa: E731
                result["sets"][name] = {"reference_documents": s["in_even"][1] + s["in_odd"][1],
                                        "held": share("in_even", "in_odd"), "held_odd": share("in_odd"),
                                        "non_reference_documents": s["out_even"][1] + s["out_odd"][1],
                                        "non_reference_held": share("out_even", "out_odd"),
                                        "non_reference_held_odd": share("out_odd")}
        # the stage alone, in this process: its index over the run's reference set, then the English pool searched
        from contam_assets.detector.config import PRESETS
        from contam_assets.paraphrase.crosslingual import CrosslingualIndex, encoder
        from contam_assets.sources.reference import build_reference_set
        from contam_assets.sources.registry import load_registry

        records, _ = build_reference_set(load_registry(root / "tasks"), root / "bench", PRESETS["default"])
        t0 = time.perf_counter()
        ix = CrosslingualIndex(records)
        result["cost"]["index_seconds"] = round(time.perf_counter() - t0, 2)
        result["cost"]["units"] = len(ix.texts)
        texts = [json.loads(line)["text"] for line in open(root / "pool" / "english" / "part-0.jsonl", encoding="utf-8")]
        t0 = time.perf_counter()
        encoder().encode(["warm"])  # loaded once per worker process, on its first gated block
        result["cost"]["encoder_load_seconds"] = round(time.perf_counter() - t0, 2)
        t0 = time.perf_counter()
        assert not any(ix.search(t) for t in texts)
        result["cost"]["english"]["stage_search_mb_per_s"] = round(
            sum(len(t.encode()) for t in texts) / (time.perf_counter() - t0) / 1e6, 2)
    Path(args.out).write_text(json.dumps(result, indent=1))
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
