"""The fault matrix's harness: worlds (a warehouse, a job log, a broker), child runs stopped or killed at a fail
point, and the checks every fault ends with (published rows equal a fault-free run's, the job log tells the truth).

A `World` is one data folder with the small sample shop, its binlog landed for the first days through a real Kafka
broker of its own, and a job log on SQLite or on a private PostgreSQL server (which also holds the Iceberg catalog).
The test process shares one Spark JVM over every world (`use_warehouse` gives each its own catalog); a child run
(`ChildRun`) is a fresh Python process with a JVM of its own that materializes one asset partition through Dagster
with `SHARP_FAILPOINTS` armed, so a fault lands at an exact lifecycle step (`sharp_dagster/failpoints.py`).

Published data is compared through the tables (`spark.table(...)`) and the job log, never through files.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from dataclasses import dataclass, field
from datetime import date, timedelta
from pathlib import Path
from typing import Any

import pytest
from dagster import AssetKey, materialize

from sharp_dagster.demo.generator import GeneratorConfig
from sharp_dagster.joblog import SUCCESS
from sharp_dagster_tests.cdc_support import QUIET

SMALL = GeneratorConfig(days=6, users=40, products=10, orders_per_day=15, history_orders=15)
D1, D2, D3, D4, D5 = "2024-01-01", "2024-01-02", "2024-01-03", "2024-01-04", "2024-01-05"
# The days every world lands when it is built; D4 and D5 belong to the landing faults.
LANDED_UP_FRONT = (D1, D2, D3)
STALE_S = 3.0  # the claim timeout of runs that are to be taken over (heartbeat every 0.75 s)
FIGURES_ENV = "SHARP_FAULT_FIGURES"

BACKENDS = ["sqlite", "postgresql"]
BOTH_BACKENDS_ENV = "SHARP_FAULTS_BOTH_BACKENDS"


def on_backend(backend: str):
    """Run a fault test on one backend: a fault of the lifecycle or the landing, where the job log's backend is
    not what is under test. Its kill or restart costs a child run and a recovery, minutes under CI's load, so the
    matrix spreads such faults over both backends (each backend recovers from some of them) instead of running
    every one twice; the claim races and takeovers, where the backend is what is tested, run on both. With
    SHARP_FAULTS_BOTH_BACKENDS=1 every fault runs on both backends."""
    both = os.environ.get(BOTH_BACKENDS_ENV, "").strip() in {"1", "true", "yes"}
    return pytest.mark.parametrize("world", BACKENDS if both else [backend], indirect=True)


# One asset partition materialized through Dagster, as `dagster asset materialize` would: the last line of stdout
# is the outcome as JSON. With a gate directory (argv[3]) every claim first waits for the test's "go" file, so
# several children claim at the same moment (the race fault).
CHILD = textwrap.dedent(
    """
    import json, os, sys, time
    from pathlib import Path
    key, day = sys.argv[1], sys.argv[2]
    if len(sys.argv) > 3:
        from sharp_dagster.joblog import store
        gate, real_claim = Path(sys.argv[3]), store.JobLog.claim

        def gated_claim(self, *args, **kwargs):
            (gate / f"ready-{os.getpid()}").touch()
            while not (gate / "go").exists():
                time.sleep(0.01)
            return real_claim(self, *args, **kwargs)

        store.JobLog.claim = gated_claim
    from dagster import AssetKey, DagsterInstance, materialize
    from sharp_dagster.definitions import defs
    with DagsterInstance.ephemeral() as instance:
        result = materialize(list(defs.assets), selection=[AssetKey(key.split("/"))], partition_key=day,
                             instance=instance, resources=defs.resources, raise_on_error=False,
                             run_config={"loggers": {"console": {"config": {"log_level": "WARNING"}}}})
    failure = next((e for e in result.all_events if e.is_step_failure), None)
    error = failure.step_failure_data.error.to_string() if failure else None
    from pyspark import SparkContext
    spark = SparkContext._active_spark_context is not None  # did this run start a Spark driver?
    outcome = {"success": result.success, "run_id": result.run_id, "error": error, "spark": spark}
    print("RESULT " + json.dumps(outcome), flush=True)
    """
)


# ---------------------------------------------------------------------------------------------------- worlds
@dataclass
class World:
    """One warehouse + job log + broker. `enter(monkeypatch)` points this process's settings at it."""

    backend: str
    root: Path
    env: dict[str, str]
    broker: Any
    feed: Any = None
    pg: Any = None
    extra_env: dict[str, str] = field(default_factory=dict)

    def enter(self, monkeypatch) -> World:
        for k, v in self.env.items():
            monkeypatch.setenv(k, v)
        if "SHARP_LOG_DB_URL" not in self.env:
            monkeypatch.delenv("SHARP_LOG_DB_URL", raising=False)
        monkeypatch.delenv("SHARP_FAILPOINTS", raising=False)
        point_catalog()
        return self

    @property
    def defs(self):
        return self.feed.defs

    @property
    def instance(self):
        return self.feed.instance

    def tables(self):
        """The world's Iceberg tables, its catalog made the shared session's current one."""
        return self.defs.resources["spark"].store()

    def job_log(self):
        from sharp_dagster.logdriven import job_log

        return job_log()


