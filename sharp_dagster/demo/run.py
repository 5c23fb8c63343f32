"""The main job: generate the shop's data if missing, then materialize every asset day by day, in order.

Runs through Dagster's own execution against a real `DagsterInstance` (home: `DAGSTER_HOME`, default
`data/dagster_home`), so `dagster dev` shows the runs and materializations afterwards.
"""

from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass, field
from datetime import date, timedelta
from pathlib import Path

from sharp_dagster.settings import Settings

# Dagster logs every step at DEBUG to the console; the demo prints its own progress instead.
QUIET = {"loggers": {"console": {"config": {"log_level": "WARNING"}}}}


@dataclass
class DemoResult:
    days: list[str]
    rows: dict[str, dict[str, int]] = field(default_factory=dict)  # asset -> partition -> rows
    seconds: float = 0.0
    failed: str | None = None


def ensure_dagster_home(settings: Settings) -> Path:
    """Use DAGSTER_HOME when set, else `data/dagster_home` (created, and exported for Dagster)."""
    home = Path(os.environ.get("DAGSTER_HOME") or settings.dagster_home)
    home.mkdir(parents=True, exist_ok=True)
    os.environ["DAGSTER_HOME"] = str(home)
    return home


def demo_days(start: str, days: int) -> list[str]:
    first = date.fromisoformat(start)
    return [(first + timedelta(days=i)).isoformat() for i in range(days)]


def run_demo(days: int = 3, start: str | None = None, users: int = 200, out=sys.stdout) -> DemoResult:
    from sharp_dagster.demo.generator import GeneratorConfig, generate
    from sharp_dagster.warehouse.catalog import DEFAULT_START

    settings = Settings.from_env()
    start = start or DEFAULT_START
    home = ensure_dagster_home(settings)
    cfg = GeneratorConfig(start=DEFAULT_START, days=max(days, 7), users=users)
    t0 = time.monotonic()
    print(f"sample data: {settings.sample_dir / 'shop'}", file=out)
    manifest = generate(settings.sample_dir, cfg)
    print(
        f"  {sum(manifest['counts']['snapshot'].values())} snapshot rows, {manifest['last_seq']} row changes "
        f"over {cfg.days} days",
        file=out,
    )
    print(f"dagster home: {home}", file=out)
    print("loading definitions and starting Spark ...", file=out, flush=True)

    from dagster import DagsterInstance

    from sharp_dagster.definitions import defs

    job = defs.resolve_job_def("warehouse_daily")
    result = DemoResult(days=demo_days(start, days))
    with DagsterInstance.get() as instance:
        for i, day in enumerate(result.days, start=1):
            t_day = time.monotonic()
            print(
                f"[{i}/{len(result.days)}] {day}: materializing {len(job.asset_layer.executable_asset_keys)} assets",
                file=out,
                flush=True,
            )
            run = job.execute_in_process(
                partition_key=day, instance=instance, raise_on_error=False, run_config=QUIET
            )
            for event in run.get_asset_materialization_events():
                mat = event.materialization
                rows = int(mat.metadata["dagster/row_count"].value)
                name = mat.asset_key.to_user_string()
                result.rows.setdefault(name, {})[day] = rows
                print(f"      {name:<28} {rows:>7} rows", file=out, flush=True)
            if not run.success:
                failure = next((e for e in run.all_events if e.is_step_failure), None)
                reason = failure.step_failure_data.error.message.strip() if failure else "run failed"
                result.failed = f"{day}: {reason}"
                print(f"      FAILED: {reason}", file=out)
                break
            print(
                f"      done in {time.monotonic() - t_day:.1f}s (run {run.run_id[:8]})", file=out, flush=True
            )
    result.seconds = time.monotonic() - t0
    print_summary(result, out)
    return result


def print_summary(result: DemoResult, out=sys.stdout) -> None:
    print("", file=out)
    print("demo summary", file=out)
    print(f"  {'table':<28} {'partitions':>10} {'rows':>9}  {'last partition':>14}", file=out)
    for name in sorted(result.rows, key=lambda n: (("ods", "dwd", "ads").index(n.split("/")[0]), n)):
        parts = result.rows[name]
        last = max(parts)
        print(f"  {name:<28} {len(parts):>10} {sum(parts.values()):>9}  {parts[last]:>7} ({last})", file=out)
    status = "FAILED at " + result.failed if result.failed else "ok"
    print(f"  {len(result.rows)} tables, {len(result.days)} days, {result.seconds:.1f}s: {status}", file=out)
