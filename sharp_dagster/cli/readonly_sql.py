"""`sharp-dagster sql` runs queries only: the statement is judged by Spark's own parser before anything runs.

The text is parsed with the session's parser (`sessionState.sqlParser.parsePlan`), the parsed plan is walked node
by node, subqueries and CTE bodies included, and the plan that runs is that same plan (`Dataset.ofRows`): the text
is never parsed a second time. Every node must be on an allow-list: the operators of a query (SELECT, WITH, VALUES, TABLE, set
operations, joins, ...), SHOW and DESCRIBE commands, and EXPLAIN / DESCRIBE QUERY of such a query. Anything else is
refused with the command that does it properly: writes and DDL change published tables without the job log
knowing (the next downstream run then reads a partition that is gone), `CALL` runs Iceberg procedures such as
`rollback_to_snapshot`, and session commands (SET, USE, ADD JAR, CACHE, ...) have no effect on a one-query process
or load code. A node Spark adds in a later version is refused until it is judged and listed here. The functions
that call a Java method by name (`reflect`, `java_method`, `try_reflect`) are refused too: through them a query
could do whatever a static method does.

While the query runs, `spark.sql.runSQLOnFiles` is off (no ``parquet.`/any/path` `` relation reaches a file beside
the warehouse) and `${...}` variable substitution is off (the parser reads the text as written).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from sharp_dagster.cli.main import CliError
from sharp_dagster.spark.java import java_session, jvm

# The logical operators Spark's parser produces for a query (pyspark 4.x names, `getSimpleName()` of the class).
QUERY_NODES = frozenset(
    {
        "Project", "Filter", "Aggregate", "UnresolvedHaving", "Sort", "GlobalLimit", "LocalLimit", "Offset",
        "Tail", "Distinct", "Deduplicate", "Union", "Intersect", "Except", "Join", "LateralJoin", "Generate",
        "SubqueryAlias", "UnresolvedSubqueryColumnAliases", "UnresolvedRelation", "RelationTimeTravel",
        "UnresolvedInlineTable", "LocalRelation", "OneRowRelation", "UnresolvedWith", "WithCTE",
        "CTERelationDef", "CTERelationRef", "Sample", "Pivot", "Unpivot", "UnresolvedHint",
        "RepartitionByExpression", "Repartition", "RebalancePartitions", "WithWindowDefinition", "Window",
        "UnresolvedTableValuedFunction", "UnresolvedTVFAliases", "PipeOperator", "Range", "Expand",
    }
)  # fmt: skip
# SHOW and DESCRIBE commands, and the unresolved names they take as children.
METADATA_NODES = frozenset(
    {
        "ShowTables", "ShowTablesExtended", "ShowViews", "ShowNamespacesCommand", "ShowColumns",
        "ShowCreateTable", "ShowTableProperties", "ShowPartitions", "ShowFunctions", "ShowCatalogsCommand",
        "ShowCurrentNamespaceCommand", "DescribeRelation", "DescribeColumn", "DescribeNamespace",
        "DescribeFunction", "CurrentNamespace$", "UnresolvedNamespace", "UnresolvedTableOrView",
        "UnresolvedTable", "UnresolvedFunctionName",
    }
)  # fmt: skip
# Functions that call any static Java method by name: a query using them could do anything a method can.
JAVA_CALLS = frozenset({"reflect", "java_method", "try_reflect"})
# Commands that wrap a query: allowed when the query they wrap is (the wrapped plan is not one of their children).
WRAPPERS = {"ExplainCommand": "logicalPlan", "DescribeQueryCommand": "plan"}

# Where to go instead, by what the refused statement does (lower-cased words of the node's class name; first hit
# wins, so session commands come before the DDL words that `SetCommand` or `AddJarsCommand` would also match).
_SESSION = "session settings come from SHARP_SPARK_CONF; `sql` runs one query in a session of its own"
_ROLLBACK = (
    "undo a table's publishes with `sharp-dagster table rollback TABLE --to SNAPSHOT_ID` "
    "(it records them in the job log)"
)
_ROWS = (
    "a table's rows change through a SQL asset under sharp_dagster/warehouse/ (re-run periods with "
    "`sharp-dagster log rerun`; undo a publish with `sharp-dagster table rollback`)"
)
_DDL = (
    "tables are defined by the SQL assets under sharp_dagster/warehouse/ (add or edit one; undo a publish "
    "with `sharp-dagster table rollback`)"
)
_ADVICE = [
    (
        ("setcommand", "setcatalog", "cache", "refresh", "clear", "variable", "jar", "addfiles", "archive"),
        _SESSION,
    ),
    (("call", "procedure"), _ROLLBACK),
    (("insert", "delete", "update", "merge", "overwrite", "appenddata", "asselect"), _ROWS),
    (
        ("create", "replace", "drop", "alter", "add", "rename", "truncate", "repair", "analyze", "comment"),
        _DDL,
    ),
]
_DEFAULT_ADVICE = "`sql` runs one query (SELECT/WITH/VALUES/TABLE, SHOW, DESCRIBE, EXPLAIN of a query)"


def _seq(scala_seq: Any) -> list[Any]:
    return [scala_seq.apply(i) for i in range(scala_seq.size())]


def _nodes(plan: Any) -> Iterator[Any]:
    """The plan's nodes, depth first: children, inner children (CTE bodies) and subquery plans."""
    stack = [plan]
    while stack:
        node = stack.pop()
        yield node
        stack.extend(_seq(node.children()))
        stack.extend(_seq(node.innerChildren()))
        stack.extend(_seq(node.subqueries()))


