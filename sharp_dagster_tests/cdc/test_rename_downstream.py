"""Issue 43, end to end: `ALTER TABLE orders RENAME COLUMN order_status TO status` on a real MariaDB, through the
collector, the landing and the ODS merge in Dagster, meets the ODS schema check `ods_schema` with no stand-in.

The source is the shop (the project's `warehouse/cdc/shop.yaml`, its tables in a database of the session's MariaDB)
and the warehouse folder holds the project's own DWD/ADS SQL, so `ods.orders.order_status` is the column that
`dwd/order_detail.sql` reads. Strong (the default): the rename's day is held (no tag, FAILURE, the check's
`impacted` equal to what `sharp-dagster lineage impact --json ods.orders.order_status` prints, the job log naming
the columns); a second run holds it again. Released as README "What a change breaks downstream" says: `weak` in
the YAML, the day run again: published, the check warns, an alert goes out, and the values flow on under `status`;
the next day's check passes (the rename is not flagged again). ODS equals the source at each day's end.
"""

from __future__ import annotations

import datetime as dt
import json
import shutil
from pathlib import Path

import pytest
import yaml
from sqlalchemy import select

from sharp_dagster.cdc.ods import store as ods_store
from sharp_dagster.cdc.ods.versions import day_tag, ods_ref
from sharp_dagster.cdc.source.config import MysqlSettings, source_config_from_dict, write_start
from sharp_dagster.joblog.models import alert_log
from sharp_dagster.logdriven import job_log
from sharp_dagster.settings import WAREHOUSE_SQL_DIR
from sharp_dagster_tests.cdc.conftest import CdcEnv
from sharp_dagster_tests.cdc.oracle_pipeline import Warehouse, build_defs, collect
from sharp_dagster_tests.cdc.source_support import ClockedSource, sort_rows, text
from sharp_dagster_tests.lineage.util import run_direct

pytestmark = pytest.mark.slow

UTC = dt.UTC
SNAPSHOT = "2024-06-30"
DAYS = ["2024-07-01", "2024-07-02", "2024-07-03", "2024-07-04", "2024-07-05"]
LATENESS = dt.timedelta(minutes=15)
RENAME = "ALTER TABLE orders RENAME COLUMN order_status TO status"
SNAPSHOT_ROWS = [
    "INSERT INTO user_info_0 VALUES (1, 'u1', 'paris', 'gold', '2024-01-01 00:00:00', '2024-01-01 00:00:00')",
    "INSERT INTO product VALUES (1, 'p1', 'books', 10.00, '2024-06-30 00:00:00')",
    "INSERT INTO orders VALUES (1, 1, 'paid', '2024-06-30 10:00:00', 20.00, '2024-06-30 10:00:00'),"
    " (2, 1, 'new', '2024-06-30 11:00:00', 10.00, '2024-06-30 11:00:00')",
    "INSERT INTO order_item VALUES (1, 1, 1, 2, 10.00), (2, 2, 1, 1, 10.00)",
]
# day -> (hour, minute, statement), run in order with the source's clock at that time.
EVENTS = {
    DAYS[0]: [
        (3, 0, "UPDATE orders SET order_status = 'shipped' WHERE order_id = 1"),
        (4, 0, "INSERT INTO orders VALUES (3, 1, 'new', '2024-07-01 04:00:00', 5.00, '2024-07-01 04:00:00')"),
    ],
    DAYS[1]: [
        (3, 0, "UPDATE orders SET order_status = 'cancelled' WHERE order_id = 2"),
        (6, 0, RENAME),
        (7, 0, "UPDATE orders SET status = 'delivered' WHERE order_id = 1"),
        (7, 5, "INSERT INTO orders VALUES (4, 1, 'new', '2024-07-02 07:05:00', 7.00, '2024-07-02 07:05:00')"),
    ],
    DAYS[2]: [
        (5, 0, "UPDATE orders SET status = 'paid' WHERE order_id = 4"),
        (6, 0, "INSERT INTO orders VALUES (5, 1, 'new', '2024-07-03 06:00:00', 9.00, '2024-07-03 06:00:00')"),
    ],
    DAYS[3]: [  # a rename nothing downstream reads, on a day that writes no row of orders
        (6, 0, "ALTER TABLE orders RENAME COLUMN status TO order_state"),
        (7, 0, "UPDATE product SET price = 11.00 WHERE product_id = 1"),
    ],
    DAYS[4]: [(5, 0, "UPDATE orders SET order_state = 'paid' WHERE order_id = 5")],
}


def at(day: str, hour: int, minute: int = 0) -> dt.datetime:
    return dt.datetime.fromisoformat(day).replace(hour=hour, minute=minute, tzinfo=UTC)


def ms(when: dt.datetime) -> int:
    return int(when.timestamp() * 1000)


