"""Detector quality: planted-contamination suite and the detector's measured recall and precision."""

import dagster as dg

from contam_assets.defs.quality.assets import detector_quality
from contam_assets.defs.quality.resources import QualitySettings

quality_job = dg.define_asset_job(
    "detector_quality_job", selection=dg.AssetSelection.assets(detector_quality),
    description="Score one preset on the current planted suite (run per preset partition).",
    tags={"contam/side": "data"},
)

# assets.py is found by load_from_defs_folder; this module adds the job and the domain's resource
defs = dg.Definitions(jobs=[quality_job], resources={"quality_settings": QualitySettings.from_env()})
