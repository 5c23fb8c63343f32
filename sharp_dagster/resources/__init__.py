"""Dagster resources: the Spark session and the warehouse IO manager."""
