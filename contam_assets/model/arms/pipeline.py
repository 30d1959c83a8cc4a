"""Arms end to end (used by ``contam arms`` and the Dagster assets): tokenizer, exposure, mixes, training.

Files under ``<out_dir>/arms/``: ``tokenizer/`` (shared by every arm) and
``exposure.json``.  The ``exposure`` table goes to ``<out_dir>/contam.duckdb``.
Each experiment's stream is ``<experiments_dir>/<experiment>/data/train.jsonl``
and its summary ``data/mix.json``.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

from contam_assets import store
from contam_assets.model.arms.exposure import (
    ExposureRow,
    SourceStats,
    TargetScale,
    contaminated_share,
    exposure_table,
    mean_removed_exposure,
    unit_uniform,
)
from contam_assets.model.arms.inputs import ArmInputs, iter_docs, local_pool_only
from contam_assets.model.arms.mix import ArmMix, PoolDoc, build_arm_mix
from contam_assets.model.arms.tokenizer import (
    load_tokenizer,
    save_tokenizer,
    token_counter,
    tokenizer_meta,
    train_tokenizer,
)
from contam_assets.model.arms.train import (
    TrainConfig,
    TrainResult,
    experiment_name,
    read_train_texts,
    train_arm,
    write_train_jsonl,
)
from contam_assets.report.inert import md_text
from contam_assets.store import pool as pool_io

Log = Callable[[str], None]

EXPOSURE_SCHEMA = """
    source VARCHAR, pool_docs BIGINT, pool_tokens BIGINT, removed_docs BIGINT, removed_tokens BIGINT,
    proxy_weight DOUBLE, proxy_budget_tokens DOUBLE, proxy_exposure DOUBLE,
    target_weight DOUBLE, target_budget_tokens DOUBLE, target_exposure DOUBLE, computed_at TIMESTAMP
