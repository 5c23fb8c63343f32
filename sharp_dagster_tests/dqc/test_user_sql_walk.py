"""Everything that runs user SQL goes through one plan walk (`dqc/plan_walk.py`): `sharp-dagster sql` and a
`custom_sql` rule refuse the same statements for the same reasons, wherever the forbidden call hides -- a WINDOW
definition, pipe syntax, a hint, a lambda body, a subquery, a LIMIT / OFFSET / frame / table-function argument the
analyzer evaluates -- and XML, reflection and file functions are refused in `sql` as in a rule.

Each statement below runs through the real `sharp-dagster sql` (`cli.main.main`, the warehouse's ods.orders) and,
hidden from the load-time sqlglot guard, as a rule of a rule file run by `RuleRunner` (the pipeline's checks step).
A loopback HTTP witness started here records any request (an XSD or DTD URL), a canary file and a symlink target
show that nothing is read or written, and the environment value never comes out.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import uuid

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sharp_dagster.cli.main import main
from sharp_dagster.cli.readonly_sql import AnyTable
from sharp_dagster.dqc import plan_walk as pw
from sharp_dagster.dqc.plan_guard import rule_walker
from sharp_dagster.dqc.rule_files import load_rules
from sharp_dagster.dqc.runner import RuleRunner
from sharp_dagster.dqc.sqlguard import SqlRejected
from sharp_dagster_tests.dqc.confinement_support import (
    ENV,
    JVM,
    STAGED,
    XML,
    hidden_statement,
    rule_file,
    tables_state,
)
from sharp_dagster_tests.dqc.conftest import ASSET, SCHEMAS, TABLES
from sharp_dagster_tests.dqc.witness import http_witness

GETENV = f"reflect('java.lang.System', 'getenv', '{ENV}')"
SYMLINK = "java_method('org.apache.hadoop.fs.FileUtil', 'symLink', '{file}', '{link}')"
DTD = "xpath_string('<!DOCTYPE a SYSTEM \"{url}/a.dtd\"><a>1</a>', 'a')"
XSD = "from_xml('<a>1</a>', 'a INT', map('rowValidationXSDPath', '{url}/evil.xsd'))"
FILES = "read"
RAISE = "not on the allow-list"

# (name, statement with {T} for the table, what the refusal says)
STATEMENTS = [
    # -- window definitions (a map of name -> spec, which Spark's `expressions()` skips)
    ("window_getenv", f"SELECT count(*) OVER w FROM {{T}} WINDOW w AS (PARTITION BY {GETENV})", JVM),
    ("window_raise_getenv", f"SELECT count(*) OVER w FROM {{T}} WINDOW w AS (PARTITION BY raise_error({GETENV}))", RAISE),
    ("window_symlink", f"SELECT count(*) OVER w FROM {{T}} WINDOW w AS (ORDER BY {SYMLINK})", JVM),
    ("window_dtd", f"SELECT count(*) OVER w FROM {{T}} WINDOW w AS (PARTITION BY {DTD})", XML),
    ("window_xsd", f"SELECT count(*) OVER w FROM {{T}} WINDOW w AS (PARTITION BY {XSD})", XML),
    ("window_second", f"SELECT count(*) OVER a, max(1) OVER b FROM {{T}} WINDOW a AS (), b AS (ORDER BY {GETENV})", JVM),
    ("window_in_subquery", f"SELECT count(*) FROM {{T}} WHERE EXISTS (SELECT count(*) OVER w FROM {{T}} WINDOW w AS (PARTITION BY {SYMLINK}))", JVM),
    ("tablesample_rows", f"SELECT count(*) FROM {{T}} TABLESAMPLE (length({DTD}) ROWS)", XML),
    ("pivot_value", f"SELECT * FROM {{T}} PIVOT (count(*) FOR order_id IN ({DTD}))", XML),
    # -- pipe syntax
    ("pipe_window", f"FROM {{T}} |> SELECT count(*) OVER w AS c WINDOW w AS (PARTITION BY {GETENV})", JVM),
    ("pipe_window_symlink", f"FROM {{T}} |> SELECT 1 AS x |> SELECT count(*) OVER w WINDOW w AS (ORDER BY {SYMLINK})", JVM),
    ("pipe_where", f"FROM {{T}} |> WHERE {GETENV} IS NULL", JVM),
    ("pipe_extend", f"FROM {{T}} |> EXTEND {SYMLINK} AS x", JVM),
    ("pipe_aggregate", f"FROM {{T}} |> AGGREGATE max({DTD})", XML),
    ("pipe_order_by", f"FROM {{T}} |> ORDER BY {XSD}", XML),
    ("pipe_limit", f"FROM {{T}} |> LIMIT length({DTD})", XML),
    # -- hints (parameters are evaluated by the analyzer or dropped with the hint)
    ("hint_repartition", f"SELECT /*+ REPARTITION({SYMLINK}) */ count(*) FROM {{T}}", JVM),
    ("hint_rebalance", f"SELECT /*+ REBALANCE({DTD}) */ count(*) FROM {{T}}", XML),
    ("hint_second", f"SELECT /*+ COALESCE(1), REPARTITION_BY_RANGE(3, {GETENV}) */ count(*) FROM {{T}}", JVM),
    ("hint_unknown", f"SELECT /*+ NO_SUCH_HINT({XSD}) */ count(*) FROM {{T}}", XML),
    # -- lambda bodies
    ("lambda_transform", f"SELECT count(transform(array(1), x -> {GETENV})) FROM {{T}}", JVM),
    ("lambda_aggregate", f"SELECT aggregate(array(1), 0, (a, x) -> a + length({DTD})) FROM {{T}}", XML),
    ("lambda_filter", f"SELECT count(filter(array('a'), s -> {SYMLINK} IS NULL)) FROM {{T}}", JVM),
    ("lambda_map_filter", f"SELECT count(map_filter(map(1, 2), (k, v) -> {XSD} IS NULL)) FROM {{T}}", XML),
    # -- subquery expressions
    ("scalar_subquery", f"SELECT (SELECT max({GETENV})) + count(*) FROM {{T}}", JVM),
    ("in_subquery", f"SELECT count(*) FROM {{T}} WHERE 1 IN (SELECT length({SYMLINK}))", JVM),
    ("lateral_subquery", f"SELECT count(*) FROM {{T}}, LATERAL (SELECT {DTD} AS x)", XML),
    ("cte_window", f"WITH c AS (SELECT count(*) OVER w AS n FROM {{T}} WINDOW w AS (PARTITION BY {GETENV})) SELECT count(*) FROM c", JVM),
    # -- what the analyzer evaluates while it resolves the statement
    ("limit_dtd", f"SELECT count(*) FROM (SELECT * FROM {{T}} LIMIT length({DTD}))", XML),
    ("offset_dtd", f"SELECT count(*) FROM (SELECT * FROM {{T}} LIMIT 1 OFFSET length({DTD}))", XML),
    ("range_argument", f"SELECT count(*) FROM {{T}}, range(length({DTD}))", XML),
    ("from_xml_schema_of_xml", "SELECT count(from_xml('<a/>', schema_of_xml('<!DOCTYPE a SYSTEM \"{url}/s.dtd\"><a>1</a>'))) FROM {T}", XML),
    # -- XML functions (URLs and files through the XML parser)
    ("from_xml_xsd_url", f"SELECT count({XSD}) FROM {{T}}", XML),
    ("from_xml_xsd_file", "SELECT count(from_xml('<a>1</a>', 'a INT', map('rowValidationXSDPath', '{file}'))) FROM {T}", XML),
    ("schema_of_xml_dtd", "SELECT count(schema_of_xml('<!DOCTYPE a SYSTEM \"{url}/d.dtd\"><a>1</a>')) FROM {T}", XML),
    ("xpath_string_dtd", f"SELECT count({DTD}) FROM {{T}}", XML),
    ("xpath_int", "SELECT sum(xpath_int('<!DOCTYPE a SYSTEM \"{url}/i.dtd\"><a>1</a>', 'a')) FROM {T}", XML),
    ("xpath_list", "SELECT count(xpath('<a><b>1</b></a>', 'a/b')) FROM {T}", XML),
    ("xpath_boolean", "SELECT count(*) FROM {T} WHERE xpath_boolean('<a/>', 'a')", XML),
    ("xpath_double", "SELECT sum(xpath_double('<a>1</a>', 'a')) FROM {T}", XML),
    ("to_xml", "SELECT count(to_xml(named_struct('a', 1))) FROM {T}", "XML functions"),
    # -- reflection
    ("java_method_symlink", f"SELECT count({SYMLINK}) FROM {{T}}", JVM),
    ("reflect_getenv", f"SELECT max({GETENV}) FROM {{T}}", JVM),
    ("try_reflect", f"SELECT count(try_reflect('java.lang.System', 'getenv', '{ENV}')) FROM {{T}}", JVM),
    ("reflect_group_by", f"SELECT count(*) FROM {{T}} GROUP BY {GETENV}", JVM),
    ("reflect_filter_clause", f"SELECT count(*) FILTER (WHERE {GETENV} IS NULL) FROM {{T}}", JVM),
    ("reflect_within_group", f"SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY length({GETENV})) FROM {{T}}", JVM),
    ("reflect_order_by", f"SELECT count(*) FROM (SELECT * FROM {{T}} ORDER BY {SYMLINK} LIMIT 1)", JVM),
    # -- files
    ("read_files", "SELECT count(*) FROM {T}, read_files('{file}')", "table function read_files"),
    ("input_file_name", "SELECT max(input_file_name()) FROM {T}", "paths of the files"),
]  # fmt: skip


@pytest.fixture(scope="module")
def witness(spark, orders_view, warehouse, _warehouse_dir, tmp_path_factory):
    """A loopback HTTP server recording every request, a canary file, where a symlink would appear, and the
    `sql` command's settings pointing at the DQC warehouse (ods.orders, dwd.user_dim)."""

    folder = tmp_path_factory.mktemp("witness")
    canary = folder / "secret.txt"
    token = f"canary-{uuid.uuid4().hex}"
    canary.write_text(token + "\n")
    with http_witness() as (base, hits), pytest.MonkeyPatch.context() as mp:
        mp.setenv("SHARP_WAREHOUSE_DIR", str(_warehouse_dir / "warehouse"))
        mp.setenv("SHARP_LOG_DB_URL", f"sqlite:///{_warehouse_dir / 'sharp_log.db'}")
        fill = {"url": base, "file": str(canary), "link": str(folder / "link")}
        yield {"hits": hits, "fill": fill, "token": token, "env": os.environ[ENV], "link": folder / "link"}


