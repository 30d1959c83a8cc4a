"""Detector quality (issue 7): planted-contamination suite and the detector's measured recall and precision."""

import dagster as dg

from contam_assets.defs.quality.assets import detector_quality, planted_suite
from contam_assets.defs.quality.resources import QualitySettings

quality_job = dg.define_asset_job(
    "detector_quality_job", selection=dg.AssetSelection.assets(detector_quality),
    description="Score one preset on the current planted suite (run per preset partition).",
)

defs = dg.Definitions(
    assets=[planted_suite, detector_quality],
    jobs=[quality_job],
    resources={"quality_settings": QualitySettings.from_env()},
)
