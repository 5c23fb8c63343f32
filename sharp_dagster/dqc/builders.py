"""The SQL builder of each rule template: from validated parameters and their SQL fragments to a `RuleSql`.

A builder takes `(params, fragments, sample_key, column types)` (`Builder`): the validated values
(`params.validate_params`), their rendered SQL fragments (`params.render`), the rule's `sample_key` columns and the
asset's column types (None when unknown). It yields up to four pieces of SQL:
- `scan`: an aggregate expression over the partition's rows. All scan expressions of one asset partition are
  merged into one `SELECT ... FROM <view>` by the compiler: one pass over the data for any number of rules.
- `query`: a complete query returning one scalar, for rules that cannot share the scan (they join another
  table, or are custom SQL).
- `reference`: the other side of a reconciliation (the upstream table's count or sum).
- `failing_rows`: a query selecting the `sample_key` columns of failing rows (`${limit}` rows at most); it runs
  only when the rule failed.

Which template uses which builder is the catalogue's business (`templates.py`).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sharp_dagster.dqc.errors import ParamError
from sharp_dagster.dqc.params import INTEGRAL_TYPES
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


def _t_cols(names: Sequence[str], alias: str = "t") -> str:
    return ", ".join(f"{alias}.{quote_ident(c)}" for c in names)


def _rows_where(cond: str, sample_key: Sequence[str]) -> str | None:
    if not sample_key:
        return None
    return f"SELECT {_t_cols(sample_key)} FROM ${{table}} t WHERE {cond} LIMIT ${{limit}}"


def row_count(p, f, k, types=None) -> RuleSql:
    return RuleSql(scan="count(1)")


def null_count(p, f, k, types=None) -> RuleSql:
    c = f["column"]
    return RuleSql(
        scan=f"count(CASE WHEN {c} IS NULL THEN 1 END)", failing_rows=_rows_where(f"t.{c} IS NULL", k)
    )


def null_rate(p, f, k, types=None) -> RuleSql:
    c = f["column"]
    # Zero rows hold zero nulls: the rate is 0, not NULL, so an empty partition is judged by row_count rules.
    return RuleSql(
        scan=f"coalesce(count(CASE WHEN {c} IS NULL THEN 1 END) / nullif(count(1), 0), 0.0)",
        failing_rows=_rows_where(f"t.{c} IS NULL", k),
    )


def _not_null_all(cols: Sequence[str], alias: str = "") -> str:
    prefix = f"{alias}." if alias else ""
    return " AND ".join(f"{prefix}{quote_ident(c)} IS NOT NULL" for c in cols)


def duplicate_count(p, f, k, types=None) -> RuleSql:
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


def value_range(p, f, k, types=None) -> RuleSql:
    if "min" in p and "max" in p and p["min"] > p["max"]:
        raise ParamError(f"value_range: min {p['min']} is greater than max {p['max']}")
    return RuleSql(
        scan=f"count(CASE WHEN {_out_of_range(p, f, '')} THEN 1 END)",
        failing_rows=_rows_where(_out_of_range(p, f, "t."), k),
    )


def accepted_values(p, f, k, types=None) -> RuleSql:
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


def regex_match_rate(p, f, k, types=None) -> RuleSql:
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


def freshness(p, f, k, types=None) -> RuleSql:
    unit = UNIT_SECONDS[p["unit"]]
    scan = (
        f"(unix_timestamp(to_timestamp('${{_window_end}}')) - unix_timestamp(max({f['column']}))) / {unit}.0"
    )
    return RuleSql(scan=scan)


def column_sum(p, f, k, types=None) -> RuleSql:
    return RuleSql(scan=f"coalesce(sum({f['column']}), 0)")


def column_avg(p, f, k, types=None) -> RuleSql:
    return RuleSql(scan=f"avg({f['column']})")


def distinct_count(p, f, k, types=None) -> RuleSql:
    return RuleSql(scan=f"count(DISTINCT {f['columns']})")


def _other_rows(p: Mapping[str, Any], f: Mapping[str, str]) -> str:
    """The other table's rows a rule compares with: its partition of the same day (`same`), the day's tag of a
    table that keeps its days as tags (`tag`: an ODS table, `cdc.ods.versions`), or all of it (`all`)."""
    which = p.get("other_partition", "same")
    if which == "all":
        return f["other"]
    if which == "tag":
        return f"{f['other']} VERSION AS OF '${{dt}}'"
    return f"{f['other']} WHERE {quote_ident(p['partition_column'])} = '${{dt}}'"


def referential(p, f, k, types=None) -> RuleSql:
    keys, other_keys = p["key"], p.get("other_key") or p["key"]
    if len(keys) != len(other_keys):
        raise ParamError(f"referential: key has {len(keys)} column(s) but other_key has {len(other_keys)}")
    on = " AND ".join(
        f"t.{quote_ident(a)} = o.{quote_ident(b)}" for a, b in zip(keys, other_keys, strict=True)
    )
    other = f"(SELECT DISTINCT {', '.join(quote_ident(c) for c in other_keys)} FROM {_other_rows(p, f)}) o"
    anti = f"FROM ${{table}} t LEFT ANTI JOIN {other} ON {on} WHERE {_not_null_all(keys, 't')}"
    rows = f"SELECT {_t_cols(k)} {anti} LIMIT ${{limit}}" if k else None
    return RuleSql(query=f"SELECT count(1) {anti}", failing_rows=rows)


def _metric(p: Mapping[str, Any], column_param: str) -> str:
    if p["metric"] == "count":
        return "count(1)"
    if column_param not in p:
        raise ParamError(f"metric 'sum' needs param '{column_param}'")
    return f"coalesce(sum({quote_ident(p[column_param])}), 0)"


def reconciliation(p, f, k, types=None) -> RuleSql:
    if p["against"] in ("source_count", "target_count"):
        if p["metric"] != "count":
            raise ParamError(f"reconciliation against the job log's {p['against']} needs metric: count")
        return RuleSql(scan="count(1)")
    if "other" not in p:
        raise ParamError("reconciliation against a table needs param 'other' (db.table)")
    if p["metric"] == "sum" and "other_column" not in p and "column" in p:
        p = {**p, "other_column": p["column"]}
    ref = f"SELECT {_metric(p, 'other_column')} FROM {_other_rows(p, f)}"
    return RuleSql(scan=_metric(p, "column"), reference=ref)


def custom_sql(p, f, k, types=None) -> RuleSql:
    # The SQL is checked by `build_rule` (with the rule's `reads:` declaration) and again by the compiler.
    return RuleSql(query=p["sql"].strip().rstrip(";"))
