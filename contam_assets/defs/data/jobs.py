"""Jobs of the data side."""

import dagster as dg

reference_job = dg.define_asset_job(
    "build_reference", selection=dg.AssetSelection.assets("task_registry", "reference_set", "ngram_index"),
    description="Registry -> reference set -> n-gram index.",
)
scan_shards_job = dg.define_asset_job(
    "scan_shards", selection=dg.AssetSelection.assets("shard_matches"),
    description="Scan shards (one partition per shard) into the match tables.",
)
report_job = dg.define_asset_job(
    "apply_reviews", selection=dg.AssetSelection.assets("removals", "removal_report"),
    description="Apply review decisions and render the removal report.",
)
mix_job = dg.define_asset_job(
    "write_mix", selection=dg.AssetSelection.assets("decontaminated_mix"),
    description="Write the decontaminated mix, shard by shard.",
)
