"""A CDC database's ODS tables as one subsettable multi-asset: the day of a source is one Dagster run.

Each table is still its own asset `ods/<table>` (the same key the DWD deps and the asset graph use), with its own
checks (its quality rules and its schema check), job-log rows, claim, gate, fence, publish and tag: the one
lifecycle of every log-driven asset (`publish/materialize.materialize_partitions`), run for each selected table
as a table-asset's run would. What the tables share is the run: its set-up (one Dagster run and step instead of
one per table), the Spark session, the job log, the warehouse's handle (and the raw binlog table's partition
metadata, read once for every table's day counts), and a small thread pool running several tables' lifecycles at
once (Spark runs the jobs of several threads together; `SHARP_ODS_SOURCE_THREADS`). Dagster's events (check
results, materializations) and the tables' log lines go out from the op's own thread, a table's as it finishes.

A table whose lifecycle fails (a strong rule, an upstream not done, a lost claim) holds back only itself: the
others run on and publish, their outputs are reported, and then the run fails naming the failed tables. A failed
table's output is not reported, so Dagster leaves it (and, in the run, what reads it) unmaterialized; its job log
says FAILURE as a table-asset's run would. A range run (a single-run backfill) hands every selected table the
whole range, which each table stages as one batch as before (`publish/range.py`).

Dagster 1.13 lets the specs of a multi-asset carry different partitions definitions only when it is subsettable,
and a run (or a job) still needs one: every table of a source starts at the source's start
(`OdsTable.start`), so the multi-asset has the one daily partitions definition of its source.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from typing import Any

from dagster import (
    AssetKey,
    AssetsDefinition,
    AssetSpec,
    BackfillPolicy,
    Failure,
    MaterializeResult,
    multi_asset,
)

from sharp_dagster.assets.cdc_assets import (
    database_group,
    ods_check_specs,
    ods_description,
    ods_landing_dep,
    ods_metadata,
    ods_publish,
)
from sharp_dagster.joblog.planner import LogDrivenAsset
from sharp_dagster.logdriven import job_log_or_fail
from sharp_dagster.partitions import partitions_for
from sharp_dagster.publish.failures import error_text
from sharp_dagster.publish.materialize import materialize_partitions
from sharp_dagster.publish.run import AssetPublish
from sharp_dagster.publish.warehouse import RunWarehouse
from sharp_dagster.redact import scrub_text
from sharp_dagster.settings import ods_source_threads
from sharp_dagster.warehouse.cdc_layout import OdsTable

log = logging.getLogger("sharp_dagster.ods_source")


def source_op_name(database: str) -> str:
    """The op of a database's ODS multi-asset (`ods_source_shop`)."""
    return database_group("ods_source", database)


def source_job_name(database: str) -> str:
    """The job of a database's ODS day (`ods_shop`): one per source database in the UI."""
    return database_group("ods", database)


def build_ods_source_asset(
    database: str,
    tables: list[OdsTable],
    rules: Mapping[str, list],
    grains: dict[str, str],
    log_assets: Mapping[str, LogDrivenAsset],
) -> AssetsDefinition:
    """The ODS tables of `database` as one subsettable multi-asset; `rules` and `log_assets` by asset key
    (`ods/<table>`)."""
    starts = {t.start for t in tables}
    if len(starts) != 1:
        raise ValueError(
            f"ODS tables of {database!r}: one start expected (the source's), got {sorted(starts)}"
        )
    partitions_def = partitions_for("daily", starts.pop())
    specs = [
        AssetSpec(
            key=AssetKey(["ods", t.name]),
            group_name=database_group("ods", t.database),
            description=ods_description(t),
            deps=[ods_landing_dep(t)],
            kinds={"spark", "cdc"},
            metadata=ods_metadata(t),
            skippable=True,
        )
        for t in tables
    ]
    checks = [c for t in tables for c in ods_check_specs(t, rules.get(t.asset_key_str), partitions_def)]

    @multi_asset(
        name=source_op_name(database),
        specs=specs,
        check_specs=checks,
        can_subset=True,
        partitions_def=partitions_def,
        backfill_policy=BackfillPolicy.single_run(),
        required_resource_keys={"spark"},
        description=f"The day of every ODS table of `{database}` (or those selected), in one run.",
    )
    def _source_day(context):
        selected = context.selected_asset_keys
        publishes = {
            AssetKey(["ods", t.name]): ods_publish(
                t, context.resources.spark, rules.get(t.asset_key_str), grains, log_assets[t.asset_key_str]
            )
            for t in tables
            if AssetKey(["ods", t.name]) in selected
        }
        yield from materialize_tables(context, publishes, ods_source_threads())

    return _source_day


