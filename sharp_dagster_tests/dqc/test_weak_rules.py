"""A weak rule never blocks: a rule that cannot run fails alone, with Spark's own cause, and the strong rules of its
scan are judged on their values; a pattern Java's regex refuses is refused at load, where there is no JVM."""

from __future__ import annotations

import re
import time

import pytest

from sharp_dagster.dqc.errors import ParamError
from sharp_dagster.dqc.java_regex import java_regex_problem
from sharp_dagster.dqc.rules import RuleError
from sharp_dagster.dqc.runner import RuleRunner, blocking_failures
from sharp_dagster_tests.dqc.conftest import ASSET, PARTITION, make_rule

PATTERNS = [
    "^[a-z]+@[a-z.]+$", "^[A-Z]{2}\\d{4}$", "x{2,}", "\\p{Alpha}+", "\\x{263A}", "(?<n1>a)\\k<n1>", "\\Q{\\E",
    "(?i)abc", "[]a]", "a|b", "(?:ab)+", "\\S+@\\S+", "\\$\\{", "[\\[]", "\\00",
    # Python accepts these, Java refuses them
    "(?P<c>[a-z]+)", "(?P<a>x)(?P=a)", "${x}", "a{,3}", "{x}", "(?#note)a", "(?(1)a|b)", "(?<my_name>a)",
    "\\U0001F600", "\\0", "[[]", "(?a)x",
]  # fmt: skip


def _java_compiles(spark, pattern: str) -> bool:
    try:
        spark._jvm.java.util.regex.Pattern.compile(pattern)
        return True
    except Exception:  # noqa: BLE001 - PatternSyntaxException through py4j
        return False


def test_the_load_check_agrees_with_javas_compiler(spark):
    for pattern in PATTERNS:
        try:
            re.compile(pattern)
        except re.error:
            continue
        assert (java_regex_problem(pattern) is None) == _java_compiles(spark, pattern), pattern


@pytest.mark.parametrize("pattern", ["(?P<c>[a-z]+)", "^${a}$", "a{,3}"])
def test_a_pattern_java_refuses_is_refused_at_load_in_one_line(pattern):
    with pytest.raises((RuleError, ParamError)) as info:
        make_rule(id="rx", template="regex_match_rate", params={"column": "email", "pattern": pattern},
                  comparator=">=", expect=0.9, severity="weak")  # fmt: skip
    message = str(info.value)
    assert "not a valid Java regex" in message and "\n" not in message, message


def test_a_weak_rule_that_cannot_run_blocks_nothing(spark, orders_view, monkeypatch):
    """A weak rule whose pattern slipped past the load check (the check stood down here) shares the scan with two
    strong rules: the scan fails, the strong rules are judged on their own values and pass, the weak one fails
    with Java's cause, and nothing blocks the publish."""
    monkeypatch.setattr("sharp_dagster.dqc.params.java_regex_problem", lambda pattern: None, raising=False)
    rules = [
        make_rule(id="rows", template="row_count", comparator=">", expect=0, severity="strong"),
        make_rule(id="lines", template="null_count", params={"column": "line_no"}, comparator="=", expect=0,
                  severity="strong"),
        make_rule(id="mail", template="regex_match_rate", params={"column": "email", "pattern": "(?P<c>[a-z]+)"},
                  comparator=">=", expect=0.5, severity="weak"),
    ]  # fmt: skip
    results = {r.rule_id: r for r in RuleRunner(spark).run(ASSET, PARTITION, orders_view, rules)}
    assert results["rows"].passed and results["lines"].passed
    assert not results["mail"].passed and "PatternSyntaxException" in results["mail"].message
    assert "collectToPython" not in results["mail"].message
    assert blocking_failures(results.values()) == []


def test_a_strong_rule_that_cannot_run_still_blocks_with_its_cause(spark):
    df = spark.createDataFrame([(1,)], "order_id bigint")  # schema drift: user_id is gone
    rules = [
        make_rule(id="rows", template="row_count", comparator=">", expect=0, severity="strong"),
        make_rule(id="nul", template="null_count", params={"column": "user_id"}, comparator="=", expect=0,
                  severity="strong"),
    ]  # fmt: skip
    t0 = time.perf_counter()
    results = {r.rule_id: r for r in RuleRunner(spark).run(ASSET, PARTITION, df, rules)}
    assert results["rows"].passed and not results["nul"].passed and time.perf_counter() - t0 < 60
    assert "user_id" in results["nul"].message and "the scan failed" in results["nul"].message
    assert [r.rule_id for r in blocking_failures(results.values())] == ["nul"]
