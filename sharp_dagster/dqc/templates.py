"""Rule templates: the catalogue (`TEMPLATES`) of parameterised Spark SQL that measures ONE number over an asset's
partition, as in the warehouse's DQC design.

Each template has a name, typed parameters (`params.py` describes how a rule's values are checked and rendered),
a human-readable SQL text, a default dimension and a description; its builder (`builders.py`) makes a rule's SQL
(`builders.RuleSql`) from the validated parameters.

`mode` tells the evaluator how the measured number becomes a verdict: `compare` (actual vs expect),
`reconcile` (difference between this side and the reference or the job log, vs a tolerance) or
`fluctuation` (actual vs the mean of the rule's own history, within percent bounds).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from sharp_dagster.dqc import builders
from sharp_dagster.dqc.builders import Builder, RuleSql
from sharp_dagster.dqc.errors import ParamError
from sharp_dagster.dqc.params import (
    COLUMN,
    COLUMNS,
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


def _c(name: str) -> ParamSpec:
    return ParamSpec(name, COLUMN)


_OTHER_PARTITION = (
    # `same`: the other table's `dt` partition of the rule's day; `tag`: the day's tag of a table that keeps its
    # days as Iceberg tags (an ODS table: `VERSION AS OF '${dt}'`); `all`: the whole table (an ODS table's latest).
    ParamSpec("other_partition", STRING, required=False, default="same", choices=("same", "tag", "all")),
    # The other table's partition column; checked against its schema when known_tables gives columns.
    ParamSpec("partition_column", COLUMN, required=False, default="dt", of_table="other"),
)

TEMPLATES: dict[str, Template] = {}


def _add(t: Template) -> None:
    TEMPLATES[t.name] = t


_add(
    Template(
        "row_count", (), "count(1)", builders.row_count, "completeness", description="rows in the partition"
    )
)
_add(
    Template(
        "null_count",
        (_c("column"),),
        "count(CASE WHEN ${column} IS NULL THEN 1 END)",
        builders.null_count,
        "completeness",
        description="rows where the column is NULL",
    )
)
_add(
    Template(
        "null_rate",
        (_c("column"),),
        "coalesce(count(CASE WHEN ${column} IS NULL THEN 1 END) / nullif(count(1), 0), 0.0)",
        builders.null_rate,
        "completeness",
        description="share of rows where the column is NULL (0..1; 0 on an empty partition)",
    )
)
_add(
    Template(
        "duplicate_count",
        (ParamSpec("key", COLUMNS),),
        "count(CASE WHEN <all ${key} NOT NULL> THEN 1 END) - count(DISTINCT ${key})",
        builders.duplicate_count,
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
        builders.value_range,
        "validity",
        description="non-NULL values outside [min, max]",
    )
)
_add(
    Template(
        "accepted_values",
        (_c("column"), ParamSpec("values", STRING_LIST)),
        "count(CASE WHEN ${column} IS NOT NULL AND CAST(${column} AS STRING) NOT IN (${values}) THEN 1 END)",
        builders.accepted_values,
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
        builders.regex_match_rate,
        "validity",
        description="share of non-NULL values matching the Java regex (RLIKE: a match anywhere; anchor it)",
    )
)
_add(
    Template(
        "freshness",
        (
            ParamSpec("column", COLUMN, types=TIME_TYPES),
            ParamSpec("unit", STRING, required=False, default="hours", choices=tuple(builders.UNIT_SECONDS)),
        ),
        "(unix_timestamp(to_timestamp('${DATA_RANGE_END}')) - unix_timestamp(max(${column}))) / ${unit}",
        builders.freshness,
        "timeliness",
        description="lag between the partition's end and the newest timestamp in the column",
    )
)
_add(
    Template(
        "column_sum",
        (ParamSpec("column", COLUMN, types=NUMERIC_TYPES),),
        "coalesce(sum(${column}), 0)",
        builders.column_sum,
        "accuracy",
        description="sum of the column (a base metric for fluctuation)",
    )
)
_add(
    Template(
        "column_avg",
        (ParamSpec("column", COLUMN, types=NUMERIC_TYPES),),
        "avg(${column})",
        builders.column_avg,
        "accuracy",
        description="average of the column (NULL on an empty partition)",
    )
)
_add(
    Template(
        "distinct_count",
        (ParamSpec("columns", COLUMNS),),
        "count(DISTINCT ${columns})",
        builders.distinct_count,
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
        builders.referential,
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
        builders.reconciliation,
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
        builders.custom_sql,
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
