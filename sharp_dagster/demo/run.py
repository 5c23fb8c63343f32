"""The main job: generate the shop's data if missing, then materialize every asset day by day, in order.

Runs through Dagster's own execution against a real `DagsterInstance` (home: `DAGSTER_HOME`, default
`data/dagster_home`), so `dagster dev` shows the runs and materializations afterwards.
"""

from __future__ import annotations

import os
import shutil
import sys
import time
from dataclasses import dataclass, field
from datetime import date, timedelta
from pathlib import Path

from dagster import DagsterInstance

from sharp_dagster.cdc.capture.kafka_topics import ensure_topic
from sharp_dagster.cdc.merge.fold import initial_state
from sharp_dagster.cdc.ods.merge import write_state
from sharp_dagster.dagster_home import ensure_dagster_home
from sharp_dagster.demo.generator import GeneratorConfig, generate
from sharp_dagster.demo.replay import replay_day
from sharp_dagster.demo.sample_tables import register_sources, snapshot_table
from sharp_dagster.servers.broker import LocalBroker
from sharp_dagster.settings import DEFAULT_START, KAFKA_ENV, Settings, dagster_home_given, kafka_bootstrap
from sharp_dagster.warehouse.cdc_layout import START, bootstrap_day, landing_assets, ods_tables

# Dagster logs every step at DEBUG to the console; the demo prints its own progress instead.
QUIET = {"loggers": {"console": {"config": {"log_level": "WARNING"}}}}


@dataclass
class DemoResult:
    days: list[str]
    rows: dict[str, dict[str, int]] = field(default_factory=dict)  # asset -> partition -> rows
    seconds: float = 0.0
    failed: str | None = None


def demo_days(start: str, days: int) -> list[str]:
    first = date.fromisoformat(start)
    return [(first + timedelta(days=i)).isoformat() for i in range(days)]


def demo_broker_dir(settings: Settings) -> Path:
    """Where the demo's Kafka broker keeps its log dirs."""
    return settings.data_dir / "kafka"


def reset_demo_state(settings: Settings, out=sys.stdout) -> None:
    """Remove what a previous demo wrote (warehouse, job log, Dagster home); the generated sample data stays.

    The demo's Kafka broker keeps its topics under `data/kafka`; they go too, since the binlog is replayed anew and
    the job log's offsets are forgotten with it.
    """

    if not isinstance(settings.warehouse_dir, Path):
        raise ValueError(f"the demo runs on a local warehouse folder, not {settings.warehouse_dir}")
    targets = [
        settings.warehouse_dir,
        Path(dagster_home_given() or settings.dagster_home),
        demo_broker_dir(settings),
    ]
    if settings.log_db_url.startswith("sqlite:///"):
        db = Path(settings.log_db_url.removeprefix("sqlite:///"))
        targets += [db, db.with_name(db.name + "-wal"), db.with_name(db.name + "-shm")]
    for target in targets:
        if target.is_dir():
            shutil.rmtree(target)
        elif target.exists():
            target.unlink()
    print(f"reset the previous demo's state under {settings.data_dir}", file=out)


def bootstrap_ods(spark, store, sample_dir: Path) -> dict[str, int]:
    """The first ODS states: the generated snapshot, stamped with binlog position 0 (before every change), each
    published as the day before the start (its tag: `cdc/ods/merge.write_state`)."""

    register_sources(spark, sample_dir)
    rows = {}
    for t in ods_tables():
        snap = spark.table(snapshot_table(t.name))
        snap = (
            snap.withColumnRenamed("_source_table", "source_table")
            if t.sharded
            else snap.drop("_source_table")
        )
        rows[t.name] = write_state(
            store, t.name, bootstrap_day(START), initial_state(snap, 0), t.key_columns(), t.shard_column
        )
    return rows


