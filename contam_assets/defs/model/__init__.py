"""Model side: checkpoint partitions, the probes that ask whether a model has seen benchmark text, and their correlation."""

import dagster as dg

from contam_assets.defs.model.checkpoints import checkpoint_probes_job, checkpoints, new_checkpoints_sensor
from contam_assets.defs.model.correlation import loglik_gap_correlation
from contam_assets.defs.model.probes import (
    bits_per_byte,
    fresh_set_gap,
    membership_scores,
    ppl_probe,
    recitation_rate,
    sequence_scores,
)
from contam_assets.defs.model.resources import model_resources

defs = dg.Definitions(
    assets=[
        checkpoints,
        sequence_scores,
        ppl_probe,
        bits_per_byte,
        membership_scores,
        recitation_rate,
        fresh_set_gap,
        loglik_gap_correlation,
    ],
    jobs=[checkpoint_probes_job],
    sensors=[new_checkpoints_sensor],
    resources=model_resources(),
)
