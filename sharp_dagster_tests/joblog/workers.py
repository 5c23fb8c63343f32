"""Functions run in separate processes by the concurrency tests; importable by the children."""

from __future__ import annotations

import multiprocessing
import traceback

PRELOAD = ["sharp_dagster.joblog.store", "sharp_dagster.joblog.planner", "sharp_dagster_tests.joblog.workers"]


def context():
    """A forkserver context: every child is a fresh process (no inherited engines or connections), forked from
    a server that imported the job log once, so ten children start in a fraction of the time of ten spawns."""
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(PRELOAD)
    return ctx


def race_claims(url: str, job_name: str, partition_key: str, processes: int = 10) -> list[tuple]:
    """`processes` fresh processes claim one period at the same moment; their outcomes (none may error)."""
    ctx = context()
    barrier = ctx.Barrier(processes)
    results = ctx.Queue()
    procs = [
        ctx.Process(target=claim_once, args=(url, job_name, partition_key, f"run-{i}", barrier, results))
        for i in range(processes)
    ]
    for p in procs:
        p.start()
    outcomes = [results.get(timeout=180) for _ in procs]
    for p in procs:
        p.join(timeout=60)
    errors = [o for o in outcomes if o[0] == "error"]
    assert not errors, errors[0][2]
    return outcomes


def claim_once(url: str, job_name: str, partition_key: str, run_id: str, barrier, results) -> None:
    """Open the job log, wait for every sibling, claim the period once, report, and exit holding the claim."""
    try:
        from datetime import datetime

        from sharp_dagster.joblog.errors import ClaimRefused
        from sharp_dagster.joblog.store import JobLog
        from sharp_dagster.periods import PeriodSpec

        job_log = JobLog(url)
        period = PeriodSpec("daily", datetime(2024, 1, 1)).period_for_key(partition_key)
        barrier.wait(timeout=120)
        try:
            handle = job_log.claim(job_name, period, run_id)
            results.put(("won", run_id, handle.job_id))
        except ClaimRefused as exc:
            results.put(("refused", run_id, str(exc)))
    except Exception:
        results.put(("error", run_id, traceback.format_exc()))


def upgrade_schema(url: str, barrier, results) -> None:
    """Run the schema upgrade at the same moment as the siblings."""
    try:
        from sharp_dagster.joblog.migrate import ensure_schema

        barrier.wait(timeout=120)
        ensure_schema(url)
        results.put(("ok", None, None))
    except Exception:
        results.put(("error", None, traceback.format_exc()))


def run_periods(url: str, job_name: str, keys: list[str], barrier, results) -> None:
    """Claim and finish hourly periods one after another (SUCCESS), racing siblings working on neighbours."""
    try:
        from datetime import datetime

        from sharp_dagster.joblog.models import SUCCESS
        from sharp_dagster.joblog.store import JobLog
        from sharp_dagster.periods import PeriodSpec

        job_log = JobLog(url)
        spec = PeriodSpec("hourly", datetime(2024, 1, 1))
        barrier.wait(timeout=120)
        for key in keys:
            handle = job_log.claim(job_name, spec.period_for_key(key), f"run-{key}")
            job_log.finish(handle, SUCCESS)
        results.put(("ok", None, None))
    except Exception:
        results.put(("error", None, traceback.format_exc()))
