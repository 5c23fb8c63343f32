"""The one walk of Spark's plans of user SQL: every node and every expression checked against `allowlist.py`.

Everything that runs SQL a person wrote (a `custom_sql` rule through `plan_guard.py`, `sharp-dagster sql` through
`cli/readonly_sql.py`) goes through `Walker`: the *parsed* plan first (so that the analyzer, which evaluates some
expressions -- LIMIT, window frames, IDENTIFIER, time travel, schema arguments -- never sees an unjudged one), then
the *analysed* plan. What the two callers differ in is only which relations they may read (`Relations`): a rule the
staged rows, its CTEs and its declared tables; the `sql` command any table of the catalogs.

A plan node's expressions are found in *all* its fields, not only in `expressions()`: Spark's `expressions()` skips
maps and tuples, so a `WINDOW w AS (...)` definition (a map of name -> window spec, plain or pipe syntax) would be
unseen in the parsed plan. `_field_expressions` follows every field through options, sequences, maps, tuples and
Catalyst's own small case classes; subquery expressions' plans are walked like the query's; lambda bodies and hint
parameters are expressions' children or node fields, so they are walked too.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from typing import Any

from sharp_dagster.dqc import allowlist as al
from sharp_dagster.dqc.sqlguard import SqlRejected

_PLAN_NODES = frozenset(al.full(n) for n in al.PLAN_NODES)
_EXPRESSIONS = frozenset(al.full(n) for n in al.EXPRESSIONS)
_BUILDERS = frozenset(al.full(n) for n in al.BUILDERS)
_TABLES = frozenset(n if n.startswith("org.") else al.full(n) for n in al.TABLE_RELATIONS)
_SUBQUERIES = frozenset(
    al.full(f"expressions.{n}") for n in ("ScalarSubquery", "ListQuery", "Exists", "LateralSubquery")
)
_WITH, _RELATION = al.full("plans.logical.UnresolvedWith"), al.full(al.UNRESOLVED_RELATION)
_TVF, _VIEW = al.full(al.UNRESOLVED_TABLE_FUNCTION), al.full(al.VIEW)
_FUNCTION = al.full("analysis.UnresolvedFunction")
_TIME_TRAVEL = al.full(al.TIME_TRAVEL)


class PlanRefused(SqlRejected):
    """A plan node off the allow-list; `node` is its class's simple name (the caller may say what to do instead)."""

    def __init__(self, message: str, line: int | None, node: str):
        super().__init__(message, line, node)
        self.node = node


def seq_items(seq) -> list[Any]:
    return [seq.apply(i) for i in range(seq.length())]


def class_of(obj) -> str:
    return obj.getClass().getName()


def line_of(obj) -> int | None:
    try:
        line = obj.origin().line()
        return int(line.get()) if line.isDefined() else None
    except Exception:  # noqa: BLE001 - an object without an origin
        return None


# ------------------------------------------------------------------------------------------------ fields
_kind_lock = threading.Lock()
_kinds: dict[str, str] = {}
_KIND_CLASSES = (
    ("plan", "org.apache.spark.sql.catalyst.plans.logical.LogicalPlan"),
    ("expr", "org.apache.spark.sql.catalyst.expressions.Expression"),
    ("option", "scala.Option"),
    ("iterable", "scala.collection.Iterable"),
    ("product", "scala.Product"),
)


def _kind(jvm, obj) -> str:
    """What a field value is to the walk: a plan, an expression, a container to look into, or other data."""
    name = class_of(obj)
    with _kind_lock:
        if name in _kinds:
            return _kinds[name]
    kind = "other"
    for candidate, cls in _KIND_CLASSES:
        if jvm.java.lang.Class.forName(cls).isInstance(obj):
            kind = candidate
            break
    # Tuples and Catalyst's small case classes (hints, specs) hold expressions; other products (types, catalog
    # tables, identifiers) are data.
    if kind == "product" and not (
        name.startswith("scala.Tuple")
        or (name.startswith(al.CATALYST) and not name.startswith(al.CATALYST + "catalog."))
    ):
        kind = "other"
    with _kind_lock:
        _kinds[name] = kind
    return kind


