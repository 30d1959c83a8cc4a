"""Across languages: pool documents holding a translated reference item, found by ``contam detect --crosslingual``
(not a test).

    python benchmarks/crosslingual_pool.py [--benchmarks ../shared/data] [--seed 0] [--items 250] [--clean 1000]
                                           [--foreign 300] [--manuals 0] [--manuals-dir /usr/share/man]
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
- a Spanish and French pool with nothing to find, no English around it, in two shards: ``foreign_items``, the
  translated items left out of the reference set, one to three of one language per document (the benchmarks' own
  style: problems beside their template siblings in GSM8K train, paragraphs of the reference's articles); and
  ``foreign_text``, ``--foreign`` (300) documents of their sentences recombined across items, every number drawn
  again and every capitalised word inside a sentence replaced by a made-up name (foreign text with numbers and names
  that is no item).  None to be held (the 2 % of the left-out items).
- ``manuals_<language>``: foreign text of another kind with nothing to find, the machine's manual pages translated
  by people (German, French, Spanish, Italian, Portuguese, Dutch, Polish; ``--manuals`` of each, 0 for all; each
  rendered by ``man -l``): prose, numbers, names and identifiers, no benchmark item.  Left out, with one line, on a
  machine without them.  None to be held.

The pool is scanned twice, ``--preset default`` with and without ``--crosslingual``; cost is each shard's bytes over
its seconds (shard_stats: a shard is one worker's, so per core), and the stage's share the difference (which holds
its one-time costs: the index over the reference set and the encoder's load).  Then, in this process, the stage alone: the
index's build, the encoder's load, and the English and foreign pools searched with both done, in CPU seconds (per core
whatever the machine's load); each foreign shard first as met (the reference units and pieces it meets for the first
time are read then), then with them known (their vectors, looks and static rows are made once per worker process: a
pool of gigabytes pays that once; the fastest of three untimed passes), with the CPU split between its steps
(``SPLIT``, from one more pass with timers around them), the windows per MB that reach each (formed, given the first
look past the sum look, given the encoder) and the encoder's pieces.  Each pass starts without the encoder's window
cache: only the shard's own repeats are read from it.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import re
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

PROJECT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(PROJECT))

import duckdb  # noqa: E402

from contam_assets.quality.hosts import Hosts  # noqa: E402

GSM_SPEC = '''name = "gsm8k"\nkind = "qa"\nlanguage = "en"\n[fields]\nquestion = "question"\nanswer = "answer"
[[splits]]\nname = "train"\nfile = "{data}/gsm8k_train.jsonl"\n[[splits]]\nname = "test"\nfile = "gsm8k_test.jsonl"\n'''
XQUAD_SPEC = '''name = "xquad_en"\nkind = "qa"\nlanguage = "en"\n[fields]\nquestion = "question"\nanswer = "answer"
passage = "context"\n[[splits]]\nname = "test"\nfile = "xquad_en.jsonl"\n'''


_DIGITS = re.compile(r"\d+")
_SENTENCE = re.compile(r"[^.!?\n]+[.!?]+")
_INNER_NAME = re.compile(r"(?<=[^\s.!?¿¡«\"(]) +[A-ZÀ-Þ][\w'-]+")


def foreign_docs(data: Path, truth: dict, seed: int, mixed: int) -> dict[str, list[dict]]:
    """The two foreign shards: ``foreign_items``, the translated items left out of the reference set, one to three of
    one language per document; ``foreign_text``, ``mixed`` documents of their sentences recombined, every number drawn
    again and every capitalised word inside a sentence a made-up name."""
    rng = random.Random(seed + 1)
    texts: dict[str, list[str]] = {"es": [], "fr": []}
    for lang in ("es", "fr"):
        lines = open(data / "crosslingual" / f"mgsm_{lang}.tsv", encoding="utf-8").read().splitlines()
        texts[lang] += [lines[i].split("\t")[0] for name, i, inside, _ in truth.values()
                        if name == f"mgsm_{lang}" and not inside]
    xq = json.load(open(data / "crosslingual" / "xquad.es.json", encoding="utf-8"))
    paras = [p["context"].lstrip("\ufeff") for a in xq["data"] for p in a["paragraphs"]]
    texts["es"] += [paras[i] for name, i, inside, _ in truth.values() if name == "xquad_es" and not inside]
    docs = []
    for lang, items in texts.items():
        items = items[:]
        rng.shuffle(items)
        while items:
            k = rng.randint(1, 3)
            docs.append(("items", "\n\n".join(items[:k])))
            items = items[k:]
    sentences = {lang: [s.strip() for t in items for s in _SENTENCE.findall(t) if len(s.split()) >= 4]
                 for lang, items in texts.items()}

    def redraw(m: re.Match) -> str:
        n = len(m.group())
        return str(rng.randint(10 ** (n - 1) if n > 1 else 0, 10 ** n - 1))

    def made_up(_: re.Match) -> str:
        return " " + "".join(rng.choice("bdfgklmnprstvz") + rng.choice("aeiou") for _ in range(3)).capitalize()

    for k in range(mixed if all(sentences.values()) else 0):
        lang = "es" if k % 3 else "fr"
        body = "\n\n".join(" ".join(rng.choice(sentences[lang]) for _ in range(rng.randint(2, 6)))
                            for _ in range(rng.randint(1, 4)))
        docs.append(("text", _INNER_NAME.sub(made_up, _DIGITS.sub(redraw, body))))
    rng.shuffle(docs)
    return {f"foreign_{kind}": [{"id": f"{kind}-{k}", "text": t} for k, (kd, t) in enumerate(docs) if kd == kind]
            for kind in ("items", "text")}


POOLS = ("english", "multilingual", "foreign_items", "foreign_text")
MANUAL_LANGUAGES = ("de", "fr", "es", "it", "pt", "nl", "pl")


def manual_docs(folder: Path, per_language: int, skipped: dict[str, int] | None = None) -> dict[str, list[dict]]:
    """A natural foreign pool with nothing to find: the machine's manual pages translated by people (``man -l``
    renders each; ``per_language`` of each language, 0 for all), a shard ``manuals_<language>`` a language.  Empty
    where the machine has none or no ``man`` to render them; ``skipped`` counts, by language, the pages that render
    to under 200 characters (or not at all)."""
    if shutil.which("man") is None or shutil.which("col") is None:
        return {}

    def render(page: Path) -> str:
        env = {**os.environ, "MANWIDTH": "100", "MAN_KEEP_FORMATTING": "0", "LC_ALL": "C.UTF-8"}
        shown = subprocess.run(["man", "-l", "-E", "UTF-8", str(page)], capture_output=True, env=env, timeout=60).stdout
        return subprocess.run(["col", "-b"], input=shown, capture_output=True, timeout=60).stdout.decode("utf-8", "replace")

    out = {}
    for lang in MANUAL_LANGUAGES:
        pages = sorted(p for p in (folder / lang).glob("man*/*") if p.is_file() and not p.is_symlink())
        pages = pages[:per_language] if per_language else pages
        with ThreadPoolExecutor(4) as pool:
            texts = list(pool.map(render, pages))
        docs = [{"id": f"{lang}/{p.name}", "text": t} for p, t in zip(pages, texts) if len(t.strip()) >= 200]
        if skipped is not None and len(docs) < len(pages):
            skipped[lang] = len(pages) - len(docs)
        if docs:
            out[f"manuals_{lang}"] = docs
    return out


def jsonl(path: Path, rows: list[dict]) -> None:
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))


def build(root: Path, data: Path, seed: int, items: int = 250, clean: int = 1000, foreign: int = 300,
          manuals: dict[str, list[dict]] | None = None) -> dict:
    tasks, bench = root / "tasks", root / "bench"
    for p in (tasks, bench, *(root / "pool" / name for name in POOLS)):
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
    for name, docs in {**foreign_docs(data, truth, seed, foreign), **(manuals or {})}.items():
        (root / "pool" / name).mkdir(parents=True, exist_ok=True)
        jsonl(root / "pool" / name / "part-0.jsonl", docs)
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


def stage_alone(ix, texts: list[str], split: bool = True) -> dict:
    """The stage over ``texts`` in this process: CPU seconds, their split (``split``: from timers around each step,
    whose own cost the CPU seconds then hold) and what each gate passed on."""
    from contam_assets.paraphrase import crosslingual

    enc, spent, stack = crosslingual.encoder(), dict.fromkeys(SPLIT, 0.0), []

    def timed(name, f):  # CPU seconds of f less those of the timed calls inside it
        def call(*args, **kwargs):
            c = time.process_time()
            stack.append(0.0)
            try:
                return f(*args, **kwargs)
            finally:
                d, inner = time.process_time() - c, stack.pop()
                spent[name] += d - inner
                if stack:
                    stack[-1] += d
        return call

    before, units, pieces = dict(ix.stats), len(ix._vec), dict(enc.counts)
    enc._windows.clear()  # the pool's own repeats only: a pass does not read the windows of the pass before
    plain = {"blocks": crosslingual.blocks, "embed": crosslingual.embed, "embed_windows": crosslingual.embed_windows,
             "anchor_places": crosslingual.anchor_places, "sum_looks": crosslingual.sum_looks}
    if not split:
        c0 = time.process_time()
        held = sum(map(bool, ix.search_many(texts)))
        return _figures(ix, enc, texts, time.process_time() - c0, held, None, before, units, pieces)
    crosslingual.blocks, crosslingual.embed = timed("language", plain["blocks"]), timed("encoder", plain["embed"])
    crosslingual.embed_windows = timed("encoder", plain["embed_windows"])
    crosslingual.anchor_places = timed("anchors", plain["anchor_places"])
    crosslingual.sum_looks = timed("looks", plain["sum_looks"])
    ix.candidates = timed("anchors", ix.candidates)
    enc.tokens = timed("tokens", enc.tokens)
    for name in ("sums", "sum_look", "first_look"):
        setattr(enc, name, timed("looks", getattr(enc, name)))
    try:
        c0 = time.process_time()
        held = sum(map(bool, ix.search_many(texts)))
        cpu = time.process_time() - c0
    finally:
        for name, f in plain.items():
            setattr(crosslingual, name, f)
        for name in ("candidates",):
            del ix.__dict__[name]
        for name in ("tokens", "sums", "sum_look", "first_look"):
            del enc.__dict__[name]
    spent["windows and verifier"] = cpu - sum(spent.values())
    return _figures(ix, enc, texts, cpu, held, spent, before, units, pieces)


def _figures(ix, enc, texts: list[str], cpu: float, held: int, spent: dict | None, before: dict, units: int,
             pieces: dict) -> dict:
    stats = {k: v - before.get(k, 0) for k, v in ix.stats.items()}
    mb = sum(len(t.encode()) for t in texts) / 1e6
    return {"documents": len(texts), "cpu_seconds": round(cpu, 3),
            **({"encoder_share": round(spent["encoder"] / max(cpu, 1e-6), 3),
                "cpu_seconds_per_mb": {k: round(v / max(mb, 1e-9), 2) for k, v in spent.items()}} if spent else {}),
            "documents_held": held, "blocks": stats.get("blocks", 0), "gated_blocks": stats.get("gated_blocks", 0),
            "first_look_windows": stats.get("first_look_windows", 0), "first_look_pairs": stats.get("first_look_pairs", 0),
            "sum_look_windows": stats.get("sum_look_windows", 0), "sum_look_pairs": stats.get("sum_look_pairs", 0),
            "windows": stats.get("windows", 0), "window_chars": stats.get("window_chars", 0),
            "windows_per_mb": {k: round(stats.get(k, 0) / max(mb, 1e-9)) for k in ("first_look_windows", "sum_look_windows", "windows")},
            "units_embedded": len(ix._vec) - units,
            # the encoder's pieces: of the windows it gives vectors of, and those its passes read in full (the windows'
            # covering passes and the windows passed whole; each window's edges are computed apart besides)
            **{f"encoder_{k}": v - pieces[k] for k, v in enc.counts.items()}}


# the stage's CPU split: the language gate (blocks), the anchors and candidates, reading text into pieces, the sum and
# first looks (static rows summed, the head), the encoder (its pieces read in "tokens"), the rest (sentences, windows
# and their key test, covers, the verifier's similarities)
SPLIT = ("language", "anchors", "tokens", "looks", "encoder")
WARM_PASSES = 3


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--benchmarks", default=str(PROJECT.parent / "shared" / "data"))
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--items", type=int, default=250, help="MGSM problems per language and XQuAD paragraphs (the first)")
    ap.add_argument("--clean", type=int, default=1000, help="clean English documents")
    ap.add_argument("--foreign", type=int, default=300, help="recombined foreign documents (beside the left-out items)")
    ap.add_argument("--manuals", type=int, default=0, help="translated manual pages per language (0: all the machine has)")
    ap.add_argument("--manuals-dir", default="/usr/share/man", help="the manual pages' folder (a folder per language)")
    ap.add_argument("--out", default="/tmp/crosslingual_pool.json")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        skipped: dict[str, int] = {}
        manuals = manual_docs(Path(args.manuals_dir), args.manuals, skipped)
        truth = build(root, Path(args.benchmarks).resolve(), args.seed, args.items, args.clean, args.foreign, manuals)
        result = {"machine": f"{platform.machine()} {os.cpu_count()} cores", "date": time.strftime("%Y-%m-%d"),
                  "load": [round(x, 1) for x in os.getloadavg()], "seed": args.seed, "items": args.items,
                  "clean": args.clean, "foreign": args.foreign, "manuals": sorted(manuals), "manual_pages_skipped": skipped, "sets": {},
                  "cost": {}}
        if not manuals:
            print(f"no translated manual pages under {args.manuals_dir} (or no man to render them): "
                  "the natural foreign pool is left out", file=sys.stderr)
        dbs = detect(root, False), detect(root, True)
        for pool in (*POOLS, *manuals):
            plain, cross = scan_rate(dbs[0], pool), scan_rate(dbs[1], pool)
            result["cost"][pool] = {"mb": round(plain[0] / 1e6, 3), "default_mb_per_s": round(plain[0] / plain[1] / 1e6, 2),
                                    "crosslingual_mb_per_s": round(cross[0] / cross[1] / 1e6, 3),
                                    "stage_mb_per_s": round(cross[0] / max(cross[1] - plain[1], 1e-6) / 1e6, 3),
                                    "stage_over_default": round((cross[1] - plain[1]) / plain[1], 1)}
            con = duckdb.connect(str(dbs[1]), read_only=True)
            rows = con.execute("select doc_id, coalesce(eval_passage, ''), eval_question, needs_review, flagged "
                               "from matches where reason = 'translation' and shard like ?", [f"{pool}/%"]).fetchall()
            result["cost"][pool]["removed"] = con.execute("select count(*) from removals where shard like ?",
                                                          [f"{pool}/%"]).fetchone()[0]
            con.close()
            assert all(r[3] and r[4] for r in rows), "a translation row that is not held for review"
            if pool != "multilingual":
                result[f"{pool}_documents_held"] = len({r[0] for r in rows})
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
        t0 = time.perf_counter()
        encoder().embed(["warm"])  # loaded once per worker process, on its first gated block
        result["cost"]["encoder_load_seconds"] = round(time.perf_counter() - t0, 2)
        # the foreign pools' passes with units and pieces met: the fastest of WARM_PASSES without timers (the least
        # slowed by the machine's other load)
        for pool, passes in (("english", 1), ("foreign_text", 1 + WARM_PASSES), ("foreign_items", 1 + WARM_PASSES),
                             *((name, 1 + WARM_PASSES) for name in manuals)):
            texts = [json.loads(line)["text"] for line in open(root / "pool" / pool / "part-0.jsonl", encoding="utf-8")]
            mb = sum(len(t.encode()) for t in texts) / 1e6
            cost = result["cost"][pool]
            cost["stage_search"] = first = stage_alone(ix, texts)  # units and pieces met for the first time
            cost["stage_search_mb_per_s"] = round(mb / max(first["cpu_seconds"], 1e-6), 3)
            if passes > 1:  # the fastest untimed pass; the split from one more pass, timed
                warm = min((stage_alone(ix, texts, split=False) for _ in range(passes - 1)), key=lambda x: x["cpu_seconds"])
                timed = stage_alone(ix, texts)
                warm.update(split_cpu_seconds=timed["cpu_seconds"], encoder_share=timed["encoder_share"],
                            cpu_seconds_per_mb=timed["cpu_seconds_per_mb"])
                cost["stage_search_warm"], cost["stage_search_warm_mb_per_s"] = warm, round(mb / max(warm["cpu_seconds"], 1e-6), 3)
    Path(args.out).write_text(json.dumps(result, indent=1))
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
