"""The CDC path as Dagster assets: hourly landing of the binlog topic, daily merge into the ODS tables.

- `original_binlog/<db>` (hourly, group `cdc`): claims its offset range through the lifecycle's `claimed_range`
  (a heartbeat keeps the claim alive, a failure is recorded and alerted once), reads the topic from the end offsets of the job
  log's last successful landing (the Kafka incremental mode) up to the end offsets captured when the run starts,
  writes the raw binlog rows and each table's typed images (`cdc/landing/image_tables.py`, typed by the ODS state's
  columns; re-landing the same offsets changes nothing), keeps bad messages in quarantine with
  the count in step_log and a weak alert (count and first reasons, once per run), records the end offsets actually
  read + 1 as `data_range_end`, and, while it still holds the claim, writes the done markers of every hour that is
  complete (low watermark of commit time past hour end + lateness), with or without changes, as
  `done_markers.hours_to_mark` decides for every landing path (from the day of the first commit or heartbeat
  ever landed, carried in the job log's `land` step output as `first_seen_ms`).
- `ods/<table>` (daily, group `ods`): `checkdone` (all 24 done markers of the day, else the run fails before
  reading anything), then the day's typed changes merged onto a staging branch of the current-state table
  `ods.<table>` and its tombstones `ods_state.<table>`, cut at the previous day's tag (`cdc/ods/stage.py`); after
  the strong rules (against the day's staged state) `main` is moved to the branch and the day tagged
  `'YYYY-MM-DD'`, through the one lifecycle of every log-driven asset (`sharp_dagster.publish`). A re-run of a day
  while later days are published re-merges and re-publishes every later day after it (`read_later` step). The code
  location builds a database's ODS tables as one multi-asset from the pieces here (`assets/ods_source.py`).
"""

from __future__ import annotations

import json
import logging
import re
from contextlib import ExitStack
from dataclasses import replace

from dagster import (
    AssetDep,
    AssetKey,
    AssetsDefinition,
    AssetSpec,
    BackfillPolicy,
    Failure,
    MaterializeResult,
    MetadataValue,
    TimeWindowPartitionMapping,
    asset,
)

from sharp_dagster.alerts import AlertSink
from sharp_dagster.assets import quality
from sharp_dagster.assets.ods_schema_check import OdsSchemaCheck, schema_check_spec
from sharp_dagster.cdc.landing.done_markers import day_complete, hours_done, write_done_markers
from sharp_dagster.cdc.landing.prior import prior_landing
from sharp_dagster.cdc.landing.raw_tables import quarantine_table_ref, raw_table_ref
from sharp_dagster.cdc.merge.change_source import range_changes
from sharp_dagster.cdc.ods import stage as ods_stage
from sharp_dagster.cdc.ods import store as ods_store
from sharp_dagster.cdc.ods.columns import state_columns
from sharp_dagster.cdc.ods.premerge import premerge_landed
from sharp_dagster.cdc.ods.stage import StagedOds, StagedOdsDay, day_properties
from sharp_dagster.cdc.ods.versions import days_after, ods_ref, previous_day, start_of
from sharp_dagster.joblog.incremental import format_offsets, plan_kafka
from sharp_dagster.joblog.planner import LogDrivenAsset
from sharp_dagster.lineage.openlineage import schema_fields
from sharp_dagster.logdriven import job_log_or_fail
from sharp_dagster.naming import key_str, parts
from sharp_dagster.partitions import partitions_for
from sharp_dagster.periods import Period
from sharp_dagster.publish.claimed_range import claimed_range
from sharp_dagster.publish.materialize import materialize_partitions
from sharp_dagster.publish.range import drop_orphans
from sharp_dagster.publish.run import AssetPublish, PartitionRun
from sharp_dagster.spark.iceberg import IcebergTables
from sharp_dagster.warehouse.cdc_layout import OdsTable, bootstrap_day, landing_table, source_start

log = logging.getLogger("sharp_dagster.cdc_assets")


def database_group(layer: str, database: str) -> str:
    """The UI's asset group of a CDC database's assets of one layer (`ods_shop`, `sources_shop`): a source of
    hundreds of tables and thousands of shards shows as one group per database, not one group of them all."""
    return f"{layer}_{re.sub(r'[^A-Za-z0-9_]', '_', database)}"


