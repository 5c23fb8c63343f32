"""The run-time lineage cross-check: what the parser says a statement reads against what Spark's plan read.

This module owns `compare`: given the parser's lineage of a table's SQL (`ScriptLineage`, as `warehouse/catalog_lineage.py`
builds it) and the lineage read from Spark's analyzed plan of the statement that ran (`ObservedLineage`, from
`lineage/spark_plan.py`), it returns the differences, each naming the table or column and both answers:

- `table`: a table one side reads and the other does not (the subject is that table);
- `column`: an output column only one side knows;
- `column_sources`: an output column whose source columns differ;
- `dependencies`: the columns that filter/join/group/sort the rows differ. With `compare_dependencies=True` this
  is a difference; otherwise it is kept as a note (reported, not failing): the parser and Spark agree on value
  lineage far more often than on which columns steer the rows (e.g. a partition column the project's schema of an
  upstream SQL table does not list).

Names are compared lower case; an unqualified table name of the parser is taken to live in `default_database`,
a catalog-qualified one (`sharp.db.t`) loses its catalog and an Iceberg branch/tag/metadata-table read
(`db.t.branch_x`) counts as a read of its base table `db.t`, as on the plan's side.
The parser's unexpanded stars are honoured: a source `db.t.*` stands for any column of `db.t`, and an output
column `*` for any output column whose sources are in the star's tables (the parser could not know its name).
`Comparison.to_dict()` is what is kept with the run (check metadata and the run's JSON file).

No Dagster import, no Spark import.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from sharp_dagster.lineage.parser import ScriptLineage
from sharp_dagster.lineage.plan_tables import base_table, is_table_selector
from sharp_dagster.lineage.spark_plan import ObservedLineage

__all__ = ["Comparison", "Difference", "ParsedAnswer", "compare", "parsed_answer"]


@dataclass(frozen=True)
class Difference:
    """One disagreement: `kind`, its `subject` (a table or `table.column`) and both answers."""

    kind: str
    subject: str
    parsed: list[str] | None  # None: the parser does not know the subject at all
    spark: list[str] | None  # None: Spark's plan does not have it

    @property
    def message(self) -> str:
        def show(answer: list[str] | None, side: str) -> str:
            if answer is None:
                return f"{side}: (absent)"
            return f"{side}: [{', '.join(answer)}]" if answer else f"{side}: []"

        what = {
            "table": "tables read",
            "column": "output column",
            "column_sources": "sources of",
            "dependencies": "row dependencies",
        }.get(self.kind, self.kind)
        return f"{what} {self.subject}: {show(self.parsed, 'parser')} vs {show(self.spark, 'spark')}"

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "subject": self.subject, "parsed": self.parsed, "spark": self.spark}


@dataclass
class ParsedAnswer:
    """The parser's lineage of one target, normalized like Spark's answer."""

    tables: list[str]
    columns: dict[str, list[str]]
    dependencies: list[str]

    def to_dict(self) -> dict[str, Any]:
        return {
            "tables": list(self.tables),
            "columns": [{"target": c, "sources": list(s)} for c, s in self.columns.items()],
            "dependencies": list(self.dependencies),
        }


@dataclass
class Comparison:
    target: str
    parsed: ParsedAnswer
    spark: ObservedLineage
    differences: list[Difference] = field(default_factory=list)
    notes: list[Difference] = field(default_factory=list)  # disagreements reported without failing

    @property
    def passed(self) -> bool:
        return not self.differences

    def to_dict(self) -> dict[str, Any]:
        return {
            "target": self.target,
            "passed": self.passed,
            "differences": [d.to_dict() | {"message": d.message} for d in self.differences],
            "notes": [d.to_dict() | {"message": d.message} for d in self.notes],
            "parsed": self.parsed.to_dict(),
            "spark": self.spark.to_dict(),
        }


def _qualify(name: str, default_database: str) -> str:
    """`db.table` (lower case) of a table name, the way `spark_plan` names what Spark read: a three-part name is
    either an Iceberg selector of a table (`db.t.branch_x`, `db.t.snapshots`: the base table) or catalog-qualified
    (`sharp.db.t`: the catalog dropped; Spark's plan names no catalog either)."""
    parts = [p.strip("`") for p in name.lower().split(".")]
    if len(parts) == 1:
        return f"{default_database}.{parts[0]}"
    if len(parts) == 2:
        return ".".join(parts)
    has_catalog = len(parts) > 3 or not is_table_selector(parts[-1])
    return base_table(parts, has_catalog=has_catalog)


def _qualify_column(ref: str, default_database: str) -> str:
    table, _, column = ref.lower().rpartition(".")
    if not table:
        raise ValueError(f"column reference without a table: {ref!r}")
    return f"{_qualify(table, default_database)}.{column}"


def parsed_answer(lineage: ScriptLineage, target: str, default_database: str = "default") -> ParsedAnswer:
    """The parser's tables, output columns and dependencies of `target` (one of the script's targets)."""
    target_l = target.lower()
    targets = {t.lower() for t in lineage.targets}
    if targets and target_l not in targets:
        raise ValueError(f"the parsed script writes {sorted(targets)}, not {target}")
    tables = lineage.target_sources.get(target, lineage.sources)
    deps = lineage.target_dependencies.get(target, lineage.dataset_dependencies)
    prefix = target_l + "."
    columns: dict[str, list[str]] = {}
    for col in lineage.columns:
        name = col.target.lower()
        if not name.startswith(prefix):
            continue
        columns[name[len(prefix) :]] = sorted({_qualify_column(s, default_database) for s in col.sources})
    return ParsedAnswer(
        tables=sorted({_qualify(t, default_database) for t in tables}),
        columns=columns,
        dependencies=sorted({_qualify_column(d, default_database) for d in deps}),
    )


def _table_of(ref: str) -> str:
    return ref.rpartition(".")[0]


def _source_diff(parsed: list[str], spark: list[str]) -> bool:
    """Do the two source lists disagree? A parser source `db.t.*` matches any Spark source column of `db.t`."""
    wild = {_table_of(s) for s in parsed if s.endswith(".*")}
    exact = {s for s in parsed if not s.endswith(".*")}
    seen = set(spark)
    if exact - seen:
        return True
    return any(s not in exact and _table_of(s) not in wild for s in seen)


def compare(
    lineage: ScriptLineage,
    target: str,
    observed: ObservedLineage,
    default_database: str = "default",
    compare_dependencies: bool = False,
) -> Comparison:
    """The differences between the parser's lineage of `target` and what Spark's plan read."""
    parsed = parsed_answer(lineage, target, default_database)
    diffs: list[Difference] = []
    p_tables, s_tables = set(parsed.tables), set(observed.tables)
    for table in sorted(p_tables ^ s_tables):
        diffs.append(Difference("table", table, sorted(p_tables), sorted(s_tables)))
    star = parsed.columns.get("*")
    star_tables = {_table_of(s) for s in star or ()}
    qualified = target.lower()
    for name in list(parsed.columns) + [c for c in observed.columns if c not in parsed.columns]:
        if name == "*":
            continue
        p_src = parsed.columns.get(name)
        s_src = observed.columns.get(name)
        subject = f"{qualified}.{name}"
        if p_src is None:
            # Covered by the parser's unexpanded star when its sources come from the star's tables.
            if star is not None and all(_table_of(s) in star_tables for s in s_src or ()):
                continue
            diffs.append(Difference("column", subject, None, s_src))
        elif s_src is None:
            diffs.append(Difference("column", subject, p_src, None))
        elif _source_diff(p_src, s_src):
            diffs.append(Difference("column_sources", subject, p_src, s_src))
    notes: list[Difference] = []
    if _source_diff(parsed.dependencies, observed.dependencies):
        dep = Difference("dependencies", qualified, parsed.dependencies, observed.dependencies)
        (diffs if compare_dependencies else notes).append(dep)
    return Comparison(target=qualified, parsed=parsed, spark=observed, differences=diffs, notes=notes)
