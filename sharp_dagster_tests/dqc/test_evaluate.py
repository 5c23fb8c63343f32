"""Verdict rules without Spark: comparators, reconciliation edge cases, fluctuation bounds, score, alerts."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest

from sharp_dagster.dqc.context import RuleContext
from sharp_dagster.dqc.evaluate import compare, judge, quality_score
from sharp_dagster.dqc.runner import alert_failures, blocking_failures
from sharp_dagster_tests.dqc.conftest import make_rule
from sharp_dagster_tests.dqc.rule_results import _result


@pytest.mark.parametrize(
    "actual, comparator, expect, ok",
    [
        (1, ">", 0, True), (0, ">", 0, False),
        (0, ">=", 0, True), (-1, ">=", 0, False),
        (0.1 + 0.2, "=", 0.3, True), (1, "=", 2, False),
        (1, "!=", 2, True), (0.1 + 0.2, "!=", 0.3, False),
        (0, "<=", 0, True), (1, "<=", 0, False),
        (-1, "<", 0, True), (0, "<", 0, False),
        (1, "between", (1, 2), True), (2, "between", (1, 2), True), (2.5, "between", (1, 2), False),
        (None, "=", 0, False), (float("nan"), "<=", 1, False),
    ],
)  # fmt: skip
def test_compare(actual, comparator, expect, ok):
    assert compare(actual, comparator, expect) is ok


def _recon(**params):
    return make_rule(id="rc", template="reconciliation", params=params)


def test_reconciliation_edge_cases():
    missing = judge(_recon(against="target_count"), 10, RuleContext())
    assert not missing.passed and "the job log's target_count is unknown" in missing.message
    zero_ok = judge(_recon(against="source_count", tolerance_type="percent"), 0, RuleContext(source_count=0))
    assert zero_ok.passed and zero_ok.actual == 0.0
    zero_bad = judge(_recon(against="source_count", tolerance_type="percent", tolerance=50), 3,
                     RuleContext(source_count=0))  # fmt: skip
    assert not zero_bad.passed and zero_bad.actual is None and "undefined" in zero_bad.message


def test_fluctuation_bounds_with_negative_mean_and_null_actual():
    rule = make_rule(id="f", template="fluctuation",
                     params={"base": "column_sum", "column": "amount", "window": 2, "min_history": 2})  # fmt: skip
    v = judge(rule, -100, RuleContext(), history=[5.0, -100.0, -120.0])  # window 2: mean -110
    assert (v.lower_bound, v.upper_bound) == pytest.approx((-132.0, -88.0)) and v.passed and not v.downgraded
    null = judge(rule, None, RuleContext(), history=[1.0, 2.0])
    assert not null.passed and "could not be measured" in null.message


def test_a_non_numeric_measure_fails_with_a_message():
    rule = make_rule(id="c", template="custom_sql", params={"sql": "SELECT max(status) FROM ${table}"},
                     comparator="=", expect=0)  # fmt: skip
    v = judge(rule, "paid", RuleContext())
    assert not v.passed and "not a number" in v.message


RESULTS = [
    _result("a", "strong", "completeness", True),
    _result("b", "strong", "completeness", False),
    _result("c", "weak", "validity", False),
    _result("d", "weak", "validity", True),
    _result("e", "strong", "uniqueness", True),
    _result("f", "weak", "consistency", False, downgraded=True),
]


def test_quality_score_weights_strong_twice():
    weight = {"strong": 2, "weak": 1}

    def rate(rs):
        return round(sum(weight[r.severity] for r in rs if r.passed) / sum(weight[r.severity] for r in rs), 4)

    score = quality_score(RESULTS)
    assert score["overall"] == rate(RESULTS)
    for dim in {r.dimension for r in RESULTS}:
        assert score["by_dimension"][dim] == rate([r for r in RESULTS if r.dimension == dim])
    assert (score["passed"], score["failed"], score["warnings"], score["total"]) == (3, 2, 1, 6)
    assert quality_score([])["overall"] is None


def test_only_failed_strong_rules_block():
    assert [r.rule_id for r in blocking_failures(RESULTS)] == ["b"]


class _Webhook(BaseHTTPRequestHandler):
    received: list[dict] = []

    def do_POST(self):  # noqa: N802 - http.server API
        body = self.rfile.read(int(self.headers["Content-Length"]))
        type(self).received.append(json.loads(body))
        self.send_response(204)
        self.end_headers()

    def log_message(self, *args):
        pass


def test_alert_failures_through_the_real_sink_deduplicated_per_rule_and_partition(db_url, monkeypatch):
    from sharp_dagster.alerts import AlertSink
    from sharp_dagster.db import make_engine

    server = HTTPServer(("127.0.0.1", 0), _Webhook)
    _Webhook.received = []
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        monkeypatch.setenv("SHARP_ALERT_WEBHOOK_URL", f"http://127.0.0.1:{server.server_port}/hook")
        sink = AlertSink.from_env(engine=make_engine(db_url))
        failed = [r for r in RESULTS if not r.passed]
        assert alert_failures(RESULTS, sink) == len(failed)
        assert alert_failures(RESULTS, sink) == 0  # same partition again: de-duplicated
        assert (
            alert_failures([_result("b", "strong", "completeness", False, partition="2024-01-02")], sink) == 1
        )
    finally:
        server.shutdown()
        server.server_close()
    got = {p["dedup_key"]: p for p in _Webhook.received}
    assert sorted(got) == sorted(
        [f"dqc:dwd/order_detail:{r.rule_id}:2024-01-01" for r in failed]
        + ["dqc:dwd/order_detail:b:2024-01-02"]
    )
    assert got["dqc:dwd/order_detail:b:2024-01-01"]["kind"] == "dqc_failure"
    assert got["dqc:dwd/order_detail:f:2024-01-01"]["kind"] == "dqc_warning"
    assert got["dqc:dwd/order_detail:c:2024-01-01"]["details"]["failing_keys"] == [{"order_id": 7}]
