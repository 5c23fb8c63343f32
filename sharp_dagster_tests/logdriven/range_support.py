"""What the range-batch tests share: the days, the ODS assets, and a range run as a single-run backfill launches it."""

from __future__ import annotations

from dagster import AssetKey, materialize

DAYS = ["2024-01-01", "2024-01-02", "2024-01-03"]
ODS = [AssetKey(["ods", t]) for t in ("orders", "order_item", "product")]
DETAIL = AssetKey(["dwd", "order_detail"])
NAME = "dwd/order_detail"


def range_run(feed, keys, first, last, tags=None):
    """What a single-run Dagster backfill of a partition range launches: one run over the range."""
    return materialize(
        list(feed.defs.assets),
        selection=keys,
        instance=feed.instance,
        resources=feed.defs.resources,
        tags={
            "dagster/asset_partition_range_start": first,
            "dagster/asset_partition_range_end": last,
            **(tags or {}),
        },
        raise_on_error=False,
    )
