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

from sharp_dagster.cdc.landing.done_markers import day_complete, write_done_markers
from sharp_dagster.cdc.landing.land import land
from sharp_dagster.cdc.landing.raw_tables import raw_table_ref
from sharp_dagster.cdc.merge.change_source import day_changes
from sharp_dagster.cdc.merge.fold import merge_day, published
from sharp_dagster.cdc.ods import stage as ods_stage
from sharp_dagster.cdc.ods import store as ods_store
from sharp_dagster.cdc.ods.bootstrap import bootstrap_position, bootstrap_source, job_name
from sharp_dagster.cdc.ods.columns import state_columns
from sharp_dagster.cdc.source.clock import NOW_SQL
from sharp_dagster.cdc.source.config import load_source_config, source_config_from_dict
from sharp_dagster.cdc.source.introspect import introspect
from sharp_dagster.cli.main import main as cli_main
from sharp_dagster.joblog import JobLog
from sharp_dagster.warehouse.cdc_layout import SHARD_COLUMN, OdsTable, bootstrap_day, cdc_dir
from sharp_dagster_tests.cdc.source_support import SimulatedClock, run_sql

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


def test_init_bootstrap_then_the_pipeline_reproduces_the_source(
    cdc, spark, table_store, tmp_path, monkeypatch, capsys
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
        "day_check",
    ]
    assert position["start"] == start and position["gtid"] == cdc.gtid_pos()
    tables = {t.name: t for t in source.databases[0].tables}
    for name, table in tables.items():
        assert ods_store.published_days(table_store, name) == [bootstrap_day(start)], name
        state = ods_store.state_at(table_store, name, bootstrap_day(start))
        assert ods_rows(published(state), table) == source_rows(cdc.mariadb, db, table), name
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

    # The daily merge of the start day, staged and published as the ODS asset does it, gives the source at the
    # end of the day (the day's tag).
    for name, table in tables.items():
        t = OdsTable(db, table, source)
        changes, _, events = day_changes(table_store, raw_table_ref(db), t.database, t.name, start)
        branch = f"stage_{start.replace('-', '_')}_1"
        staged = ods_stage.stage(
            table_store,
            name,
            branch,
            ([start], []),
            lambda _day, pair=(changes, events): pair,
            t.key_columns(),
            t.shard_column,
        )
        staged.publish(table_store)
        got = ods_store.read_version(table_store, name, start)
        assert ods_rows(got, table) == source_rows(cdc.mariadb, db, table), name
    assert yaml.safe_load(config_path.read_text())["start"] == dt.date.fromisoformat(start)

    # --force while the start day is merged already: refused before anything is read (that day was merged from
    # the old snapshot), nothing changes; rolled back to the bootstrap day, it goes ahead.
    run_sql(cdc.mariadb, db, day.replace(hour=18), "UPDATE product SET price = 2.00 WHERE product_id = 2")
    capsys.readouterr()
    assert cli_main([*argv, "--force"]) == 2
    said = capsys.readouterr().err
    assert f"has days merged after {bootstrap_day(start)} ({start})" in said, said
    assert bootstrap_position(jl, db)["job_id"] == position["job_id"]
    assert ods_store.published_days(table_store, "product") == [bootstrap_day(start), start]
    for name in tables:
        assert ods_store.rollback_to_day(table_store, name, bootstrap_day(start)) == [start]

    # --force: a new snapshot, after more changes, replaces the day's starting state (the job log names what it
    # replaces), and `cdc collect` without --start starts at the new position.
    assert cli_main([*argv, "--force"]) == 0
    forced = bootstrap_position(jl, db)
    assert forced["job_id"] != position["job_id"] and forced["gtid"] == cdc.gtid_pos()
    assert forced["replaces"] == {"job_id": position["job_id"], "start": start}
    steps = {s.step_id: s for s in jl.get(forced["job_id"]).steps}
    assert steps["snapshot/product"].output.splitlines()[1] == (
        f"replaces ods.product {bootstrap_day(start)} (2 rows)"
    )
    run_sql(
        cdc.mariadb,
        db,
        day.replace(hour=19),
        "DELETE FROM product WHERE product_id = 1",
        "UPDATE user_info_0 SET city = 'late', updated_at = NOW() WHERE user_id = 4",
    )
    collect = ["cdc", "collect", "--config", str(config_path), "--host", cdc.mariadb.host]
    collect += [
        "--port",
        str(cdc.mariadb.port),
        "--bootstrap-servers",
        cdc.broker.bootstrap_servers,
        "--once",
    ]
    assert cli_main(collect) == 0
    assert "(2 row changes," in capsys.readouterr().out  # the two after the new snapshot, nothing before it
    landed = land(
        spark,
        table_store,
        cdc.kafka,
        topic,
        landed.end_offsets,
        "latest",
        source.databases[0].shard_rules,
        database=db,
        image_columns=state_columns(table_store, source.databases[0].tables),
    )
    assert landed.landed == 2
    for name, table in tables.items():
        t = OdsTable(db, table, source)
        base = ods_store.state_at(table_store, name, bootstrap_day(start))
        changes, _, events = day_changes(table_store, raw_table_ref(db), t.database, t.name, start)
        state = merge_day(base, changes, t.key_columns(), shard_column=t.shard_column, events=events)
        assert ods_rows(published(state), table) == source_rows(cdc.mariadb, db, table), (
            f"after --force: {name}"
        )