def field_expressions(jvm, node) -> list[Any]:
    """Every expression held by the node's fields, through options, sequences, maps, tuples and small case classes
    (not through plans: those are children, walked as nodes)."""
    found: list[Any] = []
    todo: list[Any] = []
    fields = node.productIterator()
    while fields.hasNext():
        todo.append(fields.next())
    while todo:
        value = todo.pop()
        if not hasattr(value, "getClass") or not hasattr(value, "_target_id"):
            continue  # a str, number or bool py4j converted; a Java map/list of options (strings)
        kind = _kind(jvm, value)
        if kind == "expr":
            found.append(value)
        elif kind == "option":
            if value.isDefined():
                todo.append(value.get())
        elif kind == "iterable":
            items = value.iterator()
            while items.hasNext():
                todo.append(items.next())
        elif kind == "product":
            items = value.productIterator()
            while items.hasNext():
                todo.append(items.next())
    return found


# ------------------------------------------------------------------------------------------------ relations
class Relations:
    """What relations a walk lets through. `subject` names the SQL in messages ("custom sql", "the statement")."""

    subject = "the SQL"

    def relation(self, node, parts: list[str], scope: frozenset[str]) -> None:
        raise NotImplementedError

    def time_travel(self, relation, parts: list[str]) -> None:
        raise NotImplementedError

    def analysed_leaf(self, walker: Walker, node, cls: str) -> bool:
        """True when `node` (of the analysed plan) is a relation let through and not walked into."""
        raise NotImplementedError


def relation_parts(node) -> list[str]:
    return [str(p) for p in seq_items(node.multipartIdentifier())]


def shown(parts: list[str]) -> str:
    return ".".join(f"`{p}`" if not p.replace("_", "a").isalnum() else p for p in parts)


def table_name(node, cls: str) -> str | None:
    """`db.table` of a leaf table relation of the analysed plan (None: a relation without a catalog name)."""
    try:
        if cls.endswith("DataSourceV2Relation"):
            ident = node.identifier()
            if not ident.isDefined():
                return None
            namespace = list(ident.get().namespace())
            return ".".join([*namespace, ident.get().name()])
        table = node.catalogTable() if cls.endswith("LogicalRelation") else node.tableMeta()
        if cls.endswith("LogicalRelation"):
            if not table.isDefined():
                return None
            table = table.get()
        ident = table.identifier()
        db = ident.database()
        return f"{db.get()}.{ident.table()}" if db.isDefined() else str(ident.table())
    except Exception:  # noqa: BLE001 - an unexpected shape is refused by the caller
        return None


# ------------------------------------------------------------------------------------------------ the walk
_builtin_lock = threading.Lock()
_builtin_names: dict[str, str | None] = {}


def _builtin_class(spark_jvm, name: str) -> str | None:
    """The class Spark's builtin registry has for function `name` (None: no such builtin), cached per name."""
    with _builtin_lock:
        if name in _builtin_names:
            return _builtin_names[name]
    analysis = spark_jvm.org.apache.spark.sql.catalyst
    found = analysis.analysis.FunctionRegistry.builtin().lookupFunction(
        analysis.FunctionIdentifier.apply(name)
    )
    cls = found.get().getClassName() if found.isDefined() else None
    with _builtin_lock:
        _builtin_names[name] = cls
    return cls


