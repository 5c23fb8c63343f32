"""Fixtures of the browser test: a data folder with upstream partitions ready, `dagster dev` on it, Chromium.

One data folder, one prepared set of upstream partitions and one `dagster dev` serve both UI tests (package scope:
stopped after the last test of `ui/`); the browser test materializes `dwd/order_detail`, the backfill test
`ods/product` from 2024-01-03 on, so neither sees the other's runs. Everything lives in one temp folder; `dagster
dev` and the run workers it starts get the folder through their environment (SHARP_DATA_DIR, DAGSTER_HOME), never
the repo's `data/`.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from sharp_dagster.settings import REPO_ROOT
from sharp_dagster_tests.chromium import ARGS, MISSING, find_chromium

ARTIFACTS = REPO_ROOT / "artifacts" / "ui"
# A bound for a hung materialization, not a speed check: seven asset-partitions (Spark starts, ODS merges onto a
# branch, publishes) took 168 s on a quiet machine and ran past 240 s under a load average of 12-36.
PREP_TIMEOUT = 900

# Upstream data the UI run needs, materialized through the code location's job into DAGSTER_HOME's instance
# (so the UI shows these runs too). argv: a JSON list of [partition, [asset keys]] in order.
PREP_SCRIPT = r"""
import json, sys
from dagster import AssetKey, DagsterInstance
from sharp_dagster.definitions import defs

job = defs.resolve_job_def("warehouse_daily")
quiet = {"loggers": {"console": {"config": {"log_level": "WARNING"}}}}
with DagsterInstance.get() as instance:
    from sharp_dagster_tests.cdc_support import CdcFeed

    feed = CdcFeed(defs, instance)  # bootstrap the ODS states from the snapshot
    for day in json.loads(sys.argv[2]):
        feed.land(day)  # the day's binlog through the broker into the raw table
    for partition, keys in json.loads(sys.argv[1]):
        result = job.execute_in_process(
            partition_key=partition, instance=instance, raise_on_error=False, run_config=quiet,
            asset_selection=[AssetKey(k.split("/")) for k in keys],
        )
        if not result.success:
            failure = next((e for e in result.all_events if e.is_step_failure), None)
            print(f"PREP FAILED {partition}: " + (failure.step_failure_data.error.to_string() if failure else "?"))
            sys.exit(1)
        print(f"prepared {partition}: {sorted(e.materialization.asset_key.to_user_string() for e in result.get_asset_materialization_events())}")
"""


def graphql(url: str, query: str, variables: dict | None = None, timeout: float = 30) -> dict:
    """POST a query to `url/graphql`; raise on GraphQL errors, naming them."""
    body = json.dumps({"query": query, "variables": variables or {}}).encode()
    req = urllib.request.Request(f"{url}/graphql", data=body, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        answer = json.loads(resp.read().decode("utf-8"))
    if answer.get("errors"):
        raise RuntimeError(f"GraphQL errors from {url}: {answer['errors']}")
    return answer["data"]


@pytest.fixture(scope="package")
def chromium_path() -> Path:
    found = find_chromium()
    if found is None:
        pytest.skip(MISSING)
    return found


@pytest.fixture(scope="package")
def artifacts_dir() -> Path:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    return ARTIFACTS


@pytest.fixture(scope="package")
def ui_env(tmp_path_factory) -> Iterator[dict[str, str]]:
    """The child processes' environment over a fresh data folder, with the sample shop generated."""
    from sharp_dagster.demo.generator import GeneratorConfig, generate

    root = tmp_path_factory.mktemp("ui")
    data_dir, home = root / "data", root / "dagster_home"
    home.mkdir(parents=True)
    (home / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
    env = dict(os.environ)
    for var in ("SHARP_WAREHOUSE_DIR", "SHARP_LOG_DB_URL", "SHARP_SPARK_MASTER", "SHARP_SPARK_DRIVER_HOST"):
        env.pop(var, None)
    env.update(
        {
            "SHARP_DATA_DIR": str(data_dir),
            "SHARP_SAMPLE_DIR": str(data_dir / "sample"),
            "DAGSTER_HOME": str(home),
            # Run workers each start a local Spark driver; keep them small on a shared machine.
            "SHARP_SPARK_CONF": "spark.driver.memory=1g",
            "PYSPARK_PYTHON": sys.executable,
            "PYSPARK_DRIVER_PYTHON": sys.executable,
            "PYTHONPATH": str(REPO_ROOT),
        }
    )
    generate(data_dir / "sample", GeneratorConfig(days=5))
    from sharp_dagster_tests.cdc_support import local_broker

    with local_broker() as broker:  # the binlog topic for the UI tests (stopped by its pid at the end)
        env["SHARP_KAFKA_BOOTSTRAP"] = broker.bootstrap_servers
        yield env


@pytest.fixture(scope="package")
def prepared(ui_env, tmp_path_factory) -> list[str]:
    """Materialize what `dwd/order_detail[2024-01-02]` needs.

    Its ODS inputs of 2024-01-02, and (because the job log runs every asset's partitions in order) both ODS days
    and `dwd/order_detail[2024-01-01]` before them. Returns the prep log lines.
    """
    plan = [
        ["2024-01-01", ["ods/orders", "ods/order_item", "ods/product", "dwd/order_detail"]],
        ["2024-01-02", ["ods/orders", "ods/order_item", "ods/product"]],
    ]
    work = tmp_path_factory.mktemp("prep")
    script = work / "prep.py"
    script.write_text(PREP_SCRIPT)
    t0 = time.monotonic()
    proc = subprocess.run(
        [
            sys.executable,
            str(script),
            json.dumps(plan),
            json.dumps(["2024-01-01", "2024-01-02", "2024-01-03"]),
        ],
        env=ui_env,
        cwd=work,
        capture_output=True,
        text=True,
        timeout=PREP_TIMEOUT,
        check=False,
    )
    # The step's own error first (the script prints it, over several lines, from "PREP FAILED"), then the log's tail.
    at = proc.stdout.find("PREP FAILED")
    failed = proc.stdout[at : at + 6000] if at >= 0 else ""
    output = (proc.stdout + proc.stderr)[-4000:]
    assert proc.returncode == 0, (
        f"materializing the upstream partitions failed ({proc.returncode}):\n{failed}\n{output}"
    )
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("prepared")]
    lines.append(f"prep took {time.monotonic() - t0:.1f}s")
    return lines


