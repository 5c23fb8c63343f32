"""Write-audit-publish of one table partition on Iceberg branches (`IcebergTables` inherits it).

The cycle of one table partition:

1. `stage()` creates a branch `stage_<token>` at `main`'s current snapshot and replaces the partition *on that
   branch* (`df.writeTo("<cat>.<db>.<t>.branch_<b>").overwritePartitions()`): readers of `main` see nothing. The
   snapshot's summary carries the run's fencing token (`sharp.token`) and any extra properties (`sharp.<key>`).
2. `read_staged()` reads the branch: the data-quality gate audits exactly the rows that would be published.
3. `publish()` cherry-picks the staged snapshot onto `main` and drops the branch, in one metadata commit. When
   `main` has not moved since the branch was cut this is a fast-forward (no new snapshot, no copy). When another run
   published meanwhile, Iceberg re-applies the partition replacement only if *that partition* was not changed since
   the branch was cut; otherwise the publish fails with `StalePublishError`: a stale run cannot overwrite newer data.
   `strict=True` demands a pure fast-forward (any commit to `main` since the cut fences the run).

Why branches written by name rather than `spark.wap.branch` / `spark.wap.id`: those are session-wide Spark conf
(two threads of one process would mix their stages), and branch writes through options or `spark.wap.branch` need
Iceberg's SQL extensions, which are static conf of the session. A branch created through the table API and written
as `<table>.branch_<name>` needs neither. Why cherry-pick rather than `fast_forward`: fast-forward fences at the
table, so two runs of different days of one table (a backfill) would fence each other; cherry-pick of a dynamic
partition overwrite fences at the partition, which is the unit a run owns.
"""

from __future__ import annotations

import re
import time
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from sharp_dagster.failpoints import failpoint
from sharp_dagster.spark import refs
from sharp_dagster.spark.iceberg_base import MULTI_PARTITION_WRITE, IcebergBase, java_error
from sharp_dagster.spark.tables import TableRef, partition_label

STAGE_PREFIX = "stage_"
TOKEN_PROPERTY = "sharp.token"
_BRANCH_CHARS = re.compile(r"[^a-z0-9_]+")
_PROP_KEY = re.compile(r"^[A-Za-z0-9_.\-]+$")

# What Iceberg raises when a cherry-pick would overwrite newer data, repeat a publish, or is not a replacement.
_FENCE_ERRORS = {
    "org.apache.iceberg.exceptions.ValidationException",
    "org.apache.iceberg.exceptions.CherrypickAncestorCommitException",
    "org.apache.iceberg.exceptions.DuplicateWAPCommitException",
}


class StalePublishError(RuntimeError):
    """A staged partition cannot be published: the partition (or, when strict, the table) changed since staging."""


@dataclass(frozen=True)
class StagedPartition:
    """A partition replacement written to a branch, not yet on `main`."""

    ref: TableRef
    values: tuple[tuple[str, str], ...]
    branch: str
    snapshot_id: int
    token: str
    row_count: int
    columns: tuple[str, ...] = ()

    @property
    def values_dict(self) -> dict[str, str]:
        return dict(self.values)

    # What the publish lifecycle calls on anything it staged (an ODS table's days answer the same: `ods_stage`).
    @property
    def label(self) -> str:
        return f"{self.ref.qualified} {self.values_dict}"

    def read(self, tables: WriteAuditPublish) -> DataFrame:
        return tables.read_staged(self)

    def publish(self, tables: WriteAuditPublish) -> int:
        return tables.publish(self)

    def discard(self, tables: WriteAuditPublish) -> None:
        tables.discard(self)

    @property
    def later_parts(self) -> tuple:
        return ()  # a partition's publish re-publishes no other partition


