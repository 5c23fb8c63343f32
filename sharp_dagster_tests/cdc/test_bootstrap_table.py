"""A table created on a running source joins it: `cdc init` re-run (proposal applied), the collector restarted
with the new YAML, `cdc bootstrap --table` while writes go on; its ODS equals the source at each day's end, day by
day and as a range, and the other table's published days keep their snapshots. Then a repair (`--force`)."""

from __future__ import annotations

import datetime as dt

import pytest
from pyspark.sql import functions as F

from sharp_dagster.cdc.capture.collector_db import DbStateStore
from sharp_dagster.cdc.landing.land import land
from sharp_dagster.cdc.landing.raw_tables import raw_table_ref
from sharp_dagster.cdc.merge.change_source import day_changes
from sharp_dagster.cdc.ods import stage as ods_stage
from sharp_dagster.cdc.ods import store as ods_store
from sharp_dagster.cdc.ods.bootstrap import BootstrapError, bootstrap_position, bootstrap_source
from sharp_dagster.cdc.ods.bootstrap_table import bootstrap_table, table_job_name
from sharp_dagster.cdc.ods.columns import state_columns
from sharp_dagster.cdc.ods.versions import day_tag, ods_ref
from sharp_dagster.cdc.source.config import load_source_config, write_start
from sharp_dagster.cdc.source.introspect import introspect
from sharp_dagster.cli.main import main as cli_main
from sharp_dagster.joblog import JobLog
from sharp_dagster.warehouse.cdc_layout import OdsTable
from sharp_dagster_tests.cdc.source_support import SimulatedClock, run_sql, sort_rows

D0, D1, D2, D3 = "2024-07-01", "2024-07-02", "2024-07-03", "2024-07-04"


def at(day: str, hour: int, minute: int = 0) -> dt.datetime:
    return dt.datetime.fromisoformat(day).replace(hour=hour, minute=minute)


def ms(when: dt.datetime) -> int:
    return int(when.replace(tzinfo=dt.UTC).timestamp() * 1000)


def source_rows(mariadb, db: str, table: str, columns: list[str]) -> list[tuple]:
    conn = mariadb.connect(db)
    try:
        with conn.cursor() as cur:
            cur.execute(f"SELECT {', '.join(columns)} FROM `{table}`")
            return sort_rows([tuple(None if v is None else str(v) for v in r) for r in cur.fetchall()])
    finally:
        conn.close()


def ods_rows(df, columns: list[str]) -> list[tuple]:
    return sort_rows([tuple(r) for r in df.select(*[F.col(c).cast("string") for c in columns]).collect()])


def tag_snapshots(store, table: str) -> dict[str, int | None]:
    return {
        d: ods_store.ref_snapshot(store, ods_ref(table), day_tag(d))
        for d in ods_store.published_days(store, table)
    }


class Pipeline:
    """The collector (its position in the job log, as `cdc collect` keeps it: a new `Collector` is a restart), the
    landing and the daily merge."""

    def __init__(self, cdc, spark, store, db: str, config_path, log_url: str):
        self.cdc, self.spark, self.store, self.db, self.config_path = cdc, spark, store, db, config_path
        self.log_url = log_url
        self.offsets = None

    def collect(self, start: str, clock_at: dt.datetime) -> int:
        source = load_source_config(self.config_path)  # as `cdc collect` reads it when it starts
        state = DbStateStore(self.log_url, source.source_id)
        collector = self.cdc.collector(source, state, start=start, clock=SimulatedClock(clock_at))
        return collector.run(once=True).row_changes

    def land(self) -> None:
        db = load_source_config(self.config_path).databases[0]
        landed = land(
            self.spark,
            self.store,
            self.cdc.kafka,
            db.topic,
            self.offsets,
            "latest",
            db.shard_rules,
            database=self.db,
            image_columns=state_columns(
                self.store, [t for t in db.tables if ods_store.exists(self.store, t.name)]
            ),
        )
        assert landed.quarantined == 0
        self.offsets = landed.end_offsets

    def merge(self, table: str, days: list[str]) -> None:
        """`days` staged and published as one run (a range when more than one), as the ODS asset does it."""
        source = load_source_config(self.config_path)
        t = OdsTable(self.db, source.databases[0].table(table), source)
        pairs = {}
        for day in days:
            changes, _, events = day_changes(self.store, raw_table_ref(self.db), t.database, t.name, day)
            pairs[day] = (changes, events)
        branch = f"stage_{days[0].replace('-', '_')}_{len(days)}"
        staged = ods_stage.stage(
            self.store, table, branch, (days, []), lambda day: pairs[day], t.key_columns(), t.shard_column
        )
        staged.publish(self.store)


