"""Time to load the code location's definitions: the project, and a generated warehouse of 1,000 SQL assets.

Each measurement runs in a fresh Python process (as `dagster dev` / a run worker would load the code location) and
reports the whole load (imports included) and the part after `import dagster` / `import pyspark`. Target: 1,000
SQL assets load in under 3 s on a 2-core machine.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

PROBE = r"""
import time, json
t0 = time.perf_counter()
import dagster, pyspark.sql  # noqa: F401  (imports counted separately)
t1 = time.perf_counter()
from sharp_dagster.definitions import defs
repo = defs.get_repository_def()
n = len(repo.asset_graph.get_all_asset_keys())
t2 = time.perf_counter()
print(json.dumps({"total_s": t2 - t0, "imports_s": t1 - t0, "definitions_s": t2 - t1, "assets": n}))
"""


def generate_warehouse(root: Path, n_tables: int = 1000, seed: int = 1) -> None:
    """Layered SQL files: 25% ODS reading sources, 45% DWD joining ODS/DWD, 30% ADS aggregating DWD."""
    rng = random.Random(seed)
    n_ods, n_dwd = n_tables // 4, n_tables * 45 // 100
    n_ads = n_tables - n_ods - n_dwd
    layers = {"ods": [], "dwd": [], "ads": []}
    for layer, count in (("ods", n_ods), ("dwd", n_dwd), ("ads", n_ads)):
        (root / layer).mkdir(parents=True, exist_ok=True)
        for i in range(count):
            name = f"t{i:04d}"
            if layer == "ods":
                src = rng.choice(
                    ["src_shop.orders_changes", "src_shop.product_changes", "src_shop.user_info_changes"]
                )
                sql = (
                    f"SELECT CAST(_seq AS BIGINT) AS id, _op AS op, _ts AS ts, dt AS src_dt\n"
                    f"FROM {src}\nWHERE dt = '${{dt}}'"
                )
            elif layer == "dwd":
                pool = layers["ods"] + layers["dwd"][-20:]
                a, b = rng.sample(pool, 2)
                sql = (
                    f"SELECT a.id, a.op, b.ts, COUNT(*) OVER (PARTITION BY a.op) AS op_count\n"
                    f"FROM {a} AS a\nLEFT JOIN {b} AS b ON b.id = a.id AND b.dt = '${{dt}}'\n"
                    f"WHERE a.dt = '${{dt}}'"
                )
            else:
                a = rng.choice(layers["dwd"])
                sql = (
                    f"SELECT op, COUNT(DISTINCT id) AS ids, MAX(ts) AS last_ts,\n"
                    f"       RANK() OVER (ORDER BY COUNT(*) DESC) AS op_rank\n"
                    f"FROM {a}\nWHERE dt = '${{dt}}'\nGROUP BY op"
                )
            (root / layer / f"{name}.sql").write_text(
                f"-- Generated table {layer}.{name} for the load benchmark.\n{sql}\n"
            )
            layers[layer].append(f"{layer}.{name}")


def measure(sql_dir: Path | None, repeats: int) -> dict:
    env = dict(os.environ)
    if sql_dir is not None:
        env["SHARP_WAREHOUSE_SQL_DIR"] = str(sql_dir)
    runs = []
    for _ in range(repeats):
        out = subprocess.run(
            [sys.executable, "-c", PROBE], env=env, cwd=REPO, capture_output=True, text=True, check=True
        )
        runs.append(json.loads(out.stdout.strip().splitlines()[-1]))
    return {
        "assets": runs[0]["assets"],
        "total_s_median": round(statistics.median(r["total_s"] for r in runs), 3),
        "definitions_s_median": round(statistics.median(r["definitions_s"] for r in runs), 3),
        "imports_s_median": round(statistics.median(r["imports_s"] for r in runs), 3),
        "repeats": repeats,
    }


def run(quick: bool = False) -> dict:
    repeats = 2 if quick else 5
    results = {"project": measure(None, repeats)}
    with tempfile.TemporaryDirectory() as tmp:
        generate_warehouse(Path(tmp), 200 if quick else 1000)
        key = "generated_200" if quick else "generated_1000"
        results[key] = measure(Path(tmp), repeats)
        results[key]["target_total_s"] = 3.0
    return results


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true")
    print(json.dumps(run(parser.parse_args().quick), indent=2))