def _calls_java(node: Any) -> str | None:
    """The first function of the node's expressions that calls a Java method by name (a read-only query cannot
    judge what that method does), or whose name is computed (`IDENTIFIER(...)(...)`) and so cannot be judged."""
    stack = _seq(node.expressions())
    while stack:
        expr = stack.pop()
        kind = expr.getClass().getSimpleName()
        if kind == "ExpressionWithUnresolvedIdentifier":
            return "IDENTIFIER(...) as a function name"
        if kind == "UnresolvedFunction":
            name = str(_seq(expr.nameParts())[-1]).lower()
            if name in JAVA_CALLS:
                return name
        stack.extend(_seq(expr.children()))
    return None


def refusal(plan: Any) -> str | None:
    """Why `plan` (a parsed, unresolved Spark plan) is not a read-only query; None when it is one."""
    name = plan.getClass().getSimpleName()
    if name in WRAPPERS:
        return refusal(getattr(plan, WRAPPERS[name])())
    allowed = METADATA_NODES if name in METADATA_NODES else QUERY_NODES
    for node in _nodes(plan):
        kind = node.getClass().getSimpleName()
        if kind not in allowed:
            advice = next(
                (a for words, a in _ADVICE if any(w in kind.lower() for w in words)), _DEFAULT_ADVICE
            )
            return f"`sql` is read-only and this statement is not a query ({kind}): {advice}"
        java = _calls_java(node)
        if java:
            return f"`sql` is read-only and {java} runs a Java method of its choosing: {_DEFAULT_ADVICE}"
    return None


def parse_plan(spark: Any, text: str) -> Any:
    return java_session(spark).sessionState().sqlParser().parsePlan(text)


@contextmanager
def read_only_conf(spark: Any) -> Iterator[None]:
    """The session's settings for judging and running one statement, put back afterwards (a test's or an embedding
    program's session outlives the command)."""
    wanted = {"spark.sql.runSQLOnFiles": "false", "spark.sql.variable.substitute": "false"}
    before = {key: spark.conf.get(key, None) for key in wanted}
    for key, value in wanted.items():
        spark.conf.set(key, value)
    try:
        yield
    finally:
        for key, value in before.items():
            if value is None:
                spark.conf.unset(key)
            else:
                spark.conf.set(key, value)


def judged_query(spark: Any, text: str) -> Any:
    """The DataFrame of `text` if it is one read-only query, else CliError (a parse error is Spark's own message).

    The plan that runs is the plan that was judged (`Dataset.ofRows` of it): `spark.sql(text)` would parse the text
    a second time, by its script parser when SQL scripting is on."""
    from pyspark.sql import DataFrame

    plan = check_read_only(spark, text)
    try:  # analysis (and SHOW/DESCRIBE's execution) happens here
        jdf = jvm(spark).org.apache.spark.sql.classic.Dataset.ofRows(java_session(spark), plan)
    except Exception as exc:  # noqa: BLE001 - a Py4J error carrying Spark's AnalysisException
        raise CliError(f"SQL failed: {sql_error(exc)}") from None
    return DataFrame(jdf, spark)


def check_read_only(spark: Any, text: str) -> Any:
    """The parsed plan of `text`; CliError unless it is one query (parse errors are Spark's own message)."""
    try:
        plan = parse_plan(spark, text)
    except Exception as exc:  # noqa: BLE001 - a Py4J error carrying Spark's ParseException
        raise CliError(f"SQL failed: {sql_error(exc)}") from None
    why = refusal(plan)
    if why:
        raise CliError(why)
    return plan


def sql_error(exc: BaseException) -> str:
    """The problem in one line or a few: Spark's own message, without the Java stack trace."""
    from sharp_dagster.spark.iceberg_base import java_error

    kind, message = java_error(exc)
    text = message if getattr(exc, "java_exception", None) is not None else str(exc)
    keep = []
    for line in text.strip().splitlines():
        if line.startswith(("\tat ", "    at ", "JVM stacktrace")) or line.strip().startswith("at "):
            break
        keep.append(line.rstrip())
        if "SQLSTATE:" in line:  # the end of Spark's message; the unresolved plan follows
            keep[-1] = keep[-1].rstrip(";")
            break
    text = "\n".join(keep).strip() or kind
    return text if len(text) <= 2000 else text[:1997] + "..."
