"""Reading what a cluster run left behind: the source as an oracle, and the Spark event log (which executor ran
which task of which SQL execution)."""

from __future__ import annotations

import json
from collections import Counter
from decimal import Decimal
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


def _source_tables(sample_dir: Path, day: str) -> dict[str, dict[Any, dict]]:
    """Every source table after `day`: the generated snapshot with the day's changes replayed (the oracle)."""
    state: dict[str, dict[Any, dict]] = {}
    keys = {key.split("/")[1]: pk for key, (pk, _) in ODS_COLUMNS.items()}
    for table, pk in keys.items():
        rows = state[table] = {}
        for path in sorted((sample_dir / "shop" / "snapshot" / table).glob("*.jsonl")):
            for line in path.read_text().splitlines():
                row = json.loads(line)
                rows[row[pk]] = row
    for change in read_changes(sample_dir, day):
        table = change["_table"]
        if table not in keys:
            continue
        if change["_op"] == "d":
            state[table].pop(change[keys[table]])
        else:
            state[table][change[keys[table]]] = change
    return state


def _expected_dwd(source: dict[str, dict[Any, dict]], day: str) -> list[tuple]:
    """dwd.order_detail from the source: each item of the orders placed on `day`, with the order's and product's
    state at the end of the day."""
    rows = []
    for item in source["order_item"].values():
        order = source["orders"].get(item["order_id"])
        if order is None or not order["order_time"].startswith(day):
            continue
        product = source["product"].get(item["product_id"]) or {}
        rows.append(
            tuple(
                _plain(v)
                for v in (
                    item["item_id"],
                    order["order_id"],
                    order["user_id"],
                    order["order_status"],
                    item["product_id"],
                    product.get("category") or "unknown",
                    item["quantity"],
                    Decimal(str(item["quantity"])) * Decimal(str(item["unit_price"])),
                )
            )
        )
    return sorted(rows)


def _spark_properties(event_log: Path) -> dict[str, str]:
    """The application's Spark properties, from its event log's environment update."""
    (path,) = [p for p in event_log.iterdir() if p.is_file() and not p.name.endswith(".inprogress")]
    for line in path.read_text().splitlines():
        if '"SparkListenerEnvironmentUpdate"' in line:
            props = json.loads(line)["Spark Properties"]
            return dict(props.items() if isinstance(props, dict) else props)
    return {}


def _tasks_by_work(event_log: Path) -> tuple[set[str], dict[str, Counter]]:
    """From a Spark event log: the executors the application was given, and for each SQL execution's physical
    plan the executors that ran its tasks (executor id -> tasks)."""
    (path,) = [p for p in event_log.iterdir() if p.is_file() and not p.name.endswith(".inprogress")]
    events = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    executors = {e["Executor ID"] for e in events if e["Event"] == "SparkListenerExecutorAdded"}
    plans = {
        e["executionId"]: e.get("physicalPlanDescription", "")
        for e in events
        if e["Event"].endswith("SparkListenerSQLExecutionStart")
    }
    stage_execution = {}
    for e in events:
        if e["Event"] == "SparkListenerJobStart":
            execution = (e.get("Properties") or {}).get("spark.sql.execution.id")
            for stage in e["Stage IDs"]:
                stage_execution[stage] = int(execution) if execution is not None else None
    by_plan: dict[str, Counter] = {}
    for e in events:
        if e["Event"] == "SparkListenerTaskEnd":
            plan = plans.get(stage_execution.get(e["Stage ID"]), "")
            by_plan.setdefault(plan, Counter())[e["Task Info"]["Executor ID"]] += 1
    return executors, by_plan


def executor_removals(event_log: Path) -> list[dict]:
    """The executors the application lost (SparkListenerExecutorRemoved), with the reason and time."""
    (path,) = [p for p in event_log.iterdir() if p.is_file() and not p.name.endswith(".inprogress")]
    events = (json.loads(line) for line in path.read_text().splitlines() if line.strip())
    return [e for e in events if e["Event"] == "SparkListenerExecutorRemoved"]


def lost_tasks(event_log: Path) -> list[dict]:
    """Task ends whose task died with its executor (ExecutorLostFailure): the work Spark ran again elsewhere."""
    (path,) = [p for p in event_log.iterdir() if p.is_file() and not p.name.endswith(".inprogress")]
    events = (json.loads(line) for line in path.read_text().splitlines() if line.strip())
    return [
        e
        for e in events
        if e["Event"] == "SparkListenerTaskEnd"
        and (e.get("Task End Reason") or {}).get("Reason") == "ExecutorLostFailure"
    ]
