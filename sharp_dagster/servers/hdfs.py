"""A real HDFS on this machine for tests: one NameNode and one DataNode, each a JVM of its own.

Both run Hadoop's own daemon main classes (`NameNode`, `DataNode`) from the jars `jvm/pom.xml` pins in its test
profile (`jvm/lib/hdfs/`, Hadoop's shaded minicluster jar at the Hadoop line PySpark ships), with a configuration
folder of our own on their class path: every address on loopback and a free port, the name and data folders under
`base_dir`, replication 1 and permissions off (one user, one machine). The NameNode is formatted once per
`base_dir`. The file system is ready when the NameNode's JMX says one DataNode is live and safe mode is off.
Stopping sends SIGTERM to each by its own pid (the DataNode first). Production points `SHARP_WAREHOUSE_DIR` at a
real HDFS instead (`hdfs://namenode:8020/warehouse`).
"""

from __future__ import annotations

import json
import subprocess
import urllib.error
import urllib.request
from pathlib import Path
from xml.sax.saxutils import escape

from sharp_dagster import jvm
from sharp_dagster.servers.ports import free_port
from sharp_dagster.servers.process import (
    LocalServerInFolder,
    java,
    log_tail,
    spawn_logged,
    stop_process,
    wait_port,
    wait_ready,
)

NAMENODE_CLASS = "org.apache.hadoop.hdfs.server.namenode.NameNode"
DATANODE_CLASS = "org.apache.hadoop.hdfs.server.datanode.DataNode"
# Two small daemons beside Spark, Dagster, Kafka and a database on a small shared machine.
JVM_OPTIONS = ["-Xms64m", "-Xmx384m", "-XX:+UseSerialGC", "-Djava.awt.headless=true"]
# Warnings and errors of each daemon to its log file (its stdout); Hadoop's INFO chatter is off.
LOG4J = (
    "log4j.rootLogger=WARN, console\n"
    "log4j.appender.console=org.apache.log4j.ConsoleAppender\n"
    "log4j.appender.console.layout=org.apache.log4j.PatternLayout\n"
    "log4j.appender.console.layout.ConversionPattern=%d{ISO8601} %p %c{2}: %m%n\n"
)


def _site_xml(props: dict[str, str]) -> str:
    body = "".join(
        f"  <property><name>{escape(k)}</name><value>{escape(v)}</value></property>\n"
        for k, v in props.items()
    )
    return f'<?xml version="1.0"?>\n<configuration>\n{body}</configuration>\n'


