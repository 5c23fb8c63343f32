"""Breadth: a source of many tables and one logical table of many shards, on the tests' own real MariaDB and Kafka.

    .venv/bin/python bench/bench_breadth.py            # 200 tables over 4 databases, orders_0000..orders_1023
    .venv/bin/python bench/bench_breadth.py --quick    # 30 tables over 2 databases, 64 shards, 2 days
    .venv/bin/python bench/bench_breadth.py --days 0   # the first half only (no Spark)

What it measures, each part on the same private servers (loopback, stopped by their own pid):
- `cdc init` as the README runs it (the CLI, its own process): wall time, the YAML's size and lines, the logical
  tables it found and that the shards were folded into one logical `orders` (shard group detected);
- the collector's row events per second over the same number of single-row INSERTs spread round-robin over all
  the shards of `orders_NNNN` and sent to one table `orders` (target: shards >= 0.8x one table), wall time and CPU
  seconds, the two kinds alternated `--rounds` times, and that every event arrived (the count the collector sent
  equals the statements run);
- the code location's load time with the init's YAML as its warehouse (`dagster dev` loads it the same way), its
  asset count, asset groups and jobs, and one evaluation of the source's log-driven sensor with 200+ assets.
- then (`breadth_days.py`, with a Spark session) `cdc bootstrap` of every table, `--days` simulated days of changes
  (a few per table, more on `--busy` tables, two on every shard), the collector, the landing of every database
  (timed), the day's ODS of every table in one Dagster run (wall time and Spark jobs, per table-day), a DWD table
  over `orders` and `t_000`, and the oracle: every ODS tag and DWD day equal to the source at that day's end.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

import breadth_days  # noqa: E402

from sharp_dagster.servers import LocalBroker, LocalMariaDB  # noqa: E402

COLUMNS = "(id BIGINT PRIMARY KEY, customer VARCHAR(32) NOT NULL, amount DECIMAL(10,2), note VARCHAR(64))"
ROWS_PER_TABLE = 3
TXN_STATEMENTS = 200

PROBE = r"""
import json, sys, time
t0 = time.perf_counter()
from sharp_dagster.definitions import defs
repo = defs.get_repository_def()
graph = repo.asset_graph
keys = graph.get_all_asset_keys()
t1 = time.perf_counter()
groups = {}
for key in keys:
    group = graph.get(key).group_name
    groups[group] = groups.get(group, 0) + 1
from dagster import DagsterInstance, build_sensor_context
sensors = {s.name: s for s in repo.sensor_defs}
name = sys.argv[1]
tick = None
if name in sensors:
    with DagsterInstance.ephemeral() as instance:
        t2 = time.perf_counter()
        result = sensors[name].evaluate_tick(build_sensor_context(instance=instance, repository_def=repo))
        tick = {"sensor": name, "tick_s": time.perf_counter() - t2, "run_requests": len(result.run_requests or [])}
print(json.dumps({"load_s": t1 - t0, "assets": len(keys), "groups": groups,
                  "jobs": sorted(j.name for j in repo.get_all_jobs()), "sensors": sorted(sensors), "tick": tick}))