def materialize_tables(context: Any, publishes: dict[AssetKey, AssetPublish], threads: int) -> Iterator[Any]:
    """Each table's lifecycle (`materialize_partitions`, as a table-asset's run) on up to `threads` threads; its
    events and log lines reported from this thread as it finishes. Tables that failed do not stop the others; the
    run then fails naming each of them and why."""
    # The session, the catalog and the warehouse's handle made once, at the first table's claim, and shared by the
    # threads (the job log first: when it is unreachable nothing is touched; a run whose every table is refused
    # never starts Spark); with `read_once`, the raw binlog table's partition metadata (each table's raw counts of
    # the day) is read once for all tables, not once per table.
    job_log_or_fail()
    failed: list[TableOutcome] = []
    with (
        RunWarehouse(context, read_once=True) as store,
        ThreadPoolExecutor(max_workers=max(1, min(threads, len(publishes)))) as pool,
    ):
        futures = [pool.submit(run_table, context, key, publish, store) for key, publish in publishes.items()]
        for future in as_completed(futures):
            outcome = future.result()  # a BaseException (a kill, an interrupt) ends the run here
            for level, message in outcome.lines:
                getattr(context.log, level)(message)
            for event in outcome.events:
                yield keyed(event, outcome.key)
            if outcome.error is not None:
                failed.append(outcome)
    if failed:
        failed.sort(key=lambda o: o.key.to_user_string())
        names = [o.key.to_user_string() for o in failed]
        reasons = "; ".join(f"{name}: {describe(o.error)}" for name, o in zip(names, failed, strict=True))
        raise Failure(
            description=scrub_text(
                f"{len(failed)} of {len(publishes)} ODS table(s) not published ({', '.join(names)}); the others "
                f"were: {reasons}"
            ),
            metadata={"failed_tables": names},
        )


@dataclass
class TableOutcome:
    """What one table's lifecycle did: its Dagster events, its log lines, and the error it ended with (if any)."""

    key: AssetKey
    events: list = field(default_factory=list)
    lines: list[tuple[str, str]] = field(default_factory=list)
    error: Exception | None = None


def run_table(context: Any, key: AssetKey, publish: AssetPublish, store: RunWarehouse) -> TableOutcome:
    """One table's lifecycle in a worker thread, its events and log lines held for the op's thread."""
    table_context = TableContext(context, key)
    outcome = TableOutcome(key, lines=table_context.log.lines)
    try:
        for event in materialize_partitions(table_context, publish, batch=True, shared=store):
            outcome.events.append(event)
    except Exception as exc:  # a failed table holds back only itself: the run reports it after the others
        log.info("%s: %s", key.to_user_string(), describe(exc))
        outcome.error = exc
    return outcome


class TableContext:
    """The run's context as one table's lifecycle sees it: that table's asset key, and a log whose lines wait for
    the op's thread (Dagster's log and events go out from it)."""

    def __init__(self, context: Any, asset_key: AssetKey) -> None:
        self.run_context = context
        self.asset_key = asset_key
        self.log = HeldLog()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.run_context, name)


class HeldLog:
    """A log whose lines are kept, in order, as (level, message)."""

    def __init__(self) -> None:
        self.lines: list[tuple[str, str]] = []

    def debug(self, message: str) -> None:
        self.lines.append(("debug", message))

    def info(self, message: str) -> None:
        self.lines.append(("info", message))

    def warning(self, message: str) -> None:
        self.lines.append(("warning", message))

    def error(self, message: str) -> None:
        self.lines.append(("error", message))


def keyed(event: Any, key: AssetKey) -> Any:
    """A table's event as the multi-asset reports it: its `MaterializeResult` names the table."""
    if isinstance(event, MaterializeResult) and event.asset_key is None:
        return MaterializeResult(
            asset_key=key,
            metadata=event.metadata,
            check_results=event.check_results,
            data_version=event.data_version,
            tags=event.tags,
        )
    return event


def describe(exc: BaseException) -> str:
    return exc.description if isinstance(exc, Failure) and exc.description else error_text(exc)