def test_a_table_created_on_a_running_source_joins_it_and_is_repaired(
    cdc, spark, table_store, tmp_path, monkeypatch, capsys
):
    db = cdc.new_database("join")
    cdc.sql(db, "CREATE TABLE orders (order_id BIGINT PRIMARY KEY, amount DECIMAL(12,2))")
    run_sql(cdc.mariadb, db, at(D0, 6), "INSERT INTO orders VALUES (1, 10.00), (2, 20.00)")
    config_path = tmp_path / "source.yaml"
    config_path.write_text(introspect(cdc.mysql, [db]).yaml)
    log_url = f"sqlite:///{tmp_path / 'sharp_log.db'}"
    jl = JobLog(log_url)
    source = load_source_config(config_path)
    bootstrap_source(spark, table_store, jl, cdc.mysql, source, clock=SimulatedClock(at(D0, 8)))
    position = bootstrap_position(jl, db)
    assert position["start"] == D0
    write_start(config_path, D0)  # as `cdc bootstrap` does
    pipe = Pipeline(cdc, spark, table_store, db, config_path, log_url)
    start = position["gtid"]

    # D0: the collector runs; a table is created on the source and written; the collector does not know it yet.
    run_sql(cdc.mariadb, db, at(D0, 9), "UPDATE orders SET amount = 11.00 WHERE order_id = 1")
    run_sql(
        cdc.mariadb,
        db,
        at(D0, 10),
        "CREATE TABLE coupon (code VARCHAR(20) PRIMARY KEY, pct INT NOT NULL, note VARCHAR(40))",
        "INSERT INTO coupon VALUES ('a', 5, 'first'), ('b', 10, NULL), ('c', 15, 'gone soon')",
    )
    assert pipe.collect(start, at(D0, 11)) == 1  # orders' update only: coupon is not in the YAML
    run_sql(cdc.mariadb, db, at(D0, 23), "UPDATE coupon SET pct = 6 WHERE code = 'a'")
    pipe.land()
    pipe.merge("orders", [D0])
    orders_tags = tag_snapshots(table_store, "orders")
    assert list(orders_tags) == ["2024-06-30", D0]

    # The user re-runs `cdc init`, reviews the proposal and applies it; then restarts the collector.
    monkeypatch.delenv("SHARP_CDC_MYSQL_PASSWORD", raising=False)
    init = ["cdc", "init", "--host", cdc.mariadb.host, "--port", str(cdc.mariadb.port), "--database", db]
    init += ["--output", str(config_path)]
    assert cli_main(init) == 0 and f"change: new table {db}.coupon" in capsys.readouterr().out
    assert cli_main([*init, "--apply"]) == 0
    assert [t.name for t in load_source_config(config_path).databases[0].tables] == ["orders", "coupon"]
    # Bootstrapped before the collector's restart, coupon's changes between the snapshot and the restart would be
    # lost: refused before Spark, naming the table and the restart.
    boot = ["cdc", "bootstrap", "--config", str(config_path), "--host", cdc.mariadb.host]
    boot += ["--port", str(cdc.mariadb.port)]
    monkeypatch.setenv("SHARP_LOG_DB_URL", log_url)
    assert cli_main([*boot, "--table", f"{db}.coupon"]) == 2
    said = capsys.readouterr().err
    assert f"table {db}.coupon: the collector of source {source.source_id!r}" in said
    assert f"restart `sharp-dagster cdc collect` with the YAML that lists {db}.coupon" in said
    coupon = load_source_config(config_path).databases[0].table("coupon")
    with pytest.raises(BootstrapError, match=rf"table {db}\.coupon: the collector"):  # the engine's own check
        bootstrap_table(
            spark, table_store, jl, cdc.mysql, source.databases[0], coupon, source_id=source.source_id
        )
    assert not jl.recent_successes(table_job_name(db, "coupon"), limit=1)
    run_sql(
        cdc.mariadb,
        db,
        at(D1, 7),
        "UPDATE coupon SET pct = 7 WHERE code = 'a'",
        "DELETE FROM coupon WHERE code = 'c'",
    )
    assert (
        pipe.collect(start, at(D1, 7, 30)) == 3
    )  # restarted with the new YAML: coupon's changes from now on

    # `cdc bootstrap --table` on D1 at 09:00, while writes go on between its binlog position and its read.
    def writes_during_the_snapshot(line: str) -> None:
        if "binlog position" in line:
            run_sql(
                cdc.mariadb,
                db,
                at(D1, 9, 1),
                "UPDATE coupon SET note = 'during' WHERE code = 'b'",
                "INSERT INTO coupon VALUES ('d', 20, 'during')",
            )

    joined = bootstrap_table(
        spark,
        table_store,
        jl,
        cdc.mysql,
        load_source_config(config_path).databases[0],
        coupon,
        clock=SimulatedClock(at(D1, 9)),
        progress=writes_during_the_snapshot,
        source_id=source.source_id,
    )
    assert joined.start == D1 and jl.get(joined.job_id).job_name == table_job_name(db, "coupon")
    assert ods_store.published_days(table_store, "coupon") == [D0]
    assert bootstrap_position(jl, db)["job_id"] == position["job_id"]  # the collector's start is unchanged
    assert load_source_config(config_path).start == D0

    columns = ["code", "pct", "note"]
    expected = {}
    run_sql(cdc.mariadb, db, at(D1, 15), "UPDATE coupon SET pct = 8, note = NULL WHERE code = 'a'")
    run_sql(cdc.mariadb, db, at(D1, 23, 59), "INSERT INTO coupon VALUES ('c', 1, 'back')")
    expected[D1] = source_rows(cdc.mariadb, db, "coupon", columns)
    run_sql(
        cdc.mariadb,
        db,
        at(D2, 1),
        "DELETE FROM coupon WHERE code = 'd'",
        "UPDATE coupon SET code = 'z' WHERE code = 'b'",
    )
    run_sql(cdc.mariadb, db, at(D2, 12), "INSERT INTO coupon VALUES ('e', 50, 'noon')")
    expected[D2] = source_rows(cdc.mariadb, db, "coupon", columns)
    assert pipe.collect(start, at(D3, 0, 30)) == 7
    pipe.land()

    # Day by day, then the two days as one range: the source at each day's end.
    for day in (D1, D2):
        pipe.merge("coupon", [day])
        assert ods_rows(ods_store.read_version(table_store, "coupon", day), columns) == expected[day], day
    assert ods_store.rollback_to_day(table_store, "coupon", D0) == [D1, D2]
    pipe.merge("coupon", [D1, D2])
    for day in (D1, D2):
        assert ods_rows(ods_store.read_version(table_store, "coupon", day), columns) == expected[day], day
    assert tag_snapshots(table_store, "orders") == orders_tags  # the other table: untouched

    # Refusals, before Spark: bootstrapped already, a table the YAML lacks, a table without a primary key.
    capsys.readouterr()
    for table, said in (
        ("coupon", f"table {db}.coupon was bootstrapped already (job cdc_bootstrap/{db}/coupon"),
        ("orders", f"table {db}.orders was bootstrapped already (job cdc_bootstrap/{db},"),
        ("nosuch", f"--table {db}.nosuch: no table nosuch in {config_path}"),
    ):
        assert cli_main([*boot, "--table", f"{db}.{table}"]) == 2
        assert said in capsys.readouterr().err, table
    cdc.sql(db, "CREATE TABLE bare (id INT, what VARCHAR(10))")
    with_bare = config_path.read_text().replace(
        "  - name: orders\n", "  - name: bare\n    primary_key:\n    - id\n  - name: orders\n"
    )
    (tmp_path / "bare.yaml").write_text(with_bare)
    assert cli_main([*boot[:3], str(tmp_path / "bare.yaml"), *boot[4:], "--table", f"{db}.bare"]) == 2
    assert f"table {db}.bare: bare on " in (err := capsys.readouterr().err) and "has no primary key" in err

    # A repair: a new snapshot of coupon alone on D3 replaces its state of D2 (older tags and orders kept), and
    # D3 merged from it equals the source.
    before = tag_snapshots(table_store, "coupon")
    repaired = bootstrap_table(
        spark,
        table_store,
        jl,
        cdc.mysql,
        load_source_config(config_path).databases[0],
        coupon,
        force=True,
        clock=SimulatedClock(at(D3, 8)),
        source_id=source.source_id,
    )
    assert repaired.start == D3
    after = tag_snapshots(table_store, "coupon")
    assert list(after) == [D0, D1, D2] and after[D0] == before[D0] and after[D1] == before[D1]
    assert after[D2] != before[D2]
    run_sql(cdc.mariadb, db, at(D3, 9), "UPDATE coupon SET pct = 99 WHERE code = 'e'")
    assert pipe.collect(start, at("2024-07-05", 0, 30)) == 1
    pipe.land()
    pipe.merge("coupon", [D3])
    assert ods_rows(ods_store.read_version(table_store, "coupon", D3), columns) == source_rows(
        cdc.mariadb, db, "coupon", columns
    )
    assert tag_snapshots(table_store, "orders") == orders_tags
