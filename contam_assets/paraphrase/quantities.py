"""What a rewording keeps and a look-alike changes: the quantities of a text (numbers, in digits
or in words), its names, and the identifiers of code.

``numbers`` reads "3", "1,200", "$2.50", "1/4", "three", "twenty-five", "a quarter", "two-thirds",
"twice", "a dozen", "a decade" as values.  0 and 1 are soft (an hour, a cup, one of them: wording,
not data) and left out of the comparison (``hard``).
"""

from __future__ import annotations

import re
from collections import Counter

_ONES = ("zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen "
         "sixteen seventeen eighteen nineteen").split()
WORDS = {w: i for i, w in enumerate(_ONES)} | {
    w: (i + 2) * 10 for i, w in enumerate("twenty thirty forty fifty sixty seventy eighty ninety".split())}
SCALES = {"hundred": 100, "thousand": 1000, "million": 10**6, "billion": 10**9}
MULTIPLES = {"dozen": 12, "dozens": 12, "twice": 2, "double": 2, "doubles": 2, "doubled": 2, "triple": 3,
             "tripled": 3, "thrice": 3, "decade": 10, "decades": 10, "century": 100}
DENOMINATORS = {"half": 2, "halves": 2, "third": 3, "thirds": 3, "quarter": 4, "quarters": 4, "fourth": 4,
                "fourths": 4, "fifth": 5, "fifths": 5, "sixth": 6, "sixths": 6, "seventh": 7, "sevenths": 7,
                "eighth": 8, "eighths": 8, "ninth": 9, "ninths": 9, "tenth": 10, "tenths": 10}
SOFT = frozenset({0.0, 1.0})
_WORDS_RE = "|".join(sorted([*WORDS, *SCALES, *MULTIPLES, *DENOMINATORS], key=len, reverse=True))
_NUMBER_RE = r"(\d{1,3}(?:,\d{3})+|\d+)(\.\d+)?(?:\s*/\s*(\d+))?|\b(?:" + _WORDS_RE + r")\b"
_TOKEN_I = re.compile(_NUMBER_RE, re.I)  # where lower-casing changes the text's length
# on lower-cased text, the same matches in two passes that skip ahead in C: the digits (their first character a
# digit), and the runs of letters that are a number word with no word character on either side (as \b asks)
_DIGITS = re.compile(r"(\d(?:\d{0,2}(?:,\d{3})+|\d*))(\.\d+)?(?:\s*/\s*(\d+))?")
_LETTERS = re.compile(r"[a-z]+")
_NUMBER_WORDS = frozenset([*WORDS, *SCALES, *MULTIPLES, *DENOMINATORS])
_JOIN = re.compile(r"[\s-]*")
_FRACTION_CUE = re.compile(r"\b(?:a|an|one|per)[\s-]+$")  # "a third", "one quarter": a fraction
_NAME = re.compile(r"(?<![.!?]\s)(?<!^)\b[A-Z][a-z]{2,}\b")
_DEF = re.compile(r"\bdef\s+([A-Za-z_]\w*)\s*\(([^)]*)\)")
_PARAM = re.compile(r"^\s*\*{0,2}([A-Za-z_]\w*)")


def numbers(text: str) -> Counter:
    """Every number of ``text`` with its count, values rounded to 4 decimals."""
    return Counter(round(v, 4) for v, _ in number_positions(text))


