"""`sharp-dagster cdc init`: the source YAML read from a live MariaDB's information_schema, and its checks."""

from __future__ import annotations

import itertools

import pytest
import yaml

from sharp_dagster.cdc.source.config import load_source_config
from sharp_dagster.cdc.source.introspect import introspect
from sharp_dagster.cli.main import main as cli_main
from sharp_dagster.warehouse.cdc_layout import cdc_dir

SHOP_YAML = cdc_dir() / "shop.yaml"
_N = itertools.count(1)


def _new_database(mariadb, prefix: str) -> str:
    name = f"{prefix}_init_{next(_N)}"
    mariadb.execute(f"DROP DATABASE IF EXISTS {name}", f"CREATE DATABASE {name}")
    return name


def _shop_as_on(database: str) -> dict:
    """The hand-written shop.yaml, parsed, for the shop's tables created in `database`."""
    expected = yaml.safe_load(SHOP_YAML.read_text())
    expected["databases"][0].update(name=database, topic=f"binlog.{database}")
    return expected


def _by_name(config: dict) -> dict:
    """Order does not matter: databases and tables keyed by name."""
    out = {k: v for k, v in config.items() if k != "databases"}
    out["databases"] = {
        db["name"]: {**db, "tables": {t["name"]: t for t in db["tables"]}} for db in config["databases"]
    }
    return out


def test_init_writes_the_hand_written_shop_yaml(mariadb, tmp_path, monkeypatch, capsys):
    shop = load_source_config(SHOP_YAML)
    db = _new_database(mariadb, "shop")
    ddl = [t.mysql_ddl(shard) for t in shop.databases[0].tables for shard in t.shards]
    # Look-alikes that must not join the user_info group: a backup and a gh-ost shadow; and two tables that
    # look like shards but differ, which stay separate tables.
    mariadb.execute(
        *ddl,
        "CREATE TABLE user_info_1_bak LIKE user_info_1",
        "CREATE TABLE _user_info_1_gho LIKE user_info_1",
        "CREATE TABLE audit_0 (id BIGINT PRIMARY KEY, note VARCHAR(10))",
        "CREATE TABLE audit_1 (id BIGINT PRIMARY KEY, note VARCHAR(20))",
        "CREATE TABLE log_2024_01 (id INT PRIMARY KEY, at DATETIME(3))",
        "CREATE TABLE log_2024_02 (id INT PRIMARY KEY, at DATETIME(3))",
        database=db,
    )
    out = tmp_path / "cdc" / "shop.yaml"
    argv = ["cdc", "init", "--host", mariadb.host, "--port", str(mariadb.port), "--database", db]
    argv += ["--source-id", "shop-mariadb", "--topic-partitions", "2", "--output", str(out)]
    monkeypatch.delenv("SHARP_CDC_MYSQL_PASSWORD", raising=False)
    assert cli_main([*argv, "--exclude", "user_info_1_bak|_user_info_1_gho|audit_.*|log_.*"]) == 0
    assert "wrote" in capsys.readouterr().out
    written = yaml.safe_load(out.read_text())
    assert _by_name(written) == _by_name(_shop_as_on(db))
    assert load_source_config(out).databases[0].tables  # and it loads as a config

    # The file exists: a re-run proposes changes only (none here), it never overwrites (test_init_rerun.py).
    assert cli_main([*argv, "--exclude", "user_info_1_bak|_user_info_1_gho|audit_.*|log_.*"]) == 0
    assert "up to date" in capsys.readouterr().out

    # Without exclusions: the look-alikes stay tables of their own; a date-suffixed group is listed by name.
    result = introspect(mariadb_settings(mariadb), [db])
    tables = {t["name"]: t for t in result.config["databases"][0]["tables"]}
    assert tables["user_info"]["shards"] == 4 and {"user_info_1_bak", "_user_info_1_gho"} <= tables.keys()
    assert tables["log"]["shard_regex"] == r"log_(\d+)_(\d+)"
    assert tables["log"]["shards"] == ["log_2024_01", "log_2024_02"]
    assert tables["log"]["columns"] == ["id INT NOT NULL", "at DATETIME(3)"]
    assert {"audit_0", "audit_1"} <= tables.keys() and "audit" not in tables
    assert any("audit_0, audit_1 look like shards of audit" in n for n in result.notes)
    assert result.problems == []


