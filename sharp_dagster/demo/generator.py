"""A deterministic generator of the shop's data: an initial snapshot and several days of row changes.

Output under `<out>/shop/` (JSON lines, timestamps as 'yyyy-MM-dd HH:mm:ss', decimals as numbers):
- `snapshot/<logical table>/<physical table>.jsonl`: the source tables at `start` 00:00, each row with
  `_source_table`.
- `changes/<logical table>/dt=<day>/changes.jsonl`: every row change of that day in commit order, each row the
  table's columns (the after image; the before image for a delete) plus `_seq` (a global, gap-free commit order),
  `_txn` (transaction number), `_ts` (commit time), `_op` (`c` insert, `u` update, `d` delete) and `_source_table`.
- `manifest.json`: the parameters and the row counts, so a second call with the same parameters is a no-op.

The same seed and size always give byte-identical files.
"""

from __future__ import annotations

import json
import random
import shutil
from dataclasses import asdict, dataclass, field
from datetime import date, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

from sharp_dagster.demo.shop import TABLES, shard_of_user

CITIES = ["Shanghai", "Beijing", "Shenzhen", "Hangzhou", "Chengdu", "Wuhan", "Xi'an", "Nanjing"]
LEVELS = ["bronze", "silver", "gold", "platinum"]
CATEGORIES = ["books", "electronics", "home", "toys", "food", "sports"]
STATUS_FLOW = {"created": "paid", "paid": "shipped", "shipped": "completed"}


@dataclass(frozen=True)
class GeneratorConfig:
    seed: int = 7
    start: str = "2024-01-01"
    days: int = 7
    users: int = 200
    products: int = 40
    orders_per_day: int = 120
    history_orders: int = 150

    @property
    def start_date(self) -> date:
        return date.fromisoformat(self.start)

    @property
    def day_keys(self) -> list[str]:
        return [(self.start_date + timedelta(days=i)).isoformat() for i in range(self.days)]


@dataclass
class _State:
    users: dict[int, dict[str, Any]] = field(default_factory=dict)
    products: dict[int, dict[str, Any]] = field(default_factory=dict)
    orders: dict[int, dict[str, Any]] = field(default_factory=dict)
    items: dict[int, dict[str, Any]] = field(default_factory=dict)
    next_user: int = 1
    next_product: int = 1
    next_order: int = 1
    next_item: int = 1


def _ts(value: datetime) -> str:
    return value.strftime("%Y-%m-%d %H:%M:%S")


def _money(value: float) -> Decimal:
    return Decimal(str(round(value, 2))).quantize(Decimal("0.01"))


class _Writer:
    """Collects change rows in commit order with a global sequence."""

    def __init__(self) -> None:
        self.seq = 0
        self.txn = 0
        self.rows: list[tuple[str, dict[str, Any]]] = []

    def begin(self) -> None:
        self.txn += 1

    def emit(self, logical: str, physical: str, op: str, ts: datetime, row: dict[str, Any]) -> None:
        self.seq += 1
        record = dict(row)
        record.update(
            {"_seq": self.seq, "_txn": self.txn, "_ts": _ts(ts), "_op": op, "_source_table": physical}
        )
        self.rows.append((logical, record))


def _new_user(st: _State, rng: random.Random, when: datetime) -> dict[str, Any]:
    uid = st.next_user
    st.next_user += 1
    row = {
        "user_id": uid,
        "user_name": f"user_{uid:05d}",
        "city": rng.choice(CITIES),
        "level": rng.choice(LEVELS[:2]),
        "register_time": _ts(when),
        "updated_at": _ts(when),
    }
    st.users[uid] = row
    return row


def _new_product(st: _State, rng: random.Random, when: datetime) -> dict[str, Any]:
    pid = st.next_product
    st.next_product += 1
    category = CATEGORIES[pid % len(CATEGORIES)]
    row = {
        "product_id": pid,
        "product_name": f"{category}-{pid:04d}",
        "category": category,
        "price": _money(rng.uniform(5, 500)),
        "updated_at": _ts(when),
    }
    st.products[pid] = row
    return row


