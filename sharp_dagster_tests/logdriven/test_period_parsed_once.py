"""A partition key on its way from the Dagster run to the Iceberg write is parsed once (issue 42): the run builds
its `Period` at the start (`publish/materialize.py`) and hands it to the upstream periods, the SQL rendering, the
run-time lineage check, the rules' context and the write.

Every reference any loaded `sharp_dagster` module holds to the key parsers of `periods.py` is replaced by a counting
wrapper, then the first partition of a SQL asset (no upstream, one rule, the project's resources) is materialized.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from dagster import DagsterInstance, materialize

from sharp_dagster import periods

DAY = "2024-01-02"
SQL = "SELECT 1 AS n, '${dt}' AS day, '${DATA_RANGE_START}' AS since"


def _count_calls(monkeypatch, parser) -> list[tuple]:
    """Replace `parser` wherever a loaded `sharp_dagster` module holds it; the calls it gets, in order."""
    calls: list[tuple] = []

    def counting(*args, **kwargs):
        calls.append(args)
        return parser(*args, **kwargs)

    for name, module in list(sys.modules.items()):
        if (name == "sharp_dagster" or name.startswith("sharp_dagster.")) and module is not None:
            for attr, value in list(vars(module).items()):
                if value is parser:
                    monkeypatch.setattr(module, attr, counting)
    return calls


def _asset():
    from sharp_dagster.assets.sql_assets import build_sql_asset
    from sharp_dagster.dqc.rule_validation import build_rule
    from sharp_dagster.joblog.planner import LogDrivenAsset
    from sharp_dagster.periods import PeriodSpec
    from sharp_dagster.warehouse.catalog import SqlTable

    table = SqlTable("dwd", "period_once", Path("dwd/period_once.sql"), SQL, "", start=DAY)
    table = SqlTable(**{**table.__dict__, "rendered": table.render(DAY)})
    rule = build_rule(
        {
            "id": "has_rows",
            "asset": table.asset_key_str,
            "template": "row_count",
            "comparator": ">=",
            "expect": 1,
        },
        {table.asset_key_str: {"n": "int", "day": "string", "since": "string", "dt": "string"}},
        None,
        source="test",
    )
    log_asset = LogDrivenAsset(table.asset_key_str, PeriodSpec("daily", periods.period_of_key(DAY).start))
    return build_sql_asset(table, [], [], {table.qualified: "daily"}, log_asset, rules=[rule])


def test_a_partition_key_is_parsed_once_from_the_run_to_the_write(tmp_path, spark, monkeypatch):
    from sharp_dagster.definitions import defs

    monkeypatch.setenv("SHARP_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.delenv("SHARP_LOG_DB_URL", raising=False)
    asset = _asset()
    parses = _count_calls(monkeypatch, periods.period_of_key)
    guesses = _count_calls(monkeypatch, periods.grain_of_key)
    with DagsterInstance.ephemeral() as instance:
        result = materialize([asset], partition_key=DAY, instance=instance, resources=defs.resources)
    assert result.success
    assert parses == [
        (DAY, "daily")
    ]  # once, by the run's start (`PeriodSpec.period_for_key`), with its grain
    assert guesses == []  # nobody read the grain off the key
    (check,) = [e for e in result.get_asset_check_evaluations() if e.check_name == "has_rows"]
    assert check.passed
    row = spark.sql(f"SELECT day, since FROM dwd.period_once WHERE dt = '{DAY}'").collect()
    assert [tuple(r) for r in row] == [(DAY, f"{DAY} 00:00:00")]


@pytest.mark.parametrize("parser", ["period_of_key", "grain_of_key"])
def test_the_counting_wrapper_sees_calls_through_module_references(monkeypatch, parser):
    from sharp_dagster.warehouse import variables

    calls = _count_calls(monkeypatch, getattr(periods, parser))
    getattr(periods, parser)("2024-01-02")
    if parser == "period_of_key":
        variables.window_variables(DAY, "daily")
    assert len(calls) == (2 if parser == "period_of_key" else 1)
