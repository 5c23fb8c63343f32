"""`sharp-dagster dqc report|rules` through the real CLI entry point, against a migrated SQLite database."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

import sharp_dagster.cli.main as top
from sharp_dagster.dqc.report import expectation_text
from sharp_dagster_tests.dqc.rule_results import _result

EXAMPLES = Path(__file__).parent / "rules"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture()
def cli(monkeypatch, db_url, dqc_store):
    monkeypatch.setenv("SHARP_LOG_DB_URL", db_url)
    monkeypatch.setattr(
        top, "COMMAND_MODULES", list(dict.fromkeys([*top.COMMAND_MODULES, "sharp_dagster.cli.dqc"]))
    )

    def run(*argv: str) -> int:
        return top.main(list(argv))

    return run


@pytest.fixture()
def history(dqc_store):
    base = _result("rows", "strong", "completeness", True)
    rows = []
    for d, actual in enumerate([100, 104, 98, 0, 101], start=1):
        rows.append(replace(base, partition=f"2024-01-0{d}", actual=float(actual), comparator=">", expected=50.0,
                            passed=actual > 50, failing_keys=[]))  # fmt: skip
    trend = _result("trend", "weak", "consistency", True)
    for d, (actual, low, high) in enumerate([(5.0, 4.0, 6.0), (9.0, 4.0, 6.0), (5.5, 4.5, 7.5)], start=3):
        rows.append(replace(trend, partition=f"2024-01-0{d}", actual=actual, lower_bound=low, upper_bound=high,
                            expected=None, comparator="between", passed=low <= actual <= high,
                            failing_keys=[{"order_id": d}]))  # fmt: skip
    dqc_store.save(rows)
    return rows


def test_report_prints_each_rules_history_and_writes_a_png(cli, history, capsys, tmp_path):
    png = tmp_path / "charts" / "order_detail.png"
    # A chart's folder must exist: no folder is made anywhere.
    assert cli("dqc", "report", "--asset", "dwd/order_detail", "--png", str(png)) == 2
    assert not png.parent.exists()
    png.parent.mkdir()
    assert cli("dqc", "report", "--asset", "dwd/order_detail", "--limit", "4", "--png", str(png)) == 0
    out = capsys.readouterr().out
    shown = [r for r in history if r.partition >= "2024-01-02"]  # the 4 newest partitions
    assert "dqc report dwd/order_detail: 2 rule(s), 4 partition(s) (2024-01-02 .. 2024-01-05)" in out
    lines = out.splitlines()
    for r in shown:
        status = "PASS" if r.passed else "FAIL"
        expected = expectation_text(r)
        assert any(
            line.split()[:1] == [r.partition] and f" {r.actual:.6g} " in line and expected in line
            and line.rstrip().endswith(status)
            for line in lines
        ), (r.rule_id, r.partition)  # fmt: skip
    assert "2024-01-01" not in out
    rows_block = out[out.index("rows  [strong") : out.index("trend  [weak")]
    assert "3/4 passed" in rows_block
    assert "failing keys (2024-01-04): [{'order_id': 4}]" in out

    data = png.read_bytes()
    assert data.startswith(PNG_MAGIC) and f"chart written to {png}" in out
    import matplotlib.image as mpimg

    image = mpimg.imread(png)
    assert image.ndim == 3 and image.shape[0] > 100 and image.shape[1] > 100


def test_report_unknown_asset_is_a_one_line_error(cli, history, capsys):
    assert cli("dqc", "report", "--asset", "dwd/nope") == 2
    err = capsys.readouterr().err
    assert err.startswith("sharp-dagster: error: unknown asset 'dwd/nope'") and "dwd/order_detail" in err
    assert len(err.strip().splitlines()) == 1


def test_report_known_asset_without_results(cli, capsys):
    assert cli("dqc", "report", "--asset", "dwd/order_detail", "--rules-dir", str(EXAMPLES)) == 0
    assert "dqc report dwd/order_detail: no results yet" in capsys.readouterr().out


def test_rules_lists_rules_and_compiled_sql(cli, capsys, tmp_path):
    assert cli("dqc", "rules", "--rules-dir", str(EXAMPLES), "--asset", "dwd/order_detail") == 0
    out = capsys.readouterr().out
    assert "dwd/order_detail:has_rows  row_count  [strong, completeness]  passes when > 0" in out
    assert "-- one scan for: has_rows, order_line_unique" in out
    assert "AS `r_has_rows`" in out and "LEFT ANTI JOIN" in out
    bad = tmp_path / "bad.yaml"
    bad.write_text("rules:\n  - {id: x, asset: dwd/a, template: nope}\n")
    assert cli("dqc", "rules", "--rules-dir", str(tmp_path)) == 2
    assert "rule 'x'" in capsys.readouterr().err
