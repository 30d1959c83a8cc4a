"""Leak types: how a benchmark item can show up in a training document.

Each leak type is a function ``(item, rng, ctx) -> Block | None`` that renders the
item the way that kind of leak looks (None when the type does not apply to the
item, e.g. options reordered on a non-multiple-choice task).  A :class:`Block`
is the leaked text plus what was done to it; the suite builder embeds it in host
text and records where it landed.
"""

from __future__ import annotations

import csv
import html
import io
import json
import pprint
import random
import re
import textwrap
from dataclasses import dataclass, field
from typing import Callable

from contam_assets.quality.items import Key, PlantedItem

LETTERS = "ABCDEFGHIJ"


@dataclass
class Block:
    text: str
    source: str  # dataset type of the document: web, code, math, instruct, other
    variant: str
    detail: dict = field(default_factory=dict)
    wrap: bool = True  # embed between host paragraphs (False: the block is the whole document)
    # items in the block: (key, start, end) relative to the block; default: the planted item over the whole block
    spans: list[tuple[Key, int, int]] | None = None


@dataclass
class Context:
    """What a leak type may need beyond the item itself."""

    hosts: object  # quality.hosts.Hosts
    same_split: Callable[[PlantedItem, int], list[PlantedItem]]  # other eligible items of the item's task and split


# -- base renderings -----------------------------------------------------------

def _mc_lines(question: str, choices: list[str], labels: list[str], gold_label: str | None, gold_text: str | None, style: str) -> str:
    opts = "\n".join(f"{lab}. {c}" if style == "dot" else f"({lab}) {c}" for lab, c in zip(labels, choices))
    text = f"{question}\n{opts}"
    if gold_label is not None:
        text += f"\nAnswer: {gold_label}" + (f". {gold_text}" if style == "dot" and gold_text else "")
    return text


def mc_text(item: PlantedItem, rng: random.Random) -> tuple[str, str]:
    labels = list(LETTERS[: len(item.choices)])
    style = rng.choice(("dot", "paren"))
    gold = labels[item.gold] if item.gold is not None else None
    return _mc_lines(item.question, list(item.choices), labels, gold, item.gold_text, style), f"mc_{style}"


def qa_text(item: PlantedItem, rng: random.Random) -> tuple[str, str]:
    """The item's question followed by its answer, in one of the usual layouts."""
    if item.kind == "multiple-choice":
        return mc_text(item, rng)
    q, a = item.question, item.answer or ""
    if item.kind == "code":
        if item.task == "humaneval" or q.lstrip().startswith(("def ", "from ", "import ")):
            return q.rstrip("\n") + "\n" + a, "prompt+solution"
        style = rng.choice(("docstring", "comment", "problem"))
        if style == "docstring":
            return f'"""{q}"""\n{a}', "docstring+code"
        if style == "comment":
            return "# " + q.replace("\n", "\n# ") + "\n" + a, "comment+code"
        return f"Problem: {q}\nSolution:\n```python\n{a}\n```", "problem+code"
    layouts = {
        "question_answer": "Question: {q}\nAnswer: {a}",
        "plain": "{q}\n{a}",
        "problem_solution": "Problem: {q}\n\nSolution:\n{a}",
        "chat": "User: {q}\n\nAssistant: {a}",
        "qa_short": "Q: {q}\nA: {a}",
    }
    name = rng.choice(sorted(layouts))
    return layouts[name].format(q=q, a=a), name


def _source_for(item: PlantedItem, rng: random.Random, default: tuple[str, ...] = ("web", "math", "instruct", "other")) -> str:
    if item.kind == "code":
        return "code"
    if item.task.startswith("gsm"):
        return rng.choice(("math", "instruct", "web"))
    return rng.choice(default)


# -- formatting changes ----------------------------------------------------------

def case_change(text: str, rng: random.Random) -> tuple[str, str]:
    v = rng.choice(("upper", "lower", "title"))
    return {"upper": text.upper(), "lower": text.lower(), "title": text.title()}[v], v


def whitespace_change(text: str, rng: random.Random) -> tuple[str, str]:
    v = rng.choice(("spaces", "nbsp", "indent"))
    if v == "spaces":
        out = re.sub(" ", lambda m: rng.choice(("  ", "   ", "\t", " \t ", " ")), text)
    elif v == "nbsp":
        out = re.sub(" ", lambda m: "\u00a0" if rng.random() < 0.5 else " ", text)
    else:
        pad = rng.choice(("    ", "\t", "  "))
        out = "\n".join(pad + line + rng.choice(("", "  ", "\t")) for line in text.split("\n"))
    return out, v


