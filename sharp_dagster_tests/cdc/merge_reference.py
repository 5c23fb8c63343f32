"""A pure-Python oracle of the daily binlog merge and the raw-binlog row builders the merge tests share (its own
tests on hand-worked cases: `test_merge_reference.py`).

The oracle replays events one by one in binlog order on a dict of rows: the obvious, slow, sequential reading of
the rules, against which the set-based Spark merge (`sharp_dagster.cdc.merge.fold`) is compared.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from decimal import Decimal
from typing import Any

from sharp_dagster.cdc.change.binlog_schema import RAW_BINLOG_COLUMNS, binlog_file_seq, binlog_seq, event_uid

SEQ, DELETED = "_binlog_seq", "_is_deleted"
_ABSENT = object()


# ---------------------------------------------------------------------------------------------------------------
# raw binlog rows


def change(
    op: str,
    pos: int,
    *,
    after: Mapping[str, Any] | None = None,
    before: Mapping[str, Any] | None = None,
    file: str = "mysql-bin.000001",
    row: int = 0,
    table: str = "orders",
    source: str = "src1",
    ts_ms: int = 1_700_000_000_000,
    kafka_offset: int = 0,
    ddl: str | None = None,
) -> dict[str, Any]:
    """One raw binlog row as the landing writes it (`binlog_schema.RAW_BINLOG_COLUMNS`)."""
    file_seq = binlog_file_seq(file)
    return {
        "source_id": source,
        "binlog_file": file,
        "binlog_file_seq": file_seq,
        "binlog_pos": pos,
        "row_idx": row,
        "binlog_seq": Decimal(binlog_seq(file_seq, pos, row)),
        "gtid": None,
        "event_uid": event_uid(source, file, pos, row),
        "event_ts_ms": ts_ms,
        "op": op,
        "source_db": "shop",
        "source_table": table,
        "pk_names": ["id"],
        "before_json": json.dumps(before) if before is not None else None,
        "after_json": json.dumps(after) if after is not None else None,
        "ddl_sql": ddl,
        "kafka_topic": "binlog.shop",
        "kafka_partition": 0,
        "kafka_offset": kafka_offset,
        "ingest_ts_ms": ts_ms,
    }


def seq_of(pos: int, file: str = "mysql-bin.000001", row: int = 0) -> int:
    return binlog_seq(binlog_file_seq(file), pos, row)


def changes_frame(spark, rows: Iterable[Mapping[str, Any]]):
    schema = ", ".join(f"{name} {typ}" for name, typ in RAW_BINLOG_COLUMNS)
    return spark.createDataFrame([tuple(r[name] for name, _ in RAW_BINLOG_COLUMNS) for r in rows], schema)


def state_frame(spark, rows: Iterable[Mapping[str, Any]], columns: Sequence[tuple[str, str]]):
    schema = ", ".join(f"{name} {typ}" for name, typ in columns) + f", {SEQ} decimal(38,0), {DELETED} boolean"
    data = [
        tuple(r.get(name) for name, _ in columns)
        + (Decimal(r[SEQ]) if r[SEQ] is not None else None, bool(r.get(DELETED, False)))
        for r in rows
    ]
    return spark.createDataFrame(data, schema)


def collect_state(df) -> list[dict[str, Any]]:
    """The rows of a state DataFrame as plain dicts (positions as int), sorted for comparison."""
    rows = []
    for row in df.collect():
        item = row.asDict()
        if item.get(SEQ) is not None:
            item[SEQ] = int(item[SEQ])
        rows.append(item)
    return sorted(rows, key=_sort_key)


def _sort_key(row: Mapping[str, Any]) -> list:
    return [(v is None, str(v)) for v in row.values()]


# ---------------------------------------------------------------------------------------------------------------
# the oracle


def merge_reference(
    base_rows: Iterable[Mapping[str, Any]],
    change_rows: Iterable[Mapping[str, Any]],
    key_columns: Sequence[str],
    *,
    columns: Sequence[tuple[str, str]],
    shard_column: str | None = None,
    defaults: Mapping[str, Any] | None = None,
) -> list[dict[str, Any]]:
    """Replay the changes one by one, in binlog order, on the base rows; return the new state rows (sorted)."""
    types = dict(columns)
    names = [name for name, _ in columns]
    defaults = dict(defaults or {})
    keys = list(key_columns)
    state: dict[tuple, dict[str, Any]] = {}
    for base_row in base_rows:
        row = {name: base_row.get(name, defaults.get(name)) for name in names}
        row[SEQ] = int(base_row[SEQ]) if base_row.get(SEQ) is not None else None
        row[DELETED] = bool(base_row.get(DELETED, False))
        state[tuple(row[k] for k in keys)] = row

    unique: dict[str, Mapping[str, Any]] = {}
    for event in change_rows:
        unique.setdefault(event["event_uid"], event)
    events = sorted(unique.values(), key=lambda e: (int(e["binlog_seq"]), e["event_uid"]))

    def key_of(event, first: Mapping | None, second: Mapping | None) -> tuple:
        values = []
        for k in keys:
            if k == shard_column:
                values.append(event["source_table"])
                continue
            raw = (first or {}).get(k, _ABSENT)
            if raw is _ABSENT:
                raw = (second or {}).get(k)
            values.append(_cast(raw, types[k]))
        return tuple(values)

    def newer(key: tuple, seq: int) -> bool:
        current = state.get(key)
        return current is None or current[SEQ] is None or seq > current[SEQ]

    def tombstone(key: tuple, seq: int, shard: Any) -> dict[str, Any]:
        row = {name: None for name in names}
        row.update(zip(keys, key, strict=True))
        if shard_column:
            row[shard_column] = shard
        row[SEQ], row[DELETED] = seq, True
        return row

    def full_row(key: tuple, seq: int, image: Mapping[str, Any], event) -> dict[str, Any]:
        row = {}
        for name in names:
            if name in image:
                row[name] = _cast(image[name], types[name])
            else:
                row[name] = _cast(defaults.get(name), types[name])
        row.update(zip(keys, key, strict=True))
        if shard_column:
            row[shard_column] = event["source_table"]
        row[SEQ], row[DELETED] = seq, False
        return row

    for event in events:
        op, seq = event["op"], int(event["binlog_seq"])
        if op == "ddl":
            continue
        if op == "t":
            for key, row in list(state.items()):
                in_scope = shard_column is None or row.get(shard_column) == event["source_table"]
                if in_scope and (row[SEQ] is None or row[SEQ] < seq):
                    state[key] = tombstone(key, seq, row.get(shard_column) if shard_column else None)
            continue
        after = json.loads(event["after_json"]) if event["after_json"] else None
        before = json.loads(event["before_json"]) if event["before_json"] else None
        if op in ("c", "r"):
            key = key_of(event, after, before)
            if newer(key, seq):
                state[key] = full_row(key, seq, after or {}, event)
        elif op == "d":
            key = key_of(event, before, after)
            if newer(key, seq):
                state[key] = tombstone(key, seq, event["source_table"])
        elif op == "u":
            new_key, old_key = key_of(event, after, before), key_of(event, before, after)
            if new_key != old_key:
                if newer(old_key, seq):
                    state[old_key] = tombstone(old_key, seq, event["source_table"])
                if newer(new_key, seq):
                    # The new key's row: the after image, completed from the before image.
                    state[new_key] = full_row(new_key, seq, {**(before or {}), **(after or {})}, event)
            elif newer(new_key, seq):
                current = state.get(new_key)
                row = dict(current) if current else {name: None for name in names}
                row.update(zip(keys, new_key, strict=True))
                for name, value in (after or {}).items():
                    if name in types and name not in keys and name != shard_column:
                        row[name] = _cast(value, types[name])
                if shard_column:
                    row[shard_column] = event["source_table"]
                row[SEQ], row[DELETED] = seq, False
                state[new_key] = row
        else:
            raise ValueError(f"unknown op {op!r}")
    return sorted(state.values(), key=_sort_key)


def _cast(value: Any, typ: str) -> Any:
    if value is None:
        return None
    typ = typ.lower()
    if typ in ("int", "bigint", "smallint", "tinyint"):
        return int(value)
    if typ == "string":
        return value if isinstance(value, str) else json.dumps(value)
    if typ.startswith("decimal"):
        scale = int(typ.split(",")[1].rstrip(")")) if "," in typ else 0
        return Decimal(str(value)).quantize(Decimal(1).scaleb(-scale))
    if typ == "double":
        return float(value)
    if typ == "boolean":
        return value if isinstance(value, bool) else str(value).lower() in ("1", "true", "t", "y", "yes")
    raise ValueError(f"the oracle does not cast to {typ}")