class LocalHdfs(LocalServerInFolder):
    """`with LocalHdfs() as hdfs:`; `hdfs.uri` is `hdfs://127.0.0.1:PORT` (the file system's root)."""

    def __init__(self, base_dir: str | Path | None = None, startup_timeout: float = 120.0):
        super().__init__(base_dir, "sharp_hdfs_")
        self.host = "127.0.0.1"
        self.startup_timeout = startup_timeout
        self.ports = {
            name: free_port(self.host)
            for name in ("namenode", "namenode_http", "datanode", "datanode_http", "datanode_ipc")
        }
        self.namenode: subprocess.Popen | None = None
        self.datanode: subprocess.Popen | None = None

    # ------------------------------------------------------------------ addresses
    @property
    def uri(self) -> str:
        return f"hdfs://{self.host}:{self.ports['namenode']}"

    @property
    def namenode_http(self) -> str:
        return f"http://{self.host}:{self.ports['namenode_http']}"

    @property
    def conf_dir(self) -> Path:
        return self.base_dir / "conf"

    @property
    def pids(self) -> dict[str, int | None]:
        return {
            "namenode": self.namenode.pid if self.namenode else None,
            "datanode": self.datanode.pid if self.datanode else None,
        }

    def log_path(self, daemon: str) -> Path:
        return self.base_dir / "logs" / f"{daemon}.log"

    # ------------------------------------------------------------------ configuration
    def _write_conf(self) -> None:
        self.conf_dir.mkdir(parents=True, exist_ok=True)
        h, p = self.host, self.ports
        core = {"fs.defaultFS": self.uri, "hadoop.tmp.dir": str(self.base_dir / "tmp")}
        hdfs = {
            "dfs.namenode.name.dir": str(self.base_dir / "name"),
            "dfs.datanode.data.dir": str(self.base_dir / "data"),
            "dfs.namenode.rpc-address": f"{h}:{p['namenode']}",
            "dfs.namenode.http-address": f"{h}:{p['namenode_http']}",
            "dfs.datanode.address": f"{h}:{p['datanode']}",
            "dfs.datanode.http.address": f"{h}:{p['datanode_http']}",
            "dfs.datanode.ipc.address": f"{h}:{p['datanode_ipc']}",
            "dfs.datanode.hostname": h,
            "dfs.replication": "1",
            "dfs.permissions.enabled": "false",
            # A fresh one-node file system: nothing to wait for before it accepts writes.
            "dfs.namenode.safemode.threshold-pct": "0",
            "dfs.namenode.safemode.extension": "0",
            "dfs.namenode.safemode.min.datanodes": "0",
            "dfs.datanode.du.reserved": "0",
            "dfs.heartbeat.interval": "1",
            # No DNS names for loopback: the DataNode registers by IP, clients dial it by IP.
            "dfs.namenode.datanode.registration.ip-hostname-check": "false",
        }
        (self.conf_dir / "core-site.xml").write_text(_site_xml(core))
        (self.conf_dir / "hdfs-site.xml").write_text(_site_xml(hdfs))
        (self.conf_dir / "log4j.properties").write_text(LOG4J)

    def _command(self, main_class: str, *args: str) -> list[str]:
        classpath = f"{self.conf_dir}:{jvm.classpath('hdfs')}"
        return [java(), *JVM_OPTIONS, f"-Dhadoop.log.dir={self.base_dir / 'logs'}", "-cp", classpath,
                main_class, *args]  # fmt: skip

    def _format(self) -> None:
        if (self.base_dir / "name" / "current" / "VERSION").exists():
            return
        cmd = self._command(NAMENODE_CLASS, "-format", "-force", "-nonInteractive")
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=180, cwd=self.base_dir)
        if done.returncode != 0:
            raise RuntimeError(f"HDFS NameNode format failed ({done.returncode}): {done.stderr[-3000:]}")

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> LocalHdfs:
        (self.base_dir / "logs").mkdir(parents=True, exist_ok=True)
        self._write_conf()
        try:
            self._format()
            self.namenode = spawn_logged(
                self._command(NAMENODE_CLASS), self.log_path("namenode"), cwd=self.base_dir
            )
            self._wait_port(self.ports["namenode"], self.namenode, "namenode")
            self._wait_port(self.ports["namenode_http"], self.namenode, "namenode")
            self.datanode = spawn_logged(
                self._command(DATANODE_CLASS), self.log_path("datanode"), cwd=self.base_dir
            )
            self._wait_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def _wait_port(self, port: int, process: subprocess.Popen, daemon: str) -> None:
        wait_port(f"HDFS {daemon}", port, process, self.log_path(daemon), self.host, self.startup_timeout)

    def namenode_state(self) -> dict:
        """The NameNode's FSNamesystemState bean (NumLiveDataNodes, FSState ...) from its JMX servlet."""
        query = "Hadoop:service=NameNode,name=FSNamesystemState"
        with urllib.request.urlopen(f"{self.namenode_http}/jmx?qry={query}", timeout=5) as resp:
            beans = json.loads(resp.read().decode("utf-8"))["beans"]
        return beans[0] if beans else {}

    def _wait_ready(self) -> None:
        def one_live_datanode() -> bool:
            state = self.namenode_state()
            return state.get("NumLiveDataNodes", 0) >= 1 and state.get("FSState") == "Operational"

        wait_ready(
            one_live_datanode,
            [(f"HDFS {d}", getattr(self, d), self.log_path(d)) for d in ("namenode", "datanode")],
            self.startup_timeout,
            0.5,
            retry_on=(urllib.error.URLError, OSError, ValueError, KeyError),
            failure=lambda _: TimeoutError(
                f"no live DataNode on {self.uri} after {self.startup_timeout:.0f}s:\n{self._tail('datanode')}"
            ),
        )

    def stop(self) -> None:
        """Stop the DataNode, then the NameNode, each by its own pid."""
        for daemon in ("datanode", "namenode"):
            process = getattr(self, daemon)
            if process is not None:
                stop_process(process, grace_seconds=20)
                setattr(self, daemon, None)

    def _tail(self, daemon: str, chars: int = 3000) -> str:
        return log_tail(self.log_path(daemon), chars)

    def __repr__(self) -> str:
        return f"LocalHdfs({self.uri}, pids={self.pids}, dir={self.base_dir})"
