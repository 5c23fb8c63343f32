"""Warehouse tables as Apache Iceberg tables: one partition replaced in one commit, after an audit, or not at all.

Owns the Iceberg catalog's Spark conf (`catalog_conf`) and the write-audit-publish cycle of one table partition:

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

Nothing here imports Dagster. The table API is reached through Py4J (`Spark3Util.loadIcebergTable`).
"""

from __future__ import annotations

import random
import re
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from sharp_dagster.failpoints import failpoint
from sharp_dagster.spark.tables import MissingPartitionError, TableRef, partition_label

DEFAULT_CATALOG = "sharp"
STAGE_PREFIX = "stage_"
TOKEN_PROPERTY = "sharp.token"
COMMIT_ATTEMPTS = 20
_VALUE = re.compile(r"^[A-Za-z0-9_\-:. ]+$")
_BRANCH_CHARS = re.compile(r"[^a-z0-9_]+")
_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_PROP_KEY = re.compile(r"^[A-Za-z0-9_.\-]+$")

# New columns are accepted on write (the merge may widen a table); Iceberg adds them to the table schema.
TABLE_PROPERTIES = {
    "format-version": "2",
    "write.spark.accept-any-schema": "true",
    # A stage writes one partition: no shuffle to cluster rows by partition first (one Spark job less per write).
    # Appends that span partitions ask for the hash distribution themselves (`append`).
    "write.distribution-mode": "none",
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


def branch_name(token: str) -> str:
    """`stage_<token>` lower-cased with every run of other characters folded to `_` (a plain SQL identifier)."""
    cleaned = _BRANCH_CHARS.sub("_", str(token).lower()).strip("_")
    if not cleaned:
        raise ValueError(f"fencing token {token!r} gives an empty branch name")
    return STAGE_PREFIX + cleaned


def jdbc_catalog_props(log_db_url: str) -> dict[str, str] | None:
    """Iceberg JDBC catalog properties for the job log's SQLAlchemy URL, or None when its database is neither SQLite
    nor PostgreSQL (or SQLite in memory, which another process cannot share)."""
    from sqlalchemy.engine import make_url

    url = make_url(log_db_url)
    backend = url.get_backend_name()
    if backend == "sqlite":
        if not url.database or url.database == ":memory:":
            return None
        path = Path(url.database).expanduser().resolve()
        path.parent.mkdir(parents=True, exist_ok=True)  # SQLite creates the file, not its folder
        # Writers of the job log and of the catalog queue on SQLite's one write lock; wait instead of failing fast
        # (the driver's default is 3 s).
        return {"uri": f"jdbc:sqlite:{path}", "jdbc.busy_timeout": "30000"}
    if backend == "postgresql":
        host = url.host or "localhost"
        port = f":{url.port}" if url.port else ""
        props = {"uri": f"jdbc:postgresql://{host}{port}/{url.database or ''}"}
        if url.username:
            props["jdbc.user"] = url.username
        if url.password:
            # Spark redacts conf keys matching "password" in its UI and logs (spark.redaction.regex).
            props["jdbc.password"] = str(url.password)
        return props
    return None


def catalog_conf(settings: Any, catalog: str = DEFAULT_CATALOG, make_default: bool = False) -> dict[str, str]:
    """Spark conf for the Iceberg catalog `catalog`: data under `settings.warehouse_dir`, the catalog in the job
    log's database (JDBC) when that is SQLite or PostgreSQL, else a Hadoop (path-based) catalog.

    `make_default` also makes it Spark's default catalog, so SQL can name tables `database.table`.
    """
    if not _IDENT.match(catalog):
        raise ValueError(f"catalog name must be a plain identifier, got {catalog!r}")
    prefix = f"spark.sql.catalog.{catalog}"
    warehouse = Path(settings.warehouse_dir).expanduser().resolve()
    conf = {
        prefix: "org.apache.iceberg.spark.SparkCatalog",
        f"{prefix}.warehouse": f"file://{warehouse}",
        # Other processes and machines commit to the same tables: every query reads the table's current metadata
        # (Iceberg's catalog cache would serve a table as it was up to 30 s ago).
        f"{prefix}.cache-enabled": "false",
    }
    jdbc = jdbc_catalog_props(settings.log_db_url)
    if jdbc is None:
        conf[f"{prefix}.type"] = "hadoop"
    else:
        conf[f"{prefix}.catalog-impl"] = "org.apache.iceberg.jdbc.JdbcCatalog"
        # V1 keeps views too (V0 only tables); branches live in table metadata and need no catalog support.
        conf[f"{prefix}.jdbc.schema-version"] = "V1"
        conf.update({f"{prefix}.{k}": v for k, v in jdbc.items()})
    if make_default:
        conf["spark.sql.defaultCatalog"] = catalog
    return conf


def apply_catalog_conf(spark: SparkSession, conf: Mapping[str, str]) -> None:
    """Add a catalog to a running session: catalogs are runtime SQL conf, loaded on first use."""
    for key, value in conf.items():
        if spark.conf.get(key, None) != value:
            spark.conf.set(key, value)


def use_warehouse(spark: SparkSession, settings: Any) -> str:
    """Make the Iceberg catalog `sharp` of `settings` (its warehouse folder and job-log database) the session's
    current catalog, so SQL names tables `database.table`; return the catalog's name.

    The session's build (`spark/session.py`) configures `sharp` for the warehouse of its settings. The name is the
    same for every warehouse because the JDBC catalog keys its rows by it (a table registered through `sharp` is
    only found through `sharp`, by any process). A process that moves to another warehouse (a test, the demo after
    a reset) re-points the conf and drops Spark's loaded catalogs, which are built again, from the new conf, on
    first use; temporary views stay.
    """
    name = DEFAULT_CATALOG
    prefix = f"spark.sql.catalog.{name}"
    wanted = catalog_conf(settings, name)
    wanted = {k: v for k, v in wanted.items() if k == prefix or k.startswith(prefix + ".")}
    current = {k: v for k, v in spark.conf.getAll.items() if k == prefix or k.startswith(prefix + ".")}
    if current != wanted:
        for key in set(current) - set(wanted):
            spark.conf.unset(key)
        apply_catalog_conf(spark, wanted)
        if current:  # a loaded catalog keeps its old conf for the session's life: drop it
            spark._jsparkSession.sessionState().catalogManager().reset()
    spark.catalog.setCurrentCatalog(name)  # (asking for the current one would load it: the session's default)
    return name


# What Iceberg raises when a cherry-pick would overwrite newer data, repeat a publish, or is not a replacement.
_FENCE_ERRORS = {
    "org.apache.iceberg.exceptions.ValidationException",
    "org.apache.iceberg.exceptions.CherrypickAncestorCommitException",
    "org.apache.iceberg.exceptions.DuplicateWAPCommitException",
}


def java_error(exc: BaseException) -> tuple[str, str]:
    """The Java class and message behind a Py4J error (Py4J's own text names only the called method)."""
    java = getattr(exc, "java_exception", None)
    if java is None:
        return type(exc).__name__, str(exc)
    return str(java.getClass().getName()), str(java.getMessage())


class IcebergTables:
    """Stages, audits, publishes and undoes partitions of Iceberg tables in one catalog of one SparkSession."""

    def __init__(
        self, spark: SparkSession, catalog: str = DEFAULT_CATALOG, warehouse_dir: str | Path | None = None
    ):
        if not _IDENT.match(catalog):
            raise ValueError(f"catalog name must be a plain identifier, got {catalog!r}")
        if not spark.conf.get(f"spark.sql.catalog.{catalog}", None):
            raise ValueError(f"Spark catalog {catalog!r} is not configured: apply catalog_conf(...) first")
        self.spark = spark
        self.catalog = catalog
        # Where the catalog keeps data; other files of the warehouse (the landing's done markers) live beside it.
        self.warehouse_dir = str(warehouse_dir).rstrip("/") if warehouse_dir is not None else None
        self._jvm = spark.sparkContext._jvm
        self.commit_retries = 0  # reference commits retried after another writer committed first

    # ---------------------------------------------------------------- names
    def name(self, ref: TableRef) -> str:
        return f"{self.catalog}.{ref.database}.{ref.name}"

    def _branch_table(self, ref: TableRef, branch: str) -> str:
        return f"{self.name(ref)}.`branch_{branch}`"

    def _table(self, ref: TableRef) -> Any:
        """The Java `org.apache.iceberg.Table`, freshly loaded (its metadata is current)."""
        try:
            return self._jvm.org.apache.iceberg.spark.Spark3Util.loadIcebergTable(
                self.spark._jsparkSession, self.name(ref)
            )
        except Exception as exc:
            kind, message = java_error(exc)
            if "NoSuchTable" in kind or "TABLE_OR_VIEW_NOT_FOUND" in message:
                raise LookupError(f"no Iceberg table {self.name(ref)}") from exc
            raise

    def _refresh(self, ref: TableRef) -> None:
        # Spark caches loaded tables per session; a commit through the Java API (or another process) is seen after
        # a refresh.
        self.spark.catalog.refreshTable(self.name(ref))

    def _commit_refs(self, ref: TableRef, build: Callable[[Any], Any]) -> Any:
        """Commit a snapshot-reference change built by `build(table)` on freshly loaded metadata, retrying when
        another writer committed first.

        Iceberg's `ManageSnapshots` does not retry by itself after a concurrent commit (its operations keep the
        metadata they were built on and fail with "Table metadata refresh is required"), so each attempt reloads
        the table and rebuilds the change; `build` re-checks its preconditions and returns None for no change.
        Returns the table, whose metadata includes the commit.
        """
        for attempt in range(COMMIT_ATTEMPTS):
            table = self._table(ref)
            if attempt:
                table.refresh()  # the session's catalog may cache the table: read the catalog's pointer again
            pending = build(table)
            if pending is None:
                return table
            try:
                pending.commit()
                return table
            except Exception as exc:
                kind, _ = java_error(exc)
                if (
                    kind != "org.apache.iceberg.exceptions.CommitFailedException"
                    or attempt == COMMIT_ATTEMPTS - 1
                ):
                    raise
            self.commit_retries += 1
            time.sleep(random.uniform(0.02, 0.1) * (attempt + 1))

    def _condition(self, ref: TableRef, values: Mapping[str, str]):
        cond = None
        for col in ref.partition_cols:
            term = F.col(col) == F.lit(str(values[col]))
            cond = term if cond is None else cond & term
        return cond

    def _check_values(self, ref: TableRef, values: Mapping[str, str]) -> dict[str, str]:
        missing = [c for c in ref.partition_cols if c not in values]
        if missing:
            raise ValueError(f"{ref.qualified}: partition values missing for {missing}")
        for col in ref.partition_cols:
            if not _VALUE.match(str(values[col])):
                raise ValueError(f"{ref.qualified}: unsafe partition value {values[col]!r} for {col}")
        return {c: str(values[c]) for c in ref.partition_cols}

    # ---------------------------------------------------------------- tables
    def exists(self, ref: TableRef) -> bool:
        return bool(self.spark.catalog.tableExists(self.name(ref)))

    def ensure_table(self, ref: TableRef, df: DataFrame) -> bool:
        """Create the table from `df`'s schema, partitioned by identity on `ref.partition_cols`, unless it exists.

        Returns True when this call created it. Two processes creating it at once: one wins, the other sees it.
        """
        if self.exists(ref):
            return False
        missing = [c for c in ref.partition_cols if c not in df.columns]
        if missing:
            raise ValueError(
                f"{ref.qualified}: partition columns {missing} not in the DataFrame {df.columns}"
            )
        self.spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {self.catalog}.{ref.database}")
        writer = df.limit(0).writeTo(self.name(ref)).using("iceberg").partitionedBy(*ref.partition_cols)
        for key, value in TABLE_PROPERTIES.items():
            writer = writer.tableProperty(key, value)
        try:
            writer.create()
        except Exception as exc:
            if "already exists" not in str(exc).lower() and "TABLE_OR_VIEW_ALREADY_EXISTS" not in str(exc):
                raise
            return False
        return True

    def _in_table_order(self, ref: TableRef, df: DataFrame) -> DataFrame:
        """`df`'s columns in the table's order, new ones last: Iceberg matches a write's columns by position, and
        adds the new ones (schema merge) at the end of the table."""
        known = self.spark.table(self.name(ref)).columns
        ordered = [c for c in known if c in df.columns] + [c for c in df.columns if c not in known]
        return df if ordered == df.columns else df.select(*ordered)

    def register(self, ref: TableRef, refresh: bool = False) -> bool:
        """An Iceberg table is always resolvable by name (refreshed on demand); False when it does not exist."""
        if not self.exists(ref):
            return False
        if refresh:
            self._refresh(ref)
        return True

    def drop_table(self, ref: TableRef) -> None:
        self.spark.sql(f"DROP TABLE IF EXISTS {self.name(ref)} PURGE")

    # ---------------------------------------------------------------- write-audit-publish
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
        extra = dict(properties or {})
        for key in extra:
            if not _PROP_KEY.match(key):
                raise ValueError(f"{ref.qualified}: snapshot property key {key!r} is not plain")
        data = df.drop(*[c for c in ref.partition_cols if c in df.columns])
        for col in ref.partition_cols:
            data = data.withColumn(col, F.lit(values[col]))
        self.ensure_table(ref, data)
        data = self._in_table_order(ref, data)
        branch = branch or branch_name(token)
        if not branch.startswith(STAGE_PREFIX) or _BRANCH_CHARS.search(branch):
            raise ValueError(f"{ref.qualified}: staging branch {branch!r} is not stage_<plain identifier>")

        def cut(table: Any) -> Any:
            manage = table.manageSnapshots()
            if table.refs().containsKey(branch):
                manage = manage.removeBranch(
                    branch
                )  # an earlier attempt of this token: start again from main
            return manage.createBranch(branch)  # forks at main's current snapshot

        base = self._commit_refs(ref, cut).refs().get(branch)
        base_id = int(base.snapshotId()) if base is not None else None
        failpoint("mid_write")  # the branch is cut, the rows are not yet committed to it
        self._refresh(ref)
        writer = data.writeTo(self._branch_table(ref, branch)).option("mergeSchema", "true")
        writer = writer.option(f"snapshot-property.{TOKEN_PROPERTY}", str(token))
        for key, value in extra.items():
            writer = writer.option(f"snapshot-property.sharp.{key}", str(value))
        # Dynamic overwrite replaces exactly the partitions present in the rows (no extra Spark job to count them:
        # the snapshot summary has the count).
        writer.overwritePartitions()
        table = self._table(ref)
        snapshot_id = int(table.refs().get(branch).snapshotId())
        # No rows: Spark commits nothing (the head is still the base) or an empty snapshot.
        rows = (
            0
            if snapshot_id == base_id
            else int(table.snapshot(snapshot_id).summary().get("added-records") or 0)
        )
        if rows == 0:
            snapshot_id = self._stage_empty(ref, values, branch, token, extra)
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
        self, ref: TableRef, values: Mapping[str, str], branch: str, token: str, extra: Mapping[str, str]
    ) -> int:
        """An empty replacement has no rows to name its partition: cut the branch again and delete the partition
        on it by filter (publishable only as a fast-forward: Iceberg cherry-picks appends and dynamic overwrites).
        """
        self._commit_refs(
            ref, lambda table: table.manageSnapshots().removeBranch(branch).createBranch(branch)
        )
        table = self._table(ref)
        expressions = self._jvm.org.apache.iceberg.expressions.Expressions
        expr = None
        for col in ref.partition_cols:
            term = expressions.equal(col, values[col])
            expr = term if expr is None else getattr(expressions, "and")(expr, term)
        delete = table.newDelete().deleteFromRowFilter(expr).toBranch(branch).set(TOKEN_PROPERTY, str(token))
        for key, value in extra.items():
            delete = delete.set(f"sharp.{key}", str(value))
        delete.commit()
        self._refresh(ref)
        return int(self._table(ref).refs().get(branch).snapshotId())

    def read_staged(self, staged: StagedPartition) -> DataFrame:
        """The staged partition's rows as readers will see them once published (read from the branch)."""
        self._refresh(staged.ref)
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

        try:
            self._commit_refs(ref, pick)
        except StalePublishError:
            raise
        except Exception as exc:
            kind, message = java_error(exc)
            if kind in _FENCE_ERRORS:
                raise StalePublishError(f"cannot publish {where}: {message}") from None
            raise
        self._refresh(ref)
        return int(self._table(ref).currentSnapshot().snapshotId())

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
        self.ensure_table(ref, df)
        self._refresh(ref)
        writer = self._in_table_order(ref, df).writeTo(self.name(ref)).option("mergeSchema", "true")
        writer = writer.option("distribution-mode", "hash")  # rows of many partitions: one file per partition
        writer = writer.option(f"snapshot-property.{TOKEN_PROPERTY}", str(token or uuid.uuid4().hex))
        for key, value in dict(properties or {}).items():
            if not _PROP_KEY.match(key):
                raise ValueError(f"{ref.qualified}: snapshot property key {key!r} is not plain")
            writer = writer.option(f"snapshot-property.sharp.{key}", str(value))
        before = self.current_snapshot_id(ref)
        writer.append()
        self._refresh(ref)
        table = self._table(ref)
        head = table.currentSnapshot()
        if head is None or (before is not None and int(head.snapshotId()) == before):
            return 0
        return int(head.summary().get("added-records") or 0)

    def staged_branches(self, ref: TableRef) -> dict[str, int]:
        """Staging branches of the table and the commit time (epoch ms) of their head snapshot."""
        if not self.exists(ref):
            return {}
        table = self._table(ref)
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
        names = list(names)

        def drop(table: Any) -> Any:
            manage = None
            for name in names:
                if table.refs().containsKey(name):
                    manage = (manage or table.manageSnapshots()).removeBranch(name)
            return manage

        self._commit_refs(ref, drop)
        self._refresh(ref)

    # ---------------------------------------------------------------- history
    def history(self, ref: TableRef) -> list[dict[str, Any]]:
        """`main`'s snapshots, oldest first: id, parent, time, operation, whether current, and the `sharp.*`
        summary properties (a cherry-picked publish takes them from the staged snapshot it copies)."""
        name = self.name(ref)
        self._refresh(ref)
        snaps = {
            r.snapshot_id: r
            for r in self.spark.sql(f"SELECT snapshot_id, operation, summary FROM {name}.snapshots").collect()
        }
        current = self._table(ref).currentSnapshot()
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
            props = {k[len("sharp.") :]: v for k, v in summary.items() if k.startswith("sharp.")}
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

    def current_snapshot_id(self, ref: TableRef) -> int | None:
        current = self._table(ref).currentSnapshot()
        return int(current.snapshotId()) if current is not None else None

    def rollback(self, ref: TableRef, snapshot_id: int, expected_head: int | None = None) -> int:
        """Make `snapshot_id` (an ancestor of `main`'s head) current again; return the snapshot id replaced.

        With `expected_head`, refuse (`StalePublishError`) when `main` is no longer at that snapshot: the caller
        decided what to undo from the history it read, and a publish made since would be undone unnoticed.
        """
        table = self._table(ref)
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
            self._commit_refs(ref, roll)
        except StalePublishError:
            raise
        except Exception as exc:
            if "not an ancestor" in java_error(exc)[1]:
                raise ValueError(
                    f"{self.name(ref)}: snapshot {snapshot_id} is not an ancestor of main"
                ) from None
            raise
        self._refresh(ref)
        return previous

    # ---------------------------------------------------------------- reading
    def list_partitions(self, ref: TableRef) -> list[dict[str, str]]:
        """Partitions of `main` that hold rows, sorted by their values."""
        counts = self.partition_counts(ref)
        return [dict(zip(ref.partition_cols, key, strict=True)) for key in sorted(counts)]

    def partition_counts(self, ref: TableRef) -> dict[tuple[str, ...], int]:
        """Rows of every partition of `main` that holds rows, from the table's metadata (no data is read): partitions
        are only ever replaced whole, so the data files' record counts are the rows."""
        if not self.exists(ref):
            return {}
        self._refresh(ref)
        cols = ", ".join(f"partition.`{c}` AS `{c}`" for c in ref.partition_cols)
        rows = self.spark.sql(
            f"SELECT {cols}, record_count FROM {self.name(ref)}.partitions WHERE record_count > 0"
        ).collect()
        return {tuple(str(r[c]) for c in ref.partition_cols): int(r["record_count"]) for r in rows}

    def has_partition(self, ref: TableRef, values: Mapping[str, str]) -> bool:
        wanted = self._check_values(ref, values)
        return wanted in self.list_partitions(ref)

    def require_partitions(
        self, ref: TableRef, partitions: Iterable[Mapping[str, str]], needed_by: str = ""
    ) -> int:
        """The rows of the given partitions of `main` (from the metadata: no data is read), or
        `MissingPartitionError` naming every partition with no rows."""
        wanted = [self._check_values(ref, p) for p in partitions]
        counts = self.partition_counts(ref)
        keys = [tuple(p[c] for c in ref.partition_cols) for p in wanted]
        missing = [p for p, k in zip(wanted, keys, strict=True) if k not in counts]
        if missing:
            labels = ", ".join(partition_label(ref, p) for p in missing[:10])
            more = f" (and {len(missing) - 10} more)" if len(missing) > 10 else ""
            who = f" needed by {needed_by}" if needed_by else ""
            raise MissingPartitionError(f"upstream partition not written{who}: {labels}{more}")
        return sum(counts[k] for k in keys)

    def read_partitions(
        self, ref: TableRef, partitions: Iterable[Mapping[str, str]], needed_by: str = ""
    ) -> DataFrame:
        """Rows of the given partitions of `main`; `MissingPartitionError` names every partition with no rows."""
        wanted = [self._check_values(ref, p) for p in partitions]
        self.require_partitions(ref, wanted, needed_by)
        df = self.spark.table(self.name(ref))
        if not wanted:
            return df.limit(0)
        cond = None
        for p in wanted:
            term = self._condition(ref, p)
            cond = term if cond is None else cond | term
        return df.where(cond)


def warehouse_tables(spark: SparkSession, settings: Any) -> IcebergTables:
    """The Iceberg tables of `settings`' warehouse in `spark`, its catalog made current (`use_warehouse`)."""
    name = use_warehouse(spark, settings)
    return IcebergTables(spark, name, warehouse_dir=Path(settings.warehouse_dir).expanduser().resolve())
