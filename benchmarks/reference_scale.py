"""A registry of N reference instances over K tasks, built through `contam detect --evals-dir`, timed and measured.

``generate`` writes a decon-format reference folder (one JSONL file per task, decon's fields: eval_key,
eval_instance_index, split, question, answer, doc_id, fingerprint) whose texts are word chains fitted on the
real benchmark text of ``--data`` (a bigram Markov chain over the words of GSM8K, ARC, MMLU and MBPP), about
560 bytes of text an instance, every instance with its own numbers; and a small pool of chain text with a
few instances planted.  ``run`` builds the reference set and index with `contam detect --evals-dir` (the
product's own path) and samples the peak memory of the whole process tree as summed PSS (shared pages
counted once), the wall time and the stage seconds of the run's summary, and the peak and wall time of each phase
its progress lines name (``phases``: reading the files, the decon filters, the index build, scan, report and mix;
"filter" runs until the index build's first line, so it holds writing the records too).

    python benchmarks/reference_scale.py --instances 600000 --tasks 226 --work /tmp/contam-refscale --json ref.json

(`--instances` takes a comma-separated list: one run per size; `--pool-mb` (2), `--workers` (1), `--seed` (17);
`--generate-only` writes the folders and stops; `--reruns N` runs the same command again N times on the same output;
`--grow N` then adds a task of N instances and, after it, runs the registry without it and its first task, on the same
output, the index grown each time; `--grow-check` builds each from scratch too and compares the index files.)
`contam_assets_tests/sources/test_reference_scale_benchmark.py` runs it at 3,000 instances, once plain and once
with `--reruns 1 --grow 400 --grow-check`.
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
from proc_tree import TreeMemory, TreeSampler, load  # noqa: E402

DATA = ROOT.parent / "shared" / "data"
WORD = re.compile(r"\S+")
NUMBER = re.compile(r"^\d[\d,.]*$")
FORMAT = 4  # bump when the generated folders change


# -- the chain ------------------------------------------------------------------------

def _corpus(data: Path) -> list[str]:
    """Texts of the real benchmarks in ``data`` (questions, answers, choices, problems, code)."""
    texts: list[str] = []
    for name, keys in (("gsm8k_train.jsonl", ("question", "answer")), ("arc_easy_llmfoundry.jsonl", ("query",)),
                       ("arc_challenge_llmfoundry.jsonl", ("query",)), ("mbpp.jsonl", ("text", "code"))):
        path = data / name
        if path.exists():
            for line in path.open(encoding="utf-8"):
                row = json.loads(line)
                texts += [str(row[k]) for k in keys if row.get(k)]
                texts += [str(c) for c in row.get("choices") or []]
    for path in sorted((data / "mmlu_test").glob("*.csv")):
        with path.open(encoding="utf-8", newline="") as fh:
            texts += [" ".join(row[:5]) for row in csv.reader(fh)]
    if not texts:
        raise SystemExit(f"no benchmark text under {data}: pass --data")
    return texts


class Chain:
    """A bigram chain over words: successors of every word as one flat array (numpy), numbers as one token."""

    def __init__(self, data: Path):
        vocab: dict[str, int] = {"<s>": 0, "<n>": 1}
        pairs: list[tuple[int, int]] = []
        for text in _corpus(data):
            prev = 0
            for w in WORD.findall(text):
                cur = 1 if NUMBER.match(w) else vocab.setdefault(w, len(vocab))
                pairs.append((prev, cur))
                prev = cur
            pairs.append((prev, 0))
        p = np.array(pairs, dtype=np.int64)
        p = p[np.lexsort((p[:, 1], p[:, 0]))]
        self.words = np.array(list(vocab), dtype=object)
        self.succ = p[:, 1].copy()
        self.start = np.searchsorted(p[:, 0], np.arange(len(vocab)))
        self.count = np.searchsorted(p[:, 0], np.arange(len(vocab)), side="right") - self.start

    def texts(self, rng: np.random.Generator, n: int, words: int) -> list[str]:
        """``n`` texts of ``words`` words each; every number drawn anew."""
        state = np.zeros(n, dtype=np.int64)
        out = np.empty((n, words), dtype=np.int64)
        for j in range(words):
            c = self.count[state]
            nxt = self.succ[self.start[state] + (rng.random(n) * np.maximum(c, 1)).astype(np.int64)]
            nxt[c == 0] = 0
            nxt = np.where(nxt == 0, self.succ[self.start[0] + (rng.random(n) * self.count[0]).astype(np.int64)], nxt)
            out[:, j] = state = nxt
        nums = rng.integers(0, 100000, size=out.shape)
        table = self.words[out]
        is_num = out == 1
        table[is_num] = nums[is_num].astype(str)
        return [" ".join(row) for row in table]


# -- the folders ----------------------------------------------------------------------

def generate(work: Path, instances: int, tasks: int, seed: int, data: Path, pool_mb: float) -> tuple[Path, Path]:
    """The reference folder and the pool for ``instances`` over ``tasks`` (kept when already written)."""
    ref = work / f"refs-v{FORMAT}-{instances}-{tasks}-{seed}"
    pool = work / f"pool-v{FORMAT}-{pool_mb:g}-{instances}-{tasks}-{seed}"
    if (ref / ".done").exists() and (pool / ".done").exists():
        return ref, pool
    shutil.rmtree(ref, ignore_errors=True)
    shutil.rmtree(pool, ignore_errors=True)
    ref.mkdir(parents=True)
    pool.mkdir(parents=True)
    chain = Chain(data)
    rng = np.random.default_rng(seed)
    sizes = np.full(tasks, instances // tasks)
    sizes[: instances % tasks] += 1
    planted: list[str] = []
    doc_id = 0
    for t, size in enumerate(sizes.tolist()):
        name = f"task{t:03d}"
        with (ref / f"{name}.jsonl").open("w", encoding="utf-8") as fh:
            fh.write(f"# synthetic reference set {name}: bigram chains fitted on real benchmark text\n")
            for a in range(0, size, 20000):
                n = min(20000, size - a)
                qs, ans = chain.texts(rng, n, 51), chain.texts(rng, n, 41)
                split = "test" if t % 3 else "train"
                lines = []
                for i in range(n):
                    idx = a + i
                    q = f"{qs[i]} ({name} item {idx})"
                    fp = hashlib.sha256(f"{name}/{idx}".encode()).hexdigest()[:16]
                    lines.append(json.dumps({"eval_key": name, "eval_instance_index": idx, "split": split, "question": q,
                                             "answer": ans[i], "doc_id": doc_id + idx, "fingerprint": fp}))
                    if idx % max(1, size // 2) == 1 and len(planted) < 200:
                        planted.append(f"{q} {ans[i]}")
                fh.write("\n".join(lines) + "\n")
        doc_id += size
    docs, target, shard = 0, int(pool_mb * 1e6), 0
    written = 0
    while written < target:
        texts = chain.texts(rng, 400, 450)
        for k, p in enumerate(planted[shard * 10:(shard + 1) * 10]):
            texts[k * 37 % len(texts)] = f"{texts[k * 37 % len(texts)][:300]} {p} {texts[k][:200]}"
        body = "".join(json.dumps({"id": f"d{docs + i}", "text": t}) + "\n" for i, t in enumerate(texts))
        (pool / f"shard-{shard:03d}.jsonl").write_text(body, encoding="utf-8")
        written += len(body.encode())
        docs += len(texts)
        shard += 1
    (ref / ".done").write_text(json.dumps({"instances": instances, "tasks": tasks, "planted": len(planted)}))
    (pool / ".done").write_text(json.dumps({"documents": docs, "planted": min(len(planted), shard * 10)}))
    return ref, pool


def changed_registry(work: Path, ref: Path, add: int, seed: int, data: Path) -> tuple[Path, Path]:
    """Two folders beside ``ref`` (links to its files): one with a task of ``add`` instances more (named to sort
    in the middle of the others: the records after it move), one without ``ref``'s first task."""
    files = sorted(ref.glob("*.jsonl"))
    name = f"{files[len(files) // 2].stem}-added"
    plus, minus = work / f"{ref.name}+{name}-{add}", work / f"{ref.name}-{files[0].stem}"
    for folder, keep in ((plus, files), (minus, files[1:])):
        if not (folder / ".done").exists():
            shutil.rmtree(folder, ignore_errors=True)
            folder.mkdir(parents=True)
            for f in keep:
                (folder / f.name).symlink_to(f.resolve())
            if folder == plus:
                chain, rng = Chain(data), np.random.default_rng(seed + 1)
                qs, ans = chain.texts(rng, add, 51), chain.texts(rng, add, 41)
                with (folder / f"{name}.jsonl").open("w", encoding="utf-8") as fh:
                    for i in range(add):
                        fh.write(json.dumps({"eval_key": name, "eval_instance_index": i, "split": "test",
                                             "question": f"{qs[i]} ({name} item {i})", "answer": ans[i], "doc_id": i,
                                             "fingerprint": hashlib.sha256(f"{name}/{i}".encode()).hexdigest()[:16]}) + "\n")
            (folder / ".done").write_text("{}")
    return plus, minus


