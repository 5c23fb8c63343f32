"""Run every benchmark and write the results, with the machine they ran on, to bench/RESULTS.md and results.json.

    .venv/bin/python bench/run_all.py            # full runs (several minutes)
    .venv/bin/python bench/run_all.py --quick    # small sizes, a smoke test of the benchmarks themselves
    .venv/bin/python bench/run_all.py --only lineage,dqc

Each benchmark runs in its own process (its own Spark session) and prints one JSON object as its last output.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent

BENCHMARKS = {
    "definitions": "bench_definitions.py",
    "lineage": "bench_lineage.py",
    "pending_queue": "bench_pending_queue.py",
    "ordered_backfill": "bench_ordered_backfill.py",
    "dqc": "bench_dqc.py",
    "merge": "bench_merge.py",
}


def machine() -> dict:
    info = {
        "date_utc": datetime.now(UTC).strftime("%Y-%m-%d %H:%M"),
        "host": platform.node(),
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "platform": platform.platform(),
    }
    try:
        with open("/proc/cpuinfo") as fh:
            info["cpu_model"] = next(
                line.split(":", 1)[1].strip() for line in fh if line.startswith("model name")
            )
        with open("/proc/meminfo") as fh:
            kb = int(next(line.split()[1] for line in fh if line.startswith("MemTotal")))
            info["memory_gib"] = round(kb / 1024 / 1024, 1)
        info["load_avg_at_start"] = os.getloadavg()
    except (OSError, StopIteration):
        pass
    java = subprocess.run(["java", "-version"], capture_output=True, text=True)
    info["java"] = (java.stderr or java.stdout).splitlines()[0] if java.returncode == 0 else "not found"
    for pkg in ("pyspark", "dagster", "sqlglot", "SQLAlchemy"):
        try:
            from importlib.metadata import version

            info[pkg] = version(pkg)
        except Exception:
            info[pkg] = "?"
    return info


def last_json(text: str) -> dict:
    """The last top-level JSON object printed by a benchmark."""
    lines = text.splitlines()
    for start in range(len(lines) - 1, -1, -1):
        if lines[start].startswith("{"):
            try:
                return json.loads("\n".join(lines[start:]))
            except json.JSONDecodeError:
                continue
    raise ValueError("no JSON object in the benchmark's output")


def run_one(name: str, quick: bool) -> dict:
    script = BENCH / BENCHMARKS[name]
    cmd = [sys.executable, str(script)] + (["--quick"] if quick else [])
    t0 = time.monotonic()
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True)
    elapsed = round(time.monotonic() - t0, 1)
    if proc.returncode != 0:
        return {"error": f"exit {proc.returncode}", "stderr_tail": proc.stderr[-2000:], "wall_s": elapsed}
    try:
        result = last_json(proc.stdout)
    except ValueError as exc:
        return {"error": str(exc), "stdout_tail": proc.stdout[-2000:], "wall_s": elapsed}
    result["wall_s"] = elapsed
    return result


def write_results(results: dict, quick: bool) -> Path:
    out_json = BENCH / ("results.quick.json" if quick else "results.json")
    out_json.write_text(json.dumps(results, indent=2, default=str) + "\n")
    if quick:
        return out_json
    md = [
        "# Benchmark results",
        "",
        "Written by `bench/run_all.py` (full mode). Figures are from one run on the machine below; the raw data is",
        "in `bench/results.json`.",
        "",
        "## Machine",
        "",
    ]
    md += [f"- {k}: {v}" for k, v in results["machine"].items()]
    for name, res in results["benchmarks"].items():
        md += ["", f"## {name}", "", "```json", json.dumps(res, indent=2, default=str), "```"]
    (BENCH / "RESULTS.md").write_text("\n".join(md) + "\n")
    return out_json


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--only", default="", help="comma-separated subset of: " + ", ".join(BENCHMARKS))
    args = parser.parse_args(argv)
    names = [n for n in args.only.split(",") if n] or list(BENCHMARKS)
    unknown = [n for n in names if n not in BENCHMARKS]
    if unknown:
        parser.error(f"unknown benchmark(s): {unknown}")
    results = {"machine": machine(), "quick": args.quick, "benchmarks": {}}
    for name in names:
        print(f"== {name} ...", flush=True)
        results["benchmarks"][name] = res = run_one(name, args.quick)
        print(json.dumps(res, indent=2, default=str)[:3000], flush=True)
    path = write_results(results, args.quick)
    print(f"results written to {path}")
    return 1 if any("error" in r for r in results["benchmarks"].values()) else 0


if __name__ == "__main__":
    sys.exit(main())
