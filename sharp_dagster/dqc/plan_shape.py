"""One plan-guard verdict per `custom_sql` rule per run, instead of one per partition, where that is sound.

A rule's query is rendered per partition: `${dt}`, `${partition}`, `${DATA_RANGE_START}` / `${DATA_RANGE_END}` and
the window fill in a new value each day, so `plan_guard.check_rendered`, which caches per rendered text, judged
every day again (0.1-0.5 s a rule a day, mostly the walk's calls into the JVM). Here the rule's text is judged once
as its *shape*: every occurrence of a varying placeholder replaced by its own marker (`MARKER` + its number, random
per process so no rule can spell one), the other placeholders filled as they run. The shape's verdict stands for a
partition's text only when all of this holds, and is checked, for the shape; otherwise that text is judged itself,
as before:

1. the text filled with the partition's values is exactly the SQL about to run (so the shape is of that SQL);
2. every varying value is of `SAFE_VALUE`'s characters (letters, digits, `_ - : .` and space: what
   `RuleContext.variables` lets through). None of them is a quote, a backslash, `$`, `*`, `/` or a line break;
3. in Spark's parsed plan of the shape, each marker stands inside the text of a string `Literal` whose parent is a
   comparison, IN, a cast, or one of `VALUE_FUNCTIONS`.

Why that makes the verdict the same for every value: (3) can only hold when the placeholder sits inside a string
literal token (the parser builds a string `Literal` under those parents from a string literal, never from an
identifier, a number or a comment; a marker in an identifier, a typed literal such as `DATE '...'`, a comment, or
under any other parent is not found there, and then the shape does not count). By (2) a value inside a string
literal can neither end it nor start an escape, a comment or a placeholder, so Spark's lexer cuts every value's text
into the same tokens as the shape's, and the parser builds the same plan with other literal values. What the guard
checks does not depend on those values: the parsed walk looks at classes and at relation and function names; the
analyser types a string literal under a comparison, IN, a cast or those functions by its type, not its value (no
function among them picks its class, a schema or a name from a literal argument, as `date_part`, `to_binary` or
`from_json` do; such functions are not listed), so the analysed plan has the same classes and the same relations.
A verdict on the shape is thus the verdict on each partition's text. A shape Spark cannot parse or analyse says
nothing, and each partition is judged itself.

Trusted beyond `plan_guard`'s own trust (Spark reads the text the way it runs it): that the functions of
`VALUE_FUNCTIONS` and the operators of `VALUE_PARENTS` choose their class by their arguments' types, not values.
"""

from __future__ import annotations

import re
import secrets
import threading
from collections.abc import Iterable, Mapping
from typing import Any

from sharp_dagster.dqc import allowlist as al
from sharp_dagster.dqc.plan_guard import NotAnalysed, check_rendered, confined
from sharp_dagster.dqc.plan_walk import class_of, seq_items
from sharp_dagster.dqc.quoting import PLACEHOLDER
from sharp_dagster.spark.java import java_session

# The run-time placeholders whose value changes from one partition to the next (`context.RuleContext.variables`);
# `${table}` (the staged view, taken out of verdict keys by `check_rendered`) and `${limit}` are the same each day.
VARYING = frozenset({"partition", "dt", "DATA_RANGE_START", "DATA_RANGE_END", "_window_start", "_window_end"})
SAFE_VALUE = re.compile(r"[A-Za-z0-9_\-:. ]*")
MARKER = f"dqcvalue{secrets.token_hex(8)}"
_MARKED = re.compile(re.escape(MARKER) + r"o(\d+)o")

_LITERAL = al.full("expressions.Literal")
_FUNCTION = al.full("analysis.UnresolvedFunction")
# Parents under which a string literal is only a value: comparisons, IN and casts type it and compare or convert it.
VALUE_PARENTS = frozenset(
    al.full(f"expressions.{n}")
    for n in "EqualTo EqualNullSafe GreaterThan GreaterThanOrEqual LessThan LessThanOrEqual In Cast".split()
)
# Builtin functions whose class, and the classes the analyser puts under it, never depend on an argument's value
# (`to_date` / `to_timestamp` take another shape with a format argument, but by its presence, not its value).
VALUE_FUNCTIONS = frozenset(
    "between to_date to_timestamp date_add date_sub datediff add_months concat".split()
)
_SUBQUERIES = frozenset(
    al.full(f"expressions.{n}") for n in ("ScalarSubquery", "ListQuery", "Exists", "LateralSubquery")
)

