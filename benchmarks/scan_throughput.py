"""Scan throughput beside the tokenizer floor and two peer decontamination filters, in one run.

Builds a deterministic pool (two plain .jsonl shards of real-looking text -- the
project's host text, Python's own documentation and standard-library source --
with real benchmark items planted into about 1 % of the documents), builds the
reference set and index for every task of the registry, then measures on the
same documents, single-threaded, in CPU seconds of this process:

  tokenizer        tiktoken cl100k ``encode_ordinary(" " + cleaned)`` per document, on
                   text cleaned beforehand: the floor.  Reading, JSON parsing and
                   cleaning are not in it.  Also reported: ``encode_ordinary_batch``
                   (batches of 256, one thread) and the scan's own tokenization step
                   (tokenize.encode_words with its word cache) on the same text.
  scan             ``contam_assets.rescan.shard.scan_shard`` on both shard files: read
                   lines, parse JSON, clean, tokenize, hash n-grams, sampled walk,
                   cluster expansion and scoring, match rows, the polars table.
                   Also once with an empty word cache (every word BPE-encoded once).
  prefilter        the same with ``DetectConfig(prefilter=True)``.
  plain paths      the faithful scan with ``CONTAM_COMPILED=off``: the word cache's dict, the binary search
                   of the index keys and the cleaning regex instead of the compiled steps (the scan as it
                   was before them; its rows must equal the faithful scan's).
  thorough         the same with the ``thorough`` preset (its own reference set and index;
                   its near-duplicate index is built before timing, once per process).
  datatrove        ``datatrove.pipeline.decont.NGramsDecontFilter`` (its defaults:
                   12-grams of spaCy words, label and overlap n-grams) on the same
                   texts, already parsed (JSON parsing not counted); index from the
                   same reference records (NGramsDecontIndexer.compute_hashes).
  janitor          lm-evaluation-harness ``Janitor.clean_python`` (13-grams of words;
                   the C++ helper is not in the wheel) on the same parsed texts;
                   contaminants: question + answer of every indexed record.

MB/s per core = raw JSONL megabytes (10**6 bytes of the lines) per CPU second of
that step, best of --repeat runs; the runs of all methods are interleaved, so a
busy machine slows them alike.  CPU time rather than wall time because the
machine may be shared; wall-time figures of the scan are in the JSON.  Also: index
build time for all registry tasks (reference set + index; the prefilter is built
on first use and timed apart), index bytes per indexed instance (NgramIndex
arrays, prefilter included), peak RSS (of a fresh worker process that loads the
saved index and scans: VmHWM from
/proc/self/status, falling back to ``resource.getrusage(...).ru_maxrss``; not tracemalloc),
and two shard partitions in two worker processes against one worker scanning
both (wall time from a common start barrier; loading the index not counted).

    python benchmarks/scan_throughput.py                      # ~8 MB pool, prints a table
    python benchmarks/scan_throughput.py --mb 16 --json out.json --markdown out.md

Peers are optional: ``pip install datatrove spacy lm-eval`` (datatrove's English
word tokenizer is spaCy's; ``pip install --no-deps lm-eval`` is enough for the
Janitor).  They are benchmark tools only, not project dependencies; missing ones
are skipped with a note.
"""

from __future__ import annotations

import argparse
import gc
import json
import multiprocessing as mp
import os
import platform
import re
import resource
import subprocess
import tempfile
import time
from pathlib import Path

import polars as pl
from throughput_pool import DatatrovePeer, JanitorPeer, build_pool, novel_pool  # noqa: E402

from contam_assets.detector.config import PRESETS, DetectConfig
from contam_assets.detector.index_build import build_index
from contam_assets.detector.matches import Reference
from contam_assets.detector.prefilter import ensure_prefilter
from contam_assets.detector.text import clean_text, clean_words
from contam_assets.detector.thorough import ensure_extras
from contam_assets.detector.tokenize import get_tokenizer
from contam_assets.rescan.shard import BATCH, scan_shard
from contam_assets.sources.reference import build_reference_set
from contam_assets.sources.registry import load_registry
from contam_assets.store import artifacts
from contam_assets.store.pool import read_shard

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_BENCHMARKS = ROOT.parent / "shared" / "data"
PEER_HINT = "pip install datatrove spacy lm-eval"


