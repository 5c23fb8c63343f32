"""A private PostgreSQL server for tests and benchmarks: initdb in a temp dir, a free loopback port, stop by pid.

PostgreSQL refuses to run as root, so under root the cluster is created and run as the `postgres` user
(`subprocess.Popen(user=...)`, which makes the server itself the child whose pid we hold).
"""

from __future__ import annotations

import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import uuid
from pathlib import Path

from sharp_dagster.servers.ports import free_port
from sharp_dagster.servers.process import log_tail, spawn_logged, stop_process, wait_ready

# Debian keeps the server binaries of each installed major version in /usr/lib/postgresql/<major>/bin, off PATH.
DEBIAN_PG_ROOT = Path("/usr/lib/postgresql")


def _major(folder: Path) -> tuple[int, ...]:
    try:
        return tuple(int(part) for part in folder.name.split("."))
    except ValueError:
        return (-1,)


def pg_bin_dirs() -> list[Path]:
    """Where to look for initdb/postgres: Debian's per-version folders (newest first), PATH, /usr/local/bin."""
    debian = sorted(
        (d / "bin" for d in DEBIAN_PG_ROOT.glob("*") if (d / "bin").is_dir()),
        key=lambda b: _major(b.parent),
        reverse=True,
    )
    on_path = [Path(p) for p in os.environ.get("PATH", "").split(os.pathsep) if p]
    return [*debian, *on_path, Path("/usr/local/bin")]


def find_pg_bin(name: str) -> str | None:
    """The first executable `name` in `pg_bin_dirs()` order (so the newest Debian version wins)."""
    for folder in pg_bin_dirs():
        path = folder / name
        if path.is_file() and os.access(path, os.X_OK):
            return str(path)
    return None


def unavailable_reason() -> str | None:
    """Why a private server cannot be started here, or None when it can."""
    if find_pg_bin("initdb") is None or find_pg_bin("postgres") is None:
        where = ", ".join(str(d) for d in pg_bin_dirs())
        return f"PostgreSQL's initdb/postgres not found in {where} (install Debian's postgresql)"
    if os.geteuid() == 0:
        try:
            pwd.getpwnam("postgres")
        except KeyError:
            return "running as root and there is no 'postgres' user to run the server as"
    return None


class PostgresServer:
    """`start()` → running server; `create_database()` → a fresh database URL; `stop()` ends it by its pid."""

    def __init__(self, base_dir: Path | None = None):
        self.base = Path(base_dir or tempfile.mkdtemp(prefix="sharp_pg_"))
        self.port = free_port()
        self.process: subprocess.Popen | None = None
        self._user_kwargs: dict = {}

    def _run_as(self) -> dict:
        if os.geteuid() != 0:
            return {}
        entry = pwd.getpwnam("postgres")
        os.chown(self.base, entry.pw_uid, entry.pw_gid)
        return {"user": entry.pw_uid, "group": entry.pw_gid, "extra_groups": []}

    def start(self, timeout_s: float = 30.0) -> PostgresServer:
        self._user_kwargs = self._run_as()
        init = subprocess.run(
            [
                find_pg_bin("initdb"),
                "-D",
                str(self.base / "data"),
                "-U",
                "postgres",
                "-A",
                "trust",
                "-E",
                "UTF8",
                "--no-sync",
            ],
            capture_output=True,
            text=True,
            **self._user_kwargs,
        )
        if init.returncode != 0:
            raise RuntimeError(f"initdb failed ({init.returncode}): {init.stderr.strip()[-2000:]}")
        try:
            self.launch(timeout_s)
        except BaseException:
            self.stop()
            raise
        return self

    def launch(self, timeout_s: float = 30.0) -> None:
        """Start the server on its data folder and port (initdb done) and wait until it answers."""
        import psycopg

        self.process = spawn_logged(
            [
                find_pg_bin("postgres"),
                "-D",
                str(self.base / "data"),
                "-p",
                str(self.port),
                "-h",
                "127.0.0.1",
                "-k",
                str(self.base),
                "-c",
                "fsync=off",
                "-c",
                "synchronous_commit=off",
                "-c",
                "full_page_writes=off",
                "-c",
                "max_connections=200",
            ],
            self.base / "postgres.log",
            **self._user_kwargs,
        )

        def answers() -> bool:
            psycopg.connect(host="127.0.0.1", port=self.port, user="postgres", dbname="postgres").close()
            return True

        wait_ready(
            answers,
            [("postgres", self.process, self.base / "postgres.log")],
            timeout_s,
            0.1,
            retry_on=(psycopg.OperationalError,),
            failure=lambda _: RuntimeError(f"postgres did not answer within {timeout_s}s: {self.log_tail()}"),
        )

    def log_tail(self) -> str:
        return log_tail(self.base / "postgres.log", 2000)

    def url(self, database: str = "postgres") -> str:
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/{database}"

    def create_database(self, name: str | None = None) -> str:
        import psycopg

        name = name or f"t_{uuid.uuid4().hex[:12]}"
        conn = psycopg.connect(host="127.0.0.1", port=self.port, user="postgres", dbname="postgres")
        conn.autocommit = True
        try:
            with conn.cursor() as cur:
                cur.execute(f'CREATE DATABASE "{name}"')
        finally:
            conn.close()
        return self.url(name)

    def stop(self) -> None:
        if self.process is not None:
            # SIGINT is PostgreSQL's "fast" shutdown: it disconnects clients instead of waiting for them.
            stop_process(self.process, grace_seconds=20, stop_signal=signal.SIGINT)
        self.process = None
        shutil.rmtree(self.base, ignore_errors=True)
