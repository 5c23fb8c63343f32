"""Validation of one rule mapping (`build_rule`): every field checked and the rule's SQL rendered, before anything
of it reaches Spark.

The format is described in `rules.py`; reading the files is `rule_files.py`. Each check raises `RuleError` naming
the file and the rule id (and its asset once known), in the order a reader fixes them: identity, template,
severity and dimension, declared reads, parameters (and the SQL they render), custom SQL, expectation, sampling.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from sharp_dagster.dqc.builders import RuleSql
from sharp_dagster.dqc.errors import ParamError
from sharp_dagster.dqc.params import COLUMNS, ParamSpec, Schemas, check_column, render, validate_params
from sharp_dagster.dqc.quoting import CONTEXT_VARIABLES, IDENTIFIER, INTERNAL_VARIABLES, fill
from sharp_dagster.dqc.rules import (
    COMPARATORS,
    DIMENSIONS,
    SEVERITIES,
    Rule,
    RuleError,
    SourceLines,
    file_line,
    rule_version,
)
from sharp_dagster.dqc.sqlguard import check_custom_sql, check_declared_table
from sharp_dagster.dqc.templates import Template, get_template
from sharp_dagster.naming import qualified

RULE_KEYS = frozenset(
    {
        "id",
        "asset",
        "template",
        "params",
        "expect",
        "comparator",
        "severity",
        "dimension",
        "description",
        "sample_key",
        "sample_limit",
        "reads",
    }
)
MAX_ID = 64
MAX_DESCRIPTION = 2000
ASSET_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(/[A-Za-z_][A-Za-z0-9_]*)*$")

Fail = Callable[[str], RuleError]  # a message -> the RuleError naming where it is


def known_table_schemas(
    schemas: Mapping[str, Mapping[str, str]] | None,
    known_tables: Mapping[str, Mapping[str, str] | None] | Iterable[str] | None,
) -> dict[str, Mapping[str, str] | None] | None:
    """The tables rules may name (`db.table` -> columns or None): the known tables and every asset's table."""
    if schemas is None and known_tables is None:
        return None
    tables: dict[str, Mapping[str, str] | None] = {}
    # Every asset with a schema is a table `db.name` too (asset `dwd/order_detail` = table `dwd.order_detail`).
    for asset, cols in (schemas or {}).items():
        tables[qualified(asset)] = cols
    if isinstance(known_tables, Mapping):
        tables.update(known_tables)
    elif known_tables is not None:
        for name in known_tables:
            tables.setdefault(name, None)
    return tables


def build_rule(
    raw: Mapping[str, Any],
    schemas: Mapping[str, Mapping[str, str]] | None,
    tables: Mapping[str, Mapping[str, str] | None] | None,
    source: str = "<memory>",
    lines: SourceLines | None = None,
) -> Rule:
    """Validate one rule mapping; `schemas=None` skips asset/column existence checks (listing only).

    `lines` (from `rule_files.parse_rule_file_lines`) puts the file's line into the error of a refused custom SQL.
    """
    rid, asset = _identity(raw, schemas, source)
    fail = _failure(source, rid, asset)
    template = _template(raw, fail)
    severity, dimension = _severity_and_dimension(raw, template, fail)
    try:
        reads = _reads(raw.get("reads"), tables)
    except ParamError as exc:
        raise fail(str(exc)) from None
    cols = schemas.get(asset) if schemas is not None else None
    description = raw.get("description")
    if description is not None and (not isinstance(description, str) or len(description) > MAX_DESCRIPTION):
        raise fail(f"'description' must be a text of at most {MAX_DESCRIPTION} characters")
    params, sample_key, sql = _rendered_sql(raw, template, cols, tables, fail)
    if template.name == "custom_sql":
        _check_custom_sql(params["sql"], reads, lines, f"rule {rid!r} (asset {asset})", source)
    comparator, expect = _expectation(raw, template, fail)
    limit = _sample_limit(raw.get("sample_limit"), fail)
    return Rule(
        id=rid,
        asset=asset,
        template=template.name,
        params=params,
        comparator=comparator,
        expect=expect,
        severity=severity,
        dimension=dimension,
        description=description or template.description,
        sample_key=tuple(sample_key),
        sample_limit=limit,
        sql=sql,
        source=source,
        version=rule_version(template, sql, params, expect, comparator, severity),
        reads=reads,
        lines=_sql_lines(lines, template, params),
    )


def _failure(source: str, rid: Any, asset: str | None = None) -> Fail:
    shown = repr(rid) if len(repr(rid)) <= 80 else repr(rid)[:80] + "..."
    where = f"{source}: rule {shown}" + ("" if asset is None else f" (asset {asset})")
    return lambda msg: RuleError(f"{where}: {msg}")


def _identity(raw: Mapping[str, Any], schemas: Mapping[str, Any] | None, source: str) -> tuple[str, str]:
    """The rule's id and asset, each well formed, its keys all known, its asset one of `schemas` (when given)."""
    rid = raw.get("id")
    fail = _failure(source, rid)
    if not isinstance(rid, str) or not IDENTIFIER.fullmatch(rid) or len(rid) > MAX_ID:
        raise fail(
            f"'id' must be a plain identifier (letters, digits, _; at most {MAX_ID} characters), it becomes a SQL "
            "alias and a check name"
        )
    unknown = sorted(set(raw) - RULE_KEYS)
    if unknown:
        raise fail(f"unknown key(s) {', '.join(unknown)} (allowed: {', '.join(sorted(RULE_KEYS))})")
    asset = raw.get("asset")
    if not isinstance(asset, str) or not ASSET_KEY.fullmatch(asset):
        raise fail(f"'asset' must be an asset key like dwd/order_detail, got {asset!r}")
    if schemas is not None and asset not in schemas:
        known = ", ".join(sorted(schemas)) or "(none)"
        raise _failure(source, rid, asset)(f"unknown asset {asset!r} (known: {known})")
    return rid, asset


