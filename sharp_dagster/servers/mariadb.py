"""A private MariaDB server with a FULL row binlog, for tests and the demo.

`mariadb-install-db` creates a data folder in a temp dir; `mariadbd` runs as root (`--user=root`) on a free
loopback port with its socket, pid file and error log in that folder. `--no-defaults` keeps the machine's
`/etc/mysql` configuration out. The binlog settings are those python-mysql-replication needs: ROW format, FULL
row image and FULL row metadata (without it columns arrive as `UNKNOWN_COL0...`).
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pymysql

from sharp_dagster.servers.ports import free_port, wait_for_port
from sharp_dagster.servers.process import (
    LocalServerInFolder,
    log_tail,
    spawn_logged,
    stop_process,
    wait_ready,
)

INSTALL_DB = "mariadb-install-db"
MARIADBD = "mariadbd"


class LocalMariaDB(LocalServerInFolder):
    """Start with `start()` or `with LocalMariaDB() as db:`; `db.connect()` gives a root PyMySQL connection."""

    def __init__(
        self,
        base_dir: str | Path | None = None,
        port: int | None = None,
        server_id: int = 1,
        extra_args: tuple[str, ...] = (),
        startup_timeout: float = 60.0,
    ):
        super().__init__(base_dir, "sharp_mariadb_")
        self.port = port or free_port()
        self.host = "127.0.0.1"
        self.server_id = server_id
        self.extra_args = tuple(extra_args)
        self.startup_timeout = startup_timeout
        self.process: subprocess.Popen | None = None

    # ------------------------------------------------------------------ paths
    @property
    def datadir(self) -> Path:
        return self.base_dir / "data"

    @property
    def socket_path(self) -> Path:
        return self.base_dir / "mysqld.sock"

    @property
    def error_log(self) -> Path:
        return self.base_dir / "mariadbd.err"

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process else None

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> LocalMariaDB:
        for tool in (INSTALL_DB, MARIADBD):
            if shutil.which(tool) is None and not Path("/usr/sbin", tool).exists():
                raise RuntimeError(f"{tool} not found: install the Debian package mariadb-server")
        self.base_dir.mkdir(parents=True, exist_ok=True)
        if not (self.datadir / "mysql").exists():
            self._install()
        (self.base_dir / "tmp").mkdir(exist_ok=True)
        cmd = [
            shutil.which(MARIADBD) or f"/usr/sbin/{MARIADBD}",
            "--no-defaults",
            f"--datadir={self.datadir}",
            "--user=root",
            f"--port={self.port}",
            f"--bind-address={self.host}",
            f"--socket={self.socket_path}",
            f"--pid-file={self.base_dir / 'mariadbd.pid'}",
            f"--log-error={self.error_log}",
            f"--tmpdir={self.base_dir / 'tmp'}",
            f"--log-bin={self.datadir / 'binlog'}",
            "--binlog-format=ROW",
            "--binlog-row-image=FULL",
            "--binlog-row-metadata=FULL",
            f"--server-id={self.server_id}",
            # Small footprint: tests run several servers on a 2-core machine.
            "--innodb-buffer-pool-size=32M",
            "--innodb-log-file-size=16M",
            "--performance-schema=OFF",
            "--skip-name-resolve",
            *self.extra_args,
        ]
        self.process = spawn_logged(cmd, self.base_dir / "mariadbd.out")
        try:
            self._wait_ready()
        except Exception:
            self.stop()
            raise
        return self

    def _install(self) -> None:
        cmd = [
            shutil.which(INSTALL_DB) or INSTALL_DB,
            "--no-defaults",
            f"--datadir={self.datadir}",
            "--user=root",
            "--auth-root-authentication-method=normal",
            "--skip-test-db",
        ]
        result = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
        if result.returncode != 0:
            raise RuntimeError(
                f"mariadb-install-db failed for {self.datadir} (exit {result.returncode}): "
                f"{(result.stderr or result.stdout)[-2000:]}"
            )

    def _wait_ready(self) -> None:
        wait_for_port(self.port, timeout=self.startup_timeout, process=self.process)

        def no_answer(last: BaseException | None) -> RuntimeError:
            tail = log_tail(self.error_log, 2000)
            return RuntimeError(f"MariaDB on port {self.port} did not answer: {last}\n{tail}")

        watched = [("MariaDB", self.process, self.error_log)]
        retry_on = (pymysql.err.Error,)
        wait_ready(self._grant_root, watched, self.startup_timeout, 0.1, retry_on=retry_on, failure=no_answer)

    def _grant_root(self) -> bool:
        """Let root in over TCP too (True once the server answers)."""
        conn = self.connect()
        with conn.cursor() as cur:
            cur.execute("SET sql_log_bin = 0")  # server setup is not a change to capture
            # --skip-name-resolve: root@localhost does not match TCP clients, so grant root@127.0.0.1.
            cur.execute("CREATE USER IF NOT EXISTS 'root'@'127.0.0.1'")
            cur.execute("GRANT ALL PRIVILEGES ON *.* TO 'root'@'127.0.0.1' WITH GRANT OPTION")
        conn.close()
        return True

    def stop(self) -> None:
        if self.process is not None:
            stop_process(self.process, grace_seconds=30)
            self.process = None

    # ------------------------------------------------------------------ clients
    def connect(
        self, database: str | None = None, user: str = "root", password: str = "", **kwargs
    ) -> pymysql.Connection:
        """A PyMySQL connection over the unix socket for root (no TCP grant needed), autocommit on."""
        params = dict(user=user, password=password, autocommit=True, charset="utf8mb4", **kwargs)
        if database:
            params["database"] = database
        if user == "root" and not password:
            return pymysql.connect(unix_socket=str(self.socket_path), **params)
        return pymysql.connect(host=self.host, port=self.port, **params)

    def execute(self, *statements: str, database: str | None = None) -> None:
        """Run statements as root, each in autocommit."""
        conn = self.connect(database)
        try:
            with conn.cursor() as cur:
                for sql in statements:
                    cur.execute(sql)
        finally:
            conn.close()

    def create_user(self, user: str, password: str, replication: bool = True) -> None:
        """A TCP user on 127.0.0.1 with SELECT (snapshots) and, by default, the replication privileges."""
        privileges = (
            "SELECT, RELOAD, REPLICATION SLAVE, BINLOG MONITOR, REPLICATION SLAVE ADMIN"
            if replication
            else "SELECT"
        )
        conn = self.connect()
        try:
            with conn.cursor() as cur:
                cur.execute("CREATE USER IF NOT EXISTS %s@'127.0.0.1' IDENTIFIED BY %s", (user, password))
                cur.execute(f"GRANT {privileges} ON *.* TO %s@'127.0.0.1'", (user,))
        finally:
            conn.close()

    def mysql_settings(self, user: str = "root", password: str = "") -> dict:
        """Connection settings in the form python-mysql-replication and PyMySQL take."""
        return {"host": self.host, "port": self.port, "user": user, "passwd": password}

    def __repr__(self) -> str:
        return f"LocalMariaDB(port={self.port}, pid={self.pid}, dir={self.base_dir})"
