"""The layout's rules (docs/ARCHITECTURE.md), held against the code's own imports."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PKG = ROOT / "contam_assets"
# packages from the bottom up: a package may import those below it, never one above
LAYERS = ["settings", "detector", "store", "sources", "paraphrase", "demo", "report", "rescan", "executor", "decon", "estimate", "quality", "model", "evaluation", "web", "testing"]


def module_name(path: Path) -> str:
    rel = path.relative_to(ROOT).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def imports_of(path: Path) -> set[str]:
    """Every module name an import statement in ``path`` names (function-level imports included)."""
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.add(node.module)
            out.update(f"{node.module}.{a.name}" for a in node.names)
    return out


def project_graph() -> dict[str, set[str]]:
    mods = {module_name(p): p for p in PKG.rglob("*.py")}
    return {m: {i for i in imports_of(p) if i in mods and i != m} for m, p in mods.items()}


def test_detector_imports_no_dagster_duckdb_or_ray_and_nothing_else_of_the_project():
    for p in (PKG / "detector").rglob("*.py"):
        for name in imports_of(p):
            top = name.split(".")[0]
            assert top not in ("dagster", "duckdb", "ray", "dagster_ray"), f"{p.name} imports {name}"
            if top == "contam_assets":  # the settings module imports nothing of the project
                assert name.startswith(("contam_assets.detector", "contam_assets.settings")), \
                    f"{p.name} imports {name}"


def test_paraphrase_imports_only_the_detector_of_the_project_and_no_dagster_duckdb_or_ray():
    for p in (PKG / "paraphrase").rglob("*.py"):
        for name in imports_of(p):
            top = name.split(".")[0]
            assert top not in ("dagster", "duckdb", "ray", "dagster_ray", "torch", "transformers"), f"{p.name} imports {name}"
            if top == "contam_assets":
                assert name.startswith(("contam_assets.detector", "contam_assets.paraphrase")), f"{p.name} imports {name}"


def test_lower_packages_never_import_dagster_or_a_package_above_them():
    for i, layer in enumerate(LAYERS):
        base = PKG / layer
        files = list(base.rglob("*.py")) if base.is_dir() else [PKG / f"{layer}.py"]
        for p in files:
            for name in imports_of(p):
                assert not name.startswith("dagster"), f"{p.relative_to(ROOT)} imports {name}"
                parts = name.split(".")
                if parts[0] == "contam_assets" and len(parts) > 1:
                    target = parts[1]
                    assert target not in ("defs", "runner", "commands", "cli"), f"{p.relative_to(ROOT)} imports {name}"
                    if target in LAYERS:
                        assert LAYERS.index(target) <= i, f"{p.relative_to(ROOT)} ({layer}) imports {name} above it"


def test_no_import_cycle_among_the_project_modules():
    graph = project_graph()
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(m: str) -> None:
        state[m] = 1
        stack.append(m)
        for d in sorted(graph[m]):
            if state.get(d) == 1:
                raise AssertionError("import cycle: " + " -> ".join(stack[stack.index(d):] + [d]))
            if d not in state:
                visit(d)
        stack.pop()
        state[m] = 2

    for m in sorted(graph):
        if m not in state:
            visit(m)


def test_no_source_file_over_500_lines():
    long = []
    for folder in ("contam_assets", "contam_assets_tests", "benchmarks"):
        for p in (ROOT / folder).rglob("*.py"):
            n = len(p.read_text().splitlines())
            if n > 500:
                long.append(f"{p.relative_to(ROOT)}: {n}")
    assert not long, long


_NAME = re.compile(r"[A-Za-z_][\w]*(/|\.py)")


def layout_names() -> tuple[dict[str, int], str]:
    """The paths under contam_assets/ that docs/ARCHITECTURE.md's layout block names ("model/arms/", "cli.py",
    "defs/resources.py"), each with its line number, and the block's text.  A line's leading names (several
    on one line, separated by single spaces) sit under the last folder named one indentation step (two
    spaces) above them."""
    text = (ROOT / "docs" / "ARCHITECTURE.md").read_text(encoding="utf-8")
    block = re.search(r"^## Layout\n.*?^```\n(.*?)^```", text, re.S | re.M)
    assert block, "docs/ARCHITECTURE.md has no ``` block under '## Layout'"
    start = text[: block.start(1)].count("\n") + 1
    names: dict[str, int] = {}
    parents: list[str] = []  # the folders named on the lines above, one per depth under contam_assets/
    inside = False
    for n, line in enumerate(block.group(1).splitlines(), start):
        indent = len(line) - len(line.lstrip(" "))
        if indent == 0:
            inside = line.startswith("contam_assets/")
            continue
        if not inside or not line.strip():
            continue
        depth = indent // 2 - 1
        parents = parents[:depth]
        tokens = []
        for token in line.split(" ")[indent:]:
            if not _NAME.fullmatch(token):
                break
            tokens.append(token)
        for token in tokens:
            names["/".join(parents + [token.rstrip("/")])] = n
        if len(tokens) == 1 and tokens[0].endswith("/"):
            parents.append(tokens[0].rstrip("/"))
    return names, block.group(1)


def test_architecture_layout_names_every_package_and_module_and_only_those_that_exist():
    """Every package under contam_assets/ (a folder with __init__.py) and every top-level module is named in
    docs/ARCHITECTURE.md's layout block, and every folder or module the block names exists."""
    names, _ = layout_names()
    packages = sorted(str(p.parent.relative_to(PKG)) for p in PKG.rglob("__init__.py") if p.parent != PKG)
    modules = sorted(p.name for p in PKG.glob("*.py") if p.name != "__init__.py")
    missing = []
    for rel in packages + modules:
        if rel not in names:
            parent, _, leaf = rel.rpartition("/")
            shown = leaf + ("/" if not leaf.endswith(".py") else "")
            where = f"under its parent's line `{parent.split('/')[-1]}/`" if parent else "directly under `contam_assets/`"
            indent = "  " * (rel.count("/") + 1)
            missing.append(f"contam_assets/{rel}: add the line '{indent}{shown:<14} <what it holds>' {where} "
                           f"in the ``` block of '## Layout' in docs/ARCHITECTURE.md")
    assert not missing, "\n".join(missing)
    gone = []
    for rel, line in sorted(names.items()):
        path = PKG / rel
        ok = path.is_file() if rel.endswith(".py") else (path / "__init__.py").is_file()
        if not ok:
            what = "module" if rel.endswith(".py") else "package (a folder with __init__.py)"
            gone.append(f"docs/ARCHITECTURE.md line {line} names contam_assets/{rel}, which is no {what}: "
                        f"remove or rename that line")
    assert not gone, "\n".join(gone)


