"""The shape of a merge (`MergePlan`): what `merge.py` builds from the state, the day's changes and its events, and
what every Column of the merge is built from (`merge_actions.py`, `merge_result.py`)."""

from __future__ import annotations

from dataclasses import dataclass

from pyspark.sql import Column
from pyspark.sql import functions as F


@dataclass(frozen=True, eq=False)
class MergePlan:
    """The shape of one merge, which decides all its Columns (`spark.column_cache` builds them once per shape):
    the result's columns, their defaults, the key, the shard column and the day's truncates."""

    columns: list[tuple[str, str]]  # the result's data columns and Spark types
    defaults: dict[str, str]  # column -> Spark SQL literal for rows that never carried it
    keys: list[str]
    shard: str | None
    truncates: dict[str | None, int]
    # The day's DDL as the merge follows it (`ddl_changes.evolve_schema`): a renamed column -> the name the images
    # before the rename carry; dropped columns kept (null from the drop on); dropped columns that leave the state.
    renames: tuple[tuple[str, str], ...] = ()
    cleared: tuple[str, ...] = ()
    dropped: tuple[str, ...] = ()

    def _identity(self) -> tuple:
        return (
            self.renames,
            self.cleared,
            self.dropped,
            tuple(self.columns),
            tuple(sorted(self.defaults.items())),
            tuple(self.keys),
            self.shard,
            tuple(sorted(self.truncates.items(), key=lambda item: (item[0] is not None, item[0] or ""))),
        )

    # Plans that decide the same Columns are equal: the column builders are memoized by plan.
    def __eq__(self, other: object) -> bool:
        return isinstance(other, MergePlan) and self._identity() == other._identity()

    def __hash__(self) -> int:
        return hash(self._identity())

    def old_name(self, name: str) -> str | None:
        """The name images from before the day's rename of column `name` carry it by (None: not renamed)."""
        return next((old for new, old in self.renames if new.lower() == name.lower()), None)

    def is_cleared(self, name: str) -> bool:
        return name.lower() in {c.lower() for c in self.cleared}

    def type_of(self, name: str) -> str:
        return next(t for c, t in self.columns if c.lower() == name.lower())

    @property
    def shard_in_key(self) -> bool:
        return self.shard is not None and self.shard.lower() in {k.lower() for k in self.keys}

    @property
    def values(self) -> list[tuple[str, str]]:
        """The data columns folded from the images: all but the key and the shard column."""
        skip = {k.lower() for k in self.keys} | ({self.shard.lower()} if self.shard else set())
        return [(c, t) for c, t in self.columns if c.lower() not in skip]


def default_value(plan: MergePlan, name: str, typ: str) -> Column:
    literal = plan.defaults.get(name)
    return (F.expr(literal) if literal is not None else F.lit(None)).cast(typ)


def delta_key_names(plan: MergePlan) -> list[str]:
    return [f"__k{i}" for i in range(len(plan.keys))]
