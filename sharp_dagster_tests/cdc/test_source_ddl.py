"""Acceptance of issue 43's DDL part: each DDL kind on a real MariaDB, through the collector, the landing and the
ODS merge (Dagster), day by day and as one range, with the ODS equal to the source at each day's end.

One scenario (`scenario`, run once for the module) on the session's MariaDB and Kafka: six tables, a snapshot
(`cdc bootstrap`) at 00:00 of the first day, three days in simulated time (`SET timestamp`), each table with its
own DDL in the middle of a day, values written before and after it: `ren` renames a column (`RENAME COLUMN`) on
day 2 and renames and widens it again (`CHANGE b c BIGINT`, a value above 2^31) on day 3; `wide` widens INT,
DECIMAL precision and VARCHAR and gains an index (ignored); `dropc` drops a column (default policy: kept,
null from then on); `trunc` is truncated between inserts; `recreate` is dropped and created with other columns;
`bad` changes a decimal's scale on day 3, which Iceberg cannot follow: that day fails naming the statement and
the table, and nothing of it is published. The daily warehouse lands and merges after each day; the range one
lands once at the end and merges the three days in one run. Each test below reads its table's outcome.
"""

from __future__ import annotations

import datetime as dt
import re
from pathlib import Path

import pytest
import yaml

from sharp_dagster.cdc.ods import store as ods_store
from sharp_dagster.cdc.source.config import MysqlSettings, source_config_from_dict, write_start
from sharp_dagster_tests.cdc.conftest import CdcEnv
from sharp_dagster_tests.cdc.oracle_pipeline import Warehouse, build_defs, collect
from sharp_dagster_tests.cdc.source_support import ClockedSource, sort_rows, text

pytestmark = pytest.mark.slow

UTC = dt.UTC
SNAPSHOT = "2024-04-30"
DAYS = ["2024-05-01", "2024-05-02", "2024-05-03"]
LATENESS = dt.timedelta(minutes=15)
BAD_DDL = "ALTER TABLE bad MODIFY p DECIMAL(18,4)"
TABLES = {  # the YAML's `columns` too (as `cdc init` wrote them before the DDL)
    "ren": "id BIGINT NOT NULL, a INT, v VARCHAR(20)",
    "wide": "id BIGINT NOT NULL, n INT, p DECIMAL(12,2), s VARCHAR(20)",
    "dropc": "id BIGINT NOT NULL, c INT, v VARCHAR(20)",
    "trunc": "id BIGINT NOT NULL, v VARCHAR(20)",
    "recreate": "id BIGINT NOT NULL, x INT",
    "bad": "id BIGINT NOT NULL, p DECIMAL(12,2)",
}
SNAPSHOT_ROWS = [
    "INSERT INTO ren VALUES (1, 10, 'one'), (2, 20, 'two'), (3, 30, 'three')",
    "INSERT INTO wide VALUES (1, 1, 10.25, 'w1'), (2, 2, 20.50, 'w2')",
    "INSERT INTO dropc VALUES (1, 100, 'd1'), (2, 200, 'd2')",
    "INSERT INTO trunc VALUES (1, 't1'), (2, 't2')",
    "INSERT INTO recreate VALUES (1, 1), (2, 2), (3, 3), (4, 4)",
    "INSERT INTO bad VALUES (1, 1.25), (2, 2.50)",
]
LONG = "s" * 150
# day -> (hour, minute, statement), run in order with the source's clock at that time.
EVENTS = {
    DAYS[0]: [
        (3, 0, "UPDATE ren SET a = 11 WHERE id = 1"),
        (4, 0, "INSERT INTO wide VALUES (3, 3, 30.75, 'w3')"),
        (5, 0, "UPDATE dropc SET c = 101 WHERE id = 1"),
        (6, 0, "INSERT INTO trunc VALUES (3, 't3')"),
        (7, 0, "UPDATE recreate SET x = 40 WHERE id = 4"),
        (8, 0, "UPDATE bad SET p = 3.75 WHERE id = 2"),
    ],
    DAYS[1]: [
        (3, 0, "UPDATE ren SET a = 12 WHERE id = 1"),
        (4, 0, "INSERT INTO ren VALUES (4, 40, 'four')"),
        (6, 0, "ALTER TABLE ren RENAME COLUMN a TO b"),
        (7, 0, "UPDATE ren SET b = 77 WHERE id = 2"),
        (7, 5, "INSERT INTO ren VALUES (5, 50, 'five')"),
        (
            5,
            0,
            "ALTER TABLE wide MODIFY n BIGINT, MODIFY p DECIMAL(14,2), MODIFY s VARCHAR(200)",
        ),
        (5, 10, "ALTER TABLE wide ADD INDEX i_n (n)"),
        (8, 0, f"INSERT INTO wide VALUES (4, 3000000000, 123456789012.25, '{LONG}')"),
        (8, 5, "UPDATE wide SET n = 2147483648, s = CONCAT(s, REPEAT('x', 30)) WHERE id = 1"),
        (4, 30, "UPDATE dropc SET c = 102 WHERE id = 1"),
        (6, 30, "ALTER TABLE dropc DROP COLUMN c"),
        (7, 30, "UPDATE dropc SET v = 'd2b' WHERE id = 2"),
        (7, 35, "INSERT INTO dropc VALUES (3, 'd3')"),
        (5, 20, "INSERT INTO trunc VALUES (4, 't4'), (5, 't5')"),
        (6, 20, "TRUNCATE TABLE trunc"),
        (7, 20, "INSERT INTO trunc VALUES (20, 'after'), (2, 'again')"),
        (5, 40, "UPDATE recreate SET x = 41 WHERE id = 4"),
        (6, 40, "DROP TABLE recreate"),
        (6, 41, "CREATE TABLE recreate (id BIGINT PRIMARY KEY, y VARCHAR(20))"),
        (7, 40, "INSERT INTO recreate VALUES (5, 'y5'), (1, 'y1')"),
        (9, 0, "UPDATE bad SET p = 4.25 WHERE id = 1"),
    ],
    DAYS[2]: [
        (5, 0, "ALTER TABLE ren CHANGE COLUMN b c BIGINT"),
        (6, 0, "UPDATE ren SET c = 4000000000 WHERE id = 1"),
        (6, 5, "INSERT INTO ren VALUES (6, 60, 'six')"),
        (6, 10, "UPDATE wide SET p = 999999999999.99 WHERE id = 2"),
        (6, 20, "INSERT INTO dropc VALUES (4, 'd4')"),
        (6, 30, "DELETE FROM trunc WHERE id = 20"),
        (6, 40, "UPDATE recreate SET y = 'y5b' WHERE id = 5"),
        (5, 30, BAD_DDL),
        (6, 50, "UPDATE bad SET p = 1.2345 WHERE id = 1"),
    ],
}


