"""Bad input to every command: exit status non-zero, exactly one line on stderr (no traceback), and the warehouse,
the job log and the Dagster home byte-for-byte as they were.

One prepared data folder (a real Iceberg table published through the shared Spark session, a real SQLite job log
with its attempt, a Dagster home, the sample data and the demo's broker folder) serves every case; each case runs
`sharp_dagster.cli.main.main(argv)` in this process and hashes every file of the folder before and after. A few
cases run as real subprocesses of the command line, to show what a user's terminal gets.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from datetime import datetime
from pathlib import Path

import pytest

from sharp_dagster.cli.main import main
from sharp_dagster.joblog.models import SUCCESS
from sharp_dagster.joblog.store import JobLog
from sharp_dagster.periods import PeriodSpec
from sharp_dagster.settings import WAREHOUSE_SQL_DIR
from sharp_dagster.spark.tables import TableRef
from sharp_dagster_tests.joblog.pgserver import free_port

ASSET = "ods/orders"
REF = TableRef("ods", "orders")


@pytest.fixture(scope="module")
def data_dir(spark, tmp_path_factory):
    """SHARP_DATA_DIR with a warehouse, a job log, a Dagster home, sample data and a broker folder in it."""
    from types import SimpleNamespace

    from sharp_dagster.spark.iceberg import warehouse_tables

    data = tmp_path_factory.mktemp("bad_input") / "data"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("SHARP_DATA_DIR", str(data))
        mp.setenv("DAGSTER_HOME", str(data / "dagster_home"))
        for var in ("SHARP_WAREHOUSE_DIR", "SHARP_LOG_DB_URL", "SHARP_WAREHOUSE_SQL_DIR", "SHARP_SAMPLE_DIR"):
            mp.delenv(var, raising=False)
        url = f"sqlite:///{data / 'sharp_log.db'}"
        tables = warehouse_tables(spark, SimpleNamespace(warehouse_dir=data / "warehouse", log_db_url=url))
        job_log = JobLog(url)
        handle = job_log.claim(
            ASSET, PeriodSpec("daily", datetime(2024, 1, 1)).period_for_key("2024-01-01"), "r1"
        )
        df = spark.createDataFrame(
            [(i, "a", "2024-01-01") for i in range(3)], "id BIGINT, v STRING, dt STRING"
        )
        tables.write_partition(REF, {"dt": "2024-01-01"}, df, token=str(handle.attempt))
        job_log.finish(handle, SUCCESS)
        for name, text in [
            ("dagster_home/dagster.yaml", "telemetry:\n  enabled: false\n"),
            ("sample/shop/manifest.json", '{"config": {}}\n'),
            ("kafka/meta.properties", "node.id=1\n"),
        ]:
            (data / name).parent.mkdir(parents=True, exist_ok=True)
            (data / name).write_text(text)
        yield data


def digest(folder: Path) -> dict[str, str]:
    """sha256 of every file under `folder`. SQLite's `-shm` is left out: it is the WAL's shared-memory index,
    which readers update, not data."""
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file() and not p.name.endswith("-shm")
    }


def bad_rules_dir(root: Path) -> Path:
    (root / "quality").mkdir(parents=True, exist_ok=True)
    (root / "quality" / "x.yaml").write_text("asset: dwd/a\nrules:\n  - {id: x, template: nope}\n")
    return root


RERUN = ["rerun", "--asset", ASSET, "--from"]
COLLECT = [
    "cdc",
    "collect",
    "--config",
    "x.yaml",
    "--bootstrap-servers",
    "127.0.0.1:1",
    "--state-file",
    "s.json",
]
SHOP_YAML = str(WAREHOUSE_SQL_DIR / "cdc" / "shop.yaml")
LAND = ["cdc", "land", "--config", "x.yaml", "--database", "shop", "--bootstrap-servers", "127.0.0.1:1"]
DOWN = f"postgresql+psycopg://etl:Pw0rdX@127.0.0.1:{free_port()}/log"

# (argv, environment overrides, words the one line must hold)
CASES = [
    (["demo", "--users", "-5"], {}, "argument --users"),
    (["demo", "--days", "100000000000"], {}, "argument --days"),
    (["demo", "--days", "0"], {}, "argument --days"),
    (["demo", "--start", "2026-02-30"], {}, "not a calendar day"),
    (["demo", "--start", "2025-01-01"], {}, "starts on 2024-01-01"),
    (["demo"], {"SHARP_LOG_DB_URL": "postgresql://u:p@ss@db/x"}, "percent-encode"),
    (["generate", "--users", "0"], {}, "argument --users"),
    (["generate", "--days", "1e11"], {}, "argument --days"),
    (["generate", "--days", "-5"], {}, "argument --days"),
    (["generate", "--seed", "x"], {}, "argument --seed"),
    (["log", "status", "--limit", "1e20"], {}, "argument --limit"),
    (["log", "status", "--limit", "100000000000000000000"], {}, "argument --limit"),
    (["log", "status", "--asset", "orders"], {}, "malformed"),
    (["log", "status"], {"SHARP_LOG_DB_URL": "postgresql://etl@db:notaport/x"}, "SHARP_LOG_DB_URL"),
    (["log", "status"], {"SHARP_LOG_DB_URL": "not a url"}, "SHARP_LOG_DB_URL"),
    (["log", "status"], {"SHARP_LOG_DB_URL": "postgresql+nodriver://u@db/x"}, "nodriver"),
    (["log", "status"], {"SHARP_LOG_DB_URL": "sqlite:///{data}/sharp_log.db?bogus=1"}, "bogus"),
    (["log", "status"], {"SHARP_LOG_DB_URL": DOWN + "?sslmode=nonsense"}, "sslmode"),
    (["log", "status"], {"SHARP_LOG_DB_URL": "sqlite:///{data}/no/such/folder/log.db"}, "does not exist"),
    (["log", "status"], {"SHARP_LOG_DB_URL": DOWN}, "cannot reach the job-log database"),
    (["log", "status"], {"SHARP_LOG_DB_URL": "sqlite:///{data}/sharp_log_typo.db"}, "no job-log database at"),
    (["log", "takeover", "x"], {"SHARP_LOG_DB_URL": "sqlite:///{data}/typo.db"}, "no job-log database at"),
    (
        ["dqc", "report", "--asset", "dwd/order_detail"],
        {"SHARP_LOG_DB_URL": "sqlite:///{data}/t.db"},
        "no job-log",
    ),
    (["log", "plan", "--asset", "nope/table"], {}, "unknown asset"),
    (["log", *RERUN, "2024-02-30", "--to", "2024-03-01"], {}, "not a date"),
    (["log", *RERUN, "2024-01-03", "--to", "2024-01-01"], {}, "empty range"),
    (
        ["log", "--db-url", "sqlite:///x.db", *RERUN, "2024-01-01", "--to", "2024-01-01"],
        {},
        "SHARP_LOG_DB_URL",
    ),
    (["log", "takeover", "no-such-job"], {}, "no job with job_id"),
    (["dqc", "report", "--asset", "dwd/order_detail"], {"SHARP_LOG_DB_URL": DOWN}, "Connection refused"),
    (
        ["dqc", "report", "--asset", "dwd/order_detail", "--png", "{data}/no/such/folder/c.png"],
        {},
        "does not exist",
    ),
    (["dqc", "report", "--asset", "dwd/order_detail", "--limit", "0"], {}, "argument --limit"),
    (["dqc", "report", "--asset", "order_detail"], {}, "malformed"),
    (["dqc", "rules"], {"SHARP_WAREHOUSE_SQL_DIR": "{rules}"}, "rule 'x'"),
    (["dqc", "rules", "--rules-dir", "{data}/no/such/folder"], {}, "no such folder"),
    (["lineage", "impact", "ods.orders.no_such_column"], {}, "unknown column 'no_such_column'"),
    (["lineage", "impact", "ods.nope.x"], {}, "unknown table"),
    (["lineage", "serve", "--port", "70000"], {}, "argument --port"),
    (["lineage", "graph", "ads.gmv_by_category", "--depth", "-1"], {}, "--depth"),
    (["table", "rollback", "orders", "--to", "1"], {}, "malformed"),
    (["table", "rollback", ASSET, "--to", "1e3"], {}, "argument --to"),
    (["table", "rollback", ASSET, "--to", "12345"], {}, "rollback of ods.orders refused"),
    (["table", "rollback", ASSET, "--to-day", "2024-01-01"], {}, "sharp-dagster ods migrate orders"),
    (["table", "rollback", "ods_state/orders", "--to-day", "2024-01-01"], {}, "roll back ods.orders"),
    (["table", "rollback", ASSET, "--to", "1", "--to-day", "2024-01-01"], {}, "not allowed with argument"),
    (["table", "history", "ods/no_such_table"], {}, "unknown table"),
    # issue 45: every range checked against the asset's grain and the calendar; local checks before connecting
    (
        [
            "log",
            "rerun",
            "--asset",
            "ads/gmv_by_category",
            "--from",
            "2024-01-01-05:00",
            "--to",
            "2024-01-01-06:00",
        ],
        {},
        "is an hourly partition key, but the asset is daily",
    ),
    (
        ["log", "rerun", "--asset", "ads/gmv_by_category", "--from", "0001-01-01", "--to", "9999-12-31"],
        {},
        "the calendar's last day",
    ),
    (
        ["log", "rerun", "--asset", ASSET, "--from", "2024-01-01T05:00", "--to", "2024-01-01"],
        {},
        "asset is daily",
    ),
    (
        [
            "cdc",
            "init",
            "--port",
            str(free_port()),
            "--database",
            "shop",
            "--output",
            "{data}/kafka/meta.properties",
        ],
        {},
        "meta.properties exists and is no source YAML",
    ),
    (["sql", "delete from ods.orders where true"], {}, "read-only"),
    (["sql", "call sharp.system.rollback_to_snapshot('ods.orders', 1)"], {}, "table rollback"),
    (["sql", "select 1", "--limit", "-1"], {}, "argument --limit"),
    ([*COLLECT, "--port", "0"], {}, "argument --port"),
    ([*COLLECT, "--flush-interval", "nan"], {}, "argument --flush-interval"),
    ([*COLLECT, "--flush-every", "0"], {}, "argument --flush-every"),
    ([*LAND, "--state-file", "{data}/no/such/folder/s.json"], {}, "does not exist"),
    (
        [
            *LAND,
            "--state-file",
            "{data}/s.json",
            "--config",
            SHOP_YAML,
            "--warehouse",
            "{data}/no_such_warehouse",
        ],
        {},
        "no such folder",
    ),
    (
        [*LAND, "--state-file", "{data}/s.json", "--config", "{data}/no_such.yaml"],
        {},
        "cannot read the CDC config",
    ),
]


@pytest.mark.parametrize(("argv", "env", "words"), CASES, ids=[" ".join(c[0])[:60] for c in CASES])
def test_bad_input_is_one_line_and_changes_nothing(data_dir, tmp_path, monkeypatch, capsys, argv, env, words):
    fill = {"data": str(data_dir), "rules": str(bad_rules_dir(tmp_path / "sql"))}
    for name, value in env.items():
        monkeypatch.setenv(name, value.format(**fill))
    before = digest(data_dir)
    code = main([a.format(**fill) for a in argv])
    out, err = capsys.readouterr()
    assert code != 0, out
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert words in lines[0], lines[0]
    assert "Traceback" not in err and "Pw0rdX" not in err
    assert digest(data_dir) == before


def test_debug_shows_the_traceback(data_dir, monkeypatch):
    monkeypatch.setenv("SHARP_LOG_DB_URL", "postgresql+nodriver://u@db/x")
    assert main(["log", "status"]) == 2
    from sharp_dagster.cli.main import CliError

    with pytest.raises(CliError, match="nodriver"):
        main(["--debug", "log", "status"])


def test_dqc_rules_lists_the_rules_the_code_location_loads(tmp_path, monkeypatch, capsys):
    """`dqc rules` reads quality/ of SHARP_WAREHOUSE_SQL_DIR, as `sharp_dagster.definitions` does."""
    rules = Path(__file__).parent / "dqc" / "rules" / "order_detail.yaml"
    (tmp_path / "quality").mkdir()
    (tmp_path / "quality" / "only_here.yaml").write_text(
        rules.read_text().replace("has_rows", "only_here_rows")
    )
    monkeypatch.setenv("SHARP_WAREHOUSE_SQL_DIR", str(tmp_path))
    assert main(["dqc", "rules"]) == 0
    assert "dwd/order_detail:only_here_rows" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (["demo", "--users", "-5"], "argument --users"),
        (["generate", "--days", "-5"], "argument --days"),
        (["log", "status", "--limit", "1e20"], "argument --limit"),
    ],
)
def test_the_terminal_gets_one_line(data_dir, argv, words):
    env = {**os.environ, "SHARP_DATA_DIR": str(data_dir), "DAGSTER_HOME": str(data_dir / "dagster_home")}
    before = digest(data_dir)
    proc = subprocess.run(
        [sys.executable, "-m", "sharp_dagster.cli", *argv],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2 and proc.stdout == ""
    assert len(proc.stderr.strip().splitlines()) == 1 and words in proc.stderr, proc.stderr
    assert digest(data_dir) == before


def test_lineage_parse_of_deep_nesting_is_one_line(monkeypatch, capsys):
    """5,000 nested parentheses: sqlglot's recursion limit, said in one line instead of a RecursionError."""
    import io

    monkeypatch.setattr(sys, "stdin", io.StringIO("SELECT " + "(" * 5000 + "1" + ")" * 5000))
    assert main(["lineage", "parse"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "nests too deeply" in err and "Traceback" not in err, err
