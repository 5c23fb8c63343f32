"""The plan reader on constructed Catalyst JSON (no Spark): relations, aliases, views, unions, CTE references,
window ranking and subqueries, and clear errors on bad input."""

from __future__ import annotations

import json

import pytest

from sharp_dagster.lineage.spark_plan import PlanLineageError, plan_lineage

E = "org.apache.spark.sql.catalyst.expressions."
L = "org.apache.spark.sql.catalyst.plans.logical."


def attr(name: str, eid: int) -> list[dict]:
    return [{"class": E + "AttributeReference", "num-children": 0, "name": name, "exprId": {"id": eid}}]


def expr(cls: str, *children: list[dict], **fields) -> list[dict]:
    return [{"class": E + cls, "num-children": len(children), **fields}] + [n for c in children for n in c]


def alias(name: str, eid: int, child: list[dict]) -> list[dict]:
    return [
        {"class": E + "Alias", "num-children": 1, "child": 0, "name": name, "exprId": {"id": eid}}
    ] + child


def lit() -> list[dict]:
    return expr("Literal", value="1")


def relation(db: str, table: str, cols: dict[str, int]) -> list[dict]:
    return [
        {
            "class": "org.apache.spark.sql.execution.datasources.LogicalRelation",
            "num-children": 0,
            "relation": None,
            "output": [attr(c, i) for c, i in cols.items()],
            "catalogTable": {"identifier": {"table": table, "database": db, "catalog": "spark_catalog"}},
        }
    ]


def node(cls: str, *children: list[dict], **fields) -> list[dict]:
    return [{"class": L + cls, "num-children": len(children), **fields}] + [n for c in children for n in c]


def test_project_filter_relation():
    plan = node(
        "Project",
        node(
            "Filter",
            relation("ods", "orders", {"id": 1, "qty": 2, "price": 3, "dt": 4}),
            condition=expr("EqualTo", attr("dt", 4), lit()),
        ),
        projectList=[attr("id", 1), alias("amount", 10, expr("Multiply", attr("qty", 2), attr("price", 3)))],
    )
    result = plan_lineage(json.dumps(plan))
    assert result.tables == ["ods.orders"] and result.views == []
    assert result.columns == {"id": ["ods.orders.id"], "amount": ["ods.orders.price", "ods.orders.qty"]}
    assert result.dependencies == ["ods.orders.dt"]


def test_view_is_transparent_and_reported():
    inner = node(
        "Project",
        relation("ods", "users", {"uid": 1, "city": 2}),
        projectList=[alias("home", 5, attr("city", 2))],
    )
    view = node("View", inner, desc={"identifier": {"table": "v", "database": "dwd"}}, isTempView=False)
    plan = node("Project", node("SubqueryAlias", view, identifier={}), projectList=[attr("home", 5)])
    result = plan_lineage(plan)
    assert result.tables == ["ods.users"] and result.views == ["dwd.v"]
    assert result.columns == {"home": ["ods.users.city"]}


def test_union_maps_by_position_and_window_rank_is_a_dependency():
    left = node("Project", relation("a", "x", {"k": 1}), projectList=[attr("k", 1)])
    right = node("Project", relation("a", "y", {"j": 2}), projectList=[attr("j", 2)])
    union = node("Union", left, right, children=[0, 1])
    spec = expr("WindowSpecDefinition", expr("SortOrder", attr("k", 1)))
    rank = alias("r", 9, expr("WindowExpression", expr("Rank", attr("k", 1)), spec))
    plan = node("Window", union, windowExpressions=[rank], partitionSpec=[], orderSpec=[])
    result = plan_lineage(plan)
    assert result.tables == ["a.x", "a.y"]
    assert result.columns == {"k": ["a.x.k", "a.y.j"], "r": []}
    assert result.dependencies == ["a.x.k", "a.y.j"]


def test_cte_reference_and_scalar_subquery():
    cte_def = node(
        "CTERelationDef", node("Project", relation("s", "t", {"v": 1}), projectList=[attr("v", 1)]), id=7
    )
    ref = node("CTERelationRef", cteId=7, output=[attr("v", 20)])
    sub = node(
        "Aggregate",
        relation("s", "u", {"z": 3}),
        groupingExpressions=[],
        aggregateExpressions=[alias("m", 30, expr("Max", attr("z", 3)))],
    )
    project = node(
        "Project",
        ref,
        projectList=[attr("v", 20), alias("m", 31, expr("ScalarSubquery", plan=sub, outerAttrs=[]))],
    )
    plan = node("WithCTE", cte_def, project, plan=1, cteDefs=[0])
    result = plan_lineage(plan)
    assert result.tables == ["s.t", "s.u"]
    assert result.columns == {"v": ["s.t.v"], "m": ["s.u.z"]}


