"""SQL text from a rule's values: string literals, quoted identifiers and table names, numbers, placeholders.

Everything a rule author writes reaches the SQL through these functions (`params.render` at load time), so none of
it can end a literal early, name something other than a plain identifier, or smuggle in a `${...}` for a later
substitution. `fill` does the substitutions: at load time the parameters' fragments (`INTERNAL_VARIABLES` and
`CONTEXT_VARIABLES` kept open), at run time the run's context (`compiler.py`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from sharp_dagster.dqc.errors import ParamError

IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
PLACEHOLDER = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")

# Filled by the compiler at run time; everything else must be resolved at load time.
CONTEXT_VARIABLES = frozenset({"table", "partition", "dt", "DATA_RANGE_START", "DATA_RANGE_END"})
# Internal run-time placeholders used by built-in templates (normalised timestamps, sample size).
INTERNAL_VARIABLES = frozenset({"_window_start", "_window_end", "limit"})


def sql_string(value: str) -> str:
    """A Spark SQL string literal that cannot end early or smuggle in a placeholder.

    Quote and backslash are backslash-escaped (Spark's default literal syntax); `$` and control characters are
    written as `\\uXXXX` so that no `${...}` survives in the SQL text for variable substitution to expand.

    >>> sql_string("it's")
    "'it\\\\'s'"
    """
    out = []
    for ch in value:
        if ch == "\\":
            out.append("\\\\")
        elif ch == "'":
            out.append("\\'")
        elif ch == "$" or ch == '"' or ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append(f"\\u{ord(ch):04x}")
        else:
            out.append(ch)
    return "'" + "".join(out) + "'"


def quote_ident(name: str) -> str:
    if not IDENTIFIER.fullmatch(name):
        raise ParamError(f"not a plain identifier: {name!r}")
    return f"`{name}`"


def quote_table(name: str) -> str:
    """`db.table` (or a bare temp-view name) as back-quoted identifiers."""
    parts = name.split(".")
    if not 1 <= len(parts) <= 2:
        raise ParamError(f"not a table name of the form db.table: {name!r}")
    return ".".join(quote_ident(p) for p in parts)


def format_number(value: float | int) -> str:
    if isinstance(value, int):
        return str(value)
    if value.is_integer() and abs(value) < 1e15:
        return str(int(value))
    return repr(float(value))


def fill(text: str, values: Mapping[str, str], keep: frozenset[str] = frozenset()) -> str:
    """Replace `${name}` from `values`; names in `keep` stay for a later phase; any other name is an error."""

    def sub(match: re.Match[str]) -> str:
        name = match.group(1)
        if name in values:
            return values[name]
        if name in keep:
            return match.group(0)
        raise ParamError(f"unknown placeholder ${{{name}}}")

    return PLACEHOLDER.sub(sub, text)
