"""Settings of the quality domain (resource key ``quality_settings``)."""

from pathlib import Path

import dagster as dg

from contam_assets import settings


class QualitySettings(dg.ConfigurableResource):
    """How big the planted suite is.  Every field has an environment variable default."""

    seed: int = 0
    per_type: int = 20  # planted documents per (leak type, task)
    clean_docs: int = 2000  # clean host documents (false-positive rate)
    hard_negatives: int = -1  # at most this many hard negatives (-1 = all)
    suite_dir: str = ""  # where the suite pool is written ("" = <out_dir>/quality_suite)

    def suite_path(self, out_dir: Path) -> Path:
        return Path(self.suite_dir).resolve() if self.suite_dir else Path(out_dir) / "quality_suite"

    @property
    def hard_negative_limit(self) -> int | None:
        return None if self.hard_negatives < 0 else self.hard_negatives

    @classmethod
    def from_env(cls, **overrides) -> "QualitySettings":
        values = dict(
            seed=settings.env_value("quality_seed"),
            per_type=settings.env_value("quality_per_type"),
            clean_docs=settings.env_value("quality_clean_docs"),
            hard_negatives=settings.env_value("quality_hard_negatives"),
            suite_dir=settings.env_value("quality_suite"),
        )
        values.update({k: v for k, v in overrides.items() if v is not None})
        return cls(**values)