# -- measurements ----------------------------------------------------------------

def pool_documents(paths: list[Path]) -> list:
    docs = []
    for p in paths:
        docs.extend(d for d in read_shard(p, p.name) if not hasattr(d, "reason"))
    return docs


def measure_tokenizer(cleaned: list[str], batched: bool) -> float:
    """CPU seconds tiktoken takes for " " + cleaned text of every document (one thread)."""
    enc = get_tokenizer("cl100k")._enc
    t0 = time.process_time()
    if batched:  # the public batch API, batches of 256 (what the scan called before the word cache)
        for i in range(0, len(cleaned), BATCH):
            enc.encode_ordinary_batch([" " + t if t else "" for t in cleaned[i : i + BATCH]], num_threads=1)
    else:  # one call per document: tiktoken's fastest public path here
        for t in cleaned:
            if t:
                enc.encode_ordinary(" " + t)
    return time.process_time() - t0


def measure_word_cache(words: list[list[bytes]]) -> float:
    """CPU seconds of the scan's own tokenization step (tokenize.BPETokenizer.encode_words, word cache)."""
    tok = get_tokenizer("cl100k")
    t0 = time.process_time()
    for i in range(0, len(words), BATCH):
        tok.encode_words(words[i : i + BATCH])
    return time.process_time() - t0


def measure_scan(paths: list[Path], index, ref, cfg: DetectConfig) -> tuple[float, float, pl.DataFrame]:
    """(CPU seconds, wall seconds, matches) of scan_shard over every shard."""
    t0, w0 = time.process_time(), time.perf_counter()
    frames = [scan_shard(p, p.name, index, ref, cfg).matches for p in paths]
    return time.process_time() - t0, time.perf_counter() - w0, pl.concat(frames)


# -- worker processes (partitions, peak memory) ----------------------------------

def _worker(out_dir: str, digest: str, cfg_json: str, shards: list[str], barrier, queue) -> None:
    cfg = DetectConfig(**json.loads(cfg_json))
    index, records, _ = artifacts.load_index(Path(out_dir), digest)
    ref = Reference(records)
    get_tokenizer(cfg.tokenizer)
    barrier.wait()
    t0, c0 = time.perf_counter(), time.process_time()
    n = 0
    for s in shards:
        n += scan_shard(Path(s), Path(s).name, index, ref, cfg).matches.height
    queue.put((time.perf_counter() - t0, n, peak_rss_mb(), time.process_time() - c0))


def peak_rss_mb() -> float:
    """Peak resident set of this process in MB: VmHWM from /proc (Linux), else ru_maxrss.

    ru_maxrss survives execve on Linux, so a freshly spawned worker would report its
    parent's peak; VmHWM belongs to the process's own address space.
    """
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def run_workers(out_dir: Path, digest: str, cfg: DetectConfig, groups: list[list[str]]) -> tuple[float, list]:
    ctx = mp.get_context("spawn")
    barrier = ctx.Barrier(len(groups) + 1)
    queue = ctx.Queue()
    cfg_json = json.dumps({k: getattr(cfg, k) for k in cfg.__dataclass_fields__})
    procs = [ctx.Process(target=_worker, args=(str(out_dir), digest, cfg_json, g, barrier, queue)) for g in groups]
    for p in procs:
        p.start()
    barrier.wait()
    t0 = time.perf_counter()
    results = [queue.get() for _ in procs]
    wall = time.perf_counter() - t0
    for p in procs:
        p.join()
    return wall, results


# -- report ----------------------------------------------------------------------

