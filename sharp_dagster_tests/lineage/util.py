"""Helpers shared by the lineage tests."""

from __future__ import annotations

from sharp_dagster.lineage.parser import ScriptLineage, parse_script


def run(sql: str, dialect: str = "spark", **kwargs) -> tuple[ScriptLineage, dict[str, list[str]]]:
    """Parse `sql`; also return the column map {target column: sorted source columns}."""
    result = parse_script(sql, dialect=dialect, **kwargs)
    colmap = {c.target: c.sources for c in result.columns}
    assert len(colmap) == len(result.columns), "each target column is listed once"
    return result, colmap