_lock = threading.Lock()
_shapes: dict[tuple[str, str], bool] = {}  # (session, shape with the view taken out) -> its verdict counts
_MAX_SHAPES = 4096


def check_rule_query(
    spark, sql: str, staged: str, reads: Iterable[str], text: str, values: Mapping[str, str]
) -> None:
    """`plan_guard.check_rendered(spark, sql, staged, reads)`, where `sql` is the rule's query `text` filled with
    `values`: judged once per shape when its verdict stands for every partition (module doc), else itself."""
    reads = tuple(reads)
    marked = shape_of(text, values, sql)
    if marked is None:
        check_rendered(spark, sql, staged, reads)
        return
    shape, markers = marked
    key = (str(java_session(spark).sessionUUID()), shape.replace(_quoted(staged), "${table}"))
    with _lock:
        counts = _shapes.get(key)
    if counts is None:
        counts = _values_only(spark, shape, markers)
        _remember(key, counts)
    if counts:
        try:
            check_rendered(spark, shape, staged, reads)
            return
        except NotAnalysed:
            # Not a verdict: the partition's own text may analyse (or fail as it did before); judge it itself.
            _remember(key, False)
    check_rendered(spark, sql, staged, reads)


def shape_of(text: str, values: Mapping[str, str], sql: str) -> tuple[str, dict[str, str]] | None:
    """(`text` with every varying placeholder as its own marker and the others filled, marker -> value), or None:
    nothing varies, a value is not of `SAFE_VALUE`, a placeholder has no value, or the result filled is not `sql`."""
    markers: dict[str, str] = {}
    broken = False

    def mark(match: re.Match[str]) -> str:
        nonlocal broken
        name = match.group(1)
        value = values.get(name)
        if value is None or (name in VARYING and not SAFE_VALUE.fullmatch(value)):
            broken = True
            return match.group(0)
        if name not in VARYING:
            return value
        marker = f"{MARKER}o{len(markers)}o"
        markers[marker] = value
        return marker

    shape = PLACEHOLDER.sub(mark, text)
    if broken or not markers or _MARKED.sub(lambda m: markers.get(m.group(0), "\0"), shape) != sql:
        return None
    return shape, markers


def _values_only(spark, shape: str, markers: Mapping[str, str]) -> bool:
    """Whether Spark's parsed plan of `shape` holds every marker in a string literal under a value parent, and no
    marker in a literal anywhere else."""
    with confined(spark):
        try:
            parsed = java_session(spark).sessionState().sqlParser().parsePlan(shape)
        except Exception:  # noqa: BLE001 - a shape that does not parse says nothing of the values
            return False
        try:
            as_values, elsewhere = _marker_places(parsed)
        except Exception:  # noqa: BLE001 - a plan of a shape this walk does not know: judge each text
            return False
    return as_values >= set(markers) and not elsewhere


def _marker_places(root) -> tuple[set[str], set[str]]:
    """(the markers in a string `Literal` under a value parent, those in any other `Literal`), anywhere in the
    parsed plan: its expressions, children, CTEs and subqueries."""
    as_values: set[str] = set()
    elsewhere: set[str] = set()
    plans, exprs = [root], []
    while plans or exprs:
        if plans:
            node = plans.pop()
            plans.extend((*seq_items(node.children()), *seq_items(node.innerChildren())))
            exprs.extend((e, None) for e in seq_items(node.expressions()))
            continue
        expr, parent = exprs.pop()
        cls = class_of(expr)
        if cls == _LITERAL:
            marks = {m.group(0) for m in _MARKED.finditer(str(expr.value()))}
            string = str(expr.dataType().typeName()) == "string"
            (as_values if string and parent is not None and _value_parent(parent) else elsewhere).update(
                marks
            )
            continue
        if cls in _SUBQUERIES:
            plans.append(expr.plan())
        exprs.extend((child, expr) for child in seq_items(expr.children()))
    return as_values, elsewhere


def _value_parent(expr: Any) -> bool:
    cls = class_of(expr)
    if cls in VALUE_PARENTS:
        return True
    if cls != _FUNCTION:
        return False
    parts = [str(p) for p in seq_items(expr.nameParts())]
    return len(parts) == 1 and parts[0].lower() in VALUE_FUNCTIONS


def _quoted(staged: str) -> str:
    return ".".join(f"`{p}`" for p in staged.split("."))


def _remember(key: tuple[str, str], counts: bool) -> None:
    with _lock:
        if len(_shapes) >= _MAX_SHAPES:
            _shapes.clear()
        _shapes[key] = counts
