"""`cdc init` then `cdc bootstrap` on a live MariaDB, then the pipeline (collect, land, merge) reproduces the source.

The bootstrap is the command a user runs: its snapshot becomes the ODS state of the day before its start, its run
and binlog position are in the job log, its start goes into the source YAML, and a second run is refused. The
collector then starts at the recorded GTID and the changes of the start day, merged as the ODS asset merges them,
give the source's tables as they stand at the end of that day.
"""

from __future__ import annotations

import datetime as dt

import yaml
from pyspark.sql import functions as F

from sharp_dagster.assets.cdc_assets import state_columns
from sharp_dagster.cdc.bootstrap import bootstrap_position, job_name, state_ref
from sharp_dagster.cdc.change_source import day_changes
from sharp_dagster.cdc.config import load_source_config
from sharp_dagster.cdc.done_markers import day_complete, write_done_markers
from sharp_dagster.cdc.introspect import introspect
from sharp_dagster.cdc.landing import land, raw_table_ref
from sharp_dagster.cdc.merge import merge_day, published
from sharp_dagster.cli.main import main as cli_main
from sharp_dagster.joblog import JobLog
from sharp_dagster.warehouse.cdc_layout import SHARD_COLUMN, OdsTable, bootstrap_day, cdc_dir
from sharp_dagster_tests.cdc.test_end_to_end import SimulatedClock

SHOP = load_source_config(cdc_dir() / "shop.yaml").databases[0]


def source_rows(mariadb, db: str, table) -> list[tuple]:
    """A logical table's rows now, as text (a sharded table's with their shard first)."""
    rows = []
    conn = mariadb.connect(db)
    try:
        with conn.cursor() as cur:
            for shard in table.shards:
                cur.execute(f"SELECT {', '.join(f'`{c}`' for c in table.column_names)} FROM `{shard}`")
                prefix = (shard,) if table.sharded else ()
                rows += [prefix + tuple(None if v is None else str(v) for v in r) for r in cur.fetchall()]
    finally:
        conn.close()
    return sorted(rows, key=repr)


def ods_rows(df, table) -> list[tuple]:
    columns = ([SHARD_COLUMN] if table.sharded else []) + table.column_names
    return sorted(
        [tuple(r) for r in df.select(*[F.col(f"`{c}`").cast("string") for c in columns]).collect()], key=repr
    )


def run_sql(mariadb, db: str, when: dt.datetime, *statements: str) -> None:
    """Statements of the application at a time of the source's clock (`SET timestamp`), each committed."""
    conn = mariadb.connect(db)
    try:
        with conn.cursor() as cur:
            cur.execute("SET time_zone = '+00:00'")
            cur.execute("SET timestamp = %s", (int(when.replace(tzinfo=dt.UTC).timestamp()),))
            for sql in statements:
                cur.execute(sql)
    finally:
        conn.close()