def _template(raw: Mapping[str, Any], fail: Fail) -> Template:
    try:
        return get_template(str(raw.get("template")))
    except ParamError as exc:
        raise fail(str(exc)) from None


def _severity_and_dimension(raw: Mapping[str, Any], template: Template, fail: Fail) -> tuple[str, str]:
    severity = raw.get("severity", "weak")
    if severity not in SEVERITIES:
        raise fail(f"severity must be one of {', '.join(SEVERITIES)}, got {severity!r}")
    dimension = raw.get("dimension", template.dimension)
    if dimension not in DIMENSIONS:
        raise fail(f"dimension must be one of {', '.join(DIMENSIONS)}, got {dimension!r}")
    return severity, dimension


def _rendered_sql(
    raw: Mapping[str, Any],
    template: Template,
    cols: Mapping[str, str] | None,
    tables: Mapping[str, Mapping[str, str] | None] | None,
    fail: Fail,
) -> tuple[dict[str, Any], list[str], RuleSql]:
    """The validated params, the sample_key columns and the rule's SQL with only run-time placeholders open."""
    raw_params = raw.get("params") or {}
    if not isinstance(raw_params, Mapping):
        raise fail(f"'params' must be a mapping, got {raw_params!r}")
    try:
        params = validate_params(template, raw_params, Schemas(columns=cols, tables=tables))
        sample_key = _sample_key(raw.get("sample_key"), cols) or template.default_sample_key(params)
        sql = template.build(params, render(template, params), sample_key, cols)
        keep = CONTEXT_VARIABLES | INTERNAL_VARIABLES
        sql = RuleSql(**{k: fill(v, {}, keep) for k, v in sql.pieces().items()})
    except ParamError as exc:
        raise fail(str(exc)) from None
    return params, sample_key, sql


def _check_custom_sql(
    sql: str, reads: tuple[str, ...], lines: SourceLines | None, rule: str, source: str
) -> None:
    """sqlglot's early check of a custom SQL; its error names the file's line of what it refused."""
    try:
        check_custom_sql(sql, reads)
    except ParamError as exc:
        line = file_line(lines, source, exc)
        at = f"{source}:{line}" if line else source
        raise RuleError(f"{at}: {rule}: {exc}") from None


def _sample_limit(limit: Any, fail: Fail) -> int | None:
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 0):
        raise fail(f"sample_limit must be a non-negative integer, got {limit!r}")
    return limit


def _sql_lines(
    lines: SourceLines | None, template: Template, params: Mapping[str, Any]
) -> SourceLines | None:
    """Where the rule sits, its SQL's line moved to the first line of the SQL the rule runs."""
    if lines is None or not lines.sql or template.name != "custom_sql":
        return lines
    # The rendered SQL is the text stripped (builders.custom_sql): count its lines from its first non-blank one.
    text = str(params["sql"])
    return SourceLines(lines.rule, lines.end, lines.sql + text[: len(text) - len(text.lstrip())].count("\n"))


def _reads(value: Any, tables: Mapping[str, Mapping[str, str] | None] | None) -> tuple[str, ...]:
    """The `reads:` declaration: a list of db.table names, each a known table when known tables are given."""
    if value is None:
        return ()
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, list | tuple):
        raise ParamError(f"'reads' must be a list of tables db.table, got {value!r}")
    out = []
    for item in items:
        name = check_declared_table(item)
        if tables is not None and name not in tables:
            known = ", ".join(sorted(tables)) or "(none)"
            raise ParamError(f"'reads' names unknown table {name!r} (known tables: {known})")
        out.append(name)
    return tuple(dict.fromkeys(out))


def _sample_key(value: Any, cols: Mapping[str, str] | None) -> list[str]:
    if value is None:
        return []
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, list | tuple) or not items:
        raise ParamError(f"sample_key must be a column or a list of columns, got {value!r}")
    spec = ParamSpec("sample_key", COLUMNS)
    return [check_column(spec, v, cols, "the asset") for v in items]


def _expectation(raw: Mapping[str, Any], template: Template, fail: Fail) -> tuple[str, Any]:
    has_expect, has_comp = "expect" in raw, "comparator" in raw
    if template.mode in ("reconcile", "fluctuation"):
        if has_expect or has_comp:
            what = "its 'tolerance' param" if template.mode == "reconcile" else "the rule's own history"
            raise fail(
                f"template {template.name} takes no expect/comparator: the expectation comes from {what}"
            )
        return ("<=", None) if template.mode == "reconcile" else ("between", None)
    if not has_comp:
        raise fail(f"missing 'comparator' (one of {' '.join(COMPARATORS)})")
    comparator = raw["comparator"]
    if comparator not in COMPARATORS:
        raise fail(f"unknown comparator {comparator!r} (one of {' '.join(COMPARATORS)})")
    if not has_expect:
        raise fail("missing 'expect'")
    value = raw["expect"]
    if comparator == "between":
        if not isinstance(value, list | tuple) or len(value) != 2:
            raise fail(f"'between' needs expect: [low, high], got {value!r}")
        low, high = _number(value[0]), _number(value[1])
        if low is None or high is None or low > high:
            raise fail(f"'between' needs two numbers low <= high, got {value!r}")
        return comparator, (low, high)
    number = _number(value)
    if number is None:
        raise fail(f"'expect' must be a number for comparator {comparator}, got {value!r}")
    return comparator, number


def _number(value: Any) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, str):
        try:
            value = float(value)
        except ValueError:
            return None
    if isinstance(value, int | float) and math.isfinite(value):
        return value
    return None
