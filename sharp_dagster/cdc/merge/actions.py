"""The merge's actions: one row per (key, event) of the day's changes, read from their typed images, with each
column's value and whether the event sets it (`actions`); a key-changing update also tombstones its old key.

`fold.fold_per_key` folds them per key. Their Columns depend only on the plan
(`merge_plan.MergePlan`) and the images' fields, and are built once per shape (`action_steps`, memoized by
`spark.column_cache`). Each step stays a small projection, so that the generated code of a stage stays under the
JVM's size limit for JIT compilation (8000 bytes).
"""

from __future__ import annotations

from collections.abc import Callable
from decimal import Decimal

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from sharp_dagster.cdc.change import images
from sharp_dagster.cdc.change.binlog_schema import FILE_FACTOR, POS_FACTOR
from sharp_dagster.cdc.merge.plan import MergePlan, default_value
from sharp_dagster.cdc.merge.result import SEQ_TYPE
from sharp_dagster.spark.column_cache import columns_per_jvm

ROW_OPS = images.ROW_OPS

# The event's own fields every step after the first carries along.
EVENT_NAMES = ["op", "seq", "hi", "lo", "uid", "src", "before", "before_cols"]

Projection = list[Column | str]
ImageValue = Callable[
    [str, str], Column
]  # (image, column name) -> the image's field, or null when it has none


def actions(changes: DataFrame, plan: MergePlan, carry: tuple[str, ...] = ()) -> DataFrame:
    """One row per (key, event): updates that change the key also tombstone the old key.

    The images are typed (`images.typed_images`, as the landing writes them); raw JSON changes are typed here
    first, by the plan's columns. The projections come from `action_steps`, built once per plan and image shape.
    `carry`: columns of `changes` kept on every action (a range merge's day).
    """
    if not images.is_typed(changes):
        renamed = [(old, plan.type_of(new)) for new, old in plan.renames]
        changes = images.typed_images(changes.where(F.col("op").isin(*ROW_OPS)), [*plan.columns, *renamed])
    row_filter, projections = action_steps(plan, tuple(images.image_fields(changes)), carry)
    frame = changes.where(row_filter)
    for columns in projections:
        frame = frame.select(*columns)
    return frame


@columns_per_jvm
def action_steps(
    plan: MergePlan, image_fields: tuple[tuple[str, str], ...], carry: tuple[str, ...]
) -> tuple[Column, tuple[Projection, ...]]:
    """The row filter and the projections of `actions`, in order: the event parsed, its fields and keys, what it
    carries, each column's value and setter flag, the tombstone copy of a key-changing update, the action row.

    A null field is either a JSON null or a column the image does not carry; only when that matters (a partial
    update, a default) is the image's column list consulted.
    """
    fields = {name.lower(): name for name, _ in image_fields}

    def image_value(image: str, name: str) -> Column:
        if plan.is_cleared(name):
            return F.lit(None)  # a dropped column kept: what images carried of it before the drop is gone
        field = fields.get(name.lower())
        value = F.col(image)[field] if field is not None else F.lit(None)
        old = fields.get((plan.old_name(name) or "").lower())
        # Images from before the day's rename carry the column by its old name (and never by the new one).
        return F.coalesce(value, F.col(image)[old]) if old is not None else value

    return F.col("op").isin(*ROW_OPS), (
        _parsed(carry),
        _fields_of_event(plan, image_value, carry),
        _staged(plan, carry),
        _values(plan, image_value, carry),
        # A key-changing update also tombstones its old key: a second row.
        [
            "*",
            F.explode(F.when(F.col("kc"), F.array(F.lit(0), F.lit(1))).otherwise(F.array(F.lit(0)))).alias(
                "copy"
            ),
        ],
        _action_row(plan, carry),
    )


def _parsed(carry: tuple[str, ...]) -> Projection:
    """The event's position (refused when a value could not be typed), its order, identity and images."""
    seq = F.col("binlog_seq").cast(SEQ_TYPE)
    parts_known = (
        F.col("binlog_file_seq").isNotNull() & F.col("binlog_pos").isNotNull() & F.col("row_idx").isNotNull()
    )
    refused = F.concat(
        F.lit("binlog event "),
        F.coalesce(F.col("event_uid"), F.lit("?")),
        F.lit(" of "),
        F.coalesce(F.col("source_table"), F.lit("?")),
        F.lit(": values not of their column's type in "),
        F.array_join("cast_errors", ", "),
        F.lit(" (its JSON is in the raw binlog table)"),
    )
    return [
        F.col("op"),
        # A value the landing could not type stops the merge here, naming the event, instead of becoming null.
        F.when(F.col("cast_errors").isNotNull(), F.raise_error(refused).cast(SEQ_TYPE))
        .otherwise(seq)
        .alias("seq"),
        # Ordering compares two longs, (file, position * 10^6 + row), instead of a 38-digit decimal: the parts
        # binlog_seq packs (binlog_schema.binlog_seq), or binlog_seq itself split when a part is missing.
        F.when(parts_known, F.col("binlog_file_seq"))
        .otherwise(F.expr(f"binlog_seq div {FILE_FACTOR}"))
        .alias("hi"),
        F.when(parts_known, F.col("binlog_pos") * POS_FACTOR + F.col("row_idx"))
        .otherwise((seq % F.lit(Decimal(FILE_FACTOR)).cast(SEQ_TYPE)).cast("bigint"))
        .alias("lo"),
        # Ties only break on it: a 64-bit hash of the event's identity keeps the shuffled rows small.
        F.xxhash64("event_uid").alias("uid"),
        F.col("source_table").alias("src"),
        "after",
        "before",
        "after_cols",
        "before_cols",
        *carry,
    ]


