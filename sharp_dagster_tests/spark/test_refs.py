"""An Iceberg table's references as operations (sharp_dagster.spark.refs): each one alone, on a small table of a
warehouse of its own (`table_store`, the one shared Spark session)."""

from __future__ import annotations

import pytest

from sharp_dagster.spark import refs
from sharp_dagster.spark.java import java_dataset, java_session, jvm
from sharp_dagster.spark.refs import MAIN, RefChanges
from sharp_dagster.spark.tables import TableRef

REF = TableRef("refs_db", "t")


def _table(store, commits: int = 2) -> list[int]:
    """`REF` with an empty first snapshot and `commits` appends; the snapshots of `main`, oldest first."""
    store.spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {store.catalog}.{REF.database}")
    store.spark.sql(f"CREATE TABLE {store.name(REF)} (id BIGINT) USING iceberg")
    ids = [refs.empty_snapshot(store, REF)]
    for i in range(commits):
        store.spark.sql(f"INSERT INTO {store.name(REF)} VALUES ({i})")
        store.refresh(REF)
        ids.append(refs.ref_snapshot(store, REF, MAIN))
    return ids


def _grow(store, branch: str, value: int, at_snapshot: int | None = None) -> int:
    """Branch `branch` cut (at `main`, or `at_snapshot`) and one row appended on it; the branch's new head."""
    refs.cut_branch(store, REF, branch, at_snapshot=at_snapshot)
    store.spark.sql(f"INSERT INTO {store.name(REF)}.`branch_{branch}` VALUES ({value})")
    store.refresh(REF)
    return refs.ref_snapshot(store, REF, branch)


def _rows(store, version: str) -> list[int]:
    return sorted(
        r.id for r in store.spark.sql(f"SELECT id FROM {store.name(REF)} VERSION AS OF '{version}'").collect()
    )


def test_empty_snapshot_gives_a_new_table_a_head_to_tag(table_store):
    store = table_store
    store.spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {store.catalog}.{REF.database}")
    store.spark.sql(f"CREATE TABLE {store.name(REF)} (id BIGINT) USING iceberg")
    assert refs.ref_snapshot(store, REF, MAIN) is None
    head = refs.empty_snapshot(store, REF)
    assert refs.ref_snapshot(store, REF, MAIN) == head
    assert store.spark.table(store.name(REF)).count() == 0


def test_ref_snapshot_reads_main_a_tag_and_nothing(table_store):
    ids = _table(table_store)
    assert refs.ref_snapshot(table_store, REF, MAIN) == ids[-1]
    refs.tag(table_store, REF, "t1", ids[1])
    assert refs.ref_snapshot(table_store, REF, "t1") == ids[1]
    assert refs.ref_snapshot(table_store, REF, "nope") is None


def test_tag_at_a_snapshot_or_main_and_moved_when_it_exists(table_store):
    ids = _table(table_store)
    assert refs.tag(table_store, REF, "2024-01-01", ids[1]) == ids[1]
    assert refs.tag(table_store, REF, "head") == ids[-1]  # main's head when no snapshot is named
    assert refs.tag(table_store, REF, "2024-01-01", ids[2]) == ids[2]  # an existing tag moves
    assert _rows(table_store, "2024-01-01") == [0, 1]


def test_tags_lists_tags_only_sorted_with_their_snapshots(table_store):
    ids = _table(table_store)
    refs.tag(table_store, REF, "b", ids[2])
    refs.tag(table_store, REF, "a", ids[1])
    refs.cut_branch(table_store, REF, "stage_x")
    assert refs.tags(table_store, REF) == {"a": ids[1], "b": ids[2]}
    tagged = refs.tagged_snapshots(table_store, REF)
    assert list(tagged) == ["a", "b"] and int(tagged["a"].snapshotId()) == ids[1]


def test_cut_branch_at_main_a_tag_or_a_snapshot_replacing_one_of_that_name(table_store):
    ids = _table(table_store)
    assert refs.cut_branch(table_store, REF, "stage_a") == ids[-1]
    refs.tag(table_store, REF, "t0", ids[0])
    assert refs.cut_branch(table_store, REF, "stage_a", at_tag="t0") == ids[0]  # replaced
    assert refs.cut_branch(table_store, REF, "stage_b", at_snapshot=ids[1]) == ids[1]
    assert _rows(table_store, "stage_b") == [0]
    with pytest.raises(LookupError, match=r"has no tag 'missing'"):
        refs.cut_branch(table_store, REF, "stage_c", at_tag="missing")
    assert refs.ref_snapshot(table_store, REF, "stage_c") is None


def test_fast_forward_main_to_a_branch_grown_from_it(table_store):
    ids = _table(table_store)
    grown = _grow(table_store, "stage_ff", 9)
    assert grown != ids[-1]
    assert refs.fast_forward_main(table_store, REF, "stage_ff") == grown
    assert sorted(r.id for r in table_store.spark.table(table_store.name(REF)).collect()) == [0, 1, 9]