def statement(text: str, table: str, fill: dict[str, str]) -> str:
    out = text.replace("{T}", table)
    for key, value in fill.items():
        out = out.replace("{" + key + "}", value)
    return out


def double_quoted(text: str) -> str:
    """The statement with its '...' literals written "..." (Spark reads both as strings): no `'` may end the
    literal sqlglot sees around a hidden statement."""
    return re.sub(r"'([^']*)'", lambda m: '"' + m.group(1).replace('"', '\\"') + '"', text)


def test_there_are_enough_statements():
    assert len(STATEMENTS) >= 40 and len({s[0] for s in STATEMENTS}) == len(STATEMENTS)


def test_sql_refuses_each_with_its_reason(witness, warehouse, capsys):
    """Through the real command: exit 2, one line saying why, nothing printed, written, fetched or revealed."""
    before = tables_state(warehouse.spark)
    wrong = []
    for name, text, reason in STATEMENTS:
        code = main(["sql", statement(text, "ods.orders", witness["fill"])])
        out, err = capsys.readouterr()
        ok = code == 2 and out == "" and len(err.strip().splitlines()) == 1 and "read-only" in err
        if not (ok and reason in err) or witness["env"] in err or witness["token"] in err:
            wrong.append((name, code, out[:200], err[:300]))
    assert wrong == [], "\n".join(map(str, wrong))
    assert witness["hits"] == [] and not witness["link"].is_symlink()
    assert tables_state(warehouse.spark) == before


