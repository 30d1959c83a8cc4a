"""Model side: checkpoint partitions, the probes that ask whether a model has seen benchmark text, and their correlation.

Assets (checkpoints.py, probes.py, correlation.py), the probe job and the checkpoint
sensor are found by ``load_from_defs_folder``; this module adds the domain's
resources (``checkpoint_loader``, ``probe_settings``; env defaults read at load).
"""

import dagster as dg

from contam_assets.defs.model.resources import model_resources

defs = dg.Definitions(resources=model_resources())
