"""Worlds of the fault matrix, built once per test session and shared by every fault test: one with the job log
(and Iceberg catalog) on SQLite, one on a private PostgreSQL server. Each test takes the world of its backend with
`world` (parametrized) and works on its own (table, day) partitions, so tests pass alone and in any order."""

from __future__ import annotations

import signal

import pytest

from sharp_dagster.demo.generator import generate
from sharp_dagster.servers.process import stop_process
from sharp_dagster_tests.faults.harness import BACKENDS, LANDED_UP_FRONT, SMALL, World, point_catalog
from sharp_dagster_tests.joblog.pgserver import PostgresServer, unavailable_reason


class RestartablePostgres(PostgresServer):
    """A private PostgreSQL server that can be stopped and started again on the same data and port (the
    "job-log database goes away and comes back" fault); `stop()` (the base class's) ends it for good."""

    def halt(self) -> None:
        """Fast shutdown (SIGINT to its pid: clients are disconnected), the data kept."""
        assert self.process is not None and self.process.poll() is None, "the server is not running"
        stop_process(self.process, grace_seconds=30, stop_signal=signal.SIGINT)

    def resume(self, timeout_s: float = 30.0) -> None:
        """Start the server again on its data folder and port (no initdb)."""
        self.launch(timeout_s)


def _build(backend: str, tmp_path_factory) -> World:
    """Sample shop, broker, (PostgreSQL), ODS states bootstrapped and the first days landed."""
    from dagster import DagsterInstance

    from sharp_dagster.definitions import defs
    from sharp_dagster.servers.broker import LocalBroker
    from sharp_dagster.settings import KAFKA_ENV, Settings
    from sharp_dagster_tests.cdc_support import CdcFeed

    root = tmp_path_factory.mktemp(f"faults_{backend}")
    pg, broker = None, None
    try:
        if backend == "postgresql":
            reason = unavailable_reason()
            assert reason is None, f"the PostgreSQL faults need a server: {reason}"  # never skipped
            pg = RestartablePostgres().start()
        broker = LocalBroker(base_dir=root / "kafka").start()
        env = {"SHARP_DATA_DIR": str(root / "data"), KAFKA_ENV: broker.bootstrap_servers}
        if pg is not None:
            env["SHARP_LOG_DB_URL"] = pg.create_database()
        world = World(backend, root, env, broker, pg=pg)
        with pytest.MonkeyPatch.context() as mp:  # this process's environment while the world is built
            for key, value in env.items():
                mp.setenv(key, value)
            if pg is None:
                mp.delenv("SHARP_LOG_DB_URL", raising=False)
            mp.setenv("SHARP_CLAIM_TIMEOUT_S", "120")  # the long claim timeout
            point_catalog()
            generate(Settings.from_env().sample_dir, SMALL)
            world.feed = CdcFeed(defs, DagsterInstance.ephemeral())
            for day in LANDED_UP_FRONT:
                world.feed.land(day)
        return world
    except BaseException:
        # A world that failed to build is never handed to the session fixture: its servers stop here.
        if broker is not None:
            broker.cleanup()
        if pg is not None:
            pg.stop()
        raise


@pytest.fixture(scope="session")
def worlds(spark, tmp_path_factory):
    """The worlds, built on first use; brokers and servers stopped by their pids at the end of the session."""
    built: dict[str, World] = {}

    def get(backend: str) -> World:
        if backend not in built:
            built[backend] = _build(backend, tmp_path_factory)
        return built[backend]

    yield get
    for world in built.values():
        world.broker.cleanup()
        if world.pg is not None:
            world.pg.stop()


@pytest.fixture(params=BACKENDS)
def world(request, worlds, monkeypatch) -> World:
    """The world of the test's backend, this process's settings pointed at it (claim timeout: the short one)."""
    from sharp_dagster_tests.faults.harness import STALE_S

    w = worlds(request.param).enter(monkeypatch)
    monkeypatch.setenv("SHARP_CLAIM_TIMEOUT_S", f"{STALE_S:g}")
    return w


@pytest.fixture()
def pg_world(worlds, monkeypatch) -> World:
    from sharp_dagster_tests.faults.harness import STALE_S

    w = worlds("postgresql").enter(monkeypatch)
    monkeypatch.setenv("SHARP_CLAIM_TIMEOUT_S", f"{STALE_S:g}")
    return w