def test_sql_still_answers_the_same_shapes_with_allowed_calls(witness, capsys):
    """The containers themselves are fine: a named window, pipe syntax, a hint, a lambda, a lateral subquery."""
    for text, expected in {
        "SELECT count(*) OVER w AS n FROM ods.orders WINDOW w AS (PARTITION BY upper(dt)) LIMIT 1": "11",
        "FROM ods.orders |> WHERE dt = '2024-01-01' |> EXTEND order_id + 1 AS x |> AGGREGATE max(x) AS m": "12",
        "SELECT /*+ REPARTITION(2) */ count(*) AS n FROM ods.orders": "14",
        "SELECT size(filter(collect_list(dt), d -> d LIKE '2024%')) AS n FROM ods.orders": "14",
        "SELECT count(*) AS n FROM ods.orders, LATERAL (SELECT upper(dt) AS u) WHERE u > ''": "14",
    }.items():
        code = main(["sql", text])
        out, err = capsys.readouterr()
        assert code == 0 and expected in out, (text, out, err)


def test_a_rule_refuses_each_with_its_reason(spark, witness, warehouse, tmp_path, dqc_store):
    """The same statements as custom_sql rules hidden from sqlglot (a `--` comment continued by a backslash), run
    by the runner from a rule file: each fails as refused with the same reason, and nothing leaks."""
    rules = [
        (name, hidden_statement(double_quoted(statement(text, "${table}", witness["fill"]))))
        for name, text, _ in STATEMENTS
    ]
    loaded = load_rules([rule_file(tmp_path, rules)], SCHEMAS, TABLES)
    assert len(loaded) == len(STATEMENTS)  # the load-time guard sees none of it
    before = tables_state(spark)
    results = RuleRunner(spark, store=dqc_store).run(ASSET, "2024-01-01", STAGED, loaded)
    reasons = {name: reason for name, _, reason in STATEMENTS}
    wrong = [
        (r.rule_id, r.message)
        for r in results
        if r.passed or "custom sql refused" not in r.message or reasons[r.rule_id] not in r.message
    ]
    assert wrong == [] and len(results) == len(STATEMENTS)
    dumped = json.dumps([dataclasses.asdict(r) for r in results], default=str)
    assert witness["env"] not in dumped and witness["token"] not in dumped
    assert witness["hits"] == [] and not witness["link"].is_symlink()
    assert tables_state(spark) == before