def source_specs(physical_by_table: dict[str, list[str]], database: str) -> list[AssetSpec]:
    return [
        AssetSpec(
            key=AssetKey(["mysql", database, physical]),
            group_name=database_group("sources", database),
            description=f"Source table `{database}.{physical}` of the MySQL/MariaDB shop database (binlog captured).",
            kinds={"mysql"},
        )
        for shards in physical_by_table.values()
        for physical in shards
    ]


def build_landing_asset(source, database: str, topic: str, source_keys: list[AssetKey]) -> AssetsDefinition:
    landing = BinlogLanding(source, database, topic)

    @asset(
        key=parts(landing_table(database)),
        group_name="cdc",
        description=(
            f"Raw binlog of `{database}` (the warehouse table original_binlog.{database}): one row per row change, "
            "partitioned "
            f"by logical table, dt and hour, landed hourly from Kafka topic `{topic}` with done markers."
        ),
        partitions_def=partitions_for("hourly", source_start(source)),
        # A backfill of many hours is one landing (up to the end offsets), not one run per hour.
        backfill_policy=BackfillPolicy.single_run(),
        deps=source_keys,
        required_resource_keys={"spark", "kafka"},
        kinds={"kafka", "spark"},
        metadata={"dagster/table_name": landing_table(database), "topic": topic},
    )
    def _landing(context) -> MaterializeResult:
        return landing(context)

    return _landing