def point_catalog() -> None:
    """Re-point this process's `sharp` catalog at the current settings' warehouse and job-log database.

    Why not let `catalog.use_warehouse` give the second world a catalog `sharp_<hash>`: Iceberg's JDBC catalog keys
    its tables by the catalog's name, so tables the test process made under `sharp_<hash>` would not exist for the
    child runs, whose catalog is `sharp`. Spark keeps a loaded catalog for the session's life, so the loaded ones are
    dropped first (`CatalogManager.reset`, which Spark's own tests use); the next use loads `sharp` afresh.
    """
    from pyspark.sql import SparkSession

    from sharp_dagster.settings import Settings
    from sharp_dagster.spark.catalog import apply_catalog_conf, catalog_conf

    spark = SparkSession.getActiveSession()
    assert spark is not None, "the test session's Spark is not running"
    spark._jsparkSession.sessionState().catalogManager().reset()
    apply_catalog_conf(spark, catalog_conf(Settings.from_env(), make_default=True))


# ---------------------------------------------------------------------------------------------------- runs
def materialize_here(world: World, name: str, day: str):
    """A fault-free run of one partition in this process (the shared JVM)."""
    return materialize(
        list(world.defs.assets),
        selection=[AssetKey(name.split("/"))],
        partition_key=day,
        instance=world.instance,
        resources=world.defs.resources,
        raise_on_error=False,
        run_config=QUIET,
    )


def failure_text(result) -> str:
    failure = next((e for e in result.all_events if e.is_step_failure), None)
    return failure.step_failure_data.error.to_string() if failure else ""


def proc_state(pid: int) -> str | None:
    """The state letter of /proc/<pid>/stat ('R', 'S', 'T' stopped, 'Z'), or None when the process is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return text[text.rindex(")") + 2]  # the command name may hold spaces and parentheses


class ChildRun:
    """One partition materialized in a child process of its own (new session: signals reach only it)."""

    def __init__(
        self,
        world: World,
        name: str,
        day: str,
        failpoints: str = "",
        claim_timeout_s: float = STALE_S,
        gate: Path | None = None,
        logs: Path | None = None,
    ):
        self.name, self.day = name, day
        env = {**os.environ, **world.env, "SHARP_CLAIM_TIMEOUT_S": f"{claim_timeout_s:g}"}
        env.pop("SHARP_FAILPOINTS", None)
        if "SHARP_LOG_DB_URL" not in world.env:
            env.pop("SHARP_LOG_DB_URL", None)
        if failpoints:
            env["SHARP_FAILPOINTS"] = failpoints
        logs = logs or world.root / "children"
        logs.mkdir(parents=True, exist_ok=True)
        stem = f"{name.replace('/', '_')}_{day}_{time.monotonic_ns()}"
        self.out_path, self.err_path = logs / f"{stem}.out", logs / f"{stem}.err"
        args = [sys.executable, "-c", CHILD, name, day] + ([str(gate)] if gate else [])
        with open(self.out_path, "w") as out, open(self.err_path, "w") as err:
            self.proc = subprocess.Popen(args, env=env, stdout=out, stderr=err, start_new_session=True)
        self.pid = self.proc.pid

    def wait_stopped(self, timeout_s: float = 300) -> float:
        """Wait until the child froze itself at its `stop` fail point; returns when (monotonic)."""
        deadline = time.monotonic() + timeout_s
        while proc_state(self.pid) != "T":
            if self.proc.poll() is not None:
                raise AssertionError(
                    f"the child run ended ({self.proc.returncode}) before its fail point: {self.tail()}"
                )
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"the child run did not reach its fail point in {timeout_s}s: {self.tail()}"
                )
            time.sleep(0.1)
        return time.monotonic()

    def wait_exit(self, timeout_s: float = 300) -> int:
        try:
            return self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"the child run did not end within {timeout_s}s: {self.tail()}") from None

    def kill(self) -> float:
        """SIGKILL by the child's own pid (as an OOM kill: nothing runs after it); returns when (monotonic)."""
        os.kill(self.pid, signal.SIGKILL)
        self.proc.wait(timeout=60)
        return time.monotonic()

    def cont(self) -> None:
        os.kill(self.pid, signal.SIGCONT)

    def result(self) -> dict:
        lines = [ln for ln in self.out_path.read_text().splitlines() if ln.startswith("RESULT ")]
        assert lines, f"the child run printed no result: {self.tail()}"
        return json.loads(lines[-1][len("RESULT ") :])

    def tail(self) -> str:
        try:
            return self.err_path.read_text()[-3000:]
        except OSError:
            return ""

    def close(self) -> None:
        """End the child if it still runs (SIGKILL, by its pid; a stopped process dies too)."""
        if self.proc.poll() is None:
            os.kill(self.pid, signal.SIGKILL)
            self.proc.wait(timeout=60)


