"""The string a column value of a binlog row image travels as in a change message.

Values are strings (or JSON null for SQL NULL), as in Canal, in a canonical form (`canonical_value`):
integers in decimal; DECIMAL in plain notation keeping its scale (`12.50`); floats by Python's shortest repr;
DATETIME/TIMESTAMP as `YYYY-MM-DD HH:MM:SS` with `.ffffff` only when the fraction is not zero (TIMESTAMP in UTC);
DATE as `YYYY-MM-DD`; TIME as `[-]H:MM:SS[.ffffff]`; YEAR as a number; bytes (BINARY/VARBINARY/BLOB) as
standard base64; SET as its members sorted and comma-joined; JSON columns as compact JSON with sorted keys.
A column absent from a row image was not logged (MINIMAL row image), which is not the same as null.
"""

from __future__ import annotations

import base64
import datetime as dt
import json
from decimal import Decimal
from typing import Any


def canonical_value(value: Any) -> str | None:
    """The string a column value travels as (see the module docstring).

    >>> canonical_value(Decimal("1.50")), canonical_value(dt.datetime(2024, 1, 2, 3, 4, 5, 120000))
    ('1.50', '2024-01-02 03:04:05.120000')
    >>> canonical_value(b"\\x00\\xff"), canonical_value({"b", "a"}), canonical_value(dt.timedelta(hours=-1, seconds=1))
    ('AP8=', 'a,b', '-0:59:59')
    """
    if value is None:
        return None
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, Decimal):
        return format(value, "f")
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, dt.datetime):
        return value.isoformat(sep=" ")
    if isinstance(value, dt.date):
        return value.isoformat()
    if isinstance(value, dt.timedelta):
        return _format_time(value)
    if isinstance(value, (bytes, bytearray, memoryview)):
        return base64.b64encode(bytes(value)).decode("ascii")
    if isinstance(value, (set, frozenset)):
        return ",".join(sorted(canonical_value(v) or "" for v in value))
    if isinstance(value, (dict, list, tuple)):
        return json.dumps(_json_ready(value), sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return str(value)


def _format_time(value: dt.timedelta) -> str:
    micros = value.days * 86_400_000_000 + value.seconds * 1_000_000 + value.microseconds
    sign = "-" if micros < 0 else ""
    micros = abs(micros)
    seconds, frac = divmod(micros, 1_000_000)
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    text = f"{sign}{hours}:{minutes:02d}:{secs:02d}"
    return f"{text}.{frac:06d}" if frac else text


def _json_ready(value: Any) -> Any:
    if isinstance(value, dict):
        return {(k.decode() if isinstance(k, bytes) else str(k)): _json_ready(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_ready(v) for v in value]
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return canonical_value(value)
