"""Tooling, not the product: local servers for the tests, the benchmarks and the demo (a private MariaDB with a
row binlog, an Apache Kafka broker in KRaft mode, HDFS, a Spark standalone cluster, `dagster dev`, SeaweedFS).

It sits in the package so that `sharp-dagster demo` can start its broker; it imports only the ground floor
(`settings`, `jvm`), and no part of the product imports it, only `demo/`, `sharp_dagster_tests/` and `bench/`
(`sharp_dagster_tests/house/test_floors.py`, TOOLING).

Each server runs in a folder of its own on a free loopback port and is stopped by its own process id; how a
server's process is started, waited for and stopped is `process.py`, the one place for it.
"""

from sharp_dagster.servers.broker import LocalBroker
from sharp_dagster.servers.mariadb import LocalMariaDB
from sharp_dagster.servers.ports import free_port, wait_for_port

__all__ = ["LocalBroker", "LocalMariaDB", "free_port", "wait_for_port"]