def snapshot_properties(
    token: str, properties: Mapping[str, str] | None = None, ref: TableRef | None = None
) -> dict[str, str]:
    """The summary properties naming the attempt behind a commit: its fencing token (`sharp.token`) and each of
    `properties` as `sharp.<key>`, each key refused unless plain (naming `ref`, the table written, when given).
    What every log-driven write commits with (`table history` shows them); a SQL commit takes them through
    `commit_properties.with_snapshot_properties`."""
    out = {TOKEN_PROPERTY: str(token)}
    for key, value in dict(properties or {}).items():
        if not _PROP_KEY.match(key):
            where = f"{ref.qualified}: " if ref is not None else ""
            raise ValueError(f"{where}snapshot property key {key!r} is not plain")
        out[f"sharp.{key}"] = str(value)
    return out


def sharp_properties(summary: Mapping[str, str]) -> dict[str, str]:
    """The `sharp.*` properties of a snapshot's summary, keys without the prefix: what `snapshot_properties` wrote
    (`token`, and each of its `properties`)."""
    return {k[len("sharp.") :]: v for k, v in summary.items() if k.startswith("sharp.")}


def _checked_branch(ref: TableRef, branch: str) -> str:
    """`branch`, refused unless it is `stage_<plain identifier>` (the staging branches, and only they, are cleaned)."""
    if not branch.startswith(STAGE_PREFIX) or _BRANCH_CHARS.search(branch):
        raise ValueError(f"{ref.qualified}: staging branch {branch!r} is not stage_<plain identifier>")
    return branch


def _in_partition(ref: TableRef, df: DataFrame, values: Mapping[str, str]) -> DataFrame:
    """`df` with its partition columns set to `values`: its rows cannot leak into another partition."""
    data = df.drop(*[c for c in ref.partition_cols if c in df.columns])
    for col in ref.partition_cols:
        data = data.withColumn(col, F.lit(values[col]))
    return data


def branch_name(token: str) -> str:
    """`stage_<token>` lower-cased with every run of other characters folded to `_` (a plain SQL identifier)."""
    cleaned = _BRANCH_CHARS.sub("_", str(token).lower()).strip("_")
    if not cleaned:
        raise ValueError(f"fencing token {token!r} gives an empty branch name")
    return STAGE_PREFIX + cleaned


