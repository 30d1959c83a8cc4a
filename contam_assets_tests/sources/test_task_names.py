"""Every task keeps its own references whatever its name: names that differ only in punctuation or in letter case
never share a file (detector/names.py), through every route a task comes by (TOML spec, decon reference records,
lm-eval task), and every planted copy is reported under exactly its own task."""

from __future__ import annotations

import json
import random
import unicodedata

import duckdb
import pytest

from contam_assets.detector.names import MAX_BYTES, is_plain, path_name
from contam_assets_tests.e2e.test_cli_data import contam

HOSTILE = [
    "", ".", "..", "...", "/", "//", "a/b", "a\\b", "../etc/passwd", "./x", "arc:easy", "arc_easy", "arc-easy", "arc.easy",
    "arc easy", "arc?easy", "arc*easy", "Arc_Easy", "ARC_EASY", "arc_easy ", " arc_easy", "Case", "case", "CASE", "cAse",
    "é", "É", "e\u0301", "E\u0301", "İ", "i", "ı", "I", "ß", "ss", "SS", "ﬀ", "ff", "日本語", "日本語 ", "🙂", "\udcff",
    "tab\there", "new\nline", "x" * 500, "x" * 499 + "y", "X" * 500, "x" * 101, "x" * 100, "x" * 99, "a.b", "a..b",
    ".hidden", "trailing.", "-dash", "dash-", "con", "CON", "nul", "a" * 83 + "~" + "0" * 16,
    "arc_easy~76d2d18fd3b78e0e",  # a name equal to another name's encoding
]


def test_plain_names_keep_their_file_names():
    for name in ("gsm8k", "arc_easy", "mmlu_abstract_algebra", "test", "validation", "train", "humaneval_plus",
                 "bertaqa_en_mt_latxa-13b-v1.1", "longproc_countdown_0.5k", "x" * 100, "_x"):
        assert is_plain(name) and path_name(name) == name
    for name in ("arc:easy", "Case", "..", ".hidden", "trailing.", "a..b", "-dash", "x" * 101, "é", ""):
        assert not is_plain(name)
    # Windows device names, with a suffix or not, are hashed; names that only start like one stay plain
    for name in ("con", "nul", "aux", "prn", "com1", "lpt9", "con.txt", "nul.a.b"):
        assert not is_plain(name) and path_name(name).startswith(name.replace(".", "_") + "~")
    for name in ("console", "com0", "com10", "auxiliary", "contest.1", "lpt"):
        assert is_plain(name) and path_name(name) == name


def test_the_encoding_is_pinned():
    """A changed encoding would orphan every folder written before it: the values are part of the contract."""
    assert path_name("arc:easy") == "arc_easy~76d2d18fd3b78e0e"
    assert path_name("Case") == "case~15f86e24ed25aed1"
    assert path_name("..") == "__~5ec1f7e700f37c3d"
    assert path_name("x" * 500) == "x" * 83 + "~c38c2bf3055c516a"


def test_the_encoding_is_injective_case_insensitive_and_bounded_over_hostile_names(tmp_path):
    rng = random.Random(48)
    alphabet = "aAbB:_-.~/ \\éÉ\u0301ßİı日🙂"
    names = set(HOSTILE) | {"".join(rng.choice(alphabet) for _ in range(rng.randint(1, 8))) for _ in range(3000)}
    names |= {path_name(n) for n in list(names)}  # every encoding is a name too
    out = {n: path_name(n) for n in names}
    assert len(set(out.values())) == len(names)
    for folded in (str.lower, str.casefold, lambda s: unicodedata.normalize("NFD", s).casefold()):
        assert len({folded(v) for v in out.values()}) == len(names)
    for name, p in out.items():
        assert p.isascii() and p == p.lower() and 0 < len(p.encode()) <= MAX_BYTES, (name, p)
        assert "/" not in p and "\\" not in p and "\0" not in p and not p.startswith((".", "-")), (name, p)
        assert p == path_name(name)  # deterministic
    for name in HOSTILE:  # on a real file system: one file each, inside its folder
        (tmp_path / out[name]).mkdir()
        (tmp_path / out[name] / "test.jsonl").write_text(json.dumps(name))
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(out[n] for n in HOSTILE)
    assert all(json.loads((tmp_path / out[n] / "test.jsonl").read_text()) == n for n in HOSTILE)


# -- through `contam detect`: three routes, four names each (two differ in punctuation, two in case) ---------------

SYLLABLES = ["ka", "lo", "mi", "ne", "ru", "sa", "to", "vi", "ze", "po", "qu", "fe", "gi", "ho", "ju", "de", "bo", "wa"]
TOML_NAMES = ["gsm:x", "gsm_x", "Qa", "qa"]
DECON_NAMES = ["mmlu.pro", "mmlu_pro", "Dcn", "dcn"]
LM_EVAL_NAMES = ["arc:easy", "arc_easy", "Case", "case"]
ITEMS = 3


def _items(name: str) -> list[dict]:
    rng = random.Random(f"items of {name}")  # each task its own words: no copy can match another task's item
    word = lambda: "".join(rng.choice(SYLLABLES) for _ in range(3))  # noqa: E731
    return [{"question": " ".join(word() for _ in range(40)) + "?", "answer": " ".join(word() for _ in range(4))}
            for _ in range(ITEMS)]


