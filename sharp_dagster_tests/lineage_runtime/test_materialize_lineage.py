"""Real materializations: the run-time lineage check on every demo SQL asset, misleading statements that must
raise the WARN check with both answers, and the OpenLineage events of every log-driven run (schema-valid, their
column lineage the parser's)."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from dagster import AssetCheckSeverity, AssetKey, DagsterInstance, materialize

from sharp_dagster.assets.lineage_runtime import CHECK_NAME, report_path
from sharp_dagster.demo.generator import GeneratorConfig, generate
from sharp_dagster.lineage import openlineage
from sharp_dagster.settings import Settings
from sharp_dagster_tests.cdc_support import CdcFeed, local_broker
from sharp_dagster_tests.lineage_runtime.ol_schema import column_lineage_of, validate_run_event

SMALL = GeneratorConfig(days=2, users=30, products=8, orders_per_day=12, history_orders=10)
DAY = "2024-01-01"


@pytest.fixture(scope="module")
def warehouse(tmp_path_factory, spark):
    """A data folder of its own with one day of every asset, run by the project's daily job."""
    mp = pytest.MonkeyPatch()
    mp.setenv("SHARP_DATA_DIR", str(tmp_path_factory.mktemp("lineage_runtime")))
    for key in ("OPENLINEAGE_URL", "OPENLINEAGE_CONFIG", "OPENLINEAGE_DISABLED"):
        mp.delenv(key, raising=False)
    from sharp_dagster.definitions import defs

    generate(Settings.from_env().sample_dir, SMALL)
    instance = DagsterInstance.ephemeral()
    with local_broker():
        feed = CdcFeed(defs, instance)
        feed.land(DAY)
        result = defs.resolve_job_def("warehouse_daily").execute_in_process(
            partition_key=DAY, instance=instance
        )
        assert result.success
        yield defs, instance, result
    mp.undo()


def _sql_tables():
    from sharp_dagster.definitions import CATALOG

    return CATALOG.tables


def _events() -> list[dict]:
    return [json.loads(line) for line in openlineage.events_path().read_text().splitlines()]


def test_check_passes_on_every_demo_sql_asset(warehouse):
    _, _, result = warehouse
    evaluations = {
        e.asset_key.to_user_string(): e
        for e in result.get_asset_check_evaluations()
        if e.check_name == CHECK_NAME
    }
    tables = _sql_tables()
    assert {t.asset_key_str for t in tables} == set(evaluations) and len(tables) == 4
    for table in tables:
        evaluation = evaluations[table.asset_key_str]
        assert evaluation.passed, (table.qualified, evaluation.metadata["differences"].value)
        spark_answer = evaluation.metadata["spark"].value
        parsed_answer = evaluation.metadata["parsed"].value
        assert spark_answer["tables"] == parsed_answer["tables"] and spark_answer["tables"]
        assert spark_answer["columns"] == parsed_answer["columns"]
        # Row dependencies: equal, or a note (not a failure) naming both answers.
        notes = evaluation.metadata["notes"].value
        if spark_answer["dependencies"] != parsed_answer["dependencies"]:
            assert notes == [
                {
                    "kind": "dependencies",
                    "subject": table.qualified,
                    "parsed": parsed_answer["dependencies"],
                    "spark": spark_answer["dependencies"],
                    "message": notes[0]["message"],
                }
            ]
            assert "note: row dependencies" in evaluation.description
        else:
            assert notes == []
        kept = json.loads(report_path(table, DAY).read_text())
        assert kept["passed"] and kept["run_id"] == result.run_id and kept["partition"] == DAY
        assert kept["spark"]["columns"] == spark_answer["columns"]
    # A spot check that the plan side really is Spark's answer: the window rank has no value sources and
    # line_amount is computed from quantity and unit_price.
    detail = json.loads(report_path(next(t for t in tables if t.name == "order_detail"), DAY).read_text())
    columns = {c["target"]: c["sources"] for c in detail["spark"]["columns"]}
    assert columns["line_amount"] == ["ods.order_item.quantity", "ods.order_item.unit_price"]
    # The day is the tag read (VERSION AS OF), not a `dt` predicate: the rows depend on the order time, not on dt.
    assert "ods.orders.order_time" in detail["spark"]["dependencies"]
    assert not any(d.endswith(".dt") for d in detail["spark"]["dependencies"])