def machine() -> dict:
    model = platform.processor()
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, check=True).stdout
        m = re.search(r"Model name:\s*(.+)", out)
        model = m.group(1).strip() if m else model
    except (OSError, subprocess.CalledProcessError):
        pass
    return {"cpu": model, "cores": os.cpu_count(), "python": platform.python_version(), "load_avg": os.getloadavg()}


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--benchmarks", type=Path, default=DEFAULT_BENCHMARKS, help="benchmark data folder")
    ap.add_argument("--tasks-dir", type=Path, default=ROOT / "data" / "tasks")
    ap.add_argument("--mb", type=float, default=8.0, help="pool size in MB (two shards)")
    ap.add_argument("--plant-rate", type=float, default=0.01)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--repeat", type=int, default=3, help="runs per method; the best is reported")
    ap.add_argument("--work", type=Path, default=None,
                    help="folder for the pools and index, kept afterwards (default: a temporary folder, removed)")
    ap.add_argument("--no-peers", action="store_true", help="skip datatrove and the Janitor")
    ap.add_argument("--no-workers", action="store_true", help="skip the two-process and peak-memory measurements")
    ap.add_argument("--novel-rate", type=float, default=0.05,
                    help="share of words replaced by never-seen random words in the vocabulary-stress pool")
    ap.add_argument("--partition-mb", type=float, default=40.0,
                    help="size of the separate two-shard pool for the one-vs-two-process measurement")
    ap.add_argument("--json", type=Path, default=None, help="write the figures as one JSON object")
    ap.add_argument("--markdown", type=Path, default=None, help="write the results table as markdown")
    args = ap.parse_args(argv)
    if args.work is not None:
        return run(args, args.work)
    with tempfile.TemporaryDirectory(prefix="scan_throughput_") as tmp:
        return run(args, Path(tmp))


