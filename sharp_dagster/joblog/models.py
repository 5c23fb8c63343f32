"""The job-log tables (SQLAlchemy Core) registered on the platform's one `sharp_dagster.db.metadata`.

Conventions, fixed here because every reader of these tables depends on them:

* `job_log.job_id` is a random UUID string (36 chars) made by the writer. It is an identity, never an order:
  Sharp ETL's `upstream` mode broke when it compared UUID ids as numbers, so nothing here orders by `job_id`.
  "Latest" means the highest `attempt` of a `job_schedule_id`, or the newest `create_time` for listings.
* `job_schedule_id` = `job_name + '-' + data_range_start` (one period of one asset). Kafka starts are JSON and can
  be long, so a start longer than 96 characters is replaced by `sha256:<first 32 hex>` in the schedule id only.
* `data_range_start` / `data_range_end` are strings whose lexical order is the natural order:
  - time windows: fixed-width UTC `yyyyMMddHHmmss` (`20240101000000`), end exclusive;
  - auto-increment ids: zero-padded to 20 digits (`00000000000000001234`), start exclusive, end inclusive;
  - Kafka offsets: compact JSON `{"topic": {"0": 42}}` with sorted keys, start inclusive, end exclusive
    (or the literal `earliest` when no run has succeeded yet). JSON ranges are not orderable as text.
* All times are naive UTC (`datetime.now(UTC)` without tzinfo), written by the Python side.
* `step_log.duration` is in milliseconds.
* `job_period` is in minutes (1440 daily, 60 hourly, 0 for on-demand auto-increment / Kafka runs).
* The fencing token of a claim is its `attempt`; `publish_time` records when that attempt was allowed to publish.

Beyond the original job-log tables (`job_log`, `step_log`): `job_claim` (one row per period being run, the atomic claim), `alert_log`
(alert de-duplication), and two small tables that make planning independent of history size:
`job_success_span` holds, per asset, the maximal runs of consecutive periods whose latest attempt succeeded, as
half-open `[span_start, span_end)` ranges, and `job_asset` is one row per asset used as the lock that serialises
changes to that asset's spans.
"""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    Column,
    DateTime,
    Index,
    Integer,
    PrimaryKeyConstraint,
    String,
    Table,
    Text,
    UniqueConstraint,
    func,
)

from sharp_dagster.db import metadata
from sharp_dagster.periods import TIMEWINDOW

# Status values written to job_log.status and step_log.status.
RUNNING = "RUNNING"
SUCCESS = "SUCCESS"
FAILURE = "FAILURE"
# A run decided there was nothing to do for its period; the planner counts it as done, like SUCCESS.
SKIPPED = "SKIPPED"
STATUSES = (RUNNING, SUCCESS, FAILURE, SKIPPED)
DONE_STATUSES = frozenset({SUCCESS, SKIPPED})
FINAL_STATUSES = frozenset({SUCCESS, FAILURE, SKIPPED})

# Incremental modes (job_log.incremental_type).
AUTO_INC_ID = "auto_inc_id"
KAFKA_OFFSET = "kafka_offset"
INCREMENTAL_TYPES = (TIMEWINDOW, AUTO_INC_ID, KAFKA_OFFSET)

RANGE_MAX_CHARS = 1024
ERROR_MAX_CHARS = 10000

