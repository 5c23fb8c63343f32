"""Typed parameters of rule templates: what each may hold, how a rule's values are checked and rendered.

Rendering happens in two phases so that nothing a rule author writes reaches Spark unchecked:

1. At load time (`validate_params`, then `render`) every parameter is validated for its type and rendered to a SQL
   fragment: identifiers must match `^[A-Za-z_][A-Za-z0-9_]*$` *and* exist in the table's schema, and are
   back-quoted; strings and regexes become escaped literals (see `quoting.sql_string`); numbers are re-printed from
   floats. The template's builder (`builders.py`) makes the rule's SQL (`RuleSql`) from those fragments; it still
   holds the run-time placeholders of `CONTEXT_VARIABLES`.
2. At run time the compiler fills those from the run's context (`${table}` is the partition's view; `${dt}`,
   `${partition}`, `${DATA_RANGE_START}`, `${DATA_RANGE_END}` are values checked against a safe character set).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from sharp_dagster.dqc.errors import ParamError
from sharp_dagster.dqc.java_regex import java_regex_problem
from sharp_dagster.dqc.quoting import IDENTIFIER, format_number, quote_ident, quote_table, sql_string
from sharp_dagster.dqc.sqlguard import DATA_SOURCES

MAX_STRING = 20_000  # characters of a string parameter (a custom SQL included)
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


class Parameterised(Protocol):
    """What checking and rendering read of a template (`templates.Template` is one): its name, for messages, and
    its parameter specs for the values given (a fluctuation rule's specs depend on its `base`). Named here so that
    this module, which the catalogue imports for `ParamSpec`, need not import the catalogue back."""

    @property
    def name(self) -> str: ...

    def param_specs(self, raw: Mapping[str, Any]) -> tuple[ParamSpec, ...]: ...


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
    if not isinstance(value, str) or not IDENTIFIER.fullmatch(value):
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
    if not (IDENTIFIER.fullmatch(db) and IDENTIFIER.fullmatch(name)):
        raise ParamError(f"param '{spec.name}' must be a table name of plain identifiers, got {value!r}")
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
    if len(value) > MAX_STRING:
        raise ParamError(f"param '{spec.name}' is {len(value)} characters long, more than {MAX_STRING}")
    if spec.choices and value not in spec.choices:
        raise ParamError(f"param '{spec.name}' must be one of {', '.join(spec.choices)}, got {value!r}")
    return value


def validate_params(
    template: Parameterised, raw: Mapping[str, Any] | None, schemas: Schemas
) -> dict[str, Any]:
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
                re.compile(text)  # a pattern Python refuses is surely a typo
            except re.error as exc:
                raise ParamError(f"param '{spec.name}' is not a valid regex: {exc}") from None
            problem = java_regex_problem(text)  # Spark runs it with Java's regex engine
            if problem:
                raise ParamError(f"param '{spec.name}' is not a valid Java regex (Spark's RLIKE): {problem}")
            out[spec.name] = text
        elif spec.type == SQL:
            out[spec.name] = _string(spec, value)
        else:  # pragma: no cover - specs are ours
            raise ParamError(f"param '{spec.name}': unknown type {spec.type}")
    return out


def render(template: Parameterised, params: Mapping[str, Any]) -> dict[str, str]:
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