def line_break_change(text: str, rng: random.Random) -> tuple[str, str]:
    v = rng.choice(("wrap", "joined", "crlf", "sentences"))
    if v == "wrap":
        width = rng.randint(30, 70)
        out = "\n".join(textwrap.fill(line, width=width, break_long_words=False, break_on_hyphens=False) if line else ""
                        for line in text.split("\n"))
    elif v == "joined":
        out = re.sub(r"\s*\n\s*", " ", text)
    elif v == "crlf":
        out = text.replace("\n", "\r\n\r\n" if rng.random() < 0.5 else "\r\n")
    else:
        out = re.sub(r"([.?!]) (?=[A-Z])", lambda m: m.group(1) + "\n", text)
    return out, v


_SENT_PUNCT = ".,;:!?"
_TYPO = {"'": "\u2019", '"': "\u201c", " - ": " \u2014 ", "--": "\u2014"}


def punctuation_change(text: str, rng: random.Random) -> tuple[str, str]:
    """Change punctuation without touching letters or digits (decon maps punctuation to spaces)."""
    v = rng.choice(("typographic", "swap", "strip"))
    if v == "typographic":
        out = text
        for a, b in _TYPO.items():
            out = out.replace(a, b)
    elif v == "swap":
        out = "".join(rng.choice(_SENT_PUNCT.replace(c, "")) if c in _SENT_PUNCT and rng.random() < 0.7 else c for c in text)
    else:
        # drop punctuation next to whitespace or at either end (so no two words are glued together)
        out = re.sub(r"(?:(?<=\s)|^)[!\"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~]+|[!\"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~]+(?=\s|$)", "", text)
    return out, v


# -- leak types --------------------------------------------------------------------

def verbatim(item: PlantedItem, rng: random.Random, ctx: Context) -> Block | None:
    text, layout = qa_text(item, rng)
    return Block(text, _source_for(item, rng), layout)


def _formatted(change):
    def leak(item: PlantedItem, rng: random.Random, ctx: Context) -> Block | None:
        text, layout = qa_text(item, rng)
        out, v = change(text, rng)
        return Block(out, _source_for(item, rng), v, {"layout": layout})
    return leak


def _fields(item: PlantedItem) -> dict:
    if item.kind == "multiple-choice":
        return {"question": item.question, "choices": list(item.choices), "answer": item.gold}
    if item.kind == "code":
        return {"task_id": f"{item.task}/{item.instance_index}", "prompt": item.question, "canonical_solution": item.answer}
    return {"question": item.question, "answer": item.answer}


def json_escaped(item: PlantedItem, rng: random.Random, ctx: Context) -> Block | None:
    ascii_only = rng.random() < 0.5
    indent = 2 if rng.random() < 0.3 else None
    text = json.dumps(_fields(item), ensure_ascii=ascii_only, indent=indent)
    return Block(text, "code", ("pretty" if indent else "line") + ("_ascii" if ascii_only else "_utf8"))


def python_escaped(item: PlantedItem, rng: random.Random, ctx: Context) -> Block | None:
    v = rng.choice(("assign", "pprint", "tuple_list"))
    f = _fields(item)
    if v == "assign":
        text = "\n".join(f"{k.upper()} = {v_!r}" for k, v_ in f.items())
    elif v == "pprint":
        text = "EXAMPLE = " + pprint.pformat(f, width=rng.randint(60, 100), sort_dicts=False)
    else:
        text = "EXAMPLES = [\n    (" + ", ".join(repr(x) for x in f.values()) + "),\n]"
    return Block(text, "code", v)


def html_wrapped(item: PlantedItem, rng: random.Random, ctx: Context) -> Block | None:
    entities = rng.random() < 0.3  # html.escape(quote=True): quotes become &quot; / &#x27;
    def esc(s: str) -> str:
        return html.escape(s, quote=entities)
    if item.kind == "code":
        body = f"<pre><code class=\"language-python\">{esc(item.question.rstrip(chr(10)) + chr(10) + (item.answer or ''))}</code></pre>"
    else:
        q = "<br>\n".join(esc(line) for line in item.question.split("\n"))
        body = f"<div class=\"question\"><p>{q}</p></div>\n"
        if item.kind == "multiple-choice":
            body += "<ol type=\"A\">\n" + "\n".join(f"  <li>{esc(c)}</li>" for c in item.choices) + "\n</ol>\n"
            if item.gold is not None:
                body += f"<p class=\"answer\">Answer: {LETTERS[item.gold]}</p>"
        else:
            a = "<br>\n".join(esc(line) for line in (item.answer or "").split("\n"))
            body += f"<div class=\"answer\"><p>{a}</p></div>"
    host = ctx.hosts
    before = "\n".join(f"<p>{html.escape(host.paragraph('web'), quote=False)}</p>" for _ in range(rng.randint(0, 2)))
    after = "\n".join(f"<p>{html.escape(host.paragraph('web'), quote=False)}</p>" for _ in range(rng.randint(0, 2)))
    head = "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>Practice problems</title></head>\n<body>\n"
    text = head + (before + "\n" if before else "")
    start = len(text)
    text += body
    end = len(text)
    text += ("\n" + after if after else "") + "\n</body></html>\n"
    return Block(text, "web", "entities" if entities else "minimal", wrap=False, spans=[(item.key, start, end)])


