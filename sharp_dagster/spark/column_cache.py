"""Memoized builders of Spark Columns.

Every `F.col`, `F.when`, `.cast` or `.alias` of PySpark is a round trip to the JVM: a plan of a few hundred
Columns costs a few hundred milliseconds to build, more than running it on a day of changes. Columns are
unresolved expressions that name their inputs, not bound to a DataFrame, so a builder that depends only on its
(hashable) arguments can build them once and hand the same Columns to every DataFrame of that shape: a range
batch merges day after day with the same plan.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import ParamSpec, TypeVar

from pyspark import SparkContext

P = ParamSpec("P")
R = TypeVar("R")

# Builders memoized; each keeps this many argument sets (a batch uses one per table and day shape).
CACHE_SIZE = 64


def columns_per_jvm(build: Callable[P, R]) -> Callable[P, R]:
    """Memoize `build` by its arguments and the JVM gateway that holds the Columns it returns.

    The arguments must be hashable and must decide the Columns entirely; the result must not be mutated. Columns
    built in one JVM are never handed to another (a gateway launched after a shutdown builds them again).
    """
    cached = functools.lru_cache(maxsize=CACHE_SIZE)(lambda gateway, *args: build(*args))

    @functools.wraps(build)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        if kwargs:
            raise TypeError(f"{build.__name__}: pass its arguments by position (they are the cache key)")
        return cached(SparkContext._gateway, *args)

    wrapper.cache_info = cached.cache_info  # type: ignore[attr-defined]
    wrapper.cache_clear = cached.cache_clear  # type: ignore[attr-defined]
    return wrapper
