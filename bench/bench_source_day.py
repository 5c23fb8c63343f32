"""A source's ODS day: one run per table (today's per-asset path) vs one run for the source (`assets/ods_source.py`).

    .venv/bin/python bench/bench_source_day.py            # 200 tables a side
    .venv/bin/python bench/bench_source_day.py --quick    # 30 tables a side

One source of two databases with N tables each (`a_tNNNN`, `b_tNNNN`), built in a fresh data folder with a Kafka
broker of its own (loopback, stopped by its pid) and no MariaDB: each table's starting state (a few rows) written
as the bootstrap writes it (`cdc/ods/merge.write_state`), a few changes per table of the day sent to the topic as
the collector sends them, the day landed by the code location's own landing job (raw binlog, typed images, done
markers). Then the same day of both databases, side by side in one process:
- per-asset: each table of `a` as the asset of its own (`build_ods_merge_asset`), one Dagster run per table, as the
  log-driven sensor launches them (`--per-asset-tables` of them: the cost per table does not depend on N);
- source-day: every table of `b` in ONE run of the database's multi-asset, `--threads` at once.
Each table has two strong rules (row count, key unique) and one weak rule. Figures: wall and Spark jobs per
table-day on each path, the whole day's wall on the source path, and that every table's day is tagged.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

BOOT, DAY = "2023-12-31", "2024-01-01"
ROWS, CHANGES = 3, 3
# Dagster's console log at WARNING on both paths (its DEBUG lines for hundreds of steps are not what is measured).
QUIET = {"loggers": {"console": {"config": {"log_level": "WARNING"}}}}
COLUMNS = ["id BIGINT NOT NULL", "customer VARCHAR(32) NOT NULL", "amount DECIMAL(10,2)", "note VARCHAR(64)"]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="30 tables a side")
    p.add_argument("--tables", type=int, help="tables of the source-day side (default 200, --quick 30)")
    p.add_argument("--per-asset-tables", type=int, help="tables run one per run (default: min(tables, 30))")
    p.add_argument("--threads", type=int, nargs="+", default=[2], help="source-day thread counts to measure")
    p.add_argument("--json", type=Path, help="write the figures here")
    args = p.parse_args(argv)
    args.tables = args.tables or (30 if args.quick else 200)
    args.per_asset_tables = min(args.per_asset_tables or 30, args.tables)
    return args


def names(prefix: str, n: int) -> list[str]:
    return [f"{prefix}_t{i:04d}" for i in range(n)]


def write_warehouse(root: Path, databases: dict[str, list[str]]) -> None:
    """A warehouse folder whose only source is `databases`' tables (no DWD/ADS), each with three rules."""
    for sub in ("cdc", "dwd", "ads", "quality"):
        (root / sub).mkdir(parents=True, exist_ok=True)
    lines = [
        "source_id: bench-src",
        "flavor: mariadb",
        "replica_server_id: 4999",
        "lateness_minutes: 15",
        "topic_partitions: 1",
        "databases:",
    ]
    for db, tables in databases.items():
        lines += [f"  - name: {db}", f"    topic: binlog.{db}", "    tables:"]
        for t in tables:
            lines += [f"      - name: {t}", "        primary_key: [id]", "        columns:"]
            lines += [f"          - {c}" for c in COLUMNS]
    (root / "cdc" / "bench.yaml").write_text("\n".join(lines) + "\n")
    rules = ["rules:"]
    for t in (t for tables in databases.values() for t in tables):
        rules += [
            f"  - {{asset: ods/{t}, id: has_rows, template: row_count, comparator: '>', expect: 0, "
            "severity: strong, dimension: completeness}",
            f"  - {{asset: ods/{t}, id: id_unique, template: duplicate_count, params: {{key: [id]}}, "
            "comparator: '=', expect: 0, severity: strong, dimension: uniqueness}",
            f"  - {{asset: ods/{t}, id: amount_set, template: null_rate, params: {{column: amount}}, "
            "comparator: '<=', expect: 0.5, severity: weak, dimension: completeness}",
        ]
    (root / "quality" / "ods.yaml").write_text("\n".join(rules) + "\n")


