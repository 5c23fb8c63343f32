"""The project's CDC layout, without Dagster: which source config, which assets, tables and lineage edges.

One YAML per source under `warehouse/cdc/`. For each database: an hourly landing asset `original_binlog/<db>`
(raw table `original_binlog.<db>`), and for each logical table a daily merge asset `ods/<table>` whose current
state is `ods.<table>` (each published day its tag, `cdc/ods/versions.py`) with its tombstones in
`ods_state.<table>`. The tag of the day before the asset's start is the bootstrap snapshot. A source's start is its YAML's `start:` (written by `cdc bootstrap` on
the day of its snapshot, so a capture started today merges today), else the warehouse's `DEFAULT_START`.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from pathlib import Path

from sharp_dagster.cdc.merge.fold import merge_key
from sharp_dagster.cdc.source.config import SourceConfig, TableConfig, load_source_config, snapshot_day
from sharp_dagster.settings import DEFAULT_START, warehouse_sql_dir

START = DEFAULT_START  # a source without `start:` starts with the warehouse
SHARD_COLUMN = "source_table"


@dataclass(frozen=True)
class OdsTable:
    database: str
    table: TableConfig
    source: SourceConfig

    @property
    def name(self) -> str:
        return self.table.name

    @property
    def asset_key_str(self) -> str:
        return f"ods/{self.name}"

    @property
    def sharded(self) -> bool:
        return self.table.shard_regex is not None

    @property
    def start(self) -> str:
        return source_start(self.source)

    @property
    def shard_column(self) -> str | None:
        return SHARD_COLUMN if self.sharded else None

    def key_columns(self) -> list[str]:

        return merge_key(
            self.table.primary_key, shard_column=self.shard_column, business_key=self.table.business_key
        )


def source_start(source: SourceConfig) -> str:
    """The source's first merged day (and first landed hour): where its bootstrap put it, else `START`."""
    return source.start or START


def cdc_dir() -> Path:
    return warehouse_sql_dir() / "cdc"


@cache
def _load(folder: str) -> tuple[SourceConfig, ...]:
    return tuple(load_source_config(p) for p in sorted(Path(folder).glob("*.yaml")))


def sources() -> tuple[SourceConfig, ...]:
    folder = cdc_dir()
    return _load(str(folder)) if folder.is_dir() else ()


def ods_tables() -> list[OdsTable]:
    return [OdsTable(db.name, t, src) for src in sources() for db in src.databases for t in db.tables]


def landing_table(database: str) -> str:
    """The raw binlog table a database's binlog lands in, `original_binlog.<db>` (its asset: `original_binlog/<db>`)."""
    return f"original_binlog.{database}"


def landing_assets() -> list[tuple[SourceConfig, str, str]]:
    """(source, database, topic) of every landing asset `original_binlog/<database>`."""
    return [(src, db.name, db.topic) for src in sources() for db in src.databases]


def bootstrap_day(start: str = START) -> str:
    """The day whose tag holds the bootstrap snapshot: the day before the first merged day."""
    return snapshot_day(start)


def lineage_edges(physical_tables: dict[str, list[str]] | None = None) -> list[tuple[str, str]]:
    """source table -> raw binlog table -> ODS table, for the lineage graph."""
    edges = []
    for t in ods_tables():
        shards = (physical_tables or {}).get(t.name) or [t.name]
        for physical in shards:
            edges.append((f"mysql:{t.database}.{physical}", landing_table(t.database)))
        edges.append((landing_table(t.database), f"ods.{t.name}"))
    return edges