def run_demo(
    days: int = 3, start: str | None = None, users: int = 200, keep: bool = False, out=sys.stdout
) -> DemoResult:
    """Generate the shop, then per day: replay its binlog through Kafka, land it, merge ODS, build DWD and ADS."""

    settings = Settings.from_env()
    if start not in (None, DEFAULT_START):
        raise ValueError(f"the demo's sample data starts on {DEFAULT_START}")
    if not keep:
        reset_demo_state(settings, out)
    home = ensure_dagster_home(settings)
    cfg = GeneratorConfig(start=DEFAULT_START, days=max(days, 7), users=users)
    t0 = time.monotonic()
    print(f"sample data: {settings.sample_dir / 'shop'}", file=out)
    manifest = generate(settings.sample_dir, cfg)
    print(
        f"  {sum(manifest['counts']['snapshot'].values())} snapshot rows, {manifest['last_seq']} row changes "
        f"over {cfg.days} days",
        file=out,
    )
    print(f"dagster home: {home}", file=out)
    broker = None
    if not kafka_bootstrap():
        broker = LocalBroker(base_dir=demo_broker_dir(settings)).start()
        os.environ[KAFKA_ENV] = broker.bootstrap_servers
        print(
            f"started a local Apache Kafka broker at {broker.bootstrap_servers} (pid {broker.pid})",
            file=out,
        )
    try:
        return _run_days(settings, days, manifest, out, t0)
    finally:
        if broker is not None:
            broker.stop()
            os.environ.pop(KAFKA_ENV, None)


def _run_days(settings: Settings, days: int, manifest: dict, out, t0: float) -> DemoResult:
    print("loading definitions and starting Spark ...", file=out, flush=True)
    # Here, not at the top: the definitions are loaded after the demo's state is reset and its Dagster home set,
    # and only when the run gets here (after the progress line above).
    from sharp_dagster.definitions import defs

    bootstrap = kafka_bootstrap()
    (source, database, topic) = landing_assets()[0]
    ensure_topic({"bootstrap.servers": bootstrap}, topic, source.topic_partitions)
    spark_resource = defs.resources["spark"]
    rows = bootstrap_ods(spark_resource.session(), spark_resource.store(), settings.sample_dir)
    print(f"bootstrapped the ODS states from the snapshot: {rows}", file=out, flush=True)

    daily = defs.resolve_job_def("warehouse_daily")
    hourly = defs.resolve_job_def("binlog_hourly")
    result = DemoResult(days=demo_days(DEFAULT_START, days))
    with DagsterInstance.get() as instance:
        for i, day in enumerate(result.days, start=1):
            t_day = time.monotonic()
            sent = replay_day(
                settings.sample_dir, day, bootstrap, topic, source.source_id, source.lateness_minutes
            )
            print(
                f"[{i}/{len(result.days)}] {day}: {sent} binlog messages sent to {topic}; landing",
                file=out,
                flush=True,
            )
            runs = [
                hourly.execute_in_process(
                    partition_key=f"{day}-23:00", instance=instance, raise_on_error=False, run_config=QUIET
                )
            ]
            if runs[0].success:
                print(
                    f"      merging and building {len(daily.asset_layer.executable_asset_keys)} assets",
                    file=out,
                    flush=True,
                )
                runs.append(
                    daily.execute_in_process(
                        partition_key=day, instance=instance, raise_on_error=False, run_config=QUIET
                    )
                )
            for run in runs:
                for event in run.get_asset_materialization_events():
                    mat = event.materialization
                    rows_meta = mat.metadata.get("dagster/row_count")
                    count = int(rows_meta.value) if rows_meta is not None else 0
                    name = mat.asset_key.to_user_string()
                    result.rows.setdefault(name, {})[day] = count
                    print(f"      {name:<28} {count:>7} rows", file=out, flush=True)
            failed = next((r for r in runs if not r.success), None)
            if failed is not None:
                failure = next((e for e in failed.all_events if e.is_step_failure), None)
                reason = failure.step_failure_data.error.message.strip() if failure else "run failed"
                result.failed = f"{day}: {reason}"
                print(f"      FAILED: {reason}", file=out)
                break
            print(f"      done in {time.monotonic() - t_day:.1f}s", file=out, flush=True)
    result.seconds = time.monotonic() - t0
    print_summary(result, out)
    return result


def print_summary(result: DemoResult, out=sys.stdout) -> None:
    print("", file=out)
    print("demo summary", file=out)
    print(f"  {'table':<28} {'partitions':>10} {'rows':>9}  {'last partition':>14}", file=out)
    order = ("original_binlog", "ods", "dwd", "ads")
    for name in sorted(
        result.rows, key=lambda n: (order.index(n.split("/")[0]) if n.split("/")[0] in order else 9, n)
    ):
        parts = result.rows[name]
        last = max(parts)
        print(f"  {name:<28} {len(parts):>10} {sum(parts.values()):>9}  {parts[last]:>7} ({last})", file=out)
    status = "FAILED at " + result.failed if result.failed else "ok"
    print(f"  {len(result.rows)} tables, {len(result.days)} days, {result.seconds:.1f}s: {status}", file=out)
