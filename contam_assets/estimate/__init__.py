"""Estimating a whole pool's contamination from a random sample of its units (docs/estimate.md).

`design` (units, the stratified sample) and `estimators` (totals, copies per item, the share of items
present, their 95 % intervals) are pure: numpy and scipy, nothing of the project.  `pool` turns the
match tables of the sampled shards into the estimate (estimate.json, the `pool_estimates` table).
"""
