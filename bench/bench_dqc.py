"""Benchmark of the DQC one-scan compiler: 20 single-table rules in one aggregate query vs 1 rule vs 20 queries.

A partition of N rows (default 1,000,000; `--quick` 100,000) is generated with `spark.range`, written as parquet
and read back as the partition view (what a staged partition looks like). In one Spark session, after a warm-up
of every mode, each mode is timed `--repeat` times round-robin and the median kept:

- `one_rule`: one null_count rule (one query);
- `one_scan_20`: 20 single-table rules of every plain aggregate template through `RuleRunner.run` (one query);
- `separate_20`: the same 20 rules, one `RuleRunner.run` each (20 queries);
- `one_scan_20_on_the_rules_column`: 20 rules that all read `order_id`, the one rule's column (the cost per rule
  in the scan, apart from reading more columns: the mixed 20 read 7 columns, two of them strings, and one runs a
  regex over every value);
- `duplicate_rule_only`: one duplicate_count rule on a unique key (count(DISTINCT): a keyed aggregation);
- `one_scan_20_with_duplicate`: 19 plain rules + that duplicate_count in one query.

The pipeline checks a partition after writing it to staging and before publishing it; per partition:

- `stage_no_rules`: the staging write alone (read the partition's source rows, write parquet);
- `stage_1_rule` / `stage_20_rules`: the staging write, then 1 / the 20 rules in one scan of the staged files;
- `write_observing_20_rules`: an alternative that was measured and not adopted: the 20 aggregates computed
  during the write (`Dataset.observe`, no read-back). Spark evaluates observed metrics without whole-stage code
  generation; in the runs so far it was sometimes cheaper and sometimes dearer than the scan it saves (see
  `rules_cost_after_staging_s`), so the simpler scan of the staged files stays.

Target: `one_scan_20 / one_rule <= 1.5` (the rules' own cost); `stage_20_rules / stage_1_rule` (the pipeline's
cost per partition, the write included) is reported next to it.

    .venv/bin/python bench/bench_dqc.py [--quick] [--rows N] [--repeat R] [--compile-huge-methods]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from pyspark.sql import Observation, SparkSession
from pyspark.sql import functions as F

from sharp_dagster.dqc.compiler import compile_rules
from sharp_dagster.dqc.rule_validation import build_rule
from sharp_dagster.dqc.rules import Rule
from sharp_dagster.dqc.runner import RuleRunner, schema_of
from sharp_dagster.settings import Settings
from sharp_dagster.spark.iceberg import warehouse_tables
from sharp_dagster.spark.session import LOG4J_CONF, build_spark_session
from sharp_dagster.spark.tables import TableRef

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


def _scan_aggregates(spark: SparkSession, scan_sql: str) -> list[Any]:
    """The compiled scan's select list as Columns (for `observe`): `<expr> AS `alias`` items, one per line."""
    body = scan_sql.split("\n", 1)[1].rsplit("\nFROM ", 1)[0]
    items = [line.strip().rstrip(",") for line in body.splitlines()]
    out = []
    for item in items:
        expr, _, alias = item.rpartition(" AS ")
        out.append(F.expr(expr).alias(alias.strip("`")))
    return out


