"""Random days of binlog changes for the merge tests: a few keys with a random base state and a random day of
inserts, full and partial updates, key changes, deletes, duplicates, replays of older positions and truncates,
with Kafka offsets and timestamps shuffled (`scenario`); each scenario's number is part of the key and it has
shards (physical tables) of its own."""

from __future__ import annotations

import random
from typing import Any

from sharp_dagster_tests.cdc.merge_reference import (
    DELETED,
    SEQ,
    change,
    seq_of,
)

COLUMNS = [
    ("scn", "bigint"),
    ("id", "bigint"),
    ("source_table", "string"),
    ("a", "string"),
    ("b", "bigint"),
    ("c", "int"),
]
KEY = ["scn", "id", "source_table"]
SCENARIOS = 40  # scenarios per random test: one Spark merge runs them all
VALUES = ("a", "b", "c")
FILES = ("mysql-bin.999999", "mysql-bin.1000000")


def _value(rng: random.Random, name: str) -> Any:
    if rng.random() < 0.15:
        return None
    if name == "a":
        return rng.choice(["x", "y", "z", "w"]) + str(rng.randint(0, 9))
    number = rng.randint(-50, 1000)
    return str(number) if rng.random() < 0.3 else number  # Canal strings and plain JSON numbers alike


def scenario(scn: int, seed: int, *, sharded_truncates: bool = True) -> tuple[list[dict], list[dict]]:
    """A random base state and day of changes for scenario `scn`."""
    rng = random.Random(seed)
    shards = [f"s{scn}_t{i}" for i in range(rng.choice([1, 2]))]
    ids = list(range(1, rng.randint(2, 5)))
    base = []
    for shard in shards:
        for id_ in ids:
            if rng.random() < 0.6:
                deleted = rng.random() < 0.2
                values = {v: None if deleted else _value(rng, v) for v in VALUES}
                values["b"] = int(values["b"]) if values["b"] is not None else None
                values["c"] = int(values["c"]) if values["c"] is not None else None
                base.append(
                    {"scn": scn, "id": id_, "source_table": shard, **values}
                    | {SEQ: seq_of(rng.randint(100, 300), file=FILES[0]), DELETED: deleted}
                )
    events: list[dict] = []
    pos = rng.randint(20, 250)  # may start before the base rows' positions: replays
    file_index = 0
    for _ in range(rng.randint(3, 14)):
        pos += rng.randint(1, 40)
        if rng.random() < 0.1 and file_index == 0:
            file_index, pos = 1, rng.randint(4, 50)  # rotate to the next binlog file
        shard = rng.choice(shards)
        id_ = rng.choice(ids + [max(ids) + 1])
        image_key = {"scn": scn, "id": id_}
        where = {"pos": pos, "file": FILES[file_index], "table": shard, "source": f"src{scn}"}
        kind = rng.choices(
            ["insert", "read", "full", "partial", "pk", "delete", "truncate", "duplicate"],
            weights=[4, 1, 3, 5, 2, 3, 1 if sharded_truncates else 0, 2],
        )[0]
        if kind == "duplicate":
            if events:
                events.append(dict(rng.choice(events), kafka_offset=rng.randint(0, 10_000)))
            continue
        if kind in ("insert", "read"):
            after = image_key | {v: _value(rng, v) for v in VALUES if rng.random() < 0.9}
            events.append(change("c" if kind == "insert" else "r", after=after, **where))
        elif kind == "full":
            after = image_key | {v: _value(rng, v) for v in VALUES}
            events.append(change("u", before=dict(image_key), after=after, **where))
        elif kind == "partial":
            carried = rng.sample(VALUES, rng.randint(0, len(VALUES)))
            after = {v: _value(rng, v) for v in carried}
            if rng.random() < 0.7:
                after |= image_key  # a minimal image may leave the key to the before image
            events.append(change("u", before=dict(image_key), after=after, **where))
        elif kind == "pk":
            new_id = rng.choice([i for i in ids + [max(ids) + 1] if i != id_])
            before = image_key | {v: _value(rng, v) for v in VALUES if rng.random() < 0.7}
            after = {"scn": scn, "id": new_id} | {v: _value(rng, v) for v in VALUES if rng.random() < 0.5}
            events.append(change("u", before=before, after=after, **where))
        elif kind == "delete":
            events.append(change("d", before=image_key | {"a": _value(rng, "a")}, **where))
        elif kind == "truncate":
            events.append(change("t", **where))
    for event in events:
        event["kafka_offset"] = rng.randint(0, 10_000)
        event["event_ts_ms"] = 1_700_000_000_000 + rng.randint(0, 3) * 1000  # ties and reversals
    rng.shuffle(events)
    return base, events


def sorted_by_key(rows: list[dict]) -> list[dict]:
    """State rows in key order (nulls last), for comparing a merge's rows with the oracle's."""
    return sorted(rows, key=lambda row: tuple((row[k] is None, str(row[k])) for k in KEY))
