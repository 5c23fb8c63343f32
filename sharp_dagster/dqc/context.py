"""The run context of a rule check: what a run knows about the partition being checked, as SQL values.

`RuleContext` holds the partition key, `dt`, the data range and the job log's counts (for reconciliation rules);
`RuleContext.variables` gives the values of the run-time placeholders (`quoting.CONTEXT_VARIABLES`, and the
normalised window of `quoting.INTERNAL_VARIABLES`) that the compiler fills in, each checked to hold only safe
characters. The window defaults to the run's period (`period`, parsed once when the run started: this module never
reads the grain off a key), else to the window of the partition key alone.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import date, datetime
from typing import Any

from sharp_dagster.periods import Period, period_of_key, window_text

_SAFE_VALUE = re.compile(r"^[A-Za-z0-9_\-:. ]*$")


def _normalise_ts(value: Any, what: str) -> str:
    """'YYYY-MM-DD HH:MM:SS' from a datetime/date or the usual text forms (ISO, yyyyMMddHHmmss, yyyy-MM-dd)."""
    if isinstance(value, datetime):
        return value.strftime("%Y-%m-%d %H:%M:%S")
    if isinstance(value, date):
        return f"{value.isoformat()} 00:00:00"
    text = str(value).strip()
    for fmt in (
        "%Y-%m-%d %H:%M:%S",
        "%Y-%m-%dT%H:%M:%S",
        "%Y%m%d%H%M%S",
        "%Y-%m-%d",
        "%Y-%m-%d-%H:%M",
        "%Y%m%d",
    ):
        try:
            return datetime.strptime(text, fmt).strftime("%Y-%m-%d %H:%M:%S")
        except ValueError:
            continue
    raise ValueError(f"{what}: cannot read {text!r} as a timestamp")


def _window_of_key(key: str) -> tuple[str, str] | None:
    """The window of a context given only a partition key (the command line, tests; a run gives its `Period`), as
    `periods.period_of_key` reads the key; None for a key that is no time window."""
    try:
        return window_text(period_of_key(key))
    except ValueError:
        return None


@dataclass(frozen=True)
class RuleContext:
    """What a run knows about the partition being checked.

    `dt` defaults to the partition key's date; the window defaults to the run's `period` (its day or hour), else to
    the partition key's. `source_count` / `target_count` are the job log's counts for reconciliation rules.
    """

    partition_key: str | None = None
    dt: str | None = None
    data_range_start: Any = None
    data_range_end: Any = None
    run_id: str | None = None
    source_count: int | None = None
    target_count: int | None = None
    period: Period | None = None

    _KEYS = {
        "partition_key": "partition_key",
        "partition": "partition_key",
        "dt": "dt",
        "DATA_RANGE_START": "data_range_start",
        "data_range_start": "data_range_start",
        "DATA_RANGE_END": "data_range_end",
        "data_range_end": "data_range_end",
        "run_id": "run_id",
        "source_count": "source_count",
        "target_count": "target_count",
    }

    @classmethod
    def coerce(
        cls, value: RuleContext | Mapping[str, Any] | None, partition_key: str | None = None
    ) -> RuleContext:
        if value is None:
            ctx = cls()
        elif isinstance(value, RuleContext):
            ctx = value
        else:
            unknown = sorted(set(value) - set(cls._KEYS))
            if unknown:
                raise ValueError(
                    f"rule context: unknown key(s) {', '.join(unknown)} (known: {', '.join(cls._KEYS)})"
                )
            ctx = cls(**{cls._KEYS[k]: v for k, v in value.items()})
        if partition_key is not None and ctx.partition_key is None:
            ctx = cls(**{**ctx.__dict__, "partition_key": partition_key})
        return ctx

    def variables(self) -> dict[str, str]:
        """Values for the run-time placeholders; each is checked to hold only safe characters."""
        out: dict[str, str] = {}
        key = self.partition_key
        if key is not None:
            out["partition"] = str(key)
        dt = self.dt or (str(key)[:10] if key and re.match(r"^\d{4}-\d{2}-\d{2}", str(key)) else None)
        if dt is not None:
            out["dt"] = str(dt)
        if self.period is not None:
            window: tuple[str, str] | None = window_text(self.period)
        else:
            window = _window_of_key(str(key)) if key else None
        if self.data_range_start is not None:
            out["DATA_RANGE_START"] = str(self.data_range_start)
            out["_window_start"] = _normalise_ts(self.data_range_start, "DATA_RANGE_START")
        elif window:
            out["_window_start"] = window[0]
        if self.data_range_end is not None:
            out["DATA_RANGE_END"] = str(self.data_range_end)
            out["_window_end"] = _normalise_ts(self.data_range_end, "DATA_RANGE_END")
        elif window:
            out["_window_end"] = window[1]
        for name, value in out.items():
            if not _SAFE_VALUE.match(value):
                raise ValueError(f"rule context: unsafe value {value!r} for ${{{name}}}")
        return out
