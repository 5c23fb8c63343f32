"""A day's DDL interpreted by the source's stated policy: what each statement does to a table's columns.

`interpret` reads one statement of the binlog (sqlglot, MySQL dialect) into `SchemaChange`s: a column added,
renamed (`RENAME COLUMN a TO b`, `CHANGE a b TYPE`), retyped (`MODIFY`, `CHANGE`), dropped, the table dropped or
created, or a statement that changes no data shape (indexes, comments, table options: `ignored`, logged).
A statement it cannot read, or an ALTER of a kind it does not know, is refused (`UnfollowableDdl`, naming the
statement and the table). `evolve_schema` applies a day's statements to a table's columns under a `DdlPolicy`:
type changes only as Iceberg can follow them (int->bigint, float->double, decimal precision up at the same scale;
any string type to a longer one is string to string), else refused; a dropped column kept (null from then on)
or dropped (`DdlPolicy.drop_column`); a table dropped and created again followed (its rows leave at the DROP: the
day's truncate) or refused (`DdlPolicy.recreate_table`).

>>> [(c.kind, c.column, c.new_name) for c in interpret("ALTER TABLE t RENAME COLUMN a TO b", "t")]
[('rename', 'a', 'b')]
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import sqlglot
from sqlglot import exp

from sharp_dagster.cdc.change.schema_evolution import (
    parse_added_columns,
    parse_created_columns,
    parse_quietly,
    spark_type,
)
from sharp_dagster.cdc.source.config_fields import DdlPolicy

log = logging.getLogger(__name__)

KINDS = ("add", "rename", "retype", "drop_column", "drop_table", "create_table", "truncate", "ignored")

_HEAD = re.compile(
    r"^\s*(?:/\*.*?\*/\s*)*(\w+)(?:\s+(?:OR\s+REPLACE\s+|TEMPORARY\s+|ONLINE\s+|IGNORE\s+)*(\w+))?",
    re.I | re.S,
)
_ALTER_MODIFIERS = re.compile(r"^\s*ALTER\s+(?:(?:ONLINE|IGNORE)\s+)+TABLE\b", re.I)
_DECIMAL = re.compile(r"^decimal\((\d+),(\d+)\)$")
# Iceberg's type promotions (what ALTER TABLE ... ALTER COLUMN ... TYPE accepts), decimals apart.
_PROMOTIONS = {("int", "bigint"), ("float", "double")}


class UnfollowableDdl(ValueError):
    """A DDL statement the ODS cannot follow: the day fails, naming the statement and the table."""


@dataclass(frozen=True)
class SchemaChange:
    """One change a DDL statement makes to a table (`kind` one of `KINDS`), with the statement that made it."""

    kind: str
    table: str
    column: str | None = None
    new_name: str | None = None
    new_type: str | None = None  # Spark type
    statement: str = ""


@dataclass
class Evolution:
    """A table's columns after a day's DDL, and what the merge needs to follow it."""

    columns: list[tuple[str, str]]
    defaults: dict[str, str] = field(default_factory=dict)  # added column -> literal rows from before it take
    renames: dict[str, str] = field(default_factory=dict)  # new name -> the name earlier images carry
    cleared: list[str] = field(default_factory=list)  # dropped columns kept: null from the drop on
    dropped: list[str] = field(default_factory=list)  # dropped columns that leave the current state
    changes: list[SchemaChange] = field(default_factory=list)


def interpret(statement: str, table: str = "") -> list[SchemaChange]:
    """The changes one DDL statement of `table`'s binlog makes; `UnfollowableDdl` when it cannot be read.

    >>> [(c.kind, c.column, c.new_type) for c in interpret("ALTER TABLE t MODIFY a BIGINT, ADD KEY k (a)", "t")]
    [('retype', 'a', 'bigint'), ('ignored', None, None)]
    """
    first, second = (_HEAD.match(statement or "") or re.match("()()", "")).groups()
    head = f"{first or ''} {second or ''}".upper()
    if head.startswith("TRUNCATE"):
        return [SchemaChange("truncate", table, statement=statement)]
    if head.startswith("DROP TABLE") or head.startswith("DROP TEMPORARY"):
        return [SchemaChange("drop_table", table, statement=statement)]
    if head.startswith("CREATE TABLE") or head.startswith("CREATE TEMPORARY"):
        return [SchemaChange("create_table", table, statement=statement)]
    if head.startswith("ALTER"):
        return _alter(statement, table)
    # CREATE/DROP INDEX, RENAME TABLE (a gh-ost cut-over), anything else the collector passes on.
    return [SchemaChange("ignored", table, statement=statement)]


def _alter(statement: str, table: str) -> list[SchemaChange]:
    def refuse(why: str) -> UnfollowableDdl:
        return UnfollowableDdl(f"table {table or '?'}: cannot follow DDL {statement!r}: {why}")

    plain = _ALTER_MODIFIERS.sub("ALTER TABLE", statement, count=1)
    try:
        parsed = parse_quietly(plain)
    except sqlglot.errors.ParseError as err:
        raise refuse(f"sqlglot (mysql) cannot parse it: {err}") from err
    if not isinstance(parsed, exp.Alter):
        # `ADD (a int, b text)`, which sqlglot reads as an opaque command, `parse_added_columns` rewrites.
        listed = _added_list(plain)
        if listed:
            return [SchemaChange("add", table, c.name, None, c.spark_type, statement) for c in listed]
        raise refuse("sqlglot (mysql) cannot parse it")
    out = []
    added = iter(parse_added_columns(plain))
    for action in parsed.args.get("actions") or []:
        out.append(_action(action, table, statement, added, refuse))
    return out or [SchemaChange("ignored", table, statement=statement)]  # table options, comments


def _added_list(statement: str) -> list:
    try:
        return parse_added_columns(statement)
    except ValueError:
        return []


def _action(action, table: str, statement: str, added, refuse) -> SchemaChange:
    if isinstance(action, exp.ColumnDef):
        column = next(added)
        return SchemaChange("add", table, column.name, None, column.spark_type, statement)
    if isinstance(action, exp.RenameColumn):
        return SchemaChange("rename", table, action.this.name, action.args["to"].name, None, statement)
    if isinstance(action, exp.ModifyColumn) and isinstance(action.this, exp.ColumnDef):
        kind = action.this.args.get("kind")
        if not isinstance(kind, exp.DataType):
            raise refuse("a column change without a type")
        new_type = spark_type(kind)
        source = action.args.get("rename_from")
        if source is not None and source.name.lower() != action.this.name.lower():
            return SchemaChange("rename", table, source.name, action.this.name, new_type, statement)
        return SchemaChange("retype", table, action.this.name, None, new_type, statement)
    if isinstance(action, exp.Drop):
        if str(action.args.get("kind") or "").upper() == "COLUMN":
            (column,) = action.args.get("tables") or [None]
            return SchemaChange("drop_column", table, column.name, statement=statement)
        return SchemaChange(
            "ignored", table, statement=statement
        )  # DROP INDEX / KEY / PRIMARY KEY / FOREIGN KEY
    if isinstance(action, (exp.AddConstraint, exp.AlterColumn)):
        return SchemaChange("ignored", table, statement=statement)  # an index, a key, a column's DEFAULT
    raise refuse(f"an ALTER of a kind not interpreted ({action.sql(dialect='mysql')!r})")


def can_promote(old: str, new: str) -> bool:
    """Whether Iceberg can change a column of Spark type `old` to `new` keeping its values.

    >>> can_promote("int", "bigint"), can_promote("decimal(12,2)", "decimal(18,2)"), can_promote("decimal(12,2)", "decimal(18,4)")
    (True, True, False)
    """
    if old == new or (old, new) in _PROMOTIONS:
        return True
    was, now = _DECIMAL.match(old), _DECIMAL.match(new)
    return bool(was and now and was.group(2) == now.group(2) and int(now.group(1)) >= int(was.group(1)))


def is_drop_table(statement: str) -> bool:
    """Whether a DDL statement drops the table (its rows leave the ODS at its position).

    >>> is_drop_table("DROP TABLE IF EXISTS `t` /* generated by server */"), is_drop_table("DROP INDEX i ON t")
    (True, False)
    """
    first, second = (_HEAD.match(statement or "") or re.match("()()", "")).groups()
    return f"{first or ''} {second or ''}".upper() in ("DROP TABLE", "DROP TEMPORARY")


def evolve_schema(
    columns: Sequence[tuple[str, str]],
    statements: Iterable[str],
    policy: DdlPolicy | None = None,
    *,
    table: str = "",
    strict: bool = True,
) -> Evolution:
    """`columns` after the day's DDL `statements` under `policy`. `strict` (the merge): a change Iceberg cannot
    follow raises `UnfollowableDdl`; not strict (the landing, which must never stop a topic): it is left out, and
    the columns keep every name earlier images carry (a renamed column's old name stays beside the new one)."""
    policy = policy or DdlPolicy()
    evo = Evolution(list(columns))
    for statement in statements:
        try:
            changes = interpret(statement, table)
        except UnfollowableDdl:
            if strict:
                raise
            continue
        for change in changes:
            _apply(evo, change, policy, strict)
            evo.changes.append(change)
    return evo


def _index(evo: Evolution, name: str | None) -> int | None:
    lowered = (name or "").lower()
    return next((i for i, (c, _) in enumerate(evo.columns) if c.lower() == lowered), None)


def _apply(evo: Evolution, change: SchemaChange, policy: DdlPolicy, strict: bool) -> None:
    if change.kind == "ignored":
        log.info("table %s: DDL changes no column, not followed: %s", change.table, change.statement)
    elif change.kind == "add":
        _add(evo, change.column, change.new_type, change.statement)
    elif change.kind == "rename":
        _rename(evo, change, strict)
    elif change.kind == "retype":
        _retype(evo, change.column, change.new_type, change, strict)
    elif change.kind == "drop_column":
        _drop(evo, change.column, policy)
    elif change.kind in ("drop_table", "create_table"):
        if policy.recreate_table == "fail" and strict:
            raise UnfollowableDdl(
                f"table {change.table}: DDL {change.statement!r}: the policy (ddl.recreate_table: fail) "
                "refuses a table dropped or created again"
            )
        if change.kind == "create_table":
            _recreate(evo, change, policy, strict)


def _add(evo: Evolution, name: str, typ: str, statement: str) -> None:
    if name.lower() in (c.lower() for c in evo.cleared):
        evo.cleared = [c for c in evo.cleared if c.lower() != name.lower()]
    if _index(evo, name) is not None:
        return  # replayed, or the same ALTER on another shard
    evo.columns.append((name, typ))
    default = next((a.default for a in parse_added_columns(statement) if a.name == name), None)
    if default is not None:
        evo.defaults[name] = default


def _rename(evo: Evolution, change: SchemaChange, strict: bool) -> None:
    old, new = change.column, change.new_name
    at = _index(evo, old)
    if at is None:
        if _index(evo, new) is None:
            return  # a column the table does not have
        # Applied already: a re-run (a held day run again, a retry) reads the renamed table; the day's images
        # from before the rename still carry the old name, so the merge must still map it to the new one.
        if strict:
            evo.renames[new] = evo.renames.pop(old, old)
        if change.new_type:
            _retype(evo, new, change.new_type, change, strict)
        return
    typ = evo.columns[at][1]
    if strict:
        evo.columns[at] = (new, typ)
        evo.renames[new] = evo.renames.pop(old, old)
    elif _index(evo, new) is None:
        evo.columns.append((new, typ))  # the images before the rename still carry the old name
    if change.new_type:
        _retype(evo, new, change.new_type, change, strict)


def _retype(evo: Evolution, name: str, typ: str, change: SchemaChange, strict: bool) -> None:
    at = _index(evo, name)
    if at is None:
        return
    current, old = evo.columns[at]
    if can_promote(old, typ):
        evo.columns[at] = (current, typ)
    elif strict:
        raise UnfollowableDdl(
            f"table {change.table}: cannot follow DDL {change.statement!r}: column {name} would change from {old} "
            f"to {typ}, which Iceberg cannot promote (int->bigint, float->double, decimal precision up at the "
            "same scale)"
        )


def _drop(evo: Evolution, name: str, policy: DdlPolicy) -> None:
    at = _index(evo, name)
    if at is None:
        return
    if policy.drop_column == "drop":
        evo.dropped.append(evo.columns.pop(at)[0])
        evo.defaults.pop(name, None)
    elif name.lower() not in (c.lower() for c in evo.cleared):
        evo.cleared.append(evo.columns[at][0])


def _recreate(evo: Evolution, change: SchemaChange, policy: DdlPolicy, strict: bool) -> None:
    created = parse_created_columns(change.statement)
    if not created:
        return
    names = {c.lower() for c, _ in created}
    for column, _ in list(evo.columns):
        if column.lower() not in names:
            _drop(evo, column, policy)
    for column, typ in created:
        if _index(evo, column) is None:
            evo.columns.append((column, typ))
        else:
            _retype(evo, column, typ, change, strict)
