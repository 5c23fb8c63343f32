"""The later periods a run re-publishes with its own: audited before the publish, reported after it.

A run of ODS day D while later days are published (a refresh, `log rerun`) re-merges every later day after D on the
same branch and publishes them all at once (`cdc/ods_stage.StagedOds`). Their states are new data: the strong rules
must keep a bad one out as they keep a bad D out. What a run stages offers those periods as `later_parts`,
(partition key, the part read at that period's own state); a table partition offers none. For each, oldest first:

- before the publish, all the asset's rules run against the part with that period's own parameters (its partition
  key, dt, window and counts: `rules.rule_context`), recorded in `dqc_result` under that partition and, one line per
  period and rule, in the run's `checks_later` step. The first period whose strong rules fail ends the audit: the
  step is FAILURE naming it, nothing is published (the branch is dropped, `main` and every tag stay), the failed
  rules are alerted and the run fails naming the period, the rule and the observed vs expected value;
- after the publish, the later period's weak rules are reported and alerted like the run's own, and Dagster is told
  what happened to that partition: materialized again by this run, with its check evaluations (partitioned checks:
  `AssetCheckEvaluation(partition=...)`). A blocked re-publish tells Dagster nothing about the later partitions:
  their published data did not change, and the rules it passed when published still hold for it.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from dagster import AssetCheckEvaluation, AssetMaterialization, Failure

from sharp_dagster.dqc.evaluate import RuleResult
from sharp_dagster.dqc.rules import Rule
from sharp_dagster.dqc.runner import BlockingFailure, RuleRunner, blocking_failures, failed_rule_names
from sharp_dagster.dqc.store import DqcStore
from sharp_dagster.joblog import FAILURE
from sharp_dagster.publish.rules import alert, check_fields, register_other_tables, rule_context, scanned
from sharp_dagster.publish.run import AssetPublish, PartitionRun, Staged
from sharp_dagster.redact import scrub_text
from sharp_dagster.spark.iceberg import IcebergTables


class LaterPeriodFailed(BlockingFailure):
    """A later period's strong rules failed on its re-built state: nothing of the run may be published."""

    def __init__(self, key: str, results: list[RuleResult]):
        super().__init__(results)
        self.key = key
        self.args = (f"the re-published later day {key}: {self.args[0]}",)


@dataclass(frozen=True)
class LaterAudit:
    """One later period a run re-publishes: its staged part and its rules' results (none when the asset has no
    rules)."""

    key: str
    part: Staged
    results: list[RuleResult]


def audit_later(
    run: PartitionRun, store: IcebergTables, staged: Any, asset: AssetPublish
) -> list[LaterAudit]:
    """Every rule of `asset` for every later period against its part, one scan each, as the run's `checks_later`
    step; stops after the first period whose strong rules fail (FAILURE: the caller publishes nothing,
    `first_failed`)."""
    parts, rules = list(staged.later_parts), asset.rules
    if not parts or not rules:
        return [LaterAudit(key, part, []) for key, part in parts]
    audited: list[LaterAudit] = []
    with run.step("checks_later", source_type="spark") as rec:
        register_other_tables(store, list(rules), asset.grains)
        runner = RuleRunner(store.spark, store=DqcStore(run.job_log.engine))
        rec.source_count = 0
        for key, part in parts:
            # A later day's key, read once into its period (the run's own period was parsed when it started).
            ctx = rule_context(run, part, later=run.asset.spec.period_for_key(key))
            results = runner.run(run.asset.job_name, key, scanned(store, part), rules, ctx)
            audited.append(LaterAudit(key, part, results))
            rec.source_count += part.row_count
            for r in results:
                rec.info(f"[{key}] [{r.severity}] {r.rule_id}: {r.status} ({r.message})")
            if blocking_failures(results):
                break
        found = [r for a in audited for r in a.results]
        rec.success_count = sum(1 for r in found if r.passed)
        rec.failure_count = len(found) - rec.success_count
        rec.info(_summary(run, parts, audited, rules))
        if first_failed(audited) is not None:
            rec.status = FAILURE
    return audited


def _summary(run: PartitionRun, parts, audited: list[LaterAudit], rules: Sequence[Rule]) -> str:
    strong = sum(1 for r in rules if r.severity == "strong")
    each = f"{len(rules)} rule(s) each ({strong} strong)"
    failed = first_failed(audited)
    if failed is None:
        days = ", ".join(a.key for a in audited)
        return (
            f"audited the {len(audited)} later day(s) {run.key}'s run re-publishes ({days}) before the "
            f"publish: {each}, every strong rule passed"
        )
    names = failed_rule_names(failed.results)
    skipped = [key for key, _ in parts[len(audited) :]]
    rest = f"; not audited: {', '.join(skipped)}" if skipped else ""
    return (
        f"the re-published later day {failed.key} failed strong rule(s) {names} ({each}): nothing is "
        f"published{rest}"
    )


def first_failed(audited: list[LaterAudit]) -> LaterAudit | None:
    return next((a for a in audited if blocking_failures(a.results)), None)


def later_gate(run: PartitionRun, audited: list[LaterAudit]) -> None:
    """Before the publish: when a later period's strong rule failed, alert it, record FAILURE (the branch is
    dropped: nothing published) and fail the run naming the period, the rule and its observed vs expected value."""
    failed = first_failed(audited)
    if failed is None:
        return
    error = LaterPeriodFailed(failed.key, blocking_failures(failed.results))
    alert(error.results, run.job_log.engine)
    run.fail(error)
    raise Failure(
        description=scrub_text(f"{run.asset.job_name} [{run.key}] not published: {error}"),
        metadata={"later_partition": failed.key, "failed_rules": [r.rule_id for r in error.results]},
    )


def later_report(context: Any, run: PartitionRun, audited: list[LaterAudit]) -> Iterator:
    """After the publish: each later partition materialized again by this run, its check evaluations, and its weak
    rules' failures warned and alerted (never stops the pipeline)."""
    for a in audited:
        rows = a.part.row_count
        yield AssetMaterialization(
            asset_key=context.asset_key,
            partition=a.key,
            description=f"re-published by the run of {run.key} (its re-merged state after {run.key})",
            metadata={
                "dagster/row_count": rows,
                "dagster/partition_row_count": rows,
                "republished_by": run.key,
            },
        )
        for r in a.results:
            yield AssetCheckEvaluation(
                asset_key=context.asset_key, check_name=r.rule_id, partition=a.key, **check_fields(r)
            )
        failing = [r for r in a.results if r.severity != "strong" and not r.passed]
        if failing:
            context.log.warning(
                f"{run.asset.job_name} [{a.key}] (re-published by [{run.key}]): weak rules failed: "
                + "; ".join(r.message for r in failing)
            )
            alert(failing, run.job_log.engine)
