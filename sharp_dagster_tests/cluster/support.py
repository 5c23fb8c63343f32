"""Reading what a cluster run left behind: the source as an oracle, and the Spark event log (which executor ran
which task of which SQL execution)."""

from __future__ import annotations

import json
import re
from collections import Counter
from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path
from typing import Any

from sharp_dagster.demo.generator import read_changes

# ODS table -> (key, columns compared with the source): numbers as numbers rounded to cents.
ODS_COLUMNS = {
    "ods/orders": ("order_id", ("user_id", "order_status", "total_amount")),
    "ods/order_item": ("item_id", ("order_id", "product_id", "quantity", "unit_price")),
    "ods/product": ("product_id", ("product_name", "category", "price")),
}
DWD_COLUMNS = (
    "item_id",
    "order_id",
    "user_id",
    "order_status",
    "product_id",
    "category",
    "quantity",
    "line_amount",
)


def _plain(value: Any) -> Any:
    return (
        round(float(value), 2)
        if isinstance(value, int | float | Decimal) and not isinstance(value, bool)
        else value
    )


def _source_tables(sample_dir: Path, days: list[str]) -> dict[str, dict[Any, dict]]:
    """Every source table at the end of the last of `days` (consecutive, from the first day after the snapshot):
    the generated snapshot with the days' changes replayed in order (the oracle)."""
    state: dict[str, dict[Any, dict]] = {}
    keys = {key.split("/")[1]: pk for key, (pk, _) in ODS_COLUMNS.items()}
    for table, pk in keys.items():
        rows = state[table] = {}
        for path in sorted((sample_dir / "shop" / "snapshot" / table).glob("*.jsonl")):
            for line in path.read_text().splitlines():
                row = json.loads(line)
                rows[row[pk]] = row
    for change in (c for day in days for c in read_changes(sample_dir, day)):
        table = change["_table"]
        if table not in keys:
            continue
        if change["_op"] == "d":
            state[table].pop(change[keys[table]])
        else:
            state[table][change[keys[table]]] = change
    return state


def _dwd_lines(source: dict[str, dict[Any, dict]], day: str) -> list[dict[str, Any]]:
    """dwd.order_detail from the source: each item of the orders placed on `day`, with the order's and product's
    state at the end of the day (exact decimals)."""
    rows = []
    for item in source["order_item"].values():
        order = source["orders"].get(item["order_id"])
        if order is None or not order["order_time"].startswith(day):
            continue
        product = source["product"].get(item["product_id"]) or {}
        rows.append(
            {
                "item_id": item["item_id"],
                "order_id": order["order_id"],
                "user_id": order["user_id"],
                "order_status": order["order_status"],
                "product_id": item["product_id"],
                "category": product.get("category") or "unknown",
                "quantity": item["quantity"],
                "line_amount": Decimal(str(item["quantity"])) * Decimal(str(item["unit_price"])),
            }
        )
    return rows


def _expected_dwd(source: dict[str, dict[Any, dict]], day: str) -> list[tuple]:
    """dwd.order_detail's compared columns (DWD_COLUMNS) from the source, sorted."""
    return sorted(tuple(_plain(line[c]) for c in DWD_COLUMNS) for line in _dwd_lines(source, day))


def _expected_ads(source: dict[str, dict[Any, dict]], day: str) -> dict[str, tuple]:
    """ads.gmv_by_category from the source: category -> (orders, items, GMV, rank by GMV, share of the day's GMV),
    cancelled orders left out; GMV in cents, the share to 6 places, rounded half up (as the SQL's casts)."""
    by_category: dict[str, dict] = {}
    for line in _dwd_lines(source, day):
        if line["order_status"] == "cancelled":
            continue
        cat = by_category.setdefault(line["category"], {"orders": set(), "items": 0, "gmv": Decimal(0)})
        cat["orders"].add(line["order_id"])
        cat["items"] += line["quantity"]
        cat["gmv"] += line["line_amount"]
    total = sum(c["gmv"] for c in by_category.values())
    cent, micro = Decimal("0.01"), Decimal("0.000001")
    return {
        name: (
            len(c["orders"]),
            c["items"],
            c["gmv"].quantize(cent, ROUND_HALF_UP),
            1 + sum(other["gmv"] > c["gmv"] for other in by_category.values()),  # RANK(): ties share a rank
            (c["gmv"] / total).quantize(micro, ROUND_HALF_UP),
        )
        for name, c in by_category.items()
    }


def _event_files(event_log: Path) -> list[Path]:
    """The finished applications' event logs in `event_log` (one JSON-lines file per application)."""
    return sorted(p for p in event_log.iterdir() if p.is_file() and not p.name.endswith(".inprogress"))


