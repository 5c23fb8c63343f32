"""How a select-list expression computes its value, and which clause a row-steering column comes from: the
OpenLineage transformation types of the lineage walk (`queries.py`; the bits and names in `relations.py`).

`own_kind` is what the expression itself does (a bare column is IDENTITY, an aggregate over a column AGGREGATION,
anything else TRANSFORMATION); the walk adds what the columns it reads already carry (a column of a CTE that
aggregates) and AGGREGATION for an aggregate anywhere inside. `CLAUSE_KINDS` names the INDIRECT subtype of each
clause whose columns steer rows.
"""

from __future__ import annotations

from sqlglot import exp

from sharp_dagster.lineage.relations import AGGREGATION, FILTER, GROUP_BY, SORT, TRANSFORMATION

__all__ = ["AGG_TYPES", "CLAUSE_KINDS", "own_kind"]


def _subclasses(cls: type) -> set[type]:
    out = set()
    for sub in cls.__subclasses__():
        out.add(sub)
        out |= _subclasses(sub)
    return out


# lag / lead read one other row's value: a transformation, though sqlglot files them under aggregates.
AGG_TYPES = frozenset(_subclasses(exp.AggFunc) - {exp.Lag, exp.Lead})
CLAUSE_KINDS = {
    exp.Where: FILTER,
    exp.Having: FILTER,
    exp.Qualify: FILTER,
    exp.Group: GROUP_BY,
    exp.Order: SORT,
    exp.Sort: SORT,
    exp.Distribute: SORT,
    exp.Cluster: SORT,
}


def own_kind(e: exp.Expression) -> int:
    """How a select-list expression computes its value, apart from what the columns it reads already carry."""
    while type(e) is exp.Alias or type(e) is exp.Paren:
        e = e.this
    t = type(e)
    if t is exp.Column:
        return 0
    if t is exp.Window:
        e = e.this
        t = type(e)
    if t in AGG_TYPES:
        x = e.this
        if type(x) is exp.Distinct and len(x.expressions) == 1:
            x = x.expressions[0]
        if type(x) is exp.Column or type(x) is exp.Star:
            return AGGREGATION
    return TRANSFORMATION
