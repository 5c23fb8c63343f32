"""Local servers for tests and the demo: a private MariaDB with a row binlog and an Apache Kafka broker (KRaft).

Each server runs in a folder of its own on a free loopback port and is stopped by its own process id; how a
server's process is started, waited for and stopped is `process.py`, the one place for it.
"""

from sharp_dagster.servers.broker import LocalBroker
from sharp_dagster.servers.mariadb import LocalMariaDB
from sharp_dagster.servers.ports import free_port, wait_for_port

__all__ = ["LocalBroker", "LocalMariaDB", "free_port", "wait_for_port"]
