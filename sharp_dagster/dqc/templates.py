"""Rule templates: parameterised Spark SQL that measures ONE number over an asset's partition.

This module owns the catalogue (`TEMPLATES`): each template's SQL text, typed parameters (`params.py`, which also
describes how a rule's values are checked and rendered) and the builder that makes a rule's SQL, as in the DQC
design of seed 001.

A template yields up to four pieces of SQL (`RuleSql`):
- `scan`: an aggregate expression over the partition's rows. All scan expressions of one asset partition are
  merged into one `SELECT ... FROM <view>` by the compiler: one pass over the data for any number of rules.
- `query`: a complete query returning one scalar, for rules that cannot share the scan (they join another
  table, or are custom SQL).
- `reference`: the other side of a reconciliation (the upstream table's count or sum).
- `failing_rows`: a query selecting the `sample_key` columns of failing rows (`${limit}` rows at most); it runs
  only when the rule failed.

`mode` tells the evaluator how the measured number becomes a verdict: `compare` (actual vs expect),
`reconcile` (difference between this side and the reference or the job log, vs a tolerance) or
`fluctuation` (actual vs the mean of the rule's own history, within percent bounds).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from sharp_dagster.dqc.errors import ParamError
from sharp_dagster.dqc.params import (
    COLUMN,
    COLUMNS,
    INTEGRAL_TYPES,
    NUMBER,
    NUMERIC_TYPES,
    REGEX,
    SQL,
    STRING,
    STRING_LIST,
    TABLE,
    TIME_TYPES,
    ParamSpec,
)
from sharp_dagster.dqc.quoting import quote_ident


@dataclass(frozen=True)
class RuleSql:
    """The rendered SQL of one rule; may still contain `CONTEXT_VARIABLES` / `INTERNAL_VARIABLES`."""

    scan: str | None = None
    query: str | None = None
    reference: str | None = None
    failing_rows: str | None = None

    def pieces(self) -> dict[str, str]:
        return {k: v for k, v in self.__dict__.items() if v is not None}


# (validated params, their SQL fragments, sample_key columns, the asset's column types or None) -> RuleSql
Builder = Callable[[Mapping[str, Any], Mapping[str, str], Sequence[str], Mapping[str, str] | None], RuleSql]


@dataclass(frozen=True)
class Template:
    """A named rule template.

    `sql` is the human-readable template text (shown by `dqc rules`; with the rendered SQL it goes into the rule
    version hash); `build` turns validated params, their rendered fragments, the rule's `sample_key` columns and
    the asset's column types into a `RuleSql`.
    """

    name: str
    params: tuple[ParamSpec, ...]
    sql: str
    build: Builder
    dimension: str
    mode: str = "compare"  # compare | reconcile | fluctuation
    scan_based: bool = True  # False: needs its own query (joins another table, custom SQL)
    key_param: str | None = None  # param whose columns are the default sample_key
    description: str = ""
    extra_params: Callable[[Mapping[str, Any]], tuple[ParamSpec, ...]] | None = field(
        default=None, repr=False
    )

    def param_specs(self, raw: Mapping[str, Any]) -> tuple[ParamSpec, ...]:
        extra = self.extra_params(raw) if self.extra_params else ()
        return self.params + extra

    def default_sample_key(self, params: Mapping[str, Any]) -> list[str]:
        if not self.key_param or self.key_param not in params:
            return []
        value = params[self.key_param]
        return list(value) if isinstance(value, list) else [value]


def _t_cols(names: Sequence[str], alias: str = "t") -> str:
    return ", ".join(f"{alias}.{quote_ident(c)}" for c in names)


def _rows_where(cond: str, sample_key: Sequence[str]) -> str | None:
    if not sample_key:
        return None
    return f"SELECT {_t_cols(sample_key)} FROM ${{table}} t WHERE {cond} LIMIT ${{limit}}"


def _c(name: str) -> ParamSpec:
    return ParamSpec(name, COLUMN)


# Each builder receives (params, fragments, sample_key, column types): see `Builder`.
def _row_count(p, f, k, types=None) -> RuleSql:
    return RuleSql(scan="count(1)")


def _null_count(p, f, k, types=None) -> RuleSql:
    c = f["column"]
    return RuleSql(
        scan=f"count(CASE WHEN {c} IS NULL THEN 1 END)", failing_rows=_rows_where(f"t.{c} IS NULL", k)
    )


def _null_rate(p, f, k, types=None) -> RuleSql:
    c = f["column"]
    # Zero rows hold zero nulls: the rate is 0, not NULL, so an empty partition is judged by row_count rules.
    return RuleSql(
        scan=f"coalesce(count(CASE WHEN {c} IS NULL THEN 1 END) / nullif(count(1), 0), 0.0)",
        failing_rows=_rows_where(f"t.{c} IS NULL", k),
    )


def _not_null_all(cols: Sequence[str], alias: str = "") -> str:
    prefix = f"{alias}." if alias else ""
    return " AND ".join(f"{prefix}{quote_ident(c)} IS NOT NULL" for c in cols)


def _duplicate_count(p, f, k, types=None) -> RuleSql:
    keys = p["key"]
    # Rows with a complete key minus distinct keys = the extra copies. count(DISTINCT a, b) skips rows where any
    # key column is NULL, so the first count must skip them too. Both are plain aggregates: they share the scan.
    scan = f"count(CASE WHEN {_not_null_all(keys)} THEN 1 END) - count(DISTINCT {f['key']})"
    rows = None
    if k:
        on = " AND ".join(f"t.{quote_ident(c)} = d.{quote_ident(c)}" for c in keys)
        rows = (
            f"SELECT {_t_cols(k)} FROM ${{table}} t LEFT SEMI JOIN (SELECT {f['key']} FROM ${{table}} "
            f"WHERE {_not_null_all(keys)} GROUP BY {f['key']} HAVING count(1) > 1) d ON {on} LIMIT ${{limit}}"
        )
    return RuleSql(scan=scan, failing_rows=rows)


def _out_of_range(p, f, alias: str) -> str:
    c = f"{alias}{f['column']}"
    conds = []
    if "min" in p:
        conds.append(f"{c} < {f['min']}")
    if "max" in p:
        conds.append(f"{c} > {f['max']}")
    if not conds:
        raise ParamError("value_range needs 'min', 'max' or both")
    return f"{c} IS NOT NULL AND ({' OR '.join(conds)})"


def _value_range(p, f, k, types=None) -> RuleSql:
    if "min" in p and "max" in p and p["min"] > p["max"]:
        raise ParamError(f"value_range: min {p['min']} is greater than max {p['max']}")
    return RuleSql(
        scan=f"count(CASE WHEN {_out_of_range(p, f, '')} THEN 1 END)",
        failing_rows=_rows_where(_out_of_range(p, f, "t."), k),
    )


def _accepted_values(p, f, k, types=None) -> RuleSql:
    # Values compare as strings so one list works for string and integer columns; NULL is not judged here
    # (that is null_count's job).
    col_type = str((types or {}).get(p["column"]) or "").lower()
    if col_type in INTEGRAL_TYPES and all(re.fullmatch(r"-?\d{1,18}", v) for v in p["values"]):
        # An integer column against integer values: compare numbers, not a per-row int-to-string cast.
        values = ", ".join(str(int(v)) for v in p["values"])
        cast = "{c}"
    else:
        values, cast = f["values"], "CAST({c} AS STRING)"

    def cond(alias: str) -> str:
        c = f"{alias}{f['column']}"
        return f"{c} IS NOT NULL AND {cast.format(c=c)} NOT IN ({values})"

    return RuleSql(scan=f"count(CASE WHEN {cond('')} THEN 1 END)", failing_rows=_rows_where(cond("t."), k))


def _regex_match_rate(p, f, k, types=None) -> RuleSql:
    c, rx = f["column"], f["pattern"]
    # Rate among non-NULL values; no values means nothing failed to match: 1.0.
    scan = (
        f"coalesce(count(CASE WHEN CAST({c} AS STRING) RLIKE {rx} THEN 1 END) / nullif(count({c}), 0), 1.0)"
    )
    return RuleSql(
        scan=scan,
        failing_rows=_rows_where(f"t.{c} IS NOT NULL AND NOT (CAST(t.{c} AS STRING) RLIKE {rx})", k),
    )


UNIT_SECONDS = {"seconds": 1, "minutes": 60, "hours": 3600, "days": 86400}


def _freshness(p, f, k, types=None) -> RuleSql:
    unit = UNIT_SECONDS[p["unit"]]
    scan = (
        f"(unix_timestamp(to_timestamp('${{_window_end}}')) - unix_timestamp(max({f['column']}))) / {unit}.0"
    )
    return RuleSql(scan=scan)


def _column_sum(p, f, k, types=None) -> RuleSql:
    return RuleSql(scan=f"coalesce(sum({f['column']}), 0)")


def _column_avg(p, f, k, types=None) -> RuleSql:
    return RuleSql(scan=f"avg({f['column']})")


def _distinct_count(p, f, k, types=None) -> RuleSql:
    return RuleSql(scan=f"count(DISTINCT {f['columns']})")


def _other_where(p: Mapping[str, Any], alias: str = "") -> str:
    if p.get("other_partition", "same") == "all":
        return ""
    prefix = f"{alias}." if alias else ""
    return f" WHERE {prefix}{quote_ident(p['partition_column'])} = '${{dt}}'"


def _referential(p, f, k, types=None) -> RuleSql:
    keys, other_keys = p["key"], p.get("other_key") or p["key"]
    if len(keys) != len(other_keys):
        raise ParamError(f"referential: key has {len(keys)} column(s) but other_key has {len(other_keys)}")
    on = " AND ".join(
        f"t.{quote_ident(a)} = o.{quote_ident(b)}" for a, b in zip(keys, other_keys, strict=True)
    )
    other = f"(SELECT DISTINCT {', '.join(quote_ident(c) for c in other_keys)} FROM {f['other']}{_other_where(p)}) o"
    anti = f"FROM ${{table}} t LEFT ANTI JOIN {other} ON {on} WHERE {_not_null_all(keys, 't')}"
    rows = f"SELECT {_t_cols(k)} {anti} LIMIT ${{limit}}" if k else None
    return RuleSql(query=f"SELECT count(1) {anti}", failing_rows=rows)


def _metric(p: Mapping[str, Any], column_param: str) -> str:
    if p["metric"] == "count":
        return "count(1)"
    if column_param not in p:
        raise ParamError(f"metric 'sum' needs param '{column_param}'")
    return f"coalesce(sum({quote_ident(p[column_param])}), 0)"


def _reconciliation(p, f, k, types=None) -> RuleSql:
    if p["against"] in ("source_count", "target_count"):
        if p["metric"] != "count":
            raise ParamError(f"reconciliation against the job log's {p['against']} needs metric: count")
        return RuleSql(scan="count(1)")
    if "other" not in p:
        raise ParamError("reconciliation against a table needs param 'other' (db.table)")
    if p["metric"] == "sum" and "other_column" not in p and "column" in p:
        p = {**p, "other_column": p["column"]}
    ref = f"SELECT {_metric(p, 'other_column')} FROM {f['other']}{_other_where(p)}"
    return RuleSql(scan=_metric(p, "column"), reference=ref)


def _custom_sql(p, f, k, types=None) -> RuleSql:
    # The SQL is checked by `build_rule` (with the rule's `reads:` declaration) and again by the compiler.
    return RuleSql(query=p["sql"].strip().rstrip(";"))


_OTHER_PARTITION = (
    ParamSpec("other_partition", STRING, required=False, default="same", choices=("same", "all")),
    # The other table's partition column; checked against its schema when known_tables gives columns.
    ParamSpec("partition_column", COLUMN, required=False, default="dt", of_table="other"),
)

TEMPLATES: dict[str, Template] = {}


def _add(t: Template) -> None:
    TEMPLATES[t.name] = t


_add(Template("row_count", (), "count(1)", _row_count, "completeness", description="rows in the partition"))
_add(
    Template(
        "null_count",
        (_c("column"),),
        "count(CASE WHEN ${column} IS NULL THEN 1 END)",
        _null_count,
        "completeness",
        description="rows where the column is NULL",
    )
)
_add(
    Template(
        "null_rate",
        (_c("column"),),
        "coalesce(count(CASE WHEN ${column} IS NULL THEN 1 END) / nullif(count(1), 0), 0.0)",
        _null_rate,
        "completeness",
        description="share of rows where the column is NULL (0..1; 0 on an empty partition)",
    )
)
_add(
    Template(
        "duplicate_count",
        (ParamSpec("key", COLUMNS),),
        "count(CASE WHEN <all ${key} NOT NULL> THEN 1 END) - count(DISTINCT ${key})",
        _duplicate_count,
        "uniqueness",
        key_param="key",
        description="rows whose (non-NULL) key repeats an earlier row's key: rows - distinct keys",
    )
)
_add(
    Template(
        "value_range",
        (
            ParamSpec("column", COLUMN, types=NUMERIC_TYPES),
            ParamSpec("min", NUMBER, required=False),
            ParamSpec("max", NUMBER, required=False),
        ),
        "count(CASE WHEN ${column} IS NOT NULL AND (${column} < ${min} OR ${column} > ${max}) THEN 1 END)",
        _value_range,
        "validity",
        description="non-NULL values outside [min, max]",
    )
)
_add(
    Template(
        "accepted_values",
        (_c("column"), ParamSpec("values", STRING_LIST)),
        "count(CASE WHEN ${column} IS NOT NULL AND CAST(${column} AS STRING) NOT IN (${values}) THEN 1 END)",
        _accepted_values,
        "validity",
        description="non-NULL values not in the list (compared as strings)",
    )
)
_add(
    Template(
        "regex_match_rate",
        (_c("column"), ParamSpec("pattern", REGEX)),
        "coalesce(count(CASE WHEN CAST(${column} AS STRING) RLIKE ${pattern} THEN 1 END) / "
        "nullif(count(${column}), 0), 1.0)",
        _regex_match_rate,
        "validity",
        description="share of non-NULL values matching the Java regex (RLIKE: a match anywhere; anchor it)",
    )
)
_add(
    Template(
        "freshness",
        (
            ParamSpec("column", COLUMN, types=TIME_TYPES),
            ParamSpec("unit", STRING, required=False, default="hours", choices=tuple(UNIT_SECONDS)),
        ),
        "(unix_timestamp(to_timestamp('${DATA_RANGE_END}')) - unix_timestamp(max(${column}))) / ${unit}",
        _freshness,
        "timeliness",
        description="lag between the partition's end and the newest timestamp in the column",
    )
)
_add(
    Template(
        "column_sum",
        (ParamSpec("column", COLUMN, types=NUMERIC_TYPES),),
        "coalesce(sum(${column}), 0)",
        _column_sum,
        "accuracy",
        description="sum of the column (a base metric for fluctuation)",
    )
)
_add(
    Template(
        "column_avg",
        (ParamSpec("column", COLUMN, types=NUMERIC_TYPES),),
        "avg(${column})",
        _column_avg,
        "accuracy",
        description="average of the column (NULL on an empty partition)",
    )
)
_add(
    Template(
        "distinct_count",
        (ParamSpec("columns", COLUMNS),),
        "count(DISTINCT ${columns})",
        _distinct_count,
        "uniqueness",
        description="distinct non-NULL combinations of the columns",
    )
)
_add(
    Template(
        "referential",
        (
            ParamSpec("key", COLUMNS),
            ParamSpec("other", TABLE),
            ParamSpec("other_key", COLUMNS, required=False, of_table="other"),
            *_OTHER_PARTITION,
        ),
        "SELECT count(1) FROM ${table} t LEFT ANTI JOIN (SELECT DISTINCT ${other_key} FROM ${other} "
        "WHERE ${partition_column} = '${dt}') o ON t.${key} = o.${other_key} WHERE t.${key} IS NOT NULL",
        _referential,
        "consistency",
        scan_based=False,
        key_param="key",
        description="rows whose non-NULL key is missing from the other table's same partition",
    )
)
_add(
    Template(
        "reconciliation",
        (
            ParamSpec("metric", STRING, required=False, default="count", choices=("count", "sum")),
            ParamSpec("column", COLUMN, required=False, types=NUMERIC_TYPES),
            ParamSpec(
                "against",
                STRING,
                required=False,
                default="table",
                choices=("table", "source_count", "target_count"),
            ),
            ParamSpec("other", TABLE, required=False),
            ParamSpec("other_column", COLUMN, required=False, of_table="other", types=NUMERIC_TYPES),
            ParamSpec("tolerance", NUMBER, required=False, default=0, minimum=0),
            ParamSpec("tolerance_type", STRING, required=False, default="abs", choices=("abs", "percent")),
            *_OTHER_PARTITION,
        ),
        "this: SELECT count(1) | sum(${column}) FROM ${table}; other: SELECT count(1) | sum(${other_column}) "
        "FROM ${other} WHERE ${partition_column} = '${dt}', or the job log's source_count/target_count; "
        "actual = |this - other| (abs) or |this - other| / |other| * 100 (percent); passes when actual <= tolerance",
        _reconciliation,
        "accuracy",
        mode="reconcile",
        description="this table's count/sum vs an upstream table's or the job log's count, within a tolerance",
    )
)
_add(
    Template(
        "custom_sql",
        (ParamSpec("sql", SQL),),
        "${sql}",
        _custom_sql,
        "accuracy",
        scan_based=False,
        description="any SELECT returning one scalar; ${table} is the partition's rows, ${dt} etc. available",
    )
)

FLUCTUATION_OWN = (
    ParamSpec("base", STRING),
    ParamSpec("window", NUMBER, required=False, default=7, integer=True, minimum=1),
    ParamSpec("min_history", NUMBER, required=False, default=3, integer=True, minimum=1),
    ParamSpec("lower_pct", NUMBER, required=False, default=20, minimum=0),
    ParamSpec("upper_pct", NUMBER, required=False, default=20, minimum=0),
)


def fluctuation_bases() -> tuple[str, ...]:
    return tuple(n for n, t in TEMPLATES.items() if t.scan_based and t.mode == "compare")


def _fluctuation_base(raw: Mapping[str, Any]) -> Template:
    base = raw.get("base")
    if base not in fluctuation_bases():
        raise ParamError(f"param 'base' must be one of {', '.join(fluctuation_bases())}, got {base!r}")
    return TEMPLATES[base]


def _fluctuation_extra(raw: Mapping[str, Any]) -> tuple[ParamSpec, ...]:
    if raw.get("base") is None:
        return ()
    return _fluctuation_base(raw).params


def _fluctuation(p, f, k, types=None) -> RuleSql:
    # Only the base metric's value is needed; failing-row samples make no sense for a trend.
    return RuleSql(scan=_fluctuation_base(p).build(p, f, (), types).scan)


_add(
    Template(
        "fluctuation",
        FLUCTUATION_OWN,
        "<the base template's scan>; passes when mean(last ${window} partitions' actual values of this rule) * "
        "(1 - ${lower_pct}/100) <= actual <= mean * (1 + ${upper_pct}/100); fewer than ${min_history} history "
        "points: a warning",
        _fluctuation,
        "consistency",
        mode="fluctuation",
        description="today's base metric vs the mean of its own recent history, within percent bounds",
        extra_params=_fluctuation_extra,
    )
)


def get_template(name: str) -> Template:
    try:
        return TEMPLATES[name]
    except KeyError:
        raise ParamError(f"unknown template {name!r} (known: {', '.join(sorted(TEMPLATES))})") from None
