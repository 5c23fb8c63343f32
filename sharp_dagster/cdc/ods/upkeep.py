"""Upkeep of the ODS tables (issue 33): compaction, and expiry of day tags and snapshots, by Iceberg's own procedures.

A day's merge writes merge-on-read (`ods_versions`): new rows plus deletion vectors, so readers of `main` apply
more deletes each day until a compaction rewrites the data files that carry them; and every published day keeps a
tag, whose files stay on disk until the tag goes. This module decides, for one table and a retention:

- **compaction**: `rewrite_data_files` (Iceberg's bin-pack: small files, and files whose deletes pass its
  thresholds, `options` to change them) and `rewrite_position_delete_files` (a format v2 table's position
  deletes; format v3 keeps one deletion vector per data file, merged on write, which `rewrite_data_files`
  removes: there the procedure finds nothing). It
  rewrites `main`; a day tag at the snapshot it replaced moves to the compacted one (same rows: the newest
  day's readers get the compaction too), older tags keep the files they were published with. Skipped while a day is staged
  on a branch of the table: a compaction commit on `main` would make that day's fast-forward publish fail.
- **expiry**: the day tags (`ods_versions.is_day_tag`) older than the retention are dropped (`tags_to_drop`:
  the newest day and the `retention_days - 1` calendar days before it are kept; other references, `main` and
  staging branches, are never touched), then `expire_snapshots` removes the snapshots no reference reaches any
  more, and the files only they used, once older than `SNAPSHOT_GRACE` (a reader that planned its scan of
  `main` a moment ago still finds its files).

Nothing here imports Dagster: the assets (`assets/ods_upkeep.py`) and the benchmark call `upkeep_table`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from datetime import UTC, date, datetime, timedelta
from typing import Any

from sharp_dagster.cdc.ods.versions import is_day_tag, ods_ref, tombstones_ref
from sharp_dagster.spark import refs as references
from sharp_dagster.spark.tables import TableRef

# Snapshots younger than this survive expiry even when nothing references them: a query that planned its scan on
# one of them a moment ago (a DWD build reading `main`) still reads its files.
SNAPSHOT_GRACE = timedelta(hours=1)


def tags_to_drop(tag_names: Iterable[str], retention_days: int) -> list[str]:
    """The day tags older than the retention, oldest first: all but the newest day's and those of the
    `retention_days - 1` calendar days before it. Names that are not day tags are never dropped.

    >>> tags_to_drop(["2024-01-01", "2024-01-03", "2024-01-04", "2024-01-05", "keep-me"], 3)
    ['2024-01-01']
    >>> tags_to_drop(["2024-01-05"], 1), tags_to_drop([], 5)
    ([], [])
    """
    if retention_days < 1:
        raise ValueError(f"ODS tag retention must be at least 1 day, got {retention_days}")
    days = sorted(n for n in tag_names if is_day_tag(n))
    if not days:
        return []
    oldest_kept = date.fromisoformat(days[-1]) - timedelta(days=retention_days - 1)
    return [d for d in days if date.fromisoformat(d) < oldest_kept]


@dataclass
class TableUpkeep:
    """What the upkeep did to one table (the numbers are Iceberg's procedures' own)."""

    table: str
    compaction: dict[str, int] = field(default_factory=dict)
    compaction_skipped: str | None = None
    moved_tags: list[str] = field(default_factory=list)
    dropped_tags: list[str] = field(default_factory=list)
    kept_tags: int = 0
    expiry: dict[str, int] = field(default_factory=dict)
    storage_before: dict[str, int] = field(default_factory=dict)
    storage_after: dict[str, int] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def refs(store: Any, ref: TableRef) -> dict[str, str]:
    """The table's snapshot references, name -> 'TAG' or 'BRANCH' (from its `refs` metadata table)."""
    rows = store.spark.sql(f"SELECT name, type FROM {store.name(ref)}.refs").collect()
    return {str(r["name"]): str(r["type"]) for r in rows}


def storage(store: Any, ref: TableRef) -> dict[str, int]:
    """The files every snapshot still kept references (data and delete files): what the table holds on disk,
    manifests aside. One file counts once however many snapshots share it."""
    row = store.spark.sql(f"""
        SELECT count(*) AS files, coalesce(sum(file_size_in_bytes), 0) AS bytes,
               coalesce(sum(IF(content = 0, 1, 0)), 0) AS data_files,
               coalesce(sum(IF(content <> 0, 1, 0)), 0) AS delete_files
        FROM (SELECT DISTINCT file_path, file_size_in_bytes, content FROM {store.name(ref)}.all_files)
    """).first()
    return {k: int(row[k]) for k in ("files", "bytes", "data_files", "delete_files")}