"""


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="30 tables, 64 shards, 2 databases")
    parser.add_argument("--tables", type=int, help="plain tables over all databases (default 199, quick 29)")
    parser.add_argument("--shards", type=int, help="shards of orders (default 1024, quick 64)")
    parser.add_argument("--databases", type=int, help="databases (default 4, quick 2)")
    parser.add_argument("--events", type=int, help="row events per collector run (default 20000, quick 4000)")
    parser.add_argument(
        "--rounds", type=int, help="collector runs of each kind, alternated (default 3, quick 1)"
    )
    parser.add_argument("--prefix", default="breadth", help="the databases' name prefix")
    parser.add_argument(
        "--days", type=int, help="simulated days through the pipeline (default 3, quick 2; 0: none)"
    )
    parser.add_argument("--per-table", type=int, default=3, help="changes to every plain table a day")
    parser.add_argument("--busy", type=int, default=3, help="busy tables (more changes a day)")
    parser.add_argument("--busy-changes", type=int, default=200, help="changes a day to each busy table")
    parser.add_argument(
        "--skip-landing",
        action="append",
        default=[],
        metavar="DAY",
        help="(to see the oracle fail) no landing",
    )
    args = parser.parse_args(argv)
    defaults = (29, 64, 2, 4000, 2, 1) if args.quick else (199, 1024, 4, 20000, 3, 3)
    names = ("tables", "shards", "databases", "events", "days", "rounds")
    for name, value in zip(names, defaults, strict=True):
        if getattr(args, name) is None:
            setattr(args, name, value)
    if args.tables < 1 or args.shards < 2 or args.databases < 1 or args.events < args.shards or args.days < 0:
        parser.error("need --tables >= 1, --shards >= 2, --databases >= 1, --events >= --shards, --days >= 0")
    if args.rounds < 1:
        parser.error(f"need --rounds >= 1, got {args.rounds}")
    return args


def shard_names(shards: int) -> list[str]:
    width = max(4, len(str(shards - 1)))
    return [f"orders_{i:0{width}d}" for i in range(shards)]


def create_source(db: LocalMariaDB, args: argparse.Namespace) -> dict[str, list[str]]:
    """Databases <prefix>_0..: the plain tables t_NNN round-robin, and orders_NNNN in the first; a few rows each."""
    layout: dict[str, list[str]] = {f"{args.prefix}_{d}": [] for d in range(args.databases)}
    names = list(layout)
    layout[names[0]] += shard_names(args.shards)
    for i in range(args.tables):
        layout[names[i % len(names)]].append(f"t_{i:03d}")
    for database, tables in layout.items():
        db.execute(f"CREATE DATABASE {database}")
        statements = [f"CREATE TABLE {t} {COLUMNS}" for t in tables]
        for t in tables:
            values = ", ".join(f"({k}, 'c{k}', {k}.50, NULL)" for k in range(1, ROWS_PER_TABLE + 1))
            statements.append(f"INSERT INTO {t} VALUES {values}")
        db.execute(*statements, database=database)
    return layout


def run_init(db: LocalMariaDB, layout: dict[str, list[str]], out: Path, shards: int) -> dict:
    """`sharp-dagster cdc init` in its own process, as a person runs it."""
    cmd = [
        sys.executable,
        "-m",
        "sharp_dagster.cli",
        "cdc",
        "init",
        "--host",
        db.host,
        "--port",
        str(db.port),
    ]
    cmd += ["--user", "root", "--source-id", "breadth", "--output", str(out)]
    for database in layout:
        cmd += ["--database", database]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, env=_env())
    seconds = time.perf_counter() - t0
    if proc.returncode != 0:
        raise RuntimeError(f"cdc init failed (exit {proc.returncode}): {proc.stderr[-3000:]}")
    import yaml

    text = out.read_text()
    config = yaml.safe_load(text)
    logical = {t["name"]: t for d in config["databases"] for t in d["tables"]}
    orders = logical.get("orders", {})
    return {
        "seconds": round(seconds, 2),
        "yaml_bytes": len(text.encode()),
        "yaml_lines": text.count("\n"),
        "physical_tables": sum(len(t) for t in layout.values()),
        "logical_tables": len(logical),
        "orders_shards_folded": "shard_regex" in orders and len(_shards(orders)) == shards,
        "orders_entry": {k: v for k, v in orders.items() if k != "columns"},
    }


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SHARP_")}
    env.update(extra)
    return env


def write_events(db: LocalMariaDB, database: str, tables: list[str], events: int) -> None:
    """`events` single-row INSERTs, round-robin over `tables`, TXN_STATEMENTS to a transaction."""
    conn = db.connect()
    try:
        with conn.cursor() as cur:
            cur.execute(f"USE {database}")
            for start in range(0, events, TXN_STATEMENTS):
                cur.execute("BEGIN")
                for i in range(start, min(events, start + TXN_STATEMENTS)):
                    table = tables[i % len(tables)]
                    cur.execute(f"INSERT INTO {table} VALUES ({1000 + i}, 'c{i}', {i % 997}.25, 'bench')")
                cur.execute("COMMIT")
    finally:
        conn.close()


def collect(
    db: LocalMariaDB, broker: LocalBroker, database: str, tables: dict, events: int, tmp: Path
) -> dict:
    """Write `events` row events into `tables` ({logical: physical names}) and time one collector run over them."""
    from sharp_dagster.cdc.capture.collector import Collector
    from sharp_dagster.cdc.source.config import MysqlSettings, source_config_from_dict

    db.execute(f"CREATE DATABASE {database}")
    physical = [p for names in tables.values() for p in names]
    db.execute(*[f"CREATE TABLE {p} {COLUMNS}" for p in physical], database=database)
    start = _gtid(db)
    write_events(db, database, physical, events)
    entries = [
        {
            "name": logical,
            "primary_key": ["id"],
            **({"shard_regex": r"orders_(\d+)"} if len(names) > 1 else {}),
        }
        for logical, names in tables.items()
    ]
    source = source_config_from_dict(
        {
            "source_id": f"bench-{database}",
            "replica_server_id": 7000 + len(physical) % 1000,
            "topic_partitions": 1,
            "databases": [{"name": database, "topic": f"binlog.{database}", "tables": entries}],
        }
    )
    mysql = MysqlSettings(db.host, db.port, "root", "")
    collector = Collector(
        mysql, {"bootstrap.servers": broker.bootstrap_servers}, source, tmp / f"{database}.json", start=start
    )
    t0, c0 = time.perf_counter(), time.process_time()
    stats = collector.run(once=True)
    seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
    if stats.row_changes != events:
        raise RuntimeError(
            f"{database}: the collector sent {stats.row_changes} row changes, {events} written"
        )
    return {
        "tables": len(physical),
        "row_events": stats.row_changes,
        "seconds": round(seconds, 2),
        "cpu_s": round(cpu, 2),  # this process's CPU (the collector and its Kafka client's threads)
    }


def _gtid(db: LocalMariaDB) -> str:
    conn = db.connect()
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT @@GLOBAL.gtid_binlog_pos")
            return cur.fetchone()[0] or "earliest"
    finally:
        conn.close()


def measure_collector(db: LocalMariaDB, broker: LocalBroker, args: argparse.Namespace, tmp: Path) -> dict:
    """The same events on one table and over every shard, the two alternated `args.rounds` times (one, shards, one,
    shards, ...) so that a change of the shared machine's load falls on both; wall time and this process's CPU per
    run, and the ratios of the sums (shards / one table, events per second: >= 0.8 is the target)."""
    # A first collector run pays the broker's warm-up (its idempotent producer id, the first topic): not timed.
    collect(db, broker, f"{args.prefix}_warm", {"orders": ["orders"]}, min(args.events, 500), tmp)
    runs: dict[str, list[dict]] = {"one_table": [], "shards": []}
    for r in range(args.rounds):
        suffix = f"_{r}" if r else ""
        runs["one_table"].append(
            collect(db, broker, f"{args.prefix}_one{suffix}", {"orders": ["orders"]}, args.events, tmp)
        )
        shards = {"orders": shard_names(args.shards)}
        runs["shards"].append(collect(db, broker, f"{args.prefix}_shards{suffix}", shards, args.events, tmp))
    out: dict = {"rounds": args.rounds, "target_ratio": 0.8}
    for name, found in runs.items():
        wall, cpu = sum(r["seconds"] for r in found), sum(r["cpu_s"] for r in found)
        events = sum(r["row_events"] for r in found)
        out[name] = {
            "tables": found[0]["tables"],
            "row_events": found[0]["row_events"],
            "seconds": [r["seconds"] for r in found],
            "cpu_s": [r["cpu_s"] for r in found],
            "events_per_s": round(events / wall, 1),
            "events_per_cpu_s": round(events / cpu, 1) if cpu else None,
        }
    one, many = out["one_table"], out["shards"]
    out["ratio"] = round(many["events_per_s"] / one["events_per_s"], 3)  # by wall time
    if one["events_per_cpu_s"] and many["events_per_cpu_s"]:
        out["cpu_ratio"] = round(many["events_per_cpu_s"] / one["events_per_cpu_s"], 3)
    return out


def measure_definitions(yaml_path: Path, tmp: Path) -> dict:
    """The code location loaded in its own process with the init's YAML as its only CDC source."""
    sql_dir = tmp / "warehouse"
    (sql_dir / "cdc").mkdir(parents=True)
    (sql_dir / "cdc" / yaml_path.name).write_text(yaml_path.read_text())
    env = _env(SHARP_WAREHOUSE_SQL_DIR=str(sql_dir), DAGSTER_HOME=str(tmp))
    proc = subprocess.run(
        [sys.executable, "-c", PROBE, "log_driven_sensor"], cwd=REPO, env=env, capture_output=True, text=True
    )
    if proc.returncode != 0:
        raise RuntimeError(f"loading the definitions failed: {proc.stderr[-3000:]}")
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    result["load_s"] = round(result["load_s"], 2)
    if result["tick"]:
        result["tick"]["tick_s"] = round(result["tick"]["tick_s"], 3)
    return result


