"""The Iceberg tests' fixture `ice` (`iceberg_support.py`), for every test module here."""

from sharp_dagster_tests.spark.iceberg_support import ice  # noqa: F401
