"""custom_sql rules read only the staged rows and declared tables; JVM and file access is refused at load.

Every attack below is a rule file an adversarial author could write; each must fail in `load_rules` with the
rule file, its line and the rule id in the error, and never reach Spark. Legitimate rules keep loading.
"""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import pytest

from sharp_dagster.dqc.compiler import compile_rules
from sharp_dagster.dqc.rule_files import load_rules
from sharp_dagster.dqc.rules import RuleError
from sharp_dagster_tests.dqc.conftest import ASSET, SCHEMAS, TABLES, make_rule


def rule_file(tmp_path: Path, sql: str, reads=None, file_reads=None, name: str = "attack.yaml") -> Path:
    """A rule file with one custom_sql rule `r1`, its SQL as a literal block so that lines are exact."""
    head = [f"asset: {ASSET}"]
    if file_reads is not None:
        head.append(f"reads: {json.dumps(file_reads)}")
    body = ["rules:", "  - id: keep_ok", "    template: row_count", '    comparator: ">"', "    expect: 0"]
    body += ["  - id: r1", "    template: custom_sql"]
    if reads is not None:
        body.append(f"    reads: {json.dumps(reads)}")  # JSON is YAML flow style
    body += ["    params:", "      sql: |"]
    body += [f"        {line}" for line in sql.strip().splitlines()]
    body += ['    comparator: "="', "    expect: 0"]
    path = tmp_path / name
    path.write_text("\n".join(head + body) + "\n")
    return path


def line_of(path: Path, needle: str) -> int:
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if needle.lower() in line.lower():
            return number
    raise AssertionError(f"{needle!r} not in {path}")


ATTACKS = [
    # (name, SQL, what the error says, the text on the reported line)
    ("reflect_getenv",
     "SELECT count(1) FROM ${table}\nWHERE status = reflect('java.lang.System', 'getenv', 'SHARP_CDC_MYSQL_PASSWORD')",
     "may not call reflect()", "reflect("),
    ("java_method", "SELECT max(java_method('java.lang.System', 'getenv', 'HOME')) FROM ${table}",
     "may not call java_method()", "java_method("),
    ("try_reflect", "SELECT count(1) FROM ${table}\nWHERE TRY_REFLECT('java.lang.System', 'getenv', 'X') IS NULL",
     "may not call try_reflect()", "TRY_REFLECT("),
    ("text_path", "SELECT count(1) FROM ${table}\nCROSS JOIN (SELECT * FROM text.`/etc/passwd`) p",
     "path-based relation text.`/etc/passwd`", "text.`/etc/passwd`"),
    ("csv_path", "SELECT count(1) FROM ${table} JOIN csv.`file:///etc/passwd` p ON 1 = 1",
     "path-based relation csv.`file:///etc/passwd`", "csv.`"),
    ("parquet_path", "SELECT (SELECT count(1) FROM parquet.`/tmp/x.parquet`) + count(1) FROM ${table}",
     "path-based relation parquet.`/tmp/x.parquet`", "parquet.`"),
    ("json_path", "SELECT count(1) FROM ${table}\nWHERE status IN (SELECT value FROM json.`/root/.aws/creds`)",
     "path-based relation json.`/root/.aws/creds`", "json.`"),
    ("binaryfile_path", "SELECT count(1) FROM ${table} UNION ALL SELECT count(1) FROM binaryFile.`/etc`",
     "path-based relation binaryFile.`/etc`", "binaryFile.`"),
    ("data_source_relative_path", "SELECT count(1) FROM ${table}, text.passwd",
     "'text' is a Spark data source", "text.passwd"),
    ("quoted_path_alone", "SELECT count(1) FROM ${table} JOIN `/etc/passwd` ON 1 = 1",
     "path-based relation `/etc/passwd`", "`/etc/passwd`"),
    ("read_files", "SELECT count(1) FROM ${table}\nJOIN read_files('/etc/passwd') f ON 1 = 1",
     "may not call read_files()", "read_files("),
    ("identifier_clause", "SELECT count(1) FROM ${table} JOIN IDENTIFIER('text.`/etc/passwd`') ON 1 = 1",
     "may not call identifier()", "IDENTIFIER("),
    ("script_transform", "SELECT TRANSFORM(status) USING 'cat /etc/passwd' AS (x) FROM ${table}",
     "TRANSFORM ... USING", "USING"),
    ("xpath_entities", "SELECT count(xpath_string(status, '/a')) FROM ${table}",
     "may not call xpath_string()", "xpath_string("),
    ("undeclared_table", "SELECT count(1) FROM ${table} t\nLEFT ANTI JOIN dwd.user_dim u ON t.user_id = u.user_id",
     "reads dwd.user_dim, which is neither", "dwd.user_dim"),
    ("undeclared_in_cte", "WITH x AS (SELECT * FROM ods.orders)\nSELECT count(1) FROM ${table} JOIN x ON 1 = 1",
     "reads ods.orders", "ods.orders"),
    ("three_part_name", "SELECT count(1) FROM ${table} JOIN spark_catalog.dwd.user_dim u ON 1 = 1",
     "reads spark_catalog.dwd.user_dim", "spark_catalog"),
    ("other_table_function", "SELECT count(1) FROM ${table} JOIN sql_keywords() k ON 1 = 1",
     "table function sql_keywords()", "sql_keywords("),
    ("two_statements", "SELECT count(1) FROM ${table};\nSELECT reflect('a', 'b')", "exactly one SELECT", None),
    ("not_a_select", "INSERT INTO dwd.user_dim SELECT * FROM ${table}", "exactly one SELECT", None),
    ("probe_name", "SELECT count(1) FROM ${table} JOIN __dqc_staged_rows__ ON 1 = 1",
     "may not name __dqc_staged_rows__", None),
    ("staged_only_in_a_string", "SELECT count(1) FROM dwd.user_dim WHERE 'x' = '${table}'",
     "through ${table}", None),
]  # fmt: skip


