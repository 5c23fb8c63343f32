"""Spark plumbing with no Dagster import: building sessions and storing table partitions."""