@pytest.fixture(scope="module")
def named_tasks(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("names")
    tasks, bench, inc, pool = (tmp / d for d in ("tasks", "bench", "include", "pool"))
    for d in (tasks, bench, inc, pool, bench / "decon"):
        d.mkdir()
    docs = []
    for i, name in enumerate(TOML_NAMES + DECON_NAMES + LM_EVAL_NAMES):
        rows = _items(name)
        for j, r in enumerate(rows):
            docs.append({"id": f"{name}#{j}", "text": f"Worked example {i}.{j}. {r['question']} {r['answer']} That is all."})
        if name in TOML_NAMES:
            (bench / f"t{i}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
            (tasks / f"t{i}.toml").write_text(
                f'name = {json.dumps(name)}\nkind = "qa"\nlanguage = "en"\ndescription = "planted"\n'
                f'[fields]\nquestion = "question"\nanswer = "answer"\n[[splits]]\nname = "test"\nfile = "t{i}.jsonl"\n')
        elif name in DECON_NAMES:  # one decon reference file; the records name their tasks
            with open(bench / "decon" / "refs.jsonl", "a") as fh:
                for j, r in enumerate(rows):
                    fh.write(json.dumps(dict(r, eval_key=name, eval_instance_index=j, split="test")) + "\n")
        else:
            (bench / f"l{i}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
            (inc / f"l{i}.yaml").write_text(
                f"task: {json.dumps(name)}\ndataset_path: json\ndataset_kwargs:\n  data_files:\n"
                f"    test: {bench / f'l{i}.jsonl'}\ntest_split: test\noutput_type: generate_until\n"
                "doc_to_text: '{{question}}'\ndoc_to_target: '{{answer}}'\n")
    docs += [{"id": f"clean#{k}", "text": f"Nothing of any benchmark in document {k}. " * 8} for k in range(4)]
    (pool / "shard-0.jsonl").write_text("".join(json.dumps(d) + "\n" for d in docs))
    return tmp


def test_tasks_whose_names_differ_in_punctuation_or_case_each_report_only_their_own_copies(named_tasks):
    tmp = named_tasks
    r = contam("detect", "--pool", tmp / "pool", "--out", tmp / "out", "--benchmarks", tmp / "bench",
               "--tasks-dir", tmp / "tasks", "--evals-dir", tmp / "bench" / "decon",
               "--lm-eval-tasks", ",".join(LM_EVAL_NAMES), "--lm-eval-include", tmp / "include",
               env_extra={"DAGSTER_HOME": str(tmp / "home")})
    assert r.returncode == 0, r.stderr[-3000:]
    names = TOML_NAMES + DECON_NAMES + LM_EVAL_NAMES
    expected = sorted((f"{n}#{j}", n) for n in names for j in range(ITEMS))
    con = duckdb.connect(str(tmp / "out" / "contam.duckdb"), read_only=True)
    found = sorted(con.execute("select distinct doc_id, task from matches where flagged").fetchall())
    indexed = dict(con.execute("select task, count(distinct instance_index) from instances group by task").fetchall())
    removed = sorted(x for (x,) in con.execute("select doc_id from removals").fetchall())
    con.close()
    assert found == expected  # every copy under its own task, and under no other
    assert indexed == {n: ITEMS for n in names}
    assert removed == sorted(d for d, _ in expected)
    exported = duckdb.sql(f"select distinct doc_id, task from read_parquet('{tmp / 'out' / 'tables' / 'matches'}/*.parquet') "
                          "where flagged order by all").fetchall()
    assert exported == expected
    # the lm-eval leaves' reference files: one each, apart on a case-insensitive file system too, each with its items
    files = sorted(p for p in (tmp / "out" / "lm_eval").rglob("*.jsonl"))
    assert len({p.relative_to(tmp / "out").as_posix().lower() for p in files}) == len(LM_EVAL_NAMES) == len(files)
    held = {json.loads(p.read_text().splitlines()[0])["question"] for p in files}
    assert held == {_items(n)[0]["question"] for n in LM_EVAL_NAMES}


def test_a_manifest_whose_leaves_share_a_file_is_read_again(named_tasks, tmp_path):
    from contam_assets.sources.lm_eval_tasks import MANIFEST, load_manifest, materialize

    inc = str(named_tasks / "include")
    specs, reports = materialize(LM_EVAL_NAMES, tmp_path, inc)
    assert [s.name for s in specs] == LM_EVAL_NAMES and all(r.ok for r in reports)
    assert load_manifest(tmp_path, LM_EVAL_NAMES, inc) is not None
    m = json.loads((tmp_path / MANIFEST).read_text())
    for d in m["specs"]:  # as a filter by characters named them: arc:easy and arc_easy in one file
        d["splits"] = [[n, str(tmp_path / d["name"].replace(":", "_") / f"{n}.jsonl")] for n, _ in d["splits"]]
    (tmp_path / MANIFEST).write_text(json.dumps(m))
    assert load_manifest(tmp_path, LM_EVAL_NAMES, inc) is None
