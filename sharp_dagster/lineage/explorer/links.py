"""Where the lineage explorer listens by default, and the URL of a table's page.

Kept apart from the server so that the Dagster definitions can link each asset to its page without importing
the server: the base URL comes from `SHARP_LINEAGE_URL` (e.g. the explorer behind a proxy), else the default
loopback address `sharp-dagster lineage serve` listens on.
"""

from __future__ import annotations

from urllib.parse import quote

from sharp_dagster.settings import lineage_url

__all__ = ["DEFAULT_HOST", "DEFAULT_PORT", "base_url", "table_path", "table_url"]

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 3070  # next to Dagster's UI (3000), unlikely to clash with it


def base_url() -> str:
    """The explorer's base URL, without a trailing slash."""
    url = lineage_url() or f"http://{DEFAULT_HOST}:{DEFAULT_PORT}"
    if not url.startswith(("http://", "https://")):
        raise ValueError(f"SHARP_LINEAGE_URL must be an http(s) URL, got {url!r}")
    return url.rstrip("/")


def table_path(table: str) -> str:
    """'ads.gmv_daily' or 'ads/gmv_daily' -> '/table/ads/gmv_daily'; other platforms keep their prefix
    ('mysql:shop.orders' -> '/table/mysql:shop/orders')."""
    if not table or table.strip() != table:
        raise ValueError(f"a table name is needed, got {table!r}")
    platform, _, rest = table.rpartition(":")
    path = rest.replace(".", "/", 1) if "/" not in rest else rest
    if platform:
        path = f"{platform}:{path}"
    return "/table/" + quote(path, safe="/:")


def table_url(table: str, base: str | None = None) -> str:
    """Full URL of a table's page under `base` (default: `base_url()`)."""
    return (base.rstrip("/") if base else base_url()) + table_path(table)