def _new_order(st: _State, rng: random.Random, when: datetime) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    oid = st.next_order
    st.next_order += 1
    user_id = rng.choice(sorted(st.users))
    items = []
    for _ in range(rng.randint(1, 4)):
        iid = st.next_item
        st.next_item += 1
        product = st.products[rng.choice(sorted(st.products))]
        item = {
            "item_id": iid,
            "order_id": oid,
            "product_id": product["product_id"],
            "quantity": rng.randint(1, 3),
            "unit_price": product["price"],
        }
        st.items[iid] = item
        items.append(item)
    total = sum((i["unit_price"] * i["quantity"] for i in items), Decimal("0.00"))
    order = {
        "order_id": oid,
        "user_id": user_id,
        "order_status": "created",
        "order_time": _ts(when),
        "total_amount": total,
        "updated_at": _ts(when),
    }
    st.orders[oid] = order
    return order, items


def _simulate_day(st: _State, rng: random.Random, cfg: GeneratorConfig, day: date, out: _Writer) -> None:
    """One day of business, as row changes in commit order."""
    base = datetime(day.year, day.month, day.day)
    # Event times spread over the day; sorted so commit order follows time (as a binlog does).
    n_events = cfg.orders_per_day * 2 + cfg.users // 10
    moments = sorted(base + timedelta(seconds=rng.randint(60, 86_340)) for _ in range(n_events))
    kinds = (
        ["order"] * cfg.orders_per_day
        + ["status"] * (cfg.orders_per_day // 2)
        + ["cancel"] * max(1, cfg.orders_per_day // 20)
        + ["purge"] * max(1, cfg.orders_per_day // 40)
        + ["new_user"] * max(1, cfg.users // 40)
        + ["user_update"] * max(1, cfg.users // 30)
        + ["user_delete"] * max(1, cfg.users // 200)
        + ["price"] * max(1, cfg.products // 8)
        + ["new_product"] * 1
    )
    rng.shuffle(kinds)
    for when, kind in zip(moments, kinds, strict=False):
        out.begin()
        if kind == "order":
            order, items = _new_order(st, rng, when)
            out.emit("orders", "orders", "c", when, order)
            for item in items:
                out.emit("order_item", "order_item", "c", when, item)
        elif kind == "status":
            open_orders = [o for o in st.orders.values() if o["order_status"] in STATUS_FLOW]
            if open_orders:
                order = rng.choice(sorted(open_orders, key=lambda o: o["order_id"]))
                order["order_status"] = STATUS_FLOW[order["order_status"]]
                order["updated_at"] = _ts(when)
                out.emit("orders", "orders", "u", when, order)
        elif kind == "cancel":
            created = [o for o in st.orders.values() if o["order_status"] == "created"]
            if created:
                order = rng.choice(sorted(created, key=lambda o: o["order_id"]))
                order["order_status"] = "cancelled"
                order["updated_at"] = _ts(when)
                out.emit("orders", "orders", "u", when, order)
        elif kind == "purge":
            cancelled = sorted(oid for oid, o in st.orders.items() if o["order_status"] == "cancelled")
            if cancelled:
                oid = cancelled[0]
                for iid in sorted(i for i, item in st.items.items() if item["order_id"] == oid):
                    out.emit("order_item", "order_item", "d", when, st.items.pop(iid))
                out.emit("orders", "orders", "d", when, st.orders.pop(oid))
        elif kind == "new_user":
            row = _new_user(st, rng, when)
            out.emit("user_info", shard_of_user(row["user_id"]), "c", when, row)
        elif kind == "user_update":
            uid = rng.choice(sorted(st.users))
            row = st.users[uid]
            row["city"] = rng.choice(CITIES)
            row["level"] = LEVELS[min(LEVELS.index(row["level"]) + 1, len(LEVELS) - 1)]
            row["updated_at"] = _ts(when)
            out.emit("user_info", shard_of_user(uid), "u", when, row)
        elif kind == "user_delete":
            buyers = {o["user_id"] for o in st.orders.values()}
            idle = sorted(u for u in st.users if u not in buyers)
            if idle:
                uid = idle[-1]
                out.emit("user_info", shard_of_user(uid), "d", when, st.users.pop(uid))
        elif kind == "price":
            pid = rng.choice(sorted(st.products))
            row = st.products[pid]
            row["price"] = _money(float(row["price"]) * rng.uniform(0.8, 1.2))
            row["updated_at"] = _ts(when)
            out.emit("product", "product", "u", when, row)
        elif kind == "new_product":
            row = _new_product(st, rng, when)
            out.emit("product", "product", "c", when, row)


def _json_default(value: Any) -> Any:
    if isinstance(value, Decimal):
        return float(value)
    raise TypeError(f"not JSON serializable: {value!r}")


def _dump(path: Path, rows: list[dict[str, Any]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as fh:
        for row in rows:
            fh.write(json.dumps(row, default=_json_default, sort_keys=True) + "\n")


def generate(out_dir: str | Path, cfg: GeneratorConfig | None = None, force: bool = False) -> dict[str, Any]:
    """Write the shop's snapshot and changes under `out_dir/shop`; return the manifest.

    Does nothing when a manifest with the same parameters is already there (unless `force`).
    """
    cfg = cfg or GeneratorConfig()
    root = Path(out_dir) / "shop"
    manifest_path = root / "manifest.json"
    if manifest_path.exists() and not force:
        existing = json.loads(manifest_path.read_text())
        if existing.get("config") == asdict(cfg):
            return existing
    if root.exists():
        shutil.rmtree(root)
    rng = random.Random(cfg.seed)
    st = _State()
    t0 = datetime.combine(cfg.start_date, datetime.min.time()) - timedelta(days=30)
    for _ in range(cfg.products):
        _new_product(st, rng, t0)
    for i in range(cfg.users):
        _new_user(st, rng, t0 + timedelta(minutes=i))
    for i in range(cfg.history_orders):
        order, _ = _new_order(st, rng, t0 + timedelta(hours=i))
        order["order_status"] = rng.choice(["completed", "completed", "shipped", "paid", "created"])

    snapshot: dict[str, dict[str, list[dict[str, Any]]]] = {name: {} for name in TABLES}
    for uid in sorted(st.users):
        snapshot["user_info"].setdefault(shard_of_user(uid), []).append(dict(st.users[uid]))
    snapshot["product"]["product"] = [dict(st.products[k]) for k in sorted(st.products)]
    snapshot["orders"]["orders"] = [dict(st.orders[k]) for k in sorted(st.orders)]
    snapshot["order_item"]["order_item"] = [dict(st.items[k]) for k in sorted(st.items)]
    counts: dict[str, Any] = {"snapshot": {}, "changes": {}}
    for logical, shards in snapshot.items():
        for physical, rows in shards.items():
            for row in rows:
                row["_source_table"] = physical
            _dump(root / "snapshot" / logical / f"{physical}.jsonl", rows)
        counts["snapshot"][logical] = sum(len(r) for r in shards.values())

    writer = _Writer()
    for day_key in cfg.day_keys:
        start_idx = len(writer.rows)
        _simulate_day(st, rng, cfg, date.fromisoformat(day_key), writer)
        per_table: dict[str, list[dict[str, Any]]] = {name: [] for name in TABLES}
        for logical, record in writer.rows[start_idx:]:
            per_table[logical].append(record)
        for logical, rows in per_table.items():
            _dump(root / "changes" / logical / f"dt={day_key}" / "changes.jsonl", rows)
        counts["changes"][day_key] = {k: len(v) for k, v in per_table.items()}
    final = {
        "user_info": len(st.users),
        "product": len(st.products),
        "orders": len(st.orders),
        "order_item": len(st.items),
    }
    manifest = {"config": asdict(cfg), "counts": counts, "final_rows": final, "last_seq": writer.seq}
    manifest_path.write_text(json.dumps(manifest, indent=2, sort_keys=True))
    return manifest


def read_changes(out_dir: str | Path, day: str) -> list[dict[str, Any]]:
    """All row changes of a day across tables, in commit order (`_seq`), each with `_table` (logical)."""
    root = Path(out_dir) / "shop" / "changes"
    rows: list[dict[str, Any]] = []
    for logical in TABLES:
        path = root / logical / f"dt={day}" / "changes.jsonl"
        if path.exists():
            for line in path.read_text().splitlines():
                rec = json.loads(line)
                rec["_table"] = logical
                rows.append(rec)
    return sorted(rows, key=lambda r: r["_seq"])
