"""`sharp-dagster cdc init` re-run over an existing YAML: the server's new tables and columns, and tables gone,
proposed as a reviewable diff (written beside the file, applied only with --apply); the user's entries kept."""

from __future__ import annotations

import yaml

from sharp_dagster.cdc.source.config import load_source_config
from sharp_dagster.cli.main import main as cli_main


def _argv(mariadb, db: str, out) -> list[str]:
    return ["cdc", "init", "--host", mariadb.host, "--port", str(mariadb.port), "--database", db] + [
        "--source-id",
        "rerun",
        "--output",
        str(out),
    ]


def test_init_rerun_proposes_new_tables_and_columns_and_keeps_user_edits(
    mariadb, tmp_path, monkeypatch, capsys
):
    db = "rerun_init"
    mariadb.execute(f"DROP DATABASE IF EXISTS {db}", f"CREATE DATABASE {db}")
    mariadb.execute(
        "CREATE TABLE orders (order_id BIGINT PRIMARY KEY, amount DECIMAL(12,2))",
        "CREATE TABLE acct_0 (id BIGINT PRIMARY KEY, v INT)",
        "CREATE TABLE acct_1 (id BIGINT PRIMARY KEY, v INT)",
        "CREATE TABLE legacy (id INT PRIMARY KEY)",
        "CREATE TABLE pad_00 (id INT PRIMARY KEY)",
        "CREATE TABLE pad_01 (id INT PRIMARY KEY)",
        database=db,
    )
    monkeypatch.delenv("SHARP_CDC_MYSQL_PASSWORD", raising=False)
    out = tmp_path / "rerun.yaml"
    assert cli_main(_argv(mariadb, db, out)) == 0
    # The user's edits: a comment, a business key and another lateness.
    edited = yaml.safe_load(out.read_text())
    edited["lateness_minutes"] = 42
    orders = next(t for t in edited["databases"][0]["tables"] if t["name"] == "orders")
    orders["business_key"] = ["order_id"]
    out.write_text("# ours: reviewed 2026-11-28\n" + yaml.safe_dump(edited, sort_keys=False))
    mine = out.read_text()
    capsys.readouterr()

    assert cli_main(_argv(mariadb, db, out)) == 0  # nothing changed on the server
    assert "up to date" in capsys.readouterr().out and out.read_text() == mine

    mariadb.execute(
        "CREATE TABLE coupon (code VARCHAR(20) PRIMARY KEY, pct INT NOT NULL)",
        "ALTER TABLE orders ADD COLUMN note VARCHAR(40)",
        "CREATE TABLE acct_2 (id BIGINT PRIMARY KEY, v INT)",
        "DROP TABLE legacy",
        "CREATE TABLE pad_02 (id INT PRIMARY KEY)",
        database=db,
    )
    assert cli_main(_argv(mariadb, db, out)) == 0
    printed = capsys.readouterr().out
    assert out.read_text() == mine  # never rewritten without --apply
    proposed_path = tmp_path / "rerun.yaml.proposed"
    assert f"--- {out}" in printed and f"+++ {out}.proposed" in printed
    assert "+  - name: coupon" in printed and "+    - note VARCHAR(40)" in printed
    assert f"change: new table {db}.coupon" in printed and f"gone from the source: {db}.legacy" in printed
    assert (
        f"change: new shards of {db}.acct: acct_2" in printed and f"new shards of {db}.pad: pad_02" in printed
    )
    proposed = yaml.safe_load(proposed_path.read_text())
    assert proposed_path.read_text().startswith("# ours: reviewed 2026-11-28\n")
    assert proposed["lateness_minutes"] == 42 and proposed["source_id"] == "rerun"
    tables = {t["name"]: t for t in proposed["databases"][0]["tables"]}
    assert list(tables) == ["acct", "orders", "pad", "coupon"]  # existing order kept, the new one appended
    assert tables["orders"] == {
        "name": "orders",
        "primary_key": ["order_id"],
        "columns": ["order_id BIGINT NOT NULL", "amount DECIMAL(12,2)", "note VARCHAR(40)"],
        "business_key": ["order_id"],
    }
    assert tables["acct"]["shards"] == 3 and tables["pad"]["shards"] == "00..02"
    assert tables["coupon"] == {
        "name": "coupon",
        "primary_key": ["code"],
        "columns": ["code VARCHAR(20) NOT NULL", "pct INT NOT NULL"],
    }

    assert cli_main([*_argv(mariadb, db, out), "--apply"]) == 0
    assert "applied 5 change(s)" in capsys.readouterr().out
    assert out.read_text() == proposed_path.read_text()
    assert [t.name for t in load_source_config(out).databases[0].tables] == [
        "acct",
        "orders",
        "pad",
        "coupon",
    ]


def test_init_rerun_refuses_a_new_table_without_a_primary_key(mariadb, tmp_path, monkeypatch, capsys):
    db = "rerun_init_nopk"
    mariadb.execute(f"DROP DATABASE IF EXISTS {db}", f"CREATE DATABASE {db}")
    mariadb.execute("CREATE TABLE a (id INT PRIMARY KEY)", database=db)
    monkeypatch.delenv("SHARP_CDC_MYSQL_PASSWORD", raising=False)
    out = tmp_path / "nopk.yaml"
    assert cli_main(_argv(mariadb, db, out)) == 0
    before = out.read_text()
    mariadb.execute("CREATE TABLE events (at DATETIME, what VARCHAR(10))", database=db)
    capsys.readouterr()
    assert cli_main(_argv(mariadb, db, out)) == 2
    err = capsys.readouterr().err
    assert f"table {db}.events: no primary key" in err and "--exclude" in err
    assert out.read_text() == before and not (tmp_path / "nopk.yaml.proposed").exists()