def test_init_writes_zero_padded_shards_as_one_short_range(mariadb, tmp_path):
    """1,024 shards orders_0000..orders_1023 are one YAML line, not 1,024; a gap keeps the list."""
    db = _new_database(mariadb, "padded")
    ddl = "(id BIGINT PRIMARY KEY, amount DECIMAL(10,2))"
    mariadb.execute(*[f"CREATE TABLE orders_{i:04d} {ddl}" for i in range(12)], database=db)
    mariadb.execute(*[f"CREATE TABLE gap_{i:02d} {ddl}" for i in (0, 1, 3)], database=db)
    result = introspect(mariadb_settings(mariadb), [db])
    tables = {t["name"]: t for t in result.config["databases"][0]["tables"]}
    assert tables["orders"]["shards"] == "0000..0011" and tables["orders"]["shard_regex"] == r"orders_(\d+)"
    assert tables["gap"]["shards"] == ["gap_00", "gap_01", "gap_03"]
    (tmp_path / "padded.yaml").write_text(result.yaml)
    assert "orders_0005" not in result.yaml
    loaded = load_source_config(tmp_path / "padded.yaml").databases[0].table("orders")
    assert loaded.shards == tuple(f"orders_{i:04d}" for i in range(12))


def mariadb_settings(mariadb, user: str = "root", password: str = ""):
    from sharp_dagster.cdc.source.config import MysqlSettings

    return MysqlSettings(mariadb.host, mariadb.port, user, password)


def test_init_says_what_the_server_and_the_user_lack(mariadb, monkeypatch, capsys):
    db = _new_database(mariadb, "lacks")
    other = _new_database(mariadb, "other")
    mariadb.execute(
        "CREATE TABLE t (id INT PRIMARY KEY, flag TINYINT)", "CREATE TABLE nokey (a INT)", database=db
    )
    user = f"weak{next(_N)}"
    mariadb.execute(
        f"CREATE USER IF NOT EXISTS '{user}'@'127.0.0.1' IDENTIFIED BY 'pw-weak'",
        f"GRANT SELECT ON {other}.* TO '{user}'@'127.0.0.1'",
        f"GRANT SELECT ON {db}.t TO '{user}'@'127.0.0.1'",
    )
    monkeypatch.setenv("SHARP_CDC_MYSQL_PASSWORD", "pw-weak")
    mariadb.execute("SET GLOBAL binlog_row_metadata = 'MINIMAL'", "SET GLOBAL binlog_row_image = 'MINIMAL'")
    try:
        argv = ["cdc", "init", "--host", mariadb.host, "--port", str(mariadb.port), "--user", user]
        code = cli_main([*argv, "--database", db, "--dry-run"])
    finally:
        mariadb.execute("SET GLOBAL binlog_row_metadata = 'FULL'", "SET GLOBAL binlog_row_image = 'FULL'")
    captured = capsys.readouterr()
    missing = sorted(line for line in captured.err.splitlines() if line.startswith("missing: "))
    assert code == 2
    assert missing == sorted(
        [
            f"missing: {user}@127.0.0.1:{mariadb.port}: binlog_row_image is MINIMAL, need FULL: updates and "
            "deletes must carry every column",
            f"missing: {user}@127.0.0.1:{mariadb.port}: binlog_row_metadata is MINIMAL, need FULL: row events "
            "must carry column names (MariaDB 10.5+, MySQL 8.0.1+)",
            f"missing: user {user}: lacks REPLICATION SLAVE ON *.* (needed to read the binlog)",
            f"missing: user {user}: lacks REPLICATION CLIENT ON *.* (BINLOG MONITOR on MariaDB 10.5+; needed "
            "for SHOW MASTER STATUS and SHOW BINARY LOGS)",
            f"missing: table {db}.t, column flag: MySQL type 'TINYINT' has no exact Spark type here; supported: "
            "SMALLINT, INT, BIGINT, DECIMAL(p,s), NUMERIC(p,s), DOUBLE, CHAR(n), VARCHAR(n), TEXT, DATE, "
            "DATETIME, TIMESTAMP (or leave it out with --exclude)",
        ]
    ), captured.err
    assert "pw-weak" not in captured.out + captured.err
    # The dry run printed the YAML it would write (the table the user can see), and wrote nothing.
    assert yaml.safe_load(captured.out)["databases"][0]["tables"][0]["name"] == "t"

    # As root the table without a primary key is reported too; the settings are back to FULL.
    monkeypatch.delenv("SHARP_CDC_MYSQL_PASSWORD")
    result = introspect(mariadb_settings(mariadb), [db])
    assert [p for p in result.problems if "primary key" in p] == [
        f"table {db}.nokey: no primary key; the merge needs one (add it, or leave the table out with --exclude)"
    ]
    assert len(result.problems) == 2  # and the TINYINT column

    with pytest.raises(Exception, match="no database 'nope_db'"):
        introspect(mariadb_settings(mariadb), ["nope_db"])
