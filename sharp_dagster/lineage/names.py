"""The name Spark gives a select-list expression written without an alias (`max(col1)`, `(a + b)`, `count(1)`).

This module owns `spark_name`: a query's unaliased output columns are named the way Spark's analyzer names them
(`toPrettySQL`: qualifiers dropped, string literals bare, binary operators in parentheses, function names lower
case, `count(*)` as `count(1)`, a CAST named after its input), so a target written without a schema gets the column
names a reader of the Spark table sees. Shapes not listed fall back to sqlglot's Spark SQL of the expression.

    >>> from sqlglot import parse_one
    >>> spark_name(parse_one("SELECT (t.a + b) * 2", read="spark").expressions[0])
    '((a + b) * 2)'
"""

from __future__ import annotations

from sqlglot import exp

__all__ = ["spark_name"]

_BINARY = {
    exp.Add: "+",
    exp.Sub: "-",
    exp.Mul: "*",
    exp.Div: "/",
    exp.Mod: "%",
    exp.EQ: "=",
    exp.NEQ: "!=",
    exp.NullSafeEQ: "<=>",
    exp.GT: ">",
    exp.GTE: ">=",
    exp.LT: "<",
    exp.LTE: "<=",
    exp.And: "AND",
    exp.Or: "OR",
    exp.DPipe: "||",
    exp.BitwiseAnd: "&",
    exp.BitwiseOr: "|",
    exp.BitwiseXor: "^",
}
# Window functions whose default frame Spark prints as ROWS (aggregates over an ordered window get RANGE).
_ROW_FRAME = {"row_number", "rank", "dense_rank", "percent_rank", "cume_dist", "ntile"}


def spark_name(e: exp.Expression) -> str:
    """Spark's name of the unaliased select-list expression `e` (case as written; the caller normalises)."""
    t = type(e)
    if t is exp.Column:
        return e.name if type(e.this) is not exp.Star else "*"
    if t is exp.Paren:
        return spark_name(e.this)
    if t is exp.Literal:
        return e.this
    if t is exp.Boolean:
        return "true" if e.this else "false"
    if t is exp.Null:
        return "NULL"
    if t in (exp.Cast, exp.TryCast):  # Spark 4 names a cast after its input
        return spark_name(e.this)
    op = _BINARY.get(t)
    if op is not None:
        return f"({spark_name(e.this)} {op} {spark_name(e.expression)})"
    if t is exp.Neg or t is exp.Not:
        return f"({'-' if t is exp.Neg else 'NOT'} {spark_name(e.this)})"
    if t is exp.Is:
        return f"({spark_name(e.this)} IS {spark_name(e.expression)})"
    if t is exp.In and not e.args.get("query"):
        return f"({spark_name(e.this)} IN ({_args(e.expressions)}))"
    if t is exp.Between:
        return f"between({spark_name(e.this)}, {spark_name(e.args['low'])}, {spark_name(e.args['high'])})"
    if t is exp.Like:
        return f"{spark_name(e.this)} LIKE {spark_name(e.expression)}"
    if t is exp.Case:
        return _case(e)
    if t is exp.If:
        false = e.args.get("false")
        parts = [e.this, e.args.get("true")] + ([false] if false is not None else [])
        return f"(IF({_args(parts)}))"
    if t is exp.Count:
        inner = e.this
        if inner is None or type(inner) is exp.Star:
            return "count(1)"
        if type(inner) is exp.Distinct:
            return f"count(DISTINCT {_args(inner.expressions)})"
        return f"count({spark_name(inner)})"
    if t is exp.Window:
        return _window(e)
    if t is exp.Anonymous:
        return f"{e.name.lower()}({_args(e.expressions)})"
    if isinstance(e, exp.Func):
        args = [v for v in e.args.values() if isinstance(v, exp.Expression)]
        for v in e.args.values():
            if type(v) is list:
                args.extend(x for x in v if isinstance(x, exp.Expression))
        return f"{e.sql_name().lower()}({_args(args)})"
    return e.sql(dialect="spark")


def _args(items: list) -> str:
    return ", ".join(spark_name(x) for x in items if x is not None)


def _case(e: exp.Case) -> str:
    parts = ["CASE"]
    if e.this is not None:
        parts.append(spark_name(e.this))
    for branch in e.args.get("ifs") or ():
        parts.append(f"WHEN {spark_name(branch.this)} THEN {spark_name(branch.args['true'])}")
    default = e.args.get("default")
    if default is not None:
        parts.append(f"ELSE {spark_name(default)}")
    parts.append("END")
    return " ".join(parts)


def _window(e: exp.Window) -> str:
    func = spark_name(e.this)
    spec: list[str] = []
    partition = e.args.get("partition_by") or []
    if partition:
        spec.append(f"PARTITION BY {_args(partition)}")
    order = e.args.get("order")
    if order is not None:
        keys = []
        for o in order.expressions:
            desc = bool(o.args.get("desc"))
            nulls_first = o.args.get("nulls_first")
            nulls = (
                ("FIRST" if nulls_first else "LAST")
                if nulls_first is not None
                else ("LAST" if desc else "FIRST")
            )
            keys.append(f"{spark_name(o.this)} {'DESC' if desc else 'ASC'} NULLS {nulls}")
        spec.append(f"ORDER BY {', '.join(keys)}")
    if e.args.get("spec") is None:
        name = func.split("(", 1)[0]
        if order is None:
            spec.append("ROWS BETWEEN UNBOUNDED PRECEDING AND UNBOUNDED FOLLOWING")
        elif name in _ROW_FRAME:
            spec.append("ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW")
        else:
            spec.append("RANGE BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW")
    else:
        spec.append(e.args["spec"].sql(dialect="spark"))
    return f"{func} OVER ({' '.join(spec)})"
