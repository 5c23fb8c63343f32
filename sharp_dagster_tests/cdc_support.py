"""Test support: feed the shop's binlog into the ODS layer the way the demo does (a real broker, real landing).

`CdcFeed(defs, instance)` bootstraps the ODS states from the generated snapshot, then `land(day)` replays that
day's generated changes (plus any extra changes) through the broker and runs the landing asset, so the day's done
markers exist and the daily merge can run.
"""

from __future__ import annotations

import json
import os
from contextlib import contextmanager

from sharp_dagster.settings import KAFKA_ENV, Settings

QUIET = {"loggers": {"console": {"config": {"log_level": "WARNING"}}}}


@contextmanager
def local_broker():
    """A Kafka broker for the block, exported as SHARP_KAFKA_BOOTSTRAP (stopped by its pid at the end)."""
    from sharp_dagster.servers.broker import LocalBroker

    previous = os.environ.get(KAFKA_ENV)
    broker = LocalBroker().start()
    os.environ[KAFKA_ENV] = broker.bootstrap_servers
    try:
        yield broker
    finally:
        broker.cleanup()
        if previous is None:
            os.environ.pop(KAFKA_ENV, None)
        else:
            os.environ[KAFKA_ENV] = previous


class CdcFeed:
    def __init__(self, defs, instance, bootstrap: bool = True):
        from sharp_dagster.cdc.capture.kafka_topics import ensure_topic
        from sharp_dagster.demo.run import bootstrap_ods
        from sharp_dagster.warehouse.cdc_layout import landing_assets

        self.defs = defs
        self.instance = instance
        self.source, self.database, self.topic = landing_assets()[0]
        self.bootstrap = os.environ[KAFKA_ENV]
        ensure_topic({"bootstrap.servers": self.bootstrap}, self.topic, self.source.topic_partitions)
        spark_resource = defs.resources["spark"]
        self.snapshot_rows = (
            bootstrap_ods(spark_resource.session(), spark_resource.store(), Settings.from_env().sample_dir)
            if bootstrap
            else {}
        )
        self.landed: list[str] = []

    def send(self, changes: list[dict], day: str) -> None:
        """Extra row changes (generator format, with `_table`), as binlog messages of `day`, plus a heartbeat."""
        from confluent_kafka import Producer

        from sharp_dagster.cdc.change.messages import HEARTBEAT, BinlogMessage, encode
        from sharp_dagster.demo.replay import BINLOG_FILE, _epoch_ms, change_message

        producer = Producer({"bootstrap.servers": self.bootstrap, "partitioner": "murmur2_random"})
        for change in changes:
            message, key = change_message(change, self.source.source_id)
            producer.produce(self.topic, encode(message), key=key.encode())
        day_end = _epoch_ms(f"{day} 23:59:59") + 1000 + (self.source.lateness_minutes + 1) * 60_000
        for partition in range(self.source.topic_partitions):
            beat = BinlogMessage(
                type=HEARTBEAT,
                source_id=self.source.source_id,
                database=self.database,
                table="",
                event_ts_ms=day_end,
                binlog_file=BINLOG_FILE,
                binlog_pos=0,
            )
            producer.produce(self.topic, encode(beat), partition=partition)
        assert producer.flush(60) == 0

    def land(self, day: str, extra: list[dict] | None = None, replay: bool = True) -> None:
        """Replay `day` (and `extra` changes) into the topic and run the hourly landing for it."""
        from sharp_dagster.demo.replay import replay_day

        if replay:
            replay_day(
                Settings.from_env().sample_dir,
                day,
                self.bootstrap,
                self.topic,
                self.source.source_id,
                self.source.lateness_minutes,
            )
        if extra:
            self.send(extra, day)
        job = self.defs.resolve_job_def("binlog_hourly")
        result = job.execute_in_process(
            partition_key=f"{day}-23:00", instance=self.instance, raise_on_error=False, run_config=QUIET
        )
        if not result.success:
            failure = next((e for e in result.all_events if e.is_step_failure), None)
            raise AssertionError(
                f"landing {day} failed: {failure.step_failure_data.error.to_string() if failure else '?'}"
            )
        self.landed.append(day)


def change(table: str, op: str, seq: int, ts: str, **row) -> dict:
    """A row change in the generator's format (`_seq` orders it after the generated ones when large)."""
    physical = row.pop("_source_table", table)
    return {**row, "_table": table, "_op": op, "_seq": seq, "_txn": seq, "_ts": ts, "_source_table": physical}


def dumps(obj) -> str:
    return json.dumps(obj, default=str)