def shop_yaml(database: str, schema_check: str) -> dict:
    """The project's shop source over `database`, with `schema_check`."""
    config = yaml.safe_load((Path(WAREHOUSE_SQL_DIR) / "cdc" / "shop.yaml").read_text())
    (db,) = config["databases"]
    db.update(name=database, topic=f"binlog.{database}")
    config.update(
        source_id="rename-mariadb", replica_server_id=4932, topic_partitions=1, schema_check=schema_check
    )
    return config


def warehouse_folder(root: Path, config: dict) -> Path:
    """A warehouse SQL folder: the project's DWD/ADS SQL and the source's YAML."""
    for layer in ("dwd", "ads"):
        shutil.copytree(Path(WAREHOUSE_SQL_DIR) / layer, root / layer)
    (root / "cdc").mkdir(parents=True)
    (root / "cdc" / "shop.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    return root


def create_tables(cdc: CdcEnv, database: str, config: dict) -> None:
    statements = []
    for t in config["databases"][0]["tables"]:
        names = [f"{t['name']}_{i}" for i in range(t["shards"])] if t.get("shards") else [t["name"]]
        body = ", ".join([*t["columns"], f"PRIMARY KEY ({', '.join(t['primary_key'])})"])
        statements += [f"CREATE TABLE `{n}` ({body})" for n in names]
    cdc.sql(database, *statements)


class Source(ClockedSource):
    def __init__(self, mariadb, database: str):
        super().__init__(mariadb, database, at(SNAPSHOT, 12))

    def orders(self) -> tuple[list[str], list[tuple]]:
        with self.conn.cursor() as cur:
            cur.execute("SELECT * FROM orders")
            rows = [tuple(map(text, r)) for r in cur.fetchall()]
            return [d[0] for d in cur.description], sort_rows(rows)


def check_of(result):
    (found,) = [
        e.event_specific_data
        for e in result.all_events
        if e.event_type_value == "ASSET_CHECK_EVALUATION"
        and e.event_specific_data.check_name == "ods_schema"
        and e.event_specific_data.asset_key.path == ["ods", "orders"]
    ]
    return found


def attempts(warehouse: Warehouse, day: str):
    with warehouse.env():
        jl = job_log()
        runs = sorted(
            (r for r in jl.recent("ods/orders", limit=100) if r.partition_key == day), key=lambda r: r.attempt
        )
        return jl, runs


@pytest.fixture(scope="module")
def scenario(mariadb, broker, spark, tmp_path_factory):
    """Bootstrap, then day by day: the source's changes, the collector, the landing, the ODS merge (strong); the
    rename's day held twice, then released with `weak` and run again; the last day merged under weak."""
    tmp: Path = tmp_path_factory.mktemp("rename")
    cdc = CdcEnv(mariadb, broker, tmp)
    database = cdc.new_database("rename")
    strong = shop_yaml(database, "strong")
    sql_dir = warehouse_folder(tmp / "sql", strong)
    create_tables(cdc, database, strong)
    db = Source(mariadb, database)
    for sql in SNAPSHOT_ROWS:
        db.run(at(SNAPSHOT, 12), sql)
    source = source_config_from_dict(strong)
    mysql = MysqlSettings(mariadb.host, mariadb.port, "root", "")
    kafka = broker.bootstrap_servers
    wh = Warehouse(spark, tmp / "data", sql_dir, kafka)
    out: dict = {"states": {}, "runs": {}}
    try:
        db.now = at(DAYS[0], 0)
        (boot,) = wh.bootstrap(mysql, source, lambda: ms(db.now))
        assert boot.start == DAYS[0]
        write_start(sql_dir / "cdc" / "shop.yaml", boot.start)
        wh.load(build_defs(sql_dir))
        state = tmp / "collector.json"
        for day in DAYS:
            for hour, minute, sql in sorted(EVENTS[day]):
                db.run(at(day, hour, minute), sql)
            out["states"][day] = {"orders": db.orders()}
            collect(
                mysql,
                kafka,
                source,
                state,
                boot.collector_start,
                ms(at(day, 0) + dt.timedelta(days=1, minutes=30)),
            )
            assert wh.land(f"{day}-23:00") is None
            if day in DAYS[:2]:
                out["runs"][day] = (wh.merge(day), wh.last_result)
        out["runs"]["again"] = (wh.merge(DAYS[1]), wh.last_result)
        with wh.env():
            store = wh.store()
            out["held_tag"] = ods_store.ref_snapshot(store, ods_ref("orders"), day_tag(DAYS[1]))
        out["held"] = attempts(wh, DAYS[1])
        # Released as the README says: `schema_check: weak` in the source's YAML (a new folder: the code location
        # is loaded afresh, as Dagster does after the YAML changed), then the day run again.
        weak_dir = tmp / "sql_weak"
        shutil.copytree(sql_dir, weak_dir)
        weak = yaml.safe_load((weak_dir / "cdc" / "shop.yaml").read_text())
        weak["schema_check"] = "weak"
        (weak_dir / "cdc" / "shop.yaml").write_text(yaml.safe_dump(weak, sort_keys=False))
        wh.sql_dir = weak_dir
        wh.load(build_defs(weak_dir))
        out["runs"]["weak"] = (wh.merge(DAYS[1]), wh.last_result)
        for day in DAYS[2:]:
            out["runs"][day] = (wh.merge(day), wh.last_result)
        out["compare"] = wh.compare(out["states"], "rename")
        out["weak_attempts"] = attempts(wh, DAYS[1])[1]
        out["next_day"] = {day: attempts(wh, day) for day in (DAYS[2], DAYS[4])}
        with wh.env(), job_log().engine.connect() as conn:
            out["alerts"] = [r.dedup_key for r in conn.execute(select(alert_log)).all()]
        yield out
    finally:
        db.conn.close()
        wh.close()


def lineage_impact(capsys) -> list[dict]:
    """What `sharp-dagster lineage impact --json ods.orders.order_status` prints over the project's own SQL."""
    capsys.readouterr()
    assert run_direct(["lineage", "impact", "--json", "ods.orders.order_status"]) == 0
    return json.loads(capsys.readouterr().out)


def test_strong_holds_the_rename_day_naming_what_lineage_impact_names(scenario, capsys):
    expected = lineage_impact(capsys)
    assert {(i["table"], i["column"]) for i in expected} >= {
        ("dwd.order_detail", "order_status"), ("dwd.order_detail", "is_cancelled"),
        ("ads.gmv_by_category", "*"), ("ads.user_order_stats", "*"),
    }  # fmt: skip
    failure, first = scenario["runs"][DAYS[0]]
    assert failure is None and check_of(first).passed
    for key in (DAYS[1], "again"):
        failure, result = scenario["runs"][key]
        assert failure and "dwd.order_detail.order_status" in failure, failure
        check = check_of(result)
        assert not check.passed and check.blocking and check.severity.value == "ERROR"
        assert check.metadata["impacted"].data == expected
        changes = check.metadata["schema_changes"].data
        assert [(c["kind"], c["column"], c["new_name"]) for c in changes] == [
            ("rename", "order_status", "status")
        ]
    assert scenario["held_tag"] is None, "no tag: the day is held"
    jl, held = scenario["held"]
    assert [r.status for r in held] == ["FAILURE", "FAILURE"]
    for said in ("order_status renamed to status", "dwd.order_detail.order_status", "dwd/order_detail.sql:9",
                 "dwd.order_detail.is_cancelled", "dwd/order_detail.sql:17", "ads.gmv_by_category.*"):  # fmt: skip
        assert said in held[-1].error, (said, held[-1].error)
    step = next(s for s in jl.steps(held[-1].job_id) if s.step_id == "schema_check")
    assert step.failure_count == len(expected)
    for i in expected:
        assert f"ods.orders.order_status -> {i['table']}.{i['column']} ({i['kind']}" in step.output, (
            step.output
        )


def test_weak_publishes_the_day_alerts_and_the_values_flow_on_under_the_new_name(scenario, capsys):
    expected = lineage_impact(capsys)
    failure, result = scenario["runs"]["weak"]
    assert failure is None, failure
    check = check_of(result)
    assert not check.passed and not check.blocking and check.severity.value == "WARN"
    assert check.metadata["impacted"].data == expected
    assert scenario["weak_attempts"][-1].status == "SUCCESS"
    assert f"dqc:ods/orders:ods_schema:{DAYS[1]}" in scenario["alerts"], scenario["alerts"]
    assert scenario["states"][DAYS[1]]["orders"][0][2] == "status"
    assert scenario["compare"] == []  # every day's tag equals the source at the day's end, `status` included


@pytest.mark.parametrize("renamed", [DAYS[1], DAYS[3]], ids=["day_with_rows", "day_without_rows_of_orders"])
def test_the_day_after_a_rename_is_not_flagged_again(scenario, renamed):
    day = DAYS[DAYS.index(renamed) + 1]
    failure, result = scenario["runs"][day]
    assert failure is None, failure
    check = check_of(result)
    assert check.passed and check.metadata["schema_changes"].data == [], check.metadata
    jl, runs = scenario["next_day"][day]
    step = next(s for s in jl.steps(runs[-1].job_id) if s.step_id == "schema_check")
    assert f"no column dropped, renamed or retyped since {renamed}" in step.output, step.output


def test_a_rename_nothing_downstream_reads_passes_listed(scenario):
    failure, result = scenario["runs"][DAYS[3]]
    assert failure is None, failure
    check = check_of(result)
    assert check.passed and check.metadata["impacted"].data == []
    changes = check.metadata["schema_changes"].data
    assert [(c["kind"], c["column"], c["new_name"]) for c in changes] == [("rename", "status", "order_state")]