class WriteAuditPublish(IcebergBase):
    """Stage a partition on a branch, read it for the audit, publish it to `main` or discard it; append."""

    def stage(
        self,
        ref: TableRef,
        values: Mapping[str, str],
        df: DataFrame,
        token: str | None = None,
        properties: Mapping[str, str] | None = None,
        branch: str | None = None,
    ) -> StagedPartition:
        """Write `df` as the whole new content of partition `values` on branch `branch` (default `stage_<token>`).

        The partition columns are set to `values` (rows cannot leak into another partition). A branch left by an
        earlier attempt with the same name is replaced. The table is created from `df` when it is missing. Without
        a token (a write outside the job log) a random one is used.
        """
        token = str(token) if token is not None else uuid.uuid4().hex
        values = self._check_values(ref, values)
        summary = snapshot_properties(token, properties, ref)
        branch = _checked_branch(ref, branch or branch_name(token))
        data = _in_partition(ref, df, values)
        self.ensure_table(ref, data)
        data = self._in_table_order(ref, data)
        base_id = self._cut(ref, branch)
        failpoint("mid_write")  # the branch is cut, the rows are not yet committed to it
        self.refresh(ref)
        writer = data.writeTo(self._branch_table(ref, branch)).option("mergeSchema", "true")
        for key, value in summary.items():
            writer = writer.option(f"snapshot-property.{key}", value)
        # Dynamic overwrite replaces exactly the partitions present in the rows (no extra Spark job to count them:
        # the snapshot summary has the count).
        writer.overwritePartitions()
        table = self.java_table(ref)
        snapshot_id = int(table.refs().get(branch).snapshotId())
        # No rows: Spark commits nothing (the head is still the base) or an empty snapshot.
        rows = (
            0
            if snapshot_id == base_id
            else int(table.snapshot(snapshot_id).summary().get("added-records") or 0)
        )
        if rows == 0:
            snapshot_id = self._stage_empty(ref, values, branch, summary)
        return StagedPartition(
            ref=ref,
            values=tuple((c, values[c]) for c in ref.partition_cols),
            branch=branch,
            snapshot_id=snapshot_id,
            token=str(token),
            row_count=rows,
            columns=tuple(data.columns),
        )

    def _stage_empty(
        self, ref: TableRef, values: Mapping[str, str], branch: str, summary: Mapping[str, str]
    ) -> int:
        """An empty replacement has no rows to name its partition: cut the branch again and delete the partition
        on it by filter (publishable only as a fast-forward: Iceberg cherry-picks appends and dynamic overwrites).
        """
        self.commit_refs(ref, lambda table: table.manageSnapshots().removeBranch(branch).createBranch(branch))
        return self._delete_on_branch(ref, [values], branch, summary)

    def _cut(self, ref: TableRef, branch: str) -> int | None:
        """Create `branch` at `main`'s current snapshot (replacing a branch of that name left by an earlier attempt
        of the same token: it starts again from `main`); returns the snapshot it forks at."""

        def cut(table: Any) -> Any:
            manage = table.manageSnapshots()
            if table.refs().containsKey(branch):
                manage = manage.removeBranch(branch)
            return manage.createBranch(branch)

        base = self.commit_refs(ref, cut).refs().get(branch)
        return int(base.snapshotId()) if base is not None else None

    def _delete_on_branch(
        self,
        ref: TableRef,
        partitions: Iterable[Mapping[str, str]],
        branch: str,
        summary: Mapping[str, str],
    ) -> int:
        """Delete the given partitions on `branch` in one commit (filter on the partition columns), the commit
        carrying `summary` (`snapshot_properties`); the new head."""
        expressions = self._jvm.org.apache.iceberg.expressions.Expressions
        expr = None
        for values in partitions:
            term = None
            for col in ref.partition_cols:
                eq = expressions.equal(col, values[col])
                term = eq if term is None else getattr(expressions, "and")(term, eq)
            expr = term if expr is None else getattr(expressions, "or")(expr, term)
        table = self.java_table(ref)
        delete = table.newDelete().deleteFromRowFilter(expr).toBranch(branch)
        for key, value in summary.items():
            delete = delete.set(key, value)
        delete.commit()
        self.refresh(ref)
        return int(self.java_table(ref).refs().get(branch).snapshotId())

    def read_staged(self, staged: StagedPartition) -> DataFrame:
        """The staged partition's rows as readers will see them once published (read from the branch)."""
        self.refresh(staged.ref)
        return self.spark.table(self._branch_table(staged.ref, staged.branch)).where(
            self._condition(staged.ref, staged.values_dict)
        )

    def publish(self, staged: StagedPartition, strict: bool = False) -> int:
        """Put the staged partition on `main` and drop its branch in one commit; return main's new snapshot id.

        Raises `StalePublishError` when the partition changed on `main` since the branch was cut (or, with
        `strict`, when `main` moved at all), when the branch no longer holds the staged snapshot, or when it was
        published already.
        """
        ref = staged.ref
        where = f"{partition_label(ref, staged.values_dict)} (token {staged.token})"

        def pick(table: Any) -> Any:
            head = table.refs().get(staged.branch)
            if head is None or int(head.snapshotId()) != staged.snapshot_id:
                raise StalePublishError(
                    f"cannot publish {where}: branch {staged.branch} no longer holds the staged data"
                )
            main = table.currentSnapshot()
            parent = table.snapshot(staged.snapshot_id).parentId()
            moved = main is not None and (parent is None or int(parent) != int(main.snapshotId()))
            if moved and strict:
                raise StalePublishError(
                    f"cannot publish {where}: main moved since the branch was cut (strict)"
                )
            return table.manageSnapshots().cherrypick(staged.snapshot_id).removeBranch(staged.branch)

        return self._publish_commit(ref, pick, where)

    def _publish_commit(self, ref: TableRef, pick: Any, where: str) -> int:
        """Commit `pick` (it moves `main` onto staged data and drops the branch); Iceberg's refusals (the data
        changed since the cut, a repeated publish) become `StalePublishError`. Returns main's new snapshot id."""
        try:
            self.commit_refs(ref, pick)
        except StalePublishError:
            raise
        except Exception as exc:
            kind, message = java_error(exc)
            if kind in _FENCE_ERRORS:
                raise StalePublishError(f"cannot publish {where}: {message}") from None
            raise
        self.refresh(ref)
        return int(self.java_table(ref).currentSnapshot().snapshotId())

    def discard(self, staged: StagedPartition) -> None:
        """Drop the staged branch (its files go when its snapshot is expired)."""
        self.drop_branches(staged.ref, [staged.branch])

    def write_partition(
        self,
        ref: TableRef,
        values: Mapping[str, str],
        df: DataFrame,
        token: str | None = None,
        properties: Mapping[str, str] | None = None,
    ) -> StagedPartition:
        """Stage and publish with no audit in between; the branch is dropped when publishing fails."""
        staged = self.stage(ref, values, df, token, properties)
        try:
            self.publish(staged)
        except Exception:
            self.discard(staged)
            raise
        return staged

    def append(
        self,
        ref: TableRef,
        df: DataFrame,
        token: str | None = None,
        properties: Mapping[str, str] | None = None,
    ) -> int:
        """Add `df`'s rows to `main` in one commit (any partitions; the table is created when missing); return the
        rows added. For append-only tables whose writer de-duplicates first (the raw binlog, the quarantine)."""
        summary = snapshot_properties(token or uuid.uuid4().hex, properties, ref)  # before the table is made
        self.ensure_table(ref, df)
        self.refresh(ref)
        writer = self._in_table_order(ref, df).writeTo(self.name(ref)).option("mergeSchema", "true")
        writer = writer.options(**MULTI_PARTITION_WRITE)  # rows of many partitions: one file per partition
        for key, value in summary.items():
            writer = writer.option(f"snapshot-property.{key}", value)
        before = self.current_snapshot_id(ref)
        writer.append()
        self.refresh(ref)
        table = self.java_table(ref)
        head = table.currentSnapshot()
        if head is None or (before is not None and int(head.snapshotId()) == before):
            return 0
        return int(head.summary().get("added-records") or 0)

    def staged_branches(self, ref: TableRef) -> dict[str, int]:
        """Staging branches of the table and the commit time (epoch ms) of their head snapshot."""
        if not self.exists(ref):
            return {}
        table = self.java_table(ref)
        out: dict[str, int] = {}
        for name in list(table.refs().keySet()):
            name = str(name)
            if name.startswith(STAGE_PREFIX):
                snap = table.snapshot(table.refs().get(name).snapshotId())
                out[name] = int(snap.timestampMillis())
        return out

    def clean_orphans(
        self, ref: TableRef, keep: Iterable[str] = (), older_than_s: float | None = None
    ) -> list[str]:
        """Drop staging branches left by killed runs; return their names.

        `keep` names live runs by token or branch name (other partitions of this table may be staging right now);
        with `older_than_s` only branches whose staged commit is at least that old are dropped.
        """
        live = {branch_name(k) if not str(k).startswith(STAGE_PREFIX) else str(k) for k in keep}
        now_ms = time.time() * 1000
        orphans = [
            name
            for name, ts in self.staged_branches(ref).items()
            if name not in live and (older_than_s is None or now_ms - ts >= older_than_s * 1000)
        ]
        self.drop_branches(ref, orphans)
        return orphans

    def drop_branches(self, ref: TableRef, names: Iterable[str]) -> None:
        """The named branches of `ref` removed in one commit (`refs.drop_branches`)."""
        refs.drop_branches(self, ref, names)