def one_column_rules(schema: dict[str, str]) -> list[Rule]:
    """20 rules that all read the one column the single rule reads (`order_id`): the scan's cost per rule,
    without the cost of reading more columns."""

    def rule(rid: str, template: str, params: dict[str, Any], comparator: str, expect: Any) -> Rule:
        raw = {"id": rid, "asset": ASSET, "template": template, "params": params, "comparator": comparator,
               "expect": expect}  # fmt: skip
        return build_rule(raw, {ASSET: schema}, {}, source="bench")

    c = {"column": "order_id"}
    rules = [
        rule("rows", "row_count", {}, ">", 0),
        rule("nulls", "null_count", c, ">=", 0),
        rule("null_rate", "null_rate", c, "<", 0.05),
        rule("sum", "column_sum", c, ">", 0),
        rule("avg", "column_avg", c, ">", 0),
        rule("accepted", "accepted_values", {**c, "values": ["1", "2", "3"]}, ">=", 0),
        *[rule(f"below_{i}", "value_range", {**c, "min": i * 1000}, ">=", 0) for i in range(7)],
        *[rule(f"above_{i}", "value_range", {**c, "max": 10**9 + i}, "=", 0) for i in range(7)],
    ]
    assert len(rules) == 20
    return rules


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
    tmp = tempfile.mkdtemp(prefix="bench_dqc_")
    # The staged partitions go to a warehouse of their own (an Iceberg catalog in the temp directory), as the
    # pipeline stages them: a branch of the table, read back for the rules' scan, then dropped.
    for name in ("SHARP_WAREHOUSE_DIR", "SHARP_LOG_DB_URL"):  # the catalog and its data both in `tmp`
        os.environ.pop(name, None)
    os.environ["SHARP_DATA_DIR"] = str(Path(tmp) / "data")
    settings = Settings.from_env()
    spark = build_spark_session(settings, app_name="bench_dqc", **conf)
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
            "one_scan_20_on_the_rules_column": one_column_rules(schema_of(df)),
            "one_scan_20_with_duplicate": mixed,
        }
        failed = [r.message for r in runner.run(ASSET, PARTITION, VIEW, plain) if not r.passed]
        failed += [
            r.message for r in runner.run(ASSET, PARTITION, VIEW, [by_id["order_unique"]]) if not r.passed
        ]

        store = warehouse_tables(spark, settings)
        ref = TableRef("dwd", "bench_dqc_staged")

        def stage(rules: list[Rule] | None) -> None:
            """The pipeline's checked staging of one partition: write to staging, then the rules' one scan."""
            staged = store.stage(ref, {"dt": PARTITION}, df.drop("dt"))
            if rules:
                runner.run(ASSET, PARTITION, store.read_staged(staged), rules)
            store.discard(staged)

        # The alternative measured and not adopted: the 20 aggregates computed by `Dataset.observe` during the
        # write, which saves reading the staged files back but is evaluated by CollectMetricsExec without
        # whole-stage code generation.
        aggregates = _scan_aggregates(
            spark, compile_rules(plain, VIEW, {"partition_key": PARTITION}).scan_sql
        )
        observed_dir = str(Path(tmp) / "observed")

        def write_observing(columns: list[Any]) -> dict[str, Any]:
            observation = Observation(f"bench_{time.monotonic_ns()}")
            df.drop("dt").observe(observation, *columns).write.mode("overwrite").parquet(observed_dir)
            return observation.get

        scanned = runner.run(ASSET, PARTITION, VIEW, plain)
        observed = write_observing(aggregates)
        for r in scanned:  # the same numbers either way (sums of doubles up to the order of the partial sums)
            assert math.isclose(float(observed[f"r_{r.rule_id}"]), float(r.actual), rel_tol=1e-9), r.rule_id

        staging = {
            "stage_no_rules": lambda: stage(None),
            "stage_1_rule": lambda: stage(modes["one_rule"]),
            "stage_20_rules": lambda: stage(plain),
            "write_observing_20_rules": lambda: write_observing(aggregates),
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
            "ratio_20_rules_on_one_column_vs_1_rule": round(
                med["one_scan_20_on_the_rules_column"] / med["one_rule"], 3
            ),
            "ratio_20_separate_queries_vs_one_scan": round(med["separate_20"] / med["one_scan_20"], 3),
            "ratio_20_with_duplicate_vs_duplicate_rule_only": round(
                med["one_scan_20_with_duplicate"] / med["duplicate_rule_only"], 3
            ),
            "ratio_stage_20_rules_vs_stage_1_rule": round(med["stage_20_rules"] / med["stage_1_rule"], 3),
            "rules_cost_after_staging_s": {
                "1_rule": round(med["stage_1_rule"] - med["stage_no_rules"], 4),
                "20_rules": round(med["stage_20_rules"] - med["stage_no_rules"], 4),
                "20_rules_observed_during_the_write": round(
                    med["write_observing_20_rules"] - med["stage_no_rules"], 4
                ),
            },
            "target_20_rules_le_1_5x_one_rule": med["one_scan_20"] / med["one_rule"] <= 1.5,
            "rules_failing_on_bench_data": failed,
        }
        print(json.dumps(result, indent=2))
        return result
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main(sys.argv[1:])
