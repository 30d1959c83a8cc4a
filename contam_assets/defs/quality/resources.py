"""Settings of the quality domain (resource key ``quality_settings``)."""

import os
from pathlib import Path

import dagster as dg


class QualitySettings(dg.ConfigurableResource):
    """How big the planted suite is.  Every field has an environment variable default."""

    seed: int = 0  # CONTAM_QUALITY_SEED
    per_type: int = 20  # CONTAM_QUALITY_PER_TYPE: planted documents per (leak type, task)
    clean_docs: int = 2000  # CONTAM_QUALITY_CLEAN_DOCS: clean host documents (false-positive rate)
    hard_negatives: int = -1  # CONTAM_QUALITY_HARD_NEGATIVES: at most this many hard negatives (-1 = all)
    suite_dir: str = ""  # CONTAM_QUALITY_SUITE: where the suite pool is written ("" = <out_dir>/quality_suite)

    def suite_path(self, out_dir: Path) -> Path:
        return Path(self.suite_dir).resolve() if self.suite_dir else Path(out_dir) / "quality_suite"

    @property
    def hard_negative_limit(self) -> int | None:
        return None if self.hard_negatives < 0 else self.hard_negatives

    @classmethod
    def from_env(cls, **overrides) -> "QualitySettings":
        env = os.environ
        values = dict(
            seed=int(env.get("CONTAM_QUALITY_SEED", "0")),
            per_type=int(env.get("CONTAM_QUALITY_PER_TYPE", "20")),
            clean_docs=int(env.get("CONTAM_QUALITY_CLEAN_DOCS", "2000")),
            hard_negatives=int(env.get("CONTAM_QUALITY_HARD_NEGATIVES", "-1")),
            suite_dir=env.get("CONTAM_QUALITY_SUITE", ""),
        )
        values.update({k: v for k, v in overrides.items() if v is not None})
        return cls(**values)
