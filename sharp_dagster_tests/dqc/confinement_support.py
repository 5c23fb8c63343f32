"""What the custom_sql confinement tests share: the staged view's name, the rule-file writer, the tables' state
before and after an attack, and the continuation trick that hides a statement from sqlglot but not from Spark."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

from sharp_dagster_tests.dqc.conftest import ASSET

STAGED = "dqc_test_orders"  # the `orders_view` fixture's temp view
READS = ("dwd.user_dim",)
# An environment variable the JVM surely has (the test conftest sets it before the session starts).
ENV = "SHARP_DATA_DIR"
# The refusal reasons the attacks are judged by.
JVM = "calls a Java method"
XML = "XML parser"
# `-- ...\` continues a line comment onto the next line in Spark's lexer, not in sqlglot's: the next line is a
# comment to Spark and code to sqlglot, which opens a string there that hides the line after it.
HIDE = "SELECT count(1) FROM ${table} -- \\\nWHERE 'a' <> '\n"
HIDE_ALL = "-- \\\nSELECT count(1) FROM ${table} WHERE 'a' <> '\n"


def hidden(payload: str) -> str:
    """A rule whose `payload` line sqlglot reads inside a string literal and Spark reads as code."""
    return HIDE + payload + " -- '"


def hidden_statement(statement: str) -> str:
    """The whole statement Spark runs is `statement`; sqlglot reads a SELECT over ${table} with it in a string."""
    return HIDE_ALL + statement + " -- '"


# (name, SQL with ${table}, what the refusal says). {file} is the canary file's path.


def rule_file(folder: Path, rules: list[tuple[str, str]], asset: str = ASSET) -> Path:
    """A rule file of custom_sql rules, each SQL a literal block (a double-quoted scalar when it holds a \\r)."""
    lines = [f"asset: {asset}", f"reads: {json.dumps(list(READS))}", "rules:"]
    for rid, sql in rules:
        lines += [f"  - id: {rid}", "    template: custom_sql", "    params:"]
        lines += ["      sql: |"] if "\r" not in sql else [f"      sql: {json.dumps(sql)}"]
        if "\r" not in sql:
            lines += [f"        {line}" for line in sql.splitlines()]
        lines += ['    comparator: "="', "    expect: 0"]
    path = folder / f"rules_{uuid.uuid4().hex[:6]}.yaml"
    path.write_text("\n".join(lines) + "\n")
    return path


def tables_state(spark) -> dict[str, object]:
    state: dict[str, object] = {}
    for db in ("dwd", "ods"):
        names = sorted(r.tableName for r in spark.sql(f"SHOW TABLES IN {db}").collect())
        state[db] = names
        for name in names:
            rows = sorted(map(str, spark.table(f"{db}.{name}").collect()))
            snapshots = [r[0] for r in spark.sql(f"SELECT snapshot_id FROM {db}.{name}.snapshots").collect()]
            state[f"{db}.{name}"] = (rows, sorted(snapshots))
    return state
