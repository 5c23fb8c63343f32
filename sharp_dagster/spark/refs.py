"""An Iceberg table's snapshot references, in the warehouse's own words: cut a branch, tag a snapshot, fast-forward
`main` to a branch, move `main` to a reference (a rollback, a re-run's publish), drop a branch or a tag, list the
tags, read the snapshot a reference points at.

Every change is one metadata commit through `IcebergBase.commit_refs` (built on freshly loaded metadata and retried
when another writer committed first), after which the session's reads see it (`IcebergBase.refresh`). Several
changes that must land together (publish staged days: move `main`, tag every day, drop the branch) are one
`change(store, ref, build)`: `build` gets a `RefChanges`, reads the references it is built on, refuses by raising,
and adds its changes. Tags are created here only (`RefChanges.tag`), so a day tag is made the same way by the ODS
publish, its bootstrap and its migration.

>>> from sharp_dagster.spark.refs import MAIN
>>> MAIN
'main'

Nothing here imports Dagster; `wap.py` (a table partition's staging branch) and the ODS layout (`cdc/ods/`) use it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from sharp_dagster.spark.iceberg_base import IcebergBase
from sharp_dagster.spark.java import jvm
from sharp_dagster.spark.tables import TableRef

MAIN = "main"


class RefChanges:
    """The reference changes of one commit to one table, built on its freshly loaded metadata (`change`).

    The reads (`snapshot`, `main`, `has`, `tags`, `is_ancestor`) see the references as they were when the commit
    was built, not the changes added since; a retried commit builds a new `RefChanges` on newer metadata.
    """

    def __init__(self, table: Any, label: str = ""):
        self.table = table  # the Java `org.apache.iceberg.Table` the changes are built on
        self.label = label or str(table.name())
        self.pending: Any = None  # Iceberg's `ManageSnapshots` with every change so far; None: no change

    # ---------------------------------------------------------------- reads
    def snapshot(self, name: str) -> int | None:
        """The snapshot branch or tag `name` points at, None when there is no such reference."""
        found = self.table.refs().get(name)
        return int(found.snapshotId()) if found is not None else None

    def require(self, name: str, why: str = "", kind: str = "reference") -> int:
        """The snapshot reference `name` (a `kind`: tag, branch) points at, or `LookupError` naming the table, the
        reference and `why`."""
        found = self.snapshot(name)
        if found is None:
            raise LookupError(f"{self.label} has no {kind} {name!r}{': ' + why if why else ''}")
        return found

    def main(self) -> int | None:
        """`main`'s head, None for a table with no snapshot yet."""
        current = self.table.currentSnapshot()
        return int(current.snapshotId()) if current is not None else None

    def has(self, name: str) -> bool:
        return bool(self.table.refs().containsKey(name))

    def tags(self) -> dict[str, int]:
        """Every tag, name -> snapshot, sorted by name."""
        refs = self.table.refs()
        found = {str(n): refs.get(n) for n in list(refs.keySet())}
        return {n: int(r.snapshotId()) for n, r in sorted(found.items()) if r.isTag()}

    def is_ancestor(self, ancestor: int, head: int) -> bool:
        """Is snapshot `ancestor` `head` or one of its parents?"""
        current = self.table.snapshot(head)
        while current is not None:
            if int(current.snapshotId()) == ancestor:
                return True
            parent = current.parentId()
            current = self.table.snapshot(parent) if parent is not None else None
        return False

    # ---------------------------------------------------------------- changes
    def _manage(self) -> Any:
        if self.pending is None:
            self.pending = self.table.manageSnapshots()
        return self.pending

    def cut_branch(self, name: str, at: int | None = None) -> None:
        """Branch `name` at snapshot `at` (`main`'s head when None), replacing a branch of that name."""
        manage = self._manage()
        if self.has(name):
            manage = manage.removeBranch(name)
        self.pending = manage.createBranch(name) if at is None else manage.createBranch(name, int(at))

    def tag(self, name: str, snapshot: int) -> None:
        """Tag `name` at `snapshot`, moving it when it exists: the one place tags are made."""
        manage = self._manage()
        if self.has(name):
            self.pending = manage.replaceTag(name, int(snapshot))
        else:
            self.pending = manage.createTag(name, int(snapshot))

    def fast_forward_main(self, branch: str) -> None:
        """`main` moved to `branch`'s head, which must have grown from it (Iceberg refuses otherwise)."""
        self.pending = self._manage().fastForwardBranch(MAIN, branch)

    def replace_main(self, snapshot: int) -> None:
        """`main` moved to `snapshot`, whatever its history (a rollback to a tag, a re-run's publish)."""
        self.pending = self._manage().replaceBranch(MAIN, int(snapshot))

    def move_main(self, branch: str) -> None:
        """`main` moved to `branch`'s head: a fast-forward when `main` is an ancestor of it, else replaced."""
        head = self.require(branch, "cannot move main to it", "branch")
        main = self.main()
        if main is not None and self.is_ancestor(main, head):
            self.fast_forward_main(branch)
        else:
            self.replace_main(head)

    def drop_branch(self, name: str) -> None:
        """Branch `name` removed (nothing when there is none)."""
        if self.has(name):
            self.pending = self._manage().removeBranch(name)

    def drop_tag(self, name: str) -> None:
        """Tag `name` removed (nothing when there is none)."""
        if self.has(name):
            self.pending = self._manage().removeTag(name)


