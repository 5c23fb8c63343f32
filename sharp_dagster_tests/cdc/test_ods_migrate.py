"""`ods migrate` (`cdc/ods/migrate.py`, `cli/ods.py`) on real Iceberg tables: a dt-partitioned ODS table becomes the
current state with one tag per day, each tag reading back exactly its old partition, a column the old table gained
on a later day marked with that day (`sharp.column-since.<column>`, what the merge's re-runs read); refused when run
twice; a failure in the swap leaves the old tables as they were."""

from __future__ import annotations

from decimal import Decimal

import pytest

from sharp_dagster.cdc.ods import merge as ods_merge
from sharp_dagster.cdc.ods import migrate as ods_migrate
from sharp_dagster.cdc.ods.migrate import MigrationRefused, migrate_table
from sharp_dagster.spark.tables import TableRef

DAYS = {
    # day: [(id, name, seq, deleted)]: updates, a delete (tombstone), a new key, a deleted key coming back
    "2024-02-29": [(1, "a", 1, False), (2, "b", 1, False), (3, "c", 1, False)],
    "2024-03-01": [(1, "a2", 5, False), (2, None, 6, True), (3, "c", 1, False), (4, "d", 7, False)],
    "2024-03-02": [(1, "a2", 5, False), (2, "b3", 9, False), (3, None, 8, True), (4, "d", 7, False)],
}
SCHEMA = "id bigint, name string, _binlog_seq decimal(38,0), _is_deleted boolean"
NOTE_DAY = "2024-03-01"  # the day an ALTER TABLE ... ADD COLUMN note reached the old table


def _old_layout(store, table):
    """ods_state.<table> (full state per day) and ods.<table> (live rows per day), written by the pipeline's
    partition write, as the dt layout had them; from `NOTE_DAY` on, with a column `note` (the write adds it)."""
    spark = store.spark
    state, ods = TableRef("ods_state", table, ("dt",)), TableRef("ods", table, ("dt",))
    for day, rows in DAYS.items():
        df = spark.createDataFrame([(i, n, Decimal(s), d) for i, n, s, d in rows], SCHEMA)
        if day >= NOTE_DAY:
            df = df.selectExpr("*", "concat('n', id) AS note")
        store.write_partition(state, {"dt": day}, df)
        store.write_partition(
            ods, {"dt": day}, df.where("NOT _is_deleted").drop("_binlog_seq", "_is_deleted")
        )
    return state, ods


def _rows(spark, sql):
    return sorted((tuple(r) for r in spark.sql(sql).collect()), key=repr)  # repr: None sorts with the rest


def test_each_day_becomes_a_tag_that_reads_back_its_partition(table_store):
    store, spark = table_store, table_store.spark
    _old_layout(store, "mig_orders")
    lines = []

    result = migrate_table(store, "mig_orders", ["id"], progress=lines.append)

    assert result.days == list(DAYS) and len(lines) == 4
    assert sorted(result.backups) == ["ods.mig_orders__dt_layout", "ods_state.mig_orders__dt_layout"]
    assert spark.table("ods.mig_orders").columns == ["id", "name", "_binlog_seq", "note"]  # no dt: the state
    cols = "id, name, _binlog_seq"
    for day, rows in DAYS.items():
        live = sorted(((i, n, Decimal(s)) for i, n, s, d in rows if not d), key=repr)
        dead = sorted(((i, Decimal(s)) for i, _, s, d in rows if d), key=repr)
        assert _rows(spark, f"SELECT {cols} FROM ods.mig_orders VERSION AS OF '{day}'") == live
        notes = _rows(spark, f"SELECT id, note FROM ods.mig_orders VERSION AS OF '{day}'")
        assert notes == sorted(((i, f"n{i}" if day >= NOTE_DAY else None) for i, *_ in live), key=repr)
        assert _rows(spark, f"SELECT * FROM ods_state.mig_orders VERSION AS OF '{day}'") == dead
        assert _rows(spark, f"SELECT id, name FROM ods.mig_orders VERSION AS OF '{day}'") == _rows(
            spark, f"SELECT id, name FROM ods.mig_orders__dt_layout WHERE dt = '{day}'"
        )
    last = sorted(((i, n, Decimal(s)) for i, n, s, d in DAYS["2024-03-02"] if not d), key=repr)
    assert _rows(spark, f"SELECT {cols} FROM ods.mig_orders") == last  # the last partition is the state
    assert result.live_rows == 3 and result.tombstones == 1
    # `note` came on NOTE_DAY (the old table's first snapshot whose schema has it wrote that day): a re-run of
    # that day starts from a state without it and adds it again; the first day's columns carry no property.
    props = store.java_table(TableRef("ods", "mig_orders")).properties()
    since = {str(k): str(props.get(k)) for k in props.keySet() if str(k).startswith(ods_merge.COLUMN_SINCE)}
    assert since == {f"{ods_merge.COLUMN_SINCE}note": NOTE_DAY} and result.column_since == {"note": NOTE_DAY}
    assert f"note on {NOTE_DAY}" in lines[0]
    assert "note" not in ods_merge._state_before(store, "mig_orders", "main", NOTE_DAY).columns
    assert "note" in ods_merge._state_before(store, "mig_orders", "main", "2024-03-02").columns

    with pytest.raises(MigrationRefused, match="new layout already"):  # a second run changes nothing
        migrate_table(store, "mig_orders", ["id"])
    assert _rows(spark, f"SELECT {cols} FROM ods.mig_orders") == last


def test_a_failed_swap_leaves_the_old_tables_as_they_were(table_store, monkeypatch):
    store, spark = table_store, table_store.spark
    state, ods = _old_layout(store, "mig_fail")
    before = {r.qualified: _rows(spark, f"SELECT * FROM {r.qualified}") for r in (state, ods)}
    heads = {r.qualified: store.current_snapshot_id(r) for r in (state, ods)}
    real, calls = ods_migrate._rename, []

    def rename_then_fail(store_, ref, to):
        calls.append((ref.qualified, to))
        if len(calls) == 3:  # the old ods is renamed and the new one in place: the state's rename fails
            raise RuntimeError("catalog unavailable")
        real(store_, ref, to)

    monkeypatch.setattr(ods_migrate, "_rename", rename_then_fail)
    with pytest.raises(RuntimeError, match="catalog unavailable"):
        migrate_table(store, "mig_fail", ["id"])

    for ref in (state, ods):  # the old names hold the old tables again, unchanged
        assert _rows(spark, f"SELECT * FROM {ref.qualified}") == before[ref.qualified]
        assert store.current_snapshot_id(ref) == heads[ref.qualified]
    for name in ("ods.mig_fail__migrating", "ods_state.mig_fail__migrating", "ods.mig_fail__dt_layout"):
        assert not spark.catalog.tableExists(f"{store.catalog}.{name}")


def test_the_command_refuses_a_table_it_does_not_know_in_one_line(capsys):
    from sharp_dagster.cli.main import main

    assert main(["ods", "migrate", "no_such_table"]) == 2
    err = capsys.readouterr().err.strip()
    assert "unknown ODS table 'no_such_table'" in err and "\n" not in err
