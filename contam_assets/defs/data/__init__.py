"""Data side of the graph: registry -> reference set -> index -> shard scans -> removals -> report -> mix.

Assets (assets.py, pool.py, outputs.py, publish.py), checks (checks.py), jobs (jobs.py), how runs are cut
(runs.py), sensors and the nightly schedule (sensors.py)
are found by ``load_from_defs_folder``; this module adds the resource of the domain:
``contam_scan_engine``, where shard scans run (engine.py, chosen by the scan_engine setting
when the code location loads).
"""

import dagster as dg

from contam_assets.defs.data.engine import engine_from_env

defs = dg.Definitions(resources={"contam_scan_engine": engine_from_env()})
