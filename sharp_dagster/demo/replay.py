"""Replay the generated shop's changes through Kafka as the collector would send them (the demo's binlog).

Each generated row change becomes one Canal flat message with a binlog identity: file `demo-bin.000001`, the
position derived from the change's commit order (`_seq`), row index 0, and a GTID per transaction. Keys and
partitions follow the collector (`<logical table>|<json pk>`), so the landing and the merge see exactly what a
real capture produces. After a day, a HEARTBEAT to every partition says "everything up to the day's end has been
sent", which lets the landing mark the day's 24 hours done.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient

from sharp_dagster.cdc.change.messages import HEARTBEAT, BinlogMessage, encode
from sharp_dagster.demo.generator import read_changes
from sharp_dagster.demo.shop import SOURCE_DB, TABLES

BINLOG_FILE = "demo-bin.000001"
OPS = {"c": "INSERT", "u": "UPDATE", "d": "DELETE"}


def _epoch_ms(text: str) -> int:
    return int(datetime.strptime(text, "%Y-%m-%d %H:%M:%S").replace(tzinfo=UTC).timestamp() * 1000)


def _canonical(value: Any, spark_type: str) -> str | None:
    """The string form the collector gives a column value (decimals keep their scale)."""
    if value is None:
        return None
    if spark_type.startswith("decimal"):
        scale = int(spark_type.rstrip(")").split(",")[1])
        return f"{Decimal(str(value)):.{scale}f}"
    if spark_type in ("bigint", "int"):
        return str(int(value))
    return str(value)


def change_message(change: dict[str, Any], source_id: str) -> tuple[BinlogMessage, str]:
    """The message of one generated change and its Kafka key."""
    table = TABLES[change["_table"]]
    row = {c.name: _canonical(change.get(c.name), c.spark_type) for c in table.columns}
    pk = {k: row[k] for k in table.primary_key}
    op = OPS[change["_op"]]
    message = BinlogMessage(
        type=op,
        source_id=source_id,
        database=SOURCE_DB,
        table=change["_source_table"],
        event_ts_ms=_epoch_ms(change["_ts"]),
        binlog_file=BINLOG_FILE,
        binlog_pos=4 + 100 * int(change["_seq"]),
        row_idx=0,
        gtid=f"0-1-{change['_txn']}",
        server_id=1,
        pk_names=list(table.primary_key),
        data=row,
        before=pk
        if op == "UPDATE"
        else None,  # the generator never changes a key: the key is the before image
        old={} if op == "UPDATE" else None,
    )
    key = f"{table.name}|{json.dumps([row[k] for k in table.primary_key])}"
    return message, key


def replay_day(
    sample_dir: str | Path, day: str, bootstrap: str, topic: str, source_id: str, lateness_minutes: int = 15
) -> int:
    """Produce the day's changes, then a heartbeat (event time: the day's end) to every partition."""

    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "partitioner": "murmur2_random"})
    sent = 0
    errors: list[str] = []

    def delivered(err, _msg) -> None:
        if err is not None:
            errors.append(str(err))

    for change in read_changes(sample_dir, day):
        message, key = change_message(change, source_id)
        producer.produce(topic, encode(message), key=key.encode(), on_delivery=delivered)
        sent += 1
        if sent % 5000 == 0:
            producer.flush(30)
    partitions = len(
        AdminClient({"bootstrap.servers": bootstrap}).list_topics(topic, timeout=15).topics[topic].partitions
    )
    # "Everything up to the next day 00:00 + lateness has been sent": all 24 hours of the day can be marked done.
    day_end = _epoch_ms(f"{day} 23:59:59") + 1000 + (lateness_minutes + 1) * 60_000
    for partition in range(partitions):
        beat = BinlogMessage(
            type=HEARTBEAT,
            source_id=source_id,
            database=SOURCE_DB,
            table="",
            event_ts_ms=day_end,
            binlog_file=BINLOG_FILE,
            binlog_pos=0,
        )
        producer.produce(topic, encode(beat), partition=partition, on_delivery=delivered)
    remaining = producer.flush(60)
    if remaining or errors:
        raise RuntimeError(f"replay of {day}: {remaining} messages undelivered, errors: {errors[:3]}")
    return sent
