"""Folding physical shard tables into their logical table (a source split into sub-databases and sub-tables).

A rule is a regular expression that must match the WHOLE physical name (`re.fullmatch`): `user_info_(\\d+)`
folds `user_info_1` and `user_info_12` into `user_info`, while online-schema-change shadows (`_user_info_1_gho`),
backups (`user_info_1_bak`) and other look-alikes match nothing and are not captured. Table names are
case-sensitive, as they are in MySQL on Linux. When several rules match, the first in configuration order wins.

>>> rules = ShardRules([ShardRule("user_info", r"user_info_(\\d+)"), ShardRule("orders")])
>>> rules.fold("user_info_7"), rules.fold("orders"), rules.fold("user_info_7_bak")
('user_info', 'orders', None)
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field

# The raw binlog column holding a change's physical table. A merge key column of this name always takes the
# change's physical table (never a row image's value), so it tells the shards of a logical table apart.
PHYSICAL_TABLE_COLUMN = "source_table"


@dataclass(frozen=True)
class ShardRule:
    """Physical tables whose name fully matches `pattern` are the logical table `logical`.

    Without a pattern the rule matches the logical name itself, literally.
    """

    logical: str
    pattern: str | None = None
    _regex: re.Pattern = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        source = self.pattern if self.pattern is not None else re.escape(self.logical)
        try:
            compiled = re.compile(source)
        except re.error as exc:
            raise ValueError(
                f"shard rule for {self.logical!r}: bad regular expression {source!r}: {exc}"
            ) from exc
        object.__setattr__(self, "_regex", compiled)

    def matches(self, physical: str) -> bool:
        return self._regex.fullmatch(physical) is not None


class ShardRules:
    """An ordered set of shard rules; `fold(physical)` gives the logical name or None."""

    def __init__(self, rules: Iterable[ShardRule]):
        self._rules = tuple(rules)
        self._cache: dict[str, str | None] = {}

    @classmethod
    def from_mapping(cls, mapping: Mapping[str, str | None]) -> ShardRules:
        """`{"user_info": r"user_info_(\\d+)", "orders": None}`: logical name -> pattern (None = the name itself)."""
        return cls(ShardRule(logical, pattern) for logical, pattern in mapping.items())

    def fold(self, physical: str) -> str | None:
        if physical not in self._cache:
            self._cache[physical] = next((r.logical for r in self._rules if r.matches(physical)), None)
        return self._cache[physical]

    def shards_of(self, logical: str, physical_names: Iterable[str]) -> list[str]:
        """The physical names among `physical_names` that fold into `logical`, sorted."""
        return sorted(name for name in physical_names if self.fold(name) == logical)

    @property
    def logical_names(self) -> list[str]:
        return list(dict.fromkeys(r.logical for r in self._rules))

    def __iter__(self) -> Iterator[ShardRule]:
        return iter(self._rules)

    def __len__(self) -> int:
        return len(self._rules)

    def __repr__(self) -> str:
        return f"ShardRules({list(self._rules)!r})"
