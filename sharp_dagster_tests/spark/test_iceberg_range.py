"""Several partitions of one table in one write on one branch (`IcebergTables.stage_range` / `publish_range`)."""

from __future__ import annotations

import pytest

from sharp_dagster.spark.tables import TableRef
from sharp_dagster.spark.wap import StalePublishError
from sharp_dagster_tests.spark.iceberg_support import REF, _content, _rows


def _snapshots(ice) -> int:
    return len(list(ice.java_table(REF).snapshots()))


def test_a_range_is_one_write_one_commit_with_rows_per_partition(spark, ice):
    ice.write_partition(REF, {"dt": "2024-01-01"}, _rows(spark, "2024-01-01", 2, "old"))
    ice.write_partition(REF, {"dt": "2024-01-05"}, _rows(spark, "2024-01-05", 4, "other"))
    before = _snapshots(ice)
    days = {"2024-01-01": 3, "2024-01-02": 5, "2024-01-03": 1}
    staged = ice.stage_range(
        REF,
        [({"dt": d}, _rows(spark, "ignored", n, "new"), f"t{i}") for i, (d, n) in enumerate(days.items())],
        branch="stage_range_test",
        properties={"run_id": "r1"},
    )
    assert [(p.values_dict["dt"], p.row_count, p.token) for p in staged.parts] == [
        ("2024-01-01", 3, "t0"),
        ("2024-01-02", 5, "t1"),
        ("2024-01-03", 1, "t2"),
    ]
    assert not staged.fast_forward_only
    assert _content(ice)["2024-01-01"] == (2, ("old",)), "main unchanged while staged"
    # Each partition reads back from the branch alone (what the audit scans).
    assert [ice.read_staged(p).count() for p in staged.parts] == [3, 5, 1]

    ice.publish_range(staged)
    assert _content(ice) == {
        "2024-01-01": (3, ("new",)),
        "2024-01-02": (5, ("new",)),
        "2024-01-03": (1, ("new",)),
        "2024-01-05": (4, ("other",)),
    }
    assert _snapshots(ice) == before + 1, "one snapshot for the whole range"
    summary = ice.java_table(REF).currentSnapshot().summary()
    assert summary.get("sharp.token") == "t0,t1,t2" and summary.get("sharp.run_id") == "r1"
    assert "stage_range_test" not in ice.staged_branches(REF)


def test_a_partition_without_rows_is_replaced_by_nothing(spark, ice):
    for day in ("2024-01-01", "2024-01-02"):
        ice.write_partition(REF, {"dt": day}, _rows(spark, day, 2, "old"))
    empty = _rows(spark, "x", 0, "none")
    staged = ice.stage_range(
        REF,
        [({"dt": "2024-01-01"}, _rows(spark, "x", 3, "new"), "a"), ({"dt": "2024-01-02"}, empty, "b")],
        branch="stage_range_empty",
    )
    assert [p.row_count for p in staged.parts] == [3, 0]
    assert staged.fast_forward_only
    ice.publish_range(staged)
    assert _content(ice) == {"2024-01-01": (3, ("new",))}

    # Nothing at all: one delete commit, published like a single empty stage.
    staged = ice.stage_range(REF, [({"dt": "2024-01-01"}, empty, "c")], branch="stage_range_none")
    assert [p.row_count for p in staged.parts] == [0] and not staged.fast_forward_only
    ice.publish_range(staged)
    assert _content(ice) == {}


def test_a_range_with_an_empty_partition_is_fenced_when_main_moved(spark, ice):
    ice.write_partition(REF, {"dt": "2024-01-02"}, _rows(spark, "2024-01-02", 2, "old"))
    staged = ice.stage_range(
        REF,
        [
            ({"dt": "2024-01-01"}, _rows(spark, "x", 1, "new"), "a"),
            ({"dt": "2024-01-02"}, _rows(spark, "x", 0, "n"), "b"),
        ],
        branch="stage_range_fenced",
    )
    ice.write_partition(REF, {"dt": "2024-01-09"}, _rows(spark, "2024-01-09", 1, "meanwhile"))
    with pytest.raises(StalePublishError, match="main moved"):
        ice.publish_range(staged)
    assert _content(ice) == {"2024-01-02": (2, ("old",)), "2024-01-09": (1, ("meanwhile",))}


def test_a_range_cannot_overwrite_a_partition_changed_since_the_cut(spark, ice):
    staged = ice.stage_range(
        REF,
        [({"dt": d}, _rows(spark, "x", 2, "batch"), d) for d in ("2024-01-01", "2024-01-02")],
        branch="stage_range_stale",
    )
    # Another partition published meanwhile: the range still goes on (fenced per partition) ...
    ice.write_partition(REF, {"dt": "2024-01-07"}, _rows(spark, "2024-01-07", 1, "other"))
    # ... but not after one of its own partitions changed on main.
    ice.write_partition(REF, {"dt": "2024-01-02"}, _rows(spark, "2024-01-02", 1, "newer"))
    with pytest.raises(StalePublishError):
        ice.publish_range(staged)
    assert _content(ice) == {"2024-01-02": (1, ("newer",)), "2024-01-07": (1, ("other",))}


def test_a_property_key_that_is_not_plain_is_refused_before_any_write(spark, ice):
    ice.write_partition(REF, {"dt": "2024-01-01"}, _rows(spark, "2024-01-01", 2, "old"))
    before = _snapshots(ice)
    bad = {"run id": "r1"}  # it would become the summary key `sharp.run id`
    rows = _rows(spark, "2024-01-02", 3, "new")
    writes = {
        "stage": lambda: ice.stage(REF, {"dt": "2024-01-02"}, rows, token="t1", properties=bad),
        "stage_range": lambda: ice.stage_range(
            REF, [({"dt": "2024-01-02"}, rows, "t1")], branch="stage_bad_key", properties=bad
        ),
        "append": lambda: ice.append(REF, rows, token="t1", properties=bad),
    }
    for name, write in writes.items():
        with pytest.raises(ValueError, match=r"ods\.orders: snapshot property key 'run id' is not plain"):
            write()
        assert _snapshots(ice) == before, name
        assert [b for b in ice.java_table(REF).refs().keySet() if str(b) != "main"] == [], name
    assert _content(ice) == {"2024-01-01": (2, ("old",))}
    # Nor is a table created for it.
    missing = TableRef("ods", "never_made")
    with pytest.raises(ValueError, match=r"ods\.never_made: snapshot property key 'run id' is not plain"):
        ice.append(missing, rows, token="t1", properties=bad)
    with pytest.raises(ValueError, match=r"ods\.never_made: snapshot property key 'run id' is not plain"):
        ice.stage(missing, {"dt": "2024-01-02"}, rows, token="t1", properties=bad)
    assert not ice.exists(missing)
