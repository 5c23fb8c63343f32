"""SQL lineage: a static lineage engine on sqlglot (parser), an in-memory lineage graph (graph), governance rules
(governance), the project's graph built from the warehouse catalog (project) and the `lineage` CLI group (cli).

No Dagster import anywhere in this package.
"""

from sharp_dagster.lineage.governance import GovernanceRules, Violation, check
from sharp_dagster.lineage.graph import Dataset, LineageGraph, dataset_urn
from sharp_dagster.lineage.parser import ColumnLineage, LineageParseError, ScriptLineage, parse_script

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