# ---------------------------------------------------------------------------------------------------- job log
def attempts(world: World, name: str, day: str) -> list:
    """Every attempt of one period, oldest first."""
    rows = [r for r in world.job_log().recent(name, limit=500) if r.partition_key == day]
    return sorted(rows, key=lambda r: r.attempt)


def last_attempt(world: World, name: str, day: str) -> int:
    rows = attempts(world, name, day)
    return rows[-1].attempt if rows else 0


def wait_stale(world: World, name: str, day: str, stale_s: float = STALE_S, timeout_s: float = 120) -> None:
    """Wait until the period's claim has had no heartbeat for longer than `stale_s` (by the job log's clock)."""
    jl = world.job_log()
    spec = world_asset(name).spec
    from sharp_dagster.joblog.records import schedule_id_for

    schedule = schedule_id_for(name, spec.period_for_key(day).range_start)
    deadline = time.monotonic() + timeout_s
    while True:
        row = jl.inspect_claim(schedule)
        assert row is not None, f"{name} [{day}] is not claimed"
        if (jl.now() - row.heartbeat_time).total_seconds() > stale_s + 0.3:
            return
        assert time.monotonic() < deadline, f"{name} [{day}]: the claim kept beating for {timeout_s}s"
        time.sleep(0.2)


def claim_row(world: World, name: str, day: str):
    from sharp_dagster.joblog.records import schedule_id_for

    schedule = schedule_id_for(name, world_asset(name).spec.period_for_key(day).range_start)
    return world.job_log().inspect_claim(schedule)


def world_asset(name: str):
    from sharp_dagster.definitions import LOG_ASSETS

    return LOG_ASSETS[name]


def ensure_success(world: World, name: str, day: str) -> None:
    """Make `name [day]` SUCCESS with everything it waits for (earlier periods, same-day upstreams) first, by
    fault-free runs in this process; what is SUCCESS already is left alone (any test order works)."""
    latest = attempts(world, name, day)
    if latest and latest[-1].status == SUCCESS:
        return
    prepare(world, name, day)
    result = materialize_here(world, name, day)
    assert result.success, f"set-up run of {name} [{day}] failed: {failure_text(result)}"


def prepare(world: World, name: str, day: str) -> None:
    """Everything `name [day]` waits for made SUCCESS: its earlier period and its same-day upstreams."""
    asset = world_asset(name)
    previous = (date.fromisoformat(day) - timedelta(days=1)).isoformat()
    if previous >= asset.spec.start.date().isoformat():
        ensure_success(world, name, previous)
    for upstream in asset.upstream:
        ensure_success(world, upstream, day)


