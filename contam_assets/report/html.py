"""Removal report: one self-contained HTML page a person can review.

Counts per task, split, source and shard; a score histogram; the source x benchmark
matrix (removed documents and tokens, table and heat map); the documents waiting for a
review; and the top matches shown as a review pair: the evaluation instance beside the
training document as it is in the pool (raw text, matched spans marked; the normalised
text only when the pool cannot be read).  Sections fold (``<details>``) so the page
opens short; documents and matches are counted separately and labelled as such.
"""

from __future__ import annotations

import base64
import io
import json
import re
from datetime import datetime, timezone
from pathlib import Path

import duckdb

from contam_assets.detector.text import clean_text
from contam_assets.report.estimate_section import estimate_section
from contam_assets.report.inert import html_text
from contam_assets.report.matrix import heatmap_png, source_task_matrix
from contam_assets.report.raw_text import RawDocument, raw_documents
from contam_assets.report.thorough_sections import card_note, thorough_sections
from contam_assets.store.shards import file_counts, file_counts_line
from contam_assets.store.tables import REMOVABLE_SQL
from contam_assets.store.translated_matches import DIRECT, exposure_lines

SHARED_WINDOW = 3  # words: a run of this many words found on both sides is highlighted


def _q(con, sql, params=()):
    cur = con.execute(sql, list(params))
    cols = [d[0] for d in cur.description]
    return [dict(zip(cols, row)) for row in cur.fetchall()]


def histogram_png(scores: list[float], flagged: list[bool], floor: float = 0.5) -> bytes:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 2.6), dpi=100)
    bins = [floor + i * (1.0 - floor) / 20 for i in range(21)]
    ax.hist([s for s, f in zip(scores, flagged) if f], bins=bins, color="#c0392b", label="flagged", alpha=0.85)
    ax.hist([s for s, f in zip(scores, flagged) if not f], bins=bins, color="#7f8c8d", label="stored, not flagged", alpha=0.85)
    ax.set_xlabel("contamination score")
    ax.set_ylabel("matches")
    ax.legend(frameon=False, fontsize=8)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    plt.close(fig)
    return buf.getvalue()


def marked_eval_text(eval_text: str, train_text: str) -> str:
    """Eval text as HTML (whitespace kept), words in a run of SHARED_WINDOW words also in the training text marked."""
    parts = re.split(r"(\s+)", eval_text)
    word_idx = [i for i, p in enumerate(parts) if p and not p.isspace()]
    train = clean_text(train_text).split()
    grams = {tuple(train[i : i + SHARED_WINDOW]) for i in range(len(train) - SHARED_WINDOW + 1)}
    flat: list[tuple[int, str]] = []  # (part index, cleaned piece): a word may clean to several pieces
    for pi in word_idx:
        for piece in clean_text(parts[pi]).split():
            flat.append((pi, piece))
    marked: set[int] = set()
    for i in range(len(flat) - SHARED_WINDOW + 1):
        if tuple(p for _, p in flat[i : i + SHARED_WINDOW]) in grams:
            marked.update(pi for pi, _ in flat[i : i + SHARED_WINDOW])
    out = []
    for i, p in enumerate(parts):
        esc = html_text(p)
        out.append(f"<mark>{esc}</mark>" if i in marked else esc)
    return "".join(out)


def _segments_html(segments_json: str) -> str:
    parts = []
    for s in json.loads(segments_json or "[]"):
        t = html_text(s["text"])
        if s["kind"] == "question" or s["kind"] == "passage":
            parts.append(f'<mark class="{s["kind"]}">{t}</mark>')
        elif s["kind"] == "answer":
            parts.append(f'<span class="answer" title="matched answer">{t}</span>')
        else:
            parts.append(f'<span class="ctx">{t}</span>')
    return " ".join(parts)


