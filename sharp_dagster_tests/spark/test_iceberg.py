"""Iceberg tables (sharp_dagster.spark.iceberg): write-audit-publish of one partition, its fence, history, undo.

Every test adds a catalog of its own to the shared session (catalogs are runtime SQL conf), backed by a JDBC
catalog in a SQLite file of its own, as the pipeline's catalog lives in the job log's SQLite database. Run as a
script, this file is the worker of the two-process test.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sharp_dagster.spark.catalog import apply_catalog_conf, catalog_conf, jdbc_catalog_props
from sharp_dagster.spark.iceberg import IcebergTables
from sharp_dagster.spark.tables import MissingPartitionError
from sharp_dagster.spark.wap import StalePublishError, branch_name
from sharp_dagster_tests.spark.iceberg_support import REF, _content, _names, _rows, _Settings


# ---------------------------------------------------------------- catalog conf
def test_catalog_conf_follows_the_job_log_database(tmp_path):
    sqlite = catalog_conf(_Settings(tmp_path / "wh", f"sqlite:///{tmp_path}/log.db"), catalog="c")
    assert sqlite["spark.sql.catalog.c"] == "org.apache.iceberg.spark.SparkCatalog"
    assert sqlite["spark.sql.catalog.c.catalog-impl"] == "org.apache.iceberg.jdbc.JdbcCatalog"
    assert sqlite["spark.sql.catalog.c.uri"] == f"jdbc:sqlite:{tmp_path}/log.db"
    assert sqlite["spark.sql.catalog.c.warehouse"] == f"file://{tmp_path}/wh"
    assert "spark.sql.defaultCatalog" not in sqlite

    pg = jdbc_catalog_props("postgresql+psycopg://etl:s3cret@db.internal:5433/log")
    assert pg == {"uri": "jdbc:postgresql://db.internal:5433/log", "jdbc.user": "etl"}  # password: a file

    other = catalog_conf(_Settings(tmp_path / "wh", "mysql://u:p@h/db"), catalog="c", make_default=True)
    assert other["spark.sql.catalog.c.type"] == "hadoop"
    assert "spark.sql.catalog.c.uri" not in other
    assert other["spark.sql.defaultCatalog"] == "c"
    assert jdbc_catalog_props("sqlite://") is None  # in memory: no other process could share it
    with pytest.raises(ValueError, match="plain identifier"):
        catalog_conf(_Settings(tmp_path, "sqlite://"), catalog="bad-name")


def test_branch_names_are_plain_identifiers():
    assert branch_name("run-8f3a:2") == "stage_run_8f3a_2"
    with pytest.raises(ValueError, match="empty branch name"):
        branch_name("::")


def test_unconfigured_catalog_is_a_clear_error(spark):
    with pytest.raises(ValueError, match="not configured"):
        IcebergTables(spark, "nowhere_configured")


# ---------------------------------------------------------------- write-audit-publish
def test_publish_replaces_exactly_one_partition_after_an_audit(spark, ice):
    ice.write_partition(REF, {"dt": "2024-01-01"}, _rows(spark, "2024-01-01", 5, "old"), token="r1:1")
    ice.write_partition(REF, {"dt": "2024-01-02"}, _rows(spark, "2024-01-02", 7, "old"), token="r2:1")
    assert ice.list_partitions(REF) == [{"dt": "2024-01-01"}, {"dt": "2024-01-02"}]

    # Rows claiming another partition are moved into the staged one: a stage cannot leak into other days.
    staged = ice.stage(REF, {"dt": "2024-01-01"}, _rows(spark, "2024-01-09", 3, "new"), token="r3:1")
    assert staged.branch == "stage_r3_1" and staged.row_count == 3
    audit = ice.read_staged(staged)
    assert sorted((r.v, r.dt) for r in audit.collect()) == [("new", "2024-01-01")] * 3
    assert _content(ice) == {"2024-01-01": (5, ("old",)), "2024-01-02": (7, ("old",))}  # main unchanged

    ice.publish(staged)
    assert _content(ice) == {"2024-01-01": (3, ("new",)), "2024-01-02": (7, ("old",))}
    assert ice.staged_branches(REF) == {}  # the branch went with the publish
    assert ice.read_partitions(REF, [{"dt": "2024-01-01"}]).count() == 3
    with pytest.raises(MissingPartitionError, match=r"needed by dwd\.x: ods\.orders\[dt=2024-01-05\]"):
        ice.read_partitions(REF, [{"dt": "2024-01-05"}], needed_by="dwd.x")


def test_an_empty_replacement_empties_the_partition(spark, ice):
    ice.write_partition(REF, {"dt": "2024-01-01"}, _rows(spark, "2024-01-01", 4, "a"), token="r1:1")
    ice.write_partition(REF, {"dt": "2024-01-02"}, _rows(spark, "2024-01-02", 2, "a"), token="r2:1")
    staged = ice.stage(REF, {"dt": "2024-01-01"}, _rows(spark, "2024-01-01", 0, "a"), token="r3:1")
    assert staged.row_count == 0 and ice.read_staged(staged).count() == 0
    ice.publish(staged)
    assert _content(ice) == {"2024-01-02": (2, ("a",))}
    assert ice.history(REF)[-1]["token"] == "r3:1"


def test_a_stale_stage_of_the_same_partition_cannot_publish(spark, ice):
    ice.write_partition(REF, {"dt": "2024-01-01"}, _rows(spark, "2024-01-01", 2, "base"), token="r0:1")
    stale = ice.stage(REF, {"dt": "2024-01-01"}, _rows(spark, "2024-01-01", 3, "stale"), token="r1:1")
    fresh = ice.stage(REF, {"dt": "2024-01-01"}, _rows(spark, "2024-01-01", 4, "fresh"), token="r1:2")
    other_day = ice.stage(REF, {"dt": "2024-01-02"}, _rows(spark, "2024-01-02", 6, "other"), token="r2:1")
    ice.publish(fresh)

    with pytest.raises(
        StalePublishError, match=r"ods\.orders\[dt=2024-01-01\].*token r1:1.*changed partition"
    ):
        ice.publish(stale)
    # Strict mode fences at the table: main moved, so even another day may not publish...
    with pytest.raises(StalePublishError, match="main moved"):
        ice.publish(other_day, strict=True)
    # ...while the default fences at the partition: another day's stage still publishes after main moved.
    ice.publish(other_day)
    assert _content(ice) == {"2024-01-01": (4, ("fresh",)), "2024-01-02": (6, ("other",))}
    # Publishing the same stage twice is refused (its branch is gone).
    with pytest.raises(StalePublishError, match="no longer holds"):
        ice.publish(fresh)
    assert set(ice.staged_branches(REF)) == {"stage_r1_1"}  # left for discard / clean_orphans
    ice.discard(stale)
    assert ice.staged_branches(REF) == {}


def test_snapshot_properties_carry_the_token_and_rollback_restores(spark, ice):
    ice.write_partition(REF, {"dt": "2024-01-01"}, _rows(spark, "2024-01-01", 2, "v1"), token="job1:1")
    good = ice.current_snapshot_id(REF)
    # A stage cut before another publish is cherry-picked (a new snapshot): it must still name its token.
    late = ice.stage(REF, {"dt": "2024-01-02"}, _rows(spark, "2024-01-02", 1, "v1"), token="job3:1")
    ice.write_partition(
        REF,
        {"dt": "2024-01-01"},
        _rows(spark, "2024-01-01", 9, "bad"),
        token="job2:1",
        properties={"job": "j2"},
    )
    ice.publish(late)

    history = ice.history(REF)
    assert [h["token"] for h in history if h["token"]] == ["job1:1", "job2:1", "job3:1"]
    assert history[-1]["is_current"] and history[-1]["snapshot_id"] != late.snapshot_id
    assert next(h for h in history if h["token"] == "job2:1")["properties"]["job"] == "j2"

    assert _content(ice)["2024-01-01"] == (9, ("bad",))
    replaced = ice.rollback(REF, good)
    assert replaced == history[-1]["snapshot_id"]
    assert _content(ice) == {"2024-01-01": (2, ("v1",))}
    assert ice.current_snapshot_id(REF) == good
    with pytest.raises(LookupError, match="no snapshot 12345"):
        ice.rollback(REF, 12345)


def test_clean_orphans_drops_only_dead_stages(spark, ice):
    ice.write_partition(REF, {"dt": "2024-01-01"}, _rows(spark, "2024-01-01", 1, "a"), token="r0:1")
    for token in ("dead:1", "live:1", "dead:2"):
        ice.stage(REF, {"dt": "2024-01-02"}, _rows(spark, "2024-01-02", 1, token), token=token)
    assert set(ice.staged_branches(REF)) == {"stage_dead_1", "stage_live_1", "stage_dead_2"}
    assert ice.clean_orphans(REF, keep=["live:1"], older_than_s=3600) == []  # all too young
    assert sorted(ice.clean_orphans(REF, keep=["live:1"])) == ["stage_dead_1", "stage_dead_2"]
    assert set(ice.staged_branches(REF)) == {"stage_live_1"}
    assert _content(ice) == {"2024-01-01": (1, ("a",))}


def test_the_catalog_lives_in_a_postgresql_job_log(spark, tmp_path):
    """The JDBC catalog derived from a PostgreSQL job-log URL, on a private server this test starts and stops."""
    from sharp_dagster_tests.joblog.pgserver import PostgresServer

    server = PostgresServer().start()
    try:
        url = server.create_database()
        settings = _Settings(tmp_path / "warehouse", url)
        catalog = f"icepg{os.getpid()}_{next(_names)}"
        conf = catalog_conf(settings, catalog=catalog)
        assert (
            conf[f"spark.sql.catalog.{catalog}.uri"]
            == f"jdbc:postgresql://127.0.0.1:{server.port}/{url.rsplit('/', 1)[1]}"
        )
        apply_catalog_conf(spark, conf)
        ice = IcebergTables(spark, catalog)
        ice.write_partition(REF, {"dt": "2024-01-01"}, _rows(spark, "2024-01-01", 2, "a"), token="pg:1")
        stale = ice.stage(REF, {"dt": "2024-01-01"}, _rows(spark, "2024-01-01", 3, "stale"), token="pg:2")
        ice.write_partition(REF, {"dt": "2024-01-01"}, _rows(spark, "2024-01-01", 4, "b"), token="pg:3")
        with pytest.raises(StalePublishError, match="changed partition"):
            ice.publish(stale)
        assert _content(ice) == {"2024-01-01": (4, ("b",))}
        assert [h["token"] for h in ice.history(REF)][1:] == ["pg:1", "pg:3"]

        import psycopg  # the catalog's rows are in the job log's database, where another machine finds them

        conn = psycopg.connect(
            host="127.0.0.1", port=server.port, user="postgres", dbname=url.rsplit("/", 1)[1]
        )
        try:
            with conn.cursor() as cur:
                cur.execute(
                    "SELECT table_namespace, table_name FROM iceberg_tables WHERE catalog_name = %s",
                    (catalog,),
                )
                assert cur.fetchall() == [("ods", "orders")]
        finally:
            conn.close()
    finally:
        server.stop()


# ---------------------------------------------------------------- two processes, one catalog
_WORKER_DAYS = {
    "a": ["2024-03-01", "2024-03-02", "2024-03-03"],
    "b": ["2024-03-04", "2024-03-05", "2024-03-06"],
}
_SHARED_DAY = "2024-03-09"


def test_concurrent_publishes_from_two_processes(spark, ice, tmp_path):
    """Two JVMs commit to one table through one SQLite JDBC catalog: every day lands once and whole; for the day
    both stage from the same base, exactly one publish wins and the loser is told it is stale."""
    settings = _Settings(tmp_path / "warehouse", f"sqlite:///{tmp_path / 'sharp_log.db'}")
    ice.write_partition(REF, {"dt": "2024-03-01"}, _rows(spark, "2024-03-01", 1, "seed"), token="seed:1")
    procs = []
    for worker in ("a", "b"):
        env = {**os.environ, "SHARP_DATA_DIR": str(tmp_path / f"data_{worker}"), "PYTHONPATH": os.getcwd()}
        args = [
            sys.executable,
            __file__,
            worker,
            str(settings.warehouse_dir),
            settings.log_db_url,
            ice.catalog,
        ]
        args.append(str(tmp_path))  # the folder of the barrier files
        procs.append(
            subprocess.Popen(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        )
    reports = {}
    for worker, proc in zip(("a", "b"), procs, strict=True):
        try:
            out, err = proc.communicate(timeout=900)
        finally:
            if proc.poll() is None:
                proc.kill()
        assert proc.returncode == 0, err[-3000:]
        reports[worker] = json.loads(out.strip().splitlines()[-1])

    for worker, days in _WORKER_DAYS.items():
        assert reports[worker]["published"] == days
    shared = [w for w in reports if reports[w]["shared"] == "published"]
    assert len(shared) == 1, reports
    loser = "b" if shared == ["a"] else "a"
    assert reports[loser]["shared"].startswith("stale"), reports
    print("commit retries after a concurrent commit:", {w: r["retries"] for w, r in reports.items()})

    content = _content(ice)
    expected = {day: (3, (f"{w}{i}",)) for w, days in _WORKER_DAYS.items() for i, day in enumerate(days)}
    expected[_SHARED_DAY] = (5, (f"shared_{shared[0]}",))
    assert content == expected
    history = ice.history(REF)
    tokens = [h["token"] for h in history if h["is_current_ancestor"]]
    assert tokens[0] is None  # the table's creation; every publish names its run
    assert sorted(tokens[1:]) == sorted(
        ["seed:1", f"{shared[0]}:shared", *(f"{w}:{d}" for w in "ab" for d in "012")]
    )
    assert set(ice.staged_branches(REF)) == {f"stage_{loser}_shared"}  # the loser's stage, for clean_orphans


def _worker(name: str, warehouse: str, log_db_url: str, catalog: str, barrier_dir: str) -> None:
    """Stage and publish this worker's days, then race the other worker on the shared day; print a JSON report."""
    from sharp_dagster.settings import Settings
    from sharp_dagster.spark.session import build_spark_session

    spark = build_spark_session(Settings.from_env(), app_name=f"iceberg_worker_{name}")
    apply_catalog_conf(spark, catalog_conf(_Settings(Path(warehouse), log_db_url), catalog=catalog))
    ice = IcebergTables(spark, catalog)
    # Both stage the shared day first, and wait until the other has staged it too (so neither stage saw the
    # other's publish), then publish their own days (interleaving commits with the other process) and the shared
    # day last: only one of the two may win it.
    shared = ice.stage(
        REF, {"dt": _SHARED_DAY}, _rows(spark, _SHARED_DAY, 5, f"shared_{name}"), f"{name}:shared"
    )
    Path(barrier_dir, f"staged_{name}").touch()
    other = Path(barrier_dir, f"staged_{'b' if name == 'a' else 'a'}")
    deadline = time.monotonic() + 300
    while not other.exists():
        if time.monotonic() > deadline:
            raise TimeoutError(f"worker {name}: the other worker never staged")
        time.sleep(0.05)
    published = []
    for i, day in enumerate(_WORKER_DAYS[name]):
        ice.write_partition(REF, {"dt": day}, _rows(spark, day, 3, f"{name}{i}"), token=f"{name}:{i}")
        published.append(day)
    try:
        ice.publish(shared)
        outcome = "published"
    except StalePublishError as exc:
        outcome = f"stale: {exc}"
    print(json.dumps({"published": published, "shared": outcome, "retries": ice.commit_retries}))
    spark.stop()


if __name__ == "__main__":
    _worker(*sys.argv[1:6])