def question_only(item: PlantedItem, rng: random.Random, ctx: Context) -> Block | None:
    q = item.question
    if item.kind == "qa" and rng.random() < 0.5:
        q = "Question: " + q
    return Block(q, _source_for(item, rng), "stem")


def answer_only(item: PlantedItem, rng: random.Random, ctx: Context) -> Block | None:
    if item.kind != "qa" or not item.answer or len(item.answer.split()) < 10:
        return None
    lead = rng.choice(("", "Solution:\n", "Answer: "))
    return Block(lead + item.answer, _source_for(item, rng), "answer" if not lead else "answer_with_label")


def solution_only(item: PlantedItem, rng: random.Random, ctx: Context) -> Block | None:
    if item.kind != "code" or not item.solution:
        return None
    sol = item.solution
    v = rng.choice(("file", "jsonl", "notebook", "markdown"))
    if v == "file":
        text = f"# solution {rng.randint(1, 999)}\n{sol}"
    elif v == "jsonl":
        text = json.dumps({"task_id": f"{item.task}/{item.instance_index}", "completion": sol})
    elif v == "notebook":
        text = json.dumps({"cell_type": "code", "execution_count": rng.randint(1, 40), "metadata": {},
                           "outputs": [], "source": sol.splitlines(keepends=True)}, indent=1)
    else:
        text = f"Here is my solution:\n\n```python\n{sol}\n```"
    return Block(text, "code", v)


def question_middle_cut(item: PlantedItem, rng: random.Random, ctx: Context) -> Block | None:
    words = item.question.split(" ")
    if len(words) < 12:
        return None
    frac = rng.uniform(0.2, 0.4)
    n_cut = max(1, round(len(words) * frac))
    a = (len(words) - n_cut) // 2
    cut_q = " ".join(words[:a]) + rng.choice((" ... ", " ", " [...] ")) + " ".join(words[a + n_cut:])
    cut_item = PlantedItem(**{**item.__dict__, "question": cut_q})
    text, layout = qa_text(cut_item, rng)
    return Block(text, _source_for(item, rng), layout, {"cut_fraction": round(n_cut / len(words), 3), "cut_words": [a, a + n_cut]})


def mc_options_changed(item: PlantedItem, rng: random.Random, ctx: Context) -> Block | None:
    if item.kind != "multiple-choice" or len(item.choices) < 2:
        return None
    v = rng.choice(("reordered", "relabelled", "reordered+relabelled"))
    order = list(range(len(item.choices)))
    if "reordered" in v:
        while order == sorted(order):
            rng.shuffle(order)
    if "relabelled" in v:
        scheme = rng.choice(("digits", "lower", "roman"))
        labels = {"digits": [str(i + 1) for i in range(10)], "lower": list("abcdefghij"),
                  "roman": ["i", "ii", "iii", "iv", "v", "vi", "vii", "viii", "ix", "x"]}[scheme][: len(order)]
    else:
        labels = list(LETTERS[: len(order)])
    choices = [item.choices[i] for i in order]
    gold_pos = order.index(item.gold) if item.gold is not None else None
    gold_label = labels[gold_pos] if gold_pos is not None else None
    text = _mc_lines(item.question, choices, labels, gold_label, item.gold_text, rng.choice(("dot", "paren")))
    return Block(text, _source_for(item, rng), v, {"order": order, "labels": labels})


def _dump_record(item: PlantedItem, fmt: str, i: int) -> str:
    f = _fields(item)
    if fmt == "jsonl":
        return json.dumps(f, ensure_ascii=False)
    if fmt == "csv":
        buf = io.StringIO()
        w = csv.writer(buf, lineterminator="\n")
        if item.kind == "multiple-choice":
            w.writerow([item.question, *item.choices, LETTERS[item.gold] if item.gold is not None else ""])
        else:
            w.writerow([item.question, item.answer or ""])
        return buf.getvalue().rstrip("\n")
    if fmt == "markdown":
        cell = lambda s: (s or "").replace("|", "\\|").replace("\n", "<br>")
        if item.kind == "multiple-choice":
            return f"| {i} | {cell(item.question)} | " + " / ".join(cell(c) for c in item.choices) + f" | {LETTERS[item.gold] if item.gold is not None else ''} |"
        return f"| {i} | {cell(item.question)} | {cell(item.answer)} |"
    if fmt == "eval_log":
        if item.kind == "multiple-choice":
            prompt, _ = mc_text(PlantedItem(**{**item.__dict__, "gold": None}), random.Random(i))
            target = LETTERS[item.gold] if item.gold is not None else "?"
        else:
            prompt, target = item.question, item.answer or ""
        return f"[doc {i}] prompt:\n{prompt}\n[doc {i}] target: {target}\n[doc {i}] acc: 1.0"
    raise ValueError(fmt)


