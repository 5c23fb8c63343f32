"""Hadoop's local file system of the sessions (`jvm/localfs`): permissions set through java.nio, not `chmod`.

Without Hadoop's native library every file and folder Hadoop creates forked a `chmod` process; the bootstrap
compiles `io.sharpdagster.hadoop.PosixLocalFileSystem` and the session builder sets it as `fs.file.impl`.
"""

from __future__ import annotations

import os
import stat

from sharp_dagster import jvm


def _local_fs(spark, path):
    jvm_ = spark.sparkContext._jvm
    conf = spark.sparkContext._jsc.hadoopConfiguration()
    hpath = jvm_.org.apache.hadoop.fs.Path(str(path))
    return jvm_, hpath, hpath.getFileSystem(conf)


def test_the_bootstrap_compiled_it_and_sessions_use_it(spark, tmp_path):
    assert jvm.local_fs_jar() is not None, "run scripts/bootstrap.sh: it compiles jvm/localfs"
    _, _, fs = _local_fs(spark, f"file://{tmp_path}/x")
    assert fs.getClass().getName() == jvm.LOCAL_FS_CLASS


def test_files_and_folders_get_the_permissions_hadoop_asks_for(spark, tmp_path):
    jvm_, hpath, fs = _local_fs(spark, f"file://{tmp_path}/a/b/part.parquet")
    fs.create(hpath, False).close()  # through the checksummed file system, as Iceberg writes
    umask = jvm_.org.apache.hadoop.fs.permission.FsPermission.getUMask(fs.getConf()).toShort()
    assert stat.S_IMODE(os.stat(tmp_path / "a" / "b" / "part.parquet").st_mode) == 0o666 & ~umask
    assert stat.S_IMODE(os.stat(tmp_path / "a" / "b").st_mode) == 0o777 & ~umask
    assert (tmp_path / "a" / "b" / ".part.parquet.crc").exists()
    for mode in (0o600, 0o750, 0o444):
        fs.setPermission(hpath, jvm_.org.apache.hadoop.fs.permission.FsPermission(mode))
        assert stat.S_IMODE(os.stat(tmp_path / "a" / "b" / "part.parquet").st_mode) == mode
