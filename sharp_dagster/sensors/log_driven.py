"""The log-driven sensor: launch the earliest pending period of each log-driven asset, one at a time per asset.

The pending queue comes from the job log (`planner.pending_queue`: failed and never-run periods, oldest first,
fully elapsed only). For each asset the sensor requests the head of its queue when

- nothing of that asset is RUNNING in the job log or queued/running in Dagster (one at a time per asset),
- every log-driven upstream period it reads (any grain, lookbacks included) is done: the run's own upstream gate
  (`planner.require_upstreams_done`) would refuse it otherwise, so a chain advances day by day, in order,
- the head has failed fewer than `max_attempts` times: a failure that retrying fixes heals itself, in order; one
  that needs a person stops there (and is alerted once) until someone fixes it and re-runs it
  (`sharp-dagster log rerun`), or raises the limit.

The run key carries the attempt number, so a retry is a new run while a repeated tick never launches twice.

Assets that run together (`together`: the ODS tables of one CDC database, one multi-asset: `assets/ods_source.py`)
whose heads are the same period go as ONE run of them all: a source's day is one run, not one per table.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping

from dagster import (
    AssetKey,
    AssetSelection,
    DagsterRunStatus,
    DefaultSensorStatus,
    RunRequest,
    RunsFilter,
    SensorEvaluationContext,
    SensorResult,
    SkipReason,
    sensor,
)

from sharp_dagster.alerts import AlertSink
from sharp_dagster.joblog import FAILURE, pending_queue
from sharp_dagster.joblog.planner import LogDrivenAsset, upstream_checks
from sharp_dagster.logdriven import job_log
from sharp_dagster.naming import parts

IN_FLIGHT = [
    DagsterRunStatus.QUEUED,
    DagsterRunStatus.NOT_STARTED,
    DagsterRunStatus.STARTING,
    DagsterRunStatus.STARTED,
]
ASSET_TAG = "sharp/asset"


def plan_requests(
    assets: Mapping[str, LogDrivenAsset],
    in_flight: set[str],
    max_attempts: int = 3,
    together: Mapping[str, str] | None = None,
) -> tuple[list[RunRequest], list[str]]:
    """The run requests of one tick, and why each other asset waits (for the tick's log); the heads of assets of
    one `together` group (asset name -> group) of the same period as one request."""
    jl = job_log()
    requests: list[RunRequest] = []
    waiting: list[str] = []
    running = {r.job_name for r in jl.running()}
    for name in sorted(assets):
        asset = assets[name]
        if name in running or name in in_flight:
            waiting.append(f"{name}: a run is in progress")
            continue
        queue = pending_queue(jl, name, asset.spec)
        if not queue:
            continue
        head = queue[0]
        blocked = []
        # The same upstream reads (grain, lookback) the run's gate checks, so the sensor launches no run the
        # gate would refuse.
        blocked += [c.describe() for c in upstream_checks(jl, head, asset.upstream) if not c.ok]
        if asset.ready is not None:
            reason = asset.ready(head)
            if reason:
                blocked.append(reason)
        if blocked:
            waiting.append(f"{name} {head.partition_key}: waits for {'; '.join(blocked)}")
            continue
        attempts = 0
        if head.last_status is not None:
            latest = jl.latest_attempts(name, starts=[head.range_start])
            attempts = latest[head.range_start].attempt if head.range_start in latest else 0
        if head.last_status == FAILURE and attempts >= max_attempts:
            waiting.append(
                f"{name} {head.partition_key}: failed {attempts} times, needs a person "
                f"(fix it, then `sharp-dagster log rerun --asset {name} --from {head.partition_key[:10]} "
                f"--to {head.partition_key[:10]}`)"
            )
            _alert_stuck(name, head.partition_key, attempts)
            continue
        requests.append(
            RunRequest(
                run_key=f"{name}:{head.partition_key}:attempt-{attempts + 1}",
                partition_key=head.partition_key,
                asset_selection=[AssetKey(parts(name))],
                tags={ASSET_TAG: name, "sharp/launched_by": "log_driven_sensor"},
            )
        )
    return run_together(requests, together or {}), waiting


def run_together(requests: list[RunRequest], together: Mapping[str, str]) -> list[RunRequest]:
    """`requests` with those of one group and period merged into one run of all their assets (its run key names each
    asset's attempt, so a retry of any of them is a new run)."""
    out: list[RunRequest] = []
    groups: dict[tuple[str, str], list[RunRequest]] = {}
    for request in requests:
        group = together.get(request.tags[ASSET_TAG])
        if group is None:
            out.append(request)
        else:
            groups.setdefault((group, request.partition_key), []).append(request)
    for (group, partition_key), members in groups.items():
        if len(members) == 1:
            out.append(members[0])
            continue
        # Each member's own key (asset, period, attempt), hashed: another set of members is another run.
        members_key = hashlib.sha256("\n".join(sorted(r.run_key for r in members)).encode()).hexdigest()[:16]
        out.append(
            RunRequest(
                run_key=f"{group}:{partition_key}:{len(members)} assets:{members_key}",
                partition_key=partition_key,
                asset_selection=[key for r in members for key in r.asset_selection],
                tags={ASSET_TAG: group, "sharp/launched_by": "log_driven_sensor"},
            )
        )
    return out


def _alert_stuck(name: str, partition_key: str, attempts: int) -> None:

    sink = AlertSink.from_env(engine=job_log().engine)
    sink.send(
        "run_stuck",
        dedup_key=f"stuck:{name}:{partition_key}:{attempts}",
        title=f"{name} [{partition_key}] stopped after {attempts} failed attempts",
        details={"asset": name, "partition": partition_key, "attempts": attempts},
    )


def build_log_driven_sensor(
    assets: Mapping[str, LogDrivenAsset],
    max_attempts: int = 3,
    minimum_interval_seconds: int = 30,
    name: str = "log_driven_sensor",
    together: Mapping[str, str] | None = None,
):
    # One sensor's target shares one partitions definition: a source with its own start gets a sensor of its own.
    keys = [AssetKey(parts(name)) for name in sorted(assets)]

    @sensor(
        name=name,
        target=AssetSelection.assets(*keys),
        minimum_interval_seconds=minimum_interval_seconds,
        default_status=DefaultSensorStatus.STOPPED,
        description="Launches the earliest pending period of each log-driven asset (from the job log), in order.",
    )
    def log_driven_sensor(context: SensorEvaluationContext):
        in_flight = set()
        for run in context.instance.get_runs(filters=RunsFilter(statuses=IN_FLIGHT)):
            if ASSET_TAG in run.tags:
                in_flight.add(run.tags[ASSET_TAG])
            for key in run.asset_selection or ():
                in_flight.add(key.to_user_string())
        requests, waiting = plan_requests(assets, in_flight, max_attempts, together)
        for line in waiting[:20]:
            context.log.info(line)
        if not requests:
            return SkipReason("nothing pending is ready: " + ("; ".join(waiting[:5]) or "all periods done"))
        return SensorResult(run_requests=requests)

    return log_driven_sensor
