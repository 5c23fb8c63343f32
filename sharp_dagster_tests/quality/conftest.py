from sharp_dagster_tests.logdriven.conftest import own_feed  # noqa: F401  (a fresh data folder + binlog feed per test)
