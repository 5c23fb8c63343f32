"""What the operations CLI needs to know about the project without loading Dagster: its log-driven assets."""

from __future__ import annotations

from datetime import datetime

from sharp_dagster.periods import PeriodSpec


def log_driven_assets() -> dict[str, PeriodSpec]:
    """Every log-driven asset, `layer/table` -> its periods (from the SQL catalog and the CDC configuration)."""
    from sharp_dagster.warehouse.catalog import load_catalog

    assets = {
        t.asset_key_str: PeriodSpec(t.grain, datetime.fromisoformat(t.start)) for t in load_catalog().tables
    }
    assets.update(_cdc_assets())
    return assets


def _cdc_assets() -> dict[str, PeriodSpec]:
    try:
        from sharp_dagster.cdc.assets_spec import cdc_period_specs
    except ImportError:  # the CDC layer is optional
        return {}
    return cdc_period_specs()
