"""A transaction's messages, held by the collector from its first event until its commit event.

A change belongs to the hour in which its transaction committed, and only the commit event says when that is; so
the collector encodes each message as it reads the event, keeps it here, and sends the whole transaction at the
commit with `commitTs` added (`messages.with_commit_ts`). A transaction never read to its commit (the collector
stopped, or the stream dropped mid-transaction) is discarded: the resume position is never inside a
transaction, so the next read sends it whole.

Memory is bounded: up to `memory_bytes` of encoded messages are kept in memory; a larger transaction spills to a
temporary file (`tempfile.SpooledTemporaryFile` in `spill_dir`, default the system's temp folder) and is read
back from it at the commit. A transaction that does not fit on that disk either stops the collector with a
`CollectorError` naming the transaction; nothing past the last saved commit was acknowledged, so a restart (with
more disk, or a larger `spill_dir`) sends it again: never lost.
"""

from __future__ import annotations

import pickle
import tempfile
from collections.abc import Iterator
from typing import IO

from sharp_dagster.cdc.capture.collector_state import CollectorError
from sharp_dagster.cdc.change.messages import with_commit_ts

DEFAULT_MEMORY_BYTES = 64 * 1024 * 1024


class TxnBuffer:
    """`add` the encoded messages of the open transaction, `drain(commit_ts_ms)` them at its commit."""

    def __init__(self, memory_bytes: int = DEFAULT_MEMORY_BYTES, spill_dir: str | None = None):
        self.memory_bytes = max(0, memory_bytes)
        self.spill_dir = spill_dir
        self._file: IO[bytes] | None = None
        self.messages = 0
        self.bytes = 0
        self.spilled = False
        self.start_es_ms: int | None = None  # the earliest statement time of the open transaction
        self.transactions_spilled = 0  # committed transactions that were held on disk (collector stats)

    def __len__(self) -> int:
        return self.messages

    def add(self, topic: str, partition: int | None, key: bytes | None, value: bytes, es_ms: int) -> None:
        if self._file is None:
            self._file = tempfile.SpooledTemporaryFile(max_size=self.memory_bytes, dir=self.spill_dir)
        try:
            pickle.dump((topic, partition, key, value), self._file, protocol=pickle.HIGHEST_PROTOCOL)
        except OSError as exc:
            self.clear()
            raise CollectorError(
                f"a transaction of more than {self.messages} messages ({self.bytes} bytes) did not fit in "
                f"memory ({self.memory_bytes} bytes) nor on disk under {self.spill_dir or tempfile.gettempdir()}: "
                f"{exc}; nothing of it was sent or saved, a restart with more space reads it again"
            ) from exc
        self.messages += 1
        self.bytes += len(value)
        self.spilled = self.spilled or self.bytes > self.memory_bytes
        self.start_es_ms = es_ms if self.start_es_ms is None else min(self.start_es_ms, es_ms)

    def drain(self, commit_ts_ms: int) -> Iterator[tuple[str, int | None, bytes | None, bytes]]:
        """The held messages in the order added, each with `commitTs`; the buffer is empty afterwards."""
        file, count = self._file, self.messages
        self.transactions_spilled += self.spilled
        self._file = None
        self.messages = self.bytes = 0
        self.spilled = False
        self.start_es_ms = None
        if file is None:
            return
        try:
            file.seek(0)
            for _ in range(count):
                topic, partition, key, value = pickle.load(file)
                yield topic, partition, key, with_commit_ts(value, commit_ts_ms)
        finally:
            file.close()

    def clear(self) -> None:
        """Forget the open transaction (it will be read again from the last commit)."""
        if self._file is not None:
            self._file.close()
        self._file = None
        self.messages = self.bytes = 0
        self.spilled = False
        self.start_es_ms = None