@pytest.fixture(scope="package")
def dagster_dev(ui_env, prepared, tmp_path_factory) -> Iterator:
    """`dagster dev` on a free port with the code location loaded; stopped by its pid at the end."""
    from sharp_dagster.servers.dagster_dev import DagsterDev

    work = tmp_path_factory.mktemp("dev")
    # 300 s: under CI's load (both test halves, load 15-20 on 2 cores) the webserver once took more than 120 s to
    # answer /server_info, and the backfill test failed before it began.
    dev = DagsterDev(env=ui_env, log_path=work / "dagster_dev.log", cwd=work, startup_timeout=300)
    dev.start()
    try:
        _wait_location_loaded(dev, timeout=300)
        yield dev
    finally:
        dev.stop()


def _wait_location_loaded(dev, timeout: float) -> None:
    query = """{ workspaceOrError { __typename ... on Workspace { locationEntries { name loadStatus
        locationOrLoadError { __typename ... on PythonError { message } } } } } }"""
    deadline = time.monotonic() + timeout
    state = None
    while time.monotonic() < deadline:
        data = graphql(dev.url, query)
        entries = data["workspaceOrError"].get("locationEntries", [])
        state = [(e["name"], e["loadStatus"], e["locationOrLoadError"]) for e in entries]
        for name, status, loaded in state:
            if status == "LOADED" and loaded and loaded["__typename"] == "PythonError":
                raise AssertionError(
                    f"code location {name} failed to load: {loaded['message']}\n{dev.log_tail()}"
                )
        if state and all(s == "LOADED" and loaded for _, s, loaded in state):
            return
        time.sleep(1)
    raise AssertionError(f"code location not loaded after {timeout:.0f}s: {state}\n{dev.log_tail()}")


@pytest.fixture()
def page(chromium_path):
    from playwright.sync_api import expect, sync_playwright

    # An assertion waits as long as an action (`set_default_timeout` below): Playwright's default 5 s is less
    # than the UI takes to lay out the asset graph on a loaded 2-core machine (a CI failure, reproduced with
    # Chromium's CPU throttled).
    expect.set_options(timeout=30_000)
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(chromium_path), headless=True, args=ARGS)
        try:
            context = browser.new_context(viewport={"width": 1600, "height": 1000})
            page = context.new_page()
            page.set_default_timeout(30_000)
            # On a fresh DAGSTER_HOME a "Join the Dagster community" dialog covers the page: skip it whenever
            # it shows up before an action.
            page.add_locator_handler(
                page.get_by_text("Join the Dagster community"),
                lambda _: page.get_by_role("button", name="Skip").click(),
            )
            yield page
        finally:
            browser.close()


@pytest.fixture(scope="package")
def gql(dagster_dev):
    """`gql(query, variables)` against the running `dagster dev`."""
    return lambda query, variables=None: graphql(dagster_dev.url, query, variables)


LAND_SCRIPT = r"""
import json, sys
from dagster import DagsterInstance
from sharp_dagster.definitions import defs
from sharp_dagster_tests.cdc_support import CdcFeed

with DagsterInstance.get() as instance:
    feed = CdcFeed(defs, instance, bootstrap=False)
    for day in json.loads(sys.argv[1]):
        feed.land(day)
        print(f"landed {day}")
"""


def land_days(env: dict[str, str], days: list[str], workdir: Path) -> None:
    """Replay and land the binlog of `days` in a child process on the UI's data folder and instance."""
    script = workdir / "land.py"
    script.write_text(LAND_SCRIPT)
    proc = subprocess.run(
        [sys.executable, str(script), json.dumps(days)],
        env=env,
        cwd=workdir,
        capture_output=True,
        text=True,
        timeout=PREP_TIMEOUT,
    )
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
