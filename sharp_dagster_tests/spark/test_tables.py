"""The warehouse tables (Iceberg) through the store API the pipeline uses: exact-partition overwrite, a failed write
changing nothing, staged rows invisible until published, missing partitions named, unsafe values refused, hourly
partitions and new columns."""

from __future__ import annotations

import pytest

from sharp_dagster.spark.tables import MissingPartitionError, TableRef


def rows(spark, table_or_query):
    query = table_or_query if " " in table_or_query else f"SELECT * FROM {table_or_query}"
    return sorted(tuple(r) for r in spark.sql(query).collect())


def test_overwrite_replaces_exactly_one_partition(spark, table_store):
    ref = TableRef("ods", "t_overwrite")
    table_store.write_partition(ref, {"dt": "2024-01-01"}, spark.sql("SELECT 1 AS id, 'a' AS v"))
    table_store.write_partition(ref, {"dt": "2024-01-02"}, spark.sql("SELECT 2 AS id, 'b' AS v"))
    table_store.write_partition(
        ref, {"dt": "2024-01-01"}, spark.sql("SELECT 10 AS id, 'z' AS v UNION ALL SELECT 11, 'y'")
    )
    assert rows(spark, "ods.t_overwrite") == [
        (2, "b", "2024-01-02"),
        (10, "z", "2024-01-01"),
        (11, "y", "2024-01-01"),
    ]
    assert table_store.list_partitions(ref) == [{"dt": "2024-01-01"}, {"dt": "2024-01-02"}]


def test_failed_write_leaves_previous_partition(spark, table_store):
    ref = TableRef("ods", "t_failed")
    table_store.write_partition(ref, {"dt": "2024-01-01"}, spark.sql("SELECT 1 AS id"))
    # A query that fails while Spark writes it (division by zero under ANSI mode raises at run time).
    bad = spark.sql("SELECT CAST(id / (id - id) AS INT) AS id FROM range(5)")
    with pytest.raises(Exception):  # noqa: B017 - Spark wraps the error in its own types
        table_store.write_partition(ref, {"dt": "2024-01-01"}, bad)
    assert rows(spark, "ods.t_failed") == [(1, "2024-01-01")]
    assert table_store.list_partitions(ref) == [{"dt": "2024-01-01"}]


def test_staged_rows_are_invisible_until_published(spark, table_store):
    ref = TableRef("ods", "t_staged")
    table_store.write_partition(ref, {"dt": "2024-01-01"}, spark.sql("SELECT 1 AS id"))
    staged = table_store.stage(ref, {"dt": "2024-01-01"}, spark.sql("SELECT 7 AS id UNION ALL SELECT 8"))
    assert staged.row_count == 2
    assert sorted(r.id for r in table_store.read_staged(staged).collect()) == [7, 8]
    assert rows(spark, "ods.t_staged") == [(1, "2024-01-01")]
    table_store.discard(staged)
    assert rows(spark, "ods.t_staged") == [(1, "2024-01-01")]


def test_missing_partition_is_named(spark, table_store):
    ref = TableRef("ods", "t_missing")
    table_store.write_partition(ref, {"dt": "2024-01-01"}, spark.sql("SELECT 1 AS id"))
    with pytest.raises(MissingPartitionError) as err:
        table_store.read_partitions(
            ref, [{"dt": "2024-01-01"}, {"dt": "2024-01-03"}], needed_by="dwd/x[2024-01-03]"
        )
    assert "ods.t_missing[dt=2024-01-03]" in str(err.value)
    assert "dwd/x[2024-01-03]" in str(err.value)
    assert "2024-01-01" not in str(err.value)


def test_unsafe_partition_values_rejected(spark, table_store):
    ref = TableRef("ods", "t_unsafe")
    with pytest.raises(ValueError, match="unsafe partition value"):
        table_store.write_partition(ref, {"dt": "2024-01-01/../../x"}, spark.sql("SELECT 1 AS id"))
    with pytest.raises(ValueError, match="not a plain identifier"):
        TableRef("ods", "t; drop table x")


def test_hourly_partitions_and_schema_evolution(spark, table_store):
    ref = TableRef("raw", "t_hourly", ("dt", "hour"))
    table_store.write_partition(ref, {"dt": "2024-01-01", "hour": "00"}, spark.sql("SELECT 1 AS id"))
    table_store.write_partition(
        ref, {"dt": "2024-01-01", "hour": "01"}, spark.sql("SELECT 2 AS id, 'new' AS added")
    )
    assert rows(spark, "SELECT id, added, dt, hour FROM raw.t_hourly") == [
        (1, None, "2024-01-01", "00"),
        (2, "new", "2024-01-01", "01"),
    ]
