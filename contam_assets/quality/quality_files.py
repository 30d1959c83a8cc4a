"""quality.json and quality.html from the quality tables (every preset measured on one suite)."""

from __future__ import annotations

from datetime import datetime, timezone

import polars as pl

from contam_assets.quality.leaks import LEAK_TYPES
from contam_assets.report.inert import html_text

PRESET_ORDER = ("default", "thorough", "olmo-web", "olmo-synth")
LEAK_NOTES = {
    "verbatim": "question + answer copied as is",
    "case": "upper / lower / title case",
    "whitespace": "extra spaces, tabs, no-break spaces, indentation",
    "line_breaks": "hard-wrapped, joined, CRLF, one sentence per line",
    "punctuation": "typographic quotes and dashes, swapped or stripped punctuation",
    "json_escaped": "inside a JSON string (\\n, \\\", \\uXXXX)",
    "python_escaped": "inside Python string literals (repr, pprint)",
    "html_wrapped": "in an HTML page; some with entity-escaped quotes",
    "question_only": "the question without its answer",
    "answer_only": "the answer / worked solution without the question",
    "solution_only": "code: the reference solution alone (derived suite, held for review)",
    "question_middle_cut": "20-40 % of the question's words cut from the middle",
    "mc_options_changed": "options reordered and/or relabelled",
    "benchmark_dump": "5-12 items of one split in a JSONL / CSV / markdown / eval-log / quiz-with-key file",
    "numbers_changed": "GSM8K item with its numbers changed (template copies; GSM-Hard's changed items)",
}


def _order(presets) -> list[str]:
    return sorted(presets, key=lambda p: (PRESET_ORDER.index(p) if p in PRESET_ORDER else 99, p))


def _leak_order(leaks) -> list[str]:
    known = list(LEAK_TYPES)
    return sorted(leaks, key=lambda x: (known.index(x) if x in known else 99, x))


def build_json(data: dict, suite_meta: dict) -> dict:
    """The quality.json document (see docs/quality.md for the fields)."""
    out = {"suite": {k: suite_meta.get(k) for k in ("seed", "per_type", "tasks", "documents", "planted_items", "digest", "pool", "skipped")},
           "generated_at": datetime.now(timezone.utc).isoformat(timespec="seconds"), "presets": {}}
    for p in _order(data):
        d = data[p]
        s = d["summary"]
        leaks: dict[str, dict] = {}
        for r in d["scores"].to_dicts():
            row = {k: r.get(k) for k in ("planted", "flagged", "held_for_review", "candidates", "recall", "candidate_recall",
                                         "precision", "documents", "documents_removed", "same_template")}
            entry = leaks.setdefault(r["leak_type"], {"tasks": {}})
            if r["task"] == "ALL":
                entry.update(row)
            else:
                entry["tasks"][r["task"]] = row
        fp = s.get("false_positives", {})
        out["presets"][p] = {
            "measured_at": d["measured_at"], "config": s.get("config"),
            "leak_types": {k: leaks[k] for k in _leak_order(leaks)},
            "clean": {"documents": fp.get("documents"), "false_positives": fp.get("flagged_documents"),
                      "false_positives_removed": fp.get("removed_documents"), "per_million": fp.get("per_million"),
                      "upper95_per_million": fp.get("upper95_per_million"), "by_origin": d["clean"].to_dicts(),
                      "examples": fp.get("examples", [])},
            "hard_negatives": s.get("hard_negatives", {}),
            "item_split": {"tasks": {r["task"]: {k: v for k, v in r.items() if k != "task"} for r in d["item_split"].to_dicts()},
                           "removed_documents": s.get("removed_documents")},
            "targets": s.get("targets", []),
            "seconds": {"index": s.get("index_seconds"), "scan": s.get("scan_seconds")},
        }
    return out


# -- HTML ----------------------------------------------------------------------------------

CSS = """
body{font:15px/1.5 -apple-system,Segoe UI,Helvetica,Arial,sans-serif;color:#1d2330;max-width:1180px;margin:2em auto;padding:0 1.2em}
h1{font-size:1.7em;margin-bottom:.2em}h2{margin-top:2em;border-bottom:1px solid #dde2ea;padding-bottom:.2em}
h3{margin-top:1.4em}.sub{color:#5b6475}table{border-collapse:collapse;margin:.6em 0 1.2em;font-size:13.5px}
th,td{border:1px solid #dde2ea;padding:4px 8px;text-align:right;vertical-align:top}th{background:#f4f6fa}
td.l,th.l{text-align:left}.pass{color:#1e7b34;font-weight:600}.fail{color:#b3261e;font-weight:600}
.cell{min-width:54px}.na{color:#9aa3b2}code,pre{font:12.5px/1.4 ui-monospace,Menlo,Consolas,monospace}
pre{white-space:pre-wrap;background:#f7f8fb;border:1px solid #e3e7ee;padding:.5em;max-height:12em;overflow:auto;margin:0}
.note{background:#fff8e6;border-left:4px solid #f0b429;padding:.6em 1em;margin:1em 0}
.small{font-size:12.5px;color:#5b6475}
"""