def change(store: IcebergBase, ref: TableRef, build: Callable[[RefChanges], None]) -> RefChanges:
    """Commit the reference changes `build` adds to a `RefChanges` of `ref`, all in one commit, on freshly loaded
    metadata, retried (and `build` called again) when another writer committed first; nothing is committed when it
    adds none, and `build` refuses by raising. The session's reads see the result. Returns the last `RefChanges`
    built (its reads are of the metadata the commit was built on)."""
    built: list[RefChanges] = []

    def java_build(table: Any) -> Any:
        changes = RefChanges(table, ref.qualified)
        build(changes)
        built.append(changes)
        return changes.pending

    store.commit_refs(ref, java_build)
    store.refresh(ref)
    return built[-1]


# ---------------------------------------------------------------- one change, one commit
def cut_branch(
    store: IcebergBase,
    ref: TableRef,
    branch: str,
    *,
    at_tag: str | None = None,
    at_snapshot: int | None = None,
) -> int | None:
    """Branch `branch` of `ref` cut at tag `at_tag`, at snapshot `at_snapshot`, or else at `main`'s head (a branch
    of that name is replaced); returns the branch's head. `LookupError` when the tag does not exist."""

    def build(c: RefChanges) -> None:
        at = c.require(at_tag, f"cannot cut {branch} at it", "tag") if at_tag is not None else at_snapshot
        c.cut_branch(branch, at)

    change(store, ref, build)
    return ref_snapshot(store, ref, branch)


def tag(store: IcebergBase, ref: TableRef, name: str, snapshot: int | None = None) -> int:
    """Tag `name` of `ref` at `snapshot` (`main`'s head when None, as this session's last write left it), moved
    when it exists; returns its snapshot."""
    if snapshot is None:
        store.refresh(ref)  # the session's catalog may hold the table as loaded before its last write

    def build(c: RefChanges) -> None:
        at = snapshot if snapshot is not None else c.main()
        if at is None:
            raise LookupError(f"{ref.qualified} has no snapshot to tag {name!r} at")
        c.tag(name, at)

    change(store, ref, build)
    return int(ref_snapshot(store, ref, name))  # type: ignore[arg-type]


def fast_forward_main(store: IcebergBase, ref: TableRef, branch: str) -> int:
    """`main` of `ref` fast-forwarded to `branch`'s head (which must have grown from it); returns the new head."""
    change(store, ref, lambda c: c.fast_forward_main(branch))
    return int(ref_snapshot(store, ref, MAIN))  # type: ignore[arg-type]


def move_main(store: IcebergBase, ref: TableRef, to: str) -> int:
    """`main` of `ref` moved to the snapshot branch or tag `to` points at (replaced: a rollback to a day's tag, or
    a re-run's branch); returns the new head. `LookupError` when there is no such reference."""
    change(store, ref, lambda c: c.replace_main(c.require(to, "cannot move main to it")))
    return int(ref_snapshot(store, ref, MAIN))  # type: ignore[arg-type]


def drop_branches(store: IcebergBase, ref: TableRef, names: Iterable[str]) -> None:
    """The named branches of `ref` removed, in one commit (those that do not exist are skipped)."""
    names = list(names)

    def build(c: RefChanges) -> None:
        for name in names:
            c.drop_branch(name)

    change(store, ref, build)


def drop_tags(store: IcebergBase, ref: TableRef, names: Iterable[str]) -> None:
    """The named tags of `ref` removed, in one commit (those that do not exist, say dropped meanwhile by another
    writer, are skipped)."""
    names = list(names)

    def build(c: RefChanges) -> None:
        for name in names:
            c.drop_tag(name)

    change(store, ref, build)


# ---------------------------------------------------------------- reads
def ref_snapshot(store: IcebergBase, ref: TableRef, name: str) -> int | None:
    """The snapshot branch or tag `name` (or `main`) of `ref` points at, None when it has no such reference."""
    return RefChanges(store.java_table(ref)).snapshot(name)


def tags(store: IcebergBase, ref: TableRef) -> dict[str, int]:
    """Every tag of `ref`, name -> snapshot, sorted by name."""
    return RefChanges(store.java_table(ref)).tags()


def tagged_snapshots(store: IcebergBase, ref: TableRef) -> dict[str, Any]:
    """Every tag of `ref`, name -> its Java `Snapshot` (summary, commit time, parent), sorted by name: one load
    of the table's metadata for them all."""
    table = store.java_table(ref)
    return {name: table.snapshot(snapshot) for name, snapshot in RefChanges(table).tags().items()}


def empty_snapshot(
    store: IcebergBase, ref: TableRef, branch: str = MAIN, properties: dict[str, str] | None = None
) -> int:
    """Commit an empty snapshot to `branch` of `ref`, carrying `properties` in its summary (a new table has none: a
    tag needs one to point at; a day that changed the schema and wrote no row: its tag must read with the day's
    schema, which a snapshot takes when it is committed); returns it."""
    append = store.java_table(ref).newFastAppend()
    if branch != MAIN:
        append = append.toBranch(branch)
    for key, value in (properties or {}).items():
        append = append.set(key, value)
    append.commit()
    store.refresh(ref)
    return int(ref_snapshot(store, ref, branch))  # type: ignore[arg-type]


def main_ancestors(store: IcebergBase, ref: TableRef) -> list[Any]:
    """The Java snapshots of `main`'s history, oldest first (those expired are gone)."""
    table = store.java_table(ref)
    ids = jvm(store.spark).org.apache.iceberg.util.SnapshotUtil.currentAncestorIds(table)  # newest first
    return [table.snapshot(i) for i in list(ids)[::-1]]
