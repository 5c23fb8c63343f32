"""The verdict on a `custom_sql` rule: Spark's own reading of its rendered SQL, walked against allow-lists.

`sqlguard.py` reads the rule with sqlglot at load, for an early message without a Spark session; but Spark runs its
own reading, and where two tokenizers disagree (comments, strings, escapes) text one took for a literal is code to
the other. So before a rule's query runs, this module judges exactly the text Spark will run, as Spark reads it:

1. parse it with the session's parser (`sessionState.sqlParser.parsePlan`, the parser `spark.sql` uses) and walk
   the *parsed* plan: every node a query operator of `allowlist.PLAN_NODES` (no command, script, EXECUTE
   IMMEDIATE, IDENTIFIER, data source), every relation the staged rows, a CTE in scope at that point, or a table of
   the rule's `reads:` (also read at a version: `VERSION AS OF '2024-01-31'`, how an ODS table's day is read); every function a single-part builtin whose class is allowed. Only a plan that passed this
   reaches the analyzer, so analysis never resolves a path, a persistent function or a statement;
2. analyse it (Spark's analyzer against the real catalog, with the staged rows' view in place; never executed)
   and walk the *analysed* plan: every plan node, every expression (subqueries' plans included) an allowed class,
   every leaf relation the staged view, a CTE, or a declared table (an Iceberg/catalog table, not a view).

Anything else is refused with a `SqlRejected` naming it and its line in the SQL. The verdict is cached per
rendered SQL (the staged view's random name taken out) and declared tables, so each rendered text is judged once per
run; `plan_shape.py` judges a rule once per run, not once per partition, where its shape allows that soundly.

Defence in depth: `confined(spark)` sets `spark.sql.runSQLOnFiles=false` (no `parquet.`/path`` relations) and
`spark.sql.variable.substitute=false` (no `${...}` expanded by Spark) while rules are judged and run, and restores
them after. What remains trusted: Spark's parser and analyzer (that they read the text the way it runs), the
allow-listed functions being pure (decided per class in `allowlist.py`), the tables declared in `reads:` (a rule may
read all of them), and the staged rows' own plan (built by the pipeline, not by the rule).
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any

from sharp_dagster.dqc import allowlist as al
from sharp_dagster.dqc.sqlguard import SqlRejected
from sharp_dagster.spark.java import java_session, jvm

CONFINED_CONF = {"spark.sql.runSQLOnFiles": "false", "spark.sql.variable.substitute": "false"}
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


class NotAnalysed(SqlRejected):
    """Spark could not analyse the SQL (an unknown column, a missing table): not a verdict, never cached."""


# ------------------------------------------------------------------------------------------------ confinement
_conf_lock = threading.Lock()
_conf_state: dict[str, tuple[int, dict[str, str | None]]] = {}


@contextmanager
def confined(spark) -> Iterator[None]:
    """`CONFINED_CONF` on the session while the block runs, restored by the last of concurrent blocks to leave
    (rules of several assets run in threads sharing the session)."""
    key = str(
        java_session(spark).sessionUUID()
    )  # one entry per JVM session, whatever Python wrapper holds it
    with _conf_lock:
        depth, saved = _conf_state.get(key, (0, {}))
        if depth == 0:
            jconf = java_session(spark).conf()
            saved = {k: (spark.conf.get(k) if jconf.contains(k) else None) for k in CONFINED_CONF}
            for k, v in CONFINED_CONF.items():
                spark.conf.set(k, v)
        _conf_state[key] = (depth + 1, saved)
    try:
        yield
    finally:
        with _conf_lock:
            depth, saved = _conf_state[key]
            if depth == 1:
                del _conf_state[key]
                for k, v in saved.items():
                    if v is None:
                        spark.conf.unset(k)
                    else:
                        spark.conf.set(k, v)
            else:
                _conf_state[key] = (depth - 1, saved)


# ------------------------------------------------------------------------------------------------ verdicts
_verdicts: dict[tuple[str, str, bool, tuple[str, ...]], SqlRejected | None] = {}
_verdict_lock = threading.Lock()
_MAX_VERDICTS = 4096


def check_rendered(spark, sql: str, staged: str, reads: Iterable[str] = ()) -> None:
    """Judge `sql` (a rule's query, placeholders filled, `${table}` = the `staged` view) once; raise `SqlRejected`
    (a `NotAnalysed` when Spark cannot analyse it) unless Spark's plan of it stays inside the allow-lists."""
    quoted = ".".join(f"`{p}`" for p in staged.split("."))
    # Per session too: a session's temporary functions and views are part of what its analyzer resolves.
    session = str(java_session(spark).sessionUUID())
    key = (session, sql.replace(quoted, "${table}"), "." in staged, tuple(sorted({r.lower() for r in reads})))
    with _verdict_lock:
        if key in _verdicts:
            found = _verdicts[key]
            if found is not None:
                raise found
            return
    try:
        judge(spark, sql, staged, reads)
    except NotAnalysed:
        raise
    except SqlRejected as exc:
        _remember(key, exc)
        raise
    _remember(key, None)


def _remember(key, verdict: SqlRejected | None) -> None:
    with _verdict_lock:
        if len(_verdicts) >= _MAX_VERDICTS:
            _verdicts.clear()
        _verdicts[key] = verdict


def judge(spark, sql: str, staged: str, reads: Iterable[str] = ()) -> None:
    """Parse, walk, analyse, walk again (see the module doc); nothing of `sql` is executed. Anything that goes
    wrong on the way (a plan of a shape the walk does not know) refuses the rule: the guard fails closed."""
    try:
        _judge(spark, sql, staged, reads)
    except SqlRejected:
        raise
    except Exception as exc:  # noqa: BLE001 - py4j errors of an unexpected plan shape
        raise SqlRejected(
            f"custom sql could not be judged: {type(exc).__name__}: {_first_line(exc)}"
        ) from None


def _judge(spark, sql: str, staged: str, reads: Iterable[str]) -> None:
    walker = _Walker(jvm(spark), staged, reads)
    with confined(spark):
        state = java_session(spark).sessionState()
        try:
            parsed = state.sqlParser().parsePlan(sql)
        except Exception as exc:  # noqa: BLE001 - Spark's ParseException, through py4j
            raise SqlRejected(f"custom sql does not parse in Spark: {_first_line(exc)}") from None
        walker.walk(parsed, analysed=False)
        mode = jvm(spark).org.apache.spark.sql.execution.CommandExecutionMode.SKIP()
        try:
            analysed = state.executePlan(parsed, mode).analyzed()
        except Exception as exc:  # noqa: BLE001 - Spark's AnalysisException, through py4j
            raise NotAnalysed(f"custom sql does not analyse in Spark: {_first_line(exc)}") from None
        walker.walk(analysed, analysed=True)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return (text[0] if text else type(exc).__name__)[:300]


# ------------------------------------------------------------------------------------------------ the walk
def seq_items(seq) -> list[Any]:
    return [seq.apply(i) for i in range(seq.length())]


def class_of(obj) -> str:
    return obj.getClass().getName()


def _line(obj) -> int | None:
    try:
        line = obj.origin().line()
        return int(line.get()) if line.isDefined() else None
    except Exception:  # noqa: BLE001 - an object without an origin
        return None


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


class _Walker:
    def __init__(self, jvm, staged: str, reads: Iterable[str]):
        self.jvm = jvm
        self.staged = staged.lower()
        self.tables = {r.lower() for r in reads} | ({self.staged} if "." in staged else set())
        self.declared = ", ".join(sorted({r.lower() for r in reads})) or "none"

    def walk(self, root, analysed: bool) -> None:
        stack: list[tuple[Any, frozenset[str]]] = [(root, frozenset())]
        first = True
        while stack:
            node, scope = stack.pop()
            cls = class_of(node)
            if analysed:
                if self._analysed_leaf(node, cls):
                    continue
            elif self._parsed_special(node, cls, scope, stack):
                continue
            if cls not in _PLAN_NODES:
                name = str(node.nodeName())
                if first:
                    message = (
                        f"custom sql must be exactly one query (SELECT / WITH): Spark reads it as {name}"
                    )
                    if cls.rsplit(".", 1)[-1] in al.REFUSED:
                        message += f", which {al.node_reason(cls)}"
                else:
                    message = f"custom sql may not use {name} ({al.short(cls)}): {al.node_reason(cls)}"
                raise SqlRejected(message, _line(node), name)
            first = False
            for expr in seq_items(node.expressions()):
                self._expression(expr, scope, stack, analysed)
            for child in (*seq_items(node.children()), *seq_items(node.innerChildren())):
                stack.append((child, scope))

    # -- parsed plan: CTE scopes, relation names, table functions
    def _parsed_special(self, node, cls: str, scope: frozenset[str], stack: list) -> bool:
        if cls == _WITH:
            if _recursive(node):
                raise SqlRejected("custom sql may not use WITH RECURSIVE", _line(node), "recursive")
            inner = scope
            for pair in seq_items(node.cteRelations()):
                # A CTE sees the ones defined before it (and the enclosing scopes), not itself or later ones.
                stack.append((pair._2(), inner))
                inner = inner | {str(pair._1()).lower()}
            stack.append((node.child(), inner))
            return True
        if cls == _RELATION:
            self._relation(node, scope)
            return True
        if cls == _TIME_TRAVEL:
            self._time_travel(node, scope, stack)
            return True
        if cls == _TVF:
            name = ".".join(str(p) for p in seq_items(node.name()))
            if name.lower() not in al.TABLE_FUNCTIONS:
                raise SqlRejected(
                    f"custom sql may not read from the table function {name}() (allowed: "
                    f"{', '.join(sorted(al.TABLE_FUNCTIONS))})",
                    _line(node),
                    name,
                )
            for expr in seq_items(node.expressions()):
                self._expression(expr, scope, stack, False)
            return True
        return False

    def _relation(self, node, scope: frozenset[str]) -> None:
        parts = [str(p) for p in seq_items(node.multipartIdentifier())]
        shown = ".".join(f"`{p}`" if not p.replace("_", "a").isalnum() else p for p in parts)
        low = [p.lower() for p in parts]
        if node.isStreaming() or not node.options().isEmpty():
            raise SqlRejected(
                f"custom sql may not read {shown} as a stream or with options", _line(node), parts[-1]
            )
        if len(low) == 1 and (low[0] in scope or low[0] == self.staged):
            return
        if len(low) == 2 and ".".join(low) in self.tables:
            return
        raise SqlRejected(
            f"custom sql reads {shown}, which is neither ${{table}}, a CTE in scope, nor a table the rule declares "
            f"in 'reads:' (declared: {self.declared})",
            _line(node),
            parts[-1],
        )

    def _time_travel(self, node, scope: frozenset[str], stack: list) -> None:
        """`t VERSION AS OF '2024-01-31'` / `TIMESTAMP AS OF ...`: a read of an earlier version of a declared table
        (an ODS table's day is its tag). Its relation is a leaf of this node, not a child: checked here, as a
        declared table only (a CTE or the staged rows have no versions); a timestamp is walked as an expression."""
        relation = node.relation()
        if class_of(relation) != _RELATION:
            name = str(relation.nodeName())
            raise SqlRejected(f"custom sql may not travel in time over {name}", _line(node), name)
        self._relation(relation, frozenset())
        timestamp = node.timestamp()
        if timestamp.isDefined():
            self._expression(timestamp.get(), scope, stack, False)

    # -- analysed plan: leaf relations
    def _analysed_leaf(self, node, cls: str) -> bool:
        if cls == _VIEW:
            ident = node.desc().identifier()
            name = str(ident.table()).lower()
            if node.isTempView() and not ident.database().isDefined() and name == self.staged:
                return True
            raise SqlRejected(
                f"custom sql reads the view {ident.unquotedString()}", _line(node), str(ident.table())
            )
        if cls in _TABLES:
            name = _table_name(node, cls)
            if name is not None and name.lower() in self.tables:
                return True
            raise SqlRejected(
                f"custom sql reads {name or node.nodeName()}, which is not a table the rule declares in 'reads:' "
                f"(declared: {self.declared})",
                _line(node),
                (name or "").rpartition(".")[2] or None,
            )
        return False

    # -- expressions (both plans)
    def _expression(self, root, scope: frozenset[str], stack: list, analysed: bool) -> None:
        todo = [root]
        while todo:
            expr = todo.pop()
            cls = class_of(expr)
            if cls not in _EXPRESSIONS:
                name = _pretty(expr)
                raise SqlRejected(
                    f"custom sql may not call {name}() ({al.short(cls)}): {al.reason(cls)}", _line(expr), name
                )
            if cls == _FUNCTION:
                self._function(expr)
            if cls in _SUBQUERIES:
                stack.append((expr.plan(), scope))
            todo.extend(seq_items(expr.children()))

    def _function(self, expr) -> None:
        parts = [str(p) for p in seq_items(expr.nameParts())]
        name = ".".join(parts)
        cls = _builtin_class(self.jvm, parts[0].lower()) if len(parts) == 1 else None
        if cls is not None and (cls in _EXPRESSIONS or cls in _BUILDERS):
            return
        why = al.reason(cls) if cls else "it is not one of Spark's builtin functions"
        raise SqlRejected(f"custom sql may not call {name}(): {why}", _line(expr), parts[-1])


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


def _table_name(node, cls: str) -> str | None:
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
