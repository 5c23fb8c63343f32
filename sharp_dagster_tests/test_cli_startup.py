"""The command line starts fast because it imports no engine it does not use (no timing: imports are counted).

Each check runs in a fresh interpreter (a subprocess), since this test process has long imported everything. The
time these imports cost is measured by `bench/bench_cli.py`; what is guarded here is the cause: building the
parser imports no engine at all, and `lineage parse` / `log status` import neither Spark nor Dagster.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

# Engines a command may need, none of which building the parser (every call, every `--help`) may import.
ENGINES = [
    "pyspark",
    "py4j",
    "dagster",
    "pandas",
    "numpy",
    "pyarrow",
    "matplotlib",
    "sqlalchemy",
    "alembic",
    "confluent_kafka",
    "pymysqlreplication",
    "sqlglot",
    "yaml",
]
# What no quick command (parse, status, rules) may import: the orchestrator and the Spark client.
ORCHESTRATION = ["pyspark", "py4j", "dagster", "pandas", "matplotlib", "confluent_kafka"]

_RUN = textwrap.dedent(
    """
    import contextlib, io, json, sys
    argv, stdin, watched = json.loads(sys.argv[1])
    sys.stdin = io.StringIO(stdin)
    out = io.StringIO()
    from sharp_dagster.cli.main import build_parser, main
    with contextlib.redirect_stdout(out):
        try:
            code = main(argv) if argv is not None else (build_parser(), 0)[1]
        except SystemExit as exc:  # --help exits 0
            code = exc.code
    loaded = sorted({m.split(".")[0] for m in sys.modules} & set(watched))
    print(json.dumps({"code": code, "stdout": out.getvalue(), "loaded": loaded}))
    """
)


def run_fresh(argv: list[str] | None, watched: list[str], stdin: str = "", env: dict | None = None) -> dict:
    """Run `sharp_dagster.cli.main(argv)` (or only build the parser when argv is None) in a new interpreter and
    return its exit code, its stdout and which of `watched` top-level packages it imported."""
    proc = subprocess.run(
        [sys.executable, "-c", _RUN, json.dumps([argv, stdin, watched])],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.splitlines()[-1])


def _subcommand_paths() -> list[list[str]]:
    """Every command path of the CLI (`lineage`, `lineage parse`, ...), read from the parser itself so that a new
    sub-command is covered without editing this test."""
    import argparse

    from sharp_dagster.cli.main import build_parser

    paths: list[list[str]] = []

    def walk(parser: argparse.ArgumentParser, prefix: list[str]) -> None:
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, child in action.choices.items():
                    paths.append([*prefix, name])
                    walk(child, [*prefix, name])

    walk(build_parser(), [])
    return paths


def test_building_the_parser_imports_no_engine():
    res = run_fresh(None, ENGINES)
    assert res["code"] == 0
    assert res["loaded"] == [], f"building the CLI's parser imported {res['loaded']}"


def test_every_help_page_imports_no_engine():
    paths = _subcommand_paths()
    assert ["lineage", "parse"] in paths and ["log", "status"] in paths and ["cdc", "collect"] in paths
    for path in [[], *paths]:
        res = run_fresh([*path, "--help"], ENGINES)
        assert res["code"] == 0, path
        assert "usage: sharp-dagster" in res["stdout"], path
        command = " ".join(["sharp-dagster", *path, "--help"])
        assert res["loaded"] == [], f"`{command}` imported {res['loaded']}"


def test_lineage_parse_of_one_statement_imports_only_sqlglot():
    res = run_fresh(["lineage", "parse"], ENGINES, stdin="insert into a select * from b\n")
    assert res["code"] == 0
    out = json.loads(res["stdout"])
    assert (out["sources"], out["targets"]) == (["b"], ["a"])
    assert out["columns"] == [{"target": "a.*", "sources": ["b.*"]}]
    assert res["loaded"] == ["sqlglot"], f"`lineage parse` imported {res['loaded']}"


def test_log_status_on_an_empty_job_log_imports_no_spark_or_dagster(tmp_path):
    env = {
        **os.environ,
        "SHARP_DATA_DIR": str(tmp_path),
        "SHARP_LOG_DB_URL": f"sqlite:///{tmp_path / 'log.db'}",
    }
    from sharp_dagster.joblog.store import JobLog

    JobLog(env["SHARP_LOG_DB_URL"])  # created and migrated: the command reads a job log, it makes none
    res = run_fresh(["log", "status"], ORCHESTRATION + ["sqlalchemy"], env=env)
    assert res["code"] == 0
    assert res["stdout"] == "no runs in the job log\n"
    assert res["loaded"] == ["sqlalchemy"], f"`log status` imported {res['loaded']}"


def test_dqc_rules_imports_no_spark_or_dagster():
    res = run_fresh(["dqc", "rules"], ORCHESTRATION + ["sqlalchemy"])
    assert res["code"] == 0
    assert "SELECT" in res["stdout"]
    assert res["loaded"] == [], f"`dqc rules` imported {res['loaded']}"


@pytest.mark.parametrize("package", ["sharp_dagster.joblog", "sharp_dagster.lineage"])
def test_lazy_package_exports_resolve(package):
    """The packages re-export their names lazily: every name in __all__ still resolves, others fail clearly."""
    import importlib

    module = importlib.import_module(package)
    assert sorted(module.__all__) == sorted(module._EXPORTS)
    for name in module.__all__:
        assert getattr(module, name) is not None
    with pytest.raises(AttributeError, match="no_such_name"):
        module.no_such_name  # noqa: B018


def test_cdc_help_names_the_config_password_variable():
    """cli/cdc.py repeats the password variable's name so that its --help imports no config module."""
    from sharp_dagster.cdc.source import config
    from sharp_dagster.cli import cdc as cdc_cli

    assert cdc_cli.PASSWORD_ENV == config.PASSWORD_ENV
