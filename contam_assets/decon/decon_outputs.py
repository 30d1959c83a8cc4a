"""decon-shaped outputs from our tables: report files and purified training files.

decon writes, for every training file with a contaminated line, one JSONL report
``<relative folder>/<file stem>-simple-<threshold:.2f>.jsonl`` in ``report_output_dir``
with one entry per (training line, eval instance, question start) that it flagged
(src/detect/reporting.rs, src/common/file_io.rs).  The entries here carry decon's
fields with decon's meanings, computed from the `matches` and `instances` tables, the
index (n-gram counts, token lengths) and the training line itself (re-read, cleaned and
tokenized as the scan did, for ``training_overlap_text`` with decon's markers:
``【question】``, ``⟦answer⟧``, ``⟨passage⟩``).  With ``purify`` every training file is
copied to ``cleaned_output_dir`` as ``<name up to .jsonl>.jsonl.gz`` without its
flagged lines, bytes unchanged, as decon's purify does.
"""

from __future__ import annotations

import gzip
import json
import os
from collections import defaultdict
from pathlib import Path

import duckdb
import numpy as np

from contam_assets.detector.config import DetectConfig
from contam_assets.detector.scoring import interpolate_threshold
from contam_assets.detector.text import clean_text
from contam_assets.detector.tokenize import BPETokenizer, get_tokenizer
from contam_assets.rescan.incremental import read_lines
from contam_assets.sources.reference import UNSPECIFIED_SPLIT
from contam_assets.store import artifacts, query_df
from contam_assets.store.compression import open_binary
from contam_assets.store.files import atomic_write_bytes, temp_path
from contam_assets.store.pool import shard_path
from contam_assets.store.tables import REMOVABLE_SQL

CONTEXT_WORDS_BEFORE = 30  # decon: context tokens before the first highlight
CONTEXT_WORDS_AFTER = 60  # decon: context tokens after the last one
SNIPPET_WORDS = 1000  # decon: eval text snippets are the first 1000 words of the cleaned text


def training_file_name(shard: str) -> str:
    """decon's `training_file`: the base name, without its last suffix when that is .gz, .zst or .zstd."""
    name = Path(shard).name
    if Path(name).suffix in (".gz", ".zst", ".zstd"):
        return Path(name).stem
    return name


def report_file_name(shard: str, threshold: float) -> str:
    """decon's report path for a training file: <relative folder>/<stem>-simple-<threshold:.2f>.jsonl."""
    p = Path(shard)
    name = f"{p.stem}-simple-{threshold:.2f}.jsonl"
    return (p.parent / name).as_posix() if p.parent != Path(".") else name


def purified_file_name(shard: str) -> str:
    """decon's purified path: <relative folder>/<name up to .jsonl (else the stem)>.jsonl.gz."""
    p = Path(shard)
    base = p.name[: p.name.find(".jsonl")] if ".jsonl" in p.name else p.stem
    return ((p.parent / f"{base}.jsonl.gz").as_posix()) if p.parent != Path(".") else f"{base}.jsonl.gz"


def _snippet(text: str | None, cfg: DetectConfig) -> str | None:
    if not text:
        return None
    return " ".join(clean_text(text, cfg.clean_options).split()[:SNIPPET_WORDS])


def overlap_text(tok, tokens: np.ndarray, q_start: int, q_end: int, passage: tuple[int, int] | None,
                 answers: list[tuple[int, int]]) -> str | None:
    """decon's training_overlap_text (extract_overlap_for_bpe_tokenizer); None for non-BPE tokenizers."""
    if not isinstance(tok, BPETokenizer) or not len(tokens):
        return None
    dec = lambda a, b: tok.decode(tokens[a:b]) if b > a else ""  # noqa: E731
    out = []
    context_start = max(q_start - CONTEXT_WORDS_BEFORE, 0)
    base_end = answers[-1][1] if answers else q_end
    context_end = min(base_end + CONTEXT_WORDS_AFTER, len(tokens) - 1)
    first = min(passage[0], q_start) if passage else q_start
    if context_start < first:
        out += ["... ", dec(context_start, first)]
    if passage and passage[1] < q_start:
        out += ["⟨", dec(passage[0], passage[1] + 1), "⟩"]
        if passage[1] + 1 < q_start:
            out.append(dec(passage[1] + 1, q_start))
    out += ["【", dec(q_start, q_end + 1), "】"]
    last = q_end
    for a, b in answers:
        if a > last + 1:
            out.append(dec(last + 1, a))
        out += ["⟦", dec(a, b + 1), "⟧"]
        last = b
    if last < context_end:
        out += [" ", dec(last + 1, context_end + 1), " ..."]
    return "".join(out) or None