job_log = Table(
    "job_log",
    metadata,
    Column("job_id", String(36), primary_key=True),
    Column("job_name", String(128), nullable=False),
    Column("job_period", Integer, nullable=False),
    Column("job_schedule_id", String(255), nullable=False),
    Column("data_range_start", String(RANGE_MAX_CHARS), nullable=True),
    Column("data_range_end", String(RANGE_MAX_CHARS), nullable=True),
    Column("job_start_time", DateTime, nullable=True),
    Column("job_end_time", DateTime, nullable=True),
    Column("status", String(32), nullable=False),
    Column("create_time", DateTime, nullable=False, server_default=func.current_timestamp()),
    Column("last_update_time", DateTime, nullable=False, server_default=func.current_timestamp()),
    Column("incremental_type", String(16), nullable=True),
    Column("current_file", String(1024), nullable=True),
    Column("application_id", String(64), nullable=True),
    Column("project_name", String(256), nullable=True),
    Column("run_id", String(64), nullable=True),
    Column("partition_key", String(64), nullable=True),
    Column("heartbeat_time", DateTime, nullable=True),
    Column("attempt", Integer, nullable=False, server_default="1"),
    Column("error", Text, nullable=True),
    # When this attempt passed `JobLog.assert_current` (its fencing token was current) right before its table
    # commit; NULL for attempts that never published. Added by migration 0003.
    Column("publish_time", DateTime, nullable=True),
    UniqueConstraint("job_schedule_id", "attempt", name="uq_job_log_schedule_attempt"),
    # The planner reads one asset's rows by range start; status in the index keeps those reads index-only.
    # MySQL cannot index 1024 utf8mb4 characters, hence the prefix length there.
    Index(
        "ix_job_log_name_start_status",
        "job_name",
        "data_range_start",
        "status",
        mysql_length={"data_range_start": 255},
    ),
    Index("ix_job_log_name_created", "job_name", "create_time"),
    Index("ix_job_log_created", "create_time"),
    Index("ix_job_log_run_id", "run_id"),
)

step_log = Table(
    "step_log",
    metadata,
    Column("job_id", String(36), nullable=False),
    Column("step_id", String(64), nullable=False),
    Column("status", String(32), nullable=False),
    Column("start_time", DateTime, nullable=False),
    Column("end_time", DateTime, nullable=True),
    Column("duration", BigInteger, nullable=True),
    Column("output", Text, nullable=True),
    Column("source_count", BigInteger, nullable=True),
    Column("target_count", BigInteger, nullable=True),
    Column("success_count", BigInteger, nullable=True),
    Column("failure_count", BigInteger, nullable=True),
    Column("error", Text, nullable=True),
    Column("source_type", String(256), nullable=True),
    Column("target_type", String(256), nullable=True),
    PrimaryKeyConstraint("job_id", "step_id", name="pk_step_log"),
)

# A claim is an INSERT: the primary key makes a second concurrent claim of the same period fail on every
# database. A stale claim is taken over by a compare-and-set UPDATE on (job_schedule_id, job_id, heartbeat_time):
# a heartbeat that lands after the taker's read changes heartbeat_time, and the takeover then matches nothing.
job_claim = Table(
    "job_claim",
    metadata,
    Column("job_schedule_id", String(255), primary_key=True),
    Column("job_id", String(36), nullable=False),
    Column("run_id", String(64), nullable=True),
    Column("claimed_at", DateTime, nullable=False),
    Column("heartbeat_time", DateTime, nullable=False),
)

job_asset = Table(
    "job_asset",
    metadata,
    Column("job_name", String(128), primary_key=True),
    Column("version", BigInteger, nullable=False, server_default="0"),
    Column("updated_at", DateTime, nullable=True),
)

job_success_span = Table(
    "job_success_span",
    metadata,
    Column("job_name", String(128), nullable=False),
    Column("span_start", String(32), nullable=False),
    Column("span_end", String(32), nullable=False),
    PrimaryKeyConstraint("job_name", "span_start", name="pk_job_success_span"),
)

alert_log = Table(
    "alert_log",
    metadata,
    Column("dedup_key", String(255), primary_key=True),
    Column("first_sent_at", DateTime, nullable=True),
    Column("last_seen_at", DateTime, nullable=False),
    Column("count", Integer, nullable=False, server_default="0"),
    Column("kind", String(64), nullable=True),
    Column("payload", Text, nullable=True),
)

JOBLOG_TABLES = (job_log, step_log, job_claim, job_asset, job_success_span, alert_log)
