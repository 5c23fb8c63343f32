"""A seeded random workload for a real MariaDB, run in simulated time, with the source read at each day's end.

The oracle of `test_source_oracle.py`. Three logical tables (`user_info` sharded into `user_info_0..3` whose ids
collide across shards on purpose, `product` which gains a column mid-day, `orders`; rows with odd DATETIME and
DATE values) get a snapshot state on `SNAPSHOT_DAY`, then `DAYS` of ordinary traffic: inserts,
multi-row inserts, updates of one and of several rows in one statement, deletes, deletes then re-inserts of the
same key, primary-key changes, moves between shards, rolled-back transactions. Around two midnights, transactions
on connections of their own stay open across the day boundary and commit seconds, minutes and over an hour after
their first statement (one of them rolls back instead). The last day starts with quiet hours.

Keys never clash between concurrent transactions: the transactions spanning midnight only touch rows reserved for
them (`RESERVED`) and insert ids from 5000 on; ordinary traffic runs one transaction at a time and never touches
the reserved or the frozen rows (`FROZEN`: unchanged since the snapshot, they carry the odd values).

Time is the source's own clock: every statement runs after `SET timestamp = <its simulated time>` on its
connection (MariaDB then uses it for NOW() and for the binlog event), COMMIT included. `SourceRunner.run_until`
executes the plan in time order and, whenever the plan crosses a midnight, reads every table first: the state of
the day that ended, by commit time (a fresh autocommit read sees only committed transactions).
"""

from __future__ import annotations

import datetime as dt
import itertools
import random
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from sharp_dagster_tests.cdc.oracle_schema import (
    ALTER_AT,
    ALTER_SQL,
    COLUMNS,
    DAYS,
    LOGICAL,
    NOW,
    ODD_DATES,
    ODD_DATETIMES,
    PHYSICAL,
    PRIMARY_KEY,
    SHARDS,
    SNAPSHOT_DAY,
    at,
    key_where,
    lit,
    midnight_after,
)


@dataclass
class Event:
    at: dt.datetime
    slot: str  # the connection: "main" (ordinary traffic, one transaction at a time), "ddl", or a long one's
    sql: str
    dml: bool = False  # must change at least one row (else the generator's model of the keys went wrong)


# Rows of the snapshot: ids 1..8 in every shard (so ids collide across shards), then per table which are frozen
# (never touched again) and which are reserved for the transactions that span midnight.
INITIAL_IDS = {"user_info": range(1, 9), "product": range(1, 25), "orders": range(1, 30)}
FROZEN = {"user_info": {1, 2}, "product": {1, 2, 3, 4}, "orders": {1, 2, 3, 4, 5}}
RESERVED = {"user_info": {3, 4, 5}, "product": set(range(5, 15)), "orders": set(range(6, 18))}


@dataclass
class Plan:
    """The workload's statements in time order (the snapshot's rows first); what kinds of change it holds."""

    events: list[Event]
    kinds: Counter = field(default_factory=Counter)  # (day, kind) -> count
    shards_by_day: dict[str, set[str]] = field(default_factory=lambda: defaultdict(set))


