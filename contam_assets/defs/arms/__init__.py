"""Proxy ablation arms (seed 003's recipe): tokenizer, exposure, arm mixes, trained checkpoints."""

import dagster as dg

from contam_assets.defs.arms import assets
from contam_assets.defs.arms.resources import ArmsSettings

arms_job = dg.define_asset_job(
    "arms_job",
    selection=dg.AssetSelection.assets(assets.arm_mix, assets.arm_checkpoints),
    description="Build one arm's stream and train it (run per arm partition).",
    tags={"contam/side": "model"},
)

# assets.py is found by load_from_defs_folder; this module adds the job and the domain's resource
defs = dg.Definitions(jobs=[arms_job], resources={"arms_settings": ArmsSettings.from_env()})
