"""dqc_result on SQLite through the real Alembic chain: round trip, latest-per-partition history, recent."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta

import sqlalchemy as sa

from sharp_dagster.dqc.store import dqc_result
from sharp_dagster_tests.dqc.rule_results import _result


def test_migration_0002_creates_the_model_table_and_downgrades(db_url, dqc_store):
    from alembic import command
    from alembic.autogenerate import compare_metadata
    from alembic.runtime.migration import MigrationContext
    from alembic.script import ScriptDirectory

    from sharp_dagster.db import metadata
    from sharp_dagster.joblog.migrate import alembic_config

    engine = dqc_store.engine
    insp = sa.inspect(engine)

    def ours(obj, name, type_, reflected, compare_to):
        table = obj if type_ == "table" else getattr(obj, "table", None)
        return table is None or table.name == "dqc_result"

    with engine.connect() as conn:
        context = MigrationContext.configure(conn, opts={"include_object": ours, "compare_type": True})
        assert compare_metadata(context, metadata) == []  # the model (store.py) = the migration (0002)
    assert {c["name"] for c in insp.get_columns("dqc_result")} == {c.name for c in dqc_result.columns}
    (ix,) = [i for i in insp.get_indexes("dqc_result") if i["name"] == "ix_dqc_result_asset_rule_partition"]
    assert ix["column_names"] == ["asset", "rule_id", "partition"]
    with engine.connect() as conn:
        version = conn.exec_driver_sql("SELECT version_num FROM sharp_dagster_alembic_version").scalar()
    # At head (later revisions, e.g. 0003, build on 0002), and 0002 is on the way there.
    script = ScriptDirectory.from_config(alembic_config())
    assert version == script.get_current_head()
    assert "0002_dqc_result" in {rev.revision for rev in script.walk_revisions()}

    config = alembic_config()
    with engine.begin() as conn:
        config.attributes["connection"] = conn
        command.downgrade(config, "0001_job_log")
    assert not sa.inspect(engine).has_table("dqc_result")
    assert sa.inspect(engine).has_table("job_log")
    with engine.begin() as conn:
        config.attributes["connection"] = conn
        command.upgrade(config, "head")
    assert sa.inspect(engine).has_table("dqc_result")


def test_round_trip(dqc_store):
    original = _result("b", "strong", "completeness", False)
    original.failing_keys = [{"order_id": 7, "dt": "2024-01-01", "note": "it's"}]
    assert dqc_store.save([original]) == 1
    (stored,) = dqc_store.recent("dwd/order_detail")
    for field in ("run_id", "asset", "partition", "rule_id", "rule_version", "template", "dimension", "severity",
                  "comparator", "actual", "expected", "lower_bound", "upper_bound", "passed", "downgraded",
                  "message", "failing_keys", "evaluated_at", "elapsed_ms"):  # fmt: skip
        assert getattr(stored, field) == getattr(original, field), field
    assert stored.status == "fail"
    assert dqc_store.assets() == ["dwd/order_detail"]


def test_history_takes_latest_value_per_partition_before_the_current_one(dqc_store):
    base = _result("vol", "weak", "consistency", True)
    t0 = datetime(2024, 2, 1)
    rows = []
    for i, (part, actual) in enumerate(
        [("2024-01-01", 10), ("2024-01-02", 99), ("2024-01-02", 12), ("2024-01-03", None), ("2024-01-04", 14),
         ("2024-01-05", 15), ("2024-01-06", 16)]
    ):  # fmt: skip
        rows.append(replace(base, partition=part, actual=actual, evaluated_at=t0 + timedelta(minutes=i)))
    rows.append(replace(base, rule_id="other", partition="2024-01-03", actual=1000))
    rows.append(replace(base, asset="dwd/elsewhere", partition="2024-01-03", actual=1000))
    dqc_store.save(rows)

    def values(limit, before):
        return [
            (p.partition, p.actual)
            for p in dqc_store.history("dwd/order_detail", "vol", limit, before=before)
        ]

    assert values(10, "2024-01-05") == [("2024-01-01", 10), ("2024-01-02", 12), ("2024-01-04", 14)]
    assert values(2, "2024-01-06") == [("2024-01-04", 14), ("2024-01-05", 15)]
    assert values(10, "2024-01-01") == []
    assert len(values(100, None)) == 5


def test_recent_limits_partitions_and_keeps_the_latest_evaluation(dqc_store):
    base = _result("r1", "weak", "validity", True)
    rows = [replace(base, partition=f"2024-01-0{d}", actual=float(d)) for d in range(1, 6)]
    rows.append(replace(base, partition="2024-01-05", actual=50.0, passed=False))
    rows += [replace(base, rule_id="r2", partition=f"2024-01-0{d}", actual=float(-d)) for d in range(3, 6)]
    dqc_store.save(rows)
    recent = dqc_store.recent("dwd/order_detail", limit=2)
    assert [(r.rule_id, r.partition, r.actual, r.passed) for r in recent] == [
        ("r1", "2024-01-04", 4.0, True), ("r1", "2024-01-05", 50.0, False),
        ("r2", "2024-01-04", -4.0, True), ("r2", "2024-01-05", -5.0, True),
    ]  # fmt: skip
    assert dqc_store.recent("dwd/unknown") == []
