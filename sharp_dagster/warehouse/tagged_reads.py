"""How a SQL table reads an ODS table: one day of it, by that day's tag.

An ODS table `ods.<t>` is the source table's current state, and published day D is its Iceberg tag 'D'
(`cdc.ods.versions.day_tag`). So a SQL file reads the state at the end of its partition's day as

    FROM ods.orders VERSION AS OF '${dt}' AS o

and never filters on `dt` (the table has no such column). A plain `FROM ods.orders` would read the latest state
whatever the partition (a re-run of last month would read today's rows): it is refused when the catalog loads,
naming the file and line, as is a version other than `'${dt}'` (or `'${prev_dt}'`, below).

`@lookback` of an ODS table counts earlier tags: `@lookback: ods.orders=1` lets the SQL also read the day before as
`VERSION AS OF '${prev_dt}'`; the run's upstream gate and its read check then require both days. A larger lookback
of an ODS table is refused: a SQL file can name no tag before `${prev_dt}`, so the run would wait for days it
cannot read (a history of N days is a `dt` table built from the tags, e.g. a DWD snapshot table).

Nothing here imports Dagster or Spark: the check runs with the catalog (`dependencies.resolve`).
"""

from __future__ import annotations

import sqlglot
from sqlglot import exp
from sqlglot.dialects.dialect import Dialect

from sharp_dagster.lineage.time_travel import teach
from sharp_dagster.warehouse.catalog import SqlTable, WarehouseDefinitionError
from sharp_dagster.warehouse.variables import VARIABLE

# The version a read may name, by the lookback it needs. Parsed with stand-in dates no SQL writes by hand, so that
# the literal tells which variable it was.
_STAND_INS = {
    "dt": "0001-01-03",
    "prev_dt": "0001-01-02",
    "hour": "00",
    "DATA_RANGE_START": "0001-01-03 00:00:00",
    "DATA_RANGE_END": "0001-01-04 00:00:00",
}
_VERSIONS = {_STAND_INS["dt"]: ("${dt}", 0), _STAND_INS["prev_dt"]: ("${prev_dt}", 1)}
MAX_LOOKBACK = 1


def check_tagged_reads(table: SqlTable, tagged: frozenset[str]) -> None:
    """Raise `WarehouseDefinitionError` (`path:line: ...`) unless every read of a day-tagged table in `table`'s SQL
    is `VERSION AS OF '${dt}'` (or `'${prev_dt}'` with `@lookback: <that table>=1`)."""
    for upstream, count in table.lookback.items():
        if upstream in tagged and count > MAX_LOOKBACK:
            raise WarehouseDefinitionError(
                f"{table.path}:{_prop_line(table, 'lookback')}: @lookback {upstream}={count}: an ODS table's days "
                f"are tags read as VERSION AS OF '${{dt}}' or, with @lookback {upstream}=1, '${{prev_dt}}'; a SQL "
                "file cannot name an earlier day, so a lookback over 1 would wait for days it never reads"
            )
    if not tagged:
        return
    text = VARIABLE.sub(lambda m: _STAND_INS.get(m.group(1), m.group(0)), table.sql)
    try:
        statements = sqlglot.parse(text, read=teach(Dialect.get_or_raise("spark")))
    except sqlglot.errors.ParseError:
        return  # the lineage parse of the same file reports the syntax error, with its line and column
    for statement in statements:
        for node in statement.find_all(exp.Table) if statement is not None else ():
            name = ".".join(p.name for p in node.parts[-2:]).lower()  # `sharp.ods.orders` too
            if name in tagged:
                _check_read(table, node, name)


def _check_read(table: SqlTable, node: exp.Table, name: str) -> None:
    line = int(node.parts[0].meta.get("line") or 1)
    where = f"{table.path}:{line}"
    version = node.args.get("version")
    rule = f"read a day of it as `FROM {name} VERSION AS OF '${{dt}}'`"
    if version is None:
        raise WarehouseDefinitionError(
            f"{where}: {table.qualified} reads {name} without VERSION AS OF: an ODS table is its latest state, "
            f"whatever the partition; {rule}"
        )
    value = version.args.get("expression")
    literal = value.this if isinstance(value, exp.Literal) and value.is_string else None
    if version.name.upper() != "VERSION" or literal not in _VERSIONS:
        shown = _as_written(version.sql(dialect="spark"))
        raise WarehouseDefinitionError(
            f"{where}: {table.qualified} reads {name} {shown}: an ODS table's day is the tag named by the "
            f"partition's day; {rule} (or '${{prev_dt}}' with @lookback {name}=1)"
        )
    variable, needs = _VERSIONS[literal]
    if table.lookback.get(name, 0) < needs:
        raise WarehouseDefinitionError(
            f"{where}: {table.qualified} reads {name} VERSION AS OF '{variable}', the day before its partition: "
            f"declare it with `-- @lookback: {name}={needs}` (the run then waits for that day too)"
        )


def _as_written(text: str) -> str:
    """`text` with the stand-ins put back as the variables they stand for (the longest first: a date is a prefix
    of a timestamp)."""
    for name, value in sorted(_STAND_INS.items(), key=lambda kv: -len(kv[1])):
        if len(value) >= len("0001-01-01"):  # not `${hour}`'s two digits: they occur in any number
            text = text.replace(value, f"${{{name}}}")
    return text


def _prop_line(table: SqlTable, prop: str) -> int:
    for lineno, line in enumerate(table.sql.splitlines(), start=1):
        if line.strip().startswith("--") and f"@{prop}" in line:
            return lineno
    return 1