def _table(rows: list[dict], cols: list[str]) -> str:
    if not rows:
        return "<p class='muted'>none</p>"
    head = "".join(f"<th>{html_text(c)}</th>" for c in cols)
    body = "".join("<tr>" + "".join(f"<td>{html_text('' if r.get(c) is None else str(r.get(c)))}</td>" for c in cols) + "</tr>" for r in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _match_card(m: dict, rank: int, raw: RawDocument | None = None, open_: bool = False) -> str:
    train = " ".join(s["text"] for s in json.loads(m["training_segments"] or "[]") if s["kind"] == "question")
    eval_q = marked_eval_text(m["eval_question"] or "", train)
    answer_html = ""
    if m["eval_answer"]:
        cls = "answer-found" if (m["answer_overlap"] or 0) > 0 else "answer-missing"
        answer_html = f'<div class="label">answer</div><div class="{cls}">{html_text(m["eval_answer"])}</div>'
    passage_html = ""
    if m["eval_passage"]:
        passage_html = f'<div class="label">passage</div><div>{html_text(m["eval_passage"][:1500])}</div>'
    status = "flagged" if m["flagged"] else "near miss"
    if m["needs_review"]:
        status += " · needs review"
    status += card_note(m)  # the rule that made the match, and its twins
    subj = f" · {html_text(m['subject'])}" if m["subject"] else ""
    if raw is not None and raw.text is not None:
        doc_html, doc_label = raw.html(), "raw text"
        if raw.note:
            doc_label += f" ({html_text(raw.note)})"
    else:
        doc_html = _segments_html(m["training_segments"])
        doc_label = "normalised text" + (f" — {html_text(raw.note)}" if raw is not None and raw.note else "")
    choice = ""
    if m["choice_index"] is not None:
        choice = f" · choice {m['choice_index']}" + (" (correct)" if m["is_correct"] else "")
    fmt = lambda v: "–" if v is None else f"{v:.3f}"
    return f"""
<details class="card {'flag' if m['flagged'] else 'near'}" id="m-{html_text(m['match_id'])}"{' open' if open_ else ''}>
  <summary><span class="rank">#{rank}</span> <b>{html_text(m['suite'])}</b> · {html_text(m['split'])} · instance {m['instance_index']}{subj}{choice}
  <span class="score">score {m['score']:.3f} (needs {m['required_score']:.3f}) · {status}</span></summary>
  <div class="pair">
    <div class="side"><div class="label">evaluation instance</div><div class="q">{eval_q}</div>{answer_html}{passage_html}</div>
    <div class="side"><div class="label">training document · {html_text(m['shard'])} line {m['line']} · {html_text(str(m['doc_id']))}{' · ' + html_text(m['source']) if m['source'] else ''} · {doc_label}</div>
      <div class="doc">{doc_html}</div></div>
  </div>
  <footer>overlap: question {fmt(m['question_overlap'])} · answer {fmt(m['answer_overlap'])} · passage {fmt(m['passage_overlap'])} · match id <code>{html_text(m['match_id'])}</code></footer>
</details>"""


CSS = """
body{font-family:system-ui,-apple-system,'Segoe UI',Roboto,sans-serif;margin:2rem auto;max-width:1200px;color:#222;padding:0 1rem}
h1{font-size:1.6rem} h2{margin-top:2rem;border-bottom:1px solid #ddd;padding-bottom:.3rem}
.kpis{display:flex;gap:1rem;flex-wrap:wrap}.kpi{background:#f4f6f8;border-radius:8px;padding:.6rem 1rem}
.kpi b{display:block;font-size:1.4rem}.muted{color:#888}
table{border-collapse:collapse;margin:.5rem 0;font-size:.9rem}th,td{border:1px solid #ddd;padding:.25rem .6rem;text-align:left}
th{background:#f4f6f8}.grid{display:flex;flex-wrap:wrap;gap:0 2.5rem;align-items:flex-start}
.card{border:1px solid #ddd;border-radius:8px;margin:1rem 0;overflow:hidden}.card.flag{border-left:6px solid #c0392b}
.card.near{border-left:6px solid #95a5a6}.card summary{background:#fafafa;padding:.5rem .8rem;font-size:.95rem;cursor:pointer}
details.section>summary{font-size:1.25rem;font-weight:600;margin-top:1.5rem;border-bottom:1px solid #ddd;padding-bottom:.3rem;cursor:pointer}
td.heat{text-align:right}
.card footer{padding:.4rem .8rem;font-size:.8rem;color:#666;background:#fafafa}
.score{float:right;color:#444}.rank{color:#999}.pair{display:grid;grid-template-columns:1fr 1fr}
.side{padding:.6rem .8rem;font-size:.9rem;line-height:1.45;white-space:pre-wrap;word-break:break-word}
.side+.side{border-left:1px solid #eee}.label{font-size:.75rem;text-transform:uppercase;color:#888;margin:.2rem 0}
mark{background:#ffe58a;padding:0 1px}mark.passage{background:#d6eaff}mark.answer{background:#c8f7c5;border-bottom:2px solid #27ae60}
.answer{background:#c8f7c5;border-bottom:2px solid #27ae60;font-weight:600}
.answer-found{background:#c8f7c5;padding:.2rem}.answer-missing{color:#555;padding:.2rem;border-left:3px solid #e67e22}
.ctx{color:#555} code{font-size:.8rem}
"""


def _exists(con, name: str) -> bool:
    return bool(_q(con, "select count(*) n from information_schema.tables where table_name = ?", [name])[0]["n"])


def shard_health_html(con: duckdb.DuckDBPyConnection) -> str:
    """Shards that need a person: incomplete or failed ones, pool entries not read, shards retired; first, every pool
    file of the listing in exactly one class (store.shards.file_counts, the numbers of the run summary)."""
    counts = file_counts(con)
    parts = [f"<p class='files'>{html_text(file_counts_line(counts))}</p>"]
    cols = {r["column_name"] for r in _q(con, "select column_name from information_schema.columns where table_name = 'shard_stats'")}
    if "status" in cols:
        bad = _q(con, """select shard, status, status_reason as reason, error_offset, read from shard_stats
                         where coalesce(status, 'ok') <> 'ok' order by shard""")
        if bad:
            parts.append("<h3>incomplete or failed streams (quarantined: no mix file until replaced or accepted)</h3>"
                         + _table(bad, ["shard", "status", "reason", "error_offset", "read"]))
    if _exists(con, "shard_errors"):
        errs = _q(con, "select shard, step, message from shard_errors order by shard, step")
        if errs:
            parts.append("<h3>shards that failed a step</h3>" + _table(errs, ["shard", "step", "message"]))
    if _exists(con, "pool_skips"):
        skips = _q(con, "select path, reason from pool_skips order by path")
        if skips:
            parts.append(f"<h3>pool entries not read ({len(skips)})</h3>" + _table(skips[:500], ["path", "reason"]))
    if _exists(con, "retired_shards"):
        gone = _q(con, "select shard, retired_at, matches, removals, files from retired_shards order by retired_at desc, shard")
        if gone:
            parts.append(f"<h3>retired shards (left the pool; their rows and files removed) ({len(gone)})</h3>"
                         + _table(gone[:500], ["shard", "retired_at", "matches", "removals", "files"]))
    if len(parts) == 1:
        return parts[0] + "<p class='muted'>every shard was read to its end; nothing in the pool was skipped</p>"
    return "".join(parts)


PENDING_SQL = f"""
select shard, line, any_value(doc_id) as doc_id, any_value(source) as source, count(*) as matches,
       string_agg(distinct suite, ', ' order by suite) as suites, max(score) as best_score,
       string_agg(match_id, ' ' order by score desc) as match_ids
from ({REMOVABLE_SQL}) r
where flagged and needs_review and decision is null
  and not exists (select 1 from removals x where x.shard = r.shard and x.line = r.line)
group by shard, line order by best_score desc, shard, line
"""
OPEN_CARDS = 5  # the first top matches are unfolded
RAW_TEXT_SHARDS = 10  # the report reads raw text from at most this many shards (the others show normalised text)


def _section(title: str, body: str, open_: bool = True, anchor: str = "") -> str:
    ident = f' id="{anchor}"' if anchor else ""
    return f'<details class="section"{ident}{" open" if open_ else ""}><summary>{html_text(title)}</summary>{body}</details>'


def _matrix_html(con) -> str:
    m = source_task_matrix(con)
    if m.empty:
        return "<p class='muted'>no removed document</p>"
    peak = max(m.documents.values())
    head = "<tr><th rowspan=2>source</th>" + "".join(f"<th colspan=2>{html_text(t)}</th>" for t in m.tasks)
    head += "<th colspan=2>all tasks (each document once)</th></tr><tr>" + "<th>documents</th><th>tokens</th>" * (len(m.tasks) + 1) + "</tr>"
    body = []
    for s in m.sources:
        cells = []
        for t in m.tasks:
            d, k = m.documents.get((s, t), 0), m.tokens.get((s, t), 0)
            alpha = 0.08 + 0.6 * d / peak if d else 0
            cells.append(f'<td class="heat" style="background:rgba(192,57,43,{alpha:.2f})" data-task="{html_text(t)}">{d:,}</td>'
                         f'<td class="heat">{k:,}</td>')
        d, k = m.source_totals.get(s, (0, 0))
        body.append(f"<tr><th>{html_text(s)}</th>{''.join(cells)}<td class='heat'><b>{d:,}</b></td><td class='heat'><b>{k:,}</b></td></tr>")
    img = base64.b64encode(heatmap_png(m)).decode()
    return (f'<table class="matrix"><thead>{head}</thead><tbody>{"".join(body)}</tbody></table>'
            "<p class='muted'>A document with matches of several tasks is counted under each; the last columns count it once. "
            "Tokens: the scan's token count of the removed document.</p>"
            f'<img alt="heat map: removed documents per source and task" src="data:image/png;base64,{img}">')


def _reference_html(con) -> str:
    """Per task and split: instances, indexed, skipped by reason (detector/skips.py; no silent drops)."""
    if not _exists(con, "reference_summary"):
        return "<p class='muted'>not recorded</p>"
    rows = _q(con, "select * from reference_summary order by task, split")
    return ("<p class='muted'>Reasons: min_tokens (too short), min_unique_words, duplicate, unreadable, no_question. "
            "No preset indexes a skipped instance; short_covered counts indexed questions the thorough "
            "short_questions part looks up at every position.</p>"
            + _table(rows, ["task", "split", "instances", "indexed", "skipped", "reasons", "notes", "short_covered"]))


def render_report(con: duckdb.DuckDBPyConnection, title: str = "contam-assets removal report", top: int = 50,
                  settings: dict | None = None, pool_dir: Path | None = None, content_key: str = "text",
                  tokenizer: str = "cl100k", unescape: bool = True, histogram: bytes | None = None) -> str:
    """The report page; ``histogram``: the score histogram's PNG where the caller has drawn it already."""
    totals = _q(con, "select coalesce(sum(read),0) read, coalesce(sum(removed),0) removed, coalesce(sum(kept),0) kept, coalesce(sum(rejected),0) rejected, coalesce(sum(pending_review),0) pending, count(*) shards from shard_stats")[0]
    # the rows of translated tasks (via_task) repeat a direct match: counted once, in the exposure lines
    n_matches = _q(con, f"select count(*) n, count(*) filter (where flagged) f, count(distinct case when flagged then shard || ':' || line end) fd from matches where {DIRECT}")[0]
    by_task = _q(con, f"""select task, split, count(*) filter (where flagged) as flagged_matches,
        count(distinct case when flagged then shard || ':' || line end) as documents,
        count(*) filter (where not flagged) as near_misses, count(distinct instance_index) filter (where flagged) as instances
        from matches where {DIRECT} group by task, split order by flagged_matches desc, task, split""")
    by_suite = _q(con, f"""select suite, bool_or(needs_review) as needs_review, count(*) filter (where flagged) as flagged_matches,
        count(distinct case when flagged then shard || ':' || line end) as documents,
        count(*) filter (where not flagged) as near_misses from matches where {DIRECT} group by suite order by flagged_matches desc""")
    by_source = _q(con, "select coalesce(source, '(none)') as source, count(*) as removed_documents from removals group by 1 order by 2 desc")
    by_shard = _q(con, "select shard, read, removed, kept, rejected, pending_review, flagged, too_short from shard_stats order by shard")
    rejects = _q(con, "select shard, reject_reasons from shard_stats where rejected > 0 order by shard")
    scores = _q(con, f"select score, flagged from matches where {DIRECT}")
    top_rows = _q(con, f"select * from matches where {DIRECT} order by flagged desc, score desc, shard, line limit {int(top)}")
    pending = _q(con, PENDING_SQL)
    pending_matches = sum(r["matches"] for r in pending)
    img = ""
    if scores:
        png = histogram or histogram_png([r["score"] for r in scores], [r["flagged"] for r in scores])
        img = f'<img alt="score histogram" src="data:image/png;base64,{base64.b64encode(png).decode()}">'
    kpi = lambda label, v: f'<div class="kpi"><b>{v:,}</b>{html_text(label)}</div>'
    settings = settings or {}
    settings_html = _table([{"setting": k, "value": v} for k, v in settings.items()], ["setting", "value"])
    raws = raw_documents(pool_dir, top_rows, content_key, tokenizer, unescape, max_shards=RAW_TEXT_SHARDS) if top_rows else {}
    cards = "".join(_match_card(m, i + 1, raws.get(m["match_id"]), open_=i < OPEN_CARDS) for i, m in enumerate(top_rows))
    now = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    estimate = estimate_section(con)
    translated = "".join(f"<p>{html_text(line)}</p>" for line in exposure_lines(con))  # store/translated_matches.py
    counts = f"""<div class="grid"><div><h3>per task and split</h3>{_table(by_task, ['task','split','flagged_matches','documents','instances','near_misses'])}</div>
<div><h3>per suite</h3>{_table(by_suite, ['suite','needs_review','flagged_matches','documents','near_misses'])}</div>
<div><h3>removed documents per source</h3>{_table(by_source, ['source','removed_documents'])}</div></div>"""
    pending_body = f"""<p>{len(pending):,} document(s) with {pending_matches:,} flagged match(es) of derived suites (e.g.
<code>humaneval_solution</code>) wait for a decision; they are not removed until accepted: in the browser with
<code>contam review OUT --serve</code>, or <code>contam review OUT --accept MATCH_ID</code> (or <code>--reject</code>), then
<code>contam apply OUT</code>.</p>
{_table(pending[:200], ['shard','line','doc_id','source','suites','matches','best_score','match_ids'])}"""
    return f"""<!doctype html><html lang="en"><head><meta charset="utf-8"><title>{html_text(title)}</title>
<meta name="viewport" content="width=device-width, initial-scale=1"><style>{CSS}</style></head><body>
<h1>{html_text(title)}</h1><p class="muted">generated {now}</p>
<div class="kpis">{kpi('documents read', totals['read'])}{kpi('documents removed', totals['removed'])}{kpi('documents kept', totals['kept'])}
{kpi('documents rejected (bad input)', totals['rejected'])}{kpi('documents pending review', totals['pending'])}{kpi('matches stored', n_matches['n'])}{kpi('flagged matches', n_matches['f'])}{kpi('documents with a flagged match', n_matches['fd'])}</div>
{_section('Shards that need attention', shard_health_html(con), anchor='health')}
{_section(*estimate, anchor='estimate') if estimate else ''}
{_section('Settings', settings_html, open_=False, anchor='settings')}
{_section('Score distribution', img or "<p class='muted'>no matches</p>", anchor='scores')}
{_section('Removed documents and tokens: source x benchmark', _matrix_html(con), anchor='matrix')}
{_section('Counts', counts, anchor='counts')}
{_section('Translated tasks: items exposed through their sources', translated, anchor='translations') if translated else ''}
{_section('Reference set: instances indexed and skipped', _reference_html(con), anchor='reference')}
{_section('Per shard', _table(by_shard, ['shard','read','removed','kept','rejected','pending_review','flagged','too_short']), open_=False, anchor='shards')}
{_section('Rejected input', _table(rejects, ['shard','reject_reasons']), open_=False, anchor='rejects')}
{_section(f'Pending review: {len(pending):,} documents, {pending_matches:,} matches', pending_body, anchor='pending')}
{"".join(_section(title, body, open_=False, anchor=anchor) for title, body, anchor in thorough_sections(con))}
{_section(f'Top matches ({len(top_rows)})', '<p class="muted">Left: the evaluation instance, words shared with the training document highlighted. Right: the training document as it is in the pool, matched question <mark class="question">highlighted</mark>, passage <mark class="passage">in blue</mark>, matched answer <mark class="answer">marked</mark>; the first five unfolded.</p>' + (cards or "<p class='muted'>no matches</p>"), anchor='top')}
</body></html>"""
