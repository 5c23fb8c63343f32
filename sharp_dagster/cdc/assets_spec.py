"""The CDC assets' periods for the operations CLI (`sharp_dagster.project.log_driven_assets`)."""

from sharp_dagster.cdc.project import cdc_period_specs

__all__ = ["cdc_period_specs"]
