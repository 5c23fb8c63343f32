"""The few file operations the pipeline does beside its Iceberg tables (done markers, lineage run reports), on the
warehouse's file system: a local folder, or any Hadoop file system (`hdfs://`, `s3a://`) through the Hadoop
FileSystem API of the Spark session's JVM, the same client Spark's executors use.

One interface, two implementations: `LocalFs` touches the disk directly (a marker costs no JVM round trip; the
local default stays fast), `HadoopFs` goes through Py4J. `file_system(root, spark)` picks one from the root: a
plain path or a `file://` URI is local (see `sharp_dagster.settings.local_path`).
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Protocol

from pyspark.sql import SparkSession

from sharp_dagster.settings import local_path


class WarehouseFs(Protocol):
    """Paths are strings: `<root>/a/b` as the caller joined them (a local path or a URI)."""

    def exists(self, path: str) -> bool: ...

    def write_text(self, path: str, text: str) -> None:
        """Create or replace the file whole; a reader sees the old or the new content, never a part."""

    def read_text(self, path: str) -> str: ...

    def list_files(self, folder: str) -> list[str]:
        """The names of the files (not folders) directly in `folder`; [] when it does not exist."""


class LocalFs:
    """The machine's own disk."""

    @staticmethod
    def _path(path: str) -> Path:
        local = local_path(path)
        if local is None:
            raise ValueError(f"not a local path: {path}")
        return local

    def exists(self, path: str) -> bool:
        return self._path(path).exists()

    def write_text(self, path: str, text: str) -> None:
        target = self._path(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)
        with os.fdopen(fd, "w") as fh:
            fh.write(text)
        os.replace(tmp, target)

    def read_text(self, path: str) -> str:
        return self._path(path).read_text()

    def list_files(self, folder: str) -> list[str]:
        base = self._path(folder)
        return [p.name for p in base.iterdir() if p.is_file()] if base.is_dir() else []


class HadoopFs:
    """Any Hadoop file system, through the Spark session's JVM and its Hadoop configuration."""

    def __init__(self, spark: SparkSession):
        self._jvm = spark.sparkContext._jvm
        self._conf = spark.sparkContext._jsc.hadoopConfiguration()  # type: ignore[union-attr]

    def _resolve(self, path: str):
        hpath = self._jvm.org.apache.hadoop.fs.Path(path)  # type: ignore[union-attr]
        return hpath, hpath.getFileSystem(self._conf)

    def exists(self, path: str) -> bool:
        hpath, fs = self._resolve(path)
        return bool(fs.exists(hpath))

    def write_text(self, path: str, text: str) -> None:
        # Written beside the target, then renamed over it: HDFS renames atomically (S3A copies, still whole).
        hpath, fs = self._resolve(path)
        tmp = self._jvm.org.apache.hadoop.fs.Path(hpath.getParent(), f".{hpath.getName()}.tmp")  # type: ignore[union-attr]
        out = fs.create(tmp, True)
        try:
            out.write(bytearray(text.encode("utf-8")))
        finally:
            out.close()
        if fs.exists(hpath):
            fs.delete(hpath, False)
        if not fs.rename(tmp, hpath):
            raise OSError(f"could not rename {tmp.toString()} to {path}")

    def read_text(self, path: str) -> str:
        hpath, fs = self._resolve(path)
        stream = fs.open(hpath)
        try:
            data = stream.readAllBytes()
        finally:
            stream.close()
        return bytes(data).decode("utf-8")

    def list_files(self, folder: str) -> list[str]:
        hpath, fs = self._resolve(folder)
        if not fs.exists(hpath):
            return []
        return [s.getPath().getName() for s in fs.listStatus(hpath) if s.isFile()]


_LOCAL = LocalFs()


def file_system(root: str | Path, spark: SparkSession | None = None) -> WarehouseFs:
    """The file system of `root`: `LocalFs` for a local path or `file://` URI, else `HadoopFs` over `spark` (or
    the process's active session)."""
    if local_path(str(root)) is not None:
        return _LOCAL
    spark = spark or SparkSession.getActiveSession()
    if spark is None:
        raise ValueError(f"{root} is on a Hadoop file system: reaching it needs a SparkSession")
    return HadoopFs(spark)