class Generator:
    """Builds a `Plan` from a seed (see the module docstring)."""

    def __init__(self, seed: int):
        self.rng = random.Random(seed)
        self.keys: dict[str, set[tuple]] = defaultdict(set)  # physical -> keys ordinary traffic may touch
        self.deleted: dict[str, set[tuple]] = defaultdict(set)  # physical -> keys deleted, to insert again
        self.reserved: dict[str, list[tuple]] = defaultdict(list)  # physical -> keys for the spanning ones
        self.ids = itertools.count(1000)
        self.long_ids = itertools.count(5000)
        self.tokens = itertools.count(1)
        self.events: list[Event] = []
        self.kinds: Counter = Counter()
        self.shards_by_day: dict[str, set[str]] = defaultdict(set)
        self.day = SNAPSHOT_DAY

    # ------------------------------------------------------------------ values
    def row(self, table: str, key: tuple, when: dt.datetime, odd: int | None = None) -> dict[str, Any]:
        """A full row; `odd` puts ODD_DATETIMES[odd] (and an odd DATE) into its date-time columns."""
        r, token = self.rng, next(self.tokens)
        odd_dt = None if odd is None else ODD_DATETIMES[odd % len(ODD_DATETIMES)]
        if table == "user_info":
            return {
                "user_id": key[0],
                "user_name": f"user{key[0]}-{token}",
                "city": r.choice(["Beijing", "Wuhan", "Xiamen", None]),
                "level": r.choice(["bronze", "silver", "gold"]),
                "register_time": odd_dt
                or f"2023-{r.randint(1, 12):02d}-{r.randint(1, 28):02d} 08:{r.randint(0, 59):02d}:00",
                "updated_at": NOW,
            }
        if table == "product":
            row = {
                "product_id": key[0],
                "product_name": f"product{key[0]}-{token}",
                "category": r.choice(["book", "toy", "food", None]),
                "price": Decimal(r.randint(100, 99999)) / 100,
                "updated_at": odd_dt or NOW,
            }
            if when > ALTER_AT:
                row["stock"] = r.randint(0, 50)
            return row
        if table == "orders":
            return {
                "order_id": key[0],
                "user_id": r.randint(1, 40),
                "order_status": r.choice(["paid", "shipped", "done"]),
                "order_time": odd_dt or f"2023-12-{r.randint(1, 31):02d} {r.randint(0, 23):02d}:30:00",
                "due": ODD_DATES[odd % len(ODD_DATES)] if odd is not None else r.choice([None, "2024-02-29"]),
                "total_amount": Decimal(r.randint(0, 999999)) / 100,
                "updated_at": NOW,
            }
        raise ValueError(table)

    def changes(self, table: str, when: dt.datetime) -> dict[str, Any]:
        """A SET clause's values that always change the row (a fresh token), sometimes an odd or NULL value."""
        r, token = self.rng, next(self.tokens)
        if table == "user_info":
            out: dict[str, Any] = {"user_name": f"renamed-{token}", "updated_at": NOW}
            column, choices = r.choice(
                [
                    ("city", [None, "Chengdu"]),
                    ("level", ["vip", None]),
                    ("register_time", [ODD_DATETIMES[0], None]),
                ]
            )
            out[column] = r.choice(choices)
            return out
        if table == "product":
            out = {"product_name": f"product-{token}", "price": Decimal(r.randint(100, 9999)) / 100}
            out["updated_at"] = NOW
            if when > ALTER_AT and r.random() < 0.5:
                out["stock"] = r.randint(0, 50)
            return out
        amount = Decimal(r.randint(0, 99999)) / 100
        out = {"order_status": f"s{token}", "total_amount": amount, "updated_at": NOW}
        if r.random() < 0.5:
            out["order_time"] = r.choice([ODD_DATETIMES[0], "2024-01-02 03:04:05"])  # NOT NULL
        else:
            out["due"] = r.choice([None, ODD_DATES[0], "2024-01-02"])
        return out

    def new_key(self, table: str, physical: str) -> tuple:
        """A key not present in `physical`: a deleted one again, an id of another shard, or a new one."""
        r = self.rng
        free = sorted(self.deleted[physical] - self.keys[physical])
        if free and r.random() < 0.3:
            return r.choice(free)
        if table == "user_info" and r.random() < 0.3:
            others = sorted({k for p in SHARDS if p != physical for k in self.keys[p]} - self.keys[physical])
            if others:
                return r.choice(others)
        return (next(self.ids),)

    # ------------------------------------------------------------------ statements
    def emit(self, when: dt.datetime, slot: str, sql: str, dml: bool = True) -> None:
        self.events.append(Event(when, slot, sql, dml))

    def insert(self, when, slot, physical: str, rows: list[dict[str, Any]]) -> None:
        cols = list(rows[0])
        values = ", ".join("(" + ", ".join(lit(r[c]) for c in cols) + ")" for r in rows)
        self.emit(
            when, slot, f"INSERT INTO `{physical}` ({', '.join(f'`{c}`' for c in cols)}) VALUES {values}"
        )
        self.shards_by_day[self.day].add(physical)

    def update(self, when, slot, physical: str, keys: list[tuple], values: dict[str, Any]) -> None:
        sets = ", ".join(f"`{c}` = {lit(v)}" for c, v in values.items())
        self.emit(when, slot, f"UPDATE `{physical}` SET {sets} WHERE {key_where(LOGICAL[physical], keys)}")
        self.shards_by_day[self.day].add(physical)

    def delete(self, when, slot, physical: str, keys: list[tuple]) -> None:
        self.emit(when, slot, f"DELETE FROM `{physical}` WHERE {key_where(LOGICAL[physical], keys)}")
        self.shards_by_day[self.day].add(physical)

    def key_change(self, when, slot, physical: str, old: tuple, new: tuple) -> None:
        table = LOGICAL[physical]
        sets = {c: v for c, v in zip(PRIMARY_KEY[table], new, strict=True)}
        sets["updated_at"] = NOW
        self.update(when, slot, physical, [old], sets)

    # ------------------------------------------------------------------ the snapshot state
    def initial(self) -> None:
        """The rows the snapshot holds: frozen ones with odd values, reserved ones, ordinary ones."""
        when = at(SNAPSHOT_DAY, 12)
        odd = itertools.count()
        for table, ids in INITIAL_IDS.items():
            for physical in PHYSICAL[table]:
                rows = []
                for i in ids:
                    rows.append(self.row(table, (i,), when, next(odd) if i in FROZEN[table] else None))
                    if i in RESERVED[table]:
                        self.reserved[physical].append((i,))
                    elif i not in FROZEN[table]:
                        self.keys[physical].add((i,))
                self.insert(when, "main", physical, rows)

    # ------------------------------------------------------------------ ordinary traffic
    def ordinary_day(self, day: str, busy: list[tuple[int, int]], count: int) -> None:
        """`count` transactions in the day's busy hours (`busy`: (from hour, to hour) windows), the first at the
        first window's start, one at a time (at least 90 s apart, none near the DDL); the other hours are quiet."""
        self.day = day
        slots = [
            at(day, h) + dt.timedelta(seconds=s)
            for a, b in busy
            for h in range(a, b)
            for s in range(0, 3600, 90)
        ]
        chosen = [slots[0], *self.rng.sample(slots[1:], count - 1)]
        for start in sorted(chosen):
            if abs((start - ALTER_AT).total_seconds()) < 120:
                continue  # the ALTER must not wait for this transaction's metadata lock
            self.ordinary_transaction(start)

    def ordinary_transaction(self, start: dt.datetime) -> None:
        r = self.rng
        ops = [r.choice(OPS) for _ in range(r.choice([1, 1, 2, 3]))]
        rollback = r.random() < 0.1
        saved = ({p: set(k) for p, k in self.keys.items()}, {p: set(k) for p, k in self.deleted.items()})
        explicit = rollback or len(ops) > 1 or r.random() < 0.3
        when = start
        if explicit:
            self.emit(when, "main", "BEGIN", dml=False)
        done = []
        for op in ops:
            when += dt.timedelta(seconds=r.randint(0, 8))
            table = r.choices(list(COLUMNS), weights=[4, 2, 3])[0]
            done.append(self.apply(op, when, table))
            when += dt.timedelta(seconds=1)
        if explicit:
            when += dt.timedelta(seconds=r.randint(0, 5))
            self.emit(when, "main", "ROLLBACK" if rollback else "COMMIT", dml=False)
        if rollback:
            self.keys, self.deleted = defaultdict(set, saved[0]), defaultdict(set, saved[1])
            self.kinds[(self.day, "rolled back")] += 1
        else:
            self.kinds.update((self.day, kind) for kind in done)
            self.kinds[(self.day, "multi-statement transaction")] += explicit and len(ops) > 1

    def apply(self, op: str, when: dt.datetime, table: str) -> str:
        """Apply `op` (a name of OPS) to `table`; the kind of change it made (an insert when no key is left)."""
        if op in KEYED_OPS:
            picked = self.pick(table)
            if picked is None:
                return self.op_insert(when, table)
            return getattr(self, f"op_{op}")(when, table, *picked)
        return getattr(self, f"op_{op}")(when, table)

    def pick(self, table: str) -> tuple[str, tuple] | None:
        """A physical table of `table` and one of its keys ordinary traffic may touch, or None."""
        candidates = [p for p in PHYSICAL[table] if self.keys[p]]
        if not candidates:
            return None
        physical = self.rng.choice(candidates)
        return physical, self.rng.choice(sorted(self.keys[physical]))

    def op_insert(self, when, table) -> str:
        physical = self.rng.choice(PHYSICAL[table])
        key = self.new_key(table, physical)
        self.insert(when, "main", physical, [self.row(table, key, when)])
        self.keys[physical].add(key)
        return "insert"

    def op_insert_many(self, when, table) -> str:
        physical = self.rng.choice(PHYSICAL[table])
        keys: list[tuple] = []
        while len(keys) < self.rng.randint(2, 3):
            key = self.new_key(table, physical)
            if key not in keys:
                keys.append(key)
        self.insert(when, "main", physical, [self.row(table, k, when) for k in keys])
        self.keys[physical].update(keys)
        return "multi-row insert"

    def op_update(self, when, table, physical: str, key: tuple) -> str:
        self.update(when, "main", physical, [key], self.changes(table, when))
        return "update"

    def op_update_many(self, when, table) -> str:
        candidates = [p for p in PHYSICAL[table] if len(self.keys[p]) >= 2]
        if not candidates:
            return self.apply("update", when, table)
        physical = self.rng.choice(candidates)
        keys = self.rng.sample(sorted(self.keys[physical]), min(3, len(self.keys[physical])))
        self.update(when, "main", physical, keys, self.changes(table, when))
        return "multi-row update"

    def op_delete(self, when, table, physical: str, key: tuple) -> str:
        self.delete(when, "main", physical, [key])
        self.keys[physical].discard(key)
        self.deleted[physical].add(key)
        return "delete"

    def op_delete_reinsert(self, when, table, physical: str, key: tuple) -> str:
        self.delete(when, "main", physical, [key])
        self.insert(when + dt.timedelta(seconds=1), "main", physical, [self.row(table, key, when)])
        return "delete then re-insert"

    def op_key_change(self, when, table, physical: str, old: tuple) -> str:
        new = self.new_key(table, physical)
        self.key_change(when, "main", physical, old, new)
        self.keys[physical].discard(old)
        self.keys[physical].add(new)
        self.deleted[physical].add(old)
        return "primary-key change"

    def op_move_shard(self, when, table) -> str:
        picked = self.pick("user_info")
        source, key = picked if picked else (None, None)
        targets = [p for p in SHARDS if p != source and key not in self.keys[p]]
        if picked is None or not targets:
            return self.apply("update", when, "user_info")
        target = self.rng.choice(targets)
        self.delete(when, "main", source, [key])
        self.insert(when + dt.timedelta(seconds=1), "main", target, [self.row("user_info", key, when)])
        self.keys[source].discard(key)
        self.keys[target].add(key)
        return "move between shards"

    # ------------------------------------------------------------------ around midnight
    def take(self, table: str) -> tuple[str, tuple]:
        """A reserved row (its physical table and key) for a transaction spanning midnight."""
        candidates = [p for p in PHYSICAL[table] if self.reserved[p]]
        physical = self.rng.choice(candidates)
        return physical, self.reserved[physical].pop(0)

    def spanning(self, day: str) -> None:
        """Transactions open across the midnight after `day`, on connections of their own (see module doc)."""
        m = midnight_after(day)
        s, mi = (lambda n: dt.timedelta(seconds=n)), (lambda n: dt.timedelta(minutes=n))
        # A: commits 3 s after midnight, 8 s after its first statement.
        self.emit(m - s(8), "A", "BEGIN", dml=False)
        physical, key = self.take("user_info")
        self.update(m - s(8), "A", physical, [key], self.changes("user_info", m - s(8)))
        order = (next(self.long_ids),)
        self.insert(m - s(3), "A", "orders", [self.row("orders", order, m - s(3))])
        self.emit(m + s(3), "A", "COMMIT", dml=False)
        # B: commits 4 minutes after midnight; deletes a row before midnight and inserts it again after.
        self.emit(m - mi(4), "B", "BEGIN", dml=False)
        physical, key = self.take("product")
        self.update(m - mi(4), "B", physical, [key], self.changes("product", m - mi(4)))
        _, again = self.take("orders")
        self.delete(m - s(90), "B", "orders", [again])
        user = (next(self.long_ids),)
        self.insert(m + s(60), "B", self.rng.choice(SHARDS), [self.row("user_info", user, m + s(60))])
        self.insert(m + s(90), "B", "orders", [self.row("orders", again, m + s(90))])
        self.emit(m + mi(4), "B", "COMMIT", dml=False)
        # C: open 85 minutes, commits at 01:05, past the next day's first hour and the lateness.
        self.emit(m - mi(20), "C", "BEGIN", dml=False)
        _, order_key = self.take("orders")
        self.update(m - mi(20), "C", "orders", [order_key], self.changes("orders", m - mi(20)))
        physical, key = self.take("user_info")
        self.key_change(m - mi(10), "C", physical, key, (next(self.long_ids),))
        product = (next(self.long_ids),)
        self.insert(m + mi(30), "C", "product", [self.row("product", product, m + mi(30))])
        _, gone = self.take("product")
        self.delete(m + mi(40), "C", "product", [gone])
        keys = [self.take("orders")[1], self.take("orders")[1]]
        self.update(m + mi(45), "C", "orders", keys, self.changes("orders", m + mi(45)))
        self.emit(m + mi(65), "C", "COMMIT", dml=False)
        # R: spans midnight and rolls back.
        self.emit(m - mi(2), "R", "BEGIN", dml=False)
        _, order_key = self.take("orders")
        self.update(m - mi(2), "R", "orders", [order_key], self.changes("orders", m - mi(2)))
        self.insert(m - mi(2), "R", "orders", [self.row("orders", (next(self.long_ids),), m - mi(2))])
        _, product_key = self.take("product")
        self.update(m + mi(1), "R", "product", [product_key], self.changes("product", m + mi(1)))
        self.emit(m + mi(2), "R", "ROLLBACK", dml=False)
        for kind in (
            "commits seconds after midnight",
            "commits minutes after midnight",
            "commits over an hour after midnight",
            "rolled back after midnight",
        ):
            self.kinds[(day, kind)] += 1

    def plan(self) -> Plan:
        events = sorted(enumerate(self.events), key=lambda ie: (ie[1].at, ie[0]))
        return Plan([e for _, e in events], self.kinds, self.shards_by_day)


KEYED_OPS = {"update", "delete", "delete_reinsert", "key_change"}  # ops on one existing key
OPS = [
    "insert",
    "insert_many",
    "update",
    "update",
    "update_many",
    "delete",
    "delete_reinsert",
    "key_change",
    "move_shard",
]


def build_plan(seed: int) -> Plan:
    """The workload: the snapshot rows, three days of traffic, midnights crossed by open transactions."""
    g = Generator(seed)
    g.initial()
    d1, d2, d3 = DAYS
    # Traffic in a few busy hours (few landing partitions, quiet hours between); day 3 starts quiet (00-03).
    g.ordinary_day(d1, [(0, 1), (9, 10), (16, 17), (23, 24)], 40)
    g.spanning(d1)
    g.ordinary_day(d2, [(2, 3), (11, 13), (20, 21)], 40)
    g.emit(ALTER_AT, "ddl", ALTER_SQL, dml=False)
    g.kinds[(d2, "add column")] += 1
    g.ordinary_day(d3, [(4, 5), (14, 15), (23, 24)], 30)
    g.spanning(d3)
    return g.plan()