def _index_meta(home: Path) -> dict:
    """The last ngram_index materialization's metadata (how the index came: kept, reused, grown or built; seconds)."""
    import dagster as dg

    with dg.DagsterInstance.from_config(str(home)) as instance:
        ev = instance.get_latest_materialization_event(dg.AssetKey("ngram_index"))
        meta = {k: v.value for k, v in ev.asset_materialization.metadata.items()}
    return {k: meta.get(k) for k in ("how", "build_seconds", "records_indexed", "digest")}


def _files_digest(out: Path) -> str:
    """sha256 over the current index folder's files (names and bytes)."""
    digest = json.loads((out / "index" / "current.json").read_text())["digest"]
    h = hashlib.sha256()
    for p in sorted((out / "index" / digest / "index").iterdir()):
        h.update(p.name.encode())
        with p.open("rb") as fh:
            while block := fh.read(1 << 24):
                h.update(block)
    return h.hexdigest()[:16]


# -- the run --------------------------------------------------------------------------

def run(work: Path, ref: Path, pool: Path, workers: int, name: str, fresh: bool = True) -> dict:
    """`contam detect --evals-dir <ref> --pool <pool>` from scratch (``fresh``; else again on the run's own output
    folder and Dagster home), measured."""
    out = work / name
    home = out / ".dagster_home"
    if fresh or not home.is_dir():
        shutil.rmtree(out, ignore_errors=True)
        home.mkdir(parents=True)
        (home / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CONTAM_", "DAGSTER_"))}
    env.update(PYTHONPATH=str(ROOT) + os.pathsep + env.get("PYTHONPATH", ""), DAGSTER_HOME=str(home),
               CONTAM_SCAN_WORKERS=str(workers), WANDB_MODE="offline", HF_HUB_OFFLINE="1",
               TOKENIZERS_PARALLELISM="false", PYTHONUNBUFFERED="1")
    cmd = [sys.executable, "-m", "contam_assets.cli", "detect", "--evals-dir", str(ref), "--pool", str(pool),
           "--out", str(out)]
    log = work / f"{name}{'' if fresh else '-again'}.log"
    load_start = load()  # the machine's load (1, 5, 15 minutes) at the start and the end: other work shares it
    t0 = time.perf_counter()
    with log.open("w", encoding="utf-8") as fh:
        proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, cwd=ROOT, text=True,
                                errors="replace")
        pss, rss = PhaseMemory(proc.pid, every=0.5), TreeSampler(proc.pid)
        pss.start()
        rss.start()
        for out_line in proc.stdout:  # the run's progress lines name its phase
            fh.write(out_line)
            pss.phase = _phase(out_line, pss.phase)
        rc = proc.wait()
        pss.stop.set()
        rss.stop.set()
        pss.join()
    wall = time.perf_counter() - t0
    text = log.read_text(errors="replace")
    if rc != 0:
        raise SystemExit(f"{name}: exit {rc}; see {log}:\n{text[-2000:]}")
    line = next((x for x in text.splitlines() if x.startswith("seconds ")), "")
    words = line.split()[1:]
    stages = {words[i]: float(words[i + 1]) for i in range(0, len(words) - 1, 2)}
    index = out / "index"
    digest = json.loads((index / "current.json").read_text())["digest"]
    folder_bytes = sum(p.stat().st_size for p in (index / digest).rglob("*") if p.is_file())
    return {"wall_s": round(wall, 2), "cpu_s": round(sum(rss.cpu.values()), 1), "stages_s": stages, "peak_pss_gb": round(pss.pss / 2**30, 3),
            "phases": {k: {"peak_pss_gb": round(v[0] / 2**30, 3), "wall_s": round(v[2] - v[1], 1), "processes_gb": v[3]}
                       for k, v in pss.phases.items()},
            "peak_rss_gb_largest": round(max(rss.hwm.values(), default=0) / 2**30, 3),
            "index_folder_mb": round(folder_bytes / 1e6, 1), "removed": _removed(out), "out": str(out),
            "load": [load_start, load()]}