class BinlogLanding:
    """The compute of a raw binlog table: claims the topic's offset range, then, under the claim, the steps `land`,
    `quarantine` and `done_markers`; a weak alert when messages were quarantined."""

    def __init__(self, source, database: str, topic: str) -> None:
        self.source, self.database, self.topic = source, database, topic
        self.job_name = key_str(landing_table(database))

    def __call__(self, context) -> MaterializeResult:
        spark_resource = context.resources.spark
        # First: when the job log is unreachable nothing is touched (the catalog lives there too).
        jl = job_log_or_fail()
        store = spark_resource.store()
        window = plan_kafka(jl, self.job_name)
        app_id = spark_resource.session().sparkContext.applicationId
        with claimed_range(context, self.job_name, window, "kafka_offset", app_id) as handle:
            result, marked = self._land(jl, handle, window, context.resources, store)
        if result.quarantined:
            alert_quarantine(jl, handle, context.run_id, result)
        premerged = self._premerge(store, marked)
        return MaterializeResult(
            metadata={
                "messages_read": result.read,
                "rows_landed": result.landed,
                "duplicates": result.duplicates,
                "quarantined": result.quarantined,
                "quarantine_reasons": MetadataValue.json(result.quarantine_reasons),
                "end_offsets": MetadataValue.json({str(k): v for k, v in result.end_offsets.items()}),
                "hours_marked_done": len(marked),
                "ods_days_premerged": premerged,
                "dagster/row_count": result.landed,
                "data_range": f"{window.range_start} .. {format_offsets(window.end_offsets())}",
            }
        )

    def _premerge(self, store: IcebergTables, marked: list[tuple[str, str]]) -> int:
        """The days of the hours just marked done merged so far onto the pre-merge branch of each ODS table the
        source YAML marks `premerge: true` (`cdc/ods/premerge.py`), so that a day's merge after its last hour merges only what is left. A failure is
        logged and never fails the landing: that day's merge then merges the whole day. Returns the days merged."""
        days = sorted({day for day, _ in marked})
        tables = [
            t for db in self.source.databases if db.name == self.database for t in db.tables if t.premerge
        ]
        if not tables:
            return 0
        done = {}  # the day's done hours, one read for every table
        for day in days:
            try:
                done[day] = hours_done(store.warehouse_dir, self.database, day, spark=store.spark)
            except Exception:  # the days' own merges do the whole days instead
                log.exception("could not read the done hours of %s %s to pre-merge", self.database, day)
        merged = 0
        for table in (OdsTable(self.database, t, self.source) for t in tables):
            for day, hours in done.items():
                try:
                    keys, shard = table.key_columns(), table.shard_column
                    merged += bool(premerge_landed(store, self.database, table.name, day, hours, keys, shard))
                except Exception:  # the day's own merge does the whole day instead
                    log.exception("could not pre-merge ods.%s %s", table.name, day)
        return merged

    def _land(self, jl, handle, window, resources, store):
        """The landing's steps (`land`, `quarantine`, `done_markers`) under the claim; (result, hours marked)."""
        prior_run = prior_landing(jl, self.job_name)
        start = {int(p): int(o) for p, o in (window.start or {}).get(self.topic, {}).items()}
        result = self._land_step(jl, handle, resources, store, start, prior_run)
        with jl.step(handle, "quarantine", source_type="kafka", target_type="parquet") as rec:
            rec.failure_count = result.quarantined
            rec.info(json.dumps(result.quarantine_reasons))
        window.record_batch(
            {self.topic: {p: o - 1 for p, o in result.end_offsets.items() if o > start.get(p, 0)}}
        )
        jl.set_range_end(handle, window.finish_end())
        # The done markers publish the hours to the ODS merges: only while this attempt still holds the claim.
        jl.assert_current(handle)
        with jl.step(handle, "done_markers", target_type="marker") as rec:
            marked = write_done_markers(
                store.warehouse_dir,
                self.database,
                result.low_watermark_ms,
                self.source.lateness_minutes,
                result.first_seen_ms,
                spark=resources.spark.session(),
                prior_low_watermark_ms=prior_run.get("low_watermark_ms"),
            )
            rec.target_count = len(marked)
            rec.info(f"done markers: {marked[:3]}{'...' if len(marked) > 3 else ''}")
        return result, marked

    def _land_step(self, jl, handle, resources, store, start: dict[int, int], prior_run: dict):
        """The `land` step: the topic from `start` (the last landing's end) to its end offsets now, into the raw
        binlog table and the typed images, carrying the watermarks and the first commit time seen."""
        from sharp_dagster.cdc.landing.land import land  # the Kafka client: only a run loads it

        prior = {int(k): v for k, v in (prior_run.get("watermarks_ms") or {}).items()} or None
        with jl.step(handle, "land", source_type="kafka", target_type="parquet") as rec:
            database = self.source.database(self.database)
            result = land(
                resources.spark.session(),
                store,
                resources.kafka.consumer_config(),
                self.topic,
                start or None,
                "latest",
                database.shard_rules,
                database=self.database,
                prior_watermarks=prior,
                image_columns=state_columns(store, database.tables),
                # Every commit of the landing says which attempt wrote it (`sharp-dagster table history`).
                commit_properties={
                    "token": str(handle.token),
                    "job_id": handle.job_id,
                    "job_name": self.job_name,
                    "partition": handle.partition_key or "",
                    "run_id": str(handle.run_id),
                },
            )
            seen = [x for x in (prior_run.get("first_seen_ms"), result.first_seen_ms) if x is not None]
            result.first_seen_ms = min(seen) if seen else None
            rec.source_count = result.read
            rec.target_count = result.landed
            rec.success_count = result.landed + result.duplicates
            rec.failure_count = result.quarantined
            rec.info(json.dumps(result.to_dict(), default=str))
        return result


# How many quarantine reasons a weak alert lists (the most frequent first); all are in step_log and the table.
ALERT_REASONS = 5


def alert_quarantine(jl, handle, run_id: str | None, result) -> bool:
    """The weak alert of a landing that quarantined messages: the count and the first reasons, once per run
    (de-duplicated by the attempt's job id). Never raises: the landing already succeeded."""
    try:
        reasons = sorted(result.quarantine_reasons.items(), key=lambda kv: (-kv[1], kv[0]))
        return AlertSink.from_env(engine=jl.engine).send(
            "quarantine",
            dedup_key=f"quarantine:{handle.job_name}:{handle.job_id}",
            title=f"{handle.job_name} [{handle.partition_key}]: {result.quarantined} message(s) quarantined",
            details={
                "severity": "weak",
                "asset": handle.job_name,
                "partition": handle.partition_key,
                "topic": result.topic,
                "run_id": run_id,
                "job_id": handle.job_id,
                "quarantined": result.quarantined,
                "read": result.read,
                "first_reasons": [{"reason": r, "count": n} for r, n in reasons[:ALERT_REASONS]],
                "more_reasons": max(0, len(reasons) - ALERT_REASONS),
                "table": quarantine_table_ref(result.database).qualified,
            },
        )
    except Exception:  # a weak alert never fails a landing that succeeded
        log.exception("could not send the quarantine alert of %s", handle.job_name)
        return False


