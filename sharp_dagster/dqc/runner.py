"""Running rules on Spark: one asset partition (`run`), a range of them (`run_range`: one grouped scan), or several
assets in parallel (`run_many`). The caller stages the new partition, runs the STRONG rules before publishing and
raises on `blocking_failures`, publishes, then reports the WEAK rules. Per asset partition the runner issues:

1. one aggregate scan for every single-table rule (see `compiler.py`); when it fails, each rule's aggregate alone,
   so a rule that cannot run fails by itself with Spark's root cause and never takes a strong rule down with it
   (a weak rule never blocks);
2. one query per referential / custom_sql rule and per table reconciliation's other side;
3. for failed rules only, one small query sampling the `sample_key` of failing rows.

Results carry the rule's version hash and are saved to `dqc_result` when a store is given (fluctuation rules
read their history from it). `run_many` runs different assets in threads sharing the one SparkSession, as
the DQC design runs different tables' SQL in parallel.
"""

from __future__ import annotations

import dataclasses
import json
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from typing import Any, Protocol

from pyspark.sql import DataFrame, SparkSession

from sharp_dagster.dqc.compiler import (
    DEFAULT_SAMPLE_LIMIT,
    CompiledPlan,
    CompiledRule,
    compile_rules,
    grouped_scan_query,
    scan_query,
)
from sharp_dagster.dqc.context import RuleContext
from sharp_dagster.dqc.evaluate import RuleResult, Verdict, judge, judge_error, quality_score
from sharp_dagster.dqc.plan_guard import confined
from sharp_dagster.dqc.plan_shape import check_rule_query
from sharp_dagster.dqc.quoting import IDENTIFIER, quote_table
from sharp_dagster.dqc.rules import Rule, locate
from sharp_dagster.dqc.sqlguard import SqlRejected
from sharp_dagster.dqc.store import DqcStore, keys_to_json

__all__ = [
    "BlockingFailure",
    "RuleRunner",
    "alert_failures",
    "blocking_failures",
    "quality_score",
    "raise_for_blocking",
    "schema_of",
]


class AlertSinkLike(Protocol):
    def send(self, kind: str, dedup_key: str, title: str, details: Mapping[str, Any]) -> bool: ...


class BlockingFailure(RuntimeError):
    """Strong rules failed: the staged partition must not be published. `results` holds the failures."""

    def __init__(self, results: list[RuleResult]):
        self.results = results
        lines = "; ".join(r.message for r in results[:5])
        more = f" (and {len(results) - 5} more)" if len(results) > 5 else ""
        super().__init__(f"{len(results)} strong data-quality rule(s) failed: {lines}{more}")


def blocking_failures(results: Iterable[RuleResult]) -> list[RuleResult]:
    """Failed strong rules (a downgraded result is a warning and never blocks)."""
    return [r for r in results if r.blocking]


def failed_rule_names(results: Iterable[RuleResult]) -> str:
    """The failed strong rules' ids, as run messages and the job log name them."""
    return ", ".join(r.rule_id for r in blocking_failures(results))


def raise_for_blocking(results: Iterable[RuleResult]) -> None:
    failed = blocking_failures(results)
    if failed:
        raise BlockingFailure(failed)


def schema_of(df: DataFrame) -> dict[str, str]:
    """{column: Spark type} of a DataFrame, in the form `load_rules` takes for an asset's schema."""
    return {f.name: f.dataType.simpleString() for f in df.schema.fields}


def _now() -> datetime:
    return datetime.now(UTC).replace(tzinfo=None)


def _short(exc: BaseException) -> str:
    """The error in one line: for an error from the JVM, Spark's root cause (Py4J's own text names only the
    method it called, e.g. `collectToPython`)."""
    java = getattr(exc, "java_exception", None) or getattr(exc, "_origin", None)
    kind, text = type(exc).__name__, str(exc)
    if java is not None:
        try:
            for _ in range(32):  # the cause chain, to its root
                cause = java.getCause()
                if cause is None:
                    break
                java = cause
            kind, text = str(java.getClass().getName()), str(java.getMessage() or "")
        except Exception:  # noqa: BLE001 - the JVM gone: Python's text is all there is
            pass
    lines = text.strip().splitlines()
    first = lines[0] if lines else kind
    return f"{kind}: {first[:500]}"


