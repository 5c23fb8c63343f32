"""How rules become Spark SQL: one aggregate scan per asset partition, plus a query per multi-table rule.

All rules whose template yields an aggregate expression (row/null/duplicate counts, ranges, accepted values,
regex rates, freshness, sums, the base metric of fluctuation, this side of a reconciliation) are merged into::

    SELECT <agg1> AS `r_<id1>`, <agg2> AS `r_<id2>`, ... FROM <view>

so N rules cost one pass over the partition (the DQC design's "rules of one table merged into one SQL"). Rules that join
another table (referential) or are free SQL (custom_sql) get their own query; a reconciliation against a table
adds one small query for the other side. Failing-row samples are separate queries too, run only for failed rules.

Custom SQL is checked again here against `sharp_dagster.dqc.sqlguard` before it is compiled. The compiler fills the run-time placeholders (`${table}` = the view; `${dt}`, `${partition}`,
`${DATA_RANGE_START}`, `${DATA_RANGE_END}`), so its output is exactly what Spark will run: `explain_rules`
prints it for debugging.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from sharp_dagster.dqc.context import RuleContext
from sharp_dagster.dqc.errors import ParamError
from sharp_dagster.dqc.quoting import fill, quote_ident, quote_table
from sharp_dagster.dqc.rules import Rule
from sharp_dagster.dqc.sqlguard import check_custom_sql

DEFAULT_SAMPLE_LIMIT = 10


class CompileError(ValueError):
    """A rule cannot be compiled for this run (e.g. a placeholder the context does not provide)."""


@dataclass(frozen=True)
class CompiledRule:
    rule: Rule
    alias: str | None  # column of the scan holding this rule's measurement
    query: str | None = None  # own query returning one scalar
    reference: str | None = None  # reconciliation: the other side's scalar
    failing_rows: str | None = None  # sample of failing rows' keys, run only when the rule failed
    error: str | None = None  # the rule could not be compiled; it fails with this message
    # The run-time values its SQL was filled with (the plan guard judges a custom SQL's shape once per run by them).
    values: Mapping[str, str] = field(default_factory=dict, compare=False, repr=False)


@dataclass(frozen=True)
class CompiledPlan:
    """Everything Spark runs for one asset partition."""

    asset: str
    view: str
    scan_sql: str | None
    rules: tuple[CompiledRule, ...]
    aggregates: tuple[tuple[str, str], ...] = ()  # (expression, alias) of the scan, in order

    @property
    def queries(self) -> list[str]:
        """Every query of the plan except failing-row samples, scan first."""
        out = [self.scan_sql] if self.scan_sql else []
        for c in self.rules:
            out.extend(q for q in (c.query, c.reference) if q)
        return out


def alias_of(rule: Rule) -> str:
    return f"r_{rule.id}"


def _variables(view: str, context: RuleContext, limit: int) -> dict[str, str]:
    values = context.variables()
    values["table"] = quote_table(view)
    values["limit"] = str(int(limit))
    return values


def _fill(text: str | None, values: Mapping[str, str]) -> str | None:
    if text is None:
        return None
    try:
        return fill(text, values)
    except ParamError as exc:
        name = str(exc).removeprefix("unknown placeholder ")
        raise CompileError(f"the run context does not provide {name}") from None


def compile_rules(
    rules: Iterable[Rule],
    view: str,
    context: RuleContext | Mapping[str, Any] | None = None,
    sample_limit: int = DEFAULT_SAMPLE_LIMIT,
) -> CompiledPlan:
    """Compile the rules of ONE asset over `view` (a temp view or table holding the partition's rows)."""
    ctx = RuleContext.coerce(context)
    return _compile(list(rules), view, _variables(view, ctx, sample_limit))


def scan_query(aggregates: list[tuple[str, str]], table_sql: str) -> str:
    """ONE flat `SELECT <agg> AS <alias>, ... FROM <table>` returning one row.

    count(DISTINCT k) rules (duplicate_count, distinct_count) stay in the same SELECT. Spark then groups by k
    first and carries the other aggregates' buffers through that keyed aggregation; cross-joining a separate
    sub-select per distinct key set instead was measured and was not faster (bench/bench_dqc.py), so the
    simplest form stays.
    """
    return (
        "SELECT\n  "
        + ",\n  ".join(f"{expr} AS `{alias}`" for expr, alias in aggregates)
        + f"\nFROM {table_sql}"
    )


# Distinct aggregate expressions at most which a range's grouped scan computes for every group: a rule holding a
# value of its partition has one expression per partition (30 days of a freshness rule: 30), each evaluated in every
# group; past this the partitions scan on their own.
GROUPED_MAX_AGGREGATES = 256


def grouped_scan_query(
    aggregates: Sequence[Sequence[tuple[str, str]]], table_sql: str, group_by: list[str]
) -> tuple[str, dict[str, str]] | None:
    """The scan of several partitions at once, from each partition's `(expression, alias)` aggregates: `SELECT
    <group cols>, <expr> AS <name>, ... FROM <table> GROUP BY <group cols>`, one row per partition holding rows, with
    every distinct expression once (an aggregate holding its partition's own value, such as a freshness rule's
    `DATA_RANGE_END`, is one expression per partition, computed for every group and read by its own partition's
    only), and `{expression: its column name}`. None when there is no aggregate or more than
    `GROUPED_MAX_AGGREGATES` distinct ones.

    >>> query, named = grouped_scan_query([[("count(1)", "r_n")], [("count(1)", "r_n")]], "`v`", ["dt"])
    >>> print(query)
    SELECT
      `dt`,
      count(1) AS `__g0`
    FROM `v`
    GROUP BY `dt`
    """
    expressions = list(dict.fromkeys(e for found in aggregates for e, _ in found))
    if not expressions or len(expressions) > GROUPED_MAX_AGGREGATES:
        return None
    named = {e: f"__g{i}" for i, e in enumerate(expressions)}
    cols = ", ".join(quote_ident(c) for c in group_by)
    body = ",\n  ".join(f"{e} AS `{named[e]}`" for e in expressions)
    return f"SELECT\n  {cols},\n  {body}\nFROM {table_sql}\nGROUP BY {cols}", named


def _compile(rules: list[Rule], view: str, base_values: Mapping[str, str]) -> CompiledPlan:
    assets = {r.asset for r in rules}
    if len(assets) > 1:
        raise CompileError(f"compile_rules takes the rules of one asset, got {', '.join(sorted(assets))}")
    compiled: list[CompiledRule] = []
    select: list[tuple[str, str]] = []
    for rule in rules:
        values = dict(base_values)
        if rule.sample_limit is not None:
            values["limit"] = str(rule.sample_limit)
        try:
            _recheck(rule)
            scan = _fill(rule.sql.scan, values)
            item = CompiledRule(
                rule=rule,
                alias=alias_of(rule) if scan else None,
                query=_fill(rule.sql.query, values),
                reference=_fill(rule.sql.reference, values) if _uses_reference(rule) else None,
                failing_rows=_fill(rule.sql.failing_rows, values),
                values=values,
            )
        except CompileError as exc:
            compiled.append(CompiledRule(rule=rule, alias=None, error=f"cannot compile: {exc}"))
            continue
        if scan:
            select.append((scan, item.alias))
        compiled.append(item)
    scan_sql = None
    if select:
        scan_sql = scan_query(select, base_values["table"])
    return CompiledPlan(
        asset=next(iter(assets), ""),
        view=view,
        scan_sql=scan_sql,
        rules=tuple(compiled),
        aggregates=tuple(select),
    )


def _recheck(rule: Rule) -> None:
    """A custom SQL is checked again right before it runs (`load_rules` did it once): a `Rule` built any other
    way, or changed after loading, still cannot reach Spark with a JVM, file or undeclared-table access."""
    if rule.template != "custom_sql":
        return
    try:
        check_custom_sql(str(rule.params.get("sql", "")), rule.reads)
    except ParamError as exc:
        raise CompileError(f"custom sql refused: {exc}") from None


def _uses_reference(rule: Rule) -> bool:
    return rule.tmpl.mode == "reconcile" and rule.params.get("against", "table") == "table"


def explain_rules(
    rules: Iterable[Rule],
    view: str = "partition_view",
    context: RuleContext | Mapping[str, Any] | None = None,
    sample_limit: int = DEFAULT_SAMPLE_LIMIT,
) -> str:
    """The SQL the runner would issue for these rules (grouped per asset), as readable text.

    Without a context, run-time values show as `<dt>`, `<DATA_RANGE_END>`, ... (not runnable, but readable).
    """
    ctx = RuleContext.coerce(context)
    values = {
        "dt": "<dt>",
        "partition": "<partition>",
        "DATA_RANGE_START": "<DATA_RANGE_START>",
        "DATA_RANGE_END": "<DATA_RANGE_END>",
        "_window_start": "<DATA_RANGE_START>",
        "_window_end": "<DATA_RANGE_END>",
    }
    values.update(_variables(view, ctx, sample_limit))
    by_asset: dict[str, list[Rule]] = {}
    for r in rules:
        by_asset.setdefault(r.asset, []).append(r)
    out: list[str] = []
    for asset, group in by_asset.items():
        plan = _compile(group, view, values)
        out.append(f"-- asset {asset}: {len(group)} rule(s)")
        if plan.scan_sql:
            names = ", ".join(c.rule.id for c in plan.rules if c.alias)
            out.append(f"-- one scan for: {names}")
            out.append(plan.scan_sql + ";")
        for c in plan.rules:
            if c.error:
                out.append(f"-- {c.rule.id}: {c.error}")
            for label, sql in (
                ("query", c.query),
                ("reference", c.reference),
                ("failing rows", c.failing_rows),
            ):
                if sql:
                    out.append(f"-- {c.rule.id} ({label}):\n{sql};")
        out.append("")
    return "\n".join(out)