def ods_description(ods_table: OdsTable) -> str:
    name = ods_table.name
    return (
        f"The source table `{ods_table.database}.{name}` rebuilt from the binlog: its current state, each "
        f"published day a version read as `ods.{name} VERSION AS OF 'YYYY-MM-DD'` (the previous day's state "
        f"plus the day's changes, ordered by binlog position; deleted keys kept as tombstones in "
        f"ods_state.{name}). Merge key: {', '.join(ods_table.key_columns())}."
    )


def ods_landing_dep(ods_table: OdsTable) -> AssetDep:
    """An ODS day reads the day's hours of its database's raw binlog."""
    return AssetDep(
        AssetKey(["original_binlog", ods_table.database]), partition_mapping=TimeWindowPartitionMapping()
    )


def ods_metadata(ods_table: OdsTable) -> dict[str, str]:
    return {"dagster/table_name": f"ods.{ods_table.name}", "merge_key": ", ".join(ods_table.key_columns())}


def ods_check_specs(ods_table: OdsTable, rules, partitions_def) -> list:
    """An ODS table's checks: its quality rules and its schema check."""
    return [
        *quality.check_specs(["ods", ods_table.name], list(rules or []), partitions_def),
        schema_check_spec(ods_table, partitions_def),
    ]


def ods_publish(
    ods_table: OdsTable, spark_resource, rules, grains, log_asset: LogDrivenAsset
) -> AssetPublish:
    """What the lifecycle publishes an ODS table's days with (`publish/materialize.materialize_partitions`)."""
    merge = OdsMerge(ods_table, spark_resource)
    # A dropped/renamed/retyped column some DWD/ADS column reads.
    schema_check = OdsSchemaCheck(ods_table)
    return AssetPublish(
        ods_ref(ods_table.name),
        "daily",
        log_asset,
        merge,
        list(rules or []),
        grains,
        merge.stage_range,
        schema_check,
    )


def build_ods_merge_asset(
    ods_table: OdsTable, rules, grains: dict[str, str], log_asset: LogDrivenAsset
) -> AssetsDefinition:
    """One ODS table as an asset of its own (a run per table; the code location builds a source's tables as one
    multi-asset: `assets/ods_source.py`)."""
    partitions_def = partitions_for("daily", ods_table.start)

    @asset(
        key=["ods", ods_table.name],
        group_name=database_group("ods", ods_table.database),
        description=ods_description(ods_table),
        partitions_def=partitions_def,
        backfill_policy=BackfillPolicy.single_run(),
        deps=[ods_landing_dep(ods_table)],
        io_manager_key="warehouse_io_manager",
        required_resource_keys={"spark"},
        kinds={"spark", "cdc"},
        check_specs=ods_check_specs(ods_table, rules, partitions_def),
        metadata=ods_metadata(ods_table),
    )
    def _merge(context):
        # A single-run backfill of several days goes as one batch: the days merged one after the other on one
        # branch, each day's rules against its snapshot, one publish tagging every day (`publish/range.py`).
        publish = ods_publish(ods_table, context.resources.spark, rules, grains, log_asset)
        yield from materialize_partitions(context, publish, batch=True)

    return _merge