def _token_ratio(tokens: np.ndarray, spans: list[tuple[int, int]], wanted: np.ndarray) -> float:
    """Share of the distinct tokens of `wanted` that appear inside `spans` of the document (display only)."""
    wanted = np.unique(np.asarray(wanted, dtype=np.uint64))
    if not len(wanted):
        return 0.0
    inside = np.concatenate([tokens[a:b + 1] for a, b in spans]) if spans else np.zeros(0, dtype=np.uint64)
    return float(np.isin(wanted, inside).sum() / len(wanted))


def decon_entries(con: duckdb.DuckDBPyConnection, out_dir: Path, pool_path: Path, cfg: DetectConfig,
                  content_key: str) -> dict[str, list[dict]]:
    """shard -> decon report entries of its flagged (and not rejected) matches, in line order."""
    rows = query_df(con, f"""
        select r.*, i.eval_key, i.source_line, i.source_file, i.fingerprint as ref_fingerprint,
               i.question as ref_question, i.answer as ref_answer, i.passage as ref_passage
        from ({REMOVABLE_SQL}) r join instances i using (record_id)
        where r.flagged and coalesce(r.decision, '') <> 'reject' and (not r.needs_review or r.decision = 'accept')
        order by r.shard, r.line, r.question_start, i.eval_key, r.instance_index""").to_dicts()
    if not rows:
        return {}
    index, _, _ = artifacts.load_index(out_dir)
    local_of = {int(r): i for i, r in enumerate(index.record_ids.tolist())}
    tok = get_tokenizer(cfg.tokenizer)
    by_shard: dict[str, list[dict]] = defaultdict(list)
    for r in rows:
        by_shard[r["shard"]].append(r)
    out: dict[str, list[dict]] = {}
    for shard, items in by_shard.items():
        docs = read_lines(shard_path(pool_path, shard), shard, content_key, cfg.max_doc_bytes, {r["line"] for r in items})
        entries = []
        for r in items:
            local = local_of[r["record_id"]]
            q_len = int(index.q_len[local])
            doc = docs.get(r["line"])
            tokens = tok.encode(clean_text(doc.text, cfg.clean_options)) if doc else np.zeros(0, dtype=np.uint64)
            answers = [tuple(x) for x in json.loads(r["answer_spans"])] if r.get("answer_spans") else []
            passage = (r["passage_start"], r["passage_end"]) if r["passage_start"] is not None else None
            cluster_end = r["cluster_end"] if r.get("cluster_end") is not None else r["question_end"]
            cluster_len = cluster_end - r["question_start"] + 1
            e = {
                "training_file": training_file_name(shard), "training_line": r["line"],
                "eval_dataset": r["eval_key"], "eval_key": r["eval_key"], "eval_line": r["source_line"],
                "eval_instance_index": r["instance_index"], "ngram_match_cnt": r["n_matched_ngrams"],
                "eval_unique_ngrams": int(index.q_unique[local]), "contamination_score": r["contamination_score"],
                "length_adjusted_question_threshold": interpolate_threshold(q_len, cfg.decay_start, cfg.decay_end,
                                                                            cfg.min_question_overlap),
                "method": "simple", "idf_overlap": r["question_overlap"],
                "question_start_idx": r["question_start"], "question_end_idx": r["question_end"],
            }
            text = overlap_text(tok, tokens, r["question_start"], r["question_end"], passage, answers)
            if text is not None:
                e["training_overlap_text"] = text
            q = _snippet(r["ref_question"], cfg)
            if q is not None:
                e["eval_question_text"] = e["eval_overlap_text"] = q
            if cfg.index_answers and r["ref_answer"]:
                e["eval_answer_text"] = _snippet(r["ref_answer"], cfg)
            if cfg.index_passages and r["ref_passage"]:
                e["eval_passage_text"] = _snippet(r["ref_passage"], cfg)
            if r["answer_overlap"] is not None:
                e["answer_overlap_ratio"] = _token_ratio(tokens, answers, index.answer_tokens(local)) if len(tokens) else 0.0
                e["answer_idf_overlap"] = r["answer_overlap"]
                if answers:
                    e.update(answer_start_idx=answers[0][0], answer_end_idx=answers[-1][1],
                             answer_boundaries=[list(a) for a in answers])
            if r["passage_overlap"] is not None:
                p_tokens = tok.encode(clean_text(r["ref_passage"] or "", cfg.clean_options))
                e["passage_overlap_ratio"] = _token_ratio(tokens, [passage] if passage else [], p_tokens) if len(tokens) else 0.0
                e["passage_idf_overlap"] = r["passage_overlap"]
            e.update(cluster_token_length=cluster_len, eval_token_length=q_len, token_length_delta=cluster_len - q_len)
            if r["ref_fingerprint"]:
                e["fingerprint"] = r["ref_fingerprint"]
            if r["is_correct"] is not None:
                e["is_correct"] = bool(r["is_correct"])
            e["reference_file"] = r["source_file"]
            if r["split"] != UNSPECIFIED_SPLIT:  # decon writes a split only when the reference record has one
                e["split"] = r["split"]
            entries.append(e)
        out[shard] = entries
    return out