def at(day: str, hour: int, minute: int = 0) -> dt.datetime:
    return dt.datetime.fromisoformat(day).replace(hour=hour, minute=minute, tzinfo=UTC)


def ms(when: dt.datetime) -> int:
    return int(when.timestamp() * 1000)


class Source(ClockedSource):
    """The scenario's database: statements run with the source's clock set, tables read as text."""

    def __init__(self, mariadb, database: str):
        super().__init__(mariadb, database, at(SNAPSHOT, 12))

    def read_all(self) -> dict[str, tuple[list[str], list[tuple]]]:
        out = {}
        with self.conn.cursor() as cur:
            for table in TABLES:
                cur.execute(f"SELECT * FROM `{table}`")
                rows = [tuple(map(text, r)) for r in cur.fetchall()]
                out[table] = ([d[0] for d in cur.description], sort_rows(rows))
        return out


def source_yaml(database: str) -> dict:
    return {
        "source_id": "ddl-mariadb",
        "flavor": "mariadb",
        "replica_server_id": 4931,
        "lateness_minutes": LATENESS.seconds // 60,
        "topic_partitions": 1,
        "databases": [
            {
                "name": database,
                "topic": f"binlog.{database}",
                "tables": [
                    {"name": t, "primary_key": ["id"], "columns": re.split(r",\s*(?![^(]*\))", cols)}
                    for t, cols in TABLES.items()
                ],
            }
        ],
    }


@pytest.fixture(scope="module")
def scenario(mariadb, broker, spark, tmp_path_factory):
    tmp_path: Path = tmp_path_factory.mktemp("ddl")
    cdc = CdcEnv(mariadb, broker, tmp_path)
    database = cdc.new_database("ddl")
    sql_dir = tmp_path / "sql"
    (sql_dir / "cdc").mkdir(parents=True)
    config = source_yaml(database)
    config_path = sql_dir / "cdc" / "ddl.yaml"
    config_path.write_text(yaml.safe_dump(config, sort_keys=False))
    source = source_config_from_dict(config)
    cdc.sql(database, *[f"CREATE TABLE `{t}` ({columns}, PRIMARY KEY (id))" for t, columns in TABLES.items()])
    db = Source(mariadb, database)
    for sql in SNAPSHOT_ROWS:
        db.run(at(SNAPSHOT, 12), sql)
    mysql = MysqlSettings(mariadb.host, mariadb.port, "root", "")
    kafka = broker.bootstrap_servers
    daily = Warehouse(spark, tmp_path / "daily", sql_dir, kafka)
    ranged = Warehouse(spark, tmp_path / "range", sql_dir, kafka)
    out = {"states": {}, "daily": {}, "range": {}, "failures": {}}
    try:
        db.now = at(DAYS[0], 0)
        (first,) = daily.bootstrap(mysql, source, lambda: ms(db.now))
        (second,) = ranged.bootstrap(mysql, source, lambda: ms(db.now))
        assert first.start == second.start == DAYS[0]
        write_start(config_path, first.start)
        defs = build_defs(sql_dir)
        daily.load(defs)
        ranged.load(defs)
        state = tmp_path / "collector.json"
        for day in DAYS:
            for hour, minute, sql in sorted(EVENTS[day]):
                db.run(at(day, hour, minute), sql)
            out["states"][day] = db.read_all()
            clock = at(day, 0) + dt.timedelta(days=1) + 2 * LATENESS
            collect(mysql, kafka, source, state, first.collector_start, ms(clock))
            out["failures"][day] = daily.land(f"{day}-23:00") or daily.merge(day)
            out["daily"][day] = read_days(daily, DAYS[: DAYS.index(day) + 1])
        out["failures"]["range"] = ranged.land((f"{DAYS[0]}-00:00", f"{DAYS[-1]}-23:00")) or ranged.merge(
            (DAYS[0], DAYS[-1])
        )
        out["range"] = read_days(ranged, DAYS)
        yield out
    finally:
        db.conn.close()
        daily.close()
        ranged.close()


