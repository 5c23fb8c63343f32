"""Run-time variables of a SQL table, computed from its partition window and substituted safely.

A SQL file may use `${dt}`, `${hour}`, `${prev_dt}`, `${DATA_RANGE_START}` and `${DATA_RANGE_END}`. Values are
always dates/times formatted from the partition window, never free text, and each is checked against a strict
pattern before it is put into SQL. An unknown `${name}` is an error naming the file and line.
"""

from __future__ import annotations

import re

from sharp_dagster.periods import Period, day_before, period_of_key, window_text

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


def window_variables(key: str, grain: str) -> dict[str, str]:
    """The variables of one partition key of `grain` (`period_variables` of its period); a VariableError names a key
    that is not of that grain.

    >>> window_variables("2024-01-02-05:00", "hourly")["DATA_RANGE_END"]
    '2024-01-02 06:00:00'
    """
    try:
        period = period_of_key(key, grain)
    except ValueError as exc:
        raise VariableError(f"partition key {key!r}: {exc}") from None
    return period_variables(period)


def period_variables(period: Period) -> dict[str, str]:
    """The variables of one partition, from its window (`sharp_dagster.periods`): what a run renders its SQL with.

    >>> from sharp_dagster.periods import period_at
    >>> from datetime import datetime
    >>> period_variables(period_at(datetime(2024, 3, 1, 5), "hourly"))["prev_dt"]
    '2024-02-29'
    """
    start, end = window_text(period)
    dt = period.start.strftime("%Y-%m-%d")
    return {
        "dt": dt,
        "hour": period.start.strftime("%H"),
        "prev_dt": day_before(dt),
        "DATA_RANGE_START": start,
        "DATA_RANGE_END": end,
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
