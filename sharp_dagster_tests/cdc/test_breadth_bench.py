"""`bench/bench_breadth.py --quick` on the session's MariaDB and Kafka (30 tables over 2 databases, 64 shards of
orders): `cdc init` folds the shards into one logical table written as one range line, the collector sends every
row event of the shards and of the one table, and the code location built from the init's YAML shows one ODS and one
source group per database with the log-driven sensor ticking. The figures are the benchmark's (RESULTS.md)."""

from __future__ import annotations

import itertools
import time

from sharp_dagster_tests.house.bench_support import BENCH, _load

_N = itertools.count(1)


def test_the_quick_breadth_run_measures_every_part(mariadb, broker, tmp_path):
    bench = _load(BENCH / "bench_breadth.py")
    prefix = f"breadth{next(_N)}_{int(time.time()) % 100000}"
    args = bench.parse_args(["--quick", "--events", "2000", "--prefix", prefix])
    result = bench.measure(args, tmp_path, mariadb, broker)

    init = result["init"]
    assert init["physical_tables"] == 29 + 64 and init["logical_tables"] == 30
    assert init["orders_shards_folded"] and init["orders_entry"]["shards"] == "0000..0063"
    assert "orders_0005" not in (tmp_path / "breadth.yaml").read_text()  # one line, not 64 names

    collector = result["collector"]
    assert collector["one_table"]["row_events"] == collector["shards"]["row_events"] == 2000
    assert collector["shards"]["tables"] == 64 and collector["ratio"] > 0

    definitions = result["definitions"]
    groups = definitions["groups"]
    # the first database: orders and 15 of the 29 plain tables (round-robin); the second: the other 14
    assert groups[f"ods_{prefix}_0"] == 1 + 15 and groups[f"ods_{prefix}_1"] == 14
    assert groups[f"sources_{prefix}_0"] == 64 + 15 and groups[f"sources_{prefix}_1"] == 14
    assert "ods" not in groups and "sources" not in groups
    assert definitions["tick"]["sensor"] == "log_driven_sensor" and definitions["tick"]["tick_s"] > 0