def run(args: argparse.Namespace, work: Path) -> dict:
    work.mkdir(parents=True, exist_ok=True)
    cfg = DetectConfig()
    notes: list[str] = []
    tok = get_tokenizer(cfg.tokenizer)

    print(f"work folder: {work}")
    t0, c0 = time.perf_counter(), time.process_time()
    records, _ = build_reference_set(load_registry(args.tasks_dir), args.benchmarks, cfg)
    t_ref, c_ref = time.perf_counter() - t0, time.process_time() - c0
    t0, c0 = time.perf_counter(), time.process_time()
    index = build_index(records, cfg)
    t_index, c_index = time.perf_counter() - t0, time.process_time() - c0
    n_indexed = index.n_records
    bytes_plain = index.nbytes()
    t0 = time.perf_counter()
    pf = ensure_prefilter(index, records, cfg.replace(prefilter=True))
    t_pf = time.perf_counter() - t0
    bytes_with_pf = bytes_plain + pf.nbytes()
    digest = artifacts.reference_digest(records, cfg)
    artifacts.save_index(work / "out", digest, records, index)
    ref = Reference(records)
    print(f"reference set {records.height} records ({n_indexed} indexed) in {t_ref:.1f}s; index in {t_index:.1f}s "
          f"(+ prefilter {t_pf:.1f}s); {bytes_with_pf / n_indexed:.0f} bytes per indexed instance")

    # the thorough preset: its own reference set (answer suites, twins) and index, its near-duplicate
    # index built before any timing (it is built once per process, beside the index)
    t0 = time.perf_counter()
    cfg_t = PRESETS["thorough"]
    records_t, _ = build_reference_set(load_registry(args.tasks_dir), args.benchmarks, cfg_t)
    index_t = build_index(records_t, cfg_t)
    ref_t = Reference(records_t)
    t_thorough_index = time.perf_counter() - t0
    t0 = time.perf_counter()
    ensure_extras(index_t, records_t, cfg_t)
    t_thorough_extras = time.perf_counter() - t0
    print(f"thorough: reference set and index in {t_thorough_index:.1f}s, near-duplicate index in {t_thorough_extras:.1f}s")

    pool = work / "pool"
    truth = build_pool(pool, records, args.mb, args.seed, args.plant_rate)
    paths = sorted(pool.glob("*.jsonl"))
    docs = pool_documents(paths)
    texts = [d.text for d in docs]
    mb = sum(d.n_bytes for d in docs) / 1e6
    cleaned = [clean_text(t, cfg.clean_options) for t in texts]
    words = [clean_words(t, cfg.clean_options) for t in texts]
    n_words = sum(map(len, words))
    print(f"pool: {len(docs)} documents, {mb:.2f} MB in {len(paths)} shards, {len(truth)} planted, "
          f"{n_words} words ({len({w for ws in words for w in ws})} distinct)")

    peers = {}
    if not args.no_peers:
        try:
            peers["datatrove"] = DatatrovePeer(records, Path(tempfile.mkdtemp(dir=work)))
        except ImportError as exc:
            notes.append(f"datatrove skipped ({exc}); {PEER_HINT}")
        try:
            peers["janitor"] = JanitorPeer(records)
        except ImportError as exc:
            notes.append(f"lm-eval Janitor skipped ({exc}); {PEER_HINT}")
    else:
        notes.append("peers skipped (--no-peers)")

    # a first scan with an empty word cache (every word of the pool is BPE-encoded once)
    tok.cache.clear()
    l0, e0 = tok.cache.lookups, tok.cache.encoded
    cold, _, _ = measure_scan(paths, index, ref, cfg)
    lookups0, encoded0 = tok.cache.lookups - l0, tok.cache.encoded - e0

    best: dict[str, float] = {}
    wall: dict[str, float] = {}
    found: dict[str, set] = {}
    matches: dict[str, pl.DataFrame] = {}
    modes = {"scan": cfg, "prefilter": cfg.replace(prefilter=True)}
    for r in range(args.repeat):
        gc.collect()
        best["tokenizer"] = min(best.get("tokenizer", 1e9), measure_tokenizer(cleaned, batched=False))
        best["tokenizer_batch"] = min(best.get("tokenizer_batch", 1e9), measure_tokenizer(cleaned, batched=True))
        best["word_cache"] = min(best.get("word_cache", 1e9), measure_word_cache(words))
        for name, c in modes.items():
            secs, w, m = measure_scan(paths, index, ref, c)
            best[name], wall[name] = min(best.get(name, 1e9), secs), min(wall.get(name, 1e9), w)
            matches[name] = m
        os.environ["CONTAM_COMPILED"] = "off"
        try:
            secs, w, matches["plain"] = measure_scan(paths, index, ref, cfg)
        finally:
            del os.environ["CONTAM_COMPILED"]
        best["plain"], wall["plain"] = min(best.get("plain", 1e9), secs), min(wall.get("plain", 1e9), w)
        if not matches["plain"].equals(matches["scan"]):
            raise SystemExit("the plain paths gave other match rows than the compiled ones")
        secs, w, matches["thorough"] = measure_scan(paths, index_t, ref_t, cfg_t)
        best["thorough"], wall["thorough"] = min(best.get("thorough", 1e9), secs), min(wall.get("thorough", 1e9), w)
        for name, peer in peers.items():
            secs, flagged = peer.run(texts)
            best[name] = min(best.get(name, 1e9), secs)
            found[name] = flagged
        print(f"run {r + 1}/{args.repeat}: " + ", ".join(f"{k} {mb / v:.2f}" for k, v in best.items()) + " MB per CPU-second")

    # vocabulary stress: the same pool with a share of its words replaced by random never-seen words
    # (the host text repeats a small vocabulary, which flatters the word cache)
    novel = {}
    if args.novel_rate > 0:
        npool = work / "novel_pool"
        npaths = novel_pool(paths, npool, args.novel_rate, args.seed)
        ndocs = pool_documents(npaths)
        nmb = sum(d.n_bytes for d in ndocs) / 1e6
        ncleaned = [clean_text(d.text, cfg.clean_options) for d in ndocs]
        nt, ns = 1e9, 1e9
        for _ in range(args.repeat):
            nt = min(nt, measure_tokenizer(ncleaned, batched=False))
            ns = min(ns, measure_scan(npaths, index, ref, cfg)[0])
        novel = {"rate": args.novel_rate, "tokenizer_mb_s": round(nmb / nt, 3), "scan_mb_s": round(nmb / ns, 3),
                 "scan_over_tokenizer": round(nt / ns, 3)}

    # prefilter recall against the faithful scan: flagged documents, and stored candidates
    key = ["shard", "line"]
    flagged_docs = set(matches["scan"].filter(pl.col("flagged")).select(key).iter_rows())
    pf_flagged = set(matches["prefilter"].filter(pl.col("flagged")).select(key).iter_rows())
    prefilter_loss = len(flagged_docs - pf_flagged) / max(1, len(flagged_docs))
    cols = ["shard", "line", "record_id", "question_start", "score", "flagged"]
    stored = set(matches["scan"].select(cols).iter_rows())
    stored_pf = set(matches["prefilter"].select(cols).iter_rows())
    flag_rows_equal = matches["scan"].filter(pl.col("flagged")).select(cols).sort(cols).equals(
        matches["prefilter"].filter(pl.col("flagged")).select(cols).sort(cols))

    # planted recall: a planted document counts as found when the method flags it
    expect_flag = {"verbatim_qa", "instruct", "mc", "solution_escaped"}
    planted = {(t["shard"], t["line"]) for t in truth if t["kind"] in expect_flag}
    th_flagged = set(matches["thorough"].filter(pl.col("flagged")).select(key).iter_rows())  # as for the scan: held counts
    recall = {"scan": len(planted & flagged_docs) / max(1, len(planted)),
              "prefilter": len(planted & pf_flagged) / max(1, len(planted)),
              "thorough": len(planted & th_flagged) / max(1, len(planted))}
    for name, flagged in found.items():
        keys = {(docs[i].doc_id.split(":")[0], int(docs[i].doc_id.split(":")[1])) for i in flagged}
        recall[name] = len(planted & keys) / max(1, len(planted))
        found[name] = keys

    part = {}
    if not args.no_workers:
        # bigger shards than the pool above, so that starting a process (an empty word cache) weighs less
        big = work / "partition_pool"
        build_pool(big, records, args.partition_mb, args.seed + 1, args.plant_rate)
        big_paths = [str(p) for p in sorted(big.glob("*.jsonl"))]
        runs = []
        for _ in range(3):  # alternate, keep the best of each
            runs.append((run_workers(work / "out", digest, cfg, [big_paths]), run_workers(work / "out", digest, cfg, [[p] for p in big_paths])))
        one_wall, two_wall = min(r[0][0] for r in runs), min(r[1][0] for r in runs)
        part = {"mb": round(sum(Path(p).stat().st_size for p in big_paths) / 1e6, 2), "one_process_s": one_wall,
                "two_processes_s": two_wall, "speedup": one_wall / two_wall,
                # CPU seconds inside the workers: equal sums mean the two processes did not slow each other down
                "one_process_cpu_s": min(r[0][1][0][3] for r in runs),
                "two_processes_cpu_s": min(sum(x[3] for x in r[1][1]) for r in runs),
                "peak_rss_mb": max(x[2] for r in runs for side in r for x in side[1]),
                "load_avg_after": os.getloadavg()[0]}

    mbs = {k: mb / v for k, v in best.items()}
    r2 = lambda v: None if v is None else round(v, 3)  # noqa: E731
    result = {
        "machine": machine(),
        "pool_mb": round(mb, 3), "documents": len(docs), "words": n_words, "planted": len(truth), "repeat": args.repeat,
        "tokenizer_mb_s": r2(mbs["tokenizer"]),
        "scan_mb_s": r2(mbs["scan"]),
        "plain_paths_mb_s": r2(mbs["plain"]),
        "prefilter_mb_s": r2(mbs["prefilter"]),
        "thorough_mb_s": r2(mbs["thorough"]),
        "thorough_wall_mb_s": r2(mb / wall["thorough"]),
        "thorough_build_s": {"reference_and_index": round(t_thorough_index, 2), "near_duplicate_index": round(t_thorough_extras, 2)},
        "thorough_reasons": dict(sorted(matches["thorough"].group_by("reason").len().iter_rows())),
        "datatrove_mb_s": r2(mbs.get("datatrove")),
        "janitor_mb_s": r2(mbs.get("janitor")),
        "index_build_s": round(t_ref + t_index, 2),
        "index_bytes_per_instance": round(bytes_with_pf / n_indexed, 1),
        "peak_rss_mb": round(part["peak_rss_mb"], 1) if part else None,
        "prefilter_recall_loss": prefilter_loss,
        # more detail
        "tokenizer_batch_mb_s": r2(mbs["tokenizer_batch"]),
        "word_cache_tokenize_mb_s": r2(mbs["word_cache"]),
        "scan_cold_cache_mb_s": r2(mb / cold),
        "scan_wall_mb_s": r2(mb / wall["scan"]), "prefilter_wall_mb_s": r2(mb / wall["prefilter"]),
        "word_cache_first_scan": {"lookups": lookups0, "encoded": encoded0},
        "reference_build_s": round(t_ref, 2), "ngram_index_build_s": round(t_index, 2),
        "build_cpu_s": {"reference": round(c_ref, 2), "index": round(c_index, 2)},
        "prefilter_build_s": round(t_pf, 2),
        "index_bytes_per_instance_without_prefilter": round(bytes_plain / n_indexed, 1),
        "indexed_instances": n_indexed,
        "prefilter_flag_rows_identical": flag_rows_equal,
        "prefilter_stored_candidates": {"faithful": len(stored), "prefilter": len(stored_pf),
                                         "lost": len(stored - stored_pf), "extra": len(stored_pf - stored)},
        "novel_words": novel or None,
        "two_partitions_speedup": r2(part.get("speedup")) if part else None,
        "two_partitions": {k: round(v, 3) for k, v in part.items()} if part else None,
        "ratios": {
            "scan_over_tokenizer": r2(mbs["scan"] / mbs["tokenizer"]),
            "scan_over_tokenizer_batch": r2(mbs["scan"] / mbs["tokenizer_batch"]),
            "prefilter_over_scan": r2(mbs["prefilter"] / mbs["scan"]),
            "scan_over_plain_paths": r2(mbs["scan"] / mbs["plain"]),
            "thorough_over_scan": r2(mbs["thorough"] / mbs["scan"]),
            "scan_over_datatrove": r2(mbs["scan"] / mbs["datatrove"]) if "datatrove" in mbs else None,
            "scan_over_janitor": r2(mbs["scan"] / mbs["janitor"]) if "janitor" in mbs else None,
        },
        "flagged_documents": {"scan": len(flagged_docs), "prefilter": len(pf_flagged), "thorough": len(th_flagged),
                              **{k: len(v) for k, v in found.items()}},
        "planted_recall": {k: round(v, 4) for k, v in recall.items()},
        "notes": notes,
    }
    table = markdown(result)
    print(table)
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    if args.markdown:
        args.markdown.write_text(table + "\n")
    return result


