"""`cdc bootstrap --table` refuses a table the running collector does not capture yet (it was started with a YAML
that did not list it), before Spark starts: the collector records the tables it follows with its position in the
job-log database (`cdc_collector_position.follows`), on the row it takes at start and on every save."""

from __future__ import annotations

import pytest
from alembic import command
from sqlalchemy import text

from sharp_dagster.cdc.capture.collector_db import DbStateStore, collector_follows
from sharp_dagster.cdc.capture.collector_state import CollectorState, FileStateStore, followed_tables
from sharp_dagster.cdc.ods import bootstrap_table as bootstrap_table_module
from sharp_dagster.cdc.ods.bootstrap import BootstrapError
from sharp_dagster.cdc.ods.bootstrap_table import check_collector_follows
from sharp_dagster.cdc.source.config import load_source_config
from sharp_dagster.db import make_engine
from sharp_dagster.joblog import JobLog
from sharp_dagster.joblog.migrate import alembic_config, ensure_schema
from sharp_dagster.settings import WAREHOUSE_SQL_DIR

SHOP_YAML = str(WAREHOUSE_SQL_DIR / "cdc" / "shop.yaml")
SOURCE = "shop-mariadb"  # shop.yaml's source_id


def shop_and(*names: str) -> tuple:
    source = load_source_config(SHOP_YAML)
    return source.databases[0], [source.databases[0].table(n) for n in names]


def test_the_collector_records_what_it_follows_and_the_bootstrap_checks_it(tmp_path):
    url = f"sqlite:///{tmp_path / 'log.db'}"
    jl = JobLog(url)
    shop, (orders, items) = shop_and("orders", "order_item")
    check_collector_follows(
        jl, SOURCE, shop, items
    )  # no collector yet: it will start before any P, with the YAML
    assert collector_follows(url, SOURCE) is None

    assert followed_tables(load_source_config(SHOP_YAML)) == (
        "shop.order_item",
        "shop.orders",
        "shop.product",
        "shop.user_info",
    )
    first = DbStateStore(url, SOURCE, owner="host-a:1")
    first.load(follows=("shop.orders", "shop.user_info"))  # started with a YAML without order_item
    assert collector_follows(url, SOURCE).tables == ("shop.orders", "shop.user_info")
    first.save(CollectorState(SOURCE, "binlog.000001", 400, "0-1-9"))
    assert collector_follows(url, SOURCE).tables == ("shop.orders", "shop.user_info")  # kept on saves
    check_collector_follows(jl, SOURCE, shop, orders)
    with pytest.raises(BootstrapError) as refused:
        check_collector_follows(jl, SOURCE, shop, items)
    message = str(refused.value)
    assert message.startswith(
        "table shop.order_item: the collector of source 'shop-mariadb' (last started as host-a:1)"
    )
    assert "restart `sharp-dagster cdc collect` with the YAML that lists shop.order_item" in message

    # Restarted with the YAML that lists it: allowed; its resume position is the one saved before the restart.
    second = DbStateStore(url, SOURCE, owner="host-a:2")
    resumed = second.load(follows=("shop.order_item", "shop.orders", "shop.user_info"))
    assert (resumed.binlog_file, resumed.binlog_pos) == ("binlog.000001", 400)
    check_collector_follows(jl, SOURCE, shop, items)
    # A store loaded without saying what it follows leaves the record as it is.
    DbStateStore(url, SOURCE, owner="host-a:3").load()
    assert collector_follows(url, SOURCE).tables == ("shop.order_item", "shop.orders", "shop.user_info")

    legacy = FileStateStore(tmp_path / "state.json")  # the file store takes the argument and keeps no record
    legacy.save(CollectorState(SOURCE, "binlog.000001", 4))
    assert legacy.load(follows=("shop.orders",)).binlog_pos == 4


def test_a_position_from_before_the_upgrade_is_refused_until_the_collector_restarts(tmp_path):
    url = f"sqlite:///{tmp_path / 'log.db'}"
    engine = make_engine(url)
    config = alembic_config()
    with engine.begin() as conn:  # a job-log database at 0004, with a running collector's position
        config.attributes["connection"] = conn
        command.upgrade(config, "0004_cdc_collector_position")
        conn.execute(
            text(
                "INSERT INTO cdc_collector_position (source_id, generation, owner, binlog_file, binlog_pos, "
                "binlog_epoch) VALUES ('shop-mariadb', 3, 'old-host:7', 'binlog.000002', 99, 0)"
            )
        )
    engine.dispose()
    ensure_schema(url)  # 0005 adds the column; the row keeps its position, follows unknown
    followed = collector_follows(url, SOURCE)
    assert (followed.owner, followed.generation, followed.tables) == ("old-host:7", 3, None)
    shop, (orders,) = shop_and("orders")
    with pytest.raises(BootstrapError, match="did not record the tables it follows"):
        check_collector_follows(JobLog(url), SOURCE, shop, orders)
    store = DbStateStore(url, SOURCE)
    assert store.load(follows=("shop.orders",)).binlog_pos == 99
    check_collector_follows(JobLog(url), SOURCE, shop, orders)


def test_a_collector_restart_while_the_position_is_read_is_refused(tmp_path, monkeypatch):
    """The row read just before P and just after must be the same: a restart in between may resume after P."""
    url = f"sqlite:///{tmp_path / 'log.db'}"
    shop, (orders,) = shop_and("orders")
    DbStateStore(url, SOURCE, owner="host-a:1").load(follows=("shop.orders",))

    def restart_at_p(mysql, clock):  # the server's part (position and day) stands in; a collector restarts
        DbStateStore(url, SOURCE, owner="host-a:2").load(follows=("shop.orders",))
        return {"gtid": "0-1-5"}, "2024-07-02"

    monkeypatch.setattr(bootstrap_table_module, "check_table_before_spark", lambda *a, **k: None)
    monkeypatch.setattr(bootstrap_table_module, "read_position_day", restart_at_p)
    with pytest.raises(
        BootstrapError, match="table shop.orders: the collector of source 'shop-mariadb' restarted"
    ):
        bootstrap_table_module.bootstrap_table(
            None, None, JobLog(url), None, shop, orders, clock=object(), source_id=SOURCE
        )