def bootstrap_states(store, tables: list[str]) -> None:
    """Each table's starting state of `ROWS` rows, tagged BOOT, as `cdc bootstrap` writes it."""
    from decimal import Decimal

    from sharp_dagster.cdc.ods import merge as ods_merge

    schema = "id bigint, customer string, amount decimal(10,2), note string, _binlog_seq decimal(38,0), "
    schema += "_is_deleted boolean"
    rows = [(i, f"c{i}", Decimal("1.00") * i, None, Decimal(0), False) for i in range(1, ROWS + 1)]
    frame = store.spark.createDataFrame(rows, schema).localCheckpoint()
    ods_merge.write_state(
        store, tables[0], BOOT, frame, ["id"]
    )  # the namespaces made once, before the threads
    with ThreadPoolExecutor(max_workers=4) as pool:  # set-up only: not measured
        list(pool.map(lambda t: ods_merge.write_state(store, t, BOOT, frame, ["id"]), tables[1:]))


def send_day(bootstrap: str, database: str, tables: list[str], seq0: int) -> None:
    """`CHANGES` changes per table on DAY (an update, a delete, an insert), then the heartbeat closing the day."""
    from confluent_kafka import Producer

    from sharp_dagster.cdc.capture.kafka_topics import ensure_topic
    from sharp_dagster.cdc.change.messages import HEARTBEAT, BinlogMessage, encode

    topic = f"binlog.{database}"
    ensure_topic({"bootstrap.servers": bootstrap}, topic, 1)
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    base_ms = 1704067200000 + 3600_000  # DAY 01:00 UTC
    seq = seq0
    for t in tables:
        for op, row in (
            ("UPDATE", {"id": "1", "customer": "c1", "amount": "9.99", "note": "changed"}),
            ("DELETE", {"id": "2", "customer": "c2", "amount": "2.00", "note": None}),
            ("INSERT", {"id": "100", "customer": "new", "amount": "5.00", "note": None}),
        ):
            seq += 1
            message = BinlogMessage(
                type=op, source_id="bench-src", database=database, table=t, event_ts_ms=base_ms + seq,
                binlog_file="mysql-bin.000001", binlog_pos=4 + 100 * seq, gtid=f"0-1-{seq}", server_id=1,
                pk_names=["id"], data=row, before={"id": row["id"]} if op == "UPDATE" else None,
                old={} if op == "UPDATE" else None,
            )  # fmt: skip
            producer.produce(topic, encode(message), key=f"{t}|{row['id']}".encode())
    end = 1704067200000 + 86_400_000 + 16 * 60_000  # the day's end + lateness
    beat = BinlogMessage(
        type=HEARTBEAT, source_id="bench-src", database=database, table="", event_ts_ms=end,
        binlog_file="mysql-bin.000001", binlog_pos=0,
    )  # fmt: skip
    producer.produce(topic, encode(beat), partition=0)
    if producer.flush(60):
        raise RuntimeError(f"{topic}: messages undelivered")


def spark_job_count(spark) -> int:
    """The jobs the session ran so far: the newest job id + 1 (the status store keeps only the latest jobs)."""
    jobs = spark.sparkContext._jsc.sc().statusStore().jobsList(None)
    return max((int(jobs.apply(i).jobId()) for i in range(jobs.size())), default=-1) + 1


def tagged(store, tables: list[str]) -> int:
    from sharp_dagster.cdc.ods import store as ods_store

    return sum(DAY in ods_store.published_days(store, t) for t in tables)


def per_asset_day(defs, instance, tables: list[str]) -> dict:
    """Each table's day as the asset of its own, one run per table."""
    from dagster import materialize

    from sharp_dagster import definitions
    from sharp_dagster.assets.cdc_assets import build_ods_merge_asset
    from sharp_dagster.warehouse.cdc_layout import ods_tables

    spark, store = defs.resources["spark"].session(), defs.resources["spark"].store()
    by_name = {t.name: t for t in ods_tables()}
    jobs0, t0, failed = spark_job_count(spark), time.perf_counter(), []
    for name in tables:
        asset = build_ods_merge_asset(
            by_name[name], definitions.RULES.get(f"ods/{name}"), definitions.GRAINS,
            definitions.LAYOUT.log_assets[f"ods/{name}"],
        )  # fmt: skip
        result = materialize(
            [asset], instance=instance, resources=defs.resources, partition_key=DAY, raise_on_error=False,
            run_config=QUIET,
        )  # fmt: skip
        if not result.success:
            failed.append(name)
    wall, jobs = time.perf_counter() - t0, spark_job_count(spark) - jobs0
    n = len(tables)
    return {
        "tables": n, "wall_s": round(wall, 1), "s_per_table_day": round(wall / n, 3),
        "spark_jobs_per_table_day": round(jobs / n, 1), "failed": failed, "tagged": tagged(store, tables),
    }  # fmt: skip


