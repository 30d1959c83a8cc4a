"""Throughput and memory of the 8-gram contamination measurement.

Builds a train.jsonl of about --mb megabytes (GSM8K training rows repeated,
plus the first 50 GSM8K test items verbatim), measures it against every known
benchmark in --data (23.5k items with /work/shared/data), and prints rows,
MB/s, the exact/near counts and the peak resident memory.

    python benchmarks/evaluation_contamination.py --data ../shared/data --mb 200
"""

from __future__ import annotations

import argparse
import json
import resource
import tempfile
import time
from pathlib import Path

from contam_assets.evaluation.contamination import ItemSet, Measurement
from contam_assets.evaluation.items import default_specs, load_benchmark
from contam_assets.evaluation.rows import RowStats, iter_training_texts


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", type=Path, default=Path(__file__).resolve().parents[2] / "shared" / "data")
    ap.add_argument("--mb", type=float, default=100.0)
    args = ap.parse_args()

    t0 = time.perf_counter()
    benches = [load_benchmark(s) for s in default_specs(args.data)]
    m = Measurement([ItemSet(b.spec.name, b.items) for b in benches])
    t_index = time.perf_counter() - t0
    rss_index = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024

    train_rows = (args.data / "gsm8k_train.jsonl").read_text().splitlines()
    test_rows = (args.data / "gsm8k_test.jsonl").read_text().splitlines()[:50]
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "train.jsonl"
        with open(path, "w") as f:
            written = 0
            while written < args.mb * 1e6:
                for line in train_rows:
                    f.write(line + "\n")
                    written += len(line) + 1
            f.write("\n".join(test_rows) + "\n")
        size = path.stat().st_size
        stats = RowStats()
        t0 = time.perf_counter()
        m.consume(iter_training_texts(path, stats))
        dt = time.perf_counter() - t0
    res = m.result()
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps({
        "items": res["items"], "item_ngrams": int(len(m.uniq)), "index_s": round(t_index, 2),
        "train_mb": round(size / 1e6, 1), "rows": stats.rows, "scan_s": round(dt, 2),
        "mb_per_s": round(size / 1e6 / dt, 2), "exact": res["exact"], "near": res["near"],
        "peak_rss_mb_after_index": round(rss_index), "peak_rss_mb": round(rss),
    }, indent=2))


if __name__ == "__main__":
    main()
