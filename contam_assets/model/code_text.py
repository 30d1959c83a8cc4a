"""Python function bodies: extraction from a completion and normalisation for comparison.

Two bodies count as the same recitation when they are equal after
normalisation: comments, the docstring, blank lines, indentation style and
quote style do not matter (the code is parsed with ``ast`` and printed back
with ``ast.unparse``).  Code that does not parse (a generation cut short) falls
back to its token stream from ``tokenize`` without comments and layout tokens.
Similarity is difflib's ratio on the normalised token sequences.
"""

from __future__ import annotations

import ast
import difflib
import io
import re
import textwrap
import tokenize

# The stop sequences of the Codex paper: the function ends where top-level code starts.
HUMANEVAL_STOP = ("\nclass", "\ndef", "\n#", "\nif", "\nprint")
_LAYOUT = {tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT, tokenize.ENDMARKER}
_FALLBACK_TOKEN = re.compile(r"\w+|[^\w\s]")


def _strip_docstring(body: list[ast.stmt]) -> list[ast.stmt]:
    if body and isinstance(body[0], ast.Expr) and isinstance(getattr(body[0], "value", None), ast.Constant):
        if isinstance(body[0].value.value, str):
            return body[1:]
    return body


def function_body(program: str, name: str) -> str | None:
    """Normalised body of the last top-level function ``name`` in ``program`` (None if it does not parse)."""
    try:
        tree = ast.parse(program)
    except (SyntaxError, ValueError):
        return None
    funcs = [n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == name]
    if not funcs:
        return None
    body = _strip_docstring(funcs[-1].body)
    return ast.unparse(ast.Module(body=body, type_ignores=[])) if body else ""


def normalize_code(code: str) -> str:
    """Normalised text of a code fragment (a whole program or a bare, indented body)."""
    source = textwrap.dedent(code)
    try:
        tree = ast.parse(source)
        tree.body = _strip_docstring(tree.body)
        return ast.unparse(tree)
    except (SyntaxError, ValueError):
        return " ".join(code_tokens(source))


def code_tokens(code: str) -> list[str]:
    """Token strings without comments and layout; tolerant of unfinished code."""
    tokens: list[str] = []
    try:
        for tok in tokenize.generate_tokens(io.StringIO(code).readline):
            if tok.type not in _LAYOUT and tok.string.strip():
                tokens.append(tok.string)
    except (tokenize.TokenError, IndentationError, SyntaxError):
        if not tokens:
            stripped = re.sub(r"#[^\n]*", "", code)
            return _FALLBACK_TOKEN.findall(stripped)
    return tokens


def similarity(a: str, b: str) -> float:
    """difflib ratio between the token sequences of two normalised code texts."""
    ta, tb = code_tokens(a), code_tokens(b)
    if not ta and not tb:
        return 1.0
    return difflib.SequenceMatcher(None, ta, tb, autojunk=False).ratio()
