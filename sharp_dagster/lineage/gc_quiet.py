"""Keeping CPython's cyclic garbage collector out of parse_script's latency.

This module owns the two measures that took parse_script's tail from tens of milliseconds to about one:

1. `release(trees)`: sqlglot's AST is cyclic (each node points to its parent, whose args point back), so every
   parsed script was garbage only the cyclic GC could free. Each call fed young-generation collections, promoted
   short-lived nodes to the old generation and so brought on full collections, whose cost grows with the whole
   process's heap (tens of ms in the benchmark, 100-300 ms under a heap the size of a Dagster code location's),
   landing inside whichever call was unlucky. Unlinking the parents once the walk is done lets reference
   counting free every node the moment the call returns.
2. `paused()`: with no cyclic garbage left, nothing a call allocates needs the collector, so it is paused for the
   call's duration: a collection owed by the rest of the process (imports, other threads) is not started inside a
   parse, and the call's short-lived objects are never promoted to an older generation. Re-entrant and
   thread-safe: the first of overlapping calls pauses the collector, the last one restores the state it found.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from sqlglot import exp

__all__ = ["paused", "release"]

_lock = threading.Lock()
_active = 0
_was_enabled = False


@contextmanager
def paused() -> Iterator[None]:
    """Pause the cyclic GC while the block runs (nested and concurrent blocks share one pause)."""
    global _active, _was_enabled
    with _lock:
        if _active == 0:
            _was_enabled = gc.isenabled()
            if _was_enabled:
                gc.disable()
        _active += 1
    try:
        yield
    finally:
        with _lock:
            _active -= 1
            if _active == 0 and _was_enabled:
                gc.enable()


def release(trees: list[Any]) -> None:
    """Break the parent <-> child reference cycles of sqlglot ASTs so reference counting frees them (one pass
    over the nodes, a fraction of a microsecond each). The trees must not be used afterwards."""
    stack: list[Any] = list(trees)
    pop = stack.pop
    push = stack.append
    expr = exp.Expr
    while stack:
        node = pop()
        node.parent = None
        for v in node.args.values():
            if type(v) is list:
                for x in v:
                    if isinstance(x, expr):
                        push(x)
            elif isinstance(v, expr):
                push(v)