class RuleRunner:
    """Evaluates rules with one SparkSession; `store` (a `DqcStore`) receives every result when given.

    `on_query` is called with every SQL text sent to Spark (debugging, tests counting scans).
    """

    def __init__(
        self,
        spark: SparkSession,
        store: DqcStore | None = None,
        max_workers: int = 4,
        sample_limit: int = DEFAULT_SAMPLE_LIMIT,
        on_query: Callable[[str], None] | None = None,
    ):
        self.spark = spark
        self.store = store
        self.max_workers = max(1, int(max_workers))
        self.sample_limit = sample_limit
        self.on_query = on_query

    # ------------------------------------------------------------------------------------------ public
    def run(
        self,
        asset_key: str,
        partition_key: str | None,
        view: str | DataFrame,
        rules: Iterable[Rule],
        context: RuleContext | Mapping[str, Any] | None = None,
    ) -> list[RuleResult]:
        """Evaluate `rules` (all of `asset_key`) over `view`, the partition's rows; save and return the results."""
        rules = list(rules)
        others = sorted({r.label for r in rules if r.asset != asset_key})
        if others:
            raise ValueError(f"rules of another asset passed for {asset_key}: {', '.join(others)}")
        if not rules:
            return []
        ctx = RuleContext.coerce(context, partition_key)
        if partition_key is not None and ctx.partition_key != partition_key:
            raise ValueError(
                f"{asset_key}: partition {partition_key!r} but the context says {ctx.partition_key!r}"
            )
        # Rules' queries run (and are judged) with Spark's path relations and variable substitution off.
        with confined(self.spark):
            view_name, temporary = self._view(view)
            try:
                results = self._run(asset_key, partition_key, view_name, rules, ctx)
            finally:
                if temporary:
                    self.spark.catalog.dropTempView(view_name)
        if self.store is not None:
            self.store.save(results)
        return results

    def run_range(
        self,
        asset_key: str,
        partitions: Sequence[tuple[str, DataFrame, RuleContext]],
        rows: DataFrame,
        group_by: Sequence[str],
        group_values: Sequence[tuple[str, ...]],
        rules: Iterable[Rule],
        stop: Callable[[list[RuleResult]], bool] | None = None,
    ) -> list[list[RuleResult]]:
        """`run` for several partitions of one asset, oldest first: `partitions` are `(key, its rows, context)`,
        `rows` all of them, told apart by the `group_by` columns (`group_values[i]` for partition i).

        When every partition's scan has the same aggregates (no per-partition value in them), the scans are ONE
        grouped query over `rows`; otherwise, and for a partition with no rows, each partition scans its own
        rows. Other queries (joins, custom SQL, references, samples) run per partition as in `run`. Results are
        judged and saved partition by partition (a fluctuation rule sees the partitions before it); `stop(results)`
        true ends the run after that partition (the later ones are neither judged nor saved)."""
        rules = list(rules)
        others = sorted({r.label for r in rules if r.asset != asset_key})
        if others:
            raise ValueError(f"rules of another asset passed for {asset_key}: {', '.join(others)}")
        if not rules:
            return [[] for _ in partitions]
        with confined(self.spark):
            return self._run_range(asset_key, partitions, rows, group_by, group_values, rules, stop)

    def _run_range(
        self, asset_key, partitions, rows, group_by, group_values, rules, stop
    ) -> list[list[RuleResult]]:
        views = [self._view(df)[0] for _, df, _ in partitions]
        range_view = self._view(rows)[0]
        try:
            plans = [self._compile(rules, v, ctx) for v, (_, _, ctx) in zip(views, partitions, strict=True)]
            grouped = self._grouped_scan(plans, range_view, list(group_by), list(group_values))
            known = self._scalars_at_once(plans)
            out: list[list[RuleResult]] = []
            for view, (key, _, ctx), values in zip(views, partitions, group_values, strict=True):
                results = self._run(asset_key, key, view, rules, ctx, grouped.get(tuple(values)), known)
                if self.store is not None:
                    self.store.save(results)
                out.append(results)
                if stop is not None and stop(results):
                    break
            return out
        finally:
            for name in (*views, range_view):
                self.spark.catalog.dropTempView(name)

    def _grouped_scan(
        self, plans: list, view: str, group_by: list[str], group_values: list[tuple[str, ...]]
    ) -> dict[tuple[str, ...], tuple[dict[str, Any], float]]:
        """{partition values: (scan values, cost)} from one grouped scan (`grouped_scan_query`), or {} when it has
        nothing to scan or too many aggregates, or fails (each partition then scans, and reports, on its own)."""
        found = grouped_scan_query([p.aggregates for p in plans], quote_table(view), group_by)
        t0 = time.perf_counter()
        try:
            rows = (
                {tuple(str(r[c]) for c in group_by): r.asDict() for r in self._sql(found[0])} if found else {}
            )
        except Exception:  # noqa: BLE001 - the per-partition scans report the error per rule
            return {}
        per = (time.perf_counter() - t0) * 1000 / max(1, len(group_values))
        return {
            tuple(v): ({a: rows[tuple(v)][found[1][e]] for e, a in p.aggregates}, per)
            for p, v in zip(plans, group_values, strict=True)
            if tuple(v) in rows and p.aggregates
        }

    def _scalars_at_once(self, plans: list) -> dict[str, Any]:
        """{query: (its scalar or the exception it raised, its ms)} for the own queries (custom SQL, references) of every
        partition's plan, run concurrently in `max_workers` threads: one at a time, each small query's planning
        and job set-up on the driver is most of its cost. `_verdict` judges each from here as from its own run."""
        texts = [q for p in plans for c in p.rules if not c.error for q in (c.query, c.reference) if q]
        texts = list(dict.fromkeys(texts))
        if len(texts) < 2 or self.max_workers < 2:
            return {}

        def one(text: str) -> tuple[Any, float]:
            t0 = time.perf_counter()
            try:
                found = self._scalar(text)
            except Exception as exc:  # noqa: BLE001 - judged as the rule's error, as when run alone
                found = exc
            return found, (time.perf_counter() - t0) * 1000

        with ThreadPoolExecutor(max_workers=self.max_workers, thread_name_prefix="dqc") as pool:
            return dict(zip(texts, pool.map(one, texts), strict=True))

    def run_many(self, work: Mapping[str, Sequence[Any]]) -> dict[str, list[RuleResult]]:
        """Run several assets' rules in parallel threads: `{asset: (view, rules, context)}`.

        The partition comes from the context (`partition_key`, else `dt`); a 4-tuple
        `(partition_key, view, rules, context)` gives it explicitly. Every asset is run even when one fails;
        then the first error is raised.
        """
        jobs: dict[str, tuple[str | None, Any, list[Rule], RuleContext]] = {}
        for asset, item in work.items():
            if len(item) == 4:
                partition, view, rules, ctx_raw = item
            elif len(item) == 3:
                view, rules, ctx_raw = item
                partition = None
            else:
                raise ValueError(f"run_many: {asset}: expected (view, rules, context), got {len(item)} items")
            ctx = RuleContext.coerce(ctx_raw, partition)
            jobs[asset] = (ctx.partition_key or ctx.dt, view, list(rules), ctx)
        out: dict[str, list[RuleResult]] = {}
        errors: list[BaseException] = []
        with ThreadPoolExecutor(max_workers=self.max_workers, thread_name_prefix="dqc") as pool:
            futures = {a: pool.submit(self.run, a, p, v, r, c) for a, (p, v, r, c) in jobs.items()}
            for asset, fut in futures.items():
                try:
                    out[asset] = fut.result()
                except BaseException as exc:  # noqa: BLE001 - collected, re-raised below
                    errors.append(exc)
        if errors:
            raise errors[0]
        return out

    # ------------------------------------------------------------------------------------------ internals
    def _compile(self, rules: list[Rule], view: str, ctx: RuleContext) -> CompiledPlan:
        """`compile_rules`, each custom SQL then judged by Spark's own plan of its rendered text
        (`plan_shape.check_rule_query`: once per rule in a run where its shape allows, else once per text): a
        refused one becomes the rule's error and never runs."""
        plan = compile_rules(rules, view, ctx, self.sample_limit)
        items = []
        for item in plan.rules:
            if item.rule.template == "custom_sql" and item.query and not item.error:
                try:
                    text, values = item.rule.sql.query or "", item.values
                    check_rule_query(self.spark, item.query, view, item.rule.reads, text, values)
                except SqlRejected as exc:
                    error = f"{locate(item.rule, exc)}: rule {item.rule.id!r}: custom sql refused: {exc}"
                    item = CompiledRule(rule=item.rule, alias=None, error=error)
            items.append(item)
        return dataclasses.replace(plan, rules=tuple(items))

    def _view(self, view: str | DataFrame) -> tuple[str, bool]:
        if isinstance(view, DataFrame):
            name = f"dqc_{uuid.uuid4().hex[:12]}"
            view.createOrReplaceTempView(name)
            return name, True
        parts = str(view).split(".")
        if not 1 <= len(parts) <= 2 or not all(IDENTIFIER.fullmatch(p) for p in parts):
            raise ValueError(f"view name must be a plain identifier or db.table, got {view!r}")
        return str(view), False

    def _sql(self, text: str) -> list[Any]:
        if self.on_query is not None:
            self.on_query(text)
        return self.spark.sql(text).collect()

    def _scalar(self, text: str) -> Any:
        rows = self._sql(text)
        if len(rows) != 1 or len(rows[0]) != 1:
            width = len(rows[0]) if rows else 0
            raise ValueError(
                f"the query must return one row with one column, got {len(rows)} row(s) x {width}"
            )
        return rows[0][0]

    def _known_scalar(self, text: str, known: Mapping[str, Any]) -> Any:
        if text not in known:
            return self._scalar(text)
        found = known[text][0]
        if isinstance(found, Exception):
            raise found
        return found

    def _run(
        self,
        asset: str,
        partition: str | None,
        view: str,
        rules: list[Rule],
        ctx: RuleContext,
        scanned: tuple[dict[str, Any], float] | None = None,
        known: Mapping[str, Any] | None = None,
    ) -> list[RuleResult]:
        """`scanned`: the scan's values and cost when a grouped scan measured them already (`run_range`); `known`:
        the own queries' scalars run already (`_scalars_at_once`)."""
        plan = self._compile(rules, view, ctx)
        scan_values: dict[str, Any] = {}
        scan_errors: dict[str, str] = {}
        scan_ms = 0.0
        if scanned is not None:
            scan_values, scan_ms = scanned
        elif plan.scan_sql:
            t0 = time.perf_counter()
            try:
                scan_values = self._sql(plan.scan_sql)[0].asDict()
            except Exception:  # noqa: BLE001 - each rule's aggregate alone: only the broken ones fail
                scan_values, scan_errors = self._scan_each(plan)
            scan_ms = (time.perf_counter() - t0) * 1000
        results = []
        for item in plan.rules:
            t0 = time.perf_counter()
            verdict, sampled_ok = self._verdict(item, partition, ctx, scan_values, scan_errors, known or {})
            keys: list[Any] = []
            if not verdict.passed and sampled_ok and item.failing_rows:
                keys = self._sample(item, verdict)
            # A merged rule's cost is the shared scan's (it cannot be split per rule) plus its own queries.
            elapsed = (scan_ms if item.alias else 0.0) + (time.perf_counter() - t0) * 1000
            if known:  # the own queries' time, measured where they ran (`_scalars_at_once`)
                elapsed += sum(known[q][1] for q in (item.query, item.reference) if q in known)
            results.append(self._result(item.rule, partition, ctx, verdict, keys, elapsed))
        return results

    def _scan_each(self, plan: CompiledPlan) -> tuple[dict[str, Any], dict[str, str]]:
        """The merged scan failed: each rule's aggregate in a scan of its own, so that one rule that cannot run (a
        weak rule's pattern Java refuses, a column gone) fails alone, with Spark's cause, and the others are
        judged on their values (a weak rule never keeps a strong one from passing)."""
        values: dict[str, Any] = {}
        errors: dict[str, str] = {}
        for expression, alias in plan.aggregates:
            try:
                values.update(
                    self._sql(scan_query([(expression, alias)], quote_table(plan.view)))[0].asDict()
                )
            except Exception as exc:  # noqa: BLE001 - this rule reports it
                errors[alias] = _short(exc)
        return values, errors

    def _verdict(
        self,
        item: CompiledRule,
        partition: str | None,
        ctx: RuleContext,
        scan: dict[str, Any],
        scan_errors: Mapping[str, str],
        known: Mapping[str, Any],
    ) -> tuple[Verdict, bool]:
        rule = item.rule
        if item.error:
            return judge_error(rule, item.error), False
        value = reference = None
        try:
            if item.alias:
                if item.alias in scan_errors:
                    return judge_error(rule, f"the scan failed: {scan_errors[item.alias]}"), False
                value = scan[item.alias]
            if item.query:
                value = self._known_scalar(item.query, known)
            if item.reference:
                reference = self._known_scalar(item.reference, known)
        except Exception as exc:  # noqa: BLE001 - one broken rule must not hide the others' results
            return judge_error(rule, _short(exc)), False
        history = None
        if rule.tmpl.mode == "fluctuation":
            history = self._history(rule, partition)
        return judge(rule, value, ctx, reference, history), True

    def _history(self, rule: Rule, partition: str | None) -> list[float]:
        if self.store is None:
            return []
        points = self.store.history(rule.asset, rule.id, int(rule.params["window"]), before=partition)
        return [p.actual for p in points]

    def _sample(self, item: CompiledRule, verdict: Verdict) -> list[Any]:
        try:
            rows = self._sql(item.failing_rows or "")
        except Exception as exc:  # noqa: BLE001 - a sample is a courtesy; the verdict stands without it
            verdict.details["sample_error"] = _short(exc)
            return []
        # JSON-safe values (dates, decimals) so results can go to the store and to alerts unchanged.
        return json.loads(keys_to_json([r.asDict() for r in rows]))

    def _result(
        self,
        rule: Rule,
        partition: str | None,
        ctx: RuleContext,
        v: Verdict,
        keys: list[Any],
        elapsed_ms: float,
    ) -> RuleResult:
        return RuleResult(
            rule_id=rule.id,
            rule_version=rule.version,
            asset=rule.asset,
            partition=partition,
            template=rule.template,
            dimension=rule.dimension,
            severity=rule.severity,
            comparator=rule.comparator,
            actual=v.actual,
            expected=v.expected,
            lower_bound=v.lower_bound,
            upper_bound=v.upper_bound,
            passed=v.passed,
            downgraded=v.downgraded,
            downgrade_reason=v.reason,
            message=v.message,
            failing_keys=keys,
            evaluated_at=_now(),
            elapsed_ms=round(elapsed_ms, 3),
            run_id=ctx.run_id,
            details=dict(v.details),
        )


def alert_failures(results: Iterable[RuleResult], sink: AlertSinkLike) -> int:
    """Send one alert per rule that did not pass; return how many the sink actually sent.

    The de-duplication key is `dqc:{asset}:{rule_id}:{partition}`, so a re-run of the same partition does not
    alert twice. Failures go out as kind `dqc_failure`, downgraded ones (warnings) as `dqc_warning`.
    """
    sent = 0
    for r in results:
        if r.passed:
            continue
        kind = "dqc_warning" if r.downgraded else "dqc_failure"
        title = f"DQC {r.severity} rule {r.rule_id} {'warned' if r.downgraded else 'failed'} on {r.asset} [{r.partition}]"
        details = {
            "asset": r.asset,
            "partition": r.partition,
            "rule_id": r.rule_id,
            "rule_version": r.rule_version,
            "severity": r.severity,
            "dimension": r.dimension,
            "actual": r.actual,
            "expected": r.expected,
            "lower_bound": r.lower_bound,
            "upper_bound": r.upper_bound,
            "message": r.message,
            "failing_keys": r.failing_keys,
            "run_id": r.run_id,
        }
        if sink.send(kind, f"dqc:{r.asset}:{r.rule_id}:{r.partition}", title, details):
            sent += 1
    return sent
