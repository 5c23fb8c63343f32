"""custom_sql rules are judged by Spark's own reading of them (`dqc/plan_guard.py`), not by another tokenizer.

Every text below is an adversarial rule an author could write. Each is refused by the plan guard, against the one
test Spark session, with the staged view and two warehouse tables in place; the reason is asserted. The texts that
the load-time sqlglot guard accepts (a weaker guard alone) are then RUN through `RuleRunner` from a rule file, and
the test shows nothing leaked: no environment value, no file content, no table changed. A property test composes
allowed and forbidden pieces and checks the guard never accepts one with a forbidden piece in code.
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

from sharp_dagster.dqc import plan_guard
from sharp_dagster.dqc.plan_guard import CONFINED_CONF, check_rendered, confined, judge
from sharp_dagster.dqc.rule_files import load_rules
from sharp_dagster.dqc.rules import RuleError
from sharp_dagster.dqc.runner import RuleRunner
from sharp_dagster.dqc.sqlguard import SqlRejected, check_custom_sql
from sharp_dagster_tests.dqc.confinement_support import (
    ENV,
    JVM,
    READS,
    STAGED,
    XML,
    hidden,
    hidden_statement,
    rule_file,
    tables_state,
)
from sharp_dagster_tests.dqc.conftest import ASSET, SCHEMAS, TABLES
from sharp_dagster_tests.dqc.witness import http_witness

SECRET_VIEW = "dqc_confinement_secret"
R = f"reflect('java.lang.System', 'getenv', '{ENV}')"
RD = f'reflect("java.lang.System", "getenv", "{ENV}")'  # double-quoted: a string to Spark, nothing to a '...'
NOT_ALLOWED = "not on the allow-list"
NOT_BUILTIN = "not one of Spark's builtin functions"
QUERY_ONLY = "must be exactly one query"
NEITHER = "which is neither ${table}, a CTE in scope"


ATTACKS = [
    # -- tokenizer differentials: text sqlglot takes for a comment or a string is code to Spark
    ("continuation_reflect", hidden(f"WHERE status <> {RD}"), JVM),
    ("continuation_select_env", hidden_statement(f"SELECT {RD}"), JVM),
    ("continuation_select_file", hidden_statement("SELECT max(value) FROM text.`{file}`"), NEITHER),
    ("continuation_java_method", hidden(f'WHERE java_method("java.lang.System", "getenv", "{ENV}") IS NULL'), JVM),
    ("continuation_text_file", hidden('UNION ALL SELECT count(value) FROM text.`{file}`'), NEITHER),
    ("continuation_read_files", hidden('UNION ALL SELECT count(1) FROM read_files("{file}")'), "table function read_files"),
    ("continuation_undeclared", hidden("UNION ALL SELECT count(1) FROM ods.orders"), NEITHER),
    ("continuation_temp_view", hidden(f"UNION ALL SELECT count(1) FROM {SECRET_VIEW}"), NEITHER),
    ("continuation_xml_url", hidden('WHERE from_xml("<a/>", "a INT", map("rowValidationXSDPath", "{url}")) IS NULL'), XML),
    ("continuation_from_xml", hidden('WHERE from_xml("<a/>", "a INT", map("rowValidationXSDPath", "{file}")) IS NULL'), XML),
    ("continuation_insert", hidden_statement("INSERT INTO dwd.user_dim SELECT 99, \"2024-01-01\" FROM ${table}"), QUERY_ONLY),
    ("continuation_drop", hidden_statement("DROP TABLE ods.orders"), QUERY_ONLY),
    ("continuation_ctas", hidden_statement("CREATE TABLE dwd.stolen AS SELECT * FROM ${table}"), QUERY_ONLY),
    ("continuation_set", hidden_statement("SET spark.sql.runSQLOnFiles=true"), QUERY_ONLY),
    ("cr_ends_comment", f"SELECT count(1) FROM ${{table}} --\rWHERE {R} IS NOT NULL", JVM),
    ("crlf_ends_comment", f"SELECT count(1) FROM ${{table}} --x\r\nWHERE {R} IS NULL", JVM),
    ("hint_parameter", f"SELECT /*+ REPARTITION({R}) */ count(1) FROM ${{table}}", JVM),
    ("hint_second_parameter", f"SELECT /*+ COALESCE(3), REPARTITION(3, {R}) */ count(1) FROM ${{table}}", JVM),
    ("nested_comment_in_hint", f"SELECT /*+ REPARTITION(1) /* x */ */ count(1) FROM ${{table}} WHERE {R} IS NULL", JVM),
    ("raw_string_backslash", f"SELECT count(1) FROM ${{table}} WHERE status = r'a\\' OR {RD} IS NOT NULL OR status = '\\''", JVM),
    ("escaped_backslash_ends_string", f"SELECT count(1) FROM ${{table}} WHERE status = 'a\\\\' OR {RD} IS NULL --'", JVM),
    ("backtick_holds_double_quote", f'SELECT count(1) FROM ${{table}} WHERE `a"` = "`" OR {R} IS NULL', JVM),
    ("dashes_in_backticks", f"SELECT count(1) FROM ${{table}} WHERE `--` = 1 OR {R} IS NULL", JVM),
    ("doubled_backtick", f"SELECT count(1) FROM ${{table}} WHERE `a``' ` IS NULL OR {R} IS NULL --'", JVM),
    ("comment_closes_once", f"SELECT count(1) FROM ${{table}} /* a /* b */ */ WHERE {R} IS NULL", JVM),
    # -- functions reaching the JVM, files, URLs, XML, user code
    ("reflect", f"SELECT count(1) FROM ${{table}} WHERE status = {R}", JVM),
    ("reflect_upper", "SELECT count(1) FROM ${table} WHERE status = REFLECT('java.lang.System', 'getenv', 'X')", JVM),
    ("reflect_backticked", "SELECT count(1) FROM ${table} WHERE status = `reflect`('java.lang.System', 'getenv', 'X')", JVM),
    ("java_method", "SELECT max(java_method('java.lang.System', 'getenv', 'HOME')) FROM ${table}", JVM),
    ("try_reflect", "SELECT count(1) FROM ${table} WHERE try_reflect('java.lang.System', 'getenv', 'X') IS NULL", JVM),
    ("reflect_qualified", "SELECT count(1) FROM ${table} WHERE system.builtin.reflect('a', 'b') IS NULL", NOT_BUILTIN),
    ("reflect_in_lambda", f"SELECT count(1) FROM ${{table}} WHERE exists(array(1), x -> {R} IS NULL)", JVM),
    ("reflect_in_filter", f"SELECT count(1) FILTER (WHERE {R} IS NULL) FROM ${{table}}", JVM),
    ("reflect_in_window", f"SELECT max(c) FROM (SELECT row_number() OVER (ORDER BY {R}) c FROM ${{table}})", JVM),
    ("reflect_in_group_by", f"SELECT count(1) FROM ${{table}} GROUP BY {R}", JVM),
    ("reflect_in_having", f"SELECT count(1) FROM ${{table}} GROUP BY status HAVING max({R}) IS NULL", JVM),
    ("reflect_in_values", f"SELECT count(1) FROM ${{table}} JOIN (VALUES ({R})) v(x) ON 1 = 1", JVM),
    ("reflect_in_lateral_view", f"SELECT count(1) FROM ${{table}} LATERAL VIEW explode(array({R})) e AS x", JVM),
    ("reflect_in_cte_subquery", f"WITH c AS (SELECT (SELECT {R}) AS v) SELECT count(1) FROM ${{table}}, c", JVM),
    ("reflect_in_order_by", f"SELECT count(1) FROM (SELECT status FROM ${{table}} ORDER BY {R} LIMIT 1)", JVM),
    ("from_xml_schema_url", "SELECT count(from_xml('<a/>', 'a INT', map('rowValidationXSDPath', 'http://127.0.0.1:9/x.xsd'))) FROM ${table}", XML),
    ("schema_of_xml_options", "SELECT count(1) FROM ${table} WHERE schema_of_xml('<a/>', map('rowValidationXSDPath', '/etc/passwd')) IS NULL", XML),
    ("to_xml", "SELECT count(to_xml(named_struct('a', 1))) FROM ${table}", "XML functions"),
    ("xpath", "SELECT count(xpath(status, '/a')) FROM ${table}", XML),
    ("xpath_string", "SELECT count(xpath_string(status, '/a')) FROM ${table}", XML),
    ("xpath_boolean", "SELECT count(1) FROM ${table} WHERE xpath_boolean('<a/>', 'a')", XML),
    ("xpath_int", "SELECT sum(xpath_int('<a>1</a>', 'a')) FROM ${table}", XML),
    ("from_avro", "SELECT count(from_avro(cast(status AS binary), '{\"type\": \"string\"}')) FROM ${table}", "descriptor file"),
    ("to_protobuf", "SELECT count(to_protobuf(named_struct('a', 1), 'M', '/tmp/x.desc')) FROM ${table}", "descriptor file"),
    ("read_files_tvf", "SELECT count(1) FROM ${table} JOIN read_files('/etc/passwd') f ON 1 = 1", "table function read_files"),
    ("input_file_name", "SELECT max(input_file_name()) FROM ${table}", "paths of the files"),
    ("input_file_block_start", "SELECT max(input_file_block_start()) FROM ${table}", "files read"),
    ("current_user", "SELECT count(1) FROM ${table} WHERE current_user() = 'root'", "session's user"),
    ("version", "SELECT count(1) FROM ${table} WHERE version() LIKE '4%'", "version"),
    ("aes_encrypt", "SELECT count(aes_encrypt(status, '0000111122223333')) FROM ${table}", "cryptography"),
    ("raise_error", "SELECT count(1) FROM ${table} WHERE raise_error('x') IS NULL", NOT_ALLOWED),
    ("assert_true", "SELECT count(1) FROM ${table} WHERE assert_true(1 = 1) IS NULL", "raises an error"),
    ("unknown_function", "SELECT count(1) FROM ${table} WHERE secret('scope', 'key') IS NULL", NOT_BUILTIN),
    ("session_udf", "SELECT count(1) FROM ${table} WHERE dqc_confinement_udf(status) IS NULL", NOT_BUILTIN),
    ("persistent_function", "SELECT count(1) FROM ${table} WHERE dwd.my_udf(status) IS NULL", NOT_BUILTIN),
    ("identifier_function", "SELECT count(1) FROM ${table} WHERE IDENTIFIER('reflect')('a', 'b') IS NULL", "IDENTIFIER"),
    ("sql_keywords_tvf", "SELECT count(1) FROM ${table} JOIN sql_keywords() k ON 1 = 1", "table function sql_keywords"),
    ("python_worker_logs", "SELECT count(1) FROM ${table}, python_worker_logs()", "table function python_worker_logs"),
    ("parameter_marker", "SELECT count(1) FROM ${table} WHERE status = :who", "parameter marker"),
    ("session_variable", "SELECT count(1) FROM ${table} WHERE status = system.session.dqc_confinement_v", "session variable"),
    # -- relations: paths, data sources, metadata tables, undeclared tables and views
    ("text_path", "SELECT count(1) FROM ${table} CROSS JOIN (SELECT * FROM text.`/etc/passwd`) p", NEITHER),
    ("csv_file_url", "SELECT count(1) FROM ${table} JOIN csv.`file:///etc/passwd` p ON 1 = 1", NEITHER),
    ("parquet_in_scalar", "SELECT (SELECT count(1) FROM parquet.`/tmp/x.parquet`) + count(1) FROM ${table}", NEITHER),
    ("json_in_in_list", "SELECT count(1) FROM ${table} WHERE status IN (SELECT value FROM json.`/root/.aws/creds`)", NEITHER),
    ("binaryfile_union", "SELECT count(1) FROM ${table} UNION ALL SELECT count(1) FROM binaryFile.`/etc`", NEITHER),
    ("bare_path", "SELECT count(1) FROM ${table} JOIN `/etc/passwd` ON 1 = 1", NEITHER),
    ("data_source_relative", "SELECT count(1) FROM ${table}, text.passwd", NEITHER),
    ("three_part", "SELECT count(1) FROM ${table} JOIN sharp.dwd.user_dim u ON 1 = 1", NEITHER),
    ("iceberg_snapshots", "SELECT count(1) FROM ${table} JOIN dwd.user_dim.snapshots s ON 1 = 1", NEITHER),
    ("iceberg_files", "SELECT count(1) FROM dwd.user_dim.files, ${table}", NEITHER),
    ("undeclared_table", "SELECT count(1) FROM ${table} t LEFT ANTI JOIN ods.orders o ON t.order_id = o.order_id", NEITHER),
    ("undeclared_in_exists", "SELECT count(1) FROM ${table} t WHERE EXISTS (SELECT 1 FROM ods.orders)", NEITHER),
    ("session_temp_view", f"SELECT count(1) FROM ${{table}} JOIN {SECRET_VIEW} s ON 1 = 1", NEITHER),
    ("global_temp_view", "SELECT count(1) FROM ${table} JOIN global_temp.anything g ON 1 = 1", NEITHER),
    ("stream_relation", "SELECT count(1) FROM STREAM dwd.user_dim", "stream"),
    ("relation_options", "SELECT count(1) FROM ${table} JOIN dwd.user_dim WITH ('snapshot-id' = '1') u ON 1 = 1", "options"),
    # Time travel is a read (an ODS table's day is its tag), of a declared table only; its timestamp is walked.
    ("time_travel_undeclared", "SELECT count(1) FROM ${table} JOIN ods.orders VERSION AS OF '2024-01-01' o ON 1 = 1", NEITHER),
    ("time_travel_of_a_cte", "WITH c AS (SELECT 1 x) SELECT count(1) FROM ${table} JOIN c VERSION AS OF 1 ON 1 = 1", NEITHER),
    ("time_travel_path", "SELECT count(1) FROM ${table} JOIN text.`/etc/passwd` VERSION AS OF 1 p ON 1 = 1", NEITHER),
    ("time_travel_reflect", f"SELECT count(1) FROM ${{table}} JOIN dwd.user_dim TIMESTAMP AS OF {R} u ON 1 = 1", JVM),
    ("identifier_relation", "SELECT count(1) FROM ${table} JOIN IDENTIFIER('text.`/etc/passwd`') ON 1 = 1", "IDENTIFIER"),
    # -- scoping of CTEs and subqueries
    ("cte_outside_its_scope", f"SELECT count(1) FROM ${{table}} JOIN (WITH {SECRET_VIEW} AS (SELECT 1 x) SELECT x FROM {SECRET_VIEW}) a ON 1 = 1 JOIN {SECRET_VIEW} b ON 1 = 1", NEITHER),
    ("cte_before_definition", f"WITH a AS (SELECT * FROM {SECRET_VIEW}), {SECRET_VIEW} AS (SELECT * FROM ${{table}}) SELECT count(1) FROM a", NEITHER),
    ("cte_reads_itself", f"WITH {SECRET_VIEW} AS (SELECT * FROM {SECRET_VIEW}) SELECT count(1) FROM ${{table}}, {SECRET_VIEW}", NEITHER),
    ("cte_of_a_subquery_used_in_in", "SELECT count(1) FROM ${table} WHERE 1 IN (WITH q AS (SELECT 1 x) SELECT x FROM q) AND 2 IN (SELECT 1 FROM q)", NEITHER),
    ("recursive_cte", "WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r WHERE n < 3) SELECT count(1) FROM r, ${table}", "RECURSIVE"),
    ("correlated_undeclared", "SELECT count(1) FROM ${table} t WHERE t.user_id NOT IN (SELECT user_id FROM ods.orders o WHERE o.order_id = t.order_id)", NEITHER),
    # -- statements and commands hidden in a rule
    ("insert", "INSERT INTO dwd.user_dim SELECT user_id, dt FROM ${table}", QUERY_ONLY),
    ("insert_overwrite_directory", "INSERT OVERWRITE DIRECTORY '/tmp/out' USING csv SELECT * FROM ${table}", QUERY_ONLY),
    ("drop_table", "DROP TABLE ods.orders", QUERY_ONLY),
    ("delete", "DELETE FROM dwd.user_dim WHERE true", QUERY_ONLY),
    ("ctas", "CREATE TABLE dwd.x AS SELECT * FROM ${table}", QUERY_ONLY),
    ("set_conf", "SET spark.sql.runSQLOnFiles = true", QUERY_ONLY),
    ("add_jar", "ADD JAR /tmp/evil.jar", QUERY_ONLY),
    ("call_procedure", "CALL sharp.system.rollback_to_snapshot('ods.orders', 1)", QUERY_ONLY),
    ("execute_immediate", "EXECUTE IMMEDIATE 'DROP TABLE ods.orders'", QUERY_ONLY),
    ("sql_script", "BEGIN SELECT count(1) FROM ${table}; DROP TABLE ods.orders; END", QUERY_ONLY),
    ("declare_variable", "DECLARE v = (SELECT count(1) FROM ${table})", QUERY_ONLY),
    ("cache_table", "CACHE TABLE c AS SELECT * FROM ${table}", QUERY_ONLY),
    ("create_function", "CREATE FUNCTION f AS 'com.x.F' USING JAR '/tmp/x.jar'", QUERY_ONLY),
    ("transform_using", "SELECT TRANSFORM(status) USING 'cat /etc/passwd' AS (x) FROM ${table}", "shell command"),
    ("two_statements", "SELECT count(1) FROM ${table}; DROP TABLE ods.orders", "does not parse"),
    ("explain", "EXPLAIN SELECT count(1) FROM ${table}", QUERY_ONLY),
]  # fmt: skip
# The attacks whose text the load-time sqlglot guard alone accepts: the run-time test runs these.
SQLGLOT_ACCEPTS = [a for a in ATTACKS if a[0].startswith("continuation_")]


def render(sql: str, arena: dict | None = None) -> str:
    """The SQL as the compiler renders it for the staged view (the canary file and server filled in)."""
    return render_file(sql.replace("${table}", f"`{STAGED}`").replace("${dt}", "'2024-01-01'"), arena)


@pytest.fixture(scope="module")
def arena(spark, orders_view, warehouse, tmp_path_factory):
    """The staged view, the warehouse tables, a secret temp view, a session UDF, a canary file and a loopback HTTP
    server that records every request (an XML schema URL must never be fetched)."""
    from pyspark.sql.functions import udf

    canary = tmp_path_factory.mktemp("canary") / "secret.txt"
    token = f"canary-{uuid.uuid4().hex}"
    canary.write_text(token + "\n")
    spark.createDataFrame([(token,)], "s string").createOrReplaceTempView(SECRET_VIEW)
    spark.udf.register("dqc_confinement_udf", udf(lambda s: s, "string"))
    spark.sql("DECLARE OR REPLACE VARIABLE dqc_confinement_v STRING DEFAULT 'paid'")
    with http_witness() as (base, hits):
        url = f"{base}/schema.xsd"
        yield {"canary": canary, "token": token, "env": os.environ[ENV], "url": url, "hits": hits}
    spark.catalog.dropTempView(SECRET_VIEW)


def test_there_are_enough_attacks_of_every_class():
    assert len(ATTACKS) >= 60 and len({a[0] for a in ATTACKS}) == len(ATTACKS)


@pytest.mark.parametrize(("sql", "reason"), [a[1:] for a in ATTACKS], ids=[a[0] for a in ATTACKS])
def test_spark_reading_refuses(spark, arena, sql, reason):
    with pytest.raises(SqlRejected) as info:
        judge(spark, render(sql, arena), STAGED, READS)
    assert reason in str(info.value), str(info.value)


@pytest.mark.parametrize(
    "name",
    ["reflect_in_values", "hint_parameter", "continuation_reflect", "text_path", "read_files_tvf", "drop_table",
     "reflect_upper", "persistent_function", "session_temp_view", "execute_immediate", "identifier_relation"],
)  # fmt: skip
def test_the_parsed_plan_is_refused_before_the_analyzer_sees_it(spark, arena, name):
    """The analyzer evaluates some things (inline tables) and resolves names (paths, functions): what the parsed
    plan already shows is refused before analysis."""
    sql = render(next(a[1] for a in ATTACKS if a[0] == name), arena)
    parsed = spark._jsparkSession.sessionState().sqlParser().parsePlan(sql)
    with pytest.raises(SqlRejected):
        plan_guard.rule_walker(spark._jvm, STAGED, READS).walk(parsed, analysed=False)


def test_legitimate_rules_are_accepted(spark, arena):
    for sql in [
        "SELECT count(1) FROM ${table}",
        "WITH missing AS (SELECT t.user_id FROM ${table} t LEFT ANTI JOIN (SELECT user_id FROM dwd.user_dim "
        "WHERE dt = ${dt}) u ON t.user_id = u.user_id) SELECT count(1) FROM missing m WHERE m.user_id IS NOT NULL",
        "WITH a AS (SELECT * FROM ${table}), b AS (SELECT * FROM a) SELECT count(1) FROM b JOIN a ON a.order_id = "
        "b.order_id WHERE a.status IN (SELECT status FROM a)",
        "SELECT count(DISTINCT status) + sum(amount) FILTER (WHERE amount > 0) + max(rn) FROM (SELECT *, "
        "row_number() OVER (PARTITION BY user_id ORDER BY updated_at) rn FROM ${table}) x",
        "SELECT size(filter(collect_list(upper(status)), s -> s LIKE 'P%')) + coalesce(sum(try_divide(amount, 0)),"
        " 0) + count(date_format(updated_at, 'yyyy')) + count(sha2(email, 256)) FROM ${table}",
        "SELECT count(1) FROM ${table} t JOIN range(3) r ON t.line_no = r.id LATERAL VIEW explode(array(1)) e AS "
        "x WHERE parse_url('http://a/b?c=1', 'QUERY', 'c') = '1' AND url_decode('%41') = 'A'",
        "SELECT count(1) FROM ${table} -- a comment with reflect('x') in it\nWHERE status <> 'reflect(1)'",
        "SELECT sum(cast(amount AS decimal(18, 2)) * 2) + count(CASE WHEN status LIKE 'p%' THEN 1 END) + "
        "count_if(updated_at > timestamp'2024-01-01' - INTERVAL 1 DAY) + count(email || status) FROM ${table} "
        "WHERE dt = ${dt} AND amount BETWEEN -10 AND 1e6 AND status IN ('paid', 'shipped', 'x')",
        "SELECT count(1) FROM (SELECT status, user_id, count(1) c FROM ${table} GROUP BY ROLLUP(status, user_id) "
        "ORDER BY c DESC NULLS LAST LIMIT 5)",
        "SELECT count(1) FROM ${table} t WHERE NOT EXISTS (SELECT 1 FROM dwd.user_dim u WHERE u.user_id = "
        "t.user_id) AND t.amount > (SELECT avg(amount) FROM ${table})",
        # A declared table at a version: how a day of an ODS table is read (its tag), here a snapshot id.
        f"SELECT count(1) FROM ${{table}} t LEFT ANTI JOIN dwd.user_dim VERSION AS OF {_user_dim_snapshot(spark)} u "
        "ON t.user_id = u.user_id",
        "SELECT count(1) FROM ${table} t JOIN dwd.user_dim TIMESTAMP AS OF current_timestamp() u ON 1 = 1",
    ]:
        judge(spark, render(sql), STAGED, READS)


def _user_dim_snapshot(spark) -> int:
    return spark.sql("SELECT snapshot_id FROM dwd.user_dim.snapshots ORDER BY committed_at").first()[0]


def test_the_refusal_names_the_rule_file_and_line(spark, arena, tmp_path, dqc_store):
    """Run from a rule file: the refused rule fails with `file:line` of the forbidden call (Spark's own position),
    and its query never runs."""
    sql = f"SELECT count(1) FROM ${{table}}\nWHERE status <> 'x' -- \\\nAND 'a' <> '\nAND status <> {RD} -- '"
    path = rule_file(tmp_path, [("r1", sql)])
    (rule,) = load_rules([path], SCHEMAS, TABLES)
    queries: list[str] = []
    (result,) = RuleRunner(spark, on_query=queries.append).run(ASSET, "2024-01-01", STAGED, [rule])
    assert not result.passed and "custom sql refused" in result.message and JVM in result.message
    line = next(
        n for n, text in enumerate(path.read_text().splitlines(), 1) if "AND status <> reflect" in text
    )
    assert f"{path}:{line}: rule 'r1'" in result.message, result.message
    assert queries == []


def test_what_sqlglot_alone_would_accept_runs_and_leaks_nothing(spark, arena, tmp_path, dqc_store, warehouse):
    """The rules the load-time guard accepts are run by the real runner: each fails as refused, and no secret,
    no file content and no table change comes out of it. Their text is not harmless: run by Spark as is, the first
    one returns the environment value and the file one returns the file's content."""
    rules = [(name, render_file(sql, arena)) for name, sql, _ in SQLGLOT_ACCEPTS]
    path = rule_file(tmp_path, rules)
    loaded = [r for r in load_rules([path], SCHEMAS, TABLES) if r.template == "custom_sql"]
    assert len(loaded) == len(SQLGLOT_ACCEPTS)  # sqlglot's reading accepted every one of them
    before = tables_state(spark)
    results = RuleRunner(spark, store=dqc_store).run(ASSET, "2024-01-01", STAGED, loaded)
    assert tables_state(spark) == before
    assert {r.rule_id for r in results} == {name for name, _ in rules}
    for result in results:
        assert not result.passed and "custom sql refused" in result.message, result.message
    dumped = json.dumps([dataclasses.asdict(r) for r in results], default=str)
    dumped += json.dumps([dataclasses.asdict(r) for r in dqc_store.recent(ASSET, 10)], default=str)
    assert arena["env"] not in dumped and arena["token"] not in dumped
    assert arena["hits"] == [], "the XML schema URL was never fetched"
    assert spark.conf.get("spark.sql.runSQLOnFiles") == "true" and spark.catalog.tableExists("ods.orders")
    # The control: Spark's reading of two of those texts does reach the environment and the file.
    control = {name: render(sql, arena) for name, sql, _ in SQLGLOT_ACCEPTS}
    assert spark.sql(control["continuation_select_env"]).collect()[0][0] == arena["env"]
    assert spark.sql(control["continuation_select_file"]).collect()[0][0] == arena["token"]


def test_confined_sets_and_restores_the_session(spark):
    spark.conf.set("spark.sql.variable.substitute", "true")
    with confined(spark):
        with confined(spark):  # nested (threads of one run): only the last to leave restores
            pass
        assert {k: spark.conf.get(k) for k in CONFINED_CONF} == CONFINED_CONF
    assert spark.conf.get("spark.sql.variable.substitute") == "true"
    assert spark.conf.get("spark.sql.runSQLOnFiles") == "true"


def test_verdicts_are_cached_per_rendered_sql(spark, arena):
    sql = render("SELECT count(1) FROM ${table} WHERE status = 'cached-" + uuid.uuid4().hex + "'")
    check_rendered(spark, sql, STAGED, READS)
    key = (str(spark._jsparkSession.sessionUUID()), sql.replace(f"`{STAGED}`", "${table}"), False, READS)
    assert plan_guard._verdicts[key] is None
    bad = render(f"SELECT count(1) FROM ${{table}} WHERE status = {R}")
    for _ in range(2):
        with pytest.raises(SqlRejected, match="reflect"):
            check_rendered(spark, bad, STAGED, READS)


@pytest.mark.parametrize(
    ("sql", "expected"),
    [
        ("SELECT 'abc FROM ${table}", "cannot be read: TokenError"),
        ("SELECT " + "(" * 3000 + "1" + ")" * 3000 + " FROM ${table}", "cannot be read: RecursionError"),
        ("WITH a AS (SELECT * FROM b), b AS (SELECT * FROM ${table}) SELECT count(1) FROM a", "reads b"),
        (
            "SELECT count(1) FROM ${table} WHERE 1 IN (WITH q AS (SELECT 1 x) SELECT x FROM q) AND 2 IN "
            "(SELECT 1 FROM q)",
            "reads q",
        ),  # fmt: skip
    ],
    ids=["token_error", "too_deep", "cte_before_definition", "cte_outside_scope"],
)
def test_load_gives_one_line_errors(tmp_path, sql, expected):
    path = rule_file(tmp_path, [("r1", sql)])
    with pytest.raises(RuleError) as info:
        load_rules([path], SCHEMAS, TABLES)
    message = str(info.value)
    assert (
        expected in message
        and "\n" not in message
        and re.match(rf"{re.escape(str(path))}:\d+: rule 'r1'", message)
    )


# ------------------------------------------------------------------------------------------------ property
ALLOWED_EXPR = ["amount + 1", "upper(status)", "coalesce(user_id, 0)", "length(email)", "abs(amount)", "1"]
FORBIDDEN_EXPR = [R, "java_method('java.lang.System', 'getenv', 'HOME')", "xpath_int('<a>1</a>', 'a')",
                  "input_file_name()", "dqc_confinement_udf(status)", "current_user()"]  # fmt: skip
ALLOWED_REL = ["${table}", "(SELECT * FROM ${table})", "dwd.user_dim", "range(2)"]
FORBIDDEN_REL = [
    "ods.orders",
    SECRET_VIEW,
    "text.`/etc/passwd`",
    "dwd.user_dim.snapshots",
    "read_files('/etc')",
]
# Where a piece goes inert: inside a string literal or a comment (both tokenizers agree on these).
INERT = ["'{}'", "/* {} */", "-- {}\n"]


@st.composite
def rule_texts(draw):
    forbidden = False

    def expr() -> str:
        nonlocal forbidden
        if draw(st.booleans()):
            return draw(st.sampled_from(ALLOWED_EXPR))
        piece = draw(st.sampled_from(FORBIDDEN_EXPR))
        wrap = draw(st.sampled_from(["{}", "{}", *INERT]))
        if wrap == "{}":
            forbidden = True
            return piece
        return wrap.format(piece.replace("'", "")).replace("''", "'x'") if wrap.startswith("'") else (
            wrap.format(piece) + " 1")  # fmt: skip

    def relation() -> str:
        nonlocal forbidden
        if draw(st.booleans()):
            return draw(st.sampled_from(ALLOWED_REL))
        forbidden = True
        return draw(st.sampled_from(FORBIDDEN_REL))

    sql = f"SELECT count({expr()}) FROM ${{table}} t JOIN {relation()} x ON 1 = 1 WHERE {expr()} IS NOT NULL"
    if draw(st.booleans()):
        sql = f"WITH c AS ({sql}) SELECT count(1) FROM c JOIN {relation()} y ON 1 = 1"
    if draw(st.booleans()):
        sql = f"SELECT ({sql}) + count({expr()}) FROM ${{table}}"
    return sql, forbidden


@settings(
    max_examples=60, deadline=None, database=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(rule_texts())
def test_property_no_forbidden_piece_is_accepted(spark, arena, case):
    sql, forbidden = case
    try:
        judge(spark, render(sql), STAGED, READS)
        accepted = True
    except SqlRejected:
        accepted = False
    if forbidden:
        assert not accepted, sql
    if accepted:  # independently of the guard's walk: Spark's own JSON of the analysed plan
        plan = spark._jsparkSession.sessionState().executePlan(
            spark._jsparkSession.sessionState().sqlParser().parsePlan(render(sql)),
            spark._jvm.org.apache.spark.sql.execution.CommandExecutionMode.SKIP(),
        )
        text = plan.analyzed().toJSON()
        for name in ("CallMethodViaReflection", "XPath", "InputFileName", "PythonUDF", "CurrentUser"):
            assert name not in text, sql
        assert (
            "ods.orders" not in plan.analyzed().treeString()
            and SECRET_VIEW not in plan.analyzed().treeString()
        )


# ------------------------------------------------------------------------------------------------ helpers
def render_file(sql: str, arena: dict | None) -> str:
    """`render` for a rule file: placeholders stay for the compiler, only the canary file and server are filled."""
    if arena is None:
        return sql
    return sql.replace("{file}", str(arena["canary"])).replace("{url}", arena["url"])


def test_check_custom_sql_is_what_load_uses():
    """The continuation attacks really pass the load-time guard (the reason they must be judged by Spark)."""
    for _, sql, _ in SQLGLOT_ACCEPTS:
        check_custom_sql(sql.replace("{file}", "/tmp/x").replace("{url}", "http://127.0.0.1:9/x"), READS)


def test_dqc_rules_spark_judges_custom_sql_against_the_warehouse(
    spark, arena, warehouse, _warehouse_dir, tmp_path, monkeypatch, capsys
):
    """`sharp-dagster dqc rules --spark`: the plan check on demand; a refused rule exits non-zero naming its
    file and line, an accepted one is listed as accepted."""
    import sharp_dagster.cli.main as top

    monkeypatch.setenv("SHARP_WAREHOUSE_DIR", str(_warehouse_dir / "warehouse"))
    monkeypatch.setenv("SHARP_LOG_DB_URL", f"sqlite:///{_warehouse_dir / 'sharp_log.db'}")
    good = "SELECT count(1) FROM ${table} WHERE user_id IS NULL"
    path = rule_file(
        tmp_path, [("fine", good), ("evil", hidden_statement(f"SELECT {RD}"))], asset="dwd/user_dim"
    )
    assert top.main(["dqc", "rules", "--rules-dir", str(tmp_path), "--spark"]) == 2
    out, err = capsys.readouterr()
    assert "spark check: dwd/user_dim:fine: accepted" in out
    line = next(n for n, text in enumerate(path.read_text().splitlines(), 1) if "SELECT reflect" in text)
    assert f"{path}:{line}: rule 'evil'" in err and JVM in err and arena["env"] not in out + err
    assert err.strip().splitlines()[-1].startswith("sharp-dagster: error: 1 custom_sql rule(s) refused")


def test_dqc_rules_gives_one_line_for_a_text_sqlglot_cannot_read(tmp_path, capsys):
    """A text that makes sqlglot raise something else than a parse error: one line naming file and line, exit 2."""
    import sharp_dagster.cli.main as top

    path = rule_file(tmp_path, [("r1", "SELECT count(1) FROM ${table}\nWHERE status = 'unterminated")])
    assert top.main(["dqc", "rules", "--rules-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert err.startswith(f"sharp-dagster: error: {path}:") and "cannot be read: TokenError" in err
