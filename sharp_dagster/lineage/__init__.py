"""SQL lineage: a static lineage engine on sqlglot (parser), an in-memory lineage graph (graph), governance rules
(governance), the project's graph built from the warehouse catalog (project) and the `lineage` CLI group (cli).

No Dagster import anywhere in this package. Names are re-exported lazily so that importing the CLI (to build
`sharp-dagster --help`) does not import sqlglot; `lineage parse` imports it when it runs.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # for type checkers and IDEs; at run time __getattr__ below resolves the names
    from sharp_dagster.lineage.governance import GovernanceRules, Violation, check
    from sharp_dagster.lineage.graph import Dataset, LineageGraph, dataset_urn
    from sharp_dagster.lineage.parser import ColumnLineage, LineageParseError, ScriptLineage, parse_script

_EXPORTS = {
    "GovernanceRules": "governance",
    "Violation": "governance",
    "check": "governance",
    "Dataset": "graph",
    "LineageGraph": "graph",
    "dataset_urn": "graph",
    "ColumnLineage": "parser",
    "LineageParseError": "parser",
    "ScriptLineage": "parser",
    "parse_script": "parser",
}

__all__ = [
    "ColumnLineage",
    "Dataset",
    "GovernanceRules",
    "LineageGraph",
    "LineageParseError",
    "ScriptLineage",
    "Violation",
    "check",
    "dataset_urn",
    "parse_script",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'sharp_dagster.lineage' has no attribute {name!r}")
    return getattr(import_module(f"sharp_dagster.lineage.{module}"), name)
