"""Under CI a skip fails the run (ci_skips.py): a child pytest on a small generated test file that skips in
every way a test can, run with and without `CI`."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from sharp_dagster.settings import REPO_ROOT

SKIPPING = textwrap.dedent(
    """
    import pytest

    @pytest.fixture
    def missing_server():
        pytest.skip("no server binary here")

    def test_passes():
        assert 1 + 1 == 2

    def test_skips_in_body():
        pytest.skip("no browser here")

    def test_skips_in_fixture(missing_server):
        pass

    @pytest.mark.skipif(True, reason="marked away")
    def test_skipif_mark():
        pass

    @pytest.mark.xfail(reason="a known bug", strict=True)
    def test_expected_failure():
        assert False
    """
)
MODULE_SKIP = 'import pytest\npytest.skip("whole module away", allow_module_level=True)\n'
REASONS = ("no server binary here", "no browser here", "marked away")


def run_child(folder: Path, ci: str | None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    if ci is not None:
        env["CI"] = ci
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
    (folder / "pytest.ini").write_text("[pytest]\n")  # keep the repo's pytest settings out of the child
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "sharp_dagster_tests.ci_skips", "-p", "no:cacheprovider"]
        + ["-ra", "-c", str(folder / "pytest.ini"), "--rootdir", str(folder), str(folder)],
        cwd=folder,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.fixture
def skipping_tests(tmp_path) -> Path:
    (tmp_path / "test_skipping.py").write_text(SKIPPING)
    return tmp_path


@pytest.mark.parametrize("ci", ["true", "1", "yes"])
def test_a_skip_fails_the_run_under_ci(skipping_tests, ci):
    child = run_child(skipping_tests, ci)
    out = child.stdout + child.stderr
    assert child.returncode == 1, out
    assert "skipped under CI" in out, out
    for reason in REASONS:
        assert reason in out, f"{reason!r} not reported:\n{out}"
    # The skip in the test body is a failure; skips in setup (fixture, mark) are errors; both fail the run.
    assert "1 passed" in out and "1 failed" in out and "2 errors" in out and "1 xfailed" in out, out
    assert " skipped" not in out.splitlines()[-1], out


@pytest.mark.parametrize("ci", [None, "", "0", "false", "No"])
def test_without_ci_a_skip_is_only_reported(skipping_tests, ci):
    child = run_child(skipping_tests, ci)
    out = child.stdout + child.stderr
    assert child.returncode == 0, out
    assert "1 passed, 3 skipped, 1 xfailed" in out, out
    assert all(reason in out for reason in REASONS), out  # -ra prints the skip summary with the reasons


def test_a_module_skipped_at_collection_fails_the_run_under_ci(tmp_path):
    (tmp_path / "test_module_skip.py").write_text(MODULE_SKIP)
    (tmp_path / "test_ok.py").write_text("def test_ok():\n    pass\n")
    under_ci = run_child(tmp_path, "true")
    assert under_ci.returncode != 0 and "whole module away" in under_ci.stdout, under_ci.stdout
    assert "collection skipped under CI" in under_ci.stdout, under_ci.stdout
    without = run_child(tmp_path, None)
    assert without.returncode == 0 and "1 passed, 1 skipped" in without.stdout, without.stdout
