"""Judge a rule set's custom SQL by Spark's plan ahead of a run (`sharp-dagster dqc rules --spark`).

The code location loads rules without a Spark session (sqlglot's early check only); the runner judges each rule by
Spark's plan at its first use in a run (`plan_guard`). This does the same judgement on demand: each `custom_sql`
rule is compiled for a sample partition over an empty view with the columns of its asset's published table (the
staged rows have them), and its rendered SQL goes through `plan_guard.check_rendered` against the real catalog.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from dataclasses import dataclass

from sharp_dagster.dqc.compiler import compile_rules
from sharp_dagster.dqc.context import RuleContext
from sharp_dagster.dqc.plan_guard import NotAnalysed, check_rendered, confined
from sharp_dagster.dqc.rules import Rule, locate
from sharp_dagster.dqc.sqlguard import SqlRejected
from sharp_dagster.naming import qualified

SAMPLE_PARTITION = "2000-01-01"


@dataclass(frozen=True)
class SparkVerdict:
    rule: Rule
    status: (
        str  # "accepted", "refused", "unchecked" (its table is not in the warehouse / Spark cannot analyse)
    )
    message: str = ""


def check_rules(spark, rules: Iterable[Rule]) -> list[SparkVerdict]:
    """Every custom_sql rule of `rules` judged by Spark's plan of its rendered SQL; other rules are skipped."""
    out: list[SparkVerdict] = []
    with confined(spark):
        for rule in rules:
            if rule.template == "custom_sql":
                out.append(_check_one(spark, rule))
    return out


def _check_one(spark, rule: Rule) -> SparkVerdict:
    table = qualified(rule.asset)
    if not spark.catalog.tableExists(table):
        return SparkVerdict(rule, "unchecked", f"{rule.source}: rule {rule.id!r}: table {table} is not in the "
                            "warehouse yet (it is checked at its first run)")  # fmt: skip
    view = f"dqc_check_{uuid.uuid4().hex[:12]}"
    spark.table(table).limit(0).createOrReplaceTempView(view)
    try:
        (item,) = compile_rules([rule], view, RuleContext(partition_key=SAMPLE_PARTITION)).rules
        if item.error or not item.query:
            return SparkVerdict(rule, "refused", f"{rule.source}: rule {rule.id!r}: {item.error}")
        check_rendered(spark, item.query, view, rule.reads)
    except NotAnalysed as exc:
        return SparkVerdict(rule, "unchecked", f"{locate(rule, exc)}: rule {rule.id!r}: {exc}")
    except SqlRejected as exc:
        return SparkVerdict(rule, "refused", f"{locate(rule, exc)}: rule {rule.id!r}: {exc}")
    finally:
        spark.catalog.dropTempView(view)
    return SparkVerdict(rule, "accepted")
