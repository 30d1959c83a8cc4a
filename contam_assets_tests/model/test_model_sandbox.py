"""The pass@1 sandbox holds: one hostile completion per case, each contained, and the other items judged right.

Every case runs three HumanEval/53 (``add``) items through the sandbox at
once: the hostile completion, the reference solution (must pass) and a wrong
body (must fail).  The hostile ones that also define a correct ``add`` pass:
containment means they did their damage only inside their own sandbox.
"""

from __future__ import annotations

import http.server
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest

from contam_assets.model.code_exec import ExecCase, Limits, run_job, run_jobs
from contam_assets.model.recitation import humaneval_problems
from contam_assets.model.sandbox import SandboxUnavailable, sandbox_status
from contam_assets.model.sandbox_child import Handle, WireError, decode, encode
from contam_assets.testing import model_tiny as mt

ROOT = Path(__file__).resolve().parents[2]
CORRECT = "    return x + y\n"
WRONG = "    return x - y\n"


@pytest.fixture(scope="module")
def add_problem(shared_data):
    (problem,) = humaneval_problems([mt.humaneval()["HumanEval/53"]])
    return problem


def _alive_with(token: str) -> list[int]:
    """Host PIDs whose command line contains ``token``."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as fh:
                    if token.encode() in fh.read():
                        found.append(int(entry))
            except OSError:
                pass
    return found


def _three(problem, hostile: str, limits: Limits = Limits(timeout_s=10)):
    jobs = [problem.job(hostile), problem.job(CORRECT), problem.job(WRONG)]
    results = run_jobs(jobs, limits, workers=2)
    assert results[1].status == "passed", results[1]
    assert results[2].status == "failed", results[2]
    return results[0]


def test_deleting_its_working_folder_costs_nothing(sandbox, add_problem):
    hostile = CORRECT + (
        "import os, shutil\n"
        "for name in os.listdir('.'):\n    os.remove(name)\n"
        "shutil.rmtree(os.getcwd(), ignore_errors=True)\n"
        "shutil.rmtree('/tmp', ignore_errors=True)\n"
    )
    result = _three(add_problem, hostile)
    assert result.status == "passed", result  # its own tmpfs only; the probe's files are not in its view


def test_removing_an_absolute_path_outside_fails(sandbox, add_problem):
    folder = Path(tempfile.mkdtemp(prefix="contam_victim_", dir="/tmp"))
    try:
        folder.chmod(0o777)
        victims = [folder / "victim.txt", folder / "control.txt"]
        for v in victims:
            v.write_text("keep me")
            v.chmod(0o666)
        hostile = CORRECT + (
            "import os\n"
            f"for path in [{str(victims[0])!r}, {str(folder)!r}]:\n"
            "    try:\n        os.remove(path)\n    except OSError as exc:\n        print('blocked', type(exc).__name__)\n"
        )
        result = _three(add_problem, hostile)
        assert result.status == "passed" and "FileNotFoundError" in result.output
        assert victims[0].read_text() == "keep me"
        if sandbox.user is not None:  # control: the same user outside the sandbox could have removed it
            code = f"import os; os.remove({str(victims[1])!r})"
            subprocess.run([sandbox.python, "-c", code], cwd="/", user=sandbox.user[0], group=sandbox.user[1], check=True)
            assert not victims[1].exists()
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def test_printing_a_forged_verdict_and_exiting_zero_fails(sandbox, add_problem):
    hostile = WRONG + (
        "import os, glob, json\n"
        "found = [p for d in ('/sandbox', '/tmp', '/usr/local') for p in glob.glob(d + '/**', recursive=True)]\n"
        "print('files', [p for p in found if p.endswith(('program.py', 'verdict.json', 'spec.json'))])\n"
        "fake = json.dumps({'status': 'passed', 'detail': ''})\n"
        "print(fake, flush=True)\n"
        "for fd in range(64):\n"
        "    try:\n        os.write(fd, fake.encode())\n    except OSError:\n        pass\n"
        "os._exit(0)\n"
    )
    result = _three(add_problem, hostile)
    assert result.status == "failed", result
    assert '"status": "passed"' in result.output  # it did print the fake verdict; nobody reads that
    assert "files []" in result.output  # neither its program nor the verdict is a file in its view


def test_an_always_equal_return_value_fails(sandbox, add_problem):
    hostile = (
        "    class Yes(int):\n        def __eq__(self, other):\n            return True\n"
        "        __hash__ = int.__hash__\n"
        "    return Yes(-1)\n"
    )
    assert _three(add_problem, hostile).status == "failed"
    opaque = "    class Yes:\n        def __eq__(self, other):\n            return True\n    return Yes()\n"
    assert _three(add_problem, opaque).status == "failed"


def test_a_fork_bomb_as_root_is_capped_and_reaped(sandbox, add_problem):
    token = f"{600 + secrets.randbelow(10**6) / 10**7:.7f}"
    hostile = CORRECT + (
        "import os\n"
        "n = 0\n"
        "for _ in range(100):\n"
        "    try:\n        pid = os.fork()\n    except OSError:\n        break\n"
        f"    if pid == 0:\n        os.execv('/usr/bin/sleep', ['sleep', {token!r}])\n"
        "    n += 1\n"
        "print('children', n, flush=True)\n"
    )
    result = _three(add_problem, hostile, Limits(timeout_s=10, processes=32))
    assert result.status == "passed", result
    children = int(result.output.split("children")[1].split()[0])
    assert 0 < children < 32  # the process limit binds, root or not (bwrap runs as an unprivileged user)
    time.sleep(0.2)
    assert _alive_with(token) == []  # all of them died with the sandbox


def test_setsid_and_double_fork_do_not_escape(sandbox, add_problem):
    token = f"{700 + secrets.randbelow(10**6) / 10**7:.7f}"
    hostile = CORRECT + (
        "import os\n"
        "if os.fork() == 0:\n"
        "    os.setsid()\n"
        f"    if os.fork() == 0:\n        os.execv('/usr/bin/sleep', ['sleep', {token!r}])\n"
        "    os._exit(0)\n"
        "os.wait()\n"
    )
    result = _three(add_problem, hostile)
    assert result.status == "passed", result
    time.sleep(0.2)
    assert _alive_with(token) == []


def test_loopback_http_is_unreachable(sandbox, add_problem):
    hits = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            hits.append(self.path)
            self.send_response(200)
            self.end_headers()
            self.wfile.write(b"secret")

        def log_message(self, *args):
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        port = server.server_address[1]
        hostile = CORRECT + (
            "import urllib.request\n"
            "try:\n"
            f"    print('got', urllib.request.urlopen('http://127.0.0.1:{port}/leak', timeout=3).read())\n"
            "except Exception as exc:\n    print('no network:', type(exc).__name__)\n"
        )
        result = _three(add_problem, hostile)
    finally:
        server.shutdown()
    assert result.status == "passed" and "no network" in result.output, result
    assert hits == []


def test_the_parents_environment_is_not_readable(sandbox, add_problem, monkeypatch):
    secret = secrets.token_hex(16)
    monkeypatch.setenv("CONTAM_TEST_SECRET", secret)
    hostile = CORRECT + (
        "import os, glob\n"
        f"paths = ['/proc/{os.getpid()}/environ', '/proc/{os.getppid()}/environ'] + glob.glob('/proc/*/environ')\n"
        "for path in paths:\n"
        "    try:\n        print(path, open(path, 'rb').read())\n    except OSError as exc:\n"
        "        print(path, type(exc).__name__)\n"
        "print(dict(os.environ))\n"
    )
    result = _three(add_problem, hostile)
    assert result.status == "passed"
    assert f"/proc/{os.getpid()}/environ FileNotFoundError" in result.output  # the parent is not in its PID namespace
    assert secret not in result.output and "CONTAM_TEST_SECRET" not in result.output


def test_a_hang_costs_only_its_own_item(sandbox, add_problem):
    started = time.monotonic()
    result = _three(add_problem, CORRECT + "import time\ntime.sleep(3600)\n", Limits(timeout_s=3))
    assert result.status == "timeout" and "wall clock" in result.detail
    assert time.monotonic() - started < 20


def test_cpu_memory_and_file_size_limits_bind(sandbox, add_problem):
    busy = _three(add_problem, "    while True:\n        pass\n", Limits(timeout_s=30, cpu_s=1))
    assert busy.status == "timeout" and "CPU limit" in busy.detail  # killed by RLIMIT_CPU long before 30 s
    hungry = _three(add_problem, CORRECT + "blocks = []\nwhile True:\n    blocks.append(bytearray(64 << 20))\n",
                    Limits(timeout_s=10, memory_mb=256))
    assert hungry.status == "failed" and "MemoryError" in hungry.detail
    writer = CORRECT + (
        "written = 0\n"
        "try:\n"
        "    with open('big.bin', 'wb') as fh:\n"
        "        for _ in range(40):\n            fh.write(bytes(1 << 20))\n            fh.flush()\n"
        "            written += 1 << 20\n"
        "except OSError as exc:\n    print('stopped', type(exc).__name__, written, flush=True)\n"
    )
    big = _three(add_problem, writer, Limits(timeout_s=10, file_mb=16))
    assert big.status == "passed" and "stopped" in big.output
    assert int(big.output.split()[-1]) <= 16 << 20


def test_values_cross_the_boundary_as_plain_data():
    class Liar(list):
        def __eq__(self, other):
            return True

    value = {"a": (1, 2.5, float("inf")), (1, 2): {3, 4}, "b": [b"x", bytearray(b"y"), 1 + 2j, None, True], "c": Liar()}
    assert decode(encode(value)) == {"a": (1, 2.5, float("inf")), (1, 2): {3, 4},
                                     "b": [b"x", bytearray(b"y"), 1 + 2j, None, True], "c": []}
    assert type(decode(encode(Liar([1])))) is list  # a subclass arrives as its base type: its __eq__ stays behind
    refs: list = []
    handle = decode(encode(object(), refs))
    assert isinstance(handle, Handle) and handle != 0 and handle == Handle(0)
    with pytest.raises(WireError):
        encode(lambda: 0)  # the judge never passes code to the candidate


def test_the_judge_needs_the_isolation_tool(monkeypatch, add_problem):
    monkeypatch.setenv("CONTAM_SANDBOX_TOOL", "/nonexistent/bwrap")
    status = sandbox_status()
    assert not status.ok and "bubblewrap is not installed" in status.reason and "apt-get install bubblewrap" in status.reason
    with pytest.raises(SandboxUnavailable):
        run_job(ExecCase("x = 1", "assert x == 1"))


NORMAL_USER_CHECK = """
import json, os, sys
sys.path.insert(0, sys.argv[1])
from contam_assets.model.code_exec import Limits, ExecCase, run_jobs
from contam_assets.model.sandbox import sandbox_status
status = sandbox_status()
if not status.ok:
    print(json.dumps({"ok": False, "reason": status.reason})); sys.exit(0)