def test_the_parsed_walk_alone_refuses_them(spark, witness):
    """Before the analyzer sees a statement (it evaluates LIMIT, frames, table-function and schema arguments),
    the parsed plan's walk has refused it, in both walkers."""
    parser = spark._jsparkSession.sessionState().sqlParser()
    passed = []
    for name, text, _ in STATEMENTS:
        for walker, table in (
            (rule_walker(spark._jvm, STAGED, ()), STAGED),
            (pw.Walker(spark._jvm, AnyTable()), "t"),
        ):
            try:
                walker.walk(parser.parsePlan(statement(text, table, witness["fill"])), analysed=False)
                passed.append((name, walker.subject))
            except SqlRejected:
                pass
    assert passed == []


# ------------------------------------------------------------------------------------------------ property
# Containers a call can hide in (Spark's grammar pieces), and what goes in them.
CONTAINERS = [
    "SELECT count(*) OVER w FROM {T} WINDOW w AS (PARTITION BY {E})",
    "FROM {T} |> SELECT count(*) OVER w AS c WINDOW w AS (ORDER BY {E})",
    "FROM {T} |> WHERE ({E}) IS NOT NULL",
    "FROM {T} |> EXTEND {E} AS x",
    "SELECT /*+ REPARTITION(({E})) */ count(*) FROM {T}",
    "SELECT count(transform(array(1), x -> {E})) FROM {T}",
    "SELECT count(*) FROM {T} WHERE EXISTS (SELECT {E})",
    "SELECT count(*) FROM {T}, LATERAL (SELECT {E} AS y)",
    "SELECT count(*) FROM {T} GROUP BY {E}",
    "WITH c AS (SELECT {E} AS v FROM {T}) SELECT count(*) FROM c",
]
ALLOWED = ["1", "upper('a')", "length('abc') + 1", "coalesce(NULL, 2)", "abs(-3)"]
FORBIDDEN = [GETENV, "java_method('java.lang.Math', 'abs', -1)", "xpath_int('<a>1</a>', 'a')",
             "schema_of_xml('<a>1</a>')", "input_file_name()", "current_user()"]  # fmt: skip


@st.composite
def texts(draw):
    container = draw(st.sampled_from(CONTAINERS))
    bad = draw(st.booleans())
    expr = draw(st.sampled_from(FORBIDDEN if bad else ALLOWED))
    if draw(st.booleans()):  # nested once more
        expr = draw(st.sampled_from(CONTAINERS[5:6])).replace("{T}", "(SELECT 1)").replace("{E}", expr)
        expr = f"({expr})"
    return container.replace("{E}", expr), bad


@settings(
    max_examples=40, deadline=None, database=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(texts())
def test_property_the_command_and_the_rule_walk_agree(spark, witness, case):
    """A statement from the grammar's pieces: `sql`'s walk and a rule's walk refuse it exactly when it holds a
    forbidden call, and both say so already on the parsed plan."""
    text, bad = case
    verdicts = []
    parser = spark._jsparkSession.sessionState().sqlParser()
    for walker, table in (
        (rule_walker(spark._jvm, STAGED, ()), STAGED),
        (pw.Walker(spark._jvm, AnyTable()), STAGED),
    ):
        try:
            walker.walk(parser.parsePlan(text.replace("{T}", table)), analysed=False)
            verdicts.append(False)
        except SqlRejected:
            verdicts.append(True)
    assert verdicts == [bad, bad], text
