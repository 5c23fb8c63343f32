"""Table and column lineage read from Spark's analyzed logical plan: what a statement really reads.

This module owns `plan_lineage`: given the JSON of an analyzed plan (`df._jdf.queryExecution().analyzed().toJSON()`,
one py4j call, see `analyzed_plan_json`), it walks the plan in Python and answers, with the parser's conventions
(`lineage/parser.py`), which base tables were read, which views were expanded on the way, each output column's
source columns (value lineage) and the columns that only steer which rows arrive (filter, join, group, sort,
window partition/order: dataset-level dependencies).

How: every attribute in a Catalyst plan has an `exprId`. A relation's output attributes are base columns; an
`Alias` defines a new exprId from the attributes its expression references; `Union`, `Expand` and CTE references
map outputs by position. Resolving an output attribute through those definitions gives its base columns. Views are
transparent (Spark inlines the view's plan under a `View` node), so a view is reported separately and its base
tables count as read. Subquery plans (scalar, IN, EXISTS) are part of the JSON and are walked the same way.

Tables are named as `plan_tables.py` says (a v2 catalog's relation by the analyzer's alias above it, an Iceberg
branch, tag, snapshot, time-travel or metadata-table read as its base table).

Why the JSON and not py4j calls per node: a plan walk over py4j costs one JVM round trip per node and expression
(thousands for a join of a few tables); `toJSON()` is one round trip and the same tree.

No Dagster import, no Spark import (the JSON may come from anywhere, e.g. a saved plan).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from sharp_dagster.lineage.plan_tables import alias_table, table_name
from sharp_dagster.spark.java import java_dataset

__all__ = ["ObservedLineage", "PlanLineageError", "analyzed_plan_json", "plan_lineage"]


class PlanLineageError(ValueError):
    """The plan JSON is not a Catalyst plan this module can read; the message names the node."""


@dataclass
class ObservedLineage:
    """What Spark's plan of one statement reads.

    `tables`: base tables read (`db.table`, lower case), sorted; `views`: views expanded on the way; `columns`:
    each output column (in output order) -> its sorted source columns `db.table.column`; `dependencies`: columns
    that filter, join, group, sort or partition the rows (dataset-level); `unknown_nodes`: plan node classes read
    with the generic rule (their aliases are followed, their other expressions count as dependencies).
    """

    tables: list[str]
    views: list[str]
    columns: dict[str, list[str]]
    dependencies: list[str]
    unknown_nodes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "tables": list(self.tables),
            "views": list(self.views),
            "columns": [{"target": c, "sources": list(s)} for c, s in self.columns.items()],
            "dependencies": list(self.dependencies),
            "unknown_nodes": list(self.unknown_nodes),
        }


def analyzed_plan_json(df: Any) -> str:
    """The analyzed logical plan of a PySpark DataFrame, as Catalyst's own JSON (one JVM call)."""
    return str(java_dataset(df).queryExecution().analyzed().toJSON())


# --------------------------------------------------------------------------------------------------------------
# Catalyst's TreeNode JSON: a tree is a pre-order list of node objects, each with `class` and `num-children`; a
# node's child fields hold indexes into its children. A field holding an expression holds such a list, a field
# holding a Seq of expressions a list of such lists; a subquery expression's `plan` field holds a plan list.


class _Node:
    __slots__ = ("obj", "children", "cls")

    def __init__(self, obj: dict, children: list[_Node]):
        self.obj = obj
        self.children = children
        self.cls = str(obj.get("class", ""))

    @property
    def short(self) -> str:
        return self.cls.rsplit(".", 1)[-1]

    @property
    def is_expression(self) -> bool:
        return ".expressions." in self.cls


def _is_tree(value: Any) -> bool:
    return (
        isinstance(value, list)
        and bool(value)
        and isinstance(value[0], dict)
        and "class" in value[0]
        and "num-children" in value[0]
    )


def _build(flat: list, where: str) -> _Node:
    def take(i: int) -> tuple[_Node, int]:
        if i >= len(flat) or not isinstance(flat[i], dict) or "class" not in flat[i]:
            raise PlanLineageError(f"{where}: malformed Catalyst JSON at element {i}")
        obj = flat[i]
        n = int(obj.get("num-children", 0))
        children, j = [], i + 1
        for _ in range(n):
            child, j = take(j)
            children.append(child)
        return _Node(obj, children), j

    node, end = take(0)
    if end != len(flat):
        raise PlanLineageError(f"{where}: {len(flat) - end} trailing elements after the root node")
    return node


