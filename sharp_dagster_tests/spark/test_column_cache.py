"""The memoized Column builders (sharp_dagster.spark.column_cache): built once per argument set and JVM gateway.

Plain builders returning Python objects stand in for Column builders: the cache does not look at what it holds.
"""

from __future__ import annotations

import pytest
from pyspark import SparkContext

from sharp_dagster.cdc.merge.plan import MergePlan
from sharp_dagster.spark.column_cache import columns_per_jvm


def _counting_builder():
    calls: list[tuple] = []

    @columns_per_jvm
    def build(*args):
        calls.append(args)
        return [object()]

    return build, calls


def test_same_arguments_build_once_and_share_the_result():
    build, calls = _counting_builder()
    first = build("orders", ("id",))
    assert build("orders", ("id",)) is first
    assert build("orders", ("id", "source_table")) is not first
    assert calls == [("orders", ("id",)), ("orders", ("id", "source_table"))]


def test_a_new_gateway_builds_again(monkeypatch):
    build, calls = _counting_builder()
    monkeypatch.setattr(SparkContext, "_gateway", object())
    first = build("orders")
    monkeypatch.setattr(SparkContext, "_gateway", object())
    assert build("orders") is not first
    assert len(calls) == 2


def test_keyword_arguments_are_refused():
    build, _ = _counting_builder()
    with pytest.raises(TypeError, match="by position"):
        build(table="orders")


def test_plans_that_decide_the_same_columns_are_one_cache_key():
    def plan(truncates, defaults=None):
        return MergePlan([("id", "bigint"), ("status", "string")], defaults or {}, ["id"], None, truncates)

    assert plan({"t_1": 5, None: 7}) == plan({None: 7, "t_1": 5})
    assert hash(plan({"t_1": 5, None: 7})) == hash(plan({None: 7, "t_1": 5}))
    assert plan({}) != plan({None: 7})
    assert plan({}) != plan({}, {"status": "'new'"})
