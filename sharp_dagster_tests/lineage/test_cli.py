"""The `lineage` CLI group: parse through sharp_dagster.cli.main, graph / impact / check on a fake catalog."""

from __future__ import annotations

import io
import json
import sys

import pytest

import sharp_dagster.cli.main as project_cli
from sharp_dagster.cli import lineage as lineage_cli
from sharp_dagster.cli.main import CliError

from .conftest import make_catalog
from .util import run_direct


def run_main(monkeypatch, argv: list[str], stdin: str = "") -> int:
    if "sharp_dagster.cli.lineage" not in project_cli.COMMAND_MODULES:
        monkeypatch.setattr(
            project_cli, "COMMAND_MODULES", [*project_cli.COMMAND_MODULES, "sharp_dagster.cli.lineage"]
        )
    monkeypatch.setattr(sys, "stdin", io.StringIO(stdin))
    return project_cli.main(argv)


@pytest.fixture()
def catalog(monkeypatch):
    cat = make_catalog()
    monkeypatch.setattr(lineage_cli, "_load_catalog", lambda: cat)
    return cat


def test_parse_prints_one_json_object(monkeypatch, capsys):
    sql = "FROM ods.s s INSERT OVERWRITE TABLE dwd.a SELECT s.x WHERE s.k = 1 INSERT INTO TABLE dwd.b SELECT s.y"
    assert run_main(monkeypatch, ["lineage", "parse", "--dialect", "hive"], sql) == 0
    out = json.loads(capsys.readouterr().out)
    assert list(out) == ["sources", "targets", "columns", "dataset_dependencies", "elapsed_ms"]
    assert out["targets"] == ["dwd.a", "dwd.b"]
    assert out["columns"] == [
        {"target": "dwd.a.x", "sources": ["ods.s.x"]},
        {"target": "dwd.b.y", "sources": ["ods.s.y"]},
    ]


def test_parse_with_default_target_and_schema(monkeypatch, capsys, tmp_path):
    schema = tmp_path / "schema.json"
    schema.write_text(json.dumps({"ods.s": {"a": "int", "b": "int"}}))
    argv = ["lineage", "parse", "--default-target", "dwd.t", "--schema", str(schema)]
    assert run_main(monkeypatch, argv, "SELECT * FROM ods.s") == 0
    out = json.loads(capsys.readouterr().out)
    assert [c["target"] for c in out["columns"]] == ["dwd.t.a", "dwd.t.b"]


def test_parse_error_exits_non_zero_with_line_and_column(monkeypatch, capsys):
    code = run_main(monkeypatch, ["lineage", "parse"], "SELECT a\nFROM t WHERE (a > 1")
    captured = capsys.readouterr()
    assert code != 0 and captured.out == ""
    assert "line 2, column 19: " in captured.err


def test_parse_unknown_dialect_is_a_cli_error(monkeypatch, capsys):
    assert run_main(monkeypatch, ["lineage", "parse", "--dialect", "oracle"], "SELECT 1") == 2
    assert "unsupported SQL dialect 'oracle'" in capsys.readouterr().err


