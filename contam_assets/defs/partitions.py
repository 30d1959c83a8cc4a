"""Partition definitions shared across domains (no `defs` here)."""

import dagster as dg

# One partition per training-pool shard; key = shard path relative to the pool.
shards_partitions = dg.DynamicPartitionsDefinition(name="shards")

# One partition per model checkpoint; key = "<experiment>/<stage>" (see docs/tables.md).
checkpoints_partitions = dg.DynamicPartitionsDefinition(name="checkpoints")

# The four proxy ablation arms of seed 003.
ARMS = ["decontaminated", "natural", "full", "target_exposure"]
arms_partitions = dg.StaticPartitionsDefinition(ARMS)
