"""The comparison engine on constructed inputs (no Spark): parser answer against plan answer."""

from __future__ import annotations

import pytest

from sharp_dagster.lineage.parser import ColumnLineage, ScriptLineage, parse_script
from sharp_dagster.lineage.runtime import Difference, compare, parsed_answer
from sharp_dagster.lineage.spark_plan import ObservedLineage


def script(sources, columns, deps=(), target="dwd.t") -> ScriptLineage:
    return ScriptLineage(
        sources=list(sources),
        targets=[target],
        columns=[ColumnLineage(f"{target}.{c}", list(s)) for c, s in columns.items()],
        dataset_dependencies=list(deps),
        elapsed_ms=0.0,
    )


def observed(tables, columns, deps=(), views=()) -> ObservedLineage:
    return ObservedLineage(
        tables=sorted(tables), views=list(views), columns=dict(columns), dependencies=sorted(deps)
    )


def test_identical_answers_pass():
    parsed = script(["ods.o"], {"id": ["ods.o.id"], "amt": ["ods.o.amt"]}, ["ods.o.dt"])
    result = compare(
        parsed, "dwd.t", observed(["ods.o"], {"id": ["ods.o.id"], "amt": ["ods.o.amt"]}, ["ods.o.dt"])
    )
    assert result.passed and result.differences == []
    assert result.to_dict()["parsed"]["tables"] == ["ods.o"]


def test_table_read_only_by_spark_names_the_table_and_both_answers():
    parsed = script(["dwd.v"], {"id": ["dwd.v.id"]})
    spark = observed(["ods.o"], {"id": ["ods.o.id"]}, views=["dwd.v"])
    result = compare(parsed, "dwd.t", spark)
    assert not result.passed
    assert result.differences == [
        Difference("table", "dwd.v", ["dwd.v"], ["ods.o"]),
        Difference("table", "ods.o", ["dwd.v"], ["ods.o"]),
        Difference("column_sources", "dwd.t.id", ["dwd.v.id"], ["ods.o.id"]),
    ]
    assert result.differences[2].message == "sources of dwd.t.id: parser: [dwd.v.id] vs spark: [ods.o.id]"
    assert (
        result.to_dict()["differences"][0]["message"]
        == "tables read dwd.v: parser: [dwd.v] vs spark: [ods.o]"
    )


def test_column_sources_and_missing_columns_on_either_side():
    parsed = script(["ods.o"], {"a": ["ods.o.a"], "b": ["ods.o.b"], "only_parsed": ["ods.o.c"]})
    spark = observed(["ods.o"], {"a": ["ods.o.a"], "b": ["ods.o.b", "ods.o.x"], "only_spark": []})
    kinds = {(d.kind, d.subject): (d.parsed, d.spark) for d in compare(parsed, "dwd.t", spark).differences}
    assert kinds == {
        ("column_sources", "dwd.t.b"): (["ods.o.b"], ["ods.o.b", "ods.o.x"]),
        ("column", "dwd.t.only_parsed"): (["ods.o.c"], None),
        ("column", "dwd.t.only_spark"): (None, []),
    }
    message = next(
        d for d in compare(parsed, "dwd.t", spark).differences if d.subject == "dwd.t.only_spark"
    ).message
    assert message == "output column dwd.t.only_spark: parser: (absent) vs spark: []"


def test_unexpanded_star_matches_any_column_of_its_table():
    parsed = script(["ods.o"], {"*": ["ods.o.*"], "n": ["ods.o.*"]})
    spark = observed(["ods.o"], {"id": ["ods.o.id"], "amt": ["ods.o.amt"], "n": ["ods.o.q"]})
    assert compare(parsed, "dwd.t", spark).passed
    # ... but not a column of another table.
    spark2 = observed(["ods.o"], {"id": ["ods.p.id"], "n": ["ods.o.q"]})
    (diff,) = [d for d in compare(parsed, "dwd.t", spark2).differences if d.kind == "column"]
    assert diff.subject == "dwd.t.id" and diff.spark == ["ods.p.id"]


def test_names_are_compared_lower_case_and_unqualified_tables_get_the_default_database():
    parsed = script(["Orders"], {"ID": ["Orders.ID"]}, target="DWD.T")
    spark = observed(["work.orders"], {"id": ["work.orders.id"]})
    assert compare(parsed, "DWD.T", spark, default_database="work").passed
    assert not compare(parsed, "DWD.T", spark).passed  # default database "default"


def test_dependencies_differences_are_notes_unless_asked():
    parsed = script(["ods.o"], {"id": ["ods.o.id"]}, ["ods.o.dt"])
    spark = observed(["ods.o"], {"id": ["ods.o.id"]}, ["ods.o.dt", "ods.o.ok"])
    lenient = compare(parsed, "dwd.t", spark)
    assert lenient.passed
    assert lenient.notes == [Difference("dependencies", "dwd.t", ["ods.o.dt"], ["ods.o.dt", "ods.o.ok"])]
    assert lenient.to_dict()["notes"][0]["message"] == (
        "row dependencies dwd.t: parser: [ods.o.dt] vs spark: [ods.o.dt, ods.o.ok]"
    )
    (diff,) = compare(parsed, "dwd.t", spark, compare_dependencies=True).differences
    assert diff == Difference("dependencies", "dwd.t", ["ods.o.dt"], ["ods.o.dt", "ods.o.ok"])


def test_parsed_answer_of_a_real_parse_and_a_wrong_target():
    lineage = parse_script(
        "INSERT OVERWRITE TABLE dwd.t SELECT o.id, o.a + o.b AS s FROM ods.o o WHERE o.dt = '1'",
        dialect="spark",
    )
    answer = parsed_answer(lineage, "dwd.t")
    assert answer.tables == ["ods.o"]
    assert answer.columns == {"id": ["ods.o.id"], "s": ["ods.o.a", "ods.o.b"]}
    assert answer.dependencies == ["ods.o.dt"]
    with pytest.raises(ValueError, match=r"writes \['dwd.t'\], not dwd.other"):
        parsed_answer(lineage, "dwd.other")


def test_catalog_and_branch_names_of_the_parser_are_the_base_table():
    """A catalog-qualified name and an Iceberg branch read are compared as the base table Spark's plan names."""
    lineage = parse_script(
        "SELECT o.id FROM sharp.ods.orders o JOIN ods.items.branch_stage_x i ON i.oid = o.id",
        dialect="spark",
        default_target="dw.t",
    )
    parsed = parsed_answer(lineage, "dw.t")
    assert parsed.tables == ["ods.items", "ods.orders"]
    assert parsed.columns == {"id": ["ods.orders.id"]}
    assert parsed.dependencies == ["ods.items.oid", "ods.orders.id"]