def _call(store: Any, procedure: str, args: str) -> dict[str, int]:
    row = store.spark.sql(f"CALL {store.catalog}.system.{procedure}({args})").first()
    return {k: int(v) for k, v in row.asDict().items()} if row is not None else {}


def _options(options: Mapping[str, str] | None) -> str:
    if not options:
        return ""
    pairs = ", ".join(f"'{_quoted(k)}', '{_quoted(v)}'" for k, v in options.items())
    return f", options => map({pairs})"


def _quoted(text: str) -> str:
    if "'" in str(text) or "\\" in str(text):
        raise ValueError(f"compaction option {text!r}: quotes and backslashes are not allowed")
    return str(text)


def compact(store: Any, ref: TableRef, options: Mapping[str, str] | None = None) -> dict[str, int]:
    """Rewrite `main`'s data files and position delete files by Iceberg's procedures."""
    name = f"'{ref.qualified}'"
    out = {
        f"data_{k}": v
        for k, v in _call(store, "rewrite_data_files", f"table => {name}{_options(options)}").items()
    }
    # Position delete files of a format v2 table; a v3 table has none to rewrite (its deletion vectors went with
    # the data files above), which the procedure reports as zeros.
    deletes = _call(store, "rewrite_position_delete_files", f"table => {name}")
    out.update({f"deletes_{k}": v for k, v in deletes.items()})
    return out


def expire(
    store: Any, ref: TableRef, retention_days: int, now: datetime | None = None
) -> tuple[list[str], int, dict]:
    """Drop the day tags older than the retention, then expire the snapshots nothing references any more.
    Returns (dropped tags, tags kept, `expire_snapshots`' counts)."""
    names = refs(store, ref)
    tags = [n for n, kind in names.items() if kind == "TAG"]
    drop = tags_to_drop(tags, retention_days)
    if drop:
        references.drop_tags(store, ref, drop)  # one dropped meanwhile by another upkeep is skipped
    cutoff = (now or datetime.now(UTC)) - SNAPSHOT_GRACE
    stamp = cutoff.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S")
    counts = _call(
        store,
        "expire_snapshots",
        f"table => '{ref.qualified}', older_than => TIMESTAMP '{stamp} UTC', retain_last => 1",
    )
    kept = sum(1 for t in tags if is_day_tag(t)) - len(drop)
    return drop, kept, counts


def _follow_compaction(store: Any, ref: TableRef) -> list[str]:
    """Move the day tags of the snapshot a compaction replaced to the compacted one, and return them.

    A compaction's `replace` snapshot holds the same rows as its parent (Iceberg's guarantee for a rewrite), so a
    day published at the parent reads the same rows from it, without the deletion vectors: the newest day's
    readers (DWD reading `VERSION AS OF` it) get the compaction too. Older tags keep their snapshots.
    """
    table = store.java_table(ref)
    head = table.currentSnapshot()
    if head is None or head.operation() != "replace" or head.parentId() is None:
        return []
    parent = int(head.parentId())
    moved = [n for n, snapshot in references.tags(store, ref).items() if is_day_tag(n) and snapshot == parent]
    if moved:

        def build(c: references.RefChanges) -> None:
            for tag in moved:
                c.tag(tag, int(head.snapshotId()))

        references.change(store, ref, build)
    return moved


def upkeep_table(
    store: Any,
    ref: TableRef,
    retention_days: int,
    options: Mapping[str, str] | None = None,
    now: datetime | None = None,
) -> TableUpkeep:
    """Compaction, then expiry, of one table; see the module's docstring."""
    result = TableUpkeep(ref.qualified)
    store.refresh(ref)
    result.storage_before = storage(store, ref)
    staged = sorted(n for n, kind in refs(store, ref).items() if kind == "BRANCH" and n != "main")
    if staged:
        result.compaction_skipped = f"a day is staged on branch(es) {', '.join(staged)}"
    else:
        result.compaction = compact(store, ref, options)
        result.moved_tags = _follow_compaction(store, ref)
    result.dropped_tags, result.kept_tags, result.expiry = expire(store, ref, retention_days, now)
    store.refresh(ref)
    result.storage_after = storage(store, ref)
    return result


def ods_upkeep_refs(store: Any, table: str) -> list[TableRef]:
    """The tables of ODS table `table` that exist: its current state and its tombstones (same tags)."""
    return [r for r in (ods_ref(table), tombstones_ref(table)) if store.exists(r)]