def _fields_of_event(plan: MergePlan, image_value: ImageValue, carry: tuple[str, ...]) -> Projection:
    """The after image's value columns (`a<j>`) and the event's new and old key (`nk<i>`, `ok<i>`)."""
    new_key, old_key = [], []
    for name in plan.keys:
        if plan.shard and name.lower() == plan.shard.lower():
            new_key += [F.col("src")]
            old_key += [F.col("src")]
            continue
        typ = plan.type_of(name)
        # The before image names the key of updates and deletes (an insert has none).
        after_v, before_v = image_value("after", name), image_value("before", name)
        new_key.append(F.coalesce(after_v, before_v).cast(typ))
        old_key.append(F.coalesce(before_v, after_v).cast(typ))
    return [
        *carry,
        *EVENT_NAMES,
        "after_cols",
        *[image_value("after", name).alias(f"a{j}") for j, (name, _) in enumerate(plan.values)],
        *[k.alias(f"nk{i}") for i, k in enumerate(new_key)],
        *[k.alias(f"ok{i}") for i, k in enumerate(old_key)],
    ]


def _staged(plan: MergePlan, carry: tuple[str, ...]) -> Projection:
    """Whether the event changes the key (`kc`), and the after image's column list where presence matters."""
    op = F.col("op")
    keys = range(len(plan.keys))
    same_key = F.lit(True)
    for i in keys:
        same_key = same_key & F.col(f"nk{i}").eqNullSafe(F.col(f"ok{i}"))
    key_changed = (op == "u") & ~same_key
    any_null = F.lit(False)
    for j in range(len(plan.values)):
        any_null = any_null | F.col(f"a{j}").isNull()
    # Which columns the after image carries: consulted only when a field is null and presence matters.
    listing_needed = (op == "u") | (op.isin("c", "r") & F.lit(bool(plan.defaults)))
    after_keys = F.when(listing_needed & any_null, F.col("after_cols"))
    return [
        *carry,
        *EVENT_NAMES,
        *[f"a{j}" for j in range(len(plan.values))],
        *[f"nk{i}" for i in keys],
        *[f"ok{i}" for i in keys],
        key_changed.alias("kc"),
        after_keys.alias("after_keys"),
    ]


def _values(plan: MergePlan, image_value: ImageValue, carry: tuple[str, ...]) -> Projection:
    """The action's key (`k<i>`), each column's value (`v<j>`) and whether a partial update carries it (`p<j>`)."""
    op, kc = F.col("op"), F.col("kc")

    def carried_after(j: int, name: str) -> Column:
        if plan.is_cleared(name):
            return F.lit(False)
        listed = F.array_contains("after_keys", name)
        if plan.old_name(name):
            listed = listed | F.array_contains("after_keys", plan.old_name(name))
        return F.col(f"a{j}").isNotNull() | F.coalesce(listed, F.lit(False))

    def before_value(name: str, typ: str) -> Column:
        # Only for key-changing updates (rare): the new row takes the columns the after image lacks from the
        # before image, else the column default.
        listed = F.coalesce(F.array_contains("before_cols", name), F.lit(False))
        return F.when(listed, image_value("before", name).cast(typ)).otherwise(default_value(plan, name, typ))

    main = [
        F.when(op == "d", F.col(f"ok{i}")).otherwise(F.col(f"nk{i}")).alias(f"k{i}")
        for i in range(len(plan.keys))
    ]
    for j, (name, typ) in enumerate(plan.values):
        carried = carried_after(j, name)
        as_type = F.col(f"a{j}").cast(typ)
        value = (
            F.when(op == "d", F.lit(None).cast(typ))
            .when(carried, as_type)
            # Not carried: a full image means the column default; a partial update leaves it alone (p = false).
            .when(op != "u", default_value(plan, name, typ))
            .when(kc, before_value(name, typ))
        )
        main += [value.alias(f"v{j}"), ((op == "u") & ~kc & carried).alias(f"p{j}")]
    return [
        *carry,
        *[f"ok{i}" for i in range(len(plan.keys))],
        "seq",
        "hi",
        "lo",
        "uid",
        "src",
        ((op != "u") | kc).alias("reset"),
        (op == "d").alias("del"),
        kc,
        *main,
    ]


def _action_row(plan: MergePlan, carry: tuple[str, ...]) -> Projection:
    """The action: the tombstone copy (`copy` = 1) keyed by the old key, deleted, setting every column to null."""
    tomb = F.col("copy") == 1
    return [
        *carry,
        *[
            F.when(tomb, F.col(f"ok{i}")).otherwise(F.col(f"k{i}")).alias(f"__k{i}")
            for i in range(len(plan.keys))
        ],
        "seq",
        "hi",
        "lo",
        "uid",
        "src",
        (tomb | F.col("del")).alias("del"),
        *[
            c
            for j, (_, typ) in enumerate(plan.values)
            for c in (
                F.when(tomb, F.lit(None).cast(typ)).otherwise(F.col(f"v{j}")).alias(f"v{j}"),
                # Whether the event sets the column: a full image sets every column, a partial one those it carries.
                (tomb | F.col("reset") | F.col(f"p{j}")).alias(f"w{j}"),
            )
        ],
    ]
