"""Honest states: an asset whose inputs are missing skips (or fails when asked for), and its check says so.

An asset that cannot compute anything (no GSM8K for the perplexity probe, no fresh
set for the gap, no scanned shard for the removals) does not materialize a row of
dashes.  It declares the check ``inputs_present`` (``inputs_check``) and then either

- returns ``inputs_present()`` with its materialization (check passed), or
- returns ``skip_for_missing_inputs(context, reason)``: no materialization, the check
  fails with severity WARN and the reason, the reason is logged as a warning, and
  downstream steps of the same run are skipped by Dagster;
- or, when the run asked for this asset alone (the UI's Materialize on it, or
  ``dagster asset materialize --select <it>``) or carries the tag
  ``contam/missing_inputs=fail``, fails with the reason instead.
  ``contam/missing_inputs=skip`` forces a skip.
"""

from __future__ import annotations

import dagster as dg

from contam_assets.defs.meta import check_metadata

INPUTS_CHECK = "inputs_present"
MISSING_INPUTS_TAG = "contam/missing_inputs"


def inputs_check(asset: str, needs: str, owners: list[str]) -> dg.AssetCheckSpec:
    return dg.AssetCheckSpec(
        INPUTS_CHECK, asset=asset,
        description=f"{asset} had what it needs ({needs}); failed (WARN) = the asset skipped this run, the reason is in "
                    "the result's metadata",
        metadata=check_metadata(owners, f"{asset} is computed from real inputs, never a row of dashes"),
    )


def inputs_present(**metadata) -> dg.AssetCheckResult:
    return dg.AssetCheckResult(check_name=INPUTS_CHECK, passed=True, metadata=metadata)


def asked_for_alone(context: dg.AssetExecutionContext) -> bool:
    """True when the run targets this asset only (its checks aside), or is tagged to fail on missing inputs."""
    tag = (context.run.tags or {}).get(MISSING_INPUTS_TAG, "").strip().lower()
    if tag in ("fail", "skip"):
        return tag == "fail"
    # the assets this run executes (a UI launch of one asset runs a job subset of that asset only)
    selection = set(context.run.asset_selection or ()) or set(context.job_def.asset_layer.selected_asset_keys)
    return selection == {context.asset_key}


def skip_for_missing_inputs(context: dg.AssetExecutionContext, reason: str, **metadata) -> dg.AssetCheckResult:
    """Skip (no materialization, WARN check with the reason) or, when asked for alone, fail with the reason."""
    name = context.asset_key.to_user_string()
    where = f"{name}[{context.partition_key}]" if context.has_partition_key else name
    if asked_for_alone(context):
        raise dg.Failure(description=f"{where}: cannot run: {reason}", metadata={"reason": reason, **metadata})
    context.log.warning(f"{where} skipped, nothing materialized: {reason}")
    return dg.AssetCheckResult(check_name=INPUTS_CHECK, passed=False, severity=dg.AssetCheckSeverity.WARN,
                               description=reason, metadata={"reason": reason, **metadata})
