"""Loading SQL table files: properties, descriptions, variables and clear errors naming file and line."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

import pytest

from sharp_dagster.periods import period_at
from sharp_dagster.warehouse.catalog import (
    SqlTable,
    WarehouseDefinitionError,
    discover,
    load_catalog,
    parse_sql_file,
)
from sharp_dagster.warehouse.dependencies import resolve
from sharp_dagster.warehouse.variables import VariableError, period_variables, render, window_variables


def write(tmp_path, layer, name, text):
    folder = tmp_path / layer
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.sql"
    path.write_text(text)
    return path


def test_project_catalog_has_every_layer():
    catalog = load_catalog()
    layers = {t.layer for t in catalog.tables}
    assert layers == {"dwd", "ads"}  # the ODS layer is built by the CDC path
    assert sorted(q for q in catalog.other_assets if q.startswith("ods.")) == [
        "ods.order_item",
        "ods.orders",
        "ods.product",
        "ods.user_info",
    ]
    for table in catalog.tables:
        assert table.description and "${" not in table.rendered


def test_properties_and_render(tmp_path):
    path = write(
        tmp_path,
        "dwd",
        "t",
        "-- A table.\n-- Second line.\n-- @partition: hourly\n-- @start: 2024-02-01\n"
        "SELECT * FROM ods.a WHERE dt = '${dt}' AND hour = '${hour}' AND ts < '${DATA_RANGE_END}'\n",
    )
    table = parse_sql_file(path, "dwd")
    assert table.description == "A table.\nSecond line."
    assert (table.grain, table.start) == ("hourly", "2024-02-01")
    sql = table.render("2024-02-03-05:00")
    assert "dt = '2024-02-03' AND hour = '05' AND ts < '2024-02-03 06:00:00'" in sql


def test_syntax_error_names_file_and_line(tmp_path):
    write(tmp_path, "dwd", "broken", "-- Broken.\nSELECT a,\n  FROM ods.x WHERE (\n")
    catalog_tables = discover(tmp_path)
    from sharp_dagster.warehouse.catalog import WarehouseCatalog

    with pytest.raises(WarehouseDefinitionError) as err:
        resolve(WarehouseCatalog(tables=catalog_tables))
    message = str(err.value)
    assert str(tmp_path / "dwd" / "broken.sql") in message
    assert ":3:" in message or ":4:" in message  # the line of the error, not the file's first line


def test_unknown_variable_is_named(tmp_path):
    path = write(tmp_path, "ods", "t", "-- T.\nSELECT 1\nFROM x.y WHERE dt = '${day}'\n")
    with pytest.raises(WarehouseDefinitionError, match=r"t\.sql:3: unknown variable \$\{day\}"):
        parse_sql_file(path, "ods")


def test_missing_description_and_bad_property(tmp_path):
    with pytest.raises(WarehouseDefinitionError, match="comment describing"):
        parse_sql_file(write(tmp_path, "ods", "a", "SELECT 1\n"), "ods")
    with pytest.raises(WarehouseDefinitionError, match=r"b\.sql:2: unknown property @grain"):
        parse_sql_file(write(tmp_path, "ods", "b", "-- B.\n-- @grain: daily\nSELECT 1\n"), "ods")
    with pytest.raises(WarehouseDefinitionError, match="lower_snake_case"):
        parse_sql_file(write(tmp_path, "ods", "BadName", "-- C.\nSELECT 1\n"), "ods")


def test_declared_deps_must_agree(tmp_path):
    from sharp_dagster.warehouse.catalog import WarehouseCatalog

    write(tmp_path, "ods", "a", "-- A.\nSELECT 1 AS x FROM src.a\n")
    write(tmp_path, "dwd", "b", "-- B.\n-- @deps: ods.a\nSELECT x FROM ods.a JOIN ods.c ON 1 = 1\n")
    with pytest.raises(WarehouseDefinitionError) as err:
        resolve(WarehouseCatalog(tables=discover(tmp_path)))
    assert "dwd/b" in str(err.value) and "ods.c" in str(err.value)


def test_values_are_never_free_text():
    with pytest.raises(VariableError):
        render("SELECT '${dt}'", {"dt": "2024-01-01' OR '1'='1"})
    with pytest.raises(VariableError):
        window_variables("2024-13-01", "daily")
    assert render("'${dt}'", window_variables("2024-03-01", "daily")) == "'2024-03-01'"


def test_a_period_renders_as_its_key_does():
    hour = period_at(datetime(2024, 3, 1, 5), "hourly")
    assert period_variables(hour) == window_variables("2024-03-01-05:00", "hourly")
    assert period_variables(hour)["prev_dt"] == "2024-02-29"
    table = SqlTable(
        "dwd", "t", Path("dwd/t.sql"), "SELECT '${dt}', '${hour}', '${DATA_RANGE_END}'", "", "hourly"
    )
    assert (
        table.render(hour)
        == table.render("2024-03-01-05:00")
        == "SELECT '2024-03-01', '05', '2024-03-01 06:00:00'"
    )


def _tagged(tmp_path, name: str, text: str):
    """`resolve` of one dwd file over a catalog whose ODS table `ods.orders` keeps its days as tags."""
    from sharp_dagster.warehouse.catalog import WarehouseCatalog

    write(tmp_path, "dwd", name, text)
    catalog = WarehouseCatalog(
        tables=discover(tmp_path), other_assets={"ods.orders": "daily"}, day_tagged=frozenset({"ods.orders"})
    )
    return resolve(catalog)


def test_the_project_reads_every_ods_table_at_the_days_tag():
    catalog = load_catalog()
    assert catalog.day_tagged == {q for q in catalog.other_assets if q.startswith("ods.")}
    detail = catalog.get("dwd/order_detail")
    sql = detail.render("2024-01-05")
    for table in ("ods.orders", "ods.order_item", "ods.product"):
        assert f"{table} VERSION AS OF '2024-01-05'" in sql
    assert ".dt" not in sql  # an ODS table has no dt column
    assert resolve(catalog)["dwd.order_detail"].assets == ["ods.order_item", "ods.orders", "ods.product"]


def test_an_ods_table_is_read_at_the_days_tag_or_refused(tmp_path):
    ok = _tagged(tmp_path, "ok", "-- Ok.\nSELECT o.id FROM ods.orders VERSION AS OF '${dt}' AS o\n")
    assert ok["dwd.ok"].assets == ["ods.orders"]
    (tmp_path / "dwd" / "ok.sql").unlink()

    with pytest.raises(WarehouseDefinitionError) as err:
        _tagged(tmp_path, "latest", "-- L.\nSELECT o.id\nFROM ods.orders AS o WHERE o.dt = '${dt}'\n")
    message = str(err.value)
    assert (
        f"{tmp_path / 'dwd' / 'latest.sql'}:3: dwd.latest reads ods.orders without VERSION AS OF" in message
    )
    assert "VERSION AS OF '${dt}'" in message
    (tmp_path / "dwd" / "latest.sql").unlink()

    for version in ("'2024-01-01'", "'${prev_dt}'", "123"):
        text = f"-- V.\nSELECT 1 AS x\nFROM ods.orders VERSION AS OF {version}\n"
        with pytest.raises(WarehouseDefinitionError, match=r"v\.sql:3: dwd\.v reads ods\.orders"):
            _tagged(tmp_path, "v", text)
        (tmp_path / "dwd" / "v.sql").unlink()
    with pytest.raises(WarehouseDefinitionError, match=r"v\.sql:2: dwd\.v reads ods\.orders TIMESTAMP AS OF"):
        _tagged(tmp_path, "v", "-- V.\nSELECT 1 AS x FROM ods.orders TIMESTAMP AS OF '${DATA_RANGE_END}'\n")
    (tmp_path / "dwd" / "v.sql").unlink()


def test_lookback_of_an_ods_table_counts_tags(tmp_path):
    both = (
        "-- Two days.\n-- @lookback: ods.orders=1\nSELECT n.id FROM ods.orders VERSION AS OF '${dt}' AS n\n"
        "JOIN ods.orders VERSION AS OF '${prev_dt}' AS p ON p.id = n.id\n"
    )
    assert _tagged(tmp_path, "two", both)["dwd.two"].assets == ["ods.orders"]
    (tmp_path / "dwd" / "two.sql").unlink()

    with pytest.raises(
        WarehouseDefinitionError, match=r"p\.sql:2: .*'\$\{prev_dt\}'.*@lookback: ods\.orders=1"
    ):
        _tagged(tmp_path, "p", "-- P.\nSELECT id FROM ods.orders VERSION AS OF '${prev_dt}'\n")
    (tmp_path / "dwd" / "p.sql").unlink()

    with pytest.raises(WarehouseDefinitionError, match=r"w\.sql:2: @lookback ods\.orders=7: .*over 1"):
        _tagged(
            tmp_path,
            "w",
            "-- W.\n-- @lookback: ods.orders=7\nSELECT id FROM ods.orders VERSION AS OF '${dt}'\n",
        )