def number_positions(text: str) -> list[tuple[float, int]]:
    """(value, character offset) of every number of ``text``, in order.  Only number tokens are matched
    (the number pattern's matches, ``_tokens``); number words are joined where nothing but spaces or hyphens lies
    between them."""
    out: list[tuple[float, int]] = []
    cur: float | None = None
    cur_at, last_end = 0, -1

    def flush() -> None:
        nonlocal cur
        if cur is not None:
            out.append((cur, cur_at))
            cur = None

    low = text.lower()
    for start, end, whole, frac, den, word in _tokens(text, low):
        # only a number word being built (cur) can be joined with the next one
        if cur is not None and not (last_end >= 0 and _JOIN.fullmatch(text, last_end, start) is not None):
            flush()
        last_end = end
        if whole is not None:
            flush()
            v = float(whole.replace(",", "") + (frac or ""))
            if den and float(den):
                v /= float(den)
            out.append((v, start))
            last_end = -1  # a digit number is never joined with a word after it
            continue
        w = word.lower()
        if w in WORDS:
            v = WORDS[w]
            if cur is not None and cur % 100 >= 20 and cur % 10 == 0 and v < 10:
                cur += v  # twenty-five
            elif cur is not None and cur >= 100 and cur % 100 == 0 and v < 100:
                cur += v  # three hundred twenty
            else:
                flush()
                cur, cur_at = v, start
        elif w in SCALES:
            if cur is not None:
                cur *= SCALES[w]
        elif w in DENOMINATORS:  # a quarter, two-thirds, half; not an ordinal (the third day)
            if cur is None and not w.startswith(("half", "halves")) and not _FRACTION_CUE.search(low, max(0, start - 8), start) \
                    and not low.startswith(" of", end):
                continue
            num = cur if cur is not None and cur <= 10 else 1
            at = cur_at if cur is not None and cur <= 10 else start
            if cur is not None and cur <= 10:
                cur = None
            flush()
            out.append((num / DENOMINATORS[w], at))
        else:  # MULTIPLES
            if cur is not None and w.startswith("dozen"):
                out.append((cur * 12, cur_at))  # three dozen
                cur = None
                continue
            flush()
            out.append((MULTIPLES[w], start))
    flush()
    return out


def _tokens(text: str, low: str) -> list[tuple]:
    """(start, end, digits, decimals, denominator, word) of every match of the number pattern in ``low``, in
    order (``text`` read with re.I where lower-casing changes its length)."""
    if len(low) != len(text):
        return [(m.start(), m.end(), *m.groups(), m.group(0)) for m in _TOKEN_I.finditer(text)]
    out = [(m.start(), m.end(), *m.groups(), None) for m in _DIGITS.finditer(low)]
    n, words = len(low), []
    for m in _LETTERS.finditer(low):
        w = m.group()
        if w in _NUMBER_WORDS:
            a, z = m.start(), m.end()
            if (a == 0 or not word_char(low[a - 1])) and (z == n or not word_char(low[z])):
                words.append((a, z, None, None, None, w))
    return sorted(out + words) if words else out  # no two start at one offset


def word_char(ch: str) -> bool:
    return ch.isalnum() or ch == "_"  # re's \w


def hard(counts: Counter) -> Counter:
    """The numbers that are data, not wording (0 and 1 left out)."""
    return Counter({v: c for v, c in counts.items() if v not in SOFT})


def names(text: str) -> set[str]:
    """Capitalised words that do not open a sentence (Janet, Seattle): the named entities, roughly."""
    return {m.group(0) for m in _NAME.finditer(text)}


def signature(code: str) -> tuple[str, tuple[str, ...]] | None:
    """(function name, parameter names) of the first ``def`` in ``code``, or None."""
    m = _DEF.search(code)
    if m is None:
        return None
    params = tuple(p.group(1) for p in (_PARAM.match(x) for x in m.group(2).split(",")) if p)
    return m.group(1), params


def signatures(code: str) -> set[tuple[str, tuple[str, ...]]]:
    """(function name, parameter names) of every ``def`` in ``code``."""
    return {(m.group(1), tuple(p.group(1) for p in (_PARAM.match(x) for x in m.group(2).split(",")) if p))
            for m in _DEF.finditer(code)}


