"""Warehouse governance rules checked against lineage: layering and table naming.

This module owns the rules a warehouse table must follow before its job is scheduled (the pre-scheduling checks):

- layer rules: each layer reads only from the layers it is allowed to (`ods` reads source systems, `dwd` reads
  `ods` or `dwd`, `ads` reads `dwd` or `ads`: so an `ads` table may never read `ods` directly);
- naming rules: warehouse table names are lower_snake_case, with an optional stricter pattern per layer.

A table's layer is its database name when that is one of the configured layers; anything else (a MySQL table, a
raw binlog landing table) is a *source*.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from sharp_dagster.lineage.graph import LineageGraph, split_qualified

__all__ = ["SOURCE", "GovernanceRules", "Violation", "check", "layer_of"]

SOURCE = "source"  # the layer name of everything outside the warehouse layers
SNAKE_CASE = r"^[a-z][a-z0-9]*(_[a-z0-9]+)*$"


@dataclass(frozen=True)
class Violation:
    table: str
    rule: str  # 'layer' or 'naming'
    message: str


@dataclass(frozen=True)
class GovernanceRules:
    """`allowed_upstream[layer]` = layers its tables may read (SOURCE for source systems); `naming[layer]` = regex
    a table name in that layer must match (`"*"` applies to layers without their own pattern)."""

    allowed_upstream: Mapping[str, frozenset[str]] = field(
        default_factory=lambda: {
            "ods": frozenset({SOURCE}),
            "dwd": frozenset({"ods", "dwd"}),
            "ads": frozenset({"dwd", "ads"}),
        }
    )
    naming: Mapping[str, str] = field(default_factory=lambda: {"*": SNAKE_CASE})

    @property
    def layers(self) -> frozenset[str]:
        return frozenset(self.allowed_upstream)

    def pattern(self, layer: str) -> str | None:
        return self.naming.get(layer, self.naming.get("*"))


DEFAULT_RULES = GovernanceRules()


def layer_of(table: str, rules: GovernanceRules = DEFAULT_RULES) -> str:
    """'dwd.order_detail' -> 'dwd'; 'mysql:shop.orders' or 'src_shop.orders_changes' -> SOURCE."""
    platform, database, _ = split_qualified(table)
    if platform == "spark" and database in rules.layers:
        return database
    return SOURCE


def _a(word: str) -> str:
    return "an" if word[:1] in "aeiou" else "a"


def _reads_from_graph(graph: LineageGraph) -> dict[str, list[str]]:
    by_urn = {d.urn: d.qualified for d in graph.datasets}
    reads: dict[str, list[str]] = {name: [] for name in by_urn.values()}
    for src, dst in graph.edges():
        reads[by_urn[dst]].append(by_urn[src])
    return reads


def check(
    lineage: LineageGraph | Mapping[str, Iterable[str]], rules: GovernanceRules = DEFAULT_RULES
) -> list[Violation]:
    """Every rule broken by the tables of `lineage` (a graph, or a map table -> tables it reads), sorted.

    Only warehouse tables (those in a configured layer) are checked; sources are what they read from."""
    reads = (
        _reads_from_graph(lineage)
        if isinstance(lineage, LineageGraph)
        else {t: list(s) for t, s in lineage.items()}
    )
    out: list[Violation] = []
    compiled: dict[str, re.Pattern[str] | None] = {}
    for table, sources in reads.items():
        layer = layer_of(table, rules)
        if layer == SOURCE:
            continue
        name = split_qualified(table)[2]
        if layer not in compiled:
            pattern = rules.pattern(layer)
            compiled[layer] = re.compile(pattern) if pattern else None
        regex = compiled[layer]
        if regex is not None and not regex.match(name):
            out.append(
                Violation(
                    table, "naming", f"{table}: table name {name!r} does not match {regex.pattern} ({layer})"
                )
            )
        allowed = rules.allowed_upstream[layer]
        for src in sorted(set(sources)):
            if src == table:
                continue
            src_layer = layer_of(src, rules)
            if src_layer not in allowed:
                out.append(
                    Violation(
                        table,
                        "layer",
                        f"{table}: {_a(layer)} {layer} table reads {_a(src_layer)} {src_layer} table {src} directly; "
                        f"{layer} may read only {', '.join(sorted(allowed))}",
                    )
                )
    return sorted(out, key=lambda v: (v.table, v.rule, v.message))
