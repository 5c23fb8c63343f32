"""The Spark jobs of one small table-day on the single-day ODS path (one asset, one day, as the daily job or the
log-driven sensor runs it), counted and held to a ceiling: what every table-day pays whatever its size (issue 46:
the stage, the small-day merge, the rules, the fence, the publish and tag, the counts, the schema check).

Counted, not timed: the job ids submitted during the run (a job group of the test's own, and the jobs in no group
that appeared meanwhile); the landing before it is not counted. On failure the message lists each job's call site."""

from __future__ import annotations

from dagster import AssetKey, materialize

from sharp_dagster_tests.logdriven.range_support import DAYS

MAX_JOBS = (
    14  # main at 216f4f4: 16 (the two day counts and the rule scan each two jobs under adaptive execution)
)


def _call_sites(tracker, jobs: list[int]) -> list[str]:
    out = []
    for job in sorted(jobs):
        info = tracker.getJobInfo(job)
        stages = [tracker.getStageInfo(s) for s in (info.stageIds if info else [])]
        out.append(f"{job}: {'; '.join(sorted({s.name for s in stages if s}))}")
    return out


def test_a_small_table_day_stays_under_its_spark_jobs(own_feed, spark):
    feed = own_feed
    feed.land(DAYS[0])
    sc = spark.sparkContext
    tracker = sc.statusTracker()
    group = "ods-table-day-jobs"
    before = set(tracker.getJobIdsForGroup(None))
    sc.setJobGroup(group, "count the Spark jobs of one small ODS table-day")
    try:
        result = materialize(
            list(feed.defs.assets),
            selection=[AssetKey(["ods", "product"])],
            partition_key=DAYS[0],
            instance=feed.instance,
            resources=feed.defs.resources,
            raise_on_error=False,
        )
    finally:
        sc.setLocalProperty("spark.jobGroup.id", None)
    assert result.success
    checks = result.get_asset_check_evaluations()
    assert checks and all(c.passed for c in checks), [(c.check_name, c.passed) for c in checks]
    jobs = list(tracker.getJobIdsForGroup(group)) + sorted(set(tracker.getJobIdsForGroup(None)) - before)
    assert jobs, "the run's Spark jobs were not counted (not in the test's job group)"
    assert len(jobs) <= MAX_JOBS, (
        f"{len(jobs)} Spark jobs for one small table-day (at most {MAX_JOBS}):\n"
        + ("\n".join(_call_sites(tracker, jobs)))
    )
