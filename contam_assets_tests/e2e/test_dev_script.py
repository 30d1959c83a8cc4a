"""`./dev test` as the README shows it: parallel workers unless told otherwise, and `--fast` leaving out exactly the
tests marked slow (conftest.py's SLOW list), the slow ones still collected without it."""

from __future__ import annotations

import json
import subprocess

from contam_assets_tests.conftest import PROJECT_ROOT


def collect(*runs: tuple[str, ...]) -> list[list[str]]:
    """The test ids each `./dev test --collect-only` prints, the collections run side by side (each imports every
    test module: seconds of one core apiece)."""
    procs = [subprocess.Popen(["./dev", "test", "--collect-only", "-q", "-p", "no:cacheprovider", *args], cwd=PROJECT_ROOT,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for args in runs]
    outs = []
    try:
        for p in procs:
            out, err = p.communicate(timeout=600)
            assert p.returncode == 0, out[-2000:] + err[-2000:]
            outs.append([line for line in out.splitlines() if "::" in line])
    finally:
        for p in procs:
            if p.poll() is None:  # one failed: the others are not left running
                p.kill()
                p.wait()
    return outs


def test_fast_leaves_out_the_slow_tests_and_only_those():
    every, fast, slow = collect(("-n", "0"), ("--fast",), ("-m", "slow"))
    slowest = "contam_assets_tests/e2e/test_scale_run_benchmark.py::test_scale_run_at_a_tiny_size_reports_every_figure"
    assert slowest in every and slowest in slow and slowest not in fast
    assert sorted(fast + slow) == sorted(every) and not set(fast) & set(slow)
    totals: dict[str, float] = {}  # the longest files go first: the file with the most recorded seconds
    for test, seconds in json.loads((PROJECT_ROOT / "contam_assets_tests" / "durations.json").read_text()).items():
        totals[test.split("::")[0]] = totals.get(test.split("::")[0], 0.0) + seconds
    assert every[0].startswith(max(totals, key=totals.get) + "::")