class OdsMerge:
    """The compute of an ODS table's days: per period `checkdone` and `read` (the day's changes), then its `write`
    step around ONE merge of the days onto the branch (`cdc/ods_stage.stage`: cut at the tag of the day before,
    each day merged merge-on-read; when later days are published already, a re-run, they are re-merged after them
    on the same branch and re-published with them). A single period (`Compute`) is a batch of one."""

    def __init__(self, ods_table: OdsTable, spark_resource) -> None:
        self.table = ods_table
        self.job_name = ods_table.asset_key_str
        self.spark_resource = spark_resource

    def __call__(self, period: Period, run: PartitionRun) -> StagedOdsDay:
        return self.stage_range([run], run.branch).day(period.partition_key)

    def stage_range(self, runs: list[PartitionRun], branch: str) -> StagedOds:
        """The runs' days (consecutive, oldest first) staged on `branch`; each run's steps record its own day."""
        table, store = self.table, runs[0].tables
        changes = {}
        for run in runs:
            self._check_done(run.key, run)
        published = ods_store.published_days(store, table.name)  # read once for the stage, passed on
        self._check_previous(published, runs[0].key)
        own = [run.key for run in runs]
        for run in runs:
            with run.step("read", source_type="iceberg") as rec:
                if not changes:  # the range's changes read at once (`range_changes`), each run's step its own
                    changes = self._read_days(store, own)
                rec.source_count = run.source_count = changes[run.key][1]
        later = days_after(published, own[-1])
        if later:
            with runs[-1].step("read_later", source_type="iceberg") as rec:
                changes.update(self._read_days(store, later))
                rec.source_count = sum(changes[day][1] for day in later)
                rec.info(
                    f"a re-run of {own[-1]} while {len(later)} later day(s) are published ({', '.join(later)}): "
                    "their changes are merged again after it and they are re-published with it"
                )
        return self._write(runs, branch, (own, later), changes, published)

    def _write(self, runs: list[PartitionRun], branch: str, days, changes: dict, published) -> StagedOds:
        """The `write` step of every run around ONE merge of the days onto `branch` (cut at the tag of the day
        before the first, among the `published` days read for this stage)."""
        table, store = self.table, runs[0].tables
        own, later = days
        with ExitStack() as steps:
            recs = [
                steps.enter_context(run.step("write", source_type="spark", target_type="iceberg"))
                for run in runs
            ]
            for ref in ods_store.both(table.name):
                drop_orphans(store, ref, runs, branch, recs[0])
            staged = ods_stage.stage(
                store,
                table.name,
                branch,
                (own, later),
                lambda day: (changes[day][0], changes[day][2]),
                table.key_columns(),
                table.shard_column,
                properties=day_properties(
                    {run.key: (str(run.handle.token), run.properties()) for run in runs}, later
                ),
                reads={day: found[1] for day, found in changes.items()},
                published=published,
            )
            together = f" (one branch for {len(own)} days)" if len(own) > 1 else ""
            for run, rec, part in zip(runs, recs, staged.parts, strict=True):
                run.output_fields = schema_fields(part)  # the written schema, for the COMPLETE event
                rec.source_count = run.source_count
                rec.target_count = part.row_count
                rec.success_count = part.changed
                rec.info(
                    f"merged {run.key} onto {branch}{together}: {part.row_count} live rows, "
                    f"{part.changed} keys changed"
                )
            if later:
                recs[-1].info(f"re-merged the later published day(s) {', '.join(later)} after it on {branch}")
        return staged

    def _check_previous(self, published: list[str], key: str) -> None:
        """The day before `key` must be among the `published` days (its tag): the state the merge starts from
        (`versions.start_of`)."""
        if start_of(key, published) is None:
            previous = previous_day(key)
            hint = " (the bootstrap snapshot)" if previous == bootstrap_day(self.table.start) else ""
            raise Failure(
                description=f"{self.job_name} [{key}]: no state of {previous}{hint}: ods.{self.table.name} has "
                f"no tag {previous!r}; not merged"
            )

    def _check_done(self, key: str, run: PartitionRun) -> None:
        """The `checkdone` step: all 24 hourly done markers of the day, else the run fails before reading."""
        spark, warehouse_dir, database = (
            self.spark_resource.session(),
            run.tables.warehouse_dir,
            self.table.database,
        )
        with run.step("checkdone", source_type="done_markers") as rec:
            if not day_complete(warehouse_dir, database, key, spark=spark):
                done = hours_done(warehouse_dir, database, key, spark=spark)
                raise Failure(
                    description=f"{self.job_name} [{key}]: the binlog of {key} has not fully landed: "
                    f"{len(done)} of 24 hourly done markers ({', '.join(done) or 'none'}); not merged"
                )
            rec.source_count = 24

    def _read_days(self, store: IcebergTables, days: list[str]) -> dict:
        """Each day's changes, how many, and its events, the days read together (`range_changes`)."""
        table = self.table
        raw = raw_table_ref(table.database)
        if not store.exists(raw):
            raise Failure(
                description=f"{self.job_name} [{days[0]}]: the raw binlog table {raw.qualified} is empty"
            )
        read = range_changes(store, raw, table.database, table.name, days)
        policy = table.source.ddl  # the source's DDL policy travels with each day's events
        return {
            day: (changes, n, replace(events, policy=policy)) for day, (changes, n, events) in read.items()
        }