def purify_file(src: Path, dst: Path, drop: set[int]) -> int:
    """Copy `src` (decompressed) to gzip `dst` without the lines in `drop`, bytes as they are; lines written."""
    dst.parent.mkdir(parents=True, exist_ok=True)
    tmp = temp_path(dst)
    written = 0
    try:
        with open_binary(src) as fin, gzip.open(tmp, "wb") as fout:
            for no, raw in enumerate(fin):
                if no not in drop:
                    fout.write(raw)
                    written += 1
        os.replace(tmp, dst)
    finally:
        tmp.unlink(missing_ok=True)
    return written


def write_decon_outputs(con: duckdb.DuckDBPyConnection, out_dir: Path, pool_path: Path, report_dir: Path,
                        cfg: DetectConfig, content_key: str = "text", cleaned_dir: Path | None = None) -> dict:
    """Report files for every training file with a flagged line (stale ones removed); with `cleaned_dir`,
    the purified copy of every training file.  Returns counts for the run summary."""
    entries = decon_entries(con, Path(out_dir), pool_path, cfg, content_key)
    report_dir = Path(report_dir)
    wanted = {report_file_name(shard, cfg.threshold): items for shard, items in entries.items()}
    if report_dir.is_dir():  # a re-run leaves no report of a file that is clean now
        for p in report_dir.rglob(f"*-simple-{cfg.threshold:.2f}.jsonl"):
            if p.relative_to(report_dir).as_posix() not in wanted:
                p.unlink()
    for name, items in wanted.items():
        atomic_write_bytes(report_dir / name, "".join(json.dumps(e, ensure_ascii=False) + "\n" for e in items).encode())
    result = dict(decon_reports=str(report_dir), decon_report_files=len(wanted),
                  decon_report_entries=sum(map(len, wanted.values())))
    if cleaned_dir is not None:
        # only shards read whole are purified (a broken stream is reported, never half copied)
        shards = [r[0] for r in con.execute(
            "select shard from shard_stats where coalesce(status, 'ok') = 'ok' order by shard").fetchall()]
        for shard in shards:
            drop = {e["training_line"] for e in entries.get(shard, [])}
            purify_file(shard_path(pool_path, shard), Path(cleaned_dir) / purified_file_name(shard), drop)
        result.update(decon_cleaned=str(cleaned_dir), decon_cleaned_files=len(shards))
    return result
