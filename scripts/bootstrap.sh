#!/usr/bin/env bash
# Set up everything on a fresh machine: system packages, a virtualenv in .venv, the project installed editable,
# and the JVM packages (jvm/pom.xml) copied with Maven into jvm/lib/.
#   scripts/bootstrap.sh          what the demo needs (Java, Maven, the JVM packages, Python packages)
#   scripts/bootstrap.sh test     also what the tests need (Chromium, MariaDB + its JDBC driver, PostgreSQL)
#   scripts/bootstrap.sh bench    also the benchmark-only packages (sqllineage, duckdb)
#   scripts/bootstrap.sh s3       `test`, and the S3 test's object store (SeaweedFS, built from its Go module: minutes
#                                 and ~470 MB of Go modules on a cold machine, so not part of `test`; `make test-s3`)
set -euo pipefail
cd "$(dirname "$0")/.."
mode=${1:-run}
with_s3=0
if [ "$mode" = s3 ]; then mode=test; with_s3=1; fi

SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi
pkgs=()
command -v java >/dev/null 2>&1 || pkgs+=(openjdk-17-jre-headless)
command -v mvn >/dev/null 2>&1 || pkgs+=(maven)
command -v javac >/dev/null 2>&1 || pkgs+=(openjdk-17-jdk-headless)
if [ "$mode" = test ] || [ "$mode" = bench ]; then
  command -v chromium >/dev/null 2>&1 || [ -x /usr/bin/chromium ] || pkgs+=(chromium)
  command -v mariadbd >/dev/null 2>&1 || [ -x /usr/sbin/mariadbd ] || pkgs+=(mariadb-server)
  [ -f /usr/share/java/mariadb-java-client.jar ] || pkgs+=(libmariadb-java)
  if ! command -v initdb >/dev/null 2>&1 && ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then
    pkgs+=(postgresql)
  fi
fi
if [ ${#pkgs[@]} -gt 0 ]; then
  echo "installing system packages: ${pkgs[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${pkgs[@]}" >/dev/null
fi

# JVM packages: Maven resolves them through the machine's own set-up and caches them in its local repository;
# jvm/lib/.stamp holds the poms' checksum (and the profile), so an unchanged set-up does not even start Maven.
# The tests' packages (a real HDFS: jvm/hdfs) are in the pom's `test` profile, fetched only for tests and bench;
# Hadoop's S3A (jvm/s3) in the `s3` profile, fetched only for the opt-in S3 test.
mvn_profile=""
if [ "$mode" = test ] || [ "$mode" = bench ]; then mvn_profile="-Ptest"; fi
if [ "$with_s3" = 1 ]; then mvn_profile="-Ptest,s3"; fi
stamp=$( (cat jvm/pom.xml jvm/*/pom.xml; echo "$mvn_profile") | sha256sum | cut -d' ' -f1)
if [ "$(cat jvm/lib/.stamp 2>/dev/null)" != "$stamp" ]; then
  echo "fetching the JVM packages (jvm/pom.xml $mvn_profile) with Maven"
  rm -rf jvm/lib/spark jvm/lib/kafka jvm/lib/hdfs jvm/lib/s3
  mvn -q -B -f jvm/pom.xml $mvn_profile dependency:copy-dependencies
  echo "$stamp" > jvm/lib/.stamp
fi

# The lineage explorer's drawing library (Apache ECharts), pinned by package-lock.json, served by our own server.
command -v npm >/dev/null 2>&1 || { $SUDO apt-get update -qq; DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends npm >/dev/null; }
[ -d sharp_dagster/lineage/explorer/static/node_modules/echarts ] ||
  npm ci --prefix sharp_dagster/lineage/explorer/static --no-audit --no-fund --loglevel=error

[ -x .venv/bin/python ] || python3 -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
case "$mode" in
  test) extras="[dev]" ;;
  bench) extras="[dev,bench]" ;;
  *) extras="" ;;
esac
.venv/bin/python -m pip install -q -e ".${extras}"

# Hadoop's local file system, permissions set without a `chmod` process per file (jvm/localfs): compiled against
# the Hadoop API jar PySpark ships, into jvm/lib/localfs/; rebuilt only when the source or that jar changes.
localfs_src=jvm/localfs/src/io/sharpdagster/hadoop/PosixLocalFileSystem.java
hadoop_api=$(.venv/bin/python -c 'import glob, os, pyspark; print(sorted(glob.glob(os.path.join(os.path.dirname(pyspark.__file__), "jars", "hadoop-client-api-*.jar")))[-1])')
localfs_stamp=$( (cat "$localfs_src"; echo "$hadoop_api") | sha256sum | cut -d' ' -f1)
if [ "$(cat jvm/lib/localfs/.stamp 2>/dev/null)" != "$localfs_stamp" ]; then
  echo "compiling jvm/localfs"
  rm -rf jvm/lib/localfs && mkdir -p jvm/lib/localfs/classes
  javac -nowarn --release 17 -d jvm/lib/localfs/classes -cp "$hadoop_api" "$localfs_src"
  jar cf jvm/lib/localfs/sharp-localfs.jar -C jvm/lib/localfs/classes .
  rm -rf jvm/lib/localfs/classes
  echo "$localfs_stamp" > jvm/lib/localfs/.stamp
fi

# The Spark driver's class-data-sharing archive (sharp_dagster/spark/class_archive.py): every driver then starts in
# ~0.6x the CPU. Written once by a driver of its own (~80 s); rewritten only when Java or the jars change.
# Without it drivers start as before, so a failure here is a warning, not a stop.
.venv/bin/python -m sharp_dagster.spark.class_archive_build ||
  echo "warning: the Spark driver's class archive was not written (drivers start without it)" >&2

# SeaweedFS for `make test-s3`: built once into ~/.cache/sharp-dagster/seaweedfs/ (nothing to do when it is there).
if [ "$with_s3" = 1 ]; then .venv/bin/python -m sharp_dagster.servers.seaweedfs_build; fi
mkdir -p data artifacts
