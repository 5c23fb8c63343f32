"""Reading the fields of a CDC source's YAML (`config.py`), each problem one `ConfigError` naming the file, the
field path and the table: the generic field reader, and the checks of a table's shards, keys and columns."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import date, datetime
from typing import Any

from sharp_dagster.cdc.source.columns import ColumnTypeError, SourceColumn, parse_column
from sharp_dagster.cdc.source.shards import PHYSICAL_TABLE_COLUMN, ShardRule

DROP_COLUMN_POLICIES = ("keep", "drop")
RECREATE_TABLE_POLICIES = ("follow", "fail")
DDL_FIELDS = {"drop_column", "recreate_table"}


@dataclass(frozen=True)
class DdlPolicy:
    """What the daily ODS merge does with the source's DDL where more than one answer is sound (the YAML's `ddl:`;
    README "When the source changes"). Renames, type widenings Iceberg can promote, ADD COLUMN and TRUNCATE are
    always followed; what it cannot follow always fails the day.

    - `drop_column`: `keep` (default: the column stays in ODS, null from the day of the drop on; no value is lost,
      earlier days' tags keep its values) or `drop` (Iceberg drops it from the current state; tags keep it).
    - `recreate_table`: `follow` (default: at a DROP TABLE the table's rows leave ODS, a CREATE TABLE's columns
      apply, columns it lacks as `drop_column` says) or `fail` (the day fails, naming the statement).
    """

    drop_column: str = "keep"
    recreate_table: str = "follow"

    def __post_init__(self) -> None:
        for name, value, allowed in (
            ("drop_column", self.drop_column, DROP_COLUMN_POLICIES),
            ("recreate_table", self.recreate_table, RECREATE_TABLE_POLICIES),
        ):
            if value not in allowed:
                raise ValueError(f"ddl.{name}: expected one of {', '.join(allowed)}, got {value!r}")


def read_ddl_policy(r: FieldReader, value: Any) -> DdlPolicy:
    """The source's `ddl:` mapping (absent: the defaults)."""
    if value is None:
        return DdlPolicy()
    mapping = r.mapping(value, "ddl")
    r.no_unknown(mapping, "ddl", DDL_FIELDS)
    drop = r.string(mapping, "drop_column", "ddl", default="keep")
    recreate = r.string(mapping, "recreate_table", "ddl", default="follow")
    try:
        return DdlPolicy(drop, recreate)
    except ValueError as exc:
        r.fail("", str(exc))  # the message names the field: ddl.<field>
        raise


class ConfigError(ValueError):
    """A CDC configuration problem; the message names the file and the field."""


class FieldReader:
    """Field access with errors of the form `<file>: <field path>: <problem>`."""

    def __init__(self, origin: str):
        self.origin = origin

    def fail(self, where: str, problem: str) -> None:
        location = f"{self.origin}: {where}" if where else self.origin
        raise ConfigError(f"{location}: {problem}")

    @staticmethod
    def _join(where: str, key: str) -> str:
        return f"{where}.{key}" if where else key

    def mapping(self, value: Any, where: str) -> Mapping[str, Any]:
        if not isinstance(value, Mapping):
            self.fail(where or "top level", f"expected a mapping, got {type(value).__name__}")
        return value

    def no_unknown(self, mapping: Mapping[str, Any], where: str, known: set[str]) -> None:
        unknown = sorted(set(mapping) - known)
        if unknown:
            self.fail(
                where or "top level",
                f"unknown field(s) {', '.join(map(str, unknown))}; known: {', '.join(sorted(known))}",
            )

    def _absent(self, mapping, key, field_path: str, default: Any) -> bool:
        """Whether the field is absent or null; an error when it is required (`default` is `...`)."""
        if key not in mapping or mapping[key] is None:
            if default is ...:
                self.fail(field_path, "required")
            return True
        return False

    def string(
        self, mapping, key, where="", default: Any = ..., pattern: re.Pattern | None = None, hint: str = ""
    ) -> Any:
        field_path = self._join(where, key)
        if self._absent(mapping, key, field_path, default):
            return default
        value = mapping[key]
        if not isinstance(value, str) or not value:
            self.fail(field_path, f"expected a non-empty string, got {value!r}")
        if pattern is not None and not pattern.match(value):
            self.fail(field_path, f"{value!r} is not {hint or 'valid'}")
        return value

    def integer(
        self, mapping, key, where="", default: Any = ..., minimum: int = 0, maximum: int = 2**63
    ) -> int:
        field_path = self._join(where, key)
        if self._absent(mapping, key, field_path, default):
            return default
        value = mapping[key]
        if isinstance(value, bool) or not isinstance(value, int) or not minimum <= value <= maximum:
            self.fail(field_path, f"expected an integer from {minimum} to {maximum}, got {value!r}")
        return value

    def boolean(self, mapping, key, where="", default: bool = False) -> bool:
        field_path = self._join(where, key)
        value = mapping.get(key)
        if value is None:
            return default
        if not isinstance(value, bool):
            self.fail(field_path, f"expected true or false, got {value!r}")
        return value

    def columns(self, mapping, key, where, required: bool) -> tuple[str, ...] | None:
        field_path = self._join(where, key)
        value = mapping.get(key)
        if value is None:
            if required:
                self.fail(field_path, "required: a list of column names")
            return None
        if isinstance(value, str):
            value = [value]
        if not isinstance(value, list) or not value or not all(isinstance(c, str) and c for c in value):
            self.fail(field_path, f"expected a non-empty list of column names, got {value!r}")
        if len(set(value)) != len(value):
            self.fail(field_path, f"column listed twice in {value!r}")
        return tuple(value)


def read_start(r: FieldReader, value: Any) -> str | None:
    """`start`: a day, YYYY-MM-DD (YAML reads an unquoted one as a date)."""
    if value is None:
        return None
    if isinstance(value, date) and not isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, str) and re.fullmatch(r"\d{4}-\d{2}-\d{2}", value):
        try:
            return date.fromisoformat(value).isoformat()
        except ValueError:
            pass
    r.fail("start", f"expected a day YYYY-MM-DD, got {value!r}")
    return None