def _events(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def applications(event_log: Path) -> list[str]:
    """The application ids of the finished event logs (Spark names each file after its application)."""
    return [p.name for p in _event_files(event_log)]


def _spark_properties(event_log: Path) -> list[dict[str, str]]:
    """Each application's Spark properties, from its event log's environment update."""
    found = []
    for path in _event_files(event_log):
        for e in _events(path):
            if e["Event"] == "SparkListenerEnvironmentUpdate":
                props = e["Spark Properties"]
                found.append(dict(props.items() if isinstance(props, dict) else props))
                break
    return found


def _tasks_by_work(event_log: Path) -> tuple[set[str], dict[str, Counter]]:
    """From the Spark event logs: the executors the applications were given, and for each SQL execution's
    physical plan the executors that ran its tasks (executor id -> tasks)."""
    executors: set[str] = set()
    by_plan: dict[str, Counter] = {}
    for path in _event_files(event_log):
        events = _events(path)
        executors |= {e["Executor ID"] for e in events if e["Event"] == "SparkListenerExecutorAdded"}
        plans = {
            e["executionId"]: e.get("physicalPlanDescription", "")
            for e in events
            if e["Event"].endswith("SparkListenerSQLExecutionStart")
        }
        stage_execution = {}  # stage ids are an application's own
        for e in events:
            if e["Event"] == "SparkListenerJobStart":
                execution = (e.get("Properties") or {}).get("spark.sql.execution.id")
                for stage in e["Stage IDs"]:
                    stage_execution[stage] = int(execution) if execution is not None else None
        for e in events:
            if e["Event"] == "SparkListenerTaskEnd":
                plan = plans.get(stage_execution.get(e["Stage ID"]), "")
                by_plan.setdefault(plan, Counter())[e["Task Info"]["Executor ID"]] += 1
    return executors, by_plan


def plan_io(plan: str) -> list[str]:
    """What a physical plan reads and writes (its scans and writes), for failure messages."""
    return sorted(
        {ln.strip(" :+-*") for ln in plan.splitlines() if "Scan " in ln or "Write(" in ln} or {"(no SQL)"}
    )


def executor_removals(event_log: Path) -> list[dict]:
    """The executors the applications lost (SparkListenerExecutorRemoved), with the reason and time."""
    return [
        e for p in _event_files(event_log) for e in _events(p) if e["Event"] == "SparkListenerExecutorRemoved"
    ]


def lost_tasks(event_log: Path) -> list[dict]:
    """Task ends whose task died with its executor (ExecutorLostFailure): the work Spark ran again elsewhere."""
    return [
        e
        for p in _event_files(event_log)
        for e in _events(p)
        if e["Event"] == "SparkListenerTaskEnd"
        and (e.get("Task End Reason") or {}).get("Reason") == "ExecutorLostFailure"
    ]


def tasks_after(event_log: Path, epoch_s: float) -> Counter:
    """Executor id -> tasks launched after `epoch_s` that succeeded (work done after an executor was lost)."""
    return Counter(
        e["Task Info"]["Executor ID"]
        for p in _event_files(event_log)
        for e in _events(p)
        if e["Event"] == "SparkListenerTaskEnd"
        and e["Task Info"]["Launch Time"] > epoch_s * 1000
        and (e.get("Task End Reason") or {}).get("Reason") == "Success"
    )


_TASK = re.compile(r"(Running|Finished|Exception in|killed) task [^\n]*?\(TID (\d+)\)")


def tasks_running(work_dir: Path) -> set[int]:
    """The task ids an executor of a worker runs right now, from its executors' own logs (`stderr` in the
    worker's work folder, the newest application's): started (`Running task`) and not yet ended."""
    apps = [p for p in work_dir.glob("app-*") if p.is_dir()]
    if not apps:
        return set()
    app = max(apps, key=lambda p: p.stat().st_mtime)
    started, ended = set(), set()
    for stderr in app.glob("*/stderr"):
        for verb, tid in _TASK.findall(stderr.read_text(errors="replace")):
            (started if verb == "Running" else ended).add(int(tid))
    return started - ended


def partition_rows(materialization: Any) -> dict[str, int]:
    """`asset@partition -> rows` from a materialization: its row count, or a range run's rows by partition."""
    key, partition = materialization.asset_key.to_user_string(), materialization.partition
    meta = materialization.metadata
    if "dagster/row_count" in meta:
        return {f"{key}@{partition}": int(meta["dagster/row_count"].value)}
    if "rows_by_partition" in meta and partition in meta["rows_by_partition"].value:
        return {f"{key}@{partition}": int(meta["rows_by_partition"].value[partition])}
    return {}
