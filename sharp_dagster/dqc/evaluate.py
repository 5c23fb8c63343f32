"""Verdicts: how a measured number becomes a `RuleResult`, and the quality score over many results.

- compare: passes when `actual <comparator> expect` holds (`between` is inclusive at both ends; `=` / `!=`
  use a relative tolerance of 1e-9 so sums of floats compare sensibly). A NULL actual never passes.
- reconcile: `actual` is the difference between this side and the other side (an upstream table or the job
  log's count): `|this - other|` (abs) or `|this - other| / |other| * 100` (percent); passes when
  `actual <= tolerance`.
- fluctuation: `expected` is the mean of the rule's own actual values over its last `window` partitions
  (from `dqc_result`), `lower_bound`/`upper_bound` = mean * (1 - lower_pct/100) / (1 + upper_pct/100); passes
  within the bounds. With fewer than `min_history` points the result is *downgraded*: it is a warning (never
  blocking), and the message says how many points there were.

Status of a result: `fail` (did not pass, not downgraded), `warn` (downgraded), `pass`. Only a strong rule's
`fail` blocks publication.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime
from decimal import Decimal
from typing import Any

from sharp_dagster.dqc.context import RuleContext
from sharp_dagster.dqc.rules import Rule

SEVERITY_WEIGHTS = {"strong": 2, "weak": 1}


@dataclass
class RuleResult:
    rule_id: str
    rule_version: str
    asset: str
    partition: str | None
    template: str
    dimension: str
    severity: str
    comparator: str
    actual: float | None
    expected: float | None
    lower_bound: float | None
    upper_bound: float | None
    passed: bool
    downgraded: bool
    downgrade_reason: str | None
    message: str
    failing_keys: list[Any] = field(default_factory=list)
    evaluated_at: datetime | None = None
    elapsed_ms: float = 0.0
    run_id: str | None = None
    details: dict[str, Any] = field(default_factory=dict)

    @property
    def status(self) -> str:
        if self.downgraded:
            return "warn"
        return "pass" if self.passed else "fail"

    @property
    def blocking(self) -> bool:
        """True when this result must keep the partition from being published."""
        return self.severity == "strong" and self.status == "fail"

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["status"] = self.status
        d["evaluated_at"] = self.evaluated_at.isoformat() if self.evaluated_at else None
        return d


@dataclass(frozen=True)
class Verdict:
    actual: float | None
    expected: float | None
    lower_bound: float | None
    upper_bound: float | None
    passed: bool
    downgraded: bool
    reason: str | None
    message: str
    details: dict[str, Any]


def to_number(value: Any) -> float | int | None:
    """A measured value as int/float; raises TypeError for something that is not a number."""
    if value is None:
        return None
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int):
        return value
    if isinstance(value, Decimal | float):
        f = float(value)
        return int(f) if f.is_integer() and abs(f) < 2**53 else f
    raise TypeError(f"the rule's SQL returned {type(value).__name__} {capped(repr(value))}, not a number")


MAX_SHOWN = 200  # characters of a value a message shows (a result goes to dqc_result, Dagster and alerts)
MAX_MESSAGE = 2000


def capped(text: str, limit: int = MAX_SHOWN) -> str:
    """`text`, cut to `limit` characters with a note of how long it was."""
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} characters)"


def compare(actual: float | None, comparator: str, expect: Any) -> bool:
    """True when `actual <comparator> expect` holds; `between` takes (low, high), inclusive."""
    if actual is None or (isinstance(actual, float) and math.isnan(actual)):
        return False
    if comparator == "between":
        low, high = expect
        return low <= actual <= high
    if comparator in ("=", "!="):
        same = math.isclose(actual, expect, rel_tol=1e-9, abs_tol=1e-12)
        return same if comparator == "=" else not same
    if comparator == ">":
        return actual > expect
    if comparator == ">=":
        return actual >= expect
    if comparator == "<=":
        return actual <= expect
    if comparator == "<":
        return actual < expect
    raise ValueError(f"unknown comparator {comparator!r}")


def fmt(value: Any) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, float):
        return f"{value:.6g}"
    return str(value)


def _verdict(
    rule: Rule,
    actual: float | None,
    expected: float | None,
    passed: bool,
    message: str,
    lower: float | None = None,
    upper: float | None = None,
    downgraded: bool = False,
    reason: str | None = None,
    details: dict[str, Any] | None = None,
) -> Verdict:
    status = "WARN" if downgraded else ("PASS" if passed else "FAIL")
    return Verdict(
        actual=actual,
        expected=expected,
        lower_bound=lower,
        upper_bound=upper,
        passed=passed,
        downgraded=downgraded,
        reason=reason,
        message=f"{rule.label} {status}: {message}",
        details=details or {},
    )


def judge_error(rule: Rule, error: str) -> Verdict:
    return _verdict(rule, None, None, False, f"could not be evaluated: {capped(error, MAX_MESSAGE)}")


def judge(
    rule: Rule,
    value: Any,
    context: RuleContext,
    reference: Any = None,
    history: Sequence[float] | None = None,
) -> Verdict:
    """The verdict for one rule given its measured value (and the reference side / history when relevant)."""
    mode = rule.tmpl.mode
    try:
        actual = to_number(value)
        ref = to_number(reference)
    except TypeError as exc:
        return judge_error(rule, str(exc))
    if mode == "reconcile":
        return _reconcile(rule, actual, ref, context)
    if mode == "fluctuation":
        return _fluctuation(rule, actual, list(history or []))
    expect = rule.expect
    passed = compare(actual, rule.comparator, expect)
    if rule.comparator == "between":
        low, high = expect  # type: ignore[misc]
        msg = f"actual {fmt(actual)}, expected between {fmt(low)} and {fmt(high)}"
        return _verdict(rule, actual, None, passed, msg, lower=low, upper=high)
    msg = f"actual {fmt(actual)}, expected {rule.comparator} {fmt(expect)}"
    if actual is None:
        msg += " (the measure is NULL: no rows or no values to measure)"
    return _verdict(rule, actual, expect, passed, msg)  # type: ignore[arg-type]


def _reconcile(rule: Rule, this: float | None, other: float | None, ctx: RuleContext) -> Verdict:
    p = rule.params
    tolerance = p.get("tolerance", 0)
    percent = p.get("tolerance_type") == "percent"
    against = p.get("against", "table")
    if against == "table":
        other_label = f"{p.get('metric', 'count')} of {p['other']}"
    else:
        other = getattr(ctx, against)
        other_label = f"the job log's {against}"
    details = {"this": this, "other": other, "against": against}
    unit = "%" if percent else ""
    if other is None or this is None:
        missing = "this side" if this is None else other_label
        msg = f"cannot reconcile: {missing} is unknown (tolerance {fmt(tolerance)}{unit})"
        return _verdict(rule, None, tolerance, False, msg, details=details)
    diff = abs(this - other)
    if percent:
        if other == 0:
            ok = this == 0
            msg = f"this {fmt(this)} vs {other_label} 0: a percentage of 0 is {'0' if ok else 'undefined'}"
            return _verdict(rule, 0.0 if ok else None, tolerance, ok, msg, details=details)
        diff = diff / abs(other) * 100.0
    passed = diff <= tolerance + 1e-12
    msg = f"this {fmt(this)} vs {other_label} {fmt(other)}: difference {fmt(diff)}{unit}, tolerance {fmt(tolerance)}{unit}"
    return _verdict(rule, diff, tolerance, passed, msg, details=details)


def _fluctuation(rule: Rule, actual: float | None, history: list[float]) -> Verdict:
    p = rule.params
    need, window = p["min_history"], p["window"]
    points = history[-window:]
    details = {"history": points, "window": window, "min_history": need}
    if actual is None:
        return _verdict(
            rule, None, None, False, "actual is NULL: the base metric could not be measured", details=details
        )
    if not points:
        reason = f"no history yet (0 of min_history {need} points): the result is a warning, not a failure"
        return _verdict(
            rule,
            actual,
            None,
            True,
            f"actual {fmt(actual)}; {reason}",
            downgraded=True,
            reason=reason,
            details=details,
        )
    mean = sum(points) / len(points)
    low, high = mean * (1 - p["lower_pct"] / 100.0), mean * (1 + p["upper_pct"] / 100.0)
    low, high = min(low, high), max(low, high)  # a negative mean flips the percentages
    passed = low <= actual <= high
    msg = (
        f"actual {fmt(actual)}, expected between {fmt(low)} and {fmt(high)} "
        f"(mean {fmt(mean)} of {len(points)} partition(s) -{fmt(p['lower_pct'])}%/+{fmt(p['upper_pct'])}%)"
    )
    if len(points) < need:
        reason = (
            f"only {len(points)} history point(s), fewer than min_history {need}: the result is a warning"
        )
        return _verdict(
            rule,
            actual,
            mean,
            passed,
            f"{msg}; {reason}",
            lower=low,
            upper=high,
            downgraded=True,
            reason=reason,
            details=details,
        )
    return _verdict(rule, actual, mean, passed, msg, lower=low, upper=high, details=details)


def quality_score(results: Iterable[RuleResult]) -> dict[str, Any]:
    """Pass rate weighted by severity (strong counts 2, weak 1), overall and per dimension, in 0..1.

    A result counts as passed when `passed` is true (a downgraded fluctuation within its bounds counts as passed;
    outside them, as failed). `None` when there are no results to score.
    """
    results = list(results)

    def rate(rs: list[RuleResult]) -> float | None:
        total = sum(SEVERITY_WEIGHTS[r.severity] for r in rs)
        if not total:
            return None
        return round(sum(SEVERITY_WEIGHTS[r.severity] for r in rs if r.passed) / total, 4)

    dims: dict[str, list[RuleResult]] = {}
    for r in results:
        dims.setdefault(r.dimension, []).append(r)
    return {
        "overall": rate(results),
        "by_dimension": {d: rate(rs) for d, rs in sorted(dims.items())},
        "weights": dict(SEVERITY_WEIGHTS),
        "total": len(results),
        "passed": sum(1 for r in results if r.status == "pass"),
        "failed": sum(1 for r in results if r.status == "fail"),
        "warnings": sum(1 for r in results if r.status == "warn"),
    }
