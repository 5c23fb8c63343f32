"""A custom_sql rule is judged once per run by its shape (`dqc/plan_shape.py`) where its run-time values only stand
in string literals of value operators, and per partition everywhere else; either way the verdict is the one Spark's
plan of each partition's own text gets (`plan_guard.judge`)."""

from __future__ import annotations

import uuid

import pytest

from sharp_dagster.dqc import plan_guard, plan_shape
from sharp_dagster.dqc.context import RuleContext
from sharp_dagster.dqc.plan_shape import MARKER, check_rule_query, shape_of
from sharp_dagster.dqc.quoting import fill, quote_table
from sharp_dagster.dqc.runner import RuleRunner
from sharp_dagster.dqc.sqlguard import SqlRejected
from sharp_dagster_tests.dqc.conftest import ASSET, ORDERS, PARTITION, make_rule

STAGED = "dqc_test_orders"  # the `orders_view` fixture's temp view
READS = ("dwd.user_dim",)
DAYS = ("2024-01-01", "2024-01-02", "2024-01-03")


def values(day: str) -> dict[str, str]:
    """The values the compiler fills a rule's SQL with for the partition `day`."""
    return {**RuleContext(partition_key=day).variables(), "table": quote_table(STAGED), "limit": "10"}


def fresh(text: str) -> str:
    """`text` made unique (no verdict of another test is cached for it)."""
    return f"{text} AND 'fresh-{uuid.uuid4().hex}' <> ''"


@pytest.fixture()
def judged(monkeypatch) -> list[str]:
    """Every text `plan_guard.judge` is asked to judge (the real judge still judges it)."""
    seen: list[str] = []
    real = plan_guard.judge

    def judge(spark, sql, staged, reads=()):
        seen.append(sql)
        return real(spark, sql, staged, reads)

    monkeypatch.setattr(plan_guard, "judge", judge)
    return seen


def check_days(spark, text: str) -> list[str | None]:
    """Each day's verdict on `text` through `check_rule_query`: None (accepted) or the refusal's message."""
    out: list[str | None] = []
    for day in DAYS:
        try:
            check_rule_query(spark, fill(text, values(day)), STAGED, READS, text, values(day))
            out.append(None)
        except SqlRejected as exc:
            out.append(str(exc))
    return out


ONCE = [
    "SELECT count(1) FROM ${table} WHERE dt = '${dt}'",
    "SELECT count(1) FROM ${table} WHERE dt IN ('${dt}', '${partition}') AND dt <=> '${dt}'",
    "SELECT count(1) FROM ${table} WHERE updated_at >= CAST('${_window_start}' AS TIMESTAMP)"
    " AND updated_at < to_timestamp('${_window_end}')",
    "SELECT count(1) FROM ${table} WHERE to_date(updated_at) BETWEEN date_sub(to_date('${dt}'), 7) AND '${dt}'",
    "SELECT (SELECT count(1) FROM dwd.user_dim u WHERE u.dt = concat('${dt}', '')) - count(1) FROM ${table} t"
    " WHERE datediff(to_date(t.updated_at), to_date('${dt} 00:00:00')) = 0",
]


@pytest.mark.parametrize("text", ONCE, ids=range(len(ONCE)))
def test_values_in_value_literals_are_judged_once_a_run(spark, orders_view, warehouse, judged, text):
    text = fresh(text)
    assert check_days(spark, text) == [None, None, None]
    assert len(judged) == 1 and MARKER in judged[0], judged


EACH_DAY = {
    "comment": "SELECT count(1) FROM ${table} -- ${dt}\nWHERE status IS NOT NULL",
    "typed literal": "SELECT count(1) FROM ${table} WHERE to_date(updated_at) = DATE '${dt}'",
    "code": "SELECT count(1) FROM ${table} WHERE amount > ${dt}",
    "unlisted function": "SELECT count(1) FROM ${table} WHERE concat_ws('${dt}', status) <> ''",
    "a literal elsewhere too": "SELECT count(1) FROM ${table} WHERE dt = '${dt}' OR '${dt}' IS NULL",
}


