"""Benchmark of the DQC one-scan compiler: 20 single-table rules in one aggregate query vs 1 rule vs 20 queries.

A partition of N rows (default 1,000,000; `--quick` 100,000) is generated with `spark.range`, written as parquet
and read back as the partition view (what a staged partition looks like). In one Spark session, after a warm-up
of every mode, each mode is timed `--repeat` times round-robin and the median kept:

- `one_rule`: one null_count rule (one query);
- `one_scan_20`: 20 single-table rules of every plain aggregate template through `RuleRunner.run` (one query);
- `separate_20`: the same 20 rules, one `RuleRunner.run` each (20 queries);
- `duplicate_rule_only`: one duplicate_count rule on a unique key (count(DISTINCT): a keyed aggregation);
- `one_scan_20_with_duplicate`: 19 plain rules + that duplicate_count in one query.

Those check a partition that is already written (the `dqc run` CLI, a re-check). The pipeline checks a partition
while staging it: `TableStore.stage` writes the computed rows and measures the rules' aggregates in the same Spark
job (`compiler.observable_metrics`), then the runner only judges. Timed the same way, per partition:

- `stage_no_rules`: the staging write alone (read the partition's source rows, write parquet);
- `stage_1_rule` / `stage_20_rules`: the staging write measuring 1 / the 20 rules, then the runner's verdicts;
- `stage_then_scan_20`: the staging write, then the 20 rules in one scan of the staged files (the old pipeline).

Target: 20 rules cost at most 1.5x one rule: `stage_20_rules / stage_1_rule` in the pipeline, and the stand-alone
`one_scan_20 / one_rule` is reported next to it.

    .venv/bin/python bench/bench_dqc.py [--quick] [--rows N] [--repeat R] [--compile-huge-methods]
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from sharp_dagster.dqc.compiler import observable_metrics
from sharp_dagster.dqc.rules import Rule, build_rule
from sharp_dagster.dqc.runner import RuleRunner, schema_of
from sharp_dagster.spark.session import LOG4J_CONF, build_spark_session
from sharp_dagster.spark.tables import TableRef, TableStore

ASSET = "dwd/order_detail"
PARTITION = "2024-01-01"
VIEW = "bench_dqc_orders"


def generate(spark: SparkSession, rows: int, path: str) -> None:
    files = max(2, rows // 500_000)
    df = spark.range(0, rows, 1, files).select(
        F.col("id").alias("order_id"),
        (F.col("id") % 3).cast("int").alias("line_no"),
        F.when(F.col("id") % 97 == 0, F.lit(None)).otherwise(F.col("id") % 50_000).alias("user_id"),
        F.element_at(
            F.array(*[F.lit(s) for s in ("paid", "shipped", "refunded", "cancelled")]),
            (F.col("id") % 4 + 1).cast("int"),
        ).alias("status"),
        ((F.col("id") % 100_000) / 100).cast("double").alias("amount"),
        F.concat(F.lit("user"), (F.col("id") % 1000).cast("string"), F.lit("@shop.com")).alias("email"),
        F.timestamp_seconds(F.lit(1_704_067_200) + F.col("id") % 86_400).alias("updated_at"),
        F.lit(PARTITION).alias("dt"),
    )
    df.write.mode("overwrite").parquet(path)


def bench_rules(schema: dict[str, str]) -> tuple[list[Rule], list[Rule]]:
    """20 rules mixing every single-table template (with one duplicate_count), and 20 without count-distinct."""

    def rule(rid: str, template: str, params: dict[str, Any], comparator: str, expect: Any) -> Rule:
        raw = {"id": rid, "asset": ASSET, "template": template, "params": params, "comparator": comparator,
               "expect": expect}  # fmt: skip
        return build_rule(raw, {ASSET: schema}, {}, source="bench")

    common = [
        rule("rows", "row_count", {}, ">", 0),
        *[
            rule(f"null_{c}", "null_count", {"column": c}, ">=", 0)
            for c in ("order_id", "line_no", "status", "email")
        ],
        rule("null_rate_user", "null_rate", {"column": "user_id"}, "<", 0.05),
        rule("amount_range", "value_range", {"column": "amount", "min": 0, "max": 1000}, "=", 0),
        rule("line_range", "value_range", {"column": "line_no", "min": 0, "max": 2}, "=", 0),
        rule(
            "status_ok",
            "accepted_values",
            {"column": "status", "values": ["paid", "shipped", "refunded", "cancelled"]},
            "=",
            0,
        ),  # fmt: skip
        rule(
            "email_ok",
            "regex_match_rate",
            {"column": "email", "pattern": r"^[a-z0-9]+@[a-z]+\.com$"},
            ">=",
            0.99,
        ),
        rule("fresh", "freshness", {"column": "updated_at"}, "<=", 2),
        rule("fresh_min", "freshness", {"column": "updated_at", "unit": "minutes"}, "<=", 120),
        rule("amount_sum", "column_sum", {"column": "amount"}, ">", 0),
        rule("amount_avg", "column_avg", {"column": "amount"}, "between", [0, 1000]),
        rule("user_sum", "column_sum", {"column": "user_id"}, ">", 0),
        rule("status_ok2", "accepted_values", {"column": "line_no", "values": ["0", "1", "2"]}, "=", 0),
        rule("rate_status", "null_rate", {"column": "status"}, "=", 0),
        rule("rate_email", "null_rate", {"column": "email"}, "=", 0),
    ]
    mixed = [*common, rule("order_unique", "duplicate_count", {"key": ["order_id", "line_no"]}, "=", 0),
             rule("amount_pos", "value_range", {"column": "amount", "min": 0}, "=", 0)]  # fmt: skip
    plain = [*common, rule("user_range", "value_range", {"column": "user_id", "min": 0}, "=", 0),
             rule("amount_pos", "value_range", {"column": "amount", "min": 0}, "=", 0)]  # fmt: skip
    assert len(mixed) == 20 and len(plain) == 20
    return mixed, plain


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="100,000 rows, 1 timed round")
    parser.add_argument("--rows", type=int)
    parser.add_argument("--repeat", type=int)
    parser.add_argument(
        "--compile-huge-methods",
        action="store_true",
        help="start the JVM with -XX:-DontCompileHugeMethods (JIT-compile the wide generated aggregate)",
    )
    args = parser.parse_args(argv)
    rows = args.rows or (100_000 if args.quick else 1_000_000)
    repeat = args.repeat or (1 if args.quick else 5)

    conf = {}
    if args.compile_huge_methods:
        # HotSpot does not JIT methods over 8000 bytes of bytecode; the generated code of a 20-aggregate scan is
        # that big, so it runs interpreted. Only effective if this process starts the JVM.
        conf["spark.driver.extraJavaOptions"] = (
            f"-Dlog4j2.configurationFile=file:{LOG4J_CONF} -XX:-DontCompileHugeMethods"
        )
    spark = build_spark_session(app_name="bench_dqc", **conf)
    tmp = tempfile.mkdtemp(prefix="bench_dqc_")
    try:
        path = str(Path(tmp) / "orders")
        t0 = time.perf_counter()
        generate(spark, rows, path)
        gen_s = time.perf_counter() - t0
        df = spark.read.parquet(path)
        df.createOrReplaceTempView(VIEW)
        mixed, plain = bench_rules(schema_of(df))
        runner = RuleRunner(spark)
        by_id = {r.id: r for r in mixed}
        modes = {
            "one_rule": [by_id["null_order_id"]],
            "duplicate_rule_only": [by_id["order_unique"]],
            "one_scan_20": plain,
            "one_scan_20_with_duplicate": mixed,
        }
        failed = [r.message for r in runner.run(ASSET, PARTITION, VIEW, plain) if not r.passed]
        failed += [
            r.message for r in runner.run(ASSET, PARTITION, VIEW, [by_id["order_unique"]]) if not r.passed
        ]

        store = TableStore(spark, str(Path(tmp) / "warehouse"))
        ref = TableRef("dwd", "bench_dqc_staged")
        context = {"partition_key": PARTITION}

        def stage(rules: list[Rule] | None, observe: bool = True) -> list[Any]:
            """The pipeline's checked staging of one partition: write (measuring the rules), then the verdicts."""
            metrics = observable_metrics(rules, context) if rules and observe else []
            staged = store.stage(ref, {"dt": PARTITION}, df.drop("dt"), metrics)
            results = []
            if rules:
                view = store.read_staged(staged)
                results = runner.run(ASSET, PARTITION, view, rules, context, measured=staged.metrics)
            store.discard(staged)
            return results

        # Measured during the write or scanned afterwards: the same values.
        # (Sums of doubles may differ in the last bits: partial sums are combined in another order.)
        scanned = {r.rule_id: r.actual for r in runner.run(ASSET, PARTITION, VIEW, plain)}
        observed = {r.rule_id: r.actual for r in stage(plain)}
        assert observed.keys() == scanned.keys()
        assert all(math.isclose(observed[k], v, rel_tol=1e-9) for k, v in scanned.items()), (
            observed,
            scanned,
        )

        staging = {
            "stage_no_rules": lambda: stage(None),
            "stage_1_rule": lambda: stage(modes["one_rule"]),
            "stage_20_rules": lambda: stage(plain),
            "stage_then_scan_20": lambda: stage(plain, observe=False),
        }

        def timed(name: str) -> float:
            t0 = time.perf_counter()
            if name == "separate_20":
                for r in plain:
                    runner.run(ASSET, PARTITION, VIEW, [r])
            elif name in staging:
                staging[name]()
            else:
                runner.run(ASSET, PARTITION, VIEW, modes[name])
            return time.perf_counter() - t0

        names = [*modes, "separate_20", *staging]
        for name in names:  # warm-up: JIT, codegen caches, file listing
            timed(name)
        times: dict[str, list[float]] = {m: [] for m in names}
        for _ in range(repeat):
            for name in names:  # round-robin, so load changes hit every mode alike
                times[name].append(timed(name))
        med = {m: statistics.median(v) for m, v in times.items()}
        result = {
            "rows": rows,
            "compile_huge_methods": args.compile_huge_methods,
            "repeat": repeat,
            "generate_s": round(gen_s, 2),
            "median_s": {m: round(v, 4) for m, v in med.items()},
            "ratio_20_rules_one_scan_vs_1_rule": round(med["one_scan_20"] / med["one_rule"], 3),
            "ratio_20_separate_queries_vs_one_scan": round(med["separate_20"] / med["one_scan_20"], 3),
            "ratio_20_with_duplicate_vs_duplicate_rule_only": round(
                med["one_scan_20_with_duplicate"] / med["duplicate_rule_only"], 3
            ),
            "ratio_stage_20_rules_vs_stage_1_rule": round(med["stage_20_rules"] / med["stage_1_rule"], 3),
            "ratio_stage_then_scan_20_vs_stage_20_rules": round(
                med["stage_then_scan_20"] / med["stage_20_rules"], 3
            ),
            "rules_cost_in_stage_s": {
                "1_rule": round(med["stage_1_rule"] - med["stage_no_rules"], 4),
                "20_rules": round(med["stage_20_rules"] - med["stage_no_rules"], 4),
            },
            "target_20_rules_le_1_5x_one_rule_in_pipeline": med["stage_20_rules"] / med["stage_1_rule"]
            <= 1.5,
            "target_20_rules_le_1_5x_one_rule_standalone_scan": med["one_scan_20"] / med["one_rule"] <= 1.5,
            "rules_failing_on_bench_data": failed,
        }
        print(json.dumps(result, indent=2))
        return result
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main(sys.argv[1:])
