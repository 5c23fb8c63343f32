"""The code location as Dagster loads it: groups, partitions, column lineage, and load failures on bad SQL."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from dagster import AssetKey

from sharp_dagster.settings import REPO_ROOT, WAREHOUSE_SQL_DIR

DAGSTER = str(Path(sys.executable).with_name("dagster"))


def validate(sql_dir: Path) -> subprocess.CompletedProcess:
    env = {**__import__("os").environ, "SHARP_WAREHOUSE_SQL_DIR": str(sql_dir)}
    return subprocess.run(
        [DAGSTER, "definitions", "validate", "-w", str(REPO_ROOT / "workspace.yaml")],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )


def test_every_sql_asset_has_group_description_partitions_and_lineage():
    from sharp_dagster.definitions import CATALOG, defs

    graph = defs.resolve_asset_graph()
    for table in CATALOG.tables:
        node = graph.get(AssetKey(table.asset_key_path))
        assert node.group_name == table.layer
        assert table.description.splitlines()[0] in node.description
        assert node.partitions_def is not None
    detail = graph.get(AssetKey(["dwd", "order_detail"]))
    lineage = detail.metadata["dagster/column_lineage"]
    deps = {
        c: {(d.asset_key.to_user_string(), d.column_name) for d in v}
        for c, v in lineage.deps_by_column.items()
    }
    assert deps["line_amount"] == {("ods/order_item", "quantity"), ("ods/order_item", "unit_price")}
    assert deps["category"] == {("ods/product", "category")}
    assert {k.to_user_string() for k in detail.parent_keys} == {"ods/orders", "ods/order_item", "ods/product"}
    ods = graph.get(AssetKey(["ods", "orders"]))
    assert {k.to_user_string() for k in ods.parent_keys} == {"original_binlog/shop"}
    landing = graph.get(AssetKey(["original_binlog", "shop"]))
    assert {k.to_user_string() for k in landing.parent_keys} >= {
        "mysql/shop/user_info_0",
        "mysql/shop/orders",
    }


def test_validate_passes_on_the_project():
    result = validate(WAREHOUSE_SQL_DIR)
    assert result.returncode == 0, result.stdout + result.stderr


def test_syntax_error_fails_loading_naming_file_and_line(tmp_path):
    sql_dir = tmp_path / "warehouse"
    shutil.copytree(WAREHOUSE_SQL_DIR, sql_dir, ignore=shutil.ignore_patterns("*.py", "__pycache__"))
    broken = sql_dir / "dwd" / "user_dim.sql"
    lines = broken.read_text().splitlines()
    lines[8] = "    CAST(u.register_time AS) AS rt,"  # line 9: a CAST without a type
    broken.write_text("\n".join(lines) + "\n")
    result = validate(sql_dir)
    assert result.returncode != 0
    output = result.stdout + result.stderr
    assert f"{broken}:9:" in output, output[-3000:]


def test_undeclared_dependency_fails_loading(tmp_path):
    sql_dir = tmp_path / "warehouse"
    shutil.copytree(WAREHOUSE_SQL_DIR, sql_dir, ignore=shutil.ignore_patterns("*.py", "__pycache__"))
    detail = sql_dir / "dwd" / "order_detail.sql"
    text = detail.read_text().replace(
        "WHERE o.order_time",
        "WHERE o.user_id IN (SELECT user_id FROM ods.user_info VERSION AS OF '${dt}') AND o.order_time",
    )
    detail.write_text(text)
    result = validate(sql_dir)
    assert result.returncode != 0
    output = result.stdout + result.stderr
    assert "asset dwd/order_detail: declared deps disagree with its SQL" in output
    assert "reads ['ods.user_info'] not named in @deps" in output


def test_an_ods_read_without_its_days_tag_fails_loading(tmp_path):
    """An ODS table is its latest state: a SQL table reads its partition's day as `VERSION AS OF '${dt}'`."""
    sql_dir = tmp_path / "warehouse"
    shutil.copytree(WAREHOUSE_SQL_DIR, sql_dir, ignore=shutil.ignore_patterns("*.py", "__pycache__"))
    dim = sql_dir / "dwd" / "user_dim.sql"
    text = dim.read_text()
    dim.write_text(text.replace("FROM ods.user_info VERSION AS OF '${dt}' AS u", "FROM ods.user_info AS u"))
    line = 1 + text.split("FROM ods.user_info")[0].count("\n")
    result = validate(sql_dir)
    assert result.returncode != 0
    output = result.stdout + result.stderr
    assert f"{dim}:{line}: dwd.user_dim reads ods.user_info without VERSION AS OF" in output, output[-3000:]


PROBE_STARTS = """
from dagster import AssetKey
from sharp_dagster.definitions import defs
graph = defs.resolve_asset_graph()
for key in (["ods", "orders"], ["ods", "ledger"], ["original_binlog", "shop"], ["original_binlog", "mine"]):
    print("asset", "/".join(key), graph.get(AssetKey(key)).partitions_def.start.date())
for job in defs.resolve_all_job_defs():
    if not job.name.startswith("__"):
        print("job", job.name, sorted(k.to_user_string() for k in job.asset_layer.executable_asset_keys))
print("sensors", sorted(s.name for s in defs.sensors))
"""


def test_a_source_with_its_own_start_gets_its_own_partitions_jobs_and_sensor(tmp_path):
    """A bootstrapped source (`start:` in its YAML) starts its partitions there, beside the demo's shop."""
    sql_dir = tmp_path / "warehouse"
    shutil.copytree(WAREHOUSE_SQL_DIR, sql_dir, ignore=shutil.ignore_patterns("*.py", "__pycache__"))
    (sql_dir / "cdc" / "mine.yaml").write_text(
        "source_id: mine-db\nstart: 2026-11-20\ndatabases:\n  - name: mine\n    tables:\n"
        "      - name: ledger\n        primary_key: [id]\n        columns: [id BIGINT NOT NULL, note TEXT]\n"
    )
    env = {**__import__("os").environ, "SHARP_WAREHOUSE_SQL_DIR": str(sql_dir)}
    done = subprocess.run(
        [sys.executable, "-c", PROBE_STARTS], env=env, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.splitlines()
    assert [line for line in lines if line.startswith("asset ")] == [
        "asset ods/orders 2024-01-01",
        "asset ods/ledger 2026-11-20",
        "asset original_binlog/shop 2024-01-01",
        "asset original_binlog/mine 2026-11-20",
    ]
    jobs = {line.split(" ", 2)[1]: line.split(" ", 2)[2] for line in lines if line.startswith("job ")}
    assert jobs["ods_daily_mine_db"] == "['ods/ledger']"
    # One ODS job per database: a day of it is one run of the database's multi-asset.
    assert jobs["ods_mine"] == "['ods/ledger']"
    assert jobs["ods_shop"] == "['ods/order_item', 'ods/orders', 'ods/product', 'ods/user_info']", jobs[
        "ods_shop"
    ]
    assert jobs["binlog_hourly_mine_db"] == "['original_binlog/mine']"
    assert "ods/ledger" not in jobs["warehouse_daily"] and "ods/orders" in jobs["warehouse_daily"]
    assert "original_binlog/mine" not in jobs["binlog_hourly"]
    assert "'log_driven_sensor', 'log_driven_sensor_mine_db'" in lines[-1]
