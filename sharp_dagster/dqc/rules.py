"""Rule entities: YAML files binding a template to an asset, validated completely before anything runs.

A rule file holds a list of rules, either at the top level or under `rules:` (with an optional file-wide
`asset:` that rules inherit)::

    asset: dwd/order_detail
    rules:
      - id: order_id_unique            # unique per asset; plain identifier (it becomes a SQL alias)
        template: duplicate_count
        params: {key: [order_id]}
        comparator: "="                # one of > >= = != <= < between
        expect: 0                      # a number, or [low, high] for between
        severity: strong               # strong: blocks publication; weak: reported and alerted only
        dimension: uniqueness          # accuracy completeness timeliness uniqueness validity consistency
        description: one row per order line
        sample_key: [order_id]         # columns to report for failing rows (optional)

**A rule PASSES when `actual <comparator> expect` holds** (for `between`: `low <= actual <= high`, both ends
inclusive). `null_count` with `comparator: "="` and `expect: 0` passes when there are no NULLs. This is the
opposite of the original DQC design's "assert" (there the comparator describes the *failure*); here it
describes what good data looks like, like a unit-test assertion. `=` and `!=` compare with a relative tolerance of 1e-9.

**`custom_sql` rules read only the asset's staged rows (`${table}`), their own CTEs, and the tables they declare**
in `reads:` (a list of `db.table`, on the rule or file-wide next to `asset:`, which rules inherit)::

    reads: [dwd.order_detail]
    rules:
      - id: gmv_matches_detail
        template: custom_sql
        params: {sql: "SELECT abs((SELECT sum(gmv) FROM ${table}) - (SELECT sum(amount) FROM dwd.order_detail))"}

Functions that reach the JVM or the file system (`reflect`, `java_method`, `read_files`, ...), path-based
relations (``text.`/etc/passwd` ``) and anything but one SELECT are rejected at load, the error naming the file,
its line and the rule (`sharp_dagster.dqc.sqlguard`); the verdict is Spark's plan of the rendered SQL, judged before
the rule's query first runs (`sharp_dagster.dqc.plan_guard`).

`severity` defaults to `weak`, `dimension` to the template's own (e.g. uniqueness for duplicate_count), and
`description` to the template's description. `reconciliation` and `fluctuation` compute their own expectation (`tolerance` param; history bounds), so they
take no `expect` / `comparator`.

`rule_files.load_rules` raises `RuleError` naming the file and the rule id for every mistake it can see (the checks
are `rule_validation.build_rule`): unknown asset, column, table, template, comparator, bad severity/dimension,
missing or unknown param, a parameter that is not a plain identifier where one is needed. Nothing of a rule reaches
Spark before it has passed there. This module holds what a validated rule is (`Rule`), its version hash and where
it sits in its file.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sharp_dagster.dqc.builders import RuleSql
from sharp_dagster.dqc.errors import ParamError
from sharp_dagster.dqc.templates import Template, get_template

COMPARATORS = (">", ">=", "=", "!=", "<=", "<", "between")
SEVERITIES = ("strong", "weak")
DIMENSIONS = ("accuracy", "completeness", "timeliness", "uniqueness", "validity", "consistency")


class RuleError(ValueError):
    """A rule file or rule is invalid; the message starts with the file and names the rule id."""


@dataclass(frozen=True)
class SourceLines:
    """Where a rule sits in its YAML file (1-based lines), for error messages."""

    rule: int | None = None  # the rule mapping's first line
    end: int | None = None  # its last line
    sql: int | None = None  # the first line of `params.sql`'s text


@dataclass(frozen=True)
class Rule:
    """A validated rule. `sql` holds its rendered SQL (run-time placeholders still open)."""

    id: str
    asset: str
    template: str
    params: Mapping[str, Any]
    comparator: str
    expect: float | tuple[float, float] | None
    severity: str
    dimension: str
    description: str
    sample_key: tuple[str, ...]
    sample_limit: int | None
    sql: RuleSql
    source: str = ""
    version: str = field(default="", compare=False)
    reads: tuple[str, ...] = ()  # tables a custom_sql rule declared it reads (`reads:`), besides ${table}
    lines: SourceLines | None = field(default=None, compare=False)  # where it sits in its file (custom SQL)

    @property
    def label(self) -> str:
        return f"{self.asset}:{self.id}"

    @property
    def tmpl(self) -> Template:
        return get_template(self.template)

    @property
    def scan_based(self) -> bool:
        return self.sql.scan is not None

    def describe_expectation(self) -> str:
        if self.tmpl.mode == "reconcile":
            unit = "%" if self.params.get("tolerance_type") == "percent" else ""
            return f"difference <= {self.params.get('tolerance', 0)}{unit}"
        if self.tmpl.mode == "fluctuation":
            return (
                f"within -{self.params['lower_pct']}%/+{self.params['upper_pct']}% of the mean of the last "
                f"{self.params['window']} partitions"
            )
        if self.comparator == "between":
            low, high = self.expect  # type: ignore[misc]
            return f"between {low} and {high}"
        return f"{self.comparator} {self.expect}"


def rule_version(
    template: Template, sql: RuleSql, params: Mapping[str, Any], expect: Any, comparator: str, severity: str
) -> str:
    """A short hash of what decides a verdict: template SQL (and the rendered SQL), params, expect, comparator,
    severity. Description, dimension and sample settings do not change it."""
    payload = json.dumps(
        {
            "template": [template.name, template.sql],
            "sql": sql.pieces(),
            "params": params,
            "expect": list(expect) if isinstance(expect, tuple) else expect,
            "comparator": comparator,
            "severity": severity,
        },
        sort_keys=True,
        default=str,
    )
    return hashlib.sha256(payload.encode()).hexdigest()[:16]


# ------------------------------------------------------------------------------------------------ where it sits
def locate(rule: Rule, exc: ParamError) -> str:
    """`file:line` (or the file) of what a check of the rule's rendered SQL refused: Spark's plan carries the
    line within the SQL, which beats a search for the token (that may stand in a comment before it)."""
    line = file_line(rule.lines, rule.source, exc, sql_line_first=True)
    return f"{rule.source}:{line}" if line else rule.source


def file_line(
    lines: SourceLines | None, source: str, exc: ParamError, sql_line_first: bool = False
) -> int | None:
    """The file line of what a custom SQL check refused: the line of its token inside the rule, else the SQL's
    own line counted from the start of `params.sql`, else the rule's first line (`sql_line_first`: the SQL's
    line before the token's)."""
    if lines is None:
        return None
    token = getattr(exc, "token", None)
    start = lines.sql or lines.rule
    if sql_line_first and lines.sql and getattr(exc, "line", None):
        return lines.sql + exc.line - 1
    if token and start and lines.end:
        try:
            text = Path(source).read_text(encoding="utf-8").splitlines()
        except OSError:
            text = []
        for number in range(start, min(lines.end, len(text)) + 1):
            if token.lower() in text[number - 1].lower():
                return number
    sql_line = getattr(exc, "line", None)
    if lines.sql and sql_line:
        return lines.sql + sql_line - 1
    return start


def rules_for(rules: Iterable[Rule], asset: str, severity: str | None = None) -> list[Rule]:
    """The rules of one asset, optionally only `strong` (run before publishing) or `weak` (after)."""
    return [r for r in rules if r.asset == asset and (severity is None or r.severity == severity)]
