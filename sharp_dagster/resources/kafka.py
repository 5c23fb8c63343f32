"""Kafka as a Dagster resource: the cluster the binlog topics live on, for the landing assets and the Kafka
sensors (`definitions.py` chooses it, as it chooses Spark)."""

from __future__ import annotations

from dagster import ConfigurableResource, Failure
from pydantic import Field

from sharp_dagster.settings import KAFKA_ENV, kafka_bootstrap


class KafkaResource(ConfigurableResource):
    """The Kafka cluster's client settings. `bootstrap_servers` defaults to `SHARP_KAFKA_BOOTSTRAP`, read when a
    run or a sensor tick asks (`consumer_config`), not when the code location loads."""

    bootstrap_servers: str | None = Field(
        default=None, description="Kafka bootstrap servers (host:port,...); default SHARP_KAFKA_BOOTSTRAP"
    )

    def consumer_config(self) -> dict[str, str]:
        """librdkafka's consumer settings (`bootstrap.servers`); a Failure naming the variable when none is set."""
        servers = self.bootstrap_servers or kafka_bootstrap()
        if not servers:
            raise Failure(
                description=f"{KAFKA_ENV} is not set: no Kafka bootstrap servers to land the binlog from"
            )
        return {"bootstrap.servers": servers}
