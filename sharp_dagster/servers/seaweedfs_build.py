"""Building the SeaweedFS server binary (`weed`) that the S3 test runs, from its Go module at one pinned version.

SeaweedFS (Apache-2.0) is a Go module on the Go module proxy; its `weed` command serves an S3 API. `go install
module/weed@version` refuses it (its go.mod has a `replace` directive, which `go install pkg@version` does not
allow), so the build does what that command would, with the module as the main module: `go mod download` (the
module proxy, checked against the checksum database), a writable copy of the module's source, `go build ./weed`.
The binary lands in a cache folder outside the work tree (`binary_path()`), so a second bootstrap, another work
tree or a later CI run on the same machine costs nothing; Go's own module and build caches keep the downloads and
compiled packages. `GOTOOLCHAIN=local`: the machine's Go builds it, never one downloaded for the purpose.

`python -m sharp_dagster.servers.seaweedfs_build` builds it when missing and prints its path
(`scripts/bootstrap.sh test` and `bench` run it). Nothing here imports Spark or Dagster.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

MODULE = "github.com/seaweedfs/seaweedfs"
VERSION = "v0.0.0-20261109003541-7506e5f91cd6"


class SeaweedfsMissing(RuntimeError):
    """The `weed` binary was never built on this machine."""


def cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "sharp-dagster" / "seaweedfs"


def binary_path() -> Path:
    """`SHARP_SEAWEEDFS_BIN`, else the cached build of `VERSION`."""
    value = os.environ.get("SHARP_SEAWEEDFS_BIN")
    return Path(value).expanduser() if value else cache_dir() / f"weed-{VERSION}"


def require_binary() -> Path:
    path = binary_path()
    if not (path.is_file() and os.access(path, os.X_OK)):
        raise SeaweedfsMissing(
            f"no SeaweedFS binary at {path}: build it with `scripts/bootstrap.sh test` "
            "(or `python -m sharp_dagster.servers.seaweedfs_build`)"
        )
    return path


def _go() -> str:
    found = shutil.which("go") or ("/usr/local/go/bin/go" if Path("/usr/local/go/bin/go").exists() else None)
    if not found:
        raise RuntimeError("building SeaweedFS needs the Go toolchain (`go`) on PATH")
    return found


def _run(cmd: list[str], cwd: Path | None, env: dict[str, str]) -> str:
    done = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"`{' '.join(cmd)}` failed ({done.returncode}): {done.stderr[-3000:]}")
    return done.stdout


def build(force: bool = False) -> Path:
    """Build `weed` at `VERSION` into `binary_path()` unless it is there; return its path."""
    target = binary_path()
    if target.is_file() and not force:
        return target
    go = _go()
    env = {**os.environ, "GOFLAGS": "-buildvcs=false", "GOTOOLCHAIN": "local"}
    info = json.loads(_run([go, "mod", "download", "-json", f"{MODULE}@{VERSION}"], None, env))
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="weed-src-", dir=target.parent) as tmp:
        src = Path(tmp) / "src"
        # The module cache is read-only, and the main module's go.sum may be written to: build from a copy.
        top = info["Dir"]
        skip = {"test", "mount.test", "docker", "k8s", "terraform"}  # not part of the `weed` command (146 MB)
        shutil.copytree(top, src, ignore=lambda d, names: [n for n in names if d == top and n in skip])
        for path in [src, *src.rglob("*")]:
            path.chmod(path.stat().st_mode | 0o200)
        out = Path(tmp) / "weed"
        _run([go, "build", "-trimpath", "-ldflags=-s -w", "-o", str(out), "./weed"], src, env)
        os.replace(out, target)  # atomic: a half-written binary is never taken for a build
    return target


def main() -> int:
    started = time.monotonic()
    existed = binary_path().is_file()
    path = build()
    took = "cached" if existed else f"built in {time.monotonic() - started:.0f}s"
    print(f"SeaweedFS {VERSION}: {path} ({took})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