def test_cte_reference_keeping_the_definitions_expr_ids():
    # Spark gives the first reference of a CTE the definition's own exprIds, later ones new ids.
    cte_def = node(
        "CTERelationDef", node("Project", relation("s", "t", {"v": 1}), projectList=[attr("v", 1)]), id=0
    )
    first = node(
        "Project", node("CTERelationRef", cteId=0, output=[attr("v", 1)]), projectList=[attr("v", 1)]
    )
    second = node(
        "Project",
        node("CTERelationRef", cteId=0, output=[attr("v", 2)]),
        projectList=[alias("w", 3, expr("Multiply", attr("v", 2), lit()))],
    )
    plan = node("WithCTE", cte_def, node("Union", first, second, children=[0, 1]), plan=1, cteDefs=[0])
    assert plan_lineage(plan).columns == {"v": ["s.t.v"]}


def test_unknown_nodes_are_named_and_followed():
    plan = node("SomeFutureNode", relation("d", "t", {"a": 1}), extra=[alias("b", 2, attr("a", 1))])
    result = plan_lineage(plan)
    assert result.unknown_nodes == ["SomeFutureNode"] and result.columns == {"a": ["d.t.a"]}


def test_bad_input_names_what_is_wrong():
    with pytest.raises(PlanLineageError, match="not a Catalyst plan JSON"):
        plan_lineage("{}")
    with pytest.raises(PlanLineageError, match="trailing elements"):
        plan_lineage(relation("d", "t", {"a": 1}) + relation("d", "u", {"b": 2}))
    broken = node("Project", relation("d", "t", {"a": 1}), projectList=[expr("Add", attr("a", 1), lit())])
    with pytest.raises(PlanLineageError, match="Project.projectList: expected a named expression, got Add"):
        plan_lineage(broken)


def v2_relation(cols: dict[str, int]) -> list[dict]:
    """A `DataSourceV2Relation` as Spark 4.1 writes it for an Iceberg table: table/catalog/identifier are null."""
    return [
        {
            "class": "org.apache.spark.sql.execution.datasources.v2.DataSourceV2Relation",
            "num-children": 0,
            "output": [attr(c, i) for c, i in cols.items()],
            "table": None,
            "catalog": None,
            "identifier": None,
            "options": None,
        }
    ]


def catalog_alias(name: str, qualifier: str, child: list[dict]) -> list[dict]:
    """The analyzer's SubqueryAlias over a resolved relation; the qualifier Seq is written as its string."""
    ident = {
        "product-class": "org.apache.spark.sql.catalyst.AliasIdentifier",
        "name": name,
        "qualifier": qualifier,
    }
    return node("SubqueryAlias", child, identifier=ident, child=0)


@pytest.mark.parametrize(
    "name, qualifier",
    [
        ("orders", "[sharp, ods]"),
        ("orders", "[sharp_ab12cd34ef, ods]"),
        ("branch_stage_run_7", "[sharp_ab12cd34ef, ods, orders]"),
        ("tag_v1", "[sharp, ods, orders]"),
        ("snapshots", "[sharp, ods, orders]"),
    ],
)
def test_v2_relation_is_named_by_the_analyzers_alias_without_the_catalog(name, qualifier):
    plan = node(
        "Project",
        node(
            "Filter",
            node(
                "SubqueryAlias",  # a user's alias (`FROM ... o`): no qualifier, names no table
                catalog_alias(name, qualifier, v2_relation({"id": 1, "qty": 2, "dt": 3})),
                identifier={"name": "o", "qualifier": "[]"},
                child=0,
            ),
            condition=expr("EqualTo", attr("dt", 3), lit()),
        ),
        projectList=[attr("id", 1), alias("q2", 10, expr("Multiply", attr("qty", 2), lit()))],
    )
    result = plan_lineage(json.dumps(plan))
    assert result.tables == ["ods.orders"]
    assert result.columns == {"id": ["ods.orders.id"], "q2": ["ods.orders.qty"]}
    assert result.dependencies == ["ods.orders.dt"]


def test_v2_relation_without_a_catalog_alias_is_reported_unnamed():
    plan = node("SubqueryAlias", v2_relation({"id": 1}), identifier={"name": "x", "qualifier": "[]"}, child=0)
    result = plan_lineage(json.dumps(plan))
    assert result.tables == ["<DataSourceV2Relation>"]
    assert result.columns == {"id": ["<DataSourceV2Relation>.id"]}


def test_a_table_named_like_a_selector_is_kept():
    """`ods.files` is a table, not the metadata table of `ods`: only a third part is a selector."""
    plan = catalog_alias("files", "[sharp, ods]", v2_relation({"id": 1}))
    assert plan_lineage(json.dumps(plan)).tables == ["ods.files"]