def markdown(r: dict) -> str:
    def f(v, unit=""):
        return "n/a" if v is None else f"{v:.2f}{unit}"

    def ratio(v):
        return None if v is None else v / r["scan_mb_s"]

    rows = [
        ("tiktoken cl100k `encode_ordinary`, one call per document (floor)", "tokenizer", r["tokenizer_mb_s"]),
        ("tiktoken cl100k `encode_ordinary_batch`, 256 per call, 1 thread", None, r["tokenizer_batch_mb_s"]),
        ("contam-assets tokenization only (word cache)", None, r["word_cache_tokenize_mb_s"]),
        ("**contam-assets scan, faithful decon** (`scan_shard`)", "scan", r["scan_mb_s"]),
        ("contam-assets scan, first pass with an empty word cache", None, r["scan_cold_cache_mb_s"]),
        ("contam-assets scan, plain paths (`CONTAM_COMPILED=off`: no compiled step; same rows)", None, r["plain_paths_mb_s"]),
        ("contam-assets scan + prefilter", "prefilter", r["prefilter_mb_s"]),
        ("contam-assets scan, `thorough` preset", "thorough", r["thorough_mb_s"]),
        ("datatrove `NGramsDecontFilter` (12-gram words, spaCy)", "datatrove", r["datatrove_mb_s"]),
        ("lm-eval `Janitor` (13-gram words, Python mode)", "janitor", r["janitor_mb_s"]),
    ]
    m = r["machine"]
    out = [f"Pool: {r['pool_mb']} MB of JSONL, {r['documents']} documents, {r['planted']} planted items; "
           f"{m['cpu']}, {m['cores']} cores, Python {m['python']}; MB per CPU-second (= per core), best of {r['repeat']}.", "",
           "| method | MB/s per core | × faithful scan | planted items flagged |", "|---|---:|---:|---:|"]
    for name, k, v in rows:
        rec = r["planted_recall"].get(k) if k else None
        out.append(f"| {name} | {f(v)} | {f(ratio(v), '×')} | {'—' if rec is None else f'{rec:.0%}'} |")
    out.append("")
    q = r["ratios"]
    out.append(f"- faithful scan / tokenizer floor: {f(q['scan_over_tokenizer'])} (per-document calls), "
               f"{f(q['scan_over_tokenizer_batch'])} (batch API); prefilter / faithful: {f(q['prefilter_over_scan'])}; "
               f"faithful / plain paths: {f(q['scan_over_plain_paths'])}")
    out.append(f"- thorough / faithful: {f(q['thorough_over_scan'])} (target >= 0.5); thorough match rows by reason "
               f"{r['thorough_reasons']}; build {r['thorough_build_s']} s")
    out.append(f"- prefilter recall loss (flagged documents): {r['prefilter_recall_loss']}; flagged rows identical: "
               f"{r['prefilter_flag_rows_identical']}; stored candidates {r['prefilter_stored_candidates']}")
    out.append(f"- index build, all registry tasks: {r['index_build_s']} s (reference set {r['reference_build_s']} s + "
               f"n-gram index {r['ngram_index_build_s']} s; prefilter {r['prefilter_build_s']} s more); "
               f"{r['index_bytes_per_instance']:.0f} bytes per indexed instance with the prefilter "
               f"({r['index_bytes_per_instance_without_prefilter']:.0f} without; {r['indexed_instances']} instances)")
    if r["novel_words"]:
        v = r["novel_words"]
        out.append(f"- with {v['rate']:.0%} of the words replaced by never-seen random words: scan {v['scan_mb_s']:.2f} MB/s "
                   f"vs tokenizer floor {v['tokenizer_mb_s']:.2f} MB/s ({v['scan_over_tokenizer']:.2f}×)")
    if r["two_partitions"]:
        p = r["two_partitions"]
        out.append(f"- two shard partitions ({p['mb']} MB) in two processes: {p['two_processes_s']:.2f} s wall vs one process "
                   f"{p['one_process_s']:.2f} s = {p['speedup']:.2f}× (CPU seconds in the workers: {p['two_processes_cpu_s']:.2f} "
                   f"vs {p['one_process_cpu_s']:.2f}; load average {p['load_avg_after']:.1f}); peak RSS of a scan worker "
                   f"{r['peak_rss_mb']} MB (VmHWM)")
    for n in r["notes"]:
        out.append(f"- note: {n}")
    return "\n".join(out)


if __name__ == "__main__":
    main()
