"""Rule templates: parameterised Spark SQL that measures ONE number over an asset's partition.

A template is SQL text with `${placeholders}` plus typed parameters, as in the DQC design of seed 001. Rendering
happens in two phases so that nothing a rule author writes reaches Spark unchecked:

1. At load time (`Template.build`) every parameter is validated for its type and rendered to a SQL fragment:
   identifiers must match `^[A-Za-z_][A-Za-z0-9_]*$` *and* exist in the table's schema, and are back-quoted;
   strings and regexes become escaped literals (see `sql_string`); numbers are re-printed from floats. The
   result (`RuleSql`) still holds the run-time placeholders of `CONTEXT_VARIABLES`.
2. At run time the compiler fills those from the run's context (`${table}` is the partition's view; `${dt}`,
   `${partition}`, `${DATA_RANGE_START}`, `${DATA_RANGE_END}` are values checked against a safe character set).

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

import math
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
PLACEHOLDER = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")

# Filled by the compiler at run time; everything else must be resolved at load time.
CONTEXT_VARIABLES = frozenset({"table", "partition", "dt", "DATA_RANGE_START", "DATA_RANGE_END"})
# Internal run-time placeholders used by built-in templates (normalised timestamps, sample size).
INTERNAL_VARIABLES = frozenset({"_window_start", "_window_end", "limit"})

NUMERIC_TYPES = (
    "tinyint",
    "smallint",
    "int",
    "integer",
    "bigint",
    "long",
    "float",
    "double",
    "decimal",
    "short",
)
INTEGRAL_TYPES = ("tinyint", "smallint", "int", "integer", "bigint", "long", "short", "byte")
TIME_TYPES = ("timestamp", "timestamp_ntz", "date", "string")

COLUMN = "column"
COLUMNS = "columns"
NUMBER = "number"
STRING = "string"
STRING_LIST = "string_list"
TABLE = "table"
REGEX = "regex"
SQL = "sql"
PARAM_TYPES = (COLUMN, COLUMNS, NUMBER, STRING, STRING_LIST, TABLE, REGEX, SQL)


class ParamError(ValueError):
    """A parameter is missing, unknown or not of its declared type; rules.py adds the file and rule id."""


# ------------------------------------------------------------------------------------------------ rendering
def sql_string(value: str) -> str:
    """A Spark SQL string literal that cannot end early or smuggle in a placeholder.

    Quote and backslash are backslash-escaped (Spark's default literal syntax); `$` and control characters are
    written as `\\uXXXX` so that no `${...}` survives in the SQL text for variable substitution to expand.

    >>> sql_string("it's")
    "'it\\\\'s'"
    """
    out = []
    for ch in value:
        if ch == "\\":
            out.append("\\\\")
        elif ch == "'":
            out.append("\\'")
        elif ch == "$" or ch == '"' or ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append(f"\\u{ord(ch):04x}")
        else:
            out.append(ch)
    return "'" + "".join(out) + "'"


def quote_ident(name: str) -> str:
    if not IDENTIFIER.match(name):
        raise ParamError(f"not a plain identifier: {name!r}")
    return f"`{name}`"


def quote_table(name: str) -> str:
    """`db.table` (or a bare temp-view name) as back-quoted identifiers."""
    parts = name.split(".")
    if not 1 <= len(parts) <= 2:
        raise ParamError(f"not a table name of the form db.table: {name!r}")
    return ".".join(quote_ident(p) for p in parts)


def format_number(value: float | int) -> str:
    if isinstance(value, int):
        return str(value)
    if value.is_integer() and abs(value) < 1e15:
        return str(int(value))
    return repr(float(value))


def fill(text: str, values: Mapping[str, str], keep: frozenset[str] = frozenset()) -> str:
    """Replace `${name}` from `values`; names in `keep` stay for a later phase; any other name is an error."""

    def sub(match: re.Match[str]) -> str:
        name = match.group(1)
        if name in values:
            return values[name]
        if name in keep:
            return match.group(0)
        raise ParamError(f"unknown placeholder ${{{name}}}")

    return PLACEHOLDER.sub(sub, text)


# ------------------------------------------------------------------------------------------------ parameters
@dataclass(frozen=True)
class ParamSpec:
    """One typed parameter. `of_table` names the TABLE parameter whose schema a column must exist in."""

    name: str
    type: str
    required: bool = True
    default: Any = None
    choices: tuple[str, ...] = ()
    integer: bool = False
    minimum: float | None = None
    of_table: str | None = None
    types: tuple[str, ...] = ()  # accepted column types (prefix match); empty = any
    doc: str = ""


@dataclass(frozen=True)
class Schemas:
    """What validation may look at: the asset's columns and the known other tables (with columns if known)."""

    columns: Mapping[str, str] | None  # column -> type of the rule's own asset; None = do not check existence
    tables: (
        Mapping[str, Mapping[str, str] | None] | None
    )  # "db.table" -> columns (or None); None = do not check


def _number(spec: ParamSpec, value: Any) -> float | int:
    if isinstance(value, bool):
        raise ParamError(f"param '{spec.name}' must be a number, got {value!r}")
    if isinstance(value, str):
        try:
            value = float(value.strip())  # YAML 1.1 reads `1e-3` as a string
        except ValueError:
            raise ParamError(f"param '{spec.name}' must be a number, got {value!r}") from None
    if not isinstance(value, int | float) or not math.isfinite(value):
        raise ParamError(f"param '{spec.name}' must be a finite number, got {value!r}")
    if spec.integer:
        if float(value) != int(value):
            raise ParamError(f"param '{spec.name}' must be an integer, got {value!r}")
        value = int(value)
    if spec.minimum is not None and value < spec.minimum:
        raise ParamError(f"param '{spec.name}' must be >= {format_number(spec.minimum)}, got {value!r}")
    return value


def check_column(spec: ParamSpec, value: Any, columns: Mapping[str, str] | None, where: str) -> str:
    if not isinstance(value, str) or not IDENTIFIER.match(value):
        raise ParamError(f"param '{spec.name}' must be a plain column identifier, got {value!r}")
    if columns is None:
        return value
    lowered = {c.lower(): c for c in columns}
    actual = lowered.get(value.lower())
    if actual is None:
        known = ", ".join(sorted(columns)) or "(none)"
        raise ParamError(f"unknown column '{value}' in param '{spec.name}' ({where} has: {known})")
    col_type = str(columns[actual] or "").lower()
    if spec.types and col_type and not col_type.startswith(spec.types):
        raise ParamError(
            f"param '{spec.name}': column '{actual}' has type {col_type}, expected one of {', '.join(spec.types)}"
        )
    return actual  # Spark resolves columns case-insensitively; keep the schema's spelling


def _table(spec: ParamSpec, value: Any, schemas: Schemas) -> str:
    if not isinstance(value, str) or value.count(".") != 1:
        raise ParamError(f"param '{spec.name}' must be a table name db.table, got {value!r}")
    db, _, name = value.partition(".")
    if not (IDENTIFIER.match(db) and IDENTIFIER.match(name)):
        raise ParamError(f"param '{spec.name}' must be a table name of plain identifiers, got {value!r}")
    from sharp_dagster.dqc.sqlguard import DATA_SOURCES

    if db.lower() in DATA_SOURCES:  # Spark would read `name` as a path through that data source
        raise ParamError(f"param '{spec.name}': {db!r} is a Spark data source, {value} would read a path")
    if schemas.tables is not None and value not in schemas.tables:
        known = ", ".join(sorted(schemas.tables)) or "(none)"
        raise ParamError(f"unknown table '{value}' in param '{spec.name}' (known tables: {known})")
    return value


def _string(spec: ParamSpec, value: Any) -> str:
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise ParamError(f"param '{spec.name}' must be a string, got {value!r}")
    value = str(value)
    if spec.choices and value not in spec.choices:
        raise ParamError(f"param '{spec.name}' must be one of {', '.join(spec.choices)}, got {value!r}")
    return value


def validate_params(template: Template, raw: Mapping[str, Any] | None, schemas: Schemas) -> dict[str, Any]:
    """Check `raw` against the template's parameters; return normalised values (defaults filled in)."""
    raw = dict(raw or {})
    specs = template.param_specs(raw)
    unknown = sorted(set(raw) - {s.name for s in specs})
    if unknown:
        allowed = ", ".join(s.name for s in specs) or "(none)"
        raise ParamError(
            f"unknown param(s) {', '.join(unknown)} for template {template.name} (allowed: {allowed})"
        )
    out: dict[str, Any] = {}
    for spec in specs:
        if spec.name not in raw or raw[spec.name] is None:
            if spec.required:
                raise ParamError(f"missing param '{spec.name}' ({spec.type}) for template {template.name}")
            if spec.default is not None:
                out[spec.name] = spec.default
            continue
        value = raw[spec.name]
        if spec.of_table:
            table = out.get(spec.of_table)
            cols = (schemas.tables or {}).get(table) if table else None
            where = table or "the other table"
        else:
            cols, where = schemas.columns, "the asset"
        if spec.type == COLUMN:
            out[spec.name] = check_column(spec, value, cols, where)
        elif spec.type == COLUMNS:
            items = [value] if isinstance(value, str) else value
            if not isinstance(items, list | tuple) or not items:
                raise ParamError(f"param '{spec.name}' must be a non-empty list of columns, got {value!r}")
            out[spec.name] = [check_column(spec, v, cols, where) for v in items]
        elif spec.type == NUMBER:
            out[spec.name] = _number(spec, value)
        elif spec.type == STRING:
            out[spec.name] = _string(spec, value)
        elif spec.type == STRING_LIST:
            if not isinstance(value, list | tuple) or not value:
                raise ParamError(f"param '{spec.name}' must be a non-empty list of strings, got {value!r}")
            out[spec.name] = [_string(spec, v) for v in value]
        elif spec.type == TABLE:
            out[spec.name] = _table(spec, value, schemas)
        elif spec.type == REGEX:
            text = _string(spec, value)
            try:
                re.compile(
                    text
                )  # Java regex differs in details, but a pattern Python rejects is surely a typo
            except re.error as exc:
                raise ParamError(f"param '{spec.name}' is not a valid regex: {exc}") from None
            out[spec.name] = text
        elif spec.type == SQL:
            out[spec.name] = _string(spec, value)
        else:  # pragma: no cover - specs are ours
            raise ParamError(f"param '{spec.name}': unknown type {spec.type}")
    return out


def render(template: Template, params: Mapping[str, Any]) -> dict[str, str]:
    """SQL fragments for the validated parameters, by name."""
    frags: dict[str, str] = {}
    for spec in template.param_specs(params):
        if spec.name not in params:
            continue
        value = params[spec.name]
        if spec.type == COLUMN:
            frags[spec.name] = quote_ident(value)
        elif spec.type == COLUMNS:
            frags[spec.name] = ", ".join(quote_ident(v) for v in value)
        elif spec.type == NUMBER:
            frags[spec.name] = format_number(value)
        elif spec.type in (STRING, REGEX):
            frags[spec.name] = sql_string(value)
        elif spec.type == STRING_LIST:
            frags[spec.name] = ", ".join(sql_string(v) for v in value)
        elif spec.type == TABLE:
            frags[spec.name] = quote_table(value)
        elif spec.type == SQL:
            frags[spec.name] = value
    return frags


# ------------------------------------------------------------------------------------------------ templates
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


def check_custom_sql(text: str, reads: Iterable[str] = ()) -> None:
    """Custom SQL must be one SELECT (no DDL/DML, no second statement) using only known placeholders, reading
    only `${table}`, its own CTEs and the `reads` tables, and calling nothing that reaches the JVM or the file
    system (`sharp_dagster.dqc.sqlguard`). Raises `ParamError` (a `SqlRejected` with the SQL line when it can)."""
    from sharp_dagster.dqc.sqlguard import STAGED_PROBE, check_select

    names = set(PLACEHOLDER.findall(text))
    unknown = sorted(names - CONTEXT_VARIABLES)
    if unknown:
        known = ", ".join("${" + n + "}" for n in sorted(CONTEXT_VARIABLES))
        raise ParamError(f"custom sql: unknown placeholder(s) {', '.join(unknown)} (known: {known})")
    if STAGED_PROBE in text.lower():
        raise ParamError(f"custom sql may not name {STAGED_PROBE}: read the partition through ${{table}}")
    probe = PLACEHOLDER.sub(lambda m: STAGED_PROBE if m.group(1) == "table" else "0", text)
    if "${" in probe:
        # e.g. ${spark.app.name}: Spark's own variable substitution would expand it; only ours are allowed.
        raise ParamError("custom sql: only ${name} placeholders of the run context are allowed")
    check_select(probe, reads)


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
