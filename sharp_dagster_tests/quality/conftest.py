from sharp_dagster_tests.logdriven.conftest import feed, isolated  # noqa: F401  (fresh data folder + binlog feed)
