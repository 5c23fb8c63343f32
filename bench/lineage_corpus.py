"""A deterministic corpus of varied Spark / Hive ETL statements for the lineage benchmark.

`statements(n, seed)` returns `n` (kind, dialect, sql) triples drawn from templates shaped like warehouse ETL:
joins, CTE chains, unions, window functions, lateral views, inserts with static and dynamic partitions, MERGE,
CTAS, views, subqueries, Hive multi-insert and UPDATE, and whole scripts off the happy path: temporary views
consumed in the same script, DDL, LIKE / CLONE, staging tables renamed or exchanged into place, INSERT ... VALUES
with subqueries, CTEs shadowing real tables next to unused ones. Same arguments, same statements.
"""

from __future__ import annotations

import random

LAYERS = {
    "ods": ["orders", "users", "items", "payments", "shops", "events", "refunds", "coupons"],
    "dwd": [
        "order_detail",
        "user_profile",
        "item_sku",
        "pay_flow",
        "shop_info",
        "event_log",
        "refund_detail",
    ],
    "ads": ["gmv_daily", "user_retention", "shop_rank", "funnel", "coupon_roi"],
}
COLUMNS = [
    "id",
    "user_id",
    "shop_id",
    "item_id",
    "order_id",
    "amount",
    "price",
    "qty",
    "status",
    "channel",
    "city",
    "province",
    "created_at",
    "updated_at",
    "pay_time",
    "category",
    "brand",
    "discount",
    "fee",
    "score",
    "tags",
    "ext_json",
    "device",
    "os",
    "version",
    "is_new",
    "level",
    "region",
    "source",
    "op_type",
]
FUNCS = [
    "coalesce({c}, 0)",
    "upper({c})",
    "cast({c} AS string)",
    "round({c} * 1.0, 2)",
    "nvl({c}, '')",
    "substr({c}, 1, 8)",
    "to_date({c})",
    "abs({c})",
    "length({c})",
    "concat_ws('-', {c}, 'x')",
]
AGGS = ["sum({c})", "count(DISTINCT {c})", "max({c})", "min({c})", "avg({c})", "count(1)"]