@pytest.mark.parametrize(("sql", "expected", "needle"), [a[1:] for a in ATTACKS], ids=[a[0] for a in ATTACKS])
def test_attacks_are_refused_at_load_with_file_line_and_rule(tmp_path, sql, expected, needle):
    path = rule_file(tmp_path, sql, reads=["dwd.order_detail"])
    with pytest.raises(RuleError) as info:
        load_rules([path], SCHEMAS, TABLES)
    message = str(info.value)
    assert expected in message, message
    assert "rule 'r1' (asset dwd/order_detail)" in message
    match = re.match(rf"^{re.escape(str(path))}:(\d+): rule 'r1'", message)
    assert match, message
    line = int(match.group(1))
    if needle is not None:
        assert line == line_of(path, needle), message
    else:
        assert line_of(path, "- id: r1") <= line <= len(path.read_text().splitlines())


def test_declared_tables_may_be_read(tmp_path):
    sql = """
    WITH missing AS (
      SELECT t.user_id FROM ${table} t
      LEFT ANTI JOIN (SELECT user_id FROM dwd.user_dim WHERE dt = '${dt}') u ON t.user_id = u.user_id
    )
    SELECT count(1) FROM missing m JOIN (SELECT explode(array(1)) AS one) e ON 1 = 1
    WHERE m.user_id IN (SELECT order_id FROM ods.orders) OR m.user_id IS NULL
    """
    path = rule_file(tmp_path, sql, reads=["dwd.user_dim", "ods.orders"])
    (keep, rule) = load_rules([path], SCHEMAS, TABLES)
    assert keep.id == "keep_ok" and rule.reads == ("dwd.user_dim", "ods.orders")
    # File-wide `reads:` is inherited like `asset:`.
    path = rule_file(tmp_path, sql, file_reads=["dwd.user_dim", "ods.orders"], name="file_wide.yaml")
    assert load_rules([path], SCHEMAS, TABLES)[1].reads == ("dwd.user_dim", "ods.orders")
    # Row generators, set operations and subqueries over the staged rows are fine.
    path = rule_file(
        tmp_path,
        "SELECT count(1) FROM (SELECT id FROM range(3) UNION ALL SELECT line_no FROM ${table}) x",
        name="generators.yaml",
    )
    assert load_rules([path], SCHEMAS, TABLES)[1].reads == ()


def test_the_project_rule_files_load():
    project = Path(__file__).resolve().parents[2] / "sharp_dagster" / "warehouse" / "quality"
    rules = load_rules(project, None)
    custom = {r.id: r.reads for r in rules if r.template == "custom_sql"}
    assert custom["gmv_matches_detail"] == ("dwd.order_detail",)


@pytest.mark.parametrize(
    ("reads", "expected"),
    [
        (["text.passwd"], "'text' is a Spark data source"),
        (["parquet.x"], "'parquet' is a Spark data source"),
        (["dwd.nope"], "'reads' names unknown table 'dwd.nope'"),
        (["a.b.c"], "must be table names db.table"),
        (["dwd.`x`"], "plain identifiers"),
        ("dwd", "must be table names db.table"),
        ({"t": 1}, "must be a list"),
    ],
)
def test_bad_reads_declarations(tmp_path, reads, expected):
    path = rule_file(tmp_path, "SELECT count(1) FROM ${table}", reads=reads)
    with pytest.raises(RuleError, match="rule 'r1'") as info:
        load_rules([path], SCHEMAS, TABLES)
    assert expected in str(info.value)


def test_other_table_params_cannot_name_a_data_source(tmp_path):
    with pytest.raises(RuleError, match="'text' is a Spark data source"):
        make_rule(id="ref", template="referential", params={"key": ["user_id"], "other": "text.passwd"},
                  comparator="=", expect=0)  # fmt: skip


def test_the_compiler_checks_again():
    """A Rule changed after loading (or built around load_rules) still cannot reach Spark."""
    rule = make_rule(id="c", template="custom_sql", params={"sql": "SELECT count(1) FROM ${table}"},
                     comparator="=", expect=0)  # fmt: skip
    ok = compile_rules([rule], "staged_view", {"partition_key": "2024-01-01"})
    assert ok.rules[0].query == "SELECT count(1) FROM `staged_view`" and ok.rules[0].error is None

    evil = dataclasses.replace(
        rule,
        params={"sql": "SELECT count(1) FROM ${table} WHERE reflect('java.lang.System', 'getenv', 'X') > ''"},
    )
    evil = dataclasses.replace(evil, sql=dataclasses.replace(rule.sql, query=evil.params["sql"]))
    plan = compile_rules([evil], "staged_view", {"partition_key": "2024-01-01"})
    (compiled,) = plan.rules
    assert compiled.query is None and plan.queries == []
    assert "custom sql refused" in compiled.error and "reflect()" in compiled.error
