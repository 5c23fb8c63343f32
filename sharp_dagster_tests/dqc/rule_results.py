"""A rule's result as the data-quality tests build it (`_result`): the evaluation, the store and the report."""

from __future__ import annotations

from datetime import datetime

from sharp_dagster.dqc.evaluate import RuleResult


def _result(rule_id, severity, dimension, passed, downgraded=False, partition="2024-01-01"):
    return RuleResult(
        rule_id=rule_id, rule_version="v1", asset="dwd/order_detail", partition=partition, template="null_count",
        dimension=dimension, severity=severity, comparator="=", actual=1.0, expected=0.0, lower_bound=None,
        upper_bound=None, passed=passed, downgraded=downgraded, downgrade_reason="few points" if downgraded else None,
        message=f"{rule_id} {'PASS' if passed else 'FAIL'}", failing_keys=[{"order_id": 7}],
        evaluated_at=datetime(2024, 1, 2, 3, 4, 5), elapsed_ms=1.5, run_id="run-9",
    )  # fmt: skip
