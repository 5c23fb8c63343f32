"""Dagster resources: the Spark session, the Kafka cluster and the warehouse IO manager."""
