"""The explorer in headless Chromium (Playwright): a table page, a column expanded, the Sankey view, governance
warnings. Screenshots go to artifacts/screenshots/ (git-ignored)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from sharp_dagster.settings import REPO_ROOT
from sharp_dagster_tests.chromium import launch

SCREENSHOTS = REPO_ROOT / "artifacts" / "screenshots"
TIMEOUT_MS = 60_000  # a shared, loaded machine


@pytest.fixture(scope="module")
def browser() -> Iterator:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = launch(p)
        yield b
        b.close()


def _open(browser, url: str):
    page = browser.new_page(viewport={"width": 1280, "height": 1000})
    seen: dict[str, list[str]] = {"requests": [], "errors": []}
    page.on("request", lambda r: seen["requests"].append(r.url))
    page.on("pageerror", lambda e: seen["errors"].append(str(e)))
    page.goto(url)
    page.wait_for_selector("body[data-ready='1']", timeout=TIMEOUT_MS)
    return page, seen


def test_table_page_and_column_path(browser, project_server):
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page, seen = _open(browser, f"{project_server.url}/table/ads/gmv_by_category")
    try:
        assert page.locator("h1").inner_text() == "ads.gmv_by_category"
        graph = page.locator("#graph-chart")
        # Default view: both directions, depth 2; the SVG chart names the tables it draws.
        page.wait_for_function("document.querySelector('#graph-chart svg text') !== null", timeout=TIMEOUT_MS)
        assert "dwd.order_detail" in graph.inner_text() or "dwd.order_detail" in graph.inner_html()
        assert graph.get_attribute("data-vertices") == "5"  # itself, dwd, 3 ods tables
        page.select_option("#depth", "1")
        page.wait_for_function(
            "document.querySelector('#graph-chart').dataset.vertices === '2'", timeout=TIMEOUT_MS
        )
        page.select_option("#depth", "all")
        page.wait_for_function(
            "Number(document.querySelector('#graph-chart').dataset.vertices) > 5", timeout=TIMEOUT_MS
        )
        assert "shop.order_item" in graph.inner_html()  # the MySQL source, through the CDC path
        page.screenshot(path=str(SCREENSHOTS / "explorer_table_page.png"), full_page=True)

        page.click("tr[data-column='gmv'] button.expand")
        detail = page.locator("tr.detail[data-column='gmv'][data-ready='1']")
        detail.wait_for(timeout=TIMEOUT_MS)
        path_svg = detail.locator(".column-path").inner_html()
        for name in ("dwd.order_detail.line_amount", "ods.order_item.unit_price", "ods.order_item.quantity"):
            assert name in path_svg, name
        assert "Nothing downstream reads it" in detail.inner_text()
        detail.screenshot(path=str(SCREENSHOTS / "explorer_column_path.png"))
        page.click("tr[data-column='gmv'] button.expand")  # collapse again
        assert page.locator("tr.detail[data-column='gmv']").count() == 0

        page.select_option("#view", "sankey")
        page.wait_for_function(
            "document.querySelector('#graph-chart').innerHTML.includes('mysql:shop.order_item')",
            timeout=TIMEOUT_MS,
        )
        graph.screenshot(path=str(SCREENSHOTS / "explorer_sankey.png"))
        assert not seen["errors"], seen["errors"]
        # Everything, the drawing library included, came from our own server.
        assert seen["requests"] and all(u.startswith(project_server.url) for u in seen["requests"]), seen
    finally:
        page.close()


def test_drop_impact_in_the_page(browser, project_server):
    page, seen = _open(browser, f"{project_server.url}/table/dwd/order_detail")
    try:
        page.click("tr[data-column='line_amount'] button.expand")
        detail = page.locator("tr.detail[data-column='line_amount'][data-ready='1']")
        detail.wait_for(timeout=TIMEOUT_MS)
        broken = detail.locator("ul.impact-columns li").all_inner_texts()
        # Each broken column with the line of its SQL file that reads line_amount (as `lineage impact` names it).
        assert {b.strip() for b in broken} == {
            "ads.gmv_by_category.gmv read at ads/gmv_by_category.sql:8",
            "ads.gmv_by_category.gmv_share read at ads/gmv_by_category.sql:10",
            "ads.user_order_stats.order_amount read at ads/user_order_stats.sql:10",
        }
        assert "ads.user_order_stats.order_amount" in detail.locator(".column-impact").inner_html()
        detail.screenshot(path=str(SCREENSHOTS / "explorer_drop_impact.png"))
        # A link to a downstream table opens its page.
        page.locator("a", has_text="ads.user_order_stats").first.click()
        page.wait_for_url("**/table/ads/user_order_stats", timeout=TIMEOUT_MS)
        page.wait_for_selector("body[data-ready='1']", timeout=TIMEOUT_MS)
        assert page.locator("h1").inner_text() == "ads.user_order_stats"
        assert not seen["errors"], seen["errors"]
    finally:
        page.close()


def test_governance_warnings_in_the_page(browser, made_server):
    page, seen = _open(browser, f"{made_server.url}/table/ads/BadName")
    try:
        text = page.locator("#governance").inner_text()
        assert "Governance warnings" in text
        assert "reads a source" not in text  # ods.a is a warehouse table, named as such
        assert "ads table reads an ods table ods.a directly" in text
        assert "naming" in text
        page.screenshot(path=str(SCREENSHOTS / "explorer_governance.png"), full_page=True)
        assert not seen["errors"], seen["errors"]
    finally:
        page.close()


def test_home_page_lists_tables_and_warnings(browser, made_server):
    page, seen = _open(browser, f"{made_server.url}/")
    try:
        text = page.locator("main").inner_text()
        assert "2 governance warning(s)" in text
        links = set(page.locator("main a").all_inner_texts())
        assert {"ods.a", "dwd.b", "ads.c", "ads.BadName", "dwd.loop"} <= links
        page.fill("#jump-input", "dwd.b")
        page.press("#jump-input", "Enter")
        page.wait_for_url("**/table/dwd/b", timeout=TIMEOUT_MS)
        page.wait_for_selector("body[data-ready='1']", timeout=TIMEOUT_MS)
        assert page.locator("h1").inner_text() == "dwd.b"
        assert not seen["errors"], seen["errors"]
    finally:
        page.close()