def benchmark_dump(item: PlantedItem, rng: random.Random, ctx: Context) -> Block | None:
    others = ctx.same_split(item, rng.randint(4, 11))
    items = [item] + others
    rng.shuffle(items)
    fmt = rng.choice(("jsonl", "csv", "markdown", "eval_log", "quiz_key"))
    spans: list[tuple[Key, int, int]] = []
    if fmt == "quiz_key":
        # a quiz page: questions (with options) first, the answers as a key at the end
        key_lines = []
        text = f"{item.task} practice set\n\n"
        for i, it in enumerate(items, 1):
            if it.kind == "multiple-choice":
                body, _ = mc_text(PlantedItem(**{**it.__dict__, "gold": None}), rng)
                key_lines.append(f"{i}. {LETTERS[it.gold] if it.gold is not None else '?'}")
            else:
                body = it.question
                key_lines.append(f"{i}. {it.answer or ''}")
            start = len(text)
            text += f"{i}. {body}\n\n"
            spans.append((it.key, start, len(text)))
        text += "Answer key\n" + "\n".join(key_lines) + "\n"
    else:
        header = {"jsonl": "", "csv": "question,answer\n", "markdown": "| # | question | answer |\n|---|---|---|\n",
                  "eval_log": f"== {item.task} ({item.split}) ==\n"}[fmt]
        text = header
        for i, it in enumerate(items):
            start = len(text)
            text += _dump_record(it, fmt, i) + "\n"
            spans.append((it.key, start, len(text)))
    return Block(text, "code" if fmt in ("jsonl", "csv", "eval_log") else "web", fmt, {"items": len(items)}, wrap=False, spans=spans)


_NUM = re.compile(r"\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?")


def _new_number(s: str, rng: random.Random) -> str:
    v = float(s.replace(",", ""))
    decimals = len(s.split(".")[1]) if "." in s else 0
    for _ in range(20):
        if v < 10:
            new = float(rng.randint(2, 19))
        else:
            new = round(v * rng.uniform(0.4, 2.5), decimals)
        if new != v:
            break
    out = f"{new:.{decimals}f}" if decimals else str(int(new))
    if "," in s:
        out = f"{int(new):,}"
    return out


def change_numbers(question: str, answer: str, rng: random.Random) -> tuple[str, str, dict]:
    """Every number of the question changed, the same mapping applied to the answer (a GSM-Hard-style template)."""
    mapping: dict[str, str] = {}
    for m in _NUM.finditer(question):
        if m.group(0) not in mapping:
            mapping[m.group(0)] = _new_number(m.group(0), rng)
    sub = lambda t: _NUM.sub(lambda m: mapping.get(m.group(0), m.group(0)), t)
    return sub(question), sub(answer), mapping


def numbers_changed(item: PlantedItem, rng: random.Random, ctx: Context) -> Block | None:
    """Template copy: GSM8K-style item with new numbers (the truth is the source item)."""
    if item.kind != "qa" or not item.answer or len(item.answer.split()) < 10:
        return None
    if len(_NUM.findall(item.question)) < 2:
        return None
    q, a, mapping = change_numbers(item.question, item.answer, rng)
    text, layout = qa_text(PlantedItem(**{**item.__dict__, "question": q, "answer": a}), rng)
    return Block(text, _source_for(item, rng), "template", {"layout": layout, "numbers": mapping})


LEAK_TYPES: dict[str, Callable[[PlantedItem, random.Random, Context], Block | None]] = {
    "verbatim": verbatim,
    "case": _formatted(case_change),
    "whitespace": _formatted(whitespace_change),
    "line_breaks": _formatted(line_break_change),
    "punctuation": _formatted(punctuation_change),
    "json_escaped": json_escaped,
    "python_escaped": python_escaped,
    "html_wrapped": html_wrapped,
    "question_only": question_only,
    "answer_only": answer_only,
    "solution_only": solution_only,
    "question_middle_cut": question_middle_cut,
    "mc_options_changed": mc_options_changed,
    "benchmark_dump": benchmark_dump,
    "numbers_changed": numbers_changed,
}

# Leak types whose copy keeps the item's normalised text whole (decon's normaliser undoes the change).
VERBATIM_LIKE = ("verbatim", "case", "whitespace", "line_breaks", "punctuation", "json_escaped", "python_escaped")
FORMATTING = ("case", "whitespace", "line_breaks", "punctuation")