class _Gen:
    def __init__(self, seed: int):
        self.r = random.Random(seed)

    def table(self, layer: str | None = None) -> str:
        layer = layer or self.r.choice(["ods", "dwd"])
        return f"{layer}.{self.r.choice(LAYERS[layer])}"

    def cols(self, k: int) -> list[str]:
        return self.r.sample(COLUMNS, k)

    def expr(self, alias: str, col: str) -> str:
        r = self.r.random()
        ref = f"{alias}.{col}"
        if r < 0.45:
            return ref
        if r < 0.75:
            return self.r.choice(FUNCS).format(c=ref)
        if r < 0.9:
            other = f"{alias}.{self.r.choice(COLUMNS)}"
            return f"CASE WHEN {other} > 0 THEN {ref} ELSE NULL END"
        return f"{ref} + {alias}.{self.r.choice(COLUMNS)}"

    def select_list(self, aliases: list[str], k: int) -> str:
        items = []
        used = set()
        for i in range(k):
            a = self.r.choice(aliases)
            c = self.r.choice(COLUMNS)
            name = f"{c}_{i}" if c in used else c
            used.add(c)
            items.append(f"{self.expr(a, c)} AS {name}")
        return ",\n       ".join(items)

    def where(self, alias: str) -> str:
        c1, c2 = self.r.sample(COLUMNS, 2)
        return f"{alias}.dt = '2024-06-01' AND {alias}.{c1} IS NOT NULL AND {alias}.{c2} <> 'x'"

    def joins(self, n: int) -> tuple[str, list[str]]:
        aliases = ["t0"]
        parts = [f"{self.table()} t0"]
        for i in range(1, n):
            kind = self.r.choice(["JOIN", "LEFT JOIN", "LEFT JOIN", "INNER JOIN"])
            key = self.r.choice(["user_id", "order_id", "shop_id", "item_id"])
            parts.append(
                f"{kind} {self.table()} t{i} ON t{i}.{key} = t{i - 1}.{key} AND t{i}.dt = '2024-06-01'"
            )
            aliases.append(f"t{i}")
        return "\n".join(parts), aliases

    def target(self) -> str:
        return self.table(self.r.choice(["dwd", "ads"]))

    # ---- templates ---------------------------------------------------------------------------------------------
    def join_insert(self) -> str:
        src, aliases = self.joins(self.r.randint(2, 5))
        return (
            f"INSERT OVERWRITE TABLE {self.target()} PARTITION (dt = '2024-06-01')\n"
            f"SELECT {self.select_list(aliases, self.r.randint(6, 30))}\nFROM {src}\nWHERE {self.where('t0')}"
        )

    def cte_chain(self) -> str:
        n = self.r.randint(1, 4)
        ctes = []
        prev = None
        for i in range(n):
            if prev is None:
                body = (
                    f"SELECT t.user_id, t.shop_id, {self.r.choice(AGGS).format(c='t.amount')} AS m{i}, "
                    f"max(t.city) AS city\n  FROM {self.table()} t WHERE {self.where('t')}\n"
                    f"  GROUP BY t.user_id, t.shop_id"
                )
            else:
                body = (
                    f"SELECT p.user_id, p.shop_id, p.m{i - 1} * 2 AS m{i}, p.city\n  FROM {prev} p\n"
                    f"  WHERE p.m{i - 1} > {i}"
                )
            ctes.append(f"c{i} AS (\n  {body}\n)")
            prev = f"c{i}"
        return (
            f"WITH {', '.join(ctes)}\nINSERT OVERWRITE TABLE {self.target()}\n"
            f"SELECT x.user_id, x.shop_id, x.m{n - 1} AS metric, x.city, d.level\nFROM {prev} x\n"
            f"LEFT JOIN {self.table('dwd')} d ON d.user_id = x.user_id\nORDER BY metric DESC"
        )

    def union(self) -> str:
        k = self.r.randint(3, 10)
        cols = self.cols(k)
        branches = []
        for _ in range(self.r.randint(2, 4)):
            t = self.table("ods")
            branches.append(f"SELECT {', '.join(f'{c}' for c in cols)} FROM {t} WHERE dt = '2024-06-01'")
        op = self.r.choice(["UNION ALL", "UNION"])
        return f"INSERT INTO TABLE {self.target()}\n" + f"\n{op}\n".join(branches)

    def window(self) -> str:
        fns = ["row_number()", "rank()", "sum(t.amount)", "lag(t.amount, 1)", "count(1)", "max(t.price)"]
        items = ", ".join(
            f"{self.r.choice(fns)} OVER (PARTITION BY t.{self.r.choice(['user_id', 'shop_id'])} "
            f"ORDER BY t.{self.r.choice(['created_at', 'amount'])} DESC) AS w{i}"
            for i in range(self.r.randint(1, 4))
        )
        return (
            f"INSERT OVERWRITE TABLE {self.target()}\nSELECT * FROM (\n  SELECT t.user_id, t.order_id, "
            f"t.amount, {items}\n  FROM {self.table()} t\n  WHERE t.dt = '2024-06-01'\n) r WHERE r.w0 <= 10"
        )

    def lateral(self) -> str:
        kind = self.r.choice(["explode", "posexplode", "json_tuple"])
        if kind == "explode":
            lv = "LATERAL VIEW explode(split(t.tags, ',')) e AS tag"
            cols = "e.tag"
        elif kind == "posexplode":
            lv = "LATERAL VIEW OUTER posexplode(split(t.tags, ',')) e AS pos, tag"
            cols = "e.pos, e.tag"
        else:
            lv = "LATERAL VIEW json_tuple(t.ext_json, 'a', 'b', 'c') j AS ja, jb, jc"
            cols = "j.ja, j.jb, j.jc"
        return (
            f"INSERT OVERWRITE TABLE {self.target()} PARTITION (dt = '2024-06-01')\n"
            f"SELECT t.user_id, t.order_id, {cols}\nFROM {self.table('ods')} t\n{lv}\nWHERE t.dt = '2024-06-01'"
        )

    def dynamic_partition(self) -> str:
        cols = self.cols(self.r.randint(4, 15))
        items = ", ".join(f"s.{c}" for c in cols)
        return (
            f"INSERT OVERWRITE TABLE {self.target()} PARTITION (dt = '2024-06-01', hr)\n"
            f"SELECT {items}, hour(s.created_at) AS hr\nFROM {self.table('ods')} s\n"
            f"WHERE s.dt = '2024-06-01' DISTRIBUTE BY hr"
        )

    def merge(self) -> str:
        cols = self.cols(self.r.randint(3, 8))
        sets = ", ".join(f"t.{c} = s.{c}" for c in cols)
        return (
            f"MERGE INTO {self.table('dwd')} t\nUSING (SELECT * FROM {self.table('ods')} "
            f"WHERE dt = '2024-06-01') s\nON t.id = s.id\nWHEN MATCHED AND s.op_type = 'D' THEN DELETE\n"
            f"WHEN MATCHED THEN UPDATE SET {sets}\n"
            f"WHEN NOT MATCHED THEN INSERT (id, {', '.join(cols)}) VALUES (s.id, "
            f"{', '.join('s.' + c for c in cols)})"
        )

    def ctas(self) -> str:
        src, aliases = self.joins(self.r.randint(1, 3))
        return (
            f"CREATE TABLE IF NOT EXISTS tmp.t_{self.r.randint(1, 999)} USING parquet AS\n"
            f"SELECT {self.select_list(aliases, self.r.randint(3, 12))}\nFROM {src}\nWHERE {self.where('t0')}"
        )

    def view(self) -> str:
        kind = self.r.choice(["VIEW", "TEMPORARY VIEW"])
        return (
            f"CREATE OR REPLACE {kind} {('v_' if 'TEMP' in kind else 'dwd.v_')}{self.r.randint(1, 99)} AS\n"
            f"SELECT t0.user_id, {self.r.choice(AGGS).format(c='t0.amount')} AS m\n"
            f"FROM {self.table()} t0 WHERE {self.where('t0')} GROUP BY t0.user_id HAVING m > 0"
        )

    def subqueries(self) -> str:
        return (
            f"INSERT OVERWRITE TABLE {self.target()}\n"
            f"SELECT a.user_id, a.amount,\n"
            f"       (SELECT max(b.score) FROM {self.table('dwd')} b WHERE b.user_id = a.user_id) AS best\n"
            f"FROM (SELECT user_id, sum(amount) AS amount FROM {self.table('ods')} GROUP BY user_id) a\n"
            f"WHERE a.user_id IN (SELECT user_id FROM {self.table('dwd')} WHERE is_new = 1)\n"
            f"  AND EXISTS (SELECT 1 FROM {self.table('ods')} c WHERE c.user_id = a.user_id)"
        )

    def multi_insert(self) -> str:
        t = self.table("ods")
        inserts = []
        for i in range(self.r.randint(2, 3)):
            cols = ", ".join(f"s.{c}" for c in self.cols(self.r.randint(2, 6)))
            inserts.append(
                f"INSERT OVERWRITE TABLE {self.target()} PARTITION (dt = '2024-06-01')\n"
                f"SELECT {cols} WHERE s.status = {i}"
            )
        return f"FROM {t} s\n" + "\n".join(inserts)

    def update(self) -> str:
        c1, c2 = self.r.sample(COLUMNS, 2)
        return (
            f"UPDATE {self.table('dwd')} SET {c1} = {c2} * 2, updated_at = current_timestamp() WHERE id = 7"
        )

    def group_by(self) -> str:
        src, aliases = self.joins(self.r.randint(1, 3))
        dims = [f"{self.r.choice(aliases)}.{c}" for c in self.cols(self.r.randint(1, 4))]
        aggs = ", ".join(
            f"{self.r.choice(AGGS).format(c=f'{self.r.choice(aliases)}.{c}')} AS a{i}"
            for i, c in enumerate(self.cols(self.r.randint(2, 8)))
        )
        return (
            f"INSERT OVERWRITE TABLE {self.target()} PARTITION (dt = '2024-06-01')\n"
            f"SELECT {', '.join(dims)}, {aggs}\nFROM {src}\nWHERE {self.where('t0')}\n"
            f"GROUP BY {', '.join(dims)}\nHAVING a0 > 0"
        )

    # ---- scripts off the happy path ----------------------------------------------------------------------------
    def temp_script(self) -> str:
        src, aliases = self.joins(self.r.randint(1, 3))
        return (
            f"CREATE OR REPLACE TEMPORARY VIEW v_base AS\nSELECT {self.select_list(aliases, self.r.randint(4, 12))}"
            f"\nFROM {src}\nWHERE {self.where('t0')};\n"
            f"CACHE TABLE v_agg AS SELECT b.user_id, count(1) AS n FROM v_base b GROUP BY b.user_id;\n"
            f"INSERT OVERWRITE TABLE {self.target()} PARTITION (dt = '2024-06-01')\n"
            f"SELECT a.user_id, a.n, u.level FROM v_agg a LEFT JOIN {self.table('dwd')} u ON u.user_id = a.user_id;\n"
            f"UNCACHE TABLE IF EXISTS v_agg"
        )

    def staging_swap(self) -> str:
        target = self.target()
        stg = f"tmp.{target.split('.')[1]}_stg"
        src, aliases = self.joins(self.r.randint(1, 3))
        build = (
            f"DROP TABLE IF EXISTS {stg};\nCREATE TABLE {stg} AS\n"
            f"SELECT {self.select_list(aliases, self.r.randint(3, 10))}, t0.dt\nFROM {src}\nWHERE {self.where('t0')};\n"
        )
        if self.r.random() < 0.5:
            return build + f"DROP TABLE IF EXISTS {target};\nALTER TABLE {stg} RENAME TO {target}"
        return (
            build + f"ALTER TABLE {target} EXCHANGE PARTITION (dt='2024-06-01') WITH TABLE {stg};\n"
            f"DROP TABLE {stg}"
        )

    def ddl(self) -> str:
        target = self.target()
        if self.r.random() < 0.3:
            return f"CREATE TABLE IF NOT EXISTS {target}_bak LIKE {target}"
        cols = ", ".join(f"{c} STRING" for c in self.cols(self.r.randint(3, 12)))
        return f"CREATE TABLE IF NOT EXISTS {target} ({cols}) PARTITIONED BY (dt STRING) STORED AS ORC"

    def values_subquery(self) -> str:
        cols = self.cols(self.r.randint(2, 5))
        values = ", ".join(
            f"(SELECT {self.r.choice(AGGS).format(c=c)} FROM {self.table()} WHERE dt = '2024-06-01')"
            if self.r.random() < 0.6
            else "'x'"
            for c in cols
        )
        return f"INSERT INTO {self.target()} ({', '.join(cols)}) VALUES ({values}), ({values})"

    def cte_shadow(self) -> str:
        name = self.r.choice(LAYERS["ods"])
        return (
            f"WITH {name} AS (SELECT * FROM {name} WHERE dt = '2024-06-01' AND status = 'paid'),\n"
            f"     unused AS (SELECT user_id, sum(amount) AS s FROM {self.table('dwd')} GROUP BY user_id)\n"
            f"INSERT OVERWRITE TABLE {self.target()}\n"
            f"SELECT x.user_id, x.amount, x.city FROM {name} x WHERE x.user_id IN (SELECT user_id FROM {name})"
        )


