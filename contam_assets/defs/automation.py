"""Declarative automation: what moves by itself once something upstream changed (docs/automation.md).

Sensors (defs/data/sensors.py, defs/model/checkpoints.py) react to the outside world:
task spec files, shard files, checkpoint folders.  Everything downstream of what they
launch moves by the automation conditions below, evaluated by one automation
sensor, ``contam_automation_sensor``, which starts STOPPED like the others
(the automation setting (docs/settings.md) makes it RUNNING; or turn it on in the UI).

The conditions are built from named parts, so the graph snapshot and the UI show
what each asset waits for:

- ``deps_settled``: no dependency is being materialized and the asset itself is not
  in progress, so a backfill of many shards ends in one downstream run;
- ``checks_gate``: every blocking check of a dependency passed (a failed
  ``shard_conservation`` or ``removals_consistent`` stops propagation);
- ``on_new_scans``: removals, after new shard scans;
- ``on_new_removals``: report and mix, after new removals (the mix ignores scan
  updates of its own shard, which only matter once the removals are recomputed);
- ``on_new_outputs``: decon's report files and the Parquet tables, after a new report or mix;
- ``on_new_probe_results``: evaluation reports and the correlation, after probe results.
"""

from __future__ import annotations

import dagster as dg

from contam_assets.defs.resources import sensor_default_status

AC = dg.AutomationCondition

# Daily re-render of the report (it is fresh when younger than a day: freshness policy on the asset);
# the mix is checked weekly (a shard whose removals did not change is verified, not rewritten).
REPORT_REFRESH_CRON = "0 4 * * *"
MIX_REFRESH_CRON = "0 5 * * 0"


def deps_settled() -> dg.AutomationCondition:
    return (~AC.any_deps_in_progress() & ~AC.in_progress()).with_label("deps_settled")


def checks_gate() -> dg.AutomationCondition:
    return AC.all_deps_blocking_checks_passed().with_label("blocking_checks_passed")


def on_new_scans() -> dg.AutomationCondition:
    """removals: any shard scanned since the last time (all shards settled, conservation passed)."""
    return (AC.any_deps_updated().since_last_handled() & deps_settled() & checks_gate()).with_label("on_new_scans")


def on_new_removals(refresh_cron: str | None = None, needs_all_deps: bool = False) -> dg.AutomationCondition:
    """After `removals` changed (or a refresh tick passed); the mix also needs its own shard scanned."""
    updated = AC.any_deps_updated().allow(dg.AssetSelection.assets("removals"))
    trigger = (updated | AC.cron_tick_passed(refresh_cron, "UTC")) if refresh_cron else updated
    cond = trigger.since_last_handled() & deps_settled() & checks_gate()
    if needs_all_deps:
        cond = cond & ~AC.any_deps_missing()
    return cond.with_label("on_new_removals")


def on_new_outputs() -> dg.AutomationCondition:
    """decon's report files and the Parquet tables: after a new report or mix (all deps settled, checks passed)."""
    # materialized, not merely requested in the same tick: published once the report and the mix are written
    updated = AC.any_deps_match(AC.newly_updated()).allow(dg.AssetSelection.assets("removal_report", "decontaminated_mix"))
    return (updated.since_last_handled() & deps_settled() & checks_gate()).with_label("on_new_outputs")


def on_new_probe_results() -> dg.AutomationCondition:
    """Evaluation reports: a probe of the checkpoint finished (a probe that skipped does not hold the report)."""
    return (AC.any_deps_updated().since_last_handled() & deps_settled()).with_label("on_new_probe_results")


def on_schedule(cron: str, at_start: bool = False) -> dg.AutomationCondition:
    """A check that runs once per cron tick (and whenever its asset runs); `at_start`: also when automation starts."""
    tick = AC.cron_tick_passed(cron, "UTC")
    if at_start:
        tick = tick | AC.initial_evaluation()
    return tick.since_last_handled().with_label(f"on_schedule({cron}{', at start' if at_start else ''})")


contam_automation_sensor = dg.AutomationConditionSensorDefinition(
    "contam_automation_sensor",
    target=dg.AssetSelection.all(),
    default_status=sensor_default_status(),
    minimum_interval_seconds=30,
    description="Evaluates the automation conditions of the graph (removals after new scans; report and mix after "
    "new removals; evaluation reports after new probe results; scheduled checks). STOPPED unless "
    "the automation setting is on.",
)
