"""A real S3-compatible object store on this machine for tests: SeaweedFS (`weed server`: master, volume server,
filer and S3 gateway in one process), built from its Go module by `sharp_dagster.servers.seaweedfs_build`.

Every listener is on loopback and a free port (each HTTP port and its gRPC port named explicitly, so nothing falls
on SeaweedFS's defaults), its data under `base_dir`; the master's usage telemetry and the Iceberg and Lance
endpoints of its S3 gateway are off. The S3 gateway requires signed requests: one identity with an access key and a
secret made up at start, written only to the gateway's own config file (mode 0600) and handed to clients as the
standard `AWS_ACCESS_KEY_ID` / `AWS_SECRET_ACCESS_KEY` environment variables (`credentials_env()`); nothing here
logs or prints them. `create_bucket()` creates a bucket through `weed shell`, as an operator would. Stopping sends
SIGTERM to the one process by its own pid. Production points `SHARP_WAREHOUSE_DIR` at `s3a://bucket/prefix` on a
real object store instead (deploy/README.md).
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
import tempfile
from pathlib import Path
from types import TracebackType

from sharp_dagster.servers.ports import free_port, wait_for_port
from sharp_dagster.servers.process import spawn_logged, stop_process
from sharp_dagster.servers.seaweedfs_build import require_binary

# Each component's HTTP port, then its gRPC port (SeaweedFS would otherwise take HTTP port + 10000).
_PORTS = ("master", "master_grpc", "volume", "volume_grpc", "filer", "filer_grpc", "s3", "s3_grpc")


class LocalSeaweedfs:
    """`with LocalSeaweedfs() as s3:`; `s3.endpoint` is `http://127.0.0.1:PORT`, the S3 API."""

    def __init__(self, base_dir: str | Path | None = None, startup_timeout: float = 120.0):
        self.host = "127.0.0.1"
        self._own_dir = base_dir is None
        self.base_dir = Path(base_dir) if base_dir else Path(tempfile.mkdtemp(prefix="sharp_seaweedfs_"))
        self.startup_timeout = startup_timeout
        self.ports = {name: free_port(self.host) for name in _PORTS}
        self.access_key = "sharp" + secrets.token_hex(6)
        self._secret_key = secrets.token_urlsafe(30)
        self.process: subprocess.Popen | None = None

    @property
    def endpoint(self) -> str:
        return f"http://{self.host}:{self.ports['s3']}"

    @property
    def log_path(self) -> Path:
        return self.base_dir / "logs" / "weed.log"

    def credentials_env(self) -> dict[str, str]:
        """The S3 identity as the environment variables every AWS SDK (and so Hadoop's S3A) reads."""
        return {"AWS_ACCESS_KEY_ID": self.access_key, "AWS_SECRET_ACCESS_KEY": self._secret_key}

    def s3a_conf(self) -> dict[str, str]:
        """Hadoop S3A settings for this server (as `spark.hadoop.*` keys): no secret among them."""
        return {
            "spark.hadoop.fs.s3a.endpoint": self.endpoint,
            "spark.hadoop.fs.s3a.endpoint.region": "us-east-1",
            "spark.hadoop.fs.s3a.path.style.access": "true",
            "spark.hadoop.fs.s3a.connection.ssl.enabled": "false",
            # Credentials only from the environment (AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY).
            "spark.hadoop.fs.s3a.aws.credentials.provider": (
                "software.amazon.awssdk.auth.credentials.EnvironmentVariableCredentialsProvider"
            ),
        }

    def _addr(self, component: str) -> str:
        """SeaweedFS's `host:port.grpcPort` form, for clients that need both."""
        return f"{self.host}:{self.ports[component]}.{self.ports[component + '_grpc']}"

    def _write_s3_config(self) -> Path:
        identity = {
            "name": "sharp",
            "credentials": [{"accessKey": self.access_key, "secretKey": self._secret_key}],
            "actions": ["Admin", "Read", "List", "Tagging", "Write"],
        }
        path = self.base_dir / "conf" / "s3.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as fh:
            json.dump({"identities": [identity]}, fh)
        return path

    def _command(self, config: Path) -> list[str]:
        p, data = self.ports, self.base_dir / "data"
        data.mkdir(parents=True, exist_ok=True)
        return [str(require_binary()), "server", f"-ip={self.host}", f"-ip.bind={self.host}", f"-dir={data}",
                f"-master.port={p['master']}", f"-master.port.grpc={p['master_grpc']}",
                "-master.telemetry=false", "-master.volumeSizeLimitMB=64", "-volume.max=32",
                f"-volume.port={p['volume']}", f"-volume.port.grpc={p['volume_grpc']}",
                "-filer", f"-filer.port={p['filer']}", f"-filer.port.grpc={p['filer_grpc']}",
                f"-filer.localSocket={self.base_dir / 'filer.sock'}",
                "-s3", f"-s3.port={p['s3']}", f"-s3.port.grpc={p['s3_grpc']}", f"-s3.config={config}",
                "-s3.port.iceberg=0", "-s3.port.lance=0", f"-s3.localSocket={self.base_dir / 's3.sock'}"]  # fmt: skip

    def start(self) -> LocalSeaweedfs:
        command = self._command(self._write_s3_config())
        try:
            self.process = spawn_logged(command, self.log_path, cwd=self.base_dir)
            for component in ("master", "volume", "filer", "s3"):
                wait_for_port(self.ports[component], self.host, self.startup_timeout, self.process)
        except BaseException as exc:
            self.stop()
            if isinstance(exc, RuntimeError | TimeoutError):
                raise RuntimeError(f"SeaweedFS did not start: {exc}\n{self._tail()}") from exc
            raise
        return self

    def create_bucket(self, name: str) -> None:
        """Create bucket `name` with `weed shell` (master and filer over gRPC), as an operator would."""
        shell = [
            str(require_binary()),
            "shell",
            f"-master={self._addr('master')}",
            f"-filer={self._addr('filer')}",
        ]
        done = subprocess.run(
            shell, input=f"s3.bucket.create -name {name}\nexit\n", capture_output=True, text=True, timeout=120
        )
        output = done.stdout + done.stderr
        if done.returncode != 0 or "error" in output.lower():
            raise RuntimeError(
                f"SeaweedFS: creating bucket {name!r} failed ({done.returncode}): {output[-2000:]}"
            )

    def stop(self) -> None:
        if self.process is not None:
            stop_process(self.process, grace_seconds=20)
            self.process = None

    def cleanup(self) -> None:
        """Stop and delete the folder when this object created it."""
        self.stop()
        if self._own_dir:
            shutil.rmtree(self.base_dir, ignore_errors=True)

    def __enter__(self) -> LocalSeaweedfs:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.cleanup()

    def _tail(self, chars: int = 3000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except OSError:
            return f"(no log at {self.log_path})"

    def __repr__(self) -> str:  # never the secret
        pid = self.process.pid if self.process else None
        return f"LocalSeaweedfs({self.endpoint}, pid={pid}, dir={self.base_dir})"