KINDS = [
    ("join_insert", 4),
    ("cte_chain", 3),
    ("union", 2),
    ("window", 2),
    ("lateral", 2),
    ("dynamic_partition", 2),
    ("merge", 1),
    ("ctas", 2),
    ("view", 1),
    ("subqueries", 2),
    ("multi_insert", 1),
    ("update", 1),
    ("group_by", 3),
    ("temp_script", 1),
    ("staging_swap", 1),
    ("ddl", 1),
    ("values_subquery", 1),
    ("cte_shadow", 1),
]


def statements(n: int = 300, seed: int = 20240601) -> list[tuple[str, str, str]]:
    """`n` statements as (kind, dialect, sql); every kind appears; dialect alternates spark / hive by template."""
    gen = _Gen(seed)
    weighted = [k for k, w in KINDS for _ in range(w)]
    out = []
    for i in range(n):
        kind = KINDS[i][0] if i < len(KINDS) else gen.r.choice(weighted)
        sql = getattr(gen, kind)()
        # MERGE / UPDATE are Spark (Delta/Iceberg) statements; multi-insert is Hive's; the rest go either way.
        if kind in ("merge", "update", "ctas", "view", "temp_script"):
            dialect = "spark"
        elif kind in ("multi_insert", "ddl", "staging_swap"):
            dialect = "hive"  # STORED AS and EXCHANGE PARTITION are Hive's
        else:
            dialect = gen.r.choice(["spark", "hive"])
        out.append((kind, dialect, sql))
    return out


if __name__ == "__main__":
    for kind, dialect, sql in statements(20):
        print(f"-- {kind} ({dialect})\n{sql};\n")
