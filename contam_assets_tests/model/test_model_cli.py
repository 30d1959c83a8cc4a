"""`contam probe` writes probe.json; user errors exit 2 with a clear message."""

import json

from contam_assets.cli import main
from contam_assets.testing import model_tiny as mt

REQUIRED = (
    "gsm8k-train-ppl", "gsm8k-test-ppl", "gsm8k-ref-ppl", "delta1", "delta2",
    "bpb/gsm8k-train", "bpb/gsm8k-test", "bpb/gsm8k-ref", "bpb/humaneval", "bpb/mbpp", "llpc/gsm8k-test",
    "mink/auc", "minkpp/auc", "recitation/humaneval/exact", "recitation/humaneval/similar",
    "recitation/mbpp/exact", "fresh/gsm8k-acc", "fresh/fresh-acc", "fresh/gap",
)


def test_probe_writes_probe_json(tmp_path, shared_data, capsys, sandbox):
    ckpt = mt.untrained_checkpoint(tmp_path / "exp" / "checkpoints" / "step-000010")
    out = tmp_path / "out"
    rc = main([
        "probe", "--checkpoint", str(ckpt), "--benchmarks", str(shared_data), "--out", str(out), "--limit", "2",
        "--fresh", str(shared_data / "gsmhard_v2.jsonl"), "--n-shot", "1", "--max-new-tokens", "8", "--execute",
    ])
    assert rc == 0
    result = json.loads((out / "probe.json").read_text())
    for key in REQUIRED:
        assert isinstance(result.get(key), float), key
    assert result["n/gsm8k-test"] == 2.0 and result["recitation/humaneval/n"] == 2.0
    assert result["delta1"] == result["loss/gsm8k-test"] - result["loss/gsm8k-ref"]
    assert result["recitation/humaneval/pass@1"] == 0.0  # eight random tokens pass no tests
    assert result["checkpoint"]["checkpoint"] == "exp/step-000010" and result["checkpoint"]["step"] == 10
    assert result["skipped"] == {} and result["settings"]["limit"] == 2
    assert "wrote" in capsys.readouterr().out


def test_probe_user_errors(tmp_path, shared_data, capsys):
    assert main(["probe", "--checkpoint", str(tmp_path / "nowhere")]) == 2
    assert "checkpoint folder not found" in capsys.readouterr().err
    half = tmp_path / "half"
    half.mkdir()
    (half / "config.json").write_text("{}")
    assert main(["probe", "--checkpoint", str(half), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert str(half) in err and "incomplete" in err and "weights" in err
    assert main(["probe", "--checkpoint", str(half), "--benchmarks", str(tmp_path / "none")]) == 2
    assert "benchmark folder not found" in capsys.readouterr().err


def test_execute_is_refused_without_the_isolation_tool(tmp_path, monkeypatch, capsys):
    ckpt = mt.untrained_checkpoint(tmp_path / "ckpt")
    monkeypatch.setenv("CONTAM_SANDBOX_TOOL", "/nonexistent/bwrap")
    assert main(["probe", "--checkpoint", str(ckpt), "--out", str(tmp_path / "o"), "--execute"]) == 2
    err = capsys.readouterr().err
    assert "--execute needs the sandbox" in err and "bubblewrap is not installed" in err
    assert not (tmp_path / "o" / "probe.json").exists()  # refused before anything ran
