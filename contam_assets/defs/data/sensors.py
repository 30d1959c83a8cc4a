"""Sensor that turns new or changed pool shards into partitions and scan requests."""


import hashlib
import json

import dagster as dg

from contam_assets.core.pool import list_shards, shard_fingerprint
from contam_assets.defs.data.jobs import scan_shards_job
from contam_assets.defs.partitions import shards_partitions
from contam_assets.defs.resources import ContamSettings


@dg.sensor(job=scan_shards_job, minimum_interval_seconds=60, default_status=dg.DefaultSensorStatus.STOPPED)
def new_shards_sensor(context: dg.SensorEvaluationContext, contam_settings: ContamSettings) -> dg.SensorResult:
    """Adds a `shards` partition for every new shard file and requests its scan; a changed shard is rescanned."""
    pool = contam_settings.pool_path
    state = json.loads(context.cursor) if context.cursor else {}
    shards = list_shards(pool)
    known = set(context.instance.get_dynamic_partitions(shards_partitions.name))
    new_parts = [s for s in shards if s not in known]
    requests = []
    next_state = {}
    for s in shards:
        fp = hashlib.sha1(shard_fingerprint(pool / s).encode()).hexdigest()[:12]
        next_state[s] = fp
        if state.get(s) != fp:
            # run_key makes a repeated tick for the same content a no-op
            requests.append(dg.RunRequest(run_key=f"{s}@{fp}", partition_key=s))
    return dg.SensorResult(
        run_requests=requests,
        dynamic_partitions_requests=[shards_partitions.build_add_request(new_parts)] if new_parts else [],
        cursor=json.dumps(next_state, sort_keys=True),
    )
