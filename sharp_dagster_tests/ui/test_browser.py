"""The Dagster UI in Chromium: the layered asset graph, and one partition of `dwd/order_detail` launched by hand.

`dagster dev` runs on a fresh DAGSTER_HOME whose instance already holds the upstream partitions (see
conftest.py). The browser opens the asset graph, opens the DWD asset, clicks Materialize, picks the partition
2024-01-02 in the launch dialog, launches, and follows the run until the UI shows it succeeded; GraphQL then
confirms the run's status and the asset's materialization of that partition by that run. Screenshots go to
`artifacts/ui/` (git-ignored).
"""

from __future__ import annotations

import re
import time

import pytest

pytestmark = pytest.mark.browser

PARTITION = "2024-01-02"
ASSET_PATH = ["dwd", "order_detail"]
LAYER_ASSETS = {
    "ods_shop": ["orders", "order_item", "product", "user_info"],  # an ODS group per CDC database
    "dwd": ["order_detail", "user_dim"],
    "ads": ["gmv_by_category", "user_order_stats"],
}
RUN_TIMEOUT = 180  # a run worker starts its own Spark driver: ~20-40 s here, more on a busy machine

RUN_QUERY = """query($id: ID!) { runOrError(runId: $id) { __typename
    ... on Run { id status tags { key value } }
    ... on PythonError { message } } }"""
FAILURE_QUERY = """query($id: ID!) { logsForRun(runId: $id) { __typename ... on EventConnection { events {
    __typename ... on ExecutionStepFailureEvent { stepKey error { message } } ... on RunFailureEvent { message } } } } }"""
MATERIALIZATIONS_QUERY = """query($path: [String!]!, $partitions: [String!]) {
  assetOrError(assetKey: {path: $path}) { __typename
    ... on Asset { assetMaterializations(partitions: $partitions) { partition runId
        metadataEntries { label __typename ... on IntMetadataEntry { intValue } } } } } }"""