def test_core_is_gone():
    assert not (PKG / "core").exists()


def test_ruff_finds_nothing():
    """pyflakes rules and import order ([tool.ruff] in pyproject.toml)."""
    import subprocess
    import sys

    r = subprocess.run([sys.executable, "-m", "ruff", "check", "contam_assets", "contam_assets_tests", "benchmarks"],
                       cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr


def _imports_resolved(path: Path, module: str) -> set[str]:
    """imports_of, with relative imports (``from .x import y``) resolved against ``module``."""
    out = imports_of(path)
    package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.level:
            base = ".".join(package[: len(package) - node.level + 1] + ([node.module] if node.module else []))
            out.add(base)
            out.update(f"{base}.{a.name}" for a in node.names)
    return out


def _outermost(names: list[str]) -> list[str]:
    """``names`` without those inside another one (``a.b.c`` goes when ``a.b`` is there)."""
    return [n for n in names if not any(n.startswith(m + ".") for m in names)]


def test_no_benchmark_imports_the_test_suite():
    """benchmarks/ stands on the product (contam_assets.testing holds what benchmarks and tests share), never on
    contam_assets_tests: not by package name, nor by a test module's bare name after a sys.path insert."""
    bench = ROOT / "benchmarks"
    files = sorted(bench.rglob("*.py"))
    own = {p.stem for p in files}
    test_modules = {p.stem for p in (ROOT / "contam_assets_tests").rglob("*.py")} - own
    bad, shared = [], []
    for p in files:
        names = _imports_resolved(p, module_name(p))
        shared += [n for n in names if n.startswith("contam_assets.testing")]
        suite = sorted(n for n in names if n.split(".")[0] in test_modules | {"contam_assets_tests"})
        bad += [f"{p.relative_to(ROOT)} imports {n}: move what it needs into contam_assets/testing/"
                for n in _outermost(suite)]
    assert files and shared, "the scan found no benchmark that imports contam_assets.testing: is it reading imports?"
    assert not bad, "\n".join(bad)


def test_no_product_module_imports_the_testing_package_or_the_test_suite():
    """contam_assets/testing/ sits on top of the product for tests and benchmarks: nothing else in contam_assets/
    imports it, and nothing in contam_assets/ (testing included) imports contam_assets_tests."""
    bad = []
    testing = PKG / "testing"
    assert (testing / "__init__.py").is_file()
    for p in sorted(PKG.rglob("*.py")):
        names = _imports_resolved(p, module_name(p))
        suite = sorted(n for n in names if n.split(".")[0] == "contam_assets_tests")
        bad += [f"{p.relative_to(ROOT)} imports {n} (the product never imports the test suite)" for n in _outermost(suite)]
        if testing not in p.parents:
            above = sorted(n for n in names if n == "contam_assets.testing" or n.startswith("contam_assets.testing."))
            bad += [f"{p.relative_to(ROOT)} imports {n} (only tests and benchmarks import contam_assets.testing)"
                    for n in _outermost(above)]
    assert not bad, "\n".join(bad)


def test_the_testing_package_imports_without_pytest_or_dev_extras():
    """Every module of contam_assets/testing imports in a fresh interpreter where pytest, the test suite, moto,
    boto3 and httpx cannot be imported (the dev extras are imported inside the functions that use them)."""
    import subprocess
    import sys

    mods = sorted(module_name(p) for p in (PKG / "testing").rglob("*.py"))
    blocked = ["pytest", "_pytest", "contam_assets_tests", "moto", "boto3", "httpx"]
    code = ("import importlib, sys\n"
            f"for m in {blocked!r}:\n    sys.modules[m] = None\n"
            f"for m in {mods!r}:\n    importlib.import_module(m)\n"
            "print('imported', len([m for m in sys.modules if m.startswith('contam_assets.testing')]))\n")
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.split() == ["imported", str(len(mods))], r.stdout
