"""Helpers shared by the lineage tests."""

from __future__ import annotations

import argparse

from sharp_dagster.cli import lineage as lineage_cli
from sharp_dagster.lineage.parser import ScriptLineage, parse_script


def run(sql: str, dialect: str = "spark", **kwargs) -> tuple[ScriptLineage, dict[str, list[str]]]:
    """Parse `sql`; also return the column map {target column: sorted source columns}."""
    result = parse_script(sql, dialect=dialect, **kwargs)
    colmap = {c.target: c.sources for c in result.columns}
    assert len(colmap) == len(result.columns), "each target column is listed once"
    return result, colmap


def run_direct(argv: list[str]) -> int:
    """Run `sharp-dagster lineage <argv>` through the lineage commands' own parser, in this process."""
    parser = argparse.ArgumentParser()
    lineage_cli.register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    return args.func(args)