@pytest.mark.parametrize("text", EACH_DAY.values(), ids=EACH_DAY.keys())
def test_values_anywhere_else_are_judged_each_day(spark, orders_view, warehouse, judged, text):
    text = fresh(text)
    assert check_days(spark, text) == [None, None, None]
    assert judged == [fill(text, values(day)) for day in DAYS]


REFUSED = [
    "SELECT count(1) FROM ${table} WHERE dt = '${dt}' AND status = reflect('java.lang.System', 'getenv', 'HOME')",
    "SELECT count(1) FROM ${table} WHERE dt = '${dt}' AND user_id IN (SELECT user_id FROM ods.orders)",
    "SELECT count(1) FROM ${table} WHERE dt = '${dt}' AND status = input_file_name()",
]


@pytest.mark.parametrize("text", REFUSED, ids=range(len(REFUSED)))
def test_a_refusal_of_the_shape_is_the_refusal_of_each_day(spark, orders_view, warehouse, judged, text):
    text = fresh(text)
    verdicts = check_days(spark, text)
    assert len(judged) == 1
    for day, verdict in zip(DAYS, verdicts, strict=True):
        with pytest.raises(SqlRejected) as own:
            plan_guard.judge(spark, fill(text, values(day)), STAGED, READS)
        assert verdict is not None and verdict == str(own.value)


def test_a_shape_spark_cannot_analyse_leaves_each_day_to_its_own_text(spark, orders_view, judged):
    text = fresh("SELECT count(1) FROM ${table} WHERE no_such_column = '${dt}'")
    verdicts = check_days(spark, text)
    assert all(v is not None and "does not analyse" in v for v in verdicts)
    assert judged[0].count(MARKER) == 1 and judged[1:] == [fill(text, values(day)) for day in DAYS]


def test_the_shape_is_of_the_text_that_runs():
    text = "SELECT count(1) FROM ${table} WHERE dt = '${dt}' AND p = '${partition}' LIMIT ${limit}"
    day = values("2024-01-02")
    shape, markers = shape_of(text, day, fill(text, day))
    assert sorted(markers.values()) == ["2024-01-02", "2024-01-02"] and shape.count(MARKER) == 2
    assert shape.endswith("LIMIT 10") and f"FROM {quote_table(STAGED)}" in shape
    assert shape_of(text, day, fill(text, values("2024-01-03"))) is None, "not the text that runs"
    assert shape_of(text, {**day, "dt": "2024-01-02' OR '1"}, text) is None, (
        "a value that could end a literal"
    )
    forged = text.replace("${dt}", MARKER + "o0o")
    assert shape_of(forged, day, fill(forged, day)) is None, "a marker in the text"
    assert shape_of("SELECT count(1) FROM ${table}", day, f"SELECT count(1) FROM {day['table']}") is None
    assert plan_shape.SAFE_VALUE.fullmatch("2024-01-01 00:00:00") and not plan_shape.SAFE_VALUE.fullmatch(
        "a'b"
    )


def test_the_runner_judges_a_rule_once_for_many_partitions_and_fills_each_day(spark, orders_view, judged):
    """The staged rows are all of PARTITION: the day's own value reaches the query that runs."""
    rule = make_rule(id="rows_of_the_day", template="custom_sql", comparator=">=", expect=0,
                     params={"sql": fresh("SELECT count(1) FROM ${table} WHERE dt = '${dt}'")})  # fmt: skip
    runner = RuleRunner(spark)
    actual = {day: runner.run(ASSET, day, orders_view, [rule])[0].actual for day in (PARTITION, "2024-01-02")}
    assert actual == {PARTITION: len(ORDERS), "2024-01-02": 0}
    assert len(judged) == 1