def test_graph_up_with_columns(catalog, capsys):
    assert run_direct(["lineage", "graph", "ads/gmv", "--direction", "up", "--depth", "1", "--columns"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["vertices"] == ["urn:sharp:dataset:spark:ads.gmv", "urn:sharp:dataset:spark:dwd.detail"]
    assert out["edges"][0]["source"]["name"] == "detail" and out["edges"][0]["target"]["name"] == "gmv"
    assert {
        "source": {"id": "urn:sharp:dataset:spark:dwd.detail", "column": "amount"},
        "target": {"id": "urn:sharp:dataset:spark:ads.gmv", "column": "gmv"},
    } in out["column_edges"]


def test_graph_down_by_dotted_name(catalog, capsys):
    assert run_direct(["lineage", "graph", "ods.orders", "--direction", "down"]) == 0
    names = [v.rsplit(":", 1)[1] for v in json.loads(capsys.readouterr().out)["vertices"]]
    assert names == ["ods.orders", "dwd.detail", "ads.gmv"]


def test_graph_unknown_table_and_bad_depth(catalog):
    with pytest.raises(CliError, match="unknown table 'ads.nope'"):
        run_direct(["lineage", "graph", "ads.nope"])
    with pytest.raises(CliError, match="--depth"):
        run_direct(["lineage", "graph", "ads.gmv", "--depth", "-2"])


def _pairs(out: list[dict]) -> list[dict[str, str]]:
    return [{"table": i["table"], "column": i["column"]} for i in out]


def test_impact(catalog, capsys):
    assert run_direct(["lineage", "impact", "--json", "ods.orders.category"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert {"table": "dwd.detail", "column": "category"} in _pairs(out)
    assert {"table": "ads.gmv", "column": "*"} in _pairs(out)  # grouped by category
    grouped = next(i for i in out if i["table"] == "ads.gmv" and i["column"] == "*")
    assert grouped["kind"] == "rows" and grouped["reads"] == [{"file": "ads/gmv.sql", "line": 1}]
    with pytest.raises(CliError, match="TABLE.COLUMN"):
        run_direct(["lineage", "impact", "orders"])
    with pytest.raises(CliError, match="unknown table"):
        run_direct(["lineage", "impact", "ods.nope.x"])


def test_impact_of_column_names_holding_dots(monkeypatch, capsys):
    """The table is the longest leading part that is a table: `dwd.detail.o.id` is column `o.id` of dwd.detail,
    however the table (`db.table`, `db/table`, `platform:db.table`) and the column (bare or quoted) are written."""
    dotted = make_catalog(
        dwd__detail="SELECT order_id AS `o.id`, amount FROM ods.orders WHERE amount > 0",
        ads__gmv="SELECT d.`o.id` AS order_ref, SUM(d.amount) AS gmv FROM dwd.detail d GROUP BY d.`o.id`",
    )
    monkeypatch.setattr(lineage_cli, "_load_catalog", lambda: dotted)
    expected = [{"table": "ads.gmv", "column": "order_ref"}, {"table": "ads.gmv", "column": "*"}]
    for name in ("dwd.detail.o.id", "dwd.detail.`o.id`", "`dwd`.`detail`.`o.id`", "dwd/detail.o.id"):
        assert run_direct(["lineage", "impact", "--json", name]) == 0, name
        assert _pairs(json.loads(capsys.readouterr().out)) == expected, name
    for name in ("ods.orders.order_id", "mysql:shop.orders.order_id"):
        assert run_direct(["lineage", "impact", "--json", name]) == 0
        assert {"table": "dwd.detail", "column": "o.id"} in _pairs(json.loads(capsys.readouterr().out))
    with pytest.raises(CliError) as err:
        run_direct(["lineage", "impact", "ods.nope.a.b"])
    assert str(err.value) == (
        "unknown table 'ods.nope' in 'ods.nope.a.b': not in the lineage graph "
        "(try layer.table.column or layer/table.column)"
    )
    with pytest.raises(
        CliError, match=r"^unknown column 'o.nope' of dwd.detail \(its columns: amount, o.id\)$"
    ):
        run_direct(["lineage", "impact", "dwd.detail.o.nope"])
    with pytest.raises(CliError, match="expected TABLE.COLUMN"):
        run_direct(["lineage", "impact", "dwd.detail."])


def test_check_passes_then_fails_on_a_violation(monkeypatch, catalog, capsys):
    assert run_direct(["lineage", "check"]) == 0
    assert "no governance violation" in capsys.readouterr().out
    bad = make_catalog(ads__gmv="SELECT category, SUM(amount) AS gmv FROM ods.orders GROUP BY category")
    monkeypatch.setattr(lineage_cli, "_load_catalog", lambda: bad)
    assert run_direct(["lineage", "check"]) == 1
    captured = capsys.readouterr()
    assert "layer: ads.gmv: an ads table reads an ods table ods.orders directly" in captured.out
    assert "1 governance violation" in captured.err


def test_broken_catalog_sql_is_a_cli_error(monkeypatch):
    bad = make_catalog(dwd__detail="SELECT a FROM (")
    monkeypatch.setattr(lineage_cli, "_load_catalog", lambda: bad)
    with pytest.raises(CliError, match="dwd/detail.sql:1:"):
        run_direct(["lineage", "check"])


def test_impact_of_several_columns_on_the_projects_sql_as_a_table_and_as_json(capsys):
    """The project's own catalog: a rename of a column dwd/order_detail.sql reads names every DWD/ADS column with
    file and line, one line each; several columns in one call; `--json` the same impacts."""
    argv = ["lineage", "impact", "ods.orders.order_status", "ods/orders.order_time"]
    assert run_direct(argv) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["CHANGED", "IMPACTED", "HOW", "READS", "WHERE"]
    rows = [line.split(None, 4) for line in lines[1:]]
    assert [r for r in rows if r[0] == "ods.orders.order_status"] == [
        [
            "ods.orders.order_status",
            "ads.gmv_by_category.*",
            "rows",
            "dwd.order_detail.is_cancelled",
            "ads/gmv_by_category.sql:12",
        ],
        [
            "ods.orders.order_status",
            "ads.user_order_stats.*",
            "rows",
            "dwd.order_detail.is_cancelled",
            "ads/user_order_stats.sql:15",
        ],
        [
            "ods.orders.order_status",
            "dwd.order_detail.is_cancelled",
            "value",
            "ods.orders.order_status",
            "dwd/order_detail.sql:17",
        ],
        [
            "ods.orders.order_status",
            "dwd.order_detail.order_status",
            "value",
            "ods.orders.order_status",
            "dwd/order_detail.sql:9",
        ],
    ]
    assert [
        "ods.orders.order_time",
        "dwd.order_detail.*",
        "rows",
        "ods.orders.order_time",
        "dwd/order_detail.sql:23, dwd/order_detail.sql:24",
    ] in rows
    assert run_direct(["lineage", "impact", "--json", *argv[2:]]) == 0
    out = json.loads(capsys.readouterr().out)
    assert [(i["changed"]["column"], f"{i['table']}.{i['column']}") for i in out] == [
        (r[0].rsplit(".", 1)[1], r[1]) for r in rows
    ]
    assert out[3]["reads"] == [{"file": "dwd/order_detail.sql", "line": 9}]
    # A column nothing reads says so rather than printing nothing.
    assert run_direct(["lineage", "impact", "ods.orders.total_amount"]) == 0
    assert "(nothing downstream reads it)" in capsys.readouterr().out
