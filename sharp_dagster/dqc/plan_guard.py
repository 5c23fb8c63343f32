"""The verdict on a `custom_sql` rule: Spark's own reading of its rendered SQL, walked against allow-lists.

`sqlguard.py` reads the rule with sqlglot at load, for an early message without a Spark session; but Spark runs its
own reading, and where two tokenizers disagree (comments, strings, escapes) text one took for a literal is code to
the other. So before a rule's query runs, this module judges exactly the text Spark will run, as Spark reads it:

1. parse it with the session's parser (`sessionState.sqlParser.parsePlan`, the parser `spark.sql` uses) and walk
   the *parsed* plan (`plan_walk.Walker`, the one walk `sharp-dagster sql` uses too, every field of every node): every node a query operator of `allowlist.PLAN_NODES` (no command, script, EXECUTE
   IMMEDIATE, IDENTIFIER, data source), every relation the staged rows, a CTE in scope at that point, or a table of
   the rule's `reads:` (also read at a version: `VERSION AS OF '2024-01-31'`, how an ODS table's day is read); every function a single-part builtin whose class is allowed. Only a plan that passed this
   reaches the analyzer, so analysis never resolves a path, a persistent function or a statement;
2. analyse it (Spark's analyzer against the real catalog, with the staged rows' view in place; never executed)
   and walk the *analysed* plan: every plan node, every expression (subqueries' plans included) an allowed class,
   every leaf relation the staged view, a CTE, or a declared table (an Iceberg/catalog table, not a view).

This module holds what is the rules' own: which relations a rule may read (`RuleRelations`), the verdict cache and
the session settings. Anything else is refused with a `SqlRejected` naming it and its line in the SQL. The verdict is cached per
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

from sharp_dagster.dqc import plan_walk as pw
from sharp_dagster.dqc.sqlguard import SqlRejected
from sharp_dagster.spark.java import java_session, jvm

CONFINED_CONF = {"spark.sql.runSQLOnFiles": "false", "spark.sql.variable.substitute": "false"}


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
    walker = rule_walker(jvm(spark), staged, reads)
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


# ------------------------------------------------------------------------------------------------ relations
class RuleRelations(pw.Relations):
    """A rule reads the staged rows, a CTE in scope, or a table it declares in `reads:` (also at a version)."""

    subject = "custom sql"

    def __init__(self, staged: str, reads: Iterable[str]):
        self.staged = staged.lower()
        self.tables = {r.lower() for r in reads} | ({self.staged} if "." in staged else set())
        self.declared = ", ".join(sorted({r.lower() for r in reads})) or "none"

    def relation(self, node, parts: list[str], scope: frozenset[str]) -> None:
        low = [p.lower() for p in parts]
        if not node.options().isEmpty():
            raise SqlRejected(
                f"custom sql may not read {pw.shown(parts)} as a stream or with options",
                pw.line_of(node),
                parts[-1],
            )
        if len(low) == 1 and (low[0] in scope or low[0] == self.staged):
            return
        if len(low) == 2 and ".".join(low) in self.tables:
            return
        raise SqlRejected(
            f"custom sql reads {pw.shown(parts)}, which is neither ${{table}}, a CTE in scope, nor a table the rule "
            f"declares in 'reads:' (declared: {self.declared})",
            pw.line_of(node),
            parts[-1],
        )

    def time_travel(self, relation, parts: list[str]) -> None:
        self.relation(relation, parts, frozenset())

    def analysed_leaf(self, walker: pw.Walker, node, cls: str) -> bool:
        if pw.is_view(cls):
            ident = node.desc().identifier()
            name = str(ident.table()).lower()
            if node.isTempView() and not ident.database().isDefined() and name == self.staged:
                return True
            raise SqlRejected(
                f"custom sql reads the view {ident.unquotedString()}", pw.line_of(node), str(ident.table())
            )
        if pw.is_table(cls):
            name = pw.table_name(node, cls)
            if name is not None and name.lower() in self.tables:
                return True
            raise SqlRejected(
                f"custom sql reads {name or node.nodeName()}, which is not a table the rule declares in 'reads:' "
                f"(declared: {self.declared})",
                pw.line_of(node),
                (name or "").rpartition(".")[2] or None,
            )
        return False


def rule_walker(jvm, staged: str, reads: Iterable[str]) -> pw.Walker:
    return pw.Walker(jvm, RuleRelations(staged, reads))
