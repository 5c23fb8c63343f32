"""The warehouse on a real S3-compatible object store: `SHARP_WAREHOUSE_DIR=s3a://bucket/warehouse` on SeaweedFS
(sharp_dagster/servers/seaweedfs.py), through Hadoop's S3A (jvm/s3) in the Spark session pyspark ships.

A small pipeline run, `sharp-dagster cdc land`, in a process of its own (Spark allows one SparkContext per process,
and this one's has no S3A jars): it lands a binlog topic from a real Kafka broker into the Iceberg raw table and
its typed image table, puts the bad messages in the quarantine table and writes the day's done markers. The same
process reads everything back. Asserted: what it reads equals what was sent; every data file is an `s3a://` object,
and the filer of SeaweedFS (not Spark) lists the markers and the tables' files in the bucket; the driver's data
folder holds nothing but the job log's SQLite file; the S3 secret, given only as an environment variable, is in
no log and no file there.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest
import yaml

from sharp_dagster import jvm
from sharp_dagster.cdc.change.messages import BinlogMessage, encode
from sharp_dagster.settings import REPO_ROOT
from sharp_dagster_tests.cdc_support import local_broker

pytestmark = pytest.mark.slow

BUCKET = "sharp-warehouse"
DB = "s3shop"
DAY = dt.datetime(2024, 3, 1, tzinfo=dt.UTC)
DONE_HOURS = [f"{h:02d}" for h in range(12)]  # the day's hours before 12:00: the low watermark is at 13:00
RUN_TIMEOUT = 1200  # about a minute on a quiet machine; much more when the 2 cores are shared

# argv: result json, then the `cdc land` arguments. Lands, then reads back with the same session and catalog.
RUN_SCRIPT = r"""
import json, sys
from sharp_dagster.cli.cdc import main
from sharp_dagster.cdc.landing.done_markers import hours_done
from sharp_dagster.cdc.landing.raw_tables import quarantine_table_ref, raw_table_ref
from sharp_dagster.settings import Settings
from sharp_dagster.spark.iceberg import warehouse_tables
from sharp_dagster.spark.session import build_spark_session

out_path, argv = sys.argv[1], sys.argv[2:]
database = argv[argv.index("--database") + 1]
out = {"rc": main(argv)}
settings = Settings.from_env()
spark = build_spark_session(settings)  # the landing's session (getOrCreate)
store = warehouse_tables(spark, settings)
out["warehouse"] = str(store.warehouse_dir)
raw, quarantine = raw_table_ref(database), quarantine_table_ref(database)
out["raw"] = sorted(
    [r.table_name, r.op, r.source_table, json.loads(r.after_json)["id"]]
    for r in store.read_partitions(raw, store.list_partitions(raw)).collect()
)
out["quarantine"] = sorted(
    [q.kafka_offset, q.reason.split(":")[0]]
    for q in store.read_partitions(quarantine, store.list_partitions(quarantine)).collect()
)
out["files"] = {
    ref.name: [r.file_path for r in spark.sql(f"SELECT file_path FROM {store.name(ref)}.files").collect()]
    for ref in (raw, quarantine)
}
out["markers"] = hours_done(store.warehouse_dir, database, "2024-03-01", spark)
spark.stop()
with open(out_path, "w") as f:
    json.dump(out, f)
"""


@pytest.fixture(scope="module")
def seaweedfs(run_dir):
    from sharp_dagster.servers.seaweedfs import LocalSeaweedfs

    with LocalSeaweedfs(base_dir=run_dir / "seaweedfs") as server:
        server.create_bucket(BUCKET)
        yield server


def _msg(table: str, pos: int, when: dt.datetime, kind: str = "INSERT", database: str = DB) -> bytes:
    return encode(
        BinlogMessage(
            type=kind,
            source_id="s3-test",
            database=database,
            table=table,
            es=int(when.timestamp() * 1000),
            binlog_file="binlog.000001",
            binlog_pos=pos,
            gtid=f"0-1-{pos}",
            pk_names=["id"],
            data=None if kind == "HEARTBEAT" else {"id": str(pos)},
        )
    )


def _produce(bootstrap: str, topic: str) -> None:
    from confluent_kafka import Producer

    from sharp_dagster.cdc.capture.kafka_topics import ensure_topic

    config = {"bootstrap.servers": bootstrap}
    ensure_topic(config, topic, 1)
    at = lambda h, m: DAY + dt.timedelta(hours=h, minutes=m)  # noqa: E731
    records = [
        _msg("user_info_1", 10, at(10, 0)),
        b"\x00 not json",
        _msg("user_info_2", 20, at(10, 30)),
        _msg("accounts", 30, at(11, 0)),  # not in the source's configuration
        _msg("user_info_1", 40, at(11, 5)),
        # The low watermark moves to 13:00: the day's hours up to 11 are done (12:00 + 1 h + 15 min is not).
        _msg("", 0, at(13, 0), kind="HEARTBEAT"),
    ]
    producer = Producer({**config, "linger.ms": 0})
    for value in records:
        producer.produce(topic, value=value, partition=0)
    assert producer.flush(30) == 0


def _filer_files(server, path: str) -> list[str]:
    """Every file under `path` of the bucket, as SeaweedFS's own filer lists it (its HTTP API, no S3 client)."""
    url = f"http://{server.host}:{server.ports['filer']}/buckets/{BUCKET}/{path.strip('/')}/?limit=1000"
    request = urllib.request.Request(url, headers={"Accept": "application/json"})
    with urllib.request.urlopen(request, timeout=30) as resp:
        entries = json.loads(resp.read().decode("utf-8")).get("Entries") or []
    files = []
    for entry in entries:
        full = entry["FullPath"].removeprefix(f"/buckets/{BUCKET}/")
        is_dir = entry.get("Mode", 0) & (1 << 31)  # Go's os.ModeDir
        files.extend(_filer_files(server, full) if is_dir else [full])
    return files