def _misleading_asset(defs, name: str, runs: str, parser_told: str, upstream: list[str], external: list[str]):
    from sharp_dagster.assets.sql_assets import build_sql_asset
    from sharp_dagster.definitions import CATALOG, GRAINS, LAYOUT

    base = CATALOG.by_qualified()["dwd.user_dim"]
    table = replace(base, name=name, sql=runs, rendered=parser_told, declared_deps=None)
    asset = build_sql_asset(table, upstream, external, GRAINS, LAYOUT.sql_log_asset(table, upstream))
    # Any definition with an `ods` key (a multi-asset has no single `.key`).
    ods = [a for a in defs.assets if any(k.path[0] == "ods" for k in getattr(a, "keys", ()))]
    return table, asset, ods


def _warn(result, key: list[str]):
    (evaluation,) = [
        e
        for e in result.get_asset_check_evaluations()
        if e.check_name == CHECK_NAME and e.asset_key == AssetKey(key)
    ]
    return evaluation


def test_statement_differing_from_the_parsed_text_raises_the_warn_check(warehouse):
    defs, instance, _ = warehouse
    runs = "SELECT u.user_id, u.city AS level FROM ods.user_info VERSION AS OF '${dt}' AS u"
    told = f"SELECT u.user_id, u.level FROM ods.user_info VERSION AS OF '{DAY}' AS u"
    table, asset, ods = _misleading_asset(defs, "misled_columns", runs, told, ["ods.user_info"], [])
    result = materialize(
        [asset, *ods], selection=[asset.key], partition_key=DAY, instance=instance, resources=defs.resources
    )
    assert result.success  # WARN never blocks
    evaluation = _warn(result, ["dwd", "misled_columns"])
    assert not evaluation.passed and evaluation.severity == AssetCheckSeverity.WARN
    differences = evaluation.metadata["differences"].value
    assert differences == [
        {
            "kind": "column_sources",
            "subject": "dwd.misled_columns.level",
            "parsed": ["ods.user_info.level"],
            "spark": ["ods.user_info.city"],
            "message": "sources of dwd.misled_columns.level: parser: [ods.user_info.level] vs "
            "spark: [ods.user_info.city]",
        }
    ]
    assert "dwd.misled_columns.level" in evaluation.description
    kept = json.loads(report_path(table, DAY).read_text())
    assert not kept["passed"] and kept["differences"] == differences
    assert kept["sql"] == runs.replace("${dt}", DAY)


def test_view_hiding_a_table_raises_the_warn_check(warehouse, spark):
    defs, instance, _ = warehouse
    # The warehouse's Iceberg catalog (current) keeps no views without Iceberg's SQL extensions
    # (MISSING_CATALOG_ABILITY.VIEWS): the view lives in the session catalog, over the Iceberg table (a view
    # resolves its text in the catalog that was current when it was created). The plan names no catalog, nor
    # does the comparison: `spark_catalog.lrt_views.active_users` is `lrt_views.active_users` on both sides.
    spark.sql("CREATE DATABASE IF NOT EXISTS spark_catalog.lrt_views")
    # The parser sees only the view's name; Spark expands the view and reads the table behind it.
    spark.sql(
        "CREATE OR REPLACE VIEW spark_catalog.lrt_views.active_users AS "
        "SELECT user_id, city AS home_city FROM ods.user_info WHERE level <> 'none'"
    )
    sql = "SELECT v.user_id, v.home_city FROM spark_catalog.lrt_views.active_users AS v"
    table, asset, ods = _misleading_asset(
        defs, "behind_view", sql, sql.replace("${dt}", DAY), [], ["lrt_views.active_users"]
    )
    result = materialize([asset], partition_key=DAY, instance=instance, resources=defs.resources)
    assert result.success
    evaluation = _warn(result, ["dwd", "behind_view"])
    assert not evaluation.passed and evaluation.severity == AssetCheckSeverity.WARN
    by_subject = {d["subject"]: d for d in evaluation.metadata["differences"].value}
    assert by_subject["lrt_views.active_users"]["parsed"] == ["lrt_views.active_users"]
    assert by_subject["lrt_views.active_users"]["spark"] == ["ods.user_info"]
    assert by_subject["ods.user_info"]["kind"] == "table"
    assert by_subject["dwd.behind_view.home_city"] == {
        "kind": "column_sources",
        "subject": "dwd.behind_view.home_city",
        "parsed": ["lrt_views.active_users.home_city"],
        "spark": ["ods.user_info.city"],
        "message": by_subject["dwd.behind_view.home_city"]["message"],
    }
    assert evaluation.metadata["spark"].value["views"] == ["lrt_views.active_users"]


