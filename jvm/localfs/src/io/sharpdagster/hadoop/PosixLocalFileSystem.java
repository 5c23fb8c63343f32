package io.sharpdagster.hadoop;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.attribute.PosixFilePermission;
import java.util.EnumSet;
import java.util.Set;
import org.apache.hadoop.fs.LocalFileSystem;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.fs.RawLocalFileSystem;
import org.apache.hadoop.fs.permission.FsPermission;

/**
 * Hadoop's local file system (with its checksums), whose permissions are set through java.nio.
 *
 * <p>Without Hadoop's native library (PySpark ships none), RawLocalFileSystem sets the permission of every file
 * and folder it creates by running {@code chmod} in a child process: on these machines that was two thirds of
 * the time of writing 2,880 small Parquet files (a month's hourly landing), and it is paid by every Iceberg
 * data, manifest and metadata file. The permissions set are the same (the nine rwx bits).
 *
 * <p>Compiled by scripts/bootstrap.sh against the Hadoop API jar PySpark ships; sharp_dagster/spark/session.py
 * sets it as {@code fs.file.impl} when the jar is there.
 */
public class PosixLocalFileSystem extends LocalFileSystem {
  public PosixLocalFileSystem() {
    super(new Raw());
  }

  /** RawLocalFileSystem with setPermission through java.nio instead of a {@code chmod} process. */
  public static class Raw extends RawLocalFileSystem {
    // Bit i of FsPermission.toShort(), lowest first.
    private static final PosixFilePermission[] BITS = {
      PosixFilePermission.OTHERS_EXECUTE, PosixFilePermission.OTHERS_WRITE, PosixFilePermission.OTHERS_READ,
      PosixFilePermission.GROUP_EXECUTE, PosixFilePermission.GROUP_WRITE, PosixFilePermission.GROUP_READ,
      PosixFilePermission.OWNER_EXECUTE, PosixFilePermission.OWNER_WRITE, PosixFilePermission.OWNER_READ,
    };

    @Override
    public void setPermission(Path p, FsPermission permission) throws IOException {
      short mode = permission.toShort();
      Set<PosixFilePermission> set = EnumSet.noneOf(PosixFilePermission.class);
      for (int i = 0; i < BITS.length; i++) {
        if ((mode & (1 << i)) != 0) {
          set.add(BITS[i]);
        }
      }
      Files.setPosixFilePermissions(pathToFile(p).toPath(), set);
    }
  }
}