"""


def arms_dir(out_dir: Path) -> Path:
    return Path(out_dir) / "arms"


def tokenizer_dir(out_dir: Path) -> Path:
    return arms_dir(out_dir) / "tokenizer"


# --- tokenizer -------------------------------------------------------------------------------------------


def pool_fingerprint(pool_dir: Path) -> list[str]:
    pool_dir = Path(pool_dir)
    return [f"{s}:{pool_io.shard_fingerprint(pool_dir / s)}" for s in pool_io.list_shards(pool_dir)]


def sample_pool_texts(pool_dir: Path, content_key: str, max_chars: int, seed: int = 0) -> tuple[list[str], Counter]:
    """Texts of the natural pool for tokenizer training; a seeded document sample when above ``max_chars``."""
    skipped: Counter = Counter()
    total = sum(len(d.text) for d in iter_docs(Path(pool_dir), content_key, skipped))
    if total == 0:
        raise ValueError(f"the pool at {pool_dir} holds no usable documents")
    frac = min(1.0, max_chars / total) if max_chars > 0 else 1.0
    texts = [
        d.text
        for d in iter_docs(Path(pool_dir), content_key)
        if frac >= 1.0 or unit_uniform(seed, "tok", d.shard, d.line) < frac
    ]
    return texts, skipped


def ensure_tokenizer(pool_dir: Path, folder: Path, content_key: str = "text", vocab_size: int = 4096,
                     max_chars: int = 50_000_000, retrain: bool = False, log: Log | None = None):
    """The arms tokenizer in ``folder``: reused when trained on the same pool with the same settings."""
    log = log or (lambda m: None)
    local_pool_only(pool_dir)
    fp = pool_fingerprint(pool_dir)
    if not fp:
        raise FileNotFoundError(f"no shards (.jsonl, .jsonl.gz, .jsonl.zst) in the pool {pool_dir}")
    want = {"pool": str(Path(pool_dir).resolve()), "shards": fp, "vocab_size": vocab_size,
            "max_chars": max_chars, "content_key": content_key}
    if not retrain and (Path(folder) / "tokenizer.json").is_file():
        have = tokenizer_meta(folder)
        if {k: have.get(k) for k in want} == want:
            log(f"reusing the arms tokenizer in {folder}")
            return load_tokenizer(folder), have
    texts, skipped = sample_pool_texts(pool_dir, content_key, max_chars)
    log(f"training a byte-level BPE tokenizer (vocab {vocab_size}) on {len(texts)} documents")
    tok = train_tokenizer(texts, vocab_size=vocab_size)
    meta = {**want, "documents": len(texts), "chars": sum(map(len, texts)), "skipped": dict(skipped)}
    save_tokenizer(tok, folder, meta)
    return load_tokenizer(folder), meta


# --- exposure --------------------------------------------------------------------------------------------


def source_stats(inputs: ArmInputs, count_tokens: Callable[[list[str]], list[int]]) -> list[SourceStats]:
    """Per source: documents and tokens of the natural pool (mix + removed) and of the removed documents."""
    acc: dict[str, Counter] = {}

    def add(docs: list[PoolDoc], removed: bool) -> None:
        for start in range(0, len(docs), 2048):
            chunk = docs[start : start + 2048]
            for d, n in zip(chunk, count_tokens([d.text for d in chunk])):
                c = acc.setdefault(d.source, Counter())
                c["pool_docs"] += 1
                c["pool_tokens"] += n
                if removed:
                    c["removed_docs"] += 1
                    c["removed_tokens"] += n

    add(inputs.decontaminated, False)
    add(inputs.removed, True)
    return [SourceStats(s, c["pool_docs"], c["pool_tokens"], c["removed_docs"], c["removed_tokens"]) for s, c in sorted(acc.items())]


@dataclass
class ExposureReport:
    rows: list[ExposureRow]
    proxy_mean_removed: float
    target_mean_removed: float
    contaminated_share_proxy: float
    contaminated_share_target: float

    @property
    def target_by_source(self) -> dict[str, float]:
        return {r.source: r.target_exposure for r in self.rows}

    def to_json(self) -> dict:
        return {**asdict(self), "rows": [asdict(r) for r in self.rows]}

    def markdown(self) -> str:
        head = "| source | pool docs | removed docs | removed tokens | proxy exposure | target weight | target exposure |\n|---|---:|---:|---:|---:|---:|---:|\n"
        body = "".join(
            f"| {md_text(r.source)} | {r.pool_docs} | {r.removed_docs} | {r.removed_tokens} | {r.proxy_exposure:.4f} "
            f"| {r.target_weight:g} | {r.target_exposure:.3f} |\n"
            for r in self.rows
        )
        return head + body


def compute_exposure(stats: list[SourceStats], proxy_budget_tokens: int, proxy_weights: dict[str, float] | None = None,
                     target: TargetScale = TargetScale()) -> ExposureReport:
    rows = exposure_table(stats, proxy_budget_tokens, proxy_weights or {}, target)
    return ExposureReport(
        rows=rows,
        proxy_mean_removed=mean_removed_exposure(stats, {r.source: r.proxy_exposure for r in rows}),
        target_mean_removed=mean_removed_exposure(stats, {r.source: r.target_exposure for r in rows}),
        contaminated_share_proxy=contaminated_share(stats, proxy_weights or {}),
        contaminated_share_target=contaminated_share(stats, target.weights, target.default_weight),
    )


def write_exposure(db_path: Path, out_dir: Path, report: ExposureReport) -> None:
    """Replace the ``exposure`` table and ``<out_dir>/arms/exposure.json`` (one transaction, no duplicates)."""
    with store.connect(db_path) as con:
        con.execute(f"create table if not exists exposure ({EXPOSURE_SCHEMA})")
        con.execute("begin transaction")
        try:
            con.execute("delete from exposure")
            for r in report.rows:
                vals = asdict(r)
                cols = list(vals)
                con.execute(
                    f"insert into exposure ({', '.join(cols)}, computed_at) values ({', '.join('?' for _ in cols)}, now())",
                    [vals[c] for c in cols],
                )
            con.execute("commit")
        except Exception:
            con.execute("rollback")
            raise
    path = arms_dir(out_dir) / "exposure.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report.to_json(), indent=2))


def read_target_exposure(db_path: Path) -> dict[str, float]:
    with store.connect(db_path, read_only=True) as con:
        if not store.table_exists(con, "exposure"):
            raise LookupError(f"{db_path} has no `exposure` table: materialize `exposure` (or run `contam arms`) first")
        return {s: float(e) for s, e in con.execute("select source, target_exposure from exposure").fetchall()}


# --- mixes and training ----------------------------------------------------------------------------------


def write_arm_mix(mix: ArmMix, experiment_dir: Path, extra: dict | None = None) -> dict:
    """``data/train.jsonl`` (the stream, in order) and ``data/mix.json`` (summary); returns the summary."""
    data = Path(experiment_dir) / "data"
    n = write_train_jsonl((r.to_json() for r in mix.rows), data / "train.jsonl")
    readded = [c for c in mix.copies.values()]
    summary = {
        "arm": mix.arm,
        "seed": mix.seed,
        "budget_tokens": mix.budget_tokens,
        "rows": n,
        "tokens": mix.n_tokens,
        "epochs_read": mix.epochs_read,
        "readded_docs": sum(1 for c in readded if c > 0),
        "readded_copies": sum(readded),
        "removed_docs_never_readded": sum(1 for c in readded if c == 0),
        "by_source": mix.summary(),
        **(extra or {}),
    }
    (data / "mix.json").write_text(json.dumps(summary, indent=2))
    return summary


def make_arm_mix(arm: str, inputs: ArmInputs, tokenizer, config: TrainConfig, seed: int,
                 target_exposure: dict[str, float] | None, weights: dict[str, float] | None = None) -> ArmMix:
    return build_arm_mix(
        arm,
        inputs.decontaminated,
        inputs.removed,
        budget_tokens=config.effective_budget,
        count_tokens=token_counter(tokenizer),
        seed=seed,
        target_exposure=target_exposure,
        weights=weights,
    )


def train_experiment(experiment_dir: Path, experiment: str, tokenizer, config: TrainConfig, recipe: str,
                     log: Log | None = None) -> TrainResult:
    texts = read_train_texts(Path(experiment_dir) / "data" / "train.jsonl")
    return train_arm(texts, tokenizer, config, Path(experiment_dir), experiment, recipe=recipe, log=log)


def check_budget(arms: list[str], stats: list[SourceStats], report: ExposureReport, budget: int) -> None:
    """Fail before any training when an arm's re-added documents cannot fit in the budget."""
    need = {
        "full": sum(s.removed_tokens for s in stats),
        "target_exposure": sum(report.target_by_source[s.source] * s.removed_tokens for s in stats),
    }
    for arm in arms:
        if arm in need and need[arm] >= budget:
            raise ValueError(f"arm {arm} re-adds about {int(need[arm]):,} tokens of removed documents, more than the "
                             f"budget of {budget:,} tokens; raise --budget-tokens above that or leave the arm out")


