"""Write-audit-publish of several partitions of one table at once: a range run's periods in ONE write on ONE branch.

`stage_range()` cuts one branch at `main`, replaces every listed partition on it with one dynamic partition
overwrite (the rows of all partitions together), and deletes, in a second commit on the branch, the listed
partitions that got no rows (a replacement by nothing has no rows to name its partition). The rows per partition
come from the written snapshot's data files (metadata: no Spark job). Each partition is then audited on the branch
like a single stage (`StagedRange.parts`, `read_staged`), and `publish_range()` puts the whole range on `main` in
one metadata commit: a cherry-pick of the one overwrite (fenced per partition, as `publish`), or, when the branch
holds an empty-partition delete too, a fast-forward of `main`, allowed only when `main` has not moved since the cut.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote_plus

from pyspark.sql import DataFrame

from sharp_dagster.failpoints import failpoint
from sharp_dagster.spark.iceberg_base import MULTI_PARTITION_WRITE
from sharp_dagster.spark.tables import TableRef
from sharp_dagster.spark.wap import (
    StagedPartition,
    StalePublishError,
    WriteAuditPublish,
    _checked_branch,
    _in_partition,
    snapshot_properties,
)


@dataclass(frozen=True)
class StagedRange:
    """Several partition replacements of one table on one branch, not yet on `main`."""

    ref: TableRef
    branch: str
    base_id: int | None  # main's snapshot when the branch was cut
    snapshot_id: int  # the branch head
    parts: tuple[StagedPartition, ...]  # one per partition, in the order given; all on `branch`
    fast_forward_only: bool  # the branch holds more than one commit (an empty-partition delete)

    @property
    def row_count(self) -> int:
        return sum(p.row_count for p in self.parts)

    # What the publish lifecycle calls on a batch it staged (an ODS table's days answer the same: `ods_stage`).
    def publish(self, tables: RangeStage) -> int:
        return tables.publish_range(self)

    def discard(self, tables: RangeStage) -> None:
        tables.drop_branches(self.ref, [self.branch])

    @property
    def later_parts(self) -> tuple:
        return ()  # a range's publish re-publishes only its own partitions


class RangeStage(WriteAuditPublish):
    """`stage_range`, `read_staged_range`, `publish_range` (a range's branch is dropped like any: `drop_branches`)."""

    def stage_range(
        self,
        ref: TableRef,
        partitions: Sequence[tuple[Mapping[str, str], DataFrame, str]],
        branch: str,
        properties: Mapping[str, str] | None = None,
    ) -> StagedRange:
        """Write every `(values, rows, token)` of `partitions` as the new content of its partition, on `branch`.

        The partition columns of each DataFrame are set to its values; the DataFrames are unioned by name and
        written at once (one Spark write). A partition with no rows is replaced by nothing. The snapshot carries
        `properties` and the tokens (`sharp.token`: comma-separated, in order).
        """
        if not partitions:
            raise ValueError(f"{ref.qualified}: stage_range needs at least one partition")
        _checked_branch(ref, branch)
        checked, frames, tokens = [], [], []
        for values, df, token in partitions:
            values = self._check_values(ref, values)
            checked.append(values)
            frames.append(_in_partition(ref, df, values))
            tokens.append(str(token if token is not None else uuid.uuid4().hex))
        # Its keys checked before anything is written.
        summary = snapshot_properties(",".join(tokens), properties, ref)
        data = frames[0]
        for other in frames[1:]:
            data = data.unionByName(other, allowMissingColumns=True)
        self.ensure_table(ref, data)
        data = self._in_table_order(ref, data)
        base_id = self._cut(ref, branch)
        failpoint("mid_write")
        self.refresh(ref)
        writer = data.writeTo(self._branch_table(ref, branch)).option("mergeSchema", "true")
        writer = writer.options(**MULTI_PARTITION_WRITE)  # rows of many partitions: one file per partition
        for key, value in summary.items():
            writer = writer.option(f"snapshot-property.{key}", value)
        writer.overwritePartitions()
        table = self.java_table(ref)
        head = int(table.refs().get(branch).snapshotId())
        written = head != base_id  # no rows at all: Spark may commit nothing
        counts = self._added_rows(table, head) if written else {}
        rows = [counts.get(tuple(v[c] for c in ref.partition_cols), 0) for v in checked]
        empty = [v for v, n in zip(checked, rows, strict=True) if n == 0]
        if empty:
            head = self._delete_on_branch(ref, empty, branch, summary)
        parts = tuple(
            StagedPartition(
                ref=ref,
                values=tuple((c, v[c]) for c in ref.partition_cols),
                branch=branch,
                snapshot_id=head,
                token=token,
                row_count=n,
                columns=tuple(data.columns),
            )
            for v, n, token in zip(checked, rows, tokens, strict=True)
        )
        commits = int(written) + int(bool(empty))
        return StagedRange(ref, branch, base_id, head, parts, fast_forward_only=commits > 1)

    def _added_rows(self, table: Any, snapshot_id: int) -> dict[tuple[str, ...], int]:
        """Rows per partition (values in partition-field order) of the data files a snapshot added."""
        spec = table.spec()
        out: dict[tuple[str, ...], int] = {}
        files = table.snapshot(snapshot_id).addedDataFiles(table.io()).iterator()
        while files.hasNext():
            data_file = files.next()
            path = str(spec.partitionToPath(data_file.partition()))
            key = tuple(unquote_plus(part.partition("=")[2]) for part in path.split("/"))
            out[key] = out.get(key, 0) + int(data_file.recordCount())
        return out

    def read_staged_range(self, staged: StagedRange) -> tuple[DataFrame, list[DataFrame]]:
        """The staged rows of the whole range, and of each partition (`read_staged` of every part, one refresh)."""
        self.refresh(staged.ref)
        branch = self.spark.table(self._branch_table(staged.ref, staged.branch))
        parts = [branch.where(self._condition(staged.ref, p.values_dict)) for p in staged.parts]
        cond = None
        for p in staged.parts:
            term = self._condition(staged.ref, p.values_dict)
            cond = term if cond is None else cond | term
        return branch.where(cond), parts

    def publish_range(self, staged: StagedRange) -> int:
        """Put every staged partition of the range on `main` and drop the branch in one commit; main's new snapshot.

        `StalePublishError` when the branch no longer holds the staged head, when a partition changed on `main`
        since the cut, or (`fast_forward_only`) when `main` moved at all.
        """
        ref = staged.ref
        where = f"{ref.qualified} range of {len(staged.parts)} partition(s) on {staged.branch}"

        def pick(table: Any) -> Any:
            head = table.refs().get(staged.branch)
            if head is None or int(head.snapshotId()) != staged.snapshot_id:
                raise StalePublishError(f"cannot publish {where}: the branch no longer holds the staged data")
            main = table.currentSnapshot()
            main_id = int(main.snapshotId()) if main is not None else None
            if staged.fast_forward_only:
                if main_id != staged.base_id:
                    raise StalePublishError(f"cannot publish {where}: main moved since the branch was cut")
                if main_id is None:
                    return (
                        table.manageSnapshots()
                        .createBranch("main", staged.snapshot_id)
                        .removeBranch(staged.branch)
                    )
                return (
                    table.manageSnapshots()
                    .fastForwardBranch("main", staged.branch)
                    .removeBranch(staged.branch)
                )
            return table.manageSnapshots().cherrypick(staged.snapshot_id).removeBranch(staged.branch)

        return self._publish_commit(ref, pick, where)
