"""Every template on real Spark: actual values equal what plain Python computes from the same rows."""

from __future__ import annotations

import operator
import re
from datetime import datetime

import pytest

from sharp_dagster.dqc.runner import RuleRunner
from sharp_dagster.dqc.templates import TEMPLATES
from sharp_dagster_tests.dqc.conftest import ORDERS, PARTITION, USER_DIM, col, make_rule

OPS = {
    ">": operator.gt,
    ">=": operator.ge,
    "=": operator.eq,
    "!=": operator.ne,
    "<=": operator.le,
    "<": operator.lt,
}
ACCEPTED = ["paid", "shipped", "it's", "a\\b"]
EMAIL = r"^[a-z]+@[a-z]+\.com$"


def py_values() -> dict[str, float]:
    """Each metric computed in plain Python from ORDERS (the oracle)."""
    n = len(ORDERS)
    keys = [
        (o, ln)
        for o, ln in zip(col("order_id"), col("line_no"), strict=True)
        if o is not None and ln is not None
    ]
    amounts = [a for a in col("amount") if a is not None]
    emails = [e for e in col("email") if e is not None]
    stamps = [datetime.fromisoformat(t) for t in col("updated_at") if t is not None]
    window_end = datetime.fromisoformat(PARTITION).replace(day=2)
    return {
        "row_count": n,
        "null_count_user": sum(u is None for u in col("user_id")),
        "null_count_line": sum(x is None for x in col("line_no")),
        "null_rate_email": sum(e is None for e in col("email")) / n,
        "dup": len(keys) - len(set(keys)),
        "dup_order_only": sum(o is not None for o in col("order_id"))
        - len({o for o in col("order_id") if o is not None}),
        "range": sum(1 for a in amounts if a < 0 or a > 1000),
        "range_min_only": sum(1 for a in amounts if a < 0),
        "range_min_neg10": sum(1 for a in amounts if a < -10),
        "accepted": sum(1 for s in col("status") if s is not None and s not in ACCEPTED),
        "accepted_ok_int": sum(1 for x in col("line_no") if x is not None and x not in (1, 2)),
        "accepted_int": sum(1 for x in col("line_no") if x is not None and x not in (1,)),
        "regex": sum(1 for e in emails if re.search(EMAIL, e)) / len(emails),
        "fresh_hours": (window_end - max(stamps)).total_seconds() / 3600,
        "fresh_minutes": (window_end - max(stamps)).total_seconds() / 60,
        "sum": sum(amounts),
        "avg": sum(amounts) / len(amounts),
        "distinct_users": len({u for u in col("user_id") if u is not None}),
        "missing_users": sum(1 for u in col("user_id") if u is not None and u not in USER_DIM[PARTITION]),
        "missing_users_all": sum(
            1 for u in col("user_id") if u is not None and u not in {x for v in USER_DIM.values() for x in v}
        ),
        "negative": sum(1 for a in amounts if a < 0),
    }


# (rule id, template, params, comparator, expect, oracle key)
CASES = [
    ("rows_ok", "row_count", {}, ">", 0, "row_count"),
    ("rows_bad", "row_count", {}, ">=", 100, "row_count"),
    ("nulls_ok", "null_count", {"column": "line_no"}, "=", 0, "null_count_line"),
    ("nulls_bad", "null_count", {"column": "user_id"}, "=", 0, "null_count_user"),
    ("rate_ok", "null_rate", {"column": "email"}, "<=", 0.1, "null_rate_email"),
    ("rate_bad", "null_rate", {"column": "email"}, "<", 0.05, "null_rate_email"),
    ("dup_bad", "duplicate_count", {"key": ["order_id", "line_no"]}, "=", 0, "dup"),
    ("dup_ok", "duplicate_count", {"key": ["order_id", "line_no"]}, "<=", 2, "dup"),
    ("dup_single_bad", "duplicate_count", {"key": "order_id"}, "=", 0, "dup_order_only"),
    ("range_bad", "value_range", {"column": "amount", "min": 0, "max": 1000}, "=", 0, "range"),
    ("range_ok", "value_range", {"column": "amount", "min": -10}, "=", 0, "range_min_neg10"),
    ("range_min_bad", "value_range", {"column": "amount", "min": 0}, "=", 0, "range_min_only"),
    ("accepted_bad", "accepted_values", {"column": "status", "values": ACCEPTED}, "=", 0, "accepted"),
    ("accepted_ok", "accepted_values", {"column": "status", "values": ACCEPTED}, "<=", 2, "accepted"),
    ("acc_int_bad", "accepted_values", {"column": "line_no", "values": [1]}, "=", 0, "accepted_int"),
    ("acc_int_ok", "accepted_values", {"column": "line_no", "values": [1, 2]}, "=", 0, "accepted_ok_int"),
    ("regex_bad", "regex_match_rate", {"column": "email", "pattern": EMAIL}, ">=", 0.95, "regex"),
    ("regex_ok", "regex_match_rate", {"column": "email", "pattern": EMAIL}, "between", [0.5, 1], "regex"),
    ("fresh_ok", "freshness", {"column": "updated_at"}, "<=", 6, "fresh_hours"),
    ("fresh_bad", "freshness", {"column": "updated_at", "unit": "minutes"}, "<", 60, "fresh_minutes"),
    ("sum_ok", "column_sum", {"column": "amount"}, ">", 0, "sum"),
    ("sum_bad", "column_sum", {"column": "amount"}, "between", [0, 100], "sum"),
    ("avg_ok", "column_avg", {"column": "amount"}, ">", 1, "avg"),
    ("avg_bad", "column_avg", {"column": "amount"}, "<", 1, "avg"),
    ("distinct_ok", "distinct_count", {"columns": ["user_id"]}, ">=", 5, "distinct_users"),
    ("distinct_bad", "distinct_count", {"columns": ["user_id"]}, "=", 1, "distinct_users"),
    ("ref_bad", "referential", {"key": ["user_id"], "other": "dwd.user_dim"}, "=", 0, "missing_users"),
    (
        "ref_all_ok",
        "referential",
        {"key": ["user_id"], "other": "dwd.user_dim", "other_partition": "all"},
        "=",
        0,
        "missing_users_all",
    ),  # fmt: skip
    (
        "custom_bad",
        "custom_sql",
        {"sql": "SELECT count(1) FROM ${table} WHERE amount < 0 AND dt = '${dt}'"},
        "=",
        0,
        "negative",
    ),  # fmt: skip
    ("custom_ok", "custom_sql", {"sql": "SELECT count(1) FROM ${table} WHERE amount < -100"}, "=", 0, None),
]