def test_landing_writes_tables_markers_and_quarantine_to_s3(seaweedfs, tmp_path: Path) -> None:
    warehouse = f"s3a://{BUCKET}/warehouse"
    data_dir = tmp_path / "driver_data"
    config = tmp_path / "source.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "source_id": "s3-test",
                "lateness_minutes": 15,
                "databases": [
                    {
                        "name": DB,
                        "tables": [
                            {"name": "user_info", "shard_regex": r"user_info_(\d+)", "primary_key": ["id"]}
                        ],
                    }
                ],
            }
        )
    )
    spark_conf = ",".join(f"{k}={v}" for k, v in seaweedfs.s3a_conf().items())
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SHARP_", "AWS_"))}
    env.update(
        {
            "SHARP_DATA_DIR": str(data_dir),
            "SHARP_WAREHOUSE_DIR": warehouse,
            "SHARP_SPARK_JARS": ",".join(str(j) for j in jvm.jars("s3")),
            "SHARP_SPARK_CONF": spark_conf,
            "PYSPARK_PYTHON": sys.executable,
            "PYTHONPATH": str(REPO_ROOT),
            **seaweedfs.credentials_env(),
        }
    )
    script, out, log = tmp_path / "land.py", tmp_path / "out.json", tmp_path / "land.log"
    script.write_text(RUN_SCRIPT)
    with local_broker() as broker:
        _produce(broker.bootstrap_servers, f"binlog.{DB}")
        argv = ["land", "--config", str(config), "--database", DB]
        argv += [
            "--bootstrap-servers",
            broker.bootstrap_servers,
            "--state-file",
            str(tmp_path / "state.json"),
        ]
        with open(log, "wb") as fh:
            done = subprocess.run(
                [sys.executable, str(script), str(out), *argv],
                env=env,
                cwd=tmp_path,
                stdout=fh,
                stderr=subprocess.STDOUT,
                timeout=RUN_TIMEOUT,
            )
    output = log.read_text(errors="replace")
    assert done.returncode == 0 and out.exists(), f"landing exited with {done.returncode}:\n{output[-4000:]}"
    result = json.loads(out.read_text())
    assert result["rc"] == 0 and result["warehouse"] == warehouse
    assert "landed 3, duplicates 0, quarantined 2, heartbeats 1" in output, output[-2000:]

    # Read back equal to what was sent.
    assert result["raw"] == [
        ["user_info", "c", "user_info_1", "10"],
        ["user_info", "c", "user_info_1", "40"],
        ["user_info", "c", "user_info_2", "20"],
    ]
    assert result["quarantine"] == [[1, "not JSON"], [3, f"unknown table {DB}.accounts"]]
    assert result["markers"] == DONE_HOURS
    for table, paths in result["files"].items():
        assert paths and all(p.startswith(f"{warehouse}/") for p in paths), (table, paths)

    # The objects are in the bucket, as the server itself lists them.
    stored = _filer_files(seaweedfs, "warehouse")
    for paths in result["files"].values():
        assert {p.removeprefix(f"s3a://{BUCKET}/") for p in paths} <= set(stored)
    assert any(p.endswith(".metadata.json") for p in stored), stored
    markers = sorted(p.rsplit("/", 1)[1] for p in stored if f"_done/{DB}/dt=2024-03-01/" in p)
    assert markers == [f"hour={h}" for h in DONE_HOURS], stored

    # Nothing of the warehouse on the driver's disk: its data folder has only the job log's (and catalog's) SQLite.
    local = sorted(str(p.relative_to(data_dir)) for p in data_dir.rglob("*") if p.is_file())
    assert local and all(p.startswith("sharp_log.db") for p in local), local
    # The secret came from the environment only: in no log and no file of the run.
    secret = seaweedfs.credentials_env()["AWS_SECRET_ACCESS_KEY"]
    assert secret not in output and secret not in repr(seaweedfs)
    for path in data_dir.rglob("*"):
        assert not path.is_file() or secret.encode() not in path.read_bytes(), path