# words a multiple-choice stem is made of whatever it asks: left out of its content words
_STOP = frozenset("""the and for with that this these those which what who whom whose when where why how
from into about over under between during after before than then such not but its their there they them
are was were been being has have had does did can could would should may might must will shall also some any
all each other most more least less following statement statements true false correct best describes describe
example answer question questions refers information""".split())
STEM_WORD = re.compile(r"[a-z][a-z'-]+")
STEM = 6  # a word's first six letters stand for it ("colonized", "colonization"; "competed", "competition")


def stems(text: str) -> set[str]:
    """The content words of ``text``, lower-cased and cut to their first ``STEM`` letters (a crude stem that
    keeps a rewording's "manipulate"/"manipulation" together), stop words and words under 3 letters left out."""
    out = set()
    for w in STEM_WORD.findall(text.lower()):
        w = w.strip("'-")
        if len(w) >= 3 and w not in _STOP:
            out.add(w[:STEM])
    return out


def stem_set(text: str) -> set[str]:
    """``stems(text)``, each distinct word read once: the same set, for lookups (it may iterate in another order)."""
    words = {w.strip("'-") for w in STEM_WORD.findall(text.lower())}
    return {w[:STEM] for w in words if len(w) >= 3 and w not in _STOP}


# a quote not after a quote or a word character, up to 40 characters, the same quote not followed by a quote (the
# pattern opens with the quote, which re finds by its first character; the lookbehind reads the quote and the one before)
_STRING = re.compile(r"""(["'])(?<!["'\w].)([^"'\n]{1,40})\1(?!["'])""")


def literals(text: str) -> set[str]:
    """The values a code task's examples and tests are made of, as tokens: its string literals ("s:abc") and
    numbers that are data ("n:3.5"); a rewrite renames the function and rewords the docstring but keeps them."""
    return string_literals(text) | {"n:" + _fmt(v) for v in hard(numbers(text))}


def string_literals(text: str) -> set[str]:
    """The string literals of ``text`` as tokens ("s:abc", lower-cased)."""
    return {w for _, w in string_positions(text)}


def string_positions(text: str) -> list[tuple[int, str]]:
    """(offset, token) of every string literal of ``text``."""
    if "'" not in text and '"' not in text:
        return []
    return [(m.start(), "s:" + m.group(2).lower()) for m in _STRING.finditer(text)]


def _fmt(v: float) -> str:
    return str(int(v)) if float(v).is_integer() else str(v)


_ASK = re.compile(r"\?|\b(how|what|which|who|whom|when|where|why|find|calculate|determine|compute|work out|figure out)\b", re.I)


def asks(text: str) -> bool:
    """Whether the last sentence of ``text`` asks something (a question mark or a question or task word)."""
    body = text.rstrip()
    cut = max(body.rfind(".", 0, len(body) - 1), body.rfind("!", 0, len(body) - 1), body.rfind("\n"))
    return bool(_ASK.search(body[cut + 1:]))


def final_answer(answer: str) -> float | None:
    """The value after GSM8K's ``####`` (None when the answer has none or it is no number)."""
    if "####" not in answer:
        return None
    vals = numbers(answer.rsplit("####", 1)[1])
    return next(iter(vals)) if len(vals) == 1 else None


# an example of a code task: a call and what it gives, as a doctest (">>> f(x)" over its output) or on one line
# ("f(x) == y", "f(x) ➞ y", "f(x) returns y")
_CALL = re.compile(r"^\s*(?:>>>\s*)?[A-Za-z_][\w.]*\s*(\(.*\))\s*"
                   r"(?:(?:==>|==|=>|->|➞|\breturns?\b|\bshould return\b|\bshould be\b)\s*(.+?))?\s*$")
_GLUE = re.compile(r"[\s'\"]+")


def example_text(text: str) -> str:
    """``text`` as examples are compared: lower-cased, without spaces or quotes (a rewrite may requote a string
    or space a list), so that a call's arguments and its output read the same however they are laid out."""
    return _GLUE.sub("", text).lower()


