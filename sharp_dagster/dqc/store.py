"""The `dqc_result` table: every rule evaluation (passes included) per asset partition, and its readers.

One row per evaluation, never updated: re-running a partition adds rows, and readers take the latest
evaluation per (rule, partition) — the highest `id`, which is monotonic where `evaluated_at` may tie.
`history()` feeds fluctuation rules; `recent()` feeds the report. The schema is created by the Alembic revision
`0002_dqc_result` (tests may call `metadata.create_all`).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, date, datetime
from decimal import Decimal
from typing import Any

from sqlalchemy import (
    Boolean,
    Column,
    DateTime,
    Double,
    Index,
    Integer,
    String,
    Table,
    Text,
    func,
    insert,
    select,
)
from sqlalchemy.engine import Engine

from sharp_dagster.db import metadata
from sharp_dagster.dqc.evaluate import RuleResult

dqc_result = Table(
    "dqc_result",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("run_id", String(64), nullable=True),
    Column("asset", String(255), nullable=False),
    Column("partition", String(64), nullable=False),  # '' for an unpartitioned asset
    Column("rule_id", String(128), nullable=False),
    Column("rule_version", String(32), nullable=False),
    Column("template", String(64), nullable=True),
    Column("dimension", String(32), nullable=False),
    Column("severity", String(16), nullable=False),
    Column("comparator", String(16), nullable=False),
    Column("actual", Double, nullable=True),
    Column("expected", Double, nullable=True),
    Column("lower_bound", Double, nullable=True),
    Column("upper_bound", Double, nullable=True),
    Column("passed", Boolean, nullable=False),
    Column("downgraded", Boolean, nullable=False),
    Column("message", Text, nullable=True),
    Column("failing_keys", Text, nullable=True),  # JSON list
    Column("evaluated_at", DateTime, nullable=False),  # naive UTC
    Column("elapsed_ms", Double, nullable=True),
    Index("ix_dqc_result_asset_rule_partition", "asset", "rule_id", "partition"),
)


def _json_default(value: Any) -> Any:
    if isinstance(value, datetime | date):
        return value.isoformat()
    if isinstance(value, Decimal):
        return float(value)
    if isinstance(value, bytes | bytearray):
        return value.hex()
    return str(value)


def keys_to_json(keys: list[Any]) -> str:
    return json.dumps(keys, default=_json_default, ensure_ascii=False)


@dataclass(frozen=True)
class StoredResult:
    id: int
    run_id: str | None
    asset: str
    partition: str
    rule_id: str
    rule_version: str
    template: str | None
    dimension: str
    severity: str
    comparator: str
    actual: float | None
    expected: float | None
    lower_bound: float | None
    upper_bound: float | None
    passed: bool
    downgraded: bool
    message: str | None
    failing_keys: list[Any]
    evaluated_at: datetime
    elapsed_ms: float | None

    @property
    def status(self) -> str:
        return "warn" if self.downgraded else ("pass" if self.passed else "fail")


@dataclass(frozen=True)
class HistoryPoint:
    partition: str
    actual: float
    evaluated_at: datetime


def _naive_utc(ts: datetime | None) -> datetime:
    if ts is None:
        return datetime.now(UTC).replace(tzinfo=None)
    return ts.astimezone(UTC).replace(tzinfo=None) if ts.tzinfo else ts


def _float(v: Any) -> float | None:
    return None if v is None else float(v)


class DqcStore:
    """Reads and writes `dqc_result` through one SQLAlchemy engine."""

    def __init__(self, engine: Engine):
        self.engine = engine

    def save(self, results: Iterable[RuleResult]) -> int:
        rows = [
            {
                "run_id": r.run_id,
                "asset": r.asset,
                "partition": r.partition or "",
                "rule_id": r.rule_id,
                "rule_version": r.rule_version,
                "template": r.template,
                "dimension": r.dimension,
                "severity": r.severity,
                "comparator": r.comparator,
                "actual": _float(r.actual),
                "expected": _float(r.expected),
                "lower_bound": _float(r.lower_bound),
                "upper_bound": _float(r.upper_bound),
                "passed": bool(r.passed),
                "downgraded": bool(r.downgraded),
                "message": r.message,
                "failing_keys": keys_to_json(r.failing_keys),
                "evaluated_at": _naive_utc(r.evaluated_at),
                "elapsed_ms": _float(r.elapsed_ms),
            }
            for r in results
        ]
        if rows:
            with self.engine.begin() as conn:
                conn.execute(insert(dqc_result), rows)
        return len(rows)

    def history(self, asset: str, rule_id: str, limit: int, before: str | None = None) -> list[HistoryPoint]:
        """The rule's actual values of its last `limit` partitions before `before` (all when None), oldest first.

        One value per partition: the latest evaluation that measured something (actual not NULL).
        """
        t = dqc_result
        cond = [t.c.asset == asset, t.c.rule_id == rule_id, t.c.actual.is_not(None)]
        if before is not None:
            cond.append(t.c.partition < before)
        latest = select(func.max(t.c.id)).where(*cond).group_by(t.c.partition)
        q = (
            select(t.c.partition, t.c.actual, t.c.evaluated_at)
            .where(t.c.id.in_(latest))
            .order_by(t.c.partition.desc())
            .limit(int(limit))
        )
        with self.engine.connect() as conn:
            rows = conn.execute(q).all()
        return [HistoryPoint(r.partition, float(r.actual), r.evaluated_at) for r in reversed(rows)]

    def recent(self, asset: str, limit: int = 14) -> list[StoredResult]:
        """Latest evaluation per (rule, partition) over the asset's `limit` newest partitions, by rule then partition."""
        t = dqc_result
        parts = (
            select(t.c.partition)
            .where(t.c.asset == asset)
            .group_by(t.c.partition)
            .order_by(t.c.partition.desc())
            .limit(int(limit))
        )
        with self.engine.connect() as conn:
            wanted = [r.partition for r in conn.execute(parts)]
            if not wanted:
                return []
            latest = (
                select(func.max(t.c.id))
                .where(t.c.asset == asset, t.c.partition.in_(wanted))
                .group_by(t.c.rule_id, t.c.partition)
            )
            rows = conn.execute(
                select(t).where(t.c.id.in_(latest)).order_by(t.c.rule_id, t.c.partition)
            ).all()
        return [self._stored(r) for r in rows]

    def assets(self) -> list[str]:
        with self.engine.connect() as conn:
            return [
                r[0] for r in conn.execute(select(dqc_result.c.asset).distinct().order_by(dqc_result.c.asset))
            ]

    @staticmethod
    def _stored(r: Any) -> StoredResult:
        m = r._mapping
        return StoredResult(
            id=m["id"],
            run_id=m["run_id"],
            asset=m["asset"],
            partition=m["partition"],
            rule_id=m["rule_id"],
            rule_version=m["rule_version"],
            template=m["template"],
            dimension=m["dimension"],
            severity=m["severity"],
            comparator=m["comparator"],
            actual=_float(m["actual"]),
            expected=_float(m["expected"]),
            lower_bound=_float(m["lower_bound"]),
            upper_bound=_float(m["upper_bound"]),
            passed=bool(m["passed"]),
            downgraded=bool(m["downgraded"]),
            message=m["message"],
            failing_keys=json.loads(m["failing_keys"]) if m["failing_keys"] else [],
            evaluated_at=m["evaluated_at"],
            elapsed_ms=_float(m["elapsed_ms"]),
        )
