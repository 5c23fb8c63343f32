"""Discover the warehouse's SQL tables: one `.sql` file per table, in a folder named after its layer.

`sharp_dagster/warehouse/<layer>/<table>.sql` becomes table `<layer>.<table>` (asset key `[layer, table]`). A file
is a single SELECT giving the rows of one partition; its leading comment block is the table's description, and
lines of the form `-- @key: value` in it set properties:

- `@partition: daily | hourly` (default daily), `@start: 2024-01-01` (default `DEFAULT_START`);
- `@deps: ods.orders, ods.order_item` — optional declared upstream tables; they must agree with the tables the SQL
  reads (the lineage cross-check makes loading fail otherwise);
- `@lookback: dwd.order_detail=6` — also read the 6 partitions before this one of that upstream. An ODS table's days
  are tags, not partitions (`warehouse/tagged_reads.py`): `@lookback: ods.orders=1` lets the SQL read the day before
  too (`VERSION AS OF '${prev_dt}'`); a larger lookback of an ODS table is refused (the SQL could not name the days).

Loading checks every file: unknown `${variables}`, unparsable SQL (the error names the file, line and column), and
properties. Nothing here imports Dagster or Spark, so the catalog is cheap to load for the CLI and the tests.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from sharp_dagster.naming import qualified
from sharp_dagster.periods import Period
from sharp_dagster.settings import DEFAULT_START, WAREHOUSE_SQL_DIR, warehouse_sql_dir
from sharp_dagster.warehouse.sources import day_tagged_tables, external_schemas, other_assets, source_edges
from sharp_dagster.warehouse.variables import (
    VariableError,
    check_variables,
    period_variables,
    render,
    window_variables,
)

LAYERS = ("ods", "dwd", "ads")
_PROP = re.compile(r"^--\s*@([a-z_]+)\s*:\s*(.*?)\s*$")
_NAME = re.compile(r"^[a-z][a-z0-9_]*$")
_QUALIFIED = re.compile(r"^[a-z_][a-z0-9_]*\.[a-z_][a-z0-9_]*$")


class WarehouseDefinitionError(ValueError):
    """A SQL table file that cannot be loaded; the message starts with `path:line`."""


@dataclass(frozen=True)
class SqlTable:
    layer: str
    name: str
    path: Path
    sql: str
    description: str
    grain: str = "daily"
    start: str = DEFAULT_START
    declared_deps: tuple[str, ...] | None = None
    lookback: dict[str, int] = field(default_factory=dict)
    rendered: str = ""

    @property
    def qualified(self) -> str:
        return f"{self.layer}.{self.name}"

    @property
    def asset_key_str(self) -> str:
        return f"{self.layer}/{self.name}"

    @property
    def asset_key_path(self) -> list[str]:
        return [self.layer, self.name]

    def render(self, partition: Period | str) -> str:
        """The SQL of one partition, variables substituted from its window: a run's `Period` as it is, a partition
        key (the command line, tests) read as one of the table's grain."""
        if isinstance(partition, Period):
            return render(self.sql, period_variables(partition), where=str(self.path))
        return render(self.sql, window_variables(partition, self.grain), where=str(self.path))


@dataclass
class WarehouseCatalog:
    tables: list[SqlTable]
    external_schemas: dict[str, dict[str, str]] = field(default_factory=dict)
    extra_edges: list[tuple[str, str]] = field(default_factory=list)
    other_assets: dict[str, str] = field(default_factory=dict)  # tables of non-SQL assets -> grain
    day_tagged: frozenset[str] = frozenset()  # tables whose days are tags (`ods.<t>`), read `VERSION AS OF`

    def by_qualified(self) -> dict[str, SqlTable]:
        return {t.qualified: t for t in self.tables}

    def get(self, key: str) -> SqlTable:
        """A table by `layer/table` or `layer.table`."""
        wanted = qualified(key).lower()
        for table in self.tables:
            if table.qualified == wanted:
                return table
        raise KeyError(f"unknown warehouse table {key!r}")