def test_materialize_one_partition_from_the_ui(page, dagster_dev, gql, artifacts_dir, prepared):
    from playwright.sync_api import expect

    timings: dict[str, float] = {}
    step = "start"
    try:
        # 1. The asset graph: layer groups, expanded, with their assets.
        step = "asset graph"
        t0 = time.monotonic()
        page.goto(f"{dagster_dev.url}/asset-groups")
        expect(page).to_have_title(re.compile("asset lineage", re.I), timeout=60_000)
        for layer in LAYER_ASSETS:
            group = page.locator("foreignObject").filter(has=page.get_by_text(layer, exact=True))
            expect(group.first).to_be_visible(timeout=60_000)
            group.first.click()  # a collapsed group node expands on click (and records it in the URL)
            expect(page).to_have_url(re.compile(f"expanded=.*{layer}"))
        page.goto(page.url)  # reload with every layer expanded so the graph is fitted to the view
        for layer, names in LAYER_ASSETS.items():
            for name in names:
                # The reloaded page lays the graph out afresh (in a web worker): on a loaded machine that took
                # more than the default 5 s in CI, so the wait is the page's, as above.
                expect(
                    page.get_by_text(name, exact=True).first, f"{layer}/{name} in the graph"
                ).to_be_visible(timeout=60_000)
        _settle(page)
        page.screenshot(path=str(artifacts_dir / "asset-graph.png"))
        timings["graph"] = time.monotonic() - t0

        # 2. The DWD asset's page, Materialize..., one partition in the launch dialog.
        step = "launch dialog"
        t0 = time.monotonic()
        page.goto(f"{dagster_dev.url}/assets/{'/'.join(ASSET_PATH)}")
        expect(page.get_by_text("order_detail", exact=True).first).to_be_visible(timeout=60_000)
        page.get_by_role("button", name=re.compile(r"Materialize…$")).click()
        dialog = page.get_by_role("dialog").filter(has_text="Launch runs to materialize")
        expect(dialog).to_be_visible()
        expect(dialog).to_contain_text("dwd / order_detail")
        show_all = dialog.get_by_role("button", name="Show all partitions")
        try:  # many partitions: the dialog shows only the last 90 days until asked for all
            show_all.wait_for(state="visible", timeout=5_000)
            show_all.click()
        except Exception:
            pass
        keys = dialog.get_by_placeholder(re.compile(r"^ex: "))
        keys.fill(PARTITION)
        keys.press("Enter")
        expect(dialog).to_contain_text(re.compile(r"1 partition(?!s)"))
        launch = dialog.get_by_role("button", name="Launch 1 run")
        expect(launch).to_be_enabled()
        page.screenshot(path=str(artifacts_dir / "launch-dialog.png"))
        launch.click()
        timings["dialog"] = time.monotonic() - t0

        # 3. Follow the run from the "Launched run" toast's link until the UI shows its outcome.
        step = "run"
        t0 = time.monotonic()
        toast = page.get_by_text(re.compile(r"Launched run [0-9a-f]{8}")).first
        expect(toast).to_be_visible()
        short_id = re.search(r"Launched run ([0-9a-f]{8})", toast.inner_text()).group(1)
        link = page.locator(f'a[href^="/runs/{short_id}"]').filter(has_text="View").first
        href = link.get_attribute("href") or ""
        run_id = href.rsplit("/", 1)[-1]
        assert re.fullmatch(r"[0-9a-f-]{36}", run_id), f"no run id in the toast's link {href!r}"
        link.click()
        expect(page).to_have_url(re.compile(f"/runs/{run_id}"))
        outcome = _wait_run_outcome(page, dagster_dev.url, run_id)
        shot = "run-success.png" if outcome == "Success" else "run-failed.png"
        page.screenshot(path=str(artifacts_dir / shot))
        timings["run"] = time.monotonic() - t0
        if outcome != "Success":
            raise AssertionError(f"run {run_id} shows {outcome} in the UI: {_failure_messages(gql, run_id)}")

        # 4. GraphQL agrees: the run succeeded and it materialized exactly that partition.
        step = "graphql"
        run = gql(RUN_QUERY, {"id": run_id})["runOrError"]
        assert run["__typename"] == "Run" and run["status"] == "SUCCESS", run
        tags = {t["key"]: t["value"] for t in run["tags"]}
        assert tags.get("dagster/partition") == PARTITION, tags
        asset = gql(MATERIALIZATIONS_QUERY, {"path": ASSET_PATH, "partitions": [PARTITION]})["assetOrError"]
        assert asset["__typename"] == "Asset", asset
        mats = [m for m in asset["assetMaterializations"] if m["runId"] == run_id]
        assert len(mats) == 1 and mats[0]["partition"] == PARTITION, asset["assetMaterializations"]
        rows = {e["label"]: e.get("intValue") for e in mats[0]["metadataEntries"]}
        assert (rows.get("dagster/row_count") or 0) > 0, f"no rows recorded for the materialization: {rows}"
        print(f"run {run_id}: {rows.get('dagster/row_count')} rows; timings {timings}; {prepared}")
    except BaseException as exc:
        try:
            page.screenshot(path=str(artifacts_dir / "failure.png"))
        except Exception:
            pass
        if isinstance(exc, KeyboardInterrupt):
            raise
        raise AssertionError(
            f"UI test failed at step {step!r}: {exc}\n"
            f"(screenshot: {artifacts_dir / 'failure.png'})\n--- dagster dev log tail ---\n{dagster_dev.log_tail()}"
        ) from exc


def _settle(page) -> None:
    """Let the graph nodes finish loading their live data before a screenshot (not required to pass)."""
    try:
        page.get_by_text("Loading…").first.wait_for(state="hidden", timeout=15_000)
    except Exception:
        pass


def _wait_run_outcome(page, url: str, run_id: str) -> str:
    """Poll the run page until its status tag reads Success, Failure or Canceled; reload now and then in case the
    live update was missed."""
    deadline = time.monotonic() + RUN_TIMEOUT
    last_reload = time.monotonic()
    while time.monotonic() < deadline:
        for outcome in ("Success", "Failure", "Canceled"):
            if page.get_by_text(outcome, exact=True).first.is_visible():
                return outcome
        if time.monotonic() - last_reload > 20:
            page.goto(f"{url}/runs/{run_id}")
            last_reload = time.monotonic()
        page.wait_for_timeout(1_000)
    raise TimeoutError(f"run {run_id} showed no outcome in the UI within {RUN_TIMEOUT}s")


def _failure_messages(gql, run_id: str) -> str:
    try:
        events = gql(FAILURE_QUERY, {"id": run_id})["logsForRun"].get("events", [])
    except Exception as exc:  # the message is a diagnostic: never hide the real failure behind it
        return f"(could not read the run's events: {exc})"
    messages = [
        (e.get("error") or {}).get("message") or e.get("message") or ""
        for e in events
        if e["__typename"] in ("ExecutionStepFailureEvent", "RunFailureEvent")
    ]
    return "\n".join(m for m in messages if m) or "(no failure event)"