class SessionClock:
    """The source server's clock as one session of it reads it (`NOW()`), set by the test with `SET timestamp`."""

    def __init__(self, mariadb, when: dt.datetime):
        self.conn = mariadb.connect()
        self.set(when)

    def set(self, when: dt.datetime) -> None:
        with self.conn.cursor() as cur:
            cur.execute("SET timestamp = %s", (int(when.replace(tzinfo=dt.UTC).timestamp()),))

    def __call__(self) -> int:
        with self.conn.cursor() as cur:
            cur.execute(NOW_SQL)
            return int(cur.fetchone()[0])


def test_a_snapshot_read_across_midnight_is_taken_again_on_the_new_day(cdc, spark, table_store, tmp_path):
    """The position is read at 23:59:59; a change commits at 00:00:05 while the tables are read: that snapshot
    holds a change of the next day, so it is not the state at the end of its day. The run fails saying so, and the
    snapshot is taken again on the new day, which becomes the start."""
    db = cdc.new_database("midnight")
    product = next(t for t in SHOP.tables if t.name == "product")
    cdc.sql(db, product.mysql_ddl("product"))
    day = dt.datetime(2024, 6, 10)
    run_sql(
        cdc.mariadb, db, day.replace(hour=23), "INSERT INTO product VALUES (1, 'pen', 'office', 1.50, NOW())"
    )
    source = source_config_from_dict(
        {
            "source_id": "midnight",
            "databases": [{"name": db, "tables": [{"name": "product", "primary_key": ["product_id"]}]}],
        }
    )
    clock = SessionClock(cdc.mariadb, day.replace(hour=23, minute=59, second=59))
    positions = []

    def progress(line: str) -> None:
        if "binlog position" in line:
            positions.append(cdc.gtid_pos())
            if len(positions) == 1:  # during the first read: a change commits after midnight
                after = day + dt.timedelta(days=1, seconds=5)
                run_sql(cdc.mariadb, db, after, "UPDATE product SET price = 9.99 WHERE product_id = 1")
                clock.set(after + dt.timedelta(seconds=15))

    jl = JobLog(f"sqlite:///{tmp_path / 'sharp_log.db'}")
    try:
        (result,) = bootstrap_source(
            spark, table_store, jl, cdc.mysql, source, progress=progress, clock=clock
        )
    finally:
        clock.conn.close()
    next_day = (day + dt.timedelta(days=1)).date().isoformat()
    assert result.start == next_day and len(positions) == 2
    recorded = bootstrap_position(jl, db)
    assert recorded["start"] == next_day and recorded["gtid"] == positions[1] != positions[0]
    (failed,) = [r for r in jl.recent(job_name(db)) if r.status != "SUCCESS"]
    assert failed.range_start == day.date().isoformat()
    assert f"the snapshot read began on {day.date()} and ended on {next_day}" in failed.error
    state = ods_store.state_at(table_store, "product", bootstrap_day(next_day))
    assert ods_rows(published(state), product) == source_rows(cdc.mariadb, db, product)
    assert source_rows(cdc.mariadb, db, product)[0][3] == "9.99"  # the change after midnight is in it