# the phase a progress line of `contam detect` starts (reference_set's reading and filters, ngram_index's build)
_PHASES = (("decon filters", "filter"), ("instances read", "read"), ("reference set: index", "index"), ("scan", "scan"),
           ("removals and report", "report and mix"))


def _phase(line: str, current: str) -> str:
    text = line.strip()
    for mark, phase in _PHASES:
        if mark in text and (mark != "scan" or text.startswith("scan")):
            return phase
    return current


class PhaseMemory(TreeMemory):
    """``TreeMemory`` with the peak summed PSS and the span of wall time of each phase (``phase``, set by the
    reader of the run's output): ``phases``, phase -> [peak bytes, first seen, last seen, the PSS of each process at
    that peak (`_split`)]."""

    def __init__(self, root: int, every: float = 0.5):
        super().__init__(root, every)
        self.phase, self.phases = "start", {}

    def observe(self, total, tree, parents, table):
        now = time.perf_counter()
        seen = self.phases.setdefault(self.phase, [0, now, now, {}])
        if total > seen[0]:
            seen[0], seen[3] = total, _split(self.root, tree, parents, table)
        seen[2] = now


def _split(root: int, tree: set[int], parents: dict[int, int], table: dict) -> dict[str, list[float]]:
    """The PSS (GB) of each process of the tree by its place: ``driver`` (the command's own process: Dagster's steps,
    the scan with one worker), ``children`` (the forkserver, Dagster's helpers) and ``workers`` (processes forked by
    a child: the scan and mix workers), each list largest first."""
    out: dict[str, list[float]] = {"driver": [], "children": [], "workers": []}
    for p in tree & table.keys():
        place = "driver" if p == root else "children" if parents.get(p) == root else "workers"
        out[place].append(round(table[p][3] / 2**30, 3))
    return {k: sorted(v, reverse=True) for k, v in out.items()}