def examples(text: str) -> tuple[tuple[str, str], ...]:
    """(arguments, output) of every example of a code task's prompt, each in ``example_text`` form: a doctest
    call and the line under it, or a call with its result on the same line.  A comment after the output is
    dropped, and an output written as a sum ("19 - 5 - 6 = 8") is its value."""
    out = []
    lines = text.splitlines()
    for k, line in enumerate(lines):
        m = _CALL.match(line)
        if m is None:
            continue
        res = m.group(2)
        if res is None and line.lstrip().startswith(">>>") and k + 1 < len(lines):
            nxt = lines[k + 1].strip()
            if nxt and not nxt.startswith((">>>", '"""', "'''")):
                res = nxt
        if res is None:
            continue
        res = res.split("#")[0]
        if "=" in res and "==" not in res and not res.lstrip().startswith(("[", "(", "{")):
            res = res.rsplit("=", 1)[1]
        args, res = example_text(m.group(1)), example_text(res).rstrip(".,;")
        if args and res:
            out.append((args, res))
    return tuple(out)


def examples_kept(item_examples: tuple, window: str) -> str | None:
    """None where ``window`` keeps what it shows of an item's examples (or shows none of them and no example of
    its own); else what differs: "output changed" (a call of the item's is there, followed by another output),
    "cut at an example" (the window ends at a call of the item's: what it gives is left out, and a window that
    shows it is the evidence), "other examples" (the window's examples are none of the item's) or "example
    replaced" (the window shows an example of its own where one of the item's is missing)."""
    if not item_examples:
        return None
    w = example_text(window)
    shown, missing = False, False
    for args, res in item_examples:
        others = [a for a, _ in item_examples if a != args and len(a) > 2]
        at, seen = w.find(args), None
        while at >= 0:
            after = w[at + len(args):]
            # the output is this call's: it lies before the next example begins
            ends = [len(res) + EXAMPLE_SLACK] + [k for k in (after.find(">>>"), *(after.find(b) for b in others)) if k >= 0]
            if res in after[:min(ends)]:
                shown, seen = True, None
                break
            seen = "output changed" if after else "cut at an example"
            at = w.find(args, at + 1)
        if seen:
            return seen  # another output, or a window that stops at the call and hides what it gives
        missing = missing or at < 0
    own = {a for a, _ in item_examples}
    foreign = [a for a, _ in examples(window) if a not in own]
    if foreign and not shown:
        return "other examples"
    if foreign and missing:
        return "example replaced"  # one of the item's calls gone, another in its place: the task changed
    return None


EXAMPLE_SLACK = 40  # characters (spaces and quotes left out) an output may lie after its call: "the function returns"


_PART = re.compile(r"\b(?:scenario|statement|source|passage)\s+\d+\s*[|:.]", re.I)


def stem_parts(question: str) -> list[str]:
    """The parts of a multiple-choice stem that tell it from other items built on the same frame: its labelled
    parts ("Scenario 1 | ...", "Statement 2 | ...": items pair the same ones in other combinations), else its last
    line where it has several (the question asked of a passage, or the sentence after a shared instruction).
    A single-line stem has none: it is one part."""
    cuts = [m.start() for m in _PART.finditer(question)]
    if len(cuts) >= 2:
        return [question[a:b] for a, b in zip(cuts, cuts[1:] + [len(question)])]
    lines = [x for x in question.splitlines() if x.strip()]
    return [lines[-1]] if len(lines) >= 2 else []


# an option's label: "A. ", "(b) ", "C) " at a line's start or after a space, not an initial ("W. E. B. Du Bois")
_OPTION = re.compile(r"(?:^|(?<=\s))(?<![A-Z]\.\s)(?:\(?[A-D][.)]|\(?[a-d]\))\s+(?![A-Z]\.\s)", re.M)


def before_options(window: str) -> str:
    """The text of ``window`` before its first option label: what it says of a multiple-choice stem (a window
    made of options, "A. transnational corporations B. ...", says nothing of it)."""
    m = _OPTION.search(window)
    return window if m is None else window[:m.start()]
