"""Argument types of the command line: every number, date and path is checked here, when the arguments are read,
so that a bad value is refused with one line before any command changes anything.

Each factory returns a callable for argparse's `type=`; argparse turns its `ArgumentTypeError` into
`sharp-dagster <command>: error: argument --days: ...` (one line: see `CliParser` in `cli/main.py`).

>>> int_range(1, 366)("7")
7
>>> int_range(1, 366)("1e11")
Traceback (most recent call last):
...
argparse.ArgumentTypeError: expected a whole number from 1 to 366, got '1e11'
"""

from __future__ import annotations

import argparse
import math
from datetime import date
from pathlib import Path
from typing import Any


def int_range(low: int, high: int) -> Any:
    """A whole number in [low, high]: refuses '1e11', '-5', '3.0' and values past the bounds with their range."""

    def parse(text: str) -> int:
        try:
            value = int(text.strip(), 10)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"expected a whole number from {low} to {high}, got {text!r}"
            ) from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"must be from {low} to {high}, got {value}")
        return value

    return parse


def float_range(low: float, high: float) -> Any:
    """A finite number in (low, high]: a duration in seconds, say; NaN and infinities are refused."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a number of seconds, got {text!r}") from None
        if not math.isfinite(value) or not low < value <= high:
            raise argparse.ArgumentTypeError(f"must be more than {low} and at most {high}, got {text}")
        return value

    return parse


def iso_date(text: str) -> str:
    """A real calendar day written YYYY-MM-DD (2026-02-30 is refused), returned as written."""
    try:
        if len(text) != 10:
            raise ValueError
        date.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a calendar day YYYY-MM-DD: {text!r}") from None
    return text


def new_file(text: str) -> Path:
    """A file to write whose folder already exists: a typo in a folder name must not create folders anywhere."""
    path = Path(text).expanduser()
    if not text.strip() or path.is_dir():
        raise argparse.ArgumentTypeError(f"{text!r} is a folder, not a file name")
    parent = path.parent if str(path.parent) else Path(".")
    if not parent.is_dir():
        raise argparse.ArgumentTypeError(f"folder {str(parent)!r} does not exist (create it first)")
    return path


def existing_dir(text: str) -> Path:
    path = Path(text).expanduser()
    if not path.is_dir():
        raise argparse.ArgumentTypeError(f"no such folder: {text!r}")
    return path


def existing_file(text: str) -> Path:
    path = Path(text).expanduser()
    if not path.is_file():
        raise argparse.ArgumentTypeError(f"no such file: {text!r}")
    return path


PORT = int_range(0, 65535)
# Rows a command prints: far more than a terminal shows, far less than a count that overflows the database's
# integer (`--limit 1e20`).
ROW_LIMIT = int_range(1, 1_000_000)
