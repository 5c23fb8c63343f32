"""Run-time variables of a SQL table, computed from its partition window and substituted safely.

A SQL file may use `${dt}`, `${hour}`, `${prev_dt}`, `${DATA_RANGE_START}` and `${DATA_RANGE_END}`. Values are
always dates/times formatted from the partition window, never free text, and each is checked against a strict
pattern before it is put into SQL. An unknown `${name}` is an error naming the file and line.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timedelta

VARIABLE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
KNOWN = ("dt", "hour", "prev_dt", "DATA_RANGE_START", "DATA_RANGE_END")
_SAFE = {
    "dt": re.compile(r"^\d{4}-\d{2}-\d{2}$"),
    "prev_dt": re.compile(r"^\d{4}-\d{2}-\d{2}$"),
    "hour": re.compile(r"^\d{2}$"),
    "DATA_RANGE_START": re.compile(r"^\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}$"),
    "DATA_RANGE_END": re.compile(r"^\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}$"),
}


class VariableError(ValueError):
    """A `${...}` that is unknown or a value that is not a date from a partition window."""


@dataclass(frozen=True)
class Window:
    """A partition's time window [start, end)."""

    start: datetime
    end: datetime

    @classmethod
    def from_partition_key(cls, key: str, grain: str) -> Window:
        """`2024-01-02` (daily) or `2024-01-02-05:00` (hourly, Dagster's format)."""
        try:
            if grain == "daily":
                start = datetime.strptime(key, "%Y-%m-%d")
                return cls(start, start + timedelta(days=1))
            if grain == "hourly":
                start = datetime.strptime(key, "%Y-%m-%d-%H:%M")
                return cls(start, start + timedelta(hours=1))
        except ValueError as exc:
            raise VariableError(f"partition key {key!r} is not a {grain} partition key") from exc
        raise VariableError(f"unknown grain {grain!r}")

    def variables(self) -> dict[str, str]:
        fmt = "%Y-%m-%d %H:%M:%S"
        return {
            "dt": self.start.strftime("%Y-%m-%d"),
            "hour": self.start.strftime("%H"),
            "prev_dt": (self.start - timedelta(days=1)).strftime("%Y-%m-%d"),
            "DATA_RANGE_START": self.start.strftime(fmt),
            "DATA_RANGE_END": self.end.strftime(fmt),
        }


def check_variables(sql: str, where: str, first_line: int = 1) -> list[str]:
    """Names used by `sql`; raises VariableError naming `where:line` for an unknown one."""
    used = []
    for match in VARIABLE.finditer(sql):
        name = match.group(1)
        if name not in KNOWN:
            line = first_line + sql.count("\n", 0, match.start())
            raise VariableError(f"{where}:{line}: unknown variable ${{{name}}} (known: {', '.join(KNOWN)})")
        used.append(name)
    return used


def render(sql: str, values: dict[str, str], where: str = "<sql>") -> str:
    """Substitute `${name}` with its checked value."""
    for name, value in values.items():
        pattern = _SAFE.get(name)
        if pattern is None or not pattern.match(value):
            raise VariableError(f"{where}: unsafe value {value!r} for ${{{name}}}")

    def sub(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in values:
            raise VariableError(f"{where}: no value for ${{{name}}}")
        return values[name]

    return VARIABLE.sub(sub, sql)
