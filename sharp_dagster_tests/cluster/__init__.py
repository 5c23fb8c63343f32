"""A Spark standalone cluster (master + worker) running the warehouse assets through Dagster."""
