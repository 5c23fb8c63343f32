"""`sharp-dagster sql` runs queries only: the statement is judged by Spark's own parser before anything runs.

The text is parsed with the session's parser (`sessionState.sqlParser.parsePlan`), and the plan that runs is that
same plan (`Dataset.ofRows`): the text is never parsed a second time. A query (SELECT, WITH, VALUES, TABLE, pipe
syntax, set operations, joins, ...) goes through `dqc/plan_walk.py`, the walk the `custom_sql` rules go through:
its parsed plan and then its analysed plan (never executed), every field of every node (window definitions, hints,
lambda bodies, subqueries), against the rules' allow-lists of `dqc/allowlist.py` -- only the relations differ: the
operator may read any table or view of the catalogs, at any version. So the functions that call a Java method
(`reflect`, `java_method`), run the XML parser (`from_xml`, `xpath_*`, `schema_of_xml`: URLs and files),
read files (`read_files`, `input_file_name`) or raise errors carrying any text are refused here as in a rule.
SHOW and DESCRIBE commands, and EXPLAIN / DESCRIBE QUERY of a query, run too. Anything else is refused with the
command that does it properly: writes and DDL change published tables without the job log knowing (the next
downstream run then reads a partition that is gone), `CALL` runs Iceberg procedures such as
`rollback_to_snapshot`, and session commands (SET, USE, ADD JAR, CACHE, ...) have no effect on a one-query process
or load code. A node Spark adds in a later version is refused until it is judged and listed.

While the query runs, `spark.sql.runSQLOnFiles` is off (no ``parquet.`/any/path` `` relation reaches a file beside
the warehouse) and `${...}` variable substitution is off (the parser reads the text as written).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from sharp_dagster.cli.main import CliError
from sharp_dagster.dqc import plan_walk as pw
from sharp_dagster.dqc.sqlguard import SqlRejected
from sharp_dagster.spark.java import java_session, jvm

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


class AnyTable(pw.Relations):
    """The operator may read any table or view of the catalogs (by name: paths are off, `runSQLOnFiles`), at any
    version; a view's own plan is walked like the query's."""

    subject = "the statement"

    def relation(self, node, parts: list[str], scope: frozenset[str]) -> None:
        return None

    def time_travel(self, relation, parts: list[str]) -> None:
        return None

    def analysed_leaf(self, walker: pw.Walker, node, cls: str) -> bool:
        if pw.is_view(cls):
            walker.walk(node.child(), analysed=True)
            return True
        if pw.is_table(cls):
            if pw.table_name(node, cls) is None:
                raise SqlRejected(
                    f"the statement reads {node.nodeName()} by path, not a table of the catalog"
                )
            return True
        return False


def _advice(kind: str) -> str:
    return next((a for words, a in _ADVICE if any(w in kind.lower() for w in words)), _DEFAULT_ADVICE)


def _not_a_query(kind: str) -> str:
    return f"`sql` is read-only and this statement is not a query ({kind}): {_advice(kind)}"


def _metadata_refusal(walker: pw.Walker, plan: Any) -> None:
    """A SHOW / DESCRIBE command: every node one of them or the names they take, every expression allowed."""
    stack = [plan]
    while stack:
        node = stack.pop()
        kind = node.getClass().getSimpleName()
        if kind not in METADATA_NODES:
            raise pw.PlanRefused(_not_a_query(kind), None, kind)
        subqueries: list[tuple[Any, frozenset[str]]] = []
        for expr in pw.field_expressions(walker.jvm, node):
            walker.expression(expr, frozenset(), subqueries)
        if subqueries:
            raise SqlRejected("a SHOW or DESCRIBE command may not hold a subquery")
        stack.extend(pw.seq_items(node.children()))


def judge_plan(spark: Any, plan: Any) -> None:
    """CliError unless `plan` (a parsed, unresolved Spark plan) is one read-only query, SHOW, DESCRIBE or EXPLAIN of
    one: the query walked by `dqc/plan_walk.py` against the rules' allow-lists, parsed and then analysed (never
    executed); a relation may be any table of the catalogs."""
    name = plan.getClass().getSimpleName()
    if name in WRAPPERS:
        return judge_plan(spark, getattr(plan, WRAPPERS[name])())
    walker = pw.Walker(jvm(spark), AnyTable())
    try:
        if name in METADATA_NODES:
            _metadata_refusal(walker, plan)
            return None
        walker.walk(plan, analysed=False)
        mode = jvm(spark).org.apache.spark.sql.execution.CommandExecutionMode.SKIP()
        try:
            analysed = java_session(spark).sessionState().executePlan(plan, mode).analyzed()
        except Exception as exc:  # noqa: BLE001 - a Py4J error carrying Spark's AnalysisException
            raise CliError(f"SQL failed: {sql_error(exc)}") from None
        walker.walk(analysed, analysed=True)
    except pw.PlanRefused as exc:
        raise CliError(_not_a_query(exc.node)) from None
    except SqlRejected as exc:
        raise CliError(f"`sql` is read-only: {exc}") from None
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
    judge_plan(spark, plan)
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