def test_every_log_driven_run_emits_valid_openlineage_events(warehouse):
    _, _, result = warehouse
    events = _events()
    assert events
    for event in events:
        validate_run_event(event)
    by_job: dict[str, list[dict]] = {}
    for event in events:
        by_job.setdefault(event["job"]["name"], []).append(event)
    for job in ["ods/orders", "ods/user_info", *[t.asset_key_str for t in _sql_tables()]]:
        kinds = [e["eventType"] for e in by_job[job]]
        assert "START" in kinds and "COMPLETE" in kinds, (job, kinds)
        start = next(e for e in by_job[job] if e["eventType"] == "START")
        complete = next(
            e
            for e in by_job[job]
            if e["eventType"] == "COMPLETE" and e["run"]["runId"] == start["run"]["runId"]
        )
        assert complete["run"]["facets"]["nominalTime"]["nominalStartTime"].startswith(DAY)
        assert complete["outputs"][0]["facets"]["schema"]["fields"]


def test_openlineage_column_lineage_is_the_parsers(warehouse, spark):
    from sharp_dagster.definitions import DEPS

    events = _events()
    for table in _sql_tables():
        complete = [
            e for e in events if e["job"]["name"] == table.asset_key_str and e["eventType"] == "COMPLETE"
        ]
        assert complete, table.asset_key_str
        event = complete[-1]
        parsed = DEPS[table.qualified].lineage
        prefix = table.qualified + "."
        expected = {
            c.target[len(prefix) :]: sorted(c.sources) for c in parsed.columns if c.target.startswith(prefix)
        }
        assert column_lineage_of(event) == expected
        output = event["outputs"][0]
        assert output["name"] == table.qualified
        # COMPLETE carries the schema Spark wrote (names and types), START the parser's names.
        written = {f["name"]: f.get("type") for f in output["facets"]["schema"]["fields"]}
        assert set(expected) <= set(written) and all(written[c] for c in expected)
        deps = {f"{f['name']}.{f['field']}" for f in output["facets"]["columnLineage"]["dataset"]}
        assert deps == set(parsed.dataset_dependencies)
        assert sorted(i["name"] for i in event["inputs"]) == sorted(parsed.sources)
        assert event["job"]["facets"]["sql"]["query"] == table.rendered


def test_failed_run_emits_fail_with_the_error(warehouse):
    defs, instance, _ = warehouse
    sql = "SELECT u.user_id, u.no_such_column FROM ods.user_info VERSION AS OF '${dt}' AS u"
    _, asset, ods = _misleading_asset(
        defs, "broken_sql", sql, sql.replace("${dt}", DAY), ["ods.user_info"], []
    )
    result = materialize(
        [asset, *ods],
        selection=[asset.key],
        partition_key=DAY,
        instance=instance,
        resources=defs.resources,
        raise_on_error=False,
    )
    assert not result.success
    events = [e for e in _events() if e["job"]["name"] == "dwd/broken_sql"]
    assert [e["eventType"] for e in events] == ["START", "FAIL"]
    assert events[0]["run"]["runId"] == events[1]["run"]["runId"]
    for event in events:
        validate_run_event(event)
    assert "no_such_column" in events[1]["run"]["facets"]["errorMessage"]["message"]
