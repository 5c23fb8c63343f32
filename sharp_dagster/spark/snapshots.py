"""`main`'s history and rolling it back (`IcebergTables` inherits them)."""

from __future__ import annotations

from typing import Any

from sharp_dagster.spark.iceberg_base import IcebergBase, java_error
from sharp_dagster.spark.tables import TableRef
from sharp_dagster.spark.wap import StalePublishError, sharp_properties


class SnapshotHistory(IcebergBase):
    """The snapshots of `main`, and undoing publishes by making an ancestor current again."""

    def history(self, ref: TableRef) -> list[dict[str, Any]]:
        """`main`'s snapshots, oldest first: id, parent, time, operation, whether current, and the `sharp.*`
        summary properties (a cherry-picked publish takes them from the staged snapshot it copies)."""
        name = self.name(ref)
        self.refresh(ref)
        snaps = {
            r.snapshot_id: r
            for r in self.spark.sql(f"SELECT snapshot_id, operation, summary FROM {name}.snapshots").collect()
        }
        current = self.java_table(ref).currentSnapshot()
        current_id = int(current.snapshotId()) if current is not None else None
        out = []
        for row in self.spark.sql(
            f"SELECT made_current_at, snapshot_id, parent_id, is_current_ancestor FROM {name}.history "
            "ORDER BY made_current_at"
        ).collect():
            snap = snaps.get(row.snapshot_id)
            summary = dict(snap.summary or {}) if snap else {}
            source = summary.get("source-snapshot-id")
            if source and int(source) in snaps:
                summary = {**dict(snaps[int(source)].summary or {}), **summary}
            props = sharp_properties(summary)
            out.append(
                {
                    "snapshot_id": int(row.snapshot_id),
                    "parent_id": int(row.parent_id) if row.parent_id is not None else None,
                    "made_current_at": row.made_current_at,
                    "operation": snap.operation if snap else None,
                    "is_current_ancestor": bool(row.is_current_ancestor),
                    "is_current": int(row.snapshot_id) == current_id,
                    "token": props.get("token"),
                    "properties": props,
                    "added_records": int(summary.get("added-records", 0) or 0),
                    "deleted_records": int(summary.get("deleted-records", 0) or 0),
                }
            )
        return out

    def rollback(self, ref: TableRef, snapshot_id: int, expected_head: int | None = None) -> int:
        """Make `snapshot_id` (an ancestor of `main`'s head) current again; return the snapshot id replaced.

        With `expected_head`, refuse (`StalePublishError`) when `main` is no longer at that snapshot: the caller
        decided what to undo from the history it read, and a publish made since would be undone unnoticed.
        """
        table = self.java_table(ref)
        previous = self.current_snapshot_id(ref)
        if table.snapshot(int(snapshot_id)) is None:
            raise LookupError(f"{self.name(ref)} has no snapshot {snapshot_id}")

        def roll(t: Any) -> Any:
            # Checked on the metadata the commit is built on: a concurrent commit makes it retry and check again.
            head = t.currentSnapshot()
            head_id = int(head.snapshotId()) if head is not None else None
            if expected_head is not None and head_id != int(expected_head):
                raise StalePublishError(
                    f"{self.name(ref)}: main moved to snapshot {head_id} since it was read at {expected_head}"
                )
            return t.manageSnapshots().rollbackTo(int(snapshot_id))

        try:
            self.commit_refs(ref, roll)
        except StalePublishError:
            raise
        except Exception as exc:
            if "not an ancestor" in java_error(exc)[1]:
                raise ValueError(
                    f"{self.name(ref)}: snapshot {snapshot_id} is not an ancestor of main"
                ) from None
            raise
        self.refresh(ref)
        return previous
