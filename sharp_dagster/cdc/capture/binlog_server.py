"""What the collector asks the source server outside the binlog stream: its settings and binlog positions."""

from __future__ import annotations

import logging
from contextlib import closing

import pymysql

from sharp_dagster.cdc.capture.collector_state import CollectorError, CollectorState
from sharp_dagster.cdc.source.config import MysqlSettings

log = logging.getLogger(__name__)


def check_server(mysql: MysqlSettings, flavor: str) -> None:
    """The binlog settings a correct capture depends on; the flavor must match the server."""
    try:
        conn = pymysql.connect(**mysql.pymysql_kwargs(), connect_timeout=10)
    except pymysql.err.Error as exc:
        raise CollectorError(f"cannot connect to {mysql.describe()}: {exc.args[-1]}") from exc
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT VERSION()")
            version = cur.fetchone()[0]
            cur.execute(
                "SHOW GLOBAL VARIABLES WHERE Variable_name IN "
                "('log_bin', 'binlog_format', 'binlog_row_image', 'binlog_row_metadata')"
            )
            variables = {name.lower(): str(value).upper() for name, value in cur.fetchall()}
    finally:
        conn.close()
    is_mariadb = "MARIADB" in version.upper()
    if is_mariadb != (flavor == "mariadb"):
        raise CollectorError(f"{mysql.describe()} runs {version}, but the config says flavor {flavor!r}")
    if variables.get("log_bin") != "ON":
        raise CollectorError(f"{mysql.describe()}: the binary log is off (start the server with --log-bin)")
    if variables.get("binlog_format") != "ROW":
        raise CollectorError(
            f"{mysql.describe()}: binlog_format is {variables.get('binlog_format')}, need ROW"
        )
    if variables.get("binlog_row_metadata", "FULL") != "FULL":
        raise CollectorError(
            f"{mysql.describe()}: binlog_row_metadata is {variables.get('binlog_row_metadata')}, need FULL "
            "(without it rows arrive without column names)"
        )
    if variables.get("binlog_row_image") != "FULL":
        log.warning(
            "%s: binlog_row_image is %s: columns that were not logged are left out of the row images",
            mysql.describe(),
            variables.get("binlog_row_image"),
        )


def binlog_end(mysql: MysqlSettings) -> tuple[str, int]:
    """The binlog file and position where the next event will be written (SHOW MASTER STATUS)."""
    conn = pymysql.connect(**mysql.pymysql_kwargs(), connect_timeout=10)
    try:
        with conn.cursor() as cur:
            try:
                cur.execute("SHOW MASTER STATUS")
            except pymysql.err.ProgrammingError:
                cur.execute("SHOW BINARY LOG STATUS")  # MySQL 8.4
            row = cur.fetchone()
    finally:
        conn.close()
    if row is None:
        raise CollectorError(f"{mysql.describe()}: SHOW MASTER STATUS is empty: the binary log is off")
    return row[0], int(row[1])


def start_gtid(mysql: MysqlSettings, start: str) -> str | None:
    """Where a first run starts on MariaDB: all retained binlogs, the current end, a GTID position, or the
    GTID position of a `file:pos` (MariaDB's BINLOG_GTID_POS)."""
    if start == "earliest":
        return None
    if start != "current" and ":" not in start:
        return start
    conn = pymysql.connect(**mysql.pymysql_kwargs())
    try:
        with conn.cursor() as cur:
            if start == "current":
                cur.execute("SELECT @@GLOBAL.gtid_binlog_pos")
            else:
                file_name, _, pos = start.rpartition(":")
                cur.execute("SELECT BINLOG_GTID_POS(%s, %s)", (file_name, int(pos)))
            return cur.fetchone()[0] or None
    finally:
        conn.close()


def first_binlog(mysql: MysqlSettings) -> str:
    """The oldest binlog file the server retains."""
    conn = pymysql.connect(**mysql.pymysql_kwargs())
    try:
        with conn.cursor() as cur:
            cur.execute("SHOW BINARY LOGS")
            rows = cur.fetchall()
    finally:
        conn.close()
    if not rows:
        raise CollectorError(f"{mysql.describe()}: SHOW BINARY LOGS lists no binlog")
    return rows[0][0]


def server_id(mysql: MysqlSettings) -> int:
    """`@@server_id` of the server: whose binlog (file names, positions) the collector reads."""
    with closing(pymysql.connect(**mysql.pymysql_kwargs(), connect_timeout=10)) as conn, conn.cursor() as cur:
        cur.execute("SELECT @@GLOBAL.server_id")
        return int(cur.fetchone()[0])


def resume_epoch(mysql: MysqlSettings, flavor: str, saved: CollectorState | None) -> tuple[int, int]:
    """The server id read now and the binlog epoch to read it under: one up from the saved one when the saved
    position was read from another server (a failover, `binlog_schema.epoch_file_seq`). MySQL resumes by file
    and position, which mean nothing on another server: refused."""
    server = server_id(mysql)
    epoch = saved.binlog_epoch if saved else 0
    if saved is None or saved.server_id is None or saved.server_id == server:
        return server, epoch
    if flavor != "mariadb":
        raise CollectorError(
            f"the saved position {saved.binlog_file}:{saved.binlog_pos} is of server id {saved.server_id}, "
            f"{mysql.describe()} is server id {server}: file positions differ between servers"
        )
    log.warning(
        "%s is server id %d, the saved position was read from server id %d: resuming by GTID %s, binlog epoch %d",
        mysql.describe(),
        server,
        saved.server_id,
        saved.gtid_pos,
        epoch + 1,
    )
    return server, epoch + 1
