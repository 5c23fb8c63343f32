"""References to warehouse tables: `TableRef` (database, name, partition columns), partition labels for messages,
and the error of a missing upstream partition. The tables themselves are Apache Iceberg tables
(`sharp_dagster.spark.iceberg`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class MissingPartitionError(LookupError):
    """An upstream partition that a run needs has not been written."""


@dataclass(frozen=True)
class TableRef:
    """A warehouse table: `database.name`, partitioned by `partition_cols` (outermost first)."""

    database: str
    name: str
    partition_cols: tuple[str, ...] = ("dt",)

    def __post_init__(self) -> None:
        for part in (self.database, self.name, *self.partition_cols):
            if not _IDENT.match(part):
                raise ValueError(f"not a plain identifier: {part!r} in table {self.database}.{self.name}")

    @property
    def qualified(self) -> str:
        return f"{self.database}.{self.name}"


def partition_label(ref: TableRef, values: Mapping[str, str]) -> str:
    """`ods.orders[dt=2024-01-02]` for messages."""
    spec = ",".join(f"{c}={values[c]}" for c in ref.partition_cols)
    return f"{ref.qualified}[{spec}]"
