from sharp_dagster_tests.logdriven.conftest import isolated  # noqa: F401  (a fresh data folder per module)
