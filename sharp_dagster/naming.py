"""Table names, in one place. A warehouse table has three spellings:

- `db.table`, qualified: SQL, Spark, the lineage graph, the catalog;
- `db/table`, the asset key as a string: the job log's job name, the command line, Dagster's UI;
- `["db", "table"]`, the asset key's path: Dagster's `AssetKey`.

>>> parts("ods.orders"), parts("ods/orders"), parts(["ods", "orders"])
(['ods', 'orders'], ['ods', 'orders'], ['ods', 'orders'])
>>> qualified("ods/orders"), key_str("ods.orders")
('ods.orders', 'ods/orders')

A name with a platform (`mysql:shop.user_info_0`, a source table) keeps the platform in its first part.
"""

from __future__ import annotations

from collections.abc import Sequence

Name = str | Sequence[str]


def parts(name: Name) -> list[str]:
    """The parts of a table name in any of its spellings."""
    if isinstance(name, str):
        return name.split("/") if "/" in name else name.split(".")
    return list(name)


def qualified(name: Name) -> str:
    """`db.table`."""
    return ".".join(parts(name))


def key_str(name: Name) -> str:
    """`db/table`."""
    return "/".join(parts(name))