# ---------------------------------------------------------------------------------------------------- tables
def _ref(name: str):
    from sharp_dagster.resources.io_manager import table_ref_for

    return table_ref_for(name.split("/"), world_asset(name).spec.grain)


def _sort_key(row: tuple) -> tuple:
    return tuple((v is None, str(v)) for v in row)


def published(world: World, name: str, day: str) -> list[tuple]:
    """The partition's rows on the table's `main` (what every reader reads), sorted, duplicates kept; an ODS
    table's day is its tag (`ods.<t> VERSION AS OF '<day>'`)."""
    from sharp_dagster.cdc.ods import store as ods_store

    tables = world.tables()
    ref = _ref(name)
    if not tables.exists(ref):
        return []
    qualified = tables.name(ref)
    world.tables().spark.catalog.refreshTable(qualified)
    if ref.database == "ods":
        if day not in ods_store.published_days(tables, ref.name):
            return []
        rows = ods_store.read_version(tables, ref.name, day).collect()
    else:
        rows = tables.spark.table(qualified).where(f"dt = '{day}'").collect()
    return sorted((tuple(r) for r in rows), key=_sort_key)


def current_publish(world: World, name: str) -> dict[str, str]:
    """Which attempt and run published the table's current snapshot: its `sharp.*` properties; for an ODS table
    (its publish moves references, its merge commits carry no properties) the snapshot and the run of the attempt
    whose `publish` step names it."""
    tables = world.tables()
    ref = _ref(name)
    if ref.database != "ods":
        current = [h for h in tables.history(ref) if h["is_current"]]
        return current[-1]["properties"] if current else {}
    snapshot = tables.current_snapshot_id(ref)
    jl = world.job_log()
    for run in jl.recent(name, limit=100):
        for step in jl.steps(run.job_id):
            if step.step_id == "publish" and f" as snapshot {snapshot}" in (step.output or ""):
                return {"snapshot": str(snapshot), "run_id": str(run.run_id), "attempt": str(run.attempt)}
    return {"snapshot": str(snapshot)}


def stage_branches(world: World, name: str, day: str) -> list[str]:
    """Staging branches of this partition still in the asset's tables (left by a run that died before publishing).

    An ODS merge stages two tables, `ods.<t>` and its tombstones `ods_state.<t>`: both are looked at."""
    from sharp_dagster.spark.tables import TableRef
    from sharp_dagster.spark.wap import branch_name

    prefix = branch_name(f"{day}_")
    ref = _ref(name)
    refs = [ref] + ([TableRef("ods_state", ref.name, ref.partition_cols)] if ref.database == "ods" else [])
    tables = world.tables()
    return sorted(
        f"{r.qualified}@{b}" for r in refs for b in tables.staged_branches(r) if b.startswith(prefix)
    )


def assert_equals_reference(world: World, name: str, day: str, rows: list[tuple]) -> int:
    """Run the partition again, fault-free, and compare row for row; returns the number of rows compared.

    The re-run reads the same upstream periods the recovered run read (a fault on `day` touches only `day`'s
    outputs), so it is the fault-free result."""
    assert rows, f"{name} [{day}] published no rows"
    before = last_attempt(world, name, day)
    reference = materialize_here(world, name, day)
    assert reference.success, f"the reference run failed: {failure_text(reference)}"
    assert attempts(world, name, day)[-1].attempt == before + 1
    expected = published(world, name, day)
    assert rows == expected, f"{name} [{day}]: recovered rows differ from a fault-free run's"
    assert len(set(rows)) == len(rows), f"{name} [{day}]: duplicated rows"
    return len(rows)


# ---------------------------------------------------------------------------------------------------- figures
def record(fault: str, backend: str, **figures: Any) -> dict:
    """Print one fault's figures (`pytest -s`) and append them as a JSON line to $SHARP_FAULT_FIGURES if set."""
    line = {"fault": fault, "backend": backend, **figures}
    for k, v in line.items():
        if isinstance(v, float):
            line[k] = round(v, 2)
    print(f"\nFAULT FIGURES {json.dumps(line)}")
    target = os.environ.get(FIGURES_ENV)
    if target:
        with open(target, "a") as fh:
            fh.write(json.dumps(line) + "\n")
    return line