@dataclass
class ArmRun:
    arm: str
    seed: int
    experiment: str
    mix: dict
    result: TrainResult


@dataclass
class ArmsPlan:
    arms: list[str]
    seeds: list[int]
    config: TrainConfig
    proxy_weights: dict[str, float] = field(default_factory=dict)
    target: TargetScale = field(default_factory=TargetScale)
    vocab_size: int = 4096
    default_seed: int = 0


def run_arms(plan: ArmsPlan, inputs: ArmInputs, pool_dir: Path, out_dir: Path, experiments_dir: Path,
             content_key: str = "text", log: Log | None = None) -> tuple[ExposureReport, list[ArmRun]]:
    """Tokenizer (reused if current), exposure (table + JSON), then each (arm, seed): mix and training."""
    from dataclasses import replace

    log = log or (lambda m: None)
    out_dir = Path(out_dir)
    tokenizer, _ = ensure_tokenizer(pool_dir, tokenizer_dir(out_dir), content_key, plan.vocab_size, log=log)
    stats = source_stats(inputs, token_counter(tokenizer))
    report = compute_exposure(stats, plan.config.effective_budget, plan.proxy_weights, plan.target)
    write_exposure(out_dir / "contam.duckdb", out_dir, report)
    log(f"exposure of a removed document: proxy {report.proxy_mean_removed:.4f}, target {report.target_mean_removed:.3f}")
    check_budget(plan.arms, stats, report, plan.config.effective_budget)
    runs = []
    for seed in plan.seeds:
        for arm in plan.arms:
            experiment = experiment_name(arm, seed, plan.default_seed)
            exp_dir = Path(experiments_dir) / experiment
            mix = make_arm_mix(arm, inputs, tokenizer, plan.config, seed, report.target_by_source, plan.proxy_weights)
            summary = write_arm_mix(mix, exp_dir)
            log(f"{experiment}: {summary['rows']} documents, {summary['tokens']} tokens, "
                f"{summary['readded_copies']} re-added copies")
            config = replace(plan.config, seed=seed)
            result = train_experiment(exp_dir, experiment, tokenizer, config, recipe=arm, log=log)
            runs.append(ArmRun(arm, seed, experiment, summary, result))
    return report, runs