def _trees(value: Any) -> Iterable[list]:
    """Every serialized tree inside a field value (an expression, a Seq of them, a Seq of Seqs)."""
    if _is_tree(value):
        yield value
    elif isinstance(value, list):
        for item in value:
            yield from _trees(item)


_STRUCTURAL = {"class", "num-children", "child", "children", "left", "right"}
# Ranking functions take the window's ORDER BY as their children: that is ordering, not the value's source.
_RANKING = {"Rank", "DenseRank", "PercentRank", "CumeDist", "RowNumber", "NTile"}
# Leaf relations and how their table name is found.
_RELATIONS = {"LogicalRelation", "HiveTableRelation"} | {
    "DataSourceV2Relation",
    "DataSourceV2ScanRelation",
    "StreamingDataSourceV2Relation",
    "StreamingDataSourceV2ScanRelation",
}
# Catalyst's JSON writes a v2 relation's `table`, `catalog` and `identifier` as null (TreeNode.jsonFields serializes
# only a few known field types). The name survives in the `SubqueryAlias` the analyzer puts right above every
# relation it resolves from a catalog: `identifier.qualifier` = [catalog, namespace...], `identifier.name` = the
# table, or for an Iceberg branch/tag/time-travel/metadata-table read the selector, with the table in the qualifier.
_V2_RELATIONS = _RELATIONS - {"LogicalRelation", "HiveTableRelation"}
_NO_SOURCE_LEAVES = {"LocalRelation", "OneRowRelation", "Range", "LogicalRDD", "InMemoryRelation"}
_PASS_THROUGH = {
    "SubqueryAlias",
    "Filter",
    "Sort",
    "Distinct",
    "Deduplicate",
    "DeduplicateWithinWatermark",
    "GlobalLimit",
    "LocalLimit",
    "Limit",
    "Offset",
    "Tail",
    "Sample",
    "ResolvedHint",
    "RepartitionByExpression",
    "Repartition",
    "RebalancePartitions",
    "View",
    "CTERelationDef",
    "Intersect",
    "Except",
}


