"""sharp_dagster: a log-driven Spark data warehouse as a Dagster code location."""

__version__ = "0.1.0"