def source_day(defs, instance, database: str, tables: list[str], threads: int) -> dict:
    """Every table's day in one run of the database's multi-asset."""
    from dagster import AssetKey, materialize

    spark, store = defs.resources["spark"].session(), defs.resources["spark"].store()
    os.environ["SHARP_ODS_SOURCE_THREADS"] = str(threads)
    source = next(
        a for a in defs.assets if getattr(a, "node_def", None) and a.node_def.name == f"ods_source_{database}"
    )
    jobs0, t0 = spark_job_count(spark), time.perf_counter()
    result = materialize(
        [source], selection=[AssetKey(["ods", t]) for t in tables], instance=instance,
        resources=defs.resources, partition_key=DAY, raise_on_error=False, run_config=QUIET,
    )  # fmt: skip
    wall, jobs = time.perf_counter() - t0, spark_job_count(spark) - jobs0
    n = len(tables)
    return {
        "tables": n, "threads": threads, "wall_s": round(wall, 1), "s_per_table_day": round(wall / n, 3),
        "spark_jobs_per_table_day": round(jobs / n, 1), "success": result.success,
        "tagged": tagged(store, tables),
    }  # fmt: skip


def measure(args: argparse.Namespace, tmp: Path) -> dict:
    from dagster import DagsterInstance

    from sharp_dagster.servers.broker import LocalBroker

    a_tables, b_tables = names("a", args.per_asset_tables), names("b", args.tables * len(args.threads))
    databases = {"bench_a": a_tables, "bench_b": b_tables}
    write_warehouse(tmp / "warehouse", databases)
    os.environ.update(
        SHARP_DATA_DIR=str(tmp / "data"), SHARP_WAREHOUSE_SQL_DIR=str(tmp / "warehouse"),
        SHARP_CLAIM_TIMEOUT_S="600",
    )  # fmt: skip
    os.environ.pop("SHARP_LOG_DB_URL", None)
    broker = LocalBroker().start()
    try:
        os.environ["SHARP_KAFKA_BOOTSTRAP"] = broker.bootstrap_servers
        from sharp_dagster.definitions import defs

        store = defs.resources["spark"].store()
        t0 = time.perf_counter()
        bootstrap_states(store, a_tables + b_tables)
        setup = {"bootstrap_s": round(time.perf_counter() - t0, 1)}
        with DagsterInstance.ephemeral() as instance:
            t0 = time.perf_counter()
            for i, (db, tables) in enumerate(databases.items()):
                send_day(broker.bootstrap_servers, db, tables, seq0=i * 10**6)
            landing = defs.resolve_job_def("binlog_hourly").execute_in_process(
                partition_key=f"{DAY}-23:00", instance=instance, raise_on_error=False, run_config=QUIET
            )
            if not landing.success:
                raise RuntimeError("the landing of the day failed")
            setup["landing_s"] = round(time.perf_counter() - t0, 1)
            out = {"setup": setup, "per_asset": per_asset_day(defs, instance, a_tables), "source_day": []}
            for k, threads in enumerate(args.threads):
                chunk = b_tables[k * args.tables : (k + 1) * args.tables]
                out["source_day"].append(source_day(defs, instance, "bench_b", chunk, threads))
        return out
    finally:
        broker.cleanup()


def report(r: dict) -> str:
    pa = r["per_asset"]
    lines = [
        f"per-asset path ({pa['tables']} tables, one run each): {pa['s_per_table_day']} s and "
        f"{pa['spark_jobs_per_table_day']} Spark jobs per table-day ({pa['tagged']} tagged)"
    ]
    for sd in r["source_day"]:
        lines.append(
            f"source day ({sd['tables']} tables, one run, {sd['threads']} thread(s)): whole day {sd['wall_s']} s, "
            f"{sd['s_per_table_day']} s and {sd['spark_jobs_per_table_day']} Spark jobs per table-day "
            f"({sd['tagged']} tagged) = {sd['s_per_table_day'] / pa['s_per_table_day']:.2f}x the per-asset path"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    load = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="bench_source_day_") as tmp:
        result = measure(args, Path(tmp))
    result["load_1min_before"] = round(load, 2)
    result["load_1min_after"] = round(os.getloadavg()[0], 2)
    print(json.dumps(result, indent=1))
    print(report(result))
    if args.json:
        args.json.write_text(json.dumps(result, indent=1))
    ok = result["per_asset"]["tagged"] == result["per_asset"]["tables"] and all(
        s["success"] and s["tagged"] == s["tables"] for s in result["source_day"]
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