def measure(args: argparse.Namespace, tmp: Path, db: LocalMariaDB, broker: LocalBroker, spark=None) -> dict:
    """Every part on running servers (the benchmark's own, or a test session's); the days with `spark` only."""
    t0 = time.perf_counter()
    result: dict = {"sizes": {k: getattr(args, k) for k in ("tables", "shards", "databases", "events")}}
    layout = create_source(db, args)
    result["source_create_s"] = round(time.perf_counter() - t0, 2)
    yaml_path = tmp / "breadth.yaml"
    result["init"] = run_init(db, layout, yaml_path, args.shards)
    result["collector"] = measure_collector(db, broker, args, tmp)
    result["definitions"] = measure_definitions(yaml_path, tmp)
    if spark is not None and args.days:
        result["pipeline"] = breadth_days.pipeline(args, tmp, db, broker, spark, layout, yaml_path)
    result["total_s"] = round(time.perf_counter() - t0, 1)
    return result


def _shards(entry: dict) -> list[str]:
    """The physical names a table entry of the YAML declares (a count, a range or a list)."""
    from sharp_dagster.cdc.source.config import source_config_from_dict

    config = {"source_id": "x", "databases": [{"name": "d", "tables": [entry]}]}
    return list(source_config_from_dict(config).databases[0].tables[0].shards)


def _spark(tmp: Path):
    """The benchmark's local Spark session (as the tests' `spark` fixture builds it; its warehouse set per run)."""
    os.environ["SHARP_DATA_DIR"] = str(tmp / "spark_data")
    from sharp_dagster.settings import Settings
    from sharp_dagster.spark.session import build_spark_session

    return build_spark_session(Settings.from_env(), app_name="bench_breadth")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    load = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="bench_breadth_") as tmp:
        with (
            LocalMariaDB(base_dir=Path(tmp) / "mariadb") as db,
            LocalBroker(base_dir=Path(tmp) / "kafka") as broker,
        ):
            result = measure(args, Path(tmp), db, broker, _spark(Path(tmp)) if args.days else None)
    result["load_avg"] = [round(x, 2) for x in load]
    result["load_avg_end"] = [round(x, 2) for x in os.getloadavg()]
    result["cpus"] = os.cpu_count()
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
