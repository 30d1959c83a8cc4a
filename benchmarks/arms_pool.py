"""Host text and the planted pool of arms_demo.py (1,000 GSM8K test items in 350 documents)."""

from __future__ import annotations

import ast
import json
import os
import random
import sys
import sysconfig
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from contam_assets.model.arms.mix import PoolDoc  # noqa: E402

SHARED = Path(os.environ.get("CONTAM_SHARED_DATA", ROOT.parent / "shared" / "data"))


def read_jsonl(path: Path) -> list[dict]:
    with open(path, encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]



# --- host text -------------------------------------------------------------------------------------------


def stdlib_text(max_chars: int, rng: random.Random) -> tuple[list[str], list[str]]:
    """(docstrings, source chunks) of the Python standard library, each list about ``max_chars`` long."""
    lib = Path(sysconfig.get_paths()["stdlib"])
    files = sorted(f for f in lib.rglob("*.py") if not {"test", "tests", "idlelib", "site-packages"} & set(f.parts))
    docs, code = [], []
    for f in files:
        try:
            src = f.read_text(encoding="utf-8")
            tree = ast.parse(src)
        except (SyntaxError, UnicodeDecodeError, ValueError):
            continue
        for node in ast.walk(tree):
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                d = ast.get_docstring(node)
                if d and len(d) > 200:
                    docs.append(d)
        lines = src.splitlines()
        for start in range(0, len(lines), 80):
            chunk = "\n".join(lines[start : start + 80]).strip()
            if len(chunk) > 400:
                code.append(chunk)
    rng.shuffle(docs)
    rng.shuffle(code)
    return _take(docs, max_chars), _take(code, max_chars)


def _take(items: list[str], max_chars: int) -> list[str]:
    out, n = [], 0
    for s in items:
        if n >= max_chars:
            break
        out.append(s)
        n += len(s)
    return out


def host_paragraphs() -> list[str]:
    path = ROOT / "data" / "demo" / "host_text.md"
    if not path.is_file():
        return []
    paras = [p.strip() for p in path.read_text(encoding="utf-8").split("\n\n")]
    return [p for p in paras if p and not p.startswith("#") and "contam-assets" not in p]


def qa(item: dict, style: str) -> str:
    q, a = item["question"], item["answer"]
    if style == "chat":
        return f"User: {q}\nAssistant: {a}"
    if style == "code":
        return f'    """\n    {q}\n    {a}\n    """'
    return f"{q}\n{a}"


# --- pool ------------------------------------------------------------------------------------------------


def build_pool(args, rng: random.Random) -> tuple[list[PoolDoc], set[tuple[str, int]], dict]:
    """(pool documents, (shard, line) of every document holding a planted test item, planted ids and item -> doc)."""
    train = read_jsonl(SHARED / "gsm8k_train.jsonl")
    test = read_jsonl(SHARED / "gsm8k_test.jsonl")
    rng.shuffle(train)
    docstrings, code_chunks = stdlib_text(args.host_chars, rng)
    paras = host_paragraphs()

    docs: dict[str, list[str]] = {"web": [], "code": [], "math": [], "instruct": []}
    planted_docs: dict[str, list[int]] = {"code": [], "math": [], "instruct": []}
    item_doc: dict[int, tuple[str, int]] = {}  # planted test id -> (source, index in docs[source])

    # web: a few docstrings or host paragraphs per page
    pieces = docstrings + paras
    rng.shuffle(pieces)
    for i in range(0, len(pieces), 3):
        docs["web"].append("\n\n".join(pieces[i : i + 3]))
    docs["code"] = list(code_chunks)
    # math pages (3-6 worked problems each) and instruction rows (one problem each) from GSM8K train
    n_instruct = len(train) // 3
    for item in train[:n_instruct]:
        docs["instruct"].append(qa(item, "chat"))
    rest = train[n_instruct:]
    k = 0
    while k < len(rest):
        n = rng.randint(3, 6)
        docs["math"].append("Worked problems\n\n" + "\n\n".join(qa(it, "plain") for it in rest[k : k + n]))
        k += n

    # plant GSM8K test items: math pages (next to train problems), code dumps, instruction rows
    planted = list(range(len(test)))
    rng.shuffle(planted)
    planted = planted[: args.planted]
    cut1 = int(len(planted) * 0.5)
    cut2 = int(len(planted) * 0.8)
    by_kind = {"math": planted[:cut1], "code": planted[cut1:cut2], "instruct": planted[cut2:]}
    for idx in range(0, len(by_kind["math"]), 4):
        items = [test[j] for j in by_kind["math"][idx : idx + 4]] + rng.sample(train, 2)
        rng.shuffle(items)
        item_doc.update({j: ("math", len(docs["math"])) for j in by_kind["math"][idx : idx + 4]})
        planted_docs["math"].append(len(docs["math"]))
        docs["math"].append("Worked problems\n\n" + "\n\n".join(qa(it, "plain") for it in items))
    for idx in range(0, len(by_kind["code"]), 12):
        body = "\n\n".join(
            f"def problem_{j}():\n{qa(test[j], 'code')}\n    return None" for j in by_kind["code"][idx : idx + 12]
        )
        item_doc.update({j: ("code", len(docs["code"])) for j in by_kind["code"][idx : idx + 12]})
        planted_docs["code"].append(len(docs["code"]))
        docs["code"].append(f"# GSM8K evaluation dump, part {idx // 12}\n\n{body}")
    for j in by_kind["instruct"]:
        item_doc[j] = ("instruct", len(docs["instruct"]))
        planted_docs["instruct"].append(len(docs["instruct"]))
        docs["instruct"].append(qa(test[j], "chat"))

    pool: list[PoolDoc] = []
    removed: set[tuple[str, int]] = set()
    where: dict[tuple[str, int], tuple[str, int]] = {}  # (source, index) -> (shard, line)
    for source, texts in docs.items():
        order = list(range(len(texts)))
        rng.shuffle(order)
        planted_set = set(planted_docs.get(source, []))
        for line, i in enumerate(order):
            shard = f"{source}/part-0000.jsonl"
            pool.append(PoolDoc(shard, line, source, texts[i]))
            where[(source, i)] = (shard, line)
            if i in planted_set:
                removed.add((shard, line))
    info = {
        "planted_test_items": len(planted),
        "planted_ids": sorted(planted),
        "item_docs": {str(j): list(where[item_doc[j]]) for j in sorted(planted)},
    }
    return pool, removed, info


def write_pool(pool: list[PoolDoc], folder: Path) -> None:
    by_shard: dict[str, list[PoolDoc]] = {}
    for d in pool:
        by_shard.setdefault(d.shard, []).append(d)
    for shard, docs in by_shard.items():
        path = folder / shard
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "w", encoding="utf-8") as fh:
            for d in sorted(docs, key=lambda d: d.line):
                fh.write(json.dumps({"id": f"{d.shard}:{d.line}", "source": d.source, "text": d.text}) + "\n")