class _Walk:
    def __init__(self) -> None:
        self.defs: dict[
            int, set
        ] = {}  # exprId -> refs: ("id", n) | ("col", "db.table.column") | ("cte", id, i)
        self.deps: set = set()
        self.tables: set[str] = set()
        self.views: set[str] = set()
        self.cte_outputs: dict[int, list[int]] = {}
        self.unknown: set[str] = set()

    # ---------------------------------------------------------------- expressions
    @staticmethod
    def _expr_id(obj: dict) -> int:
        eid = obj.get("exprId")
        if not isinstance(eid, dict) or "id" not in eid:
            raise PlanLineageError(f"{obj.get('class')}: attribute without exprId")
        return int(eid["id"])

    def refs(self, node: _Node) -> set:
        """The value sources of an expression (window specs and ranking orders go to the dependencies)."""
        short = node.short
        if short in {"AttributeReference", "PrettyAttribute"}:
            return {("id", self._expr_id(node.obj))}
        if short == "WindowSpecDefinition" or short in _RANKING:
            for child in node.children:
                self.deps |= self.refs(child)
            return set()
        out: set = set()
        for key, value in node.obj.items():
            if key in _STRUCTURAL:
                continue
            for flat in _trees(value):
                tree = _build(flat, f"{node.short}.{key}")
                if tree.is_expression:
                    out |= self.refs(tree)
                else:  # a subquery's plan: its output values are this expression's sources
                    out |= {("id", eid) for _, eid in self.plan(tree)}
        for child in node.children:
            out |= self.refs(child)
        return out

    def named(self, flat: list, where: str) -> tuple[str, int]:
        """One element of a project list: an Alias defines its exprId, an attribute passes through."""
        node = _build(flat, where)
        if node.short == "Alias":
            eid = self._expr_id(node.obj)
            self.defs[eid] = set().union(*(self.refs(c) for c in node.children)) if node.children else set()
            return str(node.obj.get("name", "")), eid
        if node.short in {"AttributeReference", "PrettyAttribute"}:
            return str(node.obj.get("name", "")), self._expr_id(node.obj)
        raise PlanLineageError(f"{where}: expected a named expression, got {node.short}")

    def named_list(self, value: Any, where: str) -> list[tuple[str, int]]:
        return [self.named(flat, where) for flat in _trees(value)]

    def dep_fields(self, node: _Node, *keys: str) -> None:
        for key in keys:
            for flat in _trees(node.obj.get(key)):
                self.deps |= self.refs(_build(flat, f"{node.short}.{key}"))

    # ---------------------------------------------------------------- plans
    def plan(self, node: _Node, table_hint: str | None = None) -> list[tuple[str, int]]:
        """Walk a plan node (children first); return its output as (name, exprId).

        `table_hint`: the table named by the `SubqueryAlias` right above (a v2 relation's only name in the JSON).
        """
        short = node.short
        hint = None
        if short == "SubqueryAlias" and len(node.children) == 1 and node.children[0].short in _V2_RELATIONS:
            hint = alias_table(node.obj.get("identifier"))
        outs = [self.plan(c, hint) for c in node.children]
        if short in _RELATIONS:
            return self.relation(node, table_hint)
        if short in _NO_SOURCE_LEAVES:
            output = self.named_list(node.obj.get("output"), f"{short}.output")
            for _, eid in output:
                self.defs.setdefault(eid, set())
            return output
        step = _STEPS.get(short)
        if step is not None:
            return step(self, node, outs)
        if short in _PASS_THROUGH:
            return outs[0] if outs else []
        return self.generic(node, outs)

    def relation(self, node: _Node, table_hint: str | None) -> list[tuple[str, int]]:
        """A leaf relation: its output attributes are the columns of the table it names."""
        short, obj = node.short, node.obj
        table = (
            table_name(obj.get("catalogTable"))
            or table_name(obj.get("tableMeta"))
            or table_name(obj.get("identifier"))
            or table_hint
            or f"<{short}>"
        )
        self.tables.add(table)
        keys = ("output",) if "output" in obj else ("dataCols", "partitionCols")
        output = [a for k in keys for a in self.named_list(obj.get(k), f"{short}.{k}")]
        for name, eid in output:
            self.defs[eid] = {("col", f"{table}.{name.lower()}")}
        return output

    def generic(self, node: _Node, outs: list) -> list[tuple[str, int]]:
        """Any other node: follow its aliases, count its other expressions as dependencies, pass the child
        through."""
        short = node.short
        self.unknown.add(short)
        for key, value in node.obj.items():
            if key in _STRUCTURAL:
                continue
            for flat in _trees(value):
                tree = _build(flat, f"{short}.{key}")
                if tree.short == "Alias":
                    self.named(flat, f"{short}.{key}")
                elif tree.is_expression:
                    self.deps |= self.refs(tree)
        return outs[0] if outs else []

    # One step per plan node class that defines, maps or steers columns: (walk, node, its children's outputs) ->
    # the node's output. Nodes that only pass their child through are `_PASS_THROUGH`.
    def _project(self, node: _Node, outs: list) -> list[tuple[str, int]]:
        return self.named_list(node.obj.get("projectList"), "Project.projectList")

    def _aggregate(self, node: _Node, outs: list) -> list[tuple[str, int]]:
        self.dep_fields(node, "groupingExpressions")
        return self.named_list(node.obj.get("aggregateExpressions"), "Aggregate.aggregateExpressions")

    def _window(self, node: _Node, outs: list) -> list[tuple[str, int]]:
        self.dep_fields(node, "partitionSpec", "orderSpec")
        return outs[0] + self.named_list(node.obj.get("windowExpressions"), "Window.windowExpressions")

    def _join(self, node: _Node, outs: list) -> list[tuple[str, int]]:
        self.dep_fields(node, "condition")
        join_type = json.dumps(node.obj.get("joinType", ""))
        if "LeftSemi" in join_type or "LeftAnti" in join_type or "ExistenceJoin" in join_type:
            return outs[0]
        return outs[0] + outs[1]

    def _generate(self, node: _Node, outs: list) -> list[tuple[str, int]]:
        sources = set()
        for flat in _trees(node.obj.get("generator")):
            sources |= self.refs(_build(flat, "Generate.generator"))
        generated = self.named_list(node.obj.get("generatorOutput"), "Generate.generatorOutput")
        for _, eid in generated:
            self.defs[eid] = set(sources)
        return outs[0] + generated

    def _expand(self, node: _Node, outs: list) -> list[tuple[str, int]]:
        output = self.named_list(node.obj.get("output"), "Expand.output")
        for row in node.obj.get("projections") or []:
            for (_, eid), flat in zip(output, _trees(row), strict=False):
                self.defs.setdefault(eid, set()).update(self.refs(_build(flat, "Expand.projections")))
        return output

    def _union(self, node: _Node, outs: list) -> list[tuple[str, int]]:
        first = outs[0]
        # Union's output keeps the first branch's exprIds; later branches add to them.
        for other in outs[1:]:
            for (_, eid), (_, oid) in zip(first, other, strict=False):
                if eid != oid:
                    self.defs.setdefault(eid, set()).add(("id", oid))
        return first

    def _cte_def(self, node: _Node, outs: list) -> list[tuple[str, int]]:
        self.cte_outputs[int(node.obj.get("id", -1))] = [eid for _, eid in outs[0]]
        return outs[0]

    def _cte_ref(self, node: _Node, outs: list) -> list[tuple[str, int]]:
        cte = int(node.obj.get("cteId", -1))
        output = self.named_list(node.obj.get("output"), "CTERelationRef.output")
        # The first reference of a CTE may keep the definition's exprIds: add the link, never replace.
        for i, (_, eid) in enumerate(output):
            self.defs.setdefault(eid, set()).add(("cte", cte, i))
        return output

    def _with_cte(self, node: _Node, outs: list) -> list[tuple[str, int]]:
        return outs[-1]  # children: the CTE definitions, then the main query

    def _view(self, node: _Node, outs: list) -> list[tuple[str, int]]:
        view = table_name(node.obj.get("desc"))
        if view:
            self.views.add(view)
        return outs[0] if outs else []

    def _steering(self, node: _Node, outs: list) -> list[tuple[str, int]]:
        """Filter, Sort, Deduplicate: the child's rows, their condition / order / keys as dependencies."""
        self.dep_fields(node, "condition", "order", "keys")
        return outs[0] if outs else []

    # ---------------------------------------------------------------- resolution
    def resolve(self, ref: tuple, memo: dict, active: set) -> frozenset:
        if ref[0] == "col":
            return frozenset({ref[1]})
        if ref[0] == "cte":
            ids = self.cte_outputs.get(ref[1], [])
            return self.resolve(("id", ids[ref[2]]), memo, active) if ref[2] < len(ids) else frozenset()
        eid = ref[1]
        if eid in memo:
            return memo[eid]
        if (
            eid in active
        ):  # a definition cycle cannot happen in a valid plan; stop rather than recurse forever
            return frozenset()
        active.add(eid)
        result: set = set()
        for r in self.defs.get(eid, ()):
            result |= self.resolve(r, memo, active)
        active.discard(eid)
        memo[eid] = frozenset(result)
        return memo[eid]


