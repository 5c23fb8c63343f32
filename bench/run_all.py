"""Run every benchmark and write the results, with the machine they ran on, to bench/RESULTS.md and results.json.

    .venv/bin/python bench/run_all.py            # full runs (several minutes)
    .venv/bin/python bench/run_all.py --quick    # small sizes, a smoke test of the benchmarks themselves
    .venv/bin/python bench/run_all.py --only lineage,dqc   # re-run some; the others' results are kept

Each benchmark runs in its own process (its own Spark session) and prints one JSON object as its last output.
Every result is stamped with when it ran and the load average then; RESULTS.md opens with a summary table built
from the results (`headline`), so it always says what the raw data says.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
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
    "cli": "bench_cli.py",
    "explorer": "bench_explorer.py",
    "landing": "bench_landing.py",
    "publish": "bench_publish.py",
    "local_fs": "bench_local_fs.py",
    "driver_start": "bench_driver_start.py",
    "pipeline": "bench_pipeline.py",
    "profiles": "bench_profiles.py",
    "ods_layout": "bench_ods_layout.py",
    "breadth": "bench_breadth.py",
    "source_day": "bench_source_day.py",
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
    if name == "merge":  # sizes a busy machine can run in the time at hand (bench_merge.py --help)
        cmd += shlex.split(os.environ.get("SHARP_BENCH_MERGE_ARGS", ""))
    stamp = {
        "ran_at_utc": datetime.now(UTC).strftime("%Y-%m-%d %H:%M"),
        "load_avg_1m_at_start": round(os.getloadavg()[0], 2),
    }
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
    return {**stamp, **result}


def _fmt(value: float, digits: int = 2) -> str:
    return f"{value:.{digits}f}"


def headline(name: str, r: dict) -> tuple[str, str, str, str]:
    """(benchmark, measured, target, met) for the summary table."""
    if "error" in r:
        return (name, f"error: {r['error']}", "", "no")
    if name == "definitions":
        g = r.get("generated_1000") or r.get("generated_200", {})
        return (
            f"definitions load, {g.get('assets')} assets (fresh process, imports included)",
            f"{_fmt(g['total_s_median'])} s ({_fmt(g['imports_s_median'])} s imports + "
            f"{_fmt(g['definitions_s_median'])} s definitions)",
            "< 3 s",
            "yes" if g["total_s_median"] < 3.0 else "no",
        )
    if name == "lineage":
        p, q, g = r["parse_script"], r.get("sqllineage", {}), r["graph"]
        speed = q.get("speedup_vs_ours_median")
        cpu, wall = p.get("cpu", {}), p.get("wall", {})
        met = p["median_ms"] <= 0.5 and (speed is None or speed >= 10) and g["uncached_p99_ms"] < 1
        # Parse p99 judged on per-call CPU time: on a shared box wall time also holds waits for a core.
        met = met and cpu.get("p99_ms", 0) < 5
        return (
            f"lineage parse ({p['statements']} statements) and upstream traversal ({g['tables']} tables)",
            f"parse median {_fmt(p['median_ms'], 3)} ms, p95 {_fmt(p['p95_ms'], 3)} ms"
            + (
                f", p99 {_fmt(wall['p99_ms'], 3)} ms wall / {_fmt(cpu['p99_ms'], 3)} ms CPU"
                f" (max {_fmt(cpu['max_ms'], 3)} ms CPU)"
                if cpu
                else ""
            )
            + (f", {speed}x sqllineage" if speed else "")
            + f"; traversal p99 {_fmt(g['uncached_p99_ms'], 3)} ms",
            "parse median <= 0.5 ms, p99 < 5 ms, >= 10x; traversal p99 < 1 ms",
            "yes" if met else "no",
        )
    if name == "pending_queue":
        parts = [
            f"{db} p50 {_fmt(r[db]['pending_queue_ms_p50'], 1)} / p95 {_fmt(r[db]['pending_queue_ms_p95'], 1)} ms"
            for db in ("sqlite", "postgresql")
            if isinstance(r.get(db), dict) and "pending_queue_ms_p50" in r[db]
        ]
        return (
            f"pending queue over {r['rows']:,} job_log rows",
            "; ".join(parts),
            f"< {r['target_ms']} ms",
            "yes" if r.get("meets_target") else "no",
        )
    if name == "ordered_backfill":
        o = r["ours"]
        return (
            f"ordered backfill, {o['partitions']} partitions",
            f"{_fmt(o['per_partition_s'])} s/partition, {_fmt(o['overhead_per_partition_s'])} s overhead over bare "
            f"Spark; Dagster's native self-dependent backfill {r['per_partition_ratio_native_over_ours']}x slower",
            "<= 1 s overhead",
            "yes" if o["overhead_per_partition_s"] <= o["target_overhead_per_partition_s"] else "no",
        )
    if name == "dqc":
        m = r["median_s"]
        ratio = r["ratio_20_rules_one_scan_vs_1_rule"]
        text = (
            f"one scan: 20 rules {ratio}x 1 rule ({m['one_scan_20']} s vs {m['one_rule']} s); 20 separate queries "
            f"{r['ratio_20_separate_queries_vs_one_scan']}x the scan"
        )
        if "ratio_20_rules_on_one_column_vs_1_rule" in r:
            text += f"; 20 rules on the one rule's column {r['ratio_20_rules_on_one_column_vs_1_rule']}x"
        if "stage_20_rules" in m:
            text += (
                f"; per partition in the pipeline (staging write + scan) {r['ratio_stage_20_rules_vs_stage_1_rule']}x"
                f" ({m['stage_20_rules']} s vs {m['stage_1_rule']} s)"
            )
        return (
            f"20 data-quality rules vs 1 rule, {r['rows']:,} rows",
            text,
            "<= 1.5x",
            "yes" if ratio <= 1.5 else "no",
        )
    if name.startswith("merge"):  # the main size, and runs at other sizes kept beside it
        return _merge_headline(r)
    if name == "cli":
        p, slow = r["commands"]["lineage parse (one statement on stdin)"], r["slowest"]
        return (
            f"CLI start-up, fresh process: `lineage parse` of one statement on stdin; {len(r['commands'])} "
            f"commands (every group's --help and a small real call)",
            f"parse median {_fmt(p['median_s'])} s wall, {_fmt(p['cpu_median_s'])} s CPU (min "
            f"{_fmt(p['min_s'])} s; bare python "
            f"{_fmt(r['floor']['python']['median_s'])} s, python importing sqlglot "
            f"{_fmt(r['floor']['python_import_sqlglot']['median_s'])} s); --help at most "
            f"{_fmt(r['help_median_s_max'])} s; slowest {slow['command']} {_fmt(slow['median_s'])} s",
            "parse < 1 s",
            "yes" if p["median_s"] < r["target_s"] else "no",
        )
    if name == "explorer":
        c, w = r["cold"], r["warm"]
        others = "; ".join(
            f"{n} client(s): first p99 {_fmt(lv['cold']['p99_ms'])}, repeated p99 {_fmt(lv['warm']['p99_ms'])} ms"
            for n, lv in r.get("levels", {}).items()
            if int(n) != r["threads"]
        )
        return (
            f"lineage explorer API, {r['graph']['tables']:,} tables, {r['threads']} concurrent clients on loopback",
            f"first request of a page: p50 {_fmt(c['p50_ms'])} / p99 {_fmt(c['p99_ms'])} ms; repeated: p50 "
            f"{_fmt(w['p50_ms'])} / p99 {_fmt(w['p99_ms'])} ms ({w['throughput_rps']} req/s)"
            + (f"; {others}" if others else ""),
            f"p99 < {r['target_p99_ms']:g} ms",
            "yes" if r["meets_target_cold"] and r["meets_target_warm"] else "no",
        )
    if name == "landing":
        o, s = r["old_driver_loop"], r["spark_landing"]
        return (
            f"hourly landing, {r['messages']:,} messages from Kafka ({r['kafka_partitions']} partitions), "
            f"{r['spark_cores']} cores",
            f"Spark Kafka source {s['messages_per_s']:,} msg/s ({s['seconds']} s) vs old driver loop "
            f"{o['messages_per_s']:,} msg/s ({o['seconds']} s): {r['speedup_spark_over_old']}x; "
            f"same result: {r['same_result']}",
            "runs on the executors; >= the driver loop",
            "yes" if r["same_result"] and r["speedup_spark_over_old"] >= 1 else "no",
        )
    if name == "publish":
        sizes = [f"rows_{n}" for n in r["sizes"] if f"rows_{n}" in r]
        parts = []
        for key in sizes:
            s = r[key]
            parts.append(
                f"{int(key[5:]):,} rows: WAP {_fmt(s['wap']['median_s'])} s vs Iceberg overwrite "
                f"{_fmt(s['iceberg_overwrite']['median_s'])} s ({s['ratio_wap_to_iceberg_overwrite']}x) vs parquet "
                f"{_fmt(s['parquet_overwrite']['median_s'])} s ({s['ratio_wap_to_parquet_overwrite']}x); WAP on a "
                f"table with write.distribution-mode=none {s['ratio_wap_no_shuffle_to_wap']}x WAP"
            )
        return (
            f"per-partition publish (stage + audit + publish) vs plain writes, {r['partitions']} partitions each",
            "; ".join(parts),
            "re-measured (issue 14)",
            "-",
        )
    if name == "local_fs":
        o, h = r["ours"], r["hadoop"]
        return (
            f"one append of {r['rows']:,} rows over {r['partitions']:,} partitions (a month's hourly landing), "
            "Hadoop's local file system vs ours (jvm/localfs)",
            f"ours {_fmt(o['median_s'])} s ({o['files_per_s']} files/s) vs Hadoop's {_fmt(h['median_s'])} s "
            f"({h['files_per_s']} files/s): {r['speedup_ours_over_hadoop']}x, {r['rounds']} rounds alternating",
            "faster than Hadoop's",
            "yes" if r["speedup_ours_over_hadoop"] > 1 else "no",
        )
    if name == "driver_start":
        a, p = r["archive"], r["plain"]
        return (
            "a Spark driver's start + first Iceberg table written and read, fresh process, with the class-data-"
            "sharing archive (jvm/lib/cds) vs without",
            f"driver JVM CPU {_fmt(a['jvm_cpu_s']['median'])} s vs {_fmt(p['jvm_cpu_s']['median'])} s "
            f"({r['ratio_jvm_cpu']}x); session {_fmt(a['start_s']['median'])} s vs {_fmt(p['start_s']['median'])} s "
            f"({r['ratio_start_wall']}x), first work {r['ratio_first_work_wall']}x; medians of {r['rounds']} "
            "alternated rounds",
            "less CPU than without",
            "yes" if r["ratio_jvm_cpu"] < 1 else "no",
        )
    if name.startswith(
        "pipeline"
    ):  # run per day, or one run per range (--single-run), before and after a change
        return (
            f"whole pipeline, {r['days']}-day backfill of every asset of the demo ({r['asset_partitions']} "
            f"asset-partitions, {r['runs']} Dagster runs, {r.get('mode', 'run per day')}"
            + (f", {r['code']}" if r.get("code") else "")
            + ")",
            f"{_fmt(r['s_per_asset_partition'])} s per asset-partition; {r['spark_jobs_per_asset_partition']} Spark "
            f"jobs per asset-partition ({_fmt(r['spark_job_s_per_asset_partition'])} s of Spark jobs); run set-up "
            f"median {_fmt(r['run_setup_s_median'])} s per run",
            f"<= {r['target_s_per_asset_partition']:g} s",
            "yes" if r["s_per_asset_partition"] <= r["target_s_per_asset_partition"] else "no",
        )
    if name.startswith("profiles"):
        s, b = r["run_setup"], r["backfill"]["side_by_side"]
        return (
            f"production profile (PostgreSQL, HDFS, 2 Spark workers) vs embedded (SQLite, local), {r['days']}-day "
            "backfill" + (f", {r['variant']}" if r.get("variant") else ""),
            f"run set-up {_fmt(s['postgres']['setup_s_median'])} s on PostgreSQL vs "
            f"{_fmt(s['sqlite']['setup_s_median'])} s on SQLite; backfill "
            f"{_fmt(b['s_per_asset_partition']['production'])} s vs {_fmt(b['s_per_asset_partition']['embedded'])} s "
            "per asset-partition",
            "measured",
            "",
        )
    if name == "breadth":
        c, i, d = r["collector"], r["init"], r["definitions"]
        return (
            f"breadth: {i['logical_tables']} logical tables ({i['physical_tables']:,} physical, "
            f"{r['sizes']['shards']:,} shards of orders), collector on {c['shards']['row_events']:,} row events",
            f"collector {c['shards']['events_per_s']} ev/s on the shards vs {c['one_table']['events_per_s']} on one "
            f"table ({c['ratio']}x); cdc init {i['seconds']} s, {i['yaml_lines']:,} YAML lines; code location "
            f"{d['assets']} assets in {d['load_s']} s, sensor tick {d['tick']['tick_s'] if d['tick'] else '-'} s",
            ">= 0.8x one table",
            "yes" if c["ratio"] >= c["target_ratio"] else "no",
        )
    if name == "source_day":
        return _source_day_headline(r)
    return (name, json.dumps(r)[:200], "", "")


def _source_day_headline(r: dict) -> tuple[str, str, str, str]:
    pa, sd = r["per_asset"], r["source_day"][0]
    ratio = sd["s_per_table_day"] / pa["s_per_table_day"]
    return (
        f"a source's ODS day: {sd['tables']} tables in one run vs one run per table ({pa['tables']})",
        f"{sd['s_per_table_day']} s vs {pa['s_per_table_day']} s per table-day ({ratio:.2f}x), "
        f"{sd['spark_jobs_per_table_day']} vs {pa['spark_jobs_per_table_day']} Spark jobs; whole day {sd['wall_s']} s",
        "<= 0.2x",
        "yes" if ratio <= 0.2 else "no",
    )


def _merge_headline(r: dict) -> tuple[str, str, str, str]:
    text = (
        f"ours {r['ratio_ours_to_copy']}x copy ({r['ours']['best_s']} s vs {r['copy']['best_s']} s, best of "
        f"{r['repeat']}); Iceberg MERGE INTO {r['ratio_merge_into_to_copy']}x"
        + (
            f" (merge-on-read {r['ratio_merge_into_mor_to_copy']}x)"
            if "ratio_merge_into_mor_to_copy" in r
            else ""
        )
        + f", union-all + row_number() {r['ratio_row_number_to_copy']}x; same snapshot row for row: MERGE INTO "
        f"{r['equal_to_merge_into']}"
        + (f" (merge-on-read {r['equal_to_merge_into_mor']})" if "equal_to_merge_into_mor" in r else "")
        + f", row_number {r['equal_to_row_number']}"
    )
    if "floor_ratio_to_copy" in r:
        text += (
            f"; lower bound of any merge, its necessary parts timed alone: {r['floor_ratio_to_copy']}x (state "
            f"streamed past the broadcast delta {r['floor_broadcast_ratio_to_copy']}x, shuffled "
            f"{r['floor_shuffle_ratio_to_copy']}x)"
        )
    if "floor_day_rows_ratio_to_copy" in r:
        text += (
            "; lower bound of a merge that writes only the day's rows and deletes (no new state): "
            f"{r['floor_day_rows_ratio_to_copy']}x"
        )
    growth = r.get("scaling_growth")
    if growth:
        text += (
            f"; {growth['from_rows']:,} -> {growth['to_rows']:,} state rows: ours x{growth['ours_time_factor']}, "
            f"copy x{growth['copy_time_factor']}"
        )
    if r.get("scaling_skipped_for_time"):
        text += "; not run for time: " + ", ".join(
            f"{s['state_rows']:,}" for s in r["scaling_skipped_for_time"]
        )
    others = [m for m in ("merge_into", "merge_into_mor", "row_number") if f"ratio_{m}_to_copy" in r]
    beats = all(r["ratio_ours_to_copy"] < r[f"ratio_{m}_to_copy"] for m in others)
    met = r["ratio_ours_to_copy"] <= 1.3 and beats and all(r[f"equal_to_{m}"] for m in others)
    return (
        f"daily merge on Iceberg, {r['state_rows']:,} state rows + {r['change_rows']:,} typed changes vs a "
        "plain copy, MERGE INTO and row_number()",
        text,
        "<= 1.3x copy; beats both",
        "yes" if met else "no",
    )


def write_results(results: dict, quick: bool) -> Path:
    out_json = BENCH / ("results.quick.json" if quick else "results.json")
    out_json.write_text(json.dumps(results, indent=2, default=str) + "\n")
    if quick:
        return out_json
    md = [
        "# Benchmark results",
        "",
        "Written by `bench/run_all.py` (full mode); the raw data is in `bench/results.json`. Each benchmark notes",
        "when it ran and the load average then (`ran_at_utc`, `load_avg_1m_at_start`); ratios are measured side by",
        "side in one run.",
        "",
        "## Summary",
        "",
        "| benchmark | measured | target | met | ran at (UTC), load |",
        "|---|---|---|---|---|",
    ]
    for name, res in results["benchmarks"].items():
        row = headline(name, res)
        when = f"{res.get('ran_at_utc', '?')}, {res.get('load_avg_1m_at_start', '?')}"
        md.append("| " + " | ".join([*row, when]) + " |")
    md += ["", "## Machine", ""]
    md += [f"- {k}: {v}" for k, v in results["machine"].items()]
    for name, res in results["benchmarks"].items():
        md += ["", f"## {name}", ""]
        if res.get("findings"):  # a benchmark's own reading of its figures, before the raw data
            md += ["Findings:", "", *[f"- {line}" for line in res["findings"]], ""]
        md += ["```json", json.dumps(res, indent=2, default=str), "```"]
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
    previous = BENCH / ("results.quick.json" if args.quick else "results.json")
    if args.only and previous.exists():  # a partial run keeps the other benchmarks' last results
        results["benchmarks"] = json.loads(previous.read_text()).get("benchmarks", {})
    for name in names:
        print(f"== {name} ...", flush=True)
        results["benchmarks"][name] = res = run_one(name, args.quick)
        print(json.dumps(res, indent=2, default=str)[:3000], flush=True)
    path = write_results(results, args.quick)
    print(f"results written to {path}")
    return 1 if any("error" in r for r in results["benchmarks"].values()) else 0


if __name__ == "__main__":
    sys.exit(main())
