"""Start-up of the `sharp-dagster` command line: wall (and CPU) time of each group's `--help` + a small call.

    .venv/bin/python bench/bench_cli.py            # 7 runs per command
    .venv/bin/python bench/bench_cli.py --quick    # 2 runs per command

Each command runs as a user runs it: the installed `sharp-dagster` console script in a fresh process, stdout to a
pipe, in a temporary data folder (`SHARP_DATA_DIR`, an empty SQLite job log at `SHARP_LOG_DB_URL`), so nothing is
cached between runs but the OS's file cache. The first run of each command is a warm-up and is not counted. The
floor is a bare `python -c pass` and `python -c "import sqlglot"`: what any Python CLI, and any parse, pays.

Prints one JSON object (last): per command min / median / max wall seconds, the median CPU seconds (user + sys
of the child: the load-independent part, for a shared machine) and the runs' exit status.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BIN = Path(sys.executable).parent
CLI = str(BIN / "sharp-dagster")
ONE_STATEMENT = "insert into a select * from b\n"

# (name, argv, stdin). Real calls are the smallest a user makes; `cdc collect|land` need MySQL/Kafka, so the
# cdc group is measured through its `--help` pages only.
COMMANDS: list[tuple[str, list[str], str | None]] = [
    ("--help", ["--help"], None),
    ("demo --help", ["demo", "--help"], None),
    ("generate --help", ["generate", "--help"], None),
    ("log --help", ["log", "--help"], None),
    ("log status --help", ["log", "status", "--help"], None),
    ("lineage --help", ["lineage", "--help"], None),
    ("lineage parse --help", ["lineage", "parse", "--help"], None),
    ("dqc --help", ["dqc", "--help"], None),
    ("dqc report --help", ["dqc", "report", "--help"], None),
    ("cdc --help", ["cdc", "--help"], None),
    ("cdc collect --help", ["cdc", "collect", "--help"], None),
    ("cdc land --help", ["cdc", "land", "--help"], None),
    ("lineage parse (one statement on stdin)", ["lineage", "parse"], ONE_STATEMENT),
    ("lineage graph ads/gmv_by_category --direction up", ["lineage", "graph", "ads/gmv_by_category"], None),
    ("lineage impact ods.order_item.unit_price", ["lineage", "impact", "ods.order_item.unit_price"], None),
    ("lineage check", ["lineage", "check"], None),
    ("log status (empty SQLite job log)", ["log", "status"], None),
    ("dqc rules", ["dqc", "rules"], None),
    (
        "dqc report --asset dwd/order_detail (empty SQLite)",
        ["dqc", "report", "--asset", "dwd/order_detail"],
        None,
    ),
]
FLOOR: list[tuple[str, list[str]]] = [
    ("python", [sys.executable, "-c", "pass"]),
    ("python_import_sqlglot", [sys.executable, "-c", "import sqlglot"]),
]


def _children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def time_run(
    cmd: list[str], stdin: str | None, env: dict[str, str], cwd: str
) -> tuple[float, float, int, str]:
    """(wall s, CPU s of the child, exit code, stderr). CPU time (user + sys, from the reaped child's rusage) is
    what the command costs whatever the machine's load; wall time is what a user waits, and grows with the load."""
    cpu0 = _children_cpu_s()
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, input=stdin, capture_output=True, text=True, env=env, cwd=cwd)
    wall = time.perf_counter() - t0
    return wall, _children_cpu_s() - cpu0, proc.returncode, proc.stderr


def measure(cmd: list[str], stdin: str | None, env: dict[str, str], cwd: str, runs: int) -> dict:
    time_run(cmd, stdin, env, cwd)  # warm-up: the file cache, .pyc files
    times, cpus, codes, err = [], [], set(), ""
    for _ in range(runs):
        wall, cpu, code, stderr = time_run(cmd, stdin, env, cwd)
        times.append(wall)
        cpus.append(cpu)
        codes.add(code)
        if code not in (0, 1) and not err:  # 1 is a valid answer (e.g. a violation); others are failures
            err = (stderr.strip().splitlines() or ["(no stderr)"])[-1]
    out = {
        "min_s": round(min(times), 3),
        "median_s": round(statistics.median(times), 3),
        "max_s": round(max(times), 3),
        "cpu_median_s": round(statistics.median(cpus), 3),
        "runs": runs,
        "exit": sorted(codes),
    }
    if err:
        out["stderr_last_line"] = err[:300]
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="2 runs per command instead of 7")
    parser.add_argument("--runs", type=int, default=None, help="runs per command (after one warm-up)")
    args = parser.parse_args(argv)
    runs = args.runs or (2 if args.quick else 7)
    if not Path(CLI).exists():
        parser.error(f"no console script at {CLI}: install the project into this interpreter's venv first")

    with tempfile.TemporaryDirectory(prefix="bench_cli.") as tmp:
        env = {
            **os.environ,
            "SHARP_DATA_DIR": tmp,
            "SHARP_LOG_DB_URL": f"sqlite:///{Path(tmp) / 'sharp_log.db'}",
        }
        env.pop("PYTHONPROFILEIMPORTTIME", None)
        load = round(os.getloadavg()[0], 2)
        floor = {name: measure(cmd, None, env, tmp, runs) for name, cmd in FLOOR}
        commands = {}
        for name, argv_, stdin in COMMANDS:
            commands[name] = res = measure([CLI, *argv_], stdin, env, tmp, runs)
            print(
                f"{name:55s} min {res['min_s']:.3f} s  median {res['median_s']:.3f} s  "
                f"cpu {res['cpu_median_s']:.3f} s  exit {res['exit']}"
            )

    parse = commands["lineage parse (one statement on stdin)"]
    slowest = max(commands, key=lambda n: commands[n]["median_s"])
    result = {
        "runs_per_command": runs,
        "load_avg_1m_before": load,
        "floor": floor,
        "commands": commands,
        "lineage_parse_one_statement_median_s": parse["median_s"],
        "lineage_parse_one_statement_min_s": parse["min_s"],
        "lineage_parse_one_statement_cpu_median_s": parse["cpu_median_s"],
        "target_s": 1.0,
        "slowest": {"command": slowest, "median_s": commands[slowest]["median_s"]},
        "help_median_s_max": max(v["median_s"] for k, v in commands.items() if k.endswith("--help")),
    }
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