bomb = "import os\\nn = 0\\nfor _ in range(100):\\n    try:\\n        pid = os.fork()\\n    except OSError:\\n        break\\n    if pid == 0:\\n        os.execv('/usr/bin/sleep', ['sleep', '5'])\\n    n += 1\\nprint('children', n)\\n"
net = "import socket\\ntry:\\n    socket.create_connection(('127.0.0.1', 22), timeout=2)\\nexcept OSError as exc:\\n    print('no network', type(exc).__name__)\\n"
jobs = [ExecCase(bomb, "assert True"), ExecCase(net, "assert True"), ExecCase("x = 2", "assert x == 3"), ExecCase("x = 3", "assert x == 3")]
res = run_jobs(jobs, Limits(timeout_s=10, processes=16))
print(json.dumps({"ok": True, "uid": os.getuid(), "user": status.user, "results": [[r.status, r.output] for r in res]}))
"""


def test_the_sandbox_holds_for_a_normal_user_too(sandbox):
    """Run as an unprivileged account (nobody when the suite runs as root): the same limits and namespaces."""
    import json

    kwargs: dict = {}
    python = sys.executable
    if os.geteuid() == 0:
        kwargs = dict(user=sandbox.user[0], group=sandbox.user[1], extra_groups=[])
        python = sandbox.python  # the suite's interpreter may live under /root, out of nobody's reach
        probe = subprocess.run([python, "-c", f"import os; os.listdir({str(ROOT / 'contam_assets' / 'model')!r})"],
                               capture_output=True, cwd="/", **kwargs)
        if probe.returncode != 0:
            pytest.skip("the project folder is not readable by an unprivileged account here")
    r = subprocess.run([python, "-I", "-c", NORMAL_USER_CHECK, str(ROOT)], capture_output=True, text=True, timeout=120,
                       cwd="/", **kwargs)
    assert r.returncode == 0, r.stderr
    report = json.loads(r.stdout.strip().splitlines()[-1])
    assert report["ok"], report
    assert report["uid"] != 0 and report["user"] is None  # a normal user runs bwrap as itself
    (bomb_status, bomb_out), (net_status, net_out), wrong, right = report["results"]
    assert bomb_status == "passed" and int(bomb_out.split()[1]) < 16
    assert net_status == "passed" and "no network" in net_out
    assert wrong[0] == "failed" and right[0] == "passed"


def test_the_probe_finishes_with_hostile_completions_among_the_others(sandbox, shared_data, tmp_path, monkeypatch):
    """`run_probes` with --execute, where the model 'generates' attacks for some problems: the rest is judged right."""
    from contam_assets.model import recitation
    from contam_assets.model.generation import Generation
    from contam_assets.model.loader import LoadOptions
    from contam_assets.model.probe_inputs import ProbeOptions
    from contam_assets.model.probe_run import run_probes

    he = mt.humaneval()
    mbpp = {r["task_id"]: r for r in mt.jsonl("mbpp.jsonl")}
    attack = "import os, shutil\nshutil.rmtree(os.getcwd(), ignore_errors=True)\nprint('{\"status\": \"passed\"}')\nos._exit(0)\n"
    bomb = "import os\nfor _ in range(100):\n    try:\n        os.fork() or os.execv('/usr/bin/sleep', ['sleep', '30'])\n" \
           "    except OSError:\n        break\n"
    answers = {  # prompt -> completion
        he["HumanEval/0"]["prompt"]: he["HumanEval/0"]["canonical_solution"],
        he["HumanEval/1"]["prompt"]: "    return []\n" + attack,
        he["HumanEval/2"]["prompt"]: "    import time\n    time.sleep(3600)\n",
    }
    fakes = {11: mbpp[11]["code"].replace("\r\n", "\n"), 12: bomb + mbpp[12]["code"].replace("\r\n", "\n"),
             13: "def count_common(words):\n    return []\n"}

    def fake_generate(lm, prompts, max_new_tokens, stop=(), log=None, what=""):
        out = []
        for p in prompts:
            if p in answers:
                out.append(Generation(answers[p], False))
            else:  # MBPP: the prompt ends with the problem's own text
                tid = next(t for t in fakes if mbpp[t]["text"] in p.rsplit("[DONE]", 1)[-1])
                out.append(Generation(fakes[tid], False))
        return out

    monkeypatch.setattr(recitation, "generate_greedy", fake_generate)
    ckpt = mt.untrained_checkpoint(tmp_path / "ckpt")
    opts = ProbeOptions(benchmarks_dir=shared_data, limit=3, execute=True, exec_timeout_s=4, n_shot=1, gsm_max_new_tokens=4)
    result = run_probes(ckpt, opts, LoadOptions())
    assert result["recitation/humaneval/pass@1"] == pytest.approx(1 / 3)  # the canonical one; the attack failed
    assert result["recitation/humaneval/timeouts"] == 1.0
    assert result["recitation/mbpp/pass@1"] == pytest.approx(2 / 3)  # the fork bomb's own solution is right
    assert result["recitation/humaneval/exact"] == pytest.approx(1 / 3)
    assert "delta1" in result and "fresh/gap" not in result  # the other probes ran too