def _e(x) -> str:
    return html_text("" if x is None else str(x))


def _pct(v) -> str:
    return "–" if v is None else f"{100 * v:.1f}%"


def _color(v) -> str:
    if v is None:
        return ""
    # red (0) -> amber -> green (1)
    r = int(220 - 150 * v) if v > 0.5 else 220
    g = int(90 + 120 * v) if v > 0.5 else int(90 + 150 * v)
    return f"background:rgba({r},{g},90,0.28)"


def _table(rows: list[dict], cols: list[str], left: tuple[str, ...] = ()) -> str:
    if not rows:
        return "<p class='na'>none</p>"
    head = "".join(f"<th class='{'l' if c in left else ''}'>{_e(c)}</th>" for c in cols)
    body = []
    for r in rows:
        tds = []
        for c in cols:
            v = r.get(c)
            if isinstance(v, float):
                v = f"{v:.4g}"
            tds.append(f"<td class='{'l' if c in left else ''}'>{_e(v)}</td>")
        body.append("<tr>" + "".join(tds) + "</tr>")
    return f"<table><tr>{head}</tr>{''.join(body)}</table>"


def _recall_matrix(scores: pl.DataFrame, value: str) -> str:
    if scores.height == 0:
        return "<p class='na'>no scores</p>"
    tasks = sorted(t for t in scores["task"].unique().to_list() if t != "ALL") + ["ALL"]
    by = {(r["leak_type"], r["task"]): r for r in scores.to_dicts()}
    head = "<tr><th class='l'>leak type</th>" + "".join(f"<th>{_e(t)}</th>" for t in tasks) + "</tr>"
    rows = []
    for leak in _leak_order(scores["leak_type"].unique().to_list()):
        tds = []
        for t in tasks:
            r = by.get((leak, t))
            if r is None:
                tds.append("<td class='na'>·</td>")
            else:
                v = r[value]
                title = f"planted {r['planted']}, flagged {r['flagged']}, held for review {r['held_for_review']}, candidates {r['candidates']}"
                tds.append(f"<td class='cell' style='{_color(v)}' title='{_e(title)}'>{_pct(v)}<br><span class='small'>{r['flagged'] if value == 'recall' else r['candidates']}/{r['planted']}</span></td>")
        rows.append(f"<tr><td class='l'><b>{_e(leak)}</b><br><span class='small'>{_e(LEAK_NOTES.get(leak, ''))}</span></td>{''.join(tds)}</tr>")
    return f"<table>{head}{''.join(rows)}</table>"