def _removed(out: Path) -> int:
    import duckdb

    with duckdb.connect(str(out / "contam.duckdb"), read_only=True) as con:
        return int(con.execute("select count(*) from removals").fetchone()[0])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--instances", default="600000", help="comma-separated instance counts (one run each)")
    ap.add_argument("--tasks", type=int, default=226)
    ap.add_argument("--work", type=Path, default=Path("/tmp/contam-refscale"))
    ap.add_argument("--data", type=Path, default=DATA)
    ap.add_argument("--pool-mb", type=float, default=2.0)
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--seed", type=int, default=17)
    ap.add_argument("--generate-only", action="store_true")
    ap.add_argument("--reruns", type=int, default=0, help="runs of the same command again on the same output, unchanged")
    ap.add_argument("--grow", type=int, default=0, help="instances of a task added (then it and the first task removed)")
    ap.add_argument("--grow-check", action="store_true", help="build each changed registry from scratch too")
    ap.add_argument("--json", type=Path)
    a = ap.parse_args(argv)
    results = []
    for n in [int(x) for x in a.instances.split(",")]:
        t0 = time.perf_counter()
        ref, pool = generate(a.work, n, a.tasks, a.seed, a.data, a.pool_mb)
        gen = round(time.perf_counter() - t0, 1)
        row = {"instances": n, "tasks": a.tasks, "generate_s": gen, "ref_mb": round(sum(
            p.stat().st_size for p in ref.glob("*.jsonl")) / 1e6, 1), "planted": json.loads((pool / ".done").read_text())["planted"]}
        if not a.generate_only:
            row |= run(a.work, ref, pool, a.workers, f"detect-{n}")
            for i in range(a.reruns):  # the same command again, nothing changed: what a rerun still does
                row[f"rerun{i + 1}"] = run(a.work, ref, pool, a.workers, f"detect-{n}", fresh=False)
                row[f"rerun{i + 1}"]["index"] = _index_meta(a.work / f"detect-{n}" / ".dagster_home")
            if a.grow:  # a task added, then it and the first task removed, on the same output: the index grown each time
                plus, minus = changed_registry(a.work, ref, a.grow, a.seed, a.data)
                for key, folder in (("add_task", plus), ("remove_task", minus)):
                    row[key] = run(a.work, folder, pool, a.workers, f"detect-{n}", fresh=False)
                    row[key]["index"] = _index_meta(a.work / f"detect-{n}" / ".dagster_home")
                    row[key]["index_files"] = _files_digest(a.work / f"detect-{n}")
                    if a.grow_check:  # the same registry from scratch: the same index files
                        full = run(a.work, folder, pool, a.workers, f"detect-{n}-{key}-fresh")
                        row[key]["fresh_index_files"] = _files_digest(Path(full["out"]))
                        row[key]["fresh_wall_s"] = full["wall_s"]
        print(json.dumps(row), flush=True)
        results.append(row)
    if a.json:
        a.json.write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