def read_days(
    warehouse: Warehouse, days: list[str]
) -> dict[str, dict[str, tuple[list[str], list[dict]] | None]]:
    """table -> day -> (columns, rows as text) of the day's tag, None without one."""
    out: dict[str, dict] = {}
    with warehouse.env():
        store = warehouse.store()
        for table in TABLES:
            present = set(ods_store.published_days(store, table))
            out[table] = {}
            for day in days:
                if day not in present:
                    out[table][day] = None
                    continue
                df = ods_store.read_version(store, table, day).drop("_binlog_seq")
                columns = list(df.columns)
                rows = [
                    r.asDict()
                    for r in df.selectExpr(*[f"CAST(`{c}` AS string) AS `{c}`" for c in columns]).collect()
                ]
                out[table][day] = (columns, rows)
    return out


def differences(scenario, table: str, days: list[str], ranged: bool = True) -> list[str]:
    """Where the table's ODS differs from the source at a day's end, in both warehouses (the daily one as it stood
    right after that day's merge, and at the end)."""
    problems = []
    for label, found in [
        *((f"day by day after {d}", scenario["daily"][d]) for d in DAYS),
        *([("range", scenario["range"])] if ranged else []),
    ]:
        for day in days:
            if day not in found[table]:
                continue
            got = found[table][day]
            columns, expected = scenario["states"][day][table]
            if got is None:
                problems.append(f"{label}: ods.{table} has no tag of {day}")
                continue
            ods_columns, rows = got
            missing = [c for c in columns if c not in ods_columns]
            if missing:
                problems.append(f"{label} {day}: ods.{table} lacks {missing} (has {ods_columns})")
                continue
            extra = [c for c in ods_columns if c not in columns]
            if any(r[c] is not None for r in rows for c in extra):
                problems.append(f"{label} {day}: ods.{table} has values in {extra}, which the source has not")
            have = sort_rows([tuple(r[c] for c in columns) for r in rows])
            if have != expected:
                problems.append(f"{label} {day}: ods.{table} {columns}: {have} != source {expected}")
    return problems


def test_the_scenario_fails_only_the_day_iceberg_cannot_follow(scenario):
    failures = scenario["failures"]
    assert failures[DAYS[0]] is None and failures[DAYS[1]] is None, failures
    for key in (DAYS[2], "range"):
        assert failures[key] and BAD_DDL in failures[key] and "bad" in failures[key], failures[key]
        assert "ods/ren" not in failures[key]


def test_rename_column_values_keep_flowing_under_the_new_name_and_earlier_tags_keep_the_old(scenario):
    assert differences(scenario, "ren", DAYS) == []
    columns_day1 = scenario["range"]["ren"][DAYS[0]][0]
    assert "a" in columns_day1 and "b" not in columns_day1  # Iceberg's rename keeps history


def test_change_column_renames_and_widens_int_to_bigint(scenario):
    assert scenario["states"][DAYS[2]]["ren"][0] == ["id", "c", "v"]
    assert differences(scenario, "ren", [DAYS[2]]) == []


def test_type_widening_follows_by_iceberg_promotion_and_index_ddl_is_ignored(scenario):
    assert differences(scenario, "wide", DAYS) == []


def test_drop_column_keeps_the_column_null_from_then_on(scenario):
    assert differences(scenario, "dropc", DAYS) == []
    columns, rows = scenario["range"]["dropc"][DAYS[1]]
    assert "c" in columns and {r["c"] for r in rows} == {None}
    assert {r["c"] for r in scenario["range"]["dropc"][DAYS[0]][1]} == {"101", "200"}  # the tag keeps history


def test_truncate_empties_the_table_at_its_position_in_the_day(scenario):
    assert differences(scenario, "trunc", DAYS) == []


def test_drop_and_create_again_removes_the_rows_the_source_no_longer_has(scenario):
    assert differences(scenario, "recreate", DAYS) == []


def test_a_change_iceberg_cannot_follow_fails_the_day_and_publishes_nothing_of_it(scenario):
    # The first two days equal the source, the third has no tag, day by day and in the range run.
    assert differences(scenario, "bad", DAYS[:2]) == []
    assert scenario["daily"][DAYS[2]]["bad"][DAYS[2]] is None
    assert scenario["range"]["bad"][DAYS[2]] is None