def _expected_pass(actual: float, comparator: str, expect) -> bool:
    if comparator == "between":
        return expect[0] <= actual <= expect[1]
    return OPS[comparator](round(actual, 9), round(expect, 9))


@pytest.fixture(scope="module")
def template_results(spark, orders_view, warehouse):
    rules = [
        make_rule(id=rid, template=t, params=p, comparator=c, expect=e, severity="strong")
        for rid, t, p, c, e, _ in CASES
    ]
    queries: list[str] = []
    results = RuleRunner(spark, on_query=queries.append).run(
        "dwd/order_detail", PARTITION, orders_view, rules
    )
    return {r.rule_id: r for r in results}, queries


def test_every_scalar_template_is_covered_with_a_pass_and_a_fail_case():
    oracle = py_values()
    covered = {t for _, t, *_ in CASES}
    assert covered >= set(TEMPLATES) - {"reconciliation", "fluctuation"}  # those two have their own tests
    for template in covered:
        outcomes = {
            _expected_pass(oracle[k] if k else 0, c, e) for _, t, _, c, e, k in CASES if t == template
        }
        assert outcomes == {True, False}, template


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_template_actual_and_verdict(template_results, case):
    results, _ = template_results
    rid, template, _params, comparator, expect, key = case
    want = py_values()[key] if key else 0
    r = results[rid]
    assert r.actual == pytest.approx(want, rel=1e-9, abs=1e-9), r.message
    assert r.passed is _expected_pass(want, comparator, expect), r.message
    assert r.template == template and r.partition == PARTITION and not r.downgraded
    assert rid in r.message and ("PASS" if r.passed else "FAIL") in r.message
    if comparator == "between":
        assert (r.lower_bound, r.upper_bound) == (expect[0], expect[1]) and r.expected is None
    else:
        assert r.expected == expect and r.lower_bound is None


def test_one_scan_for_all_single_table_rules(template_results):
    results, queries = template_results
    scan_rules = [rid for rid, t, *_ in CASES if t not in ("referential", "custom_sql")]
    own = len(CASES) - len(scan_rules)
    # Samples run only for failed rules with a sample key: here the default keys of duplicate/referential.
    failed_with_samples = sum(
        1 for rid, t, *_ in CASES if t in ("duplicate_count", "referential") and not results[rid].passed
    )
    assert len(queries) == 1 + own + failed_with_samples
    scans = [q for q in queries if "r_rows_ok" in q]
    assert len(scans) == 1
    for rid in scan_rules:
        assert f"AS `r_{rid}`" in scans[0]


def test_accepted_values_compares_integer_columns_as_numbers():
    numeric = make_rule(id="a", template="accepted_values", params={"column": "line_no", "values": [1, "2"]},
                        comparator="=", expect=0)  # fmt: skip
    assert "`line_no` NOT IN (1, 2)" in numeric.sql.scan and "CAST" not in numeric.sql.scan
    text = make_rule(id="b", template="accepted_values", params={"column": "status", "values": [1]},
                     comparator="=", expect=0)  # fmt: skip
    assert "CAST(`status` AS STRING) NOT IN ('1')" in text.sql.scan


def test_string_literals_round_trip_through_spark(spark):
    from sharp_dagster.dqc.quoting import sql_string

    nasty = ["it's", "a\\b", "\\'; DROP TABLE x; --", "line\nbreak\ttab", "${spark.app.name}", "${env:HOME}",
             "\\u0041 stays text", 'double "quoted"', "naïve ✓", "", "trailing \\"]  # fmt: skip
    query = "SELECT " + ", ".join(f"{sql_string(v)} AS c{i}" for i, v in enumerate(nasty))
    assert list(spark.sql(query).first()) == nasty