_STEPS = {
    "Project": _Walk._project,
    "Aggregate": _Walk._aggregate,
    "Window": _Walk._window,
    "Join": _Walk._join,
    "Generate": _Walk._generate,
    "Expand": _Walk._expand,
    "Union": _Walk._union,
    "CTERelationDef": _Walk._cte_def,
    "CTERelationRef": _Walk._cte_ref,
    "WithCTE": _Walk._with_cte,
    "View": _Walk._view,
    "Filter": _Walk._steering,
    "Sort": _Walk._steering,
    "Deduplicate": _Walk._steering,
    "DeduplicateWithinWatermark": _Walk._steering,
}


def plan_lineage(plan: str | list) -> ObservedLineage:
    """Lineage of an analyzed plan given as Catalyst JSON (a string or the parsed list)."""
    flat = json.loads(plan) if isinstance(plan, str) else plan
    if not _is_tree(flat):
        raise PlanLineageError(
            "not a Catalyst plan JSON: expected a list of nodes with 'class' and 'num-children'"
        )
    root = _build(flat, "plan")
    walk = _Walk()
    output = walk.plan(root)
    memo: dict = {}
    columns: dict[str, list[str]] = {}
    for name, eid in output:
        columns[name.lower()] = sorted(walk.resolve(("id", eid), memo, set()))
    deps: set[str] = set()
    for ref in walk.deps:
        deps |= walk.resolve(ref, memo, set())
    return ObservedLineage(
        tables=sorted(walk.tables),
        views=sorted(walk.views),
        columns=columns,
        dependencies=sorted(deps),
        unknown_nodes=sorted(walk.unknown),
    )
