"""The parser names unaliased select-list expressions as Spark does: checked against the columns of Spark's own
analyzed DataFrame for the same SELECT (analysis only, no job runs), and its case-sensitive resolution against
Spark's under `spark.sql.caseSensitive`."""

from __future__ import annotations

import pytest

from sharp_dagster.lineage.parser import parse_script

EXPRESSIONS = [
    "max(col1)",
    "MAX(t.col1)",
    "count(*)",
    "count(DISTINCT col2)",
    "(col1 + col2)",
    "col1 * 2 - 1",
    "CAST(col1 AS INT)",
    "coalesce(name, 'x')",
    "upper(t.name)",
    "-col1",
    "CASE WHEN col1 > 0 THEN col2 ELSE col3 END",
    "IF(col1 > 1, col2, col3)",
    "col1 IS NULL",
    "NOT (col1 = 1)",
    "col1 IN (1, 2)",
    "round(col1 / 3, 2)",
    "col1 % 2",
    "'lit'",
    "1.5",
    "(col1)",
    "sum(col1) OVER (PARTITION BY col2 ORDER BY col3)",
    "row_number() OVER (PARTITION BY col1 ORDER BY col2)",
]


@pytest.fixture(scope="module")
def tab1(spark):
    spark.sql(
        "CREATE OR REPLACE TEMPORARY VIEW lrt_names_tab1 AS SELECT 1 AS col1, 2 AS col2, 3 AS col3, 'x' AS name"
    )
    yield "lrt_names_tab1"
    spark.sql("DROP VIEW IF EXISTS lrt_names_tab1")


def test_unaliased_names_match_spark(spark, tab1):
    # One SELECT per expression: aggregates and plain columns do not mix without a GROUP BY.
    spark_names = [spark.sql(f"SELECT {e} FROM {tab1} t").columns[0].lower() for e in EXPRESSIONS]
    parsed = parse_script(
        ";".join(f"INSERT INTO out{i} SELECT {e} FROM {tab1} t" for i, e in enumerate(EXPRESSIONS))
    )
    names = {c.table: c.column for c in parsed.columns}
    assert [names[f"out{i}"] for i in range(len(EXPRESSIONS))] == spark_names


def test_case_sensitive_resolution_matches_spark(spark, tab1):
    sql = f"SELECT T.col1 FROM {tab1} t"
    try:
        spark.conf.set("spark.sql.caseSensitive", "true")
        with pytest.raises(Exception, match="UNRESOLVED_COLUMN"):
            spark.sql(sql)  # analysed eagerly
    finally:
        spark.conf.set("spark.sql.caseSensitive", "false")
    assert spark.sql(sql).columns == ["col1"]
    # The parser agrees: the qualifier names the table only when names are case-insensitive.
    assert parse_script(f"INSERT INTO out {sql}").columns[0].sources == [f"{tab1}.col1"]
    assert parse_script(f"INSERT INTO out {sql}", case_sensitive=True).columns[0].sources != [f"{tab1}.col1"]
