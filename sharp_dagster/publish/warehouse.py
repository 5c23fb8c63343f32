"""The run's warehouse tables, opened at its first claim: a run refused at its claim never starts Spark.

A log-driven run checks the job log, claims its period and passes its upstream gate before it touches the warehouse
(`run.PartitionRun.begin` opens it then). A duplicate run (another run holds the period: refused at the claim), a
period out of order (refused at the check) or one whose upstream is not done (refused at the gate) ends without a
Spark driver: what a sensor tick's or a double-clicked backfill's duplicates cost is a job-log query each, not a JVM
each. A run that claims pays for Spark once, however many periods or tables it holds: one `RunWarehouse` is shared
by the run's periods and by a source's table threads (`assets/ods_source.py`), and opens the tables once under a
lock.
"""

from __future__ import annotations

import threading
from contextlib import ExitStack
from typing import Any

from dagster import Failure

from sharp_dagster.publish.failures import error_text
from sharp_dagster.redact import scrub_text
from sharp_dagster.spark.iceberg import IcebergTables


class RunWarehouse:
    """The warehouse's tables of one run (`context.resources.spark.store()`), opened on first `open()`.

    `read_once`: the opened tables read each table's partition metadata once until the block ends
    (`IcebergTables.counts_read_once`: a source's day reads the raw binlog table's for every table). Use it as a
    context manager; it ends that block."""

    def __init__(self, context: Any, read_once: bool = False) -> None:
        self._context = context
        self._read_once = read_once
        self._tables: IcebergTables | None = None
        self._lock = threading.Lock()
        self._blocks = ExitStack()

    def __enter__(self) -> RunWarehouse:
        return self

    def __exit__(self, *exc: object) -> None:
        self._blocks.close()

    @property
    def opened(self) -> IcebergTables | None:
        """The tables if a claim opened them, else None (nothing has started Spark for this run)."""
        return self._tables

    def open(self) -> IcebergTables:
        """The tables, opened (Spark's session and the catalog) by the first caller; the others wait for it. A
        catalog that cannot be opened is a `Failure` saying so."""
        with self._lock:
            if self._tables is None:
                try:
                    tables = self._context.resources.spark.store()
                except Exception as exc:
                    raise Failure(
                        description=scrub_text(
                            f"the warehouse catalog is unavailable, nothing was written: {error_text(exc)}"
                        )
                    ) from None
                if self._read_once:
                    self._blocks.enter_context(tables.counts_read_once())
                self._tables = tables
            return self._tables


def application_id(tables: IcebergTables | None) -> str | None:
    """The Spark application id of opened tables' session; None when nothing is opened yet."""
    return tables.spark.sparkContext.applicationId if tables is not None else None