def test_move_main_to_a_tag_replaces_its_history(table_store):
    ids = _table(table_store)
    refs.tag(table_store, REF, "day1", ids[1])
    assert refs.move_main(table_store, REF, "day1") == ids[1]
    assert sorted(r.id for r in table_store.spark.table(table_store.name(REF)).collect()) == [0]
    with pytest.raises(LookupError, match="has no reference 'gone'"):
        refs.move_main(table_store, REF, "gone")


def test_drop_branches_and_tags_skipping_missing_ones(table_store):
    ids = _table(table_store)
    refs.cut_branch(table_store, REF, "stage_1")
    refs.cut_branch(table_store, REF, "stage_2")
    refs.tag(table_store, REF, "x", ids[0])
    refs.tag(table_store, REF, "y", ids[1])
    refs.drop_branches(table_store, REF, ["stage_1", "stage_9"])
    refs.drop_tags(table_store, REF, ["x", "z"])
    assert refs.ref_snapshot(table_store, REF, "stage_1") is None
    assert refs.ref_snapshot(table_store, REF, "stage_2") is not None
    assert refs.tags(table_store, REF) == {"y": ids[1]}


def test_change_commits_several_changes_at_once_or_refuses_all(table_store):
    ids = _table(table_store)
    head = _grow(table_store, "stage_pub", 7, at_snapshot=ids[0])

    def refused(c: RefChanges) -> None:
        c.tag("d1", head)
        raise RuntimeError("fenced")

    with pytest.raises(RuntimeError, match="fenced"):
        refs.change(table_store, REF, refused)
    assert refs.tags(table_store, REF) == {}

    def publish(c: RefChanges) -> None:
        assert c.main() == ids[-1] and not c.is_ancestor(ids[-1], head) and c.is_ancestor(ids[0], head)
        c.move_main("stage_pub")  # main is not an ancestor of the branch: replaced
        c.tag("d1", head)
        c.drop_branch("stage_pub")

    refs.change(table_store, REF, publish)
    assert refs.ref_snapshot(table_store, REF, MAIN) == head
    assert refs.tags(table_store, REF) == {"d1": head}
    assert refs.ref_snapshot(table_store, REF, "stage_pub") is None
    assert refs.change(table_store, REF, lambda c: None).pending is None  # no change, no commit


def test_move_main_fast_forwards_a_branch_grown_from_main(table_store):
    ids = _table(table_store)
    head = _grow(table_store, "stage_g", 5)
    built = refs.change(table_store, REF, lambda c: c.move_main("stage_g"))
    assert built.is_ancestor(ids[-1], head)
    assert refs.ref_snapshot(table_store, REF, MAIN) == head


def test_main_ancestors_oldest_first(table_store):
    ids = _table(table_store)
    assert [int(s.snapshotId()) for s in refs.main_ancestors(table_store, REF)] == ids


def test_java_accessors(spark):
    assert jvm(spark).java.lang.Integer.parseInt("7") == 7
    assert java_session(spark).version() == spark.version
    assert java_dataset(spark.range(3)).count() == 3


def test_java_table_is_freshly_loaded_or_a_lookup_error(table_store):
    with pytest.raises(LookupError, match="no Iceberg table"):
        table_store.java_table(REF)
    ids = _table(table_store)
    assert int(table_store.java_table(REF).currentSnapshot().snapshotId()) == ids[-1]


def test_commit_refs_commits_what_build_returns_and_nothing_for_none(table_store):
    ids = _table(table_store)
    seen = []
    table = table_store.commit_refs(
        REF, lambda t: seen.append(t) or t.manageSnapshots().createTag("raw", ids[0])
    )
    assert seen and int(table.refs().get("raw").snapshotId()) == ids[0]
    table_store.commit_refs(REF, lambda t: None)
    assert refs.tags(table_store, REF) == {"raw": ids[0]}


def test_refresh_lets_the_session_see_a_java_api_commit(table_store):
    ids = _table(table_store)
    table_store.spark.table(table_store.name(REF)).count()  # the session loads (and caches) the table
    table_store.commit_refs(REF, lambda t: t.manageSnapshots().rollbackTo(ids[1]))
    table_store.refresh(REF)
    assert [r.id for r in table_store.spark.table(table_store.name(REF)).collect()] == [0]


def test_read_once_remembers_only_within_counts_read_once(table_store):
    calls = []

    def read() -> int:
        calls.append(1)
        return len(calls)

    assert table_store.read_once("k", read) == 1 and table_store.read_once("k", read) == 2
    with table_store.counts_read_once():
        assert table_store.read_once("k", read) == 3 and table_store.read_once("k", read) == 3
    assert table_store.read_once("k", read) == 4
