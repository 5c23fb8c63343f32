"""Typed row images: a change's JSON images turned into typed structs once, when the change lands.

The raw binlog table keeps every change's images as the JSON text the collector sent (for audit and replay). The
hourly landing also writes each logical table's changes with *typed* images, so that the daily merge reads typed
columns and parses no JSON:

- `after` / `before`: structs with one field per column, typed by the table's schema (the ODS state's columns,
  the day's DDL, else the JSON values' own types). Canal's all-strings values (`"1"` for 1) and typed JSON values
  give the same typed field: every value is read as its JSON text, then cast.
- `after_cols` / `before_cols`: the columns each image carries. A null field is a JSON null when its column is
  listed, else a column the image does not carry (a partial update leaves it alone).
- `cast_errors`: the columns whose value is not of the column's type, or that a too narrow decimal would round
  (null when none). The landing never fails on a value (it would stall the topic at that offset); the merge
  refuses the event, naming it.

Decimals wider than a double's 15 digits are read through a variant: Spark reads JSON numbers with a fraction as
doubles, which would round them.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from sharp_dagster.cdc.change.ddl_changes import evolve_schema
from sharp_dagster.cdc.change.schema_evolution import (
    parse_added_columns,
    parse_created_columns,
)

# The binlog columns a typed change keeps beside its images (the merge orders, de-duplicates and scopes by them).
META_COLUMNS = (
    "binlog_file_seq",
    "binlog_pos",
    "row_idx",
    "binlog_seq",
    "event_uid",
    "event_ts_ms",
    "op",
    "source_table",
    "ddl_sql",
)
IMAGE_COLUMNS = ("before", "after", "before_cols", "after_cols", "cast_errors")
ROW_OPS = ("c", "r", "u", "d")

# The images were written by the landing's parser (valid JSON by construction): a bad one is a bug to surface.
_FAIL_ON_BAD_JSON = {"mode": "FAILFAST"}

# JSON value types (as `schema_of_variant_agg` names them) -> Spark types of columns typed by their values.
_JSON_TYPES = {
    "BOOLEAN": "boolean",
    "TINYINT": "bigint",
    "SMALLINT": "bigint",
    "INT": "bigint",
    "BIGINT": "bigint",
    "FLOAT": "double",
    "DOUBLE": "double",
}


def is_typed(changes: DataFrame) -> bool:
    """Whether `changes` carry typed images (`typed_images`) rather than the raw JSON ones."""
    return "after" in changes.columns and "after_cols" in changes.columns


def image_fields(changes: DataFrame) -> list[tuple[str, str]]:
    """The typed images' columns and Spark types (the `after` struct's fields)."""
    return [(f.name, f.dataType.simpleString()) for f in changes.schema["after"].dataType.fields]


def typed_images(changes: DataFrame, columns: Sequence[tuple[str, str]]) -> DataFrame:
    """`changes` (raw binlog rows, `binlog_schema.RAW_BINLOG_COLUMNS`) with typed images instead of JSON ones.

    Returns META_COLUMNS, IMAGE_COLUMNS and the partition columns `changes` has among (table_name, dt, hour).
    `columns` (name, Spark type) are the struct fields, in order; image keys outside them are dropped.
    """
    if not columns:
        raise ValueError("typed_images needs the table's columns")
    names = [name for name, _ in columns]
    strings = ", ".join(f"{_quoted(name)} string" for name in names)
    exact = {name for name, typ in columns if not _exact_as_text(typ)}
    texts = changes.select(
        *META_COLUMNS,
        *[c for c in ("table_name", "dt", "hour") if c in changes.columns],
        F.from_json("after_json", strings, _FAIL_ON_BAD_JSON).alias("_a"),
        F.from_json("before_json", strings, _FAIL_ON_BAD_JSON).alias("_b"),
        # Only tables with wide decimals pay for a second, exact parse of their images.
        (F.parse_json("after_json") if exact else F.lit(None)).alias("_av"),
        (F.parse_json("before_json") if exact else F.lit(None)).alias("_bv"),
        F.json_object_keys("after_json").alias("after_cols"),
        F.json_object_keys("before_json").alias("before_cols"),
    )

    def text(image: str, name: str) -> Column:
        if name in exact:
            return F.variant_get(F.col(f"_{image}v"), _path(name), "string")
        return F.col(f"_{image}")[name]

    after, before, errors = [], [], []
    for name, typ in columns:
        for image, fields in (("a", after), ("b", before)):
            raw = text(image, name)
            value = raw if typ == "string" else raw.try_cast(typ)
            fields.append(value.alias(name))
            if typ.startswith("decimal"):
                # A decimal too narrow for the value rounds it: that loss is an error too, not a silent change.
                unrounded = raw.try_cast(f"decimal(38,{max(18, _scale(typ))})")
                errors.append(F.when(raw.isNotNull() & (value.isNull() | (unrounded != value)), F.lit(name)))
            elif typ != "string":
                errors.append(F.when(raw.isNotNull() & value.isNull(), F.lit(name)))
    failed = (
        F.filter(F.array(*errors), lambda e: e.isNotNull()) if errors else F.array().cast("array<string>")
    )
    keep = [c for c in texts.columns if not c.startswith("_")]
    typed = texts.select(
        *keep,
        F.when(F.col("_a").isNotNull(), F.struct(*after)).alias("after"),
        F.when(F.col("_b").isNotNull(), F.struct(*before)).alias("before"),
        failed.alias("_errors"),
    )
    return typed.select(
        *META_COLUMNS,
        "before",
        "after",
        "before_cols",
        "after_cols",
        F.when(F.size("_errors") > 0, F.array_distinct("_errors")).alias("cast_errors"),
        *[c for c in ("table_name", "dt", "hour") if c in typed.columns],
    )


def image_columns(
    changes: DataFrame | None,
    ddl: Iterable[str] = (),
    known: Sequence[tuple[str, str]] = (),
    found: Sequence[tuple[str, str]] | None = None,
) -> list[tuple[str, str]]:
    """The columns to type `changes`' images by: `known` ones first (the table's schema, in its order), then those
    the DDL creates or adds (with their types), then those only the images carry, typed by their JSON values.

    Image-only columns are typed over all of `changes` (integers bigint, decimals decimal(p,s), floats double,
    booleans boolean; strings, nulls only, nested values or mixed types string) and ordered as the widest image
    orders them: one Spark job over the row images, unless `found` gives them already (`json_columns_by_table`).
    """
    columns = list(known)
    seen = {c.lower() for c, _ in columns}
    statements = list(ddl)
    columns += [(c, t) for c, t in image_columns_of_ddl(statements) if c.lower() not in seen]
    # Renamed columns keep their old name beside the new one (the hour's earlier images carry it); a widened
    # type that Iceberg can promote applies; what the merge will refuse is left out (the landing never fails).
    evolved = evolve_schema(columns, statements, strict=False).columns
    seen |= {c.lower() for c, _ in evolved}
    skip = seen | {a.name.lower() for s in statements for a in parse_added_columns(s)}
    if found is None:
        found = json_columns_by_table(changes).get(None, []) if changes is not None else []
    return evolved + [(name, typ) for name, typ in found if name.lower() not in skip]


def image_columns_of_ddl(ddl: Iterable[str]) -> list[tuple[str, str]]:
    """The columns the CREATE TABLE statements among `ddl` declare, first declaration first."""
    created: list[tuple[str, str]] = []
    for statement in ddl:
        for name, typ in parse_created_columns(statement):
            if name.lower() not in {c.lower() for c, _ in created}:
                created.append((name, typ))
    return created


def json_columns_by_table(
    changes: DataFrame, by: str | None = None
) -> dict[str | None, list[tuple[str, str]]]:
    """The columns the row images of `changes` carry, typed by their JSON values, per value of the column `by`
    (all under None without `by`), widest image's order first: one Spark job for every table at once."""
    group = [F.col(by)] if by else [F.lit(None).cast("string")]
    images = changes.where(F.col("op").isin(*ROW_OPS)).select(
        group[0].alias("g"), F.explode(F.array("after_json", "before_json")).alias("j")
    )
    found = (
        images.where(F.col("j").isNotNull())
        .select("g", "j", F.parse_json("j").cast("map<string,variant>").alias("m"))
        .select(
            "g",
            F.posexplode(F.json_object_keys("j")).alias("pos", "k"),
            F.size(F.json_object_keys("j")).alias("n"),
            "m",
        )
        .groupBy("g", "k")
        .agg(
            F.max("n").alias("n"),
            F.max_by("pos", "n").alias("pos"),
            F.schema_of_variant_agg(F.element_at("m", F.col("k"))).alias("t"),
        )
        .collect()
    )
    out: dict[str | None, list[tuple[str, str]]] = {}
    for g in {r.g for r in found}:
        rows = [r for r in found if r.g == g]
        widest = max(r.n for r in rows)
        rows.sort(key=lambda r: (r.n != widest, r.pos, r.k))
        out[g] = [(r.k, _spark_type_of_json(r.t)) for r in rows]
    return out


def _spark_type_of_json(variant_type: str) -> str:
    typ = variant_type.upper()
    if typ in _JSON_TYPES:
        return _JSON_TYPES[typ]
    if typ.startswith("DECIMAL("):
        return typ.lower().replace(" ", "")
    return "string"


def _exact_as_text(typ: str) -> bool:
    """Whether a JSON number turns into text without loss for this type (Spark reads JSON floats as doubles)."""
    typ = typ.lower().replace(" ", "")
    if not typ.startswith("decimal"):
        return True
    precision = int(typ[len("decimal(") :].split(",")[0].rstrip(")")) if "(" in typ else 10
    return precision <= 15


def _scale(typ: str) -> int:
    typ = typ.lower().replace(" ", "")
    return int(typ.rstrip(")").split(",")[1]) if "," in typ else 0


def _quoted(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def _path(name: str) -> str:
    if "'" in name or "\\" in name:
        raise ValueError(f"column name not supported in a binlog image path: {name!r}")
    return f"$['{name}']"