def _sample_key(grain: str, start: str) -> str:
    return start if grain == "daily" else f"{start}-00:00"


def parse_sql_file(path: Path, layer: str) -> SqlTable:
    """Read one table file: header properties, description, variables, and a syntax check."""
    where = str(path)
    name = path.stem
    if not _NAME.match(name):
        raise WarehouseDefinitionError(f"{where}:1: table name {name!r} must be lower_snake_case")
    text = path.read_text(encoding="utf-8")
    props: dict[str, tuple[str, int]] = {}
    description: list[str] = []
    for lineno, line in enumerate(text.splitlines(), start=1):
        stripped = line.strip()
        if not stripped:
            if description:
                description.append("")
            continue
        if not stripped.startswith("--"):
            break
        match = _PROP.match(stripped)
        if match:
            props[match.group(1)] = (match.group(2), lineno)
        else:
            description.append(stripped[2:].strip())
    desc = "\n".join(description).strip()
    if not desc:
        raise WarehouseDefinitionError(f"{where}:1: a table file starts with a comment describing the table")

    known = {"partition", "start", "deps", "lookback"}
    for key, (_, lineno) in props.items():
        if key not in known:
            raise WarehouseDefinitionError(
                f"{where}:{lineno}: unknown property @{key} (known: {sorted(known)})"
            )
    grain, lineno = props.get("partition", ("daily", 1))
    if grain not in ("daily", "hourly"):
        raise WarehouseDefinitionError(f"{where}:{lineno}: @partition must be daily or hourly, not {grain!r}")
    start, lineno = props.get("start", (DEFAULT_START, 1))
    if not re.match(r"^\d{4}-\d{2}-\d{2}$", start):
        raise WarehouseDefinitionError(
            f"{where}:{lineno}: @start must be a date like 2024-01-01, not {start!r}"
        )
    declared: tuple[str, ...] | None = None
    if "deps" in props:
        raw, lineno = props["deps"]
        declared = tuple(sorted({d.strip().lower() for d in raw.split(",") if d.strip()}))
        bad = [d for d in declared if not _QUALIFIED.match(d)]
        if bad:
            raise WarehouseDefinitionError(f"{where}:{lineno}: @deps must list db.table names, got {bad}")
    lookback: dict[str, int] = {}
    if "lookback" in props:
        raw, lineno = props["lookback"]
        for item in raw.split(","):
            table, sep, count = item.strip().partition("=")
            if not sep or not _QUALIFIED.match(table.strip()) or not count.strip().isdigit():
                raise WarehouseDefinitionError(
                    f"{where}:{lineno}: @lookback items look like dwd.order_detail=6"
                )
            lookback[table.strip()] = int(count)

    try:
        check_variables(text, where)
        rendered = render(text, window_variables(_sample_key(grain, start), grain), where)
    except VariableError as exc:
        raise WarehouseDefinitionError(str(exc)) from exc
    return SqlTable(
        layer=layer,
        name=name,
        path=path,
        sql=text,
        description=desc,
        grain=grain,
        start=start,
        declared_deps=declared,
        lookback=lookback,
        rendered=rendered,
    )


def discover(sql_dir: Path = WAREHOUSE_SQL_DIR) -> list[SqlTable]:
    tables = []
    for layer in LAYERS:
        folder = sql_dir / layer
        for path in sorted(folder.glob("*.sql")) if folder.is_dir() else []:
            tables.append(parse_sql_file(path, layer))
    return tables


def load_catalog(sql_dir: Path | str | None = None) -> WarehouseCatalog:
    """The project's warehouse: every SQL table plus the external source tables they read."""
    return _load_catalog(Path(sql_dir) if sql_dir else warehouse_sql_dir())


@lru_cache(maxsize=8)
def _load_catalog(sql_dir: Path) -> WarehouseCatalog:

    return WarehouseCatalog(
        tables=discover(sql_dir),
        external_schemas=external_schemas(),
        extra_edges=source_edges(),
        other_assets=other_assets(),
        day_tagged=day_tagged_tables(),
    )