def test_init_bootstrap_then_the_pipeline_reproduces_the_source(
    cdc, spark, table_store, tmp_path, monkeypatch
):
    db = cdc.new_database("boot")
    cdc.sql(db, *[t.mysql_ddl(shard) for t in SHOP.tables for shard in t.shards])
    before = dt.datetime(2024, 5, 1, 8)
    run_sql(
        cdc.mariadb,
        db,
        before,
        *[
            f"INSERT INTO user_info_{u % 4} VALUES ({u}, 'user{u}', 'city{u % 3}', 'silver', "
            f"'{'1000-01-01 00:00:00' if u == 1 else '2024-01-01 00:00:00'}', NOW())"
            for u in range(1, 13)
        ],
        "INSERT INTO product VALUES (1, 'pen', 'office', 1.50, NOW()), (2, 'ink', 'office', 3.25, NOW())",
        "INSERT INTO orders VALUES (1, 1, 'paid', '2024-04-30 23:59:59', 10.00, NOW()), "
        "(2, 2, 'paid', '2024-05-01 00:00:00', 20.00, NOW())",
        "INSERT INTO order_item VALUES (1, 1, 1, 2, 1.50), (2, 1, 2, 1, 3.25), (3, 2, 2, 4, 3.25)",
    )

    # cdc init writes the YAML the bootstrap reads.
    init = introspect(cdc.mysql, [db], topic_partitions=2)
    assert init.problems == []
    config_path = tmp_path / "source.yaml"
    config_path.write_text(init.yaml)

    # cdc bootstrap, as the user runs it: the warehouse and job log of this test (its catalog is the current one).
    monkeypatch.setenv("SHARP_WAREHOUSE_DIR", str(tmp_path / "warehouse"))
    monkeypatch.setenv("SHARP_LOG_DB_URL", f"sqlite:///{tmp_path / 'sharp_log.db'}")
    monkeypatch.delenv("SHARP_CDC_MYSQL_PASSWORD", raising=False)
    argv = ["cdc", "bootstrap", "--config", str(config_path), "--host", cdc.mariadb.host]
    # Exact row counts in information_schema, so that the shards of 3 rows are read in 2 key ranges each.
    cdc.sql(db, *[f"ANALYZE TABLE `{shard}`" for t in SHOP.tables for shard in t.shards])
    argv += ["--port", str(cdc.mariadb.port), "--partition-rows", "2"]
    assert cli_main(argv) == 0
    source = load_source_config(config_path)
    start = source.start
    with cdc.mariadb.connect() as conn, conn.cursor() as cur:
        cur.execute("SELECT UTC_DATE()")
        assert start == cur.fetchone()[0].isoformat()
    jl = JobLog(f"sqlite:///{tmp_path / 'sharp_log.db'}")
    position = bootstrap_position(jl, db)
    run = jl.get(position["job_id"])
    assert run.status == "SUCCESS" and run.range_start == start and run.job_name == job_name(db)
    assert [s.step_id for s in run.steps] == [
        "position",
        *[f"snapshot/{t.name}" for t in source.databases[0].tables],
    ]
    assert position["start"] == start and position["gtid"] == cdc.gtid_pos()
    tables = {t.name: t for t in source.databases[0].tables}
    for name, table in tables.items():
        state = table_store.read_partitions(state_ref(name), [{"dt": bootstrap_day(start)}])
        assert ods_rows(published(state.drop("dt")), table) == source_rows(cdc.mariadb, db, table), name
        assert (SHARD_COLUMN in state.columns) == table.sharded
    steps = {s.step_id: s for s in run.steps}
    assert steps["snapshot/user_info"].target_count == 12
    assert steps["snapshot/user_info"].output == "4 shard(s), each read in 2 key range(s)"
    assert steps["snapshot/product"].output == "1 shard(s), each read in 1 key range(s)"

    # Bootstrapped already: refused, and nothing changes (the YAML's start neither).
    assert cli_main(argv) == 2
    assert load_source_config(config_path).start == start

    # The start day's changes, after the snapshot: updates, a key change, deletes, re-inserts, every shard.
    day = dt.datetime.fromisoformat(start)
    run_sql(
        cdc.mariadb,
        db,
        day.replace(hour=0, minute=5),
        "UPDATE user_info_1 SET city = 'moved', updated_at = NOW() WHERE user_id IN (1, 5)",
        "UPDATE user_info_2 SET user_id = 102, updated_at = NOW() WHERE user_id = 2",
        "DELETE FROM user_info_3 WHERE user_id = 3",
        "INSERT INTO user_info_0 VALUES (13, 'user13', NULL, 'gold', '1000-01-01 00:00:01', NOW())",
    )
    run_sql(
        cdc.mariadb,
        db,
        day.replace(hour=17, minute=30),
        "UPDATE product SET price = 1.75, updated_at = NOW() WHERE product_id = 1",
        "DELETE FROM order_item WHERE order_id = 1",
        "INSERT INTO order_item VALUES (1, 2, 1, 9, 1.75)",  # a deleted key comes back
        "UPDATE orders SET order_status = 'shipped', order_id = 3, updated_at = NOW() WHERE order_id = 2",
        "DELETE FROM user_info_3 WHERE user_id = 7",
    )
    collector = cdc.collector(
        source, start=position["gtid"], clock=SimulatedClock(day + dt.timedelta(days=1, minutes=30))
    )
    assert collector.run(once=True).row_changes == 11

    topic = source.databases[0].topic
    landed = land(
        spark,
        table_store,
        cdc.kafka,
        topic,
        None,
        "latest",
        source.databases[0].shard_rules,
        database=db,
        image_columns=state_columns(table_store, source.databases[0].tables),
    )
    assert landed.landed == 11 and landed.quarantined == 0
    since = int(day.replace(tzinfo=dt.UTC).timestamp() * 1000)
    write_done_markers(table_store.warehouse_dir, db, landed.low_watermark_ms, source.lateness_minutes, since)
    assert day_complete(table_store.warehouse_dir, db, start)

    # The daily merge of the start day, as the ODS asset runs it, gives the source at the end of the day.
    for name, table in tables.items():
        t = OdsTable(db, table, source)
        base = table_store.read_partitions(state_ref(name), [{"dt": bootstrap_day(start)}]).drop("dt")
        changes, _, events = day_changes(table_store, raw_table_ref(db), t.database, t.name, start)
        state = merge_day(base, changes, t.key_columns(), shard_column=t.shard_column, events=events)
        assert ods_rows(published(state), table) == source_rows(cdc.mariadb, db, table), name
    assert yaml.safe_load(config_path.read_text())["start"] == dt.date.fromisoformat(start)
