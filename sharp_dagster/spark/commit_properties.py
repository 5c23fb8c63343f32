"""Snapshot summary properties on Iceberg commits that take no write options: SQL `MERGE INTO`, `INSERT INTO`,
`DELETE FROM` (a DataFrame write takes them as `snapshot-property.<key>` options: `wap.py`).

Iceberg's Spark writes add to a snapshot's summary what `org.apache.iceberg.spark.CommitMetadata` holds for the
committing thread: `CommitMetadata.withCommitProperties(properties, callable, exception class)` sets a thread-local
of the driver's JVM thread while the callable runs and clears it after. `with_snapshot_properties` runs a Python
function as that callable. Py4J hands the function to the JVM as a `java.util.concurrent.Callable` proxy; in
PySpark's pinned-thread mode (its default, `PYSPARK_PIN_THREAD`) the JVM thread serving this Python thread calls it
back over the same connection, so the function runs on this Python thread and every Spark call it makes runs on that
JVM thread again: its commits carry the properties, no other thread's do, and no callback server is started.

Why not the session conf `spark.sql.iceberg.snapshot-property.<key>` that Iceberg also reads: it is the whole
session's, so a commit made meanwhile by another thread of the process would carry this attempt's name (the reason
`wap.py` gives for not staging through `spark.wap.branch`).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from py4j.clientserver import ClientServer
from pyspark.sql import SparkSession

T = TypeVar("T")
_inside = threading.local()  # set while this thread runs a function with properties


class _Callable:
    """`fn` as a `java.util.concurrent.Callable` for Py4J. It never raises into the JVM: what `fn` raises is kept
    and raised again in Python once the JVM call returns (with its own type and traceback, not as a Py4J error)."""

    def __init__(self, fn: Callable[[], Any]) -> None:
        self.fn = fn
        self.result: Any = None
        self.error: BaseException | None = None

    def call(self) -> None:
        try:
            self.result = self.fn()
        except BaseException as exc:  # an interrupt too: it is raised again on this thread
            self.error = exc
        return None

    class Java:
        implements = ["java.util.concurrent.Callable"]


def with_snapshot_properties(
    spark: SparkSession, properties: Mapping[str, str] | None, fn: Callable[..., T], *args: Any
) -> T:
    """`fn(*args)`, every Iceberg snapshot it commits on this thread carrying `properties` in its summary (keys as
    given: `wap.snapshot_properties` names them). Without properties it is just `fn(*args)`. A call inside another
    is refused (`RuntimeError`): Iceberg's thread-local holds one set, and the inner call would clear the outer's
    when it returns."""
    if getattr(_inside, "properties", None) is not None:
        raise RuntimeError(
            f"snapshot properties {dict(properties or {})} inside {_inside.properties}: not nested"
        )
    if not properties:
        return fn(*args)
    gateway = spark.sparkContext._gateway
    if not isinstance(gateway, ClientServer):
        raise RuntimeError(
            "snapshot properties of SQL commits need PySpark's pinned-thread mode (PYSPARK_PIN_THREAD is false)"
        )
    jvm = spark.sparkContext._jvm
    props = jvm.java.util.HashMap()
    for key, value in properties.items():
        props.put(str(key), str(value))
    call = _Callable(lambda: fn(*args))
    raises = jvm.java.lang.Class.forName("java.lang.RuntimeException")
    _inside.properties = dict(properties)
    try:
        jvm.org.apache.iceberg.spark.CommitMetadata.withCommitProperties(props, call, raises)
    finally:
        _inside.properties = None
        call.fn = None  # Py4J keeps the proxy until the JVM collects it: let go of what `fn` holds now
    error, result = call.error, call.result
    call.error = call.result = None
    if error is not None:
        raise error
    return result
