"""Under CI a skipped test fails the run: a skip there means a real component (PostgreSQL, Chromium, MariaDB...)
was missing and its tests silently did not run.

`CI` set to anything but "", "0", "false" or "no" turns each skip (a `pytest.skip` in a test or fixture, a
skip/skipif mark, a module-level skip at collection) into a failure whose message keeps the skip's reason.
Expected failures (xfail) are left alone. Loaded by sharp_dagster_tests/conftest.py; a pytest run elsewhere can
load it with `-p sharp_dagster_tests.ci_skips`.
"""

from __future__ import annotations

import os

import pytest

FALSE_VALUES = ("", "0", "false", "no")


def ci_enabled() -> bool:
    return os.environ.get("CI", "").strip().lower() not in FALSE_VALUES


def _reason(longrepr) -> str:
    # A skip's longrepr is (path, lineno, "Skipped: reason"); anything else is shown as it is.
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        path, lineno, message = longrepr
        return f"{message} ({path}:{lineno})"
    return str(longrepr)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    report = yield
    if report.skipped and not hasattr(report, "wasxfail") and ci_enabled():
        report.outcome = "failed"
        report.longrepr = f"skipped under CI (CI={os.environ['CI']!r}), which counts as a failure: {_reason(report.longrepr)}"
    return report


@pytest.hookimpl(wrapper=True)
def pytest_make_collect_report(collector):
    report = yield
    if report.skipped and ci_enabled():
        report.outcome = "failed"
        report.longrepr = f"collection skipped under CI (CI={os.environ['CI']!r}): {_reason(report.longrepr)}"
    return report