def check_shard_key(
    r: FieldReader,
    where: str,
    table: str,
    regex: str | None,
    business_key: tuple[str, ...] | None,
    unique: bool,
) -> None:
    """A sharded table's merge key must tell its shards apart: never a silent collapse of their equal ids."""
    if unique and (regex is None or not business_key):
        r.fail(
            f"{where}.unique_across_shards",
            f"only for a sharded table (shard_regex) with a business_key; table {table} has "
            + ("no shard_regex" if regex is None else "no business_key"),
        )
    if regex is None or not business_key or unique:
        return
    if PHYSICAL_TABLE_COLUMN not in {c.lower() for c in business_key}:
        r.fail(
            f"{where}.business_key",
            f"table {table} is sharded (shard_regex {regex!r}) but its merge key {list(business_key)} cannot tell "
            "its shards apart: rows of different shards with the same key would be merged into one. Add "
            f"{PHYSICAL_TABLE_COLUMN} to the business_key, or set unique_across_shards: true if the key is unique "
            "across all shards",
        )


def read_shards(r: FieldReader, t_map, where: str, table: str, regex: str | None) -> tuple[str, ...]:
    """The declared physical tables: a count N (`<name>_0` .. `<name>_{N-1}`) or a list, each matching the regex."""
    value = t_map.get("shards")
    if value is None:
        return ()
    field_path = f"{where}.shards"
    if regex is None:
        r.fail(
            field_path, f"table {table} has no shard_regex: an unsharded table's physical table is its name"
        )
    logical = table.split(".", 1)[1]
    if isinstance(value, int) and not isinstance(value, bool):
        if not 1 <= value <= 100_000:
            r.fail(field_path, f"table {table}: a shard count is from 1 to 100000, got {value}")
        names = [f"{logical}_{i}" for i in range(value)]
    elif isinstance(value, str) and _SHARD_RANGE.fullmatch(value):
        names = _shard_range(r, field_path, table, logical, value)
    elif isinstance(value, list) and value and all(isinstance(v, str) and v for v in value):
        names = list(value)
        if len(set(names)) != len(names):
            r.fail(field_path, f"table {table}: a physical table is listed twice in {names}")
    else:
        r.fail(
            field_path,
            f"table {table}: expected a shard count, a range of zero-padded numbers ('0000..1023') or a list "
            f"of physical table names, got {value!r}",
        )
    rule = ShardRule(logical, regex)
    stray = [n for n in names if not rule.matches(n)]
    if stray:
        r.fail(field_path, f"table {table}: {', '.join(stray[:3])} do(es) not match shard_regex {regex!r}")
    return tuple(names)


_SHARD_RANGE = re.compile(r"(\d+)\.\.(\d+)")


def _shard_range(r: FieldReader, field_path: str, table: str, logical: str, value: str) -> list[str]:
    """`'0000..1023'`: `<name>_0000` .. `<name>_1023`, both ends written with the same number of digits."""
    first, last = _SHARD_RANGE.fullmatch(value).groups()
    if len(first) != len(last) or int(first) > int(last) or int(last) - int(first) >= 100_000:
        r.fail(
            field_path,
            f"table {table}: a shard range is '<first>..<last>' with as many digits on both sides, first <= last "
            f"and at most 100000 shards, got {value!r}",
        )
    return [f"{logical}_{i:0{len(first)}d}" for i in range(int(first), int(last) + 1)]


def read_columns(
    r: FieldReader,
    t_map,
    where: str,
    table: str,
    sharded: bool,
    primary_key: tuple[str, ...],
    business_key: tuple[str, ...] | None,
) -> tuple[SourceColumn, ...]:
    """The declared columns (`<name> <MySQL type>` each), holding the keys; none when not declared."""
    value = t_map.get("columns")
    if value is None:
        return ()
    field_path = f"{where}.columns"
    if not isinstance(value, list) or not value:
        r.fail(
            field_path, f"table {table}: expected a non-empty list of '<name> <MySQL type>', got {value!r}"
        )
    columns: list[SourceColumn] = []
    seen: set[str] = set()
    for k, item in enumerate(value):
        if not isinstance(item, str):
            r.fail(f"{field_path}[{k}]", f"table {table}: expected '<name> <MySQL type>', got {item!r}")
        try:
            column = parse_column(item)
        except ColumnTypeError as exc:
            r.fail(f"{field_path}[{k}]", f"table {table}: {exc}")
        if column.name.lower() in seen:
            r.fail(f"{field_path}[{k}]", f"table {table}: column {column.name!r} is declared twice")
        if sharded and column.name.lower() == PHYSICAL_TABLE_COLUMN:
            r.fail(
                f"{field_path}[{k}]",
                f"table {table} is sharded: its ODS rows get a column {PHYSICAL_TABLE_COLUMN} (the physical "
                "table), so no source column may have that name",
            )
        seen.add(column.name.lower())
        columns.append(column)
    for key_field, key in (("primary_key", primary_key), ("business_key", business_key or ())):
        missing = [c for c in key if c.lower() not in seen and c.lower() != PHYSICAL_TABLE_COLUMN]
        if missing:
            r.fail(f"{where}.{key_field}", f"table {table}: {missing} not among the declared columns")
    return tuple(columns)
