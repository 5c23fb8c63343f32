"""The README's main job end to end: `sharp-dagster demo` then `sharp-dagster log status` on its history."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

CLI = str(Path(sys.executable).with_name("sharp-dagster"))


def test_demo_then_log_status(tmp_path):
    env = {**os.environ, "SHARP_DATA_DIR": str(tmp_path / "data")}
    env.pop("DAGSTER_HOME", None)  # the demo's default: data/dagster_home
    # The timeout only bounds a hang: two demo days ran past 900 s under a load average of 12-36 on 2 cores.
    demo = subprocess.run([CLI, "demo", "--days", "2"], env=env, capture_output=True, text=True, timeout=2400)
    assert demo.returncode == 0, demo.stdout[-3000:] + demo.stderr[-3000:]
    out = demo.stdout
    assert "demo summary" in out and "9 tables, 2 days" in out and ": ok" in out
    assert "[1/2] 2024-01-01" in out and "[2/2] 2024-01-02" in out  # progress, in partition order
    assert (tmp_path / "data" / "dagster_home").is_dir()

    status = subprocess.run(
        [CLI, "log", "status", "--json", "--limit", "50"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert status.returncode == 0, status.stderr
    rows = json.loads(status.stdout)
    rows = rows["runs"] if isinstance(rows, dict) else rows
    done = {(r["job_name"], r["partition_key"]) for r in rows if r["status"] == "SUCCESS"}
    for asset in ("ods/orders", "dwd/order_detail", "ads/gmv_by_category"):
        assert {(asset, "2024-01-01"), (asset, "2024-01-02")} <= done

    bad = subprocess.run(
        [CLI, "log", "plan", "--asset", "nope/table"], env=env, capture_output=True, text=True
    )
    assert bad.returncode != 0 and len(bad.stderr.strip().splitlines()) == 1 and "nope/table" in bad.stderr
