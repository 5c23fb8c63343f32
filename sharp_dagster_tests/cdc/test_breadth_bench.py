"""`bench/bench_breadth.py --quick` on the session's MariaDB and Kafka, CI-sized (5 plain tables and 64 shards of
orders in one database, two days): `cdc init` folds the shards into one logical table written as one range line,
the collector sends every row event of the shards and of the one table, the code location built from the init's
YAML shows the database's ODS and source groups with the log-driven sensor ticking; then `cdc bootstrap`, two
simulated days of changes (every table, two busy ones, every shard), the collector, the landing, every ODS table and
a DWD table through Dagster each day, and the oracle: each day's ODS tag of every table (orders: the 64 shards
folded) and DWD partition equal to the source at that day's end. The figures are the benchmark's (RESULTS.md)."""

from __future__ import annotations

import itertools
import json
import time

from sharp_dagster_tests.house.bench_support import BENCH, _load

_N = itertools.count(1)
# CI-sized: 5 plain tables and orders_00..63 in one database, two days (each table-day costs ~3 s of ODS today)
SIZES = ["--tables", "5", "--databases", "1", "--events", "2000"]
DAYS = ["--days", "2", "--per-table", "3", "--busy", "2", "--busy-changes", "40"]


def test_the_quick_breadth_run_measures_every_part(mariadb, broker, spark, tmp_path):
    bench = _load(BENCH / "bench_breadth.py")
    prefix = f"breadth{next(_N)}_{int(time.time()) % 100000}"
    args = bench.parse_args(["--quick", *SIZES, "--prefix", prefix, *DAYS])
    result = bench.measure(args, tmp_path, mariadb, broker, spark)

    init = result["init"]
    assert init["physical_tables"] == 5 + 64 and init["logical_tables"] == 6
    assert init["orders_shards_folded"] and init["orders_entry"]["shards"] == "0000..0063"
    assert "orders_0005" not in (tmp_path / "breadth.yaml").read_text()  # one line, not 64 names

    collector = result["collector"]
    assert collector["one_table"]["row_events"] == collector["shards"]["row_events"] == 2000
    assert collector["shards"]["tables"] == 64 and collector["ratio"] > 0

    definitions = result["definitions"]
    groups = definitions["groups"]
    assert groups[f"ods_{prefix}_0"] == 1 + 5 and groups[f"sources_{prefix}_0"] == 64 + 5
    assert "ods" not in groups and "sources" not in groups
    assert definitions["tick"]["sensor"] == "log_driven_sensor" and definitions["tick"]["tick_s"] > 0

    pipeline = result["pipeline"]
    print(json.dumps({k: v for k, v in result.items() if k not in ("init", "definitions")}, indent=1))
    assert pipeline["tables"] == 6 and list(pipeline["days"]) == ["2024-05-01", "2024-05-02"]
    for day, figures in pipeline["days"].items():
        assert figures["failure"] is None, (day, figures["failure"])
        # every statement of the day reached the landing: the shards' two each, the busy and plain tables'
        assert figures["row_changes"] == figures["statements"] > 64 * 2 + 5, (day, figures)
        assert figures["ods_spark_jobs"] > 0 and figures["ods_tables"] == 6 and figures["dwd_s"] > 0
    # the oracle: every table's ODS tag of every day equals the source at that day's end (orders: 64 shards folded),
    # and dwd.breadth_orders of every day the join of orders and t_000 at that day's end
    assert pipeline["problems"] == []