class Walker:
    """Walks one statement's plans against the allow-lists, relations judged by `relations`."""

    def __init__(self, jvm, relations: Relations, extra_nodes: Iterable[str] = ()):
        self.jvm = jvm
        self.relations = relations
        self.subject = relations.subject
        self.nodes = _PLAN_NODES | frozenset(extra_nodes)

    def walk(self, root, analysed: bool) -> None:
        stack: list[tuple[Any, frozenset[str]]] = [(root, frozenset())]
        first = True
        while stack:
            node, scope = stack.pop()
            cls = class_of(node)
            if analysed:
                if self.relations.analysed_leaf(self, node, cls):
                    continue
            elif self._parsed_special(node, cls, scope, stack):
                continue
            if cls not in self.nodes:
                self._refuse_node(node, cls, first)
            first = False
            for expr in field_expressions(self.jvm, node):
                self.expression(expr, scope, stack)
            for child in (*seq_items(node.children()), *seq_items(node.innerChildren())):
                stack.append((child, scope))

    def _refuse_node(self, node, cls: str, first: bool) -> None:
        name = str(node.nodeName())
        simple = cls.rsplit(".", 1)[-1]
        if first:
            message = f"{self.subject} must be exactly one query (SELECT / WITH): Spark reads it as {name}"
            if simple in al.REFUSED:
                message += f", which {al.node_reason(cls)}"
        else:
            message = f"{self.subject} may not use {name} ({al.short(cls)}): {al.node_reason(cls)}"
        raise PlanRefused(message, line_of(node), simple)

    # -- parsed plan: CTE scopes, relation names, table functions
    def _parsed_special(self, node, cls: str, scope: frozenset[str], stack: list) -> bool:
        if cls == _WITH:
            if _recursive(node):
                raise SqlRejected(f"{self.subject} may not use WITH RECURSIVE", line_of(node), "recursive")
            inner = scope
            for pair in seq_items(node.cteRelations()):
                # A CTE sees the ones defined before it (and the enclosing scopes), not itself or later ones.
                stack.append((pair._2(), inner))
                inner = inner | {str(pair._1()).lower()}
            stack.append((node.child(), inner))
            return True
        if cls == _RELATION:
            if node.isStreaming():
                raise SqlRejected(
                    f"{self.subject} may not read {shown(relation_parts(node))} as a stream",
                    line_of(node),
                    relation_parts(node)[-1],
                )
            self.relations.relation(node, relation_parts(node), scope)
            return True
        if cls == _TIME_TRAVEL:
            self._time_travel(node, scope, stack)
            return True
        if cls == _TVF:
            name = ".".join(str(p) for p in seq_items(node.name()))
            if name.lower() not in al.TABLE_FUNCTIONS:
                raise SqlRejected(
                    f"{self.subject} may not read from the table function {name}() (allowed: "
                    f"{', '.join(sorted(al.TABLE_FUNCTIONS))})",
                    line_of(node),
                    name,
                )
            for expr in field_expressions(self.jvm, node):
                self.expression(expr, scope, stack)
            return True
        return False

    def _time_travel(self, node, scope: frozenset[str], stack: list) -> None:
        """`t VERSION AS OF '2024-01-31'` / `TIMESTAMP AS OF ...`: a read of an earlier version of a table (an ODS
        table's day is its tag). Its relation is a leaf of this node, not a child: checked here as a table (a CTE
        or the staged rows have no versions); a timestamp is walked as an expression."""
        relation = node.relation()
        if class_of(relation) != _RELATION:
            name = str(relation.nodeName())
            raise SqlRejected(f"{self.subject} may not travel in time over {name}", line_of(node), name)
        self.relations.time_travel(relation, relation_parts(relation))
        timestamp = node.timestamp()
        if timestamp.isDefined():
            self.expression(timestamp.get(), scope, stack)

    # -- expressions (both plans)
    def expression(self, root, scope: frozenset[str], stack: list) -> None:
        todo = [root]
        while todo:
            expr = todo.pop()
            cls = class_of(expr)
            if cls not in _EXPRESSIONS:
                name = _pretty(expr)
                raise SqlRejected(
                    f"{self.subject} may not call {name}() ({al.short(cls)}): {al.reason(cls)}",
                    line_of(expr),
                    name,
                )
            if cls == _FUNCTION:
                self._function(expr)
            if cls in _SUBQUERIES:
                stack.append((expr.plan(), scope))
            todo.extend(seq_items(expr.children()))

    def _function(self, expr) -> None:
        parts = [str(p) for p in seq_items(expr.nameParts())]
        name = ".".join(parts).lower()  # as Spark resolves it
        cls = _builtin_class(self.jvm, parts[0].lower()) if len(parts) == 1 else None
        if cls is not None and (cls in _EXPRESSIONS or cls in _BUILDERS):
            return
        why = al.reason(cls) if cls else "it is not one of Spark's builtin functions"
        raise SqlRejected(f"{self.subject} may not call {name}(): {why}", line_of(expr), parts[-1])


def is_view(cls: str) -> bool:
    return cls == _VIEW


def is_table(cls: str) -> bool:
    return cls in _TABLES


def _recursive(node) -> bool:
    try:
        return bool(node.allowRecursion())
    except Exception:  # noqa: BLE001 - a Spark without recursive CTEs
        return False


def _pretty(expr) -> str:
    try:
        return str(expr.prettyName())
    except Exception:  # noqa: BLE001 - not every expression has a pretty name
        return str(expr.nodeName())