def render_html(data: dict, suite_meta: dict) -> str:
    presets = _order(data)
    parts = [f"<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'><title>Detector quality</title><style>{CSS}</style></head><body>",
             "<h1>Detector quality, measured</h1>",
             f"<p class='sub'>Planted-contamination suite seed {_e(suite_meta.get('seed'))}, {_e(suite_meta.get('per_type'))} documents per leak type and task; "
             f"tasks {_e(', '.join(suite_meta.get('tasks') or []))}; documents {_e(suite_meta.get('documents'))}; "
             f"{_e(suite_meta.get('planted_items'))} planted items; suite digest <code>{_e(suite_meta.get('digest'))}</code>. "
             f"Presets measured: {_e(', '.join(presets) or 'none')}.</p>"]
    if not presets:
        parts.append("<p class='note'>No preset has been measured on this suite yet: materialize <code>detector_quality</code>.</p></body></html>")
        return "".join(parts)

    for p in presets:
        if not data[p]["summary"].get("targets"):
            continue
        parts.append(f"<h2>Targets ({_e(p)} preset)</h2>")
        trs = "".join(f"<tr><td class='l'>{_e(t['name'])}</td><td>{_e(t['value'])}</td><td>{_e(t['target'])}</td>"
                      f"<td class='{'pass' if t['passed'] else 'fail'}'>{'pass' if t['passed'] else 'FAIL'}</td></tr>"
                      for t in data[p]["summary"]["targets"])
        parts.append(f"<table><tr><th class='l'>target</th><th>value</th><th>bound</th><th>result</th></tr>{trs}</table>")

    parts.append("<h2>Recall per leak type, all presets</h2><p class='small'>Recall = planted items with a flagged match pointing at them / planted items "
                 "(derived-suite matches held for review count). Candidate recall counts any stored match at or above the report floor.</p>")
    head = "<tr><th class='l'>leak type</th>" + "".join(f"<th>{_e(p)}<br>recall</th><th>{_e(p)}<br>candidates</th><th>{_e(p)}<br>precision</th>" for p in presets) + "</tr>"
    leaks = set()
    for p in presets:
        leaks |= set(data[p]["scores"]["leak_type"].unique().to_list())
    rows = []
    for leak in _leak_order(leaks):
        tds = []
        for p in presets:
            r = next((x for x in data[p]["scores"].to_dicts() if x["leak_type"] == leak and x["task"] == "ALL"), None)
            if r is None:
                tds.append("<td class='na'>·</td>" * 3)
                continue
            tds.append(f"<td style='{_color(r['recall'])}'>{_pct(r['recall'])}</td><td>{_pct(r['candidate_recall'])}</td><td>{_pct(r['precision'])}</td>")
        rows.append(f"<tr><td class='l'>{_e(leak)}</td>{''.join(tds)}</tr>")
    parts.append(f"<table>{head}{''.join(rows)}</table>")

    parts.append("<h2>False positives</h2><p class='small'>A clean or hard-negative document with any flagged match is a false positive. "
                 "The upper bound is one-sided 95 % (Clopper-Pearson); with a few thousand clean documents it is loose.</p>")
    fp_rows = []
    for p in presets:
        s = data[p]["summary"]
        fp = s.get("false_positives", {})
        hn = s.get("hard_negatives", {}).get("total", {})
        fp_rows.append({"preset": p, "clean documents": fp.get("documents"), "flagged": fp.get("flagged_documents"),
                        "removed": fp.get("removed_documents"), "per million": fp.get("per_million"),
                        "95% upper bound per million": fp.get("upper95_per_million"),
                        "hard negatives": hn.get("documents"), "hard-negative false positives": hn.get("false_positives")})
    parts.append(_table(fp_rows, list(fp_rows[0]), left=("preset",)))
    for p in presets:
        hn = data[p]["summary"].get("hard_negatives", {})
        parts.append(f"<h3>{_e(p)}: clean documents by origin, hard negatives by source</h3>")
        parts.append(_table(data[p]["clean"].to_dicts(), data[p]["clean"].columns, left=("doc_class", "kind")))
        parts.append(_table([{"source": k, **v} for k, v in hn.items()], ["source", "documents", "false_positives"], left=("source",)))
        ex = data[p]["summary"].get("false_positives", {}).get("examples") or []
        if ex:
            parts.append("<p>Flagged clean documents:</p>" + _table(ex, list(ex[0]), left=("doc_id", "task", "split", "subject", "suites")))

    parts.append("<h2>Item split (seed 003)</h2><p class='small'>For every instance: is it flagged anywhere, and does its normalised question "
                 "occur in a removed document? Recall given presence = flagged and present / present.</p>")
    for p in presets:
        parts.append(f"<h3>{_e(p)}</h3>")
        parts.append(_table(data[p]["item_split"].to_dicts(), data[p]["item_split"].columns, left=("task",)))

    for p in presets:
        parts.append(f"<h2>Per task: {_e(p)}</h2><h3>Recall</h3>")
        parts.append(_recall_matrix(data[p]["scores"], "recall"))
        parts.append("<h3>Candidate recall (stored at or above the report floor)</h3>")
        parts.append(_recall_matrix(data[p]["scores"], "candidate_recall"))

    if "default" in data:
        misses = data["default"]["misses"]
        parts.append("<h2>Examples of misses (default preset)</h2><p class='small'>Up to three per leak type: the planted item, "
                     "the best stored candidate (if any) and its matched text.</p>")
        if misses.height:
            rows = []
            for (leak,), g in misses.group_by(["leak_type"], maintain_order=True):
                for r in g.head(3).to_dicts():
                    inst = f"{r['task']}/{r['split']}/{r['instance_index']}" + (f" ({r['subject']})" if r["subject"] else "")
                    best = "–" if r["best_score"] is None else f"{r['best_score']:.3f}"
                    rows.append(f"<tr><td class='l'>{_e(leak)}<br><span class='small'>{_e(r['variant'])}</span></td>"
                                f"<td class='l'>{_e(inst)}<br><span class='small'>{_e(r['doc_id'])}</span></td>"
                                f"<td>{best}</td>"
                                f"<td class='l'><pre>{_e((r.get('training_text') or '(no candidate stored)')[:700])}</pre></td></tr>")
            parts.append("<table><tr><th class='l'>leak type</th><th class='l'>instance</th><th>best score</th><th class='l'>matched text</th></tr>"
                         + "".join(rows) + "</table>")
        else:
            parts.append("<p>No misses.</p>")

    parts.append("<h2>What counts</h2><ul class='small'>"
                 "<li>A planted item is caught when a flagged match in its document points at it (task, split, instance, subject) "
                 "or at an instance with the same normalised question.</li>"
                 "<li>A flagged match in a planted document is correct when its instance is in the document's truth, is an identical-text "
                 "twin of a planted item, or its whole normalised question occurs in the document; otherwise it is stray (counts against precision).</li>"
                 "<li>Clean documents: web-style host text, Python standard-library code and the Python language reference; hard negatives: "
                 "Skywork's mock GSM8K problems and GSM-Hard's changed items (a flagged GSM8K match on them is a false positive).</li>"
                 "<li>Planted items are drawn from instances the detector indexes (decon skips instances under 20 tokens).</li></ul>")
    parts.append(f"<p class='small'>Generated {datetime.now(timezone.utc).isoformat(timespec='seconds')} by contam-assets.</p></body></html>")
    return "".join(parts)
