"""Every benchmark still runs: each `bench/` module imports (a renamed or removed name fails here, not months later
in `make bench`), `run_all.py` knows every `bench_*.py`, and the benchmarks whose `--quick` mode takes seconds run
it to the end. The Spark-heavy ones (a minute or more each) are left to `run_all.py --quick`."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from sharp_dagster_tests.house.bench_support import BENCH, _load

MODULES = sorted(BENCH.glob("*.py"))

# --quick runs of a few seconds each, with no Spark session and no server (pending_queue: SQLite only), and the
# exit codes that mean the run completed (pending_queue exits 1 when a busy machine misses its latency target).
QUICK = {
    "lineage": ([], {0}),
    "pending_queue": (["--no-postgres", "--calls", "5"], {0, 1}),
}


@pytest.mark.parametrize("path", MODULES, ids=lambda p: p.stem)
def test_each_bench_module_imports(path):
    _load(path)


def test_run_all_knows_every_benchmark():
    run_all = _load(BENCH / "run_all.py")
    scripts = {p.name for p in MODULES if p.name.startswith("bench_")}
    assert set(run_all.BENCHMARKS.values()) == scripts
    assert set(QUICK) <= set(run_all.BENCHMARKS)


def test_the_pipeline_bench_probes_name_functions_that_exist():
    """bench_pipeline skips a probe whose function is gone (and lists it): here a renamed one fails instead."""
    import importlib

    missing = []
    for module_name, path, _ in _load(BENCH / "bench_pipeline.py").PROBES:
        owner = importlib.import_module(module_name)
        for attr in path.split("."):
            owner = getattr(owner, attr, None)
        if owner is None:
            missing.append(f"{module_name}:{path}")
    assert missing == []


@pytest.mark.parametrize("name", sorted(QUICK))
def test_quick_mode_runs(name):
    run_all = _load(BENCH / "run_all.py")
    args, completed = QUICK[name]
    cmd = [sys.executable, str(BENCH / run_all.BENCHMARKS[name]), "--quick", *args]
    proc = subprocess.run(cmd, cwd=BENCH.parent, capture_output=True, text=True)  # as run_all runs it
    assert proc.returncode in completed, proc.stderr[-2000:]
    result = run_all.last_json(proc.stdout)
    assert result and "error" not in result, json.dumps(result)[:2000]
    run_all.headline(name, result)  # the summary row of RESULTS.md is built from it
