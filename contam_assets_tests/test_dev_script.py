"""`./dev test` as the README shows it: parallel workers unless told otherwise, and `--fast` leaving out exactly the
tests marked slow (conftest.py's SLOW list), the slow ones still collected without it."""

from __future__ import annotations

import subprocess

from contam_assets_tests.conftest import PROJECT_ROOT


def collect(*args: str) -> list[str]:
    r = subprocess.run(["./dev", "test", "--collect-only", "-q", "-p", "no:cacheprovider", *args], cwd=PROJECT_ROOT,
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    return [line for line in r.stdout.splitlines() if "::" in line]


def test_fast_leaves_out_the_slow_tests_and_only_those():
    every, fast, slow = collect("-n", "0"), collect("--fast"), collect("-m", "slow")
    slowest = "contam_assets_tests/test_scale_run_benchmark.py::test_scale_run_at_a_tiny_size_reports_every_figure"
    assert slowest in every and slowest in slow and slowest not in fast
    assert sorted(fast + slow) == sorted(every) and not set(fast) & set(slow)
    assert every[0].startswith("contam_assets_tests/test_scale_run_benchmark.py::")  # the longest files go first
