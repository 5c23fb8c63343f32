"""The message format, its parsing into raw binlog rows, shard folding and the source config (no servers)."""

from __future__ import annotations

import datetime as dt
import json
from decimal import Decimal

import pytest

from sharp_dagster.cdc.change import binlog_schema as bs
from sharp_dagster.cdc.change.canonical_values import canonical_value
from sharp_dagster.cdc.change.messages import (
    RAW_ROW_KEYS,
    BinlogMessage,
    Heartbeat,
    Quarantined,
    encode,
    parse_message,
    with_commit_ts,
)
from sharp_dagster.cdc.source.config import ConfigError, MysqlSettings, load_source_config
from sharp_dagster.cdc.source.shards import ShardRule, ShardRules

RULES = ShardRules([ShardRule("user_info", r"user_info_(\d+)"), ShardRule("orders")])
ES = int(dt.datetime(2024, 3, 1, 23, 59, 59, tzinfo=dt.UTC).timestamp() * 1000)


def message(**overrides) -> BinlogMessage:
    fields = dict(
        type="UPDATE",
        source_id="src",
        database="shop",
        table="user_info_12",
        event_ts_ms=ES,
        binlog_file="mysql-bin.000007",
        binlog_pos=4242,
        row_idx=3,
        gtid="0-1-99",
        server_id=1,
        pk_names=["id"],
        data={"id": "8", "name": "new"},
        old={"id": "7"},
        before={"id": "7", "name": "new"},
    )
    fields.update(overrides)
    return BinlogMessage(**fields)


def test_an_update_becomes_a_raw_row_with_identity_images_and_partition():
    row = parse_message(encode(message()), "binlog.shop", 1, 55, RULES, ingest_ts_ms=123)
    assert set(row) == set(RAW_ROW_KEYS) and len(row) == len(RAW_ROW_KEYS)
    assert (row["table_name"], row["dt"], row["hour"]) == ("user_info", "2024-03-01", "23")
    assert row["source_table"] == "user_info_12" and row["source_db"] == "shop" and row["op"] == "u"
    assert json.loads(row["before_json"]) == {"id": "7", "name": "new"}
    assert json.loads(row["after_json"]) == {"id": "8", "name": "new"}
    assert row["binlog_file_seq"] == 7 and row["binlog_pos"] == 4242 and row["row_idx"] == 3
    assert row["binlog_seq"] == Decimal(bs.binlog_seq(7, 4242, 3))
    assert row["event_uid"] == bs.event_uid("src", "mysql-bin.000007", 4242, 3)
    assert (row["kafka_topic"], row["kafka_partition"], row["kafka_offset"], row["ingest_ts_ms"]) == (
        "binlog.shop",
        1,
        55,
        123,
    )
    assert (
        row["gtid"] == "0-1-99"
        and row["pk_names"] == ["id"]
        and row["event_ts_ms"] == ES
        and row["ddl_sql"] is None
    )


def test_a_change_lands_in_the_hour_its_transaction_committed():
    # The statement ran at 23:59:59 of March 1st, its transaction committed 61 s later: March 2nd, hour 00.
    committed = with_commit_ts(encode(message(ts=1)), ES + 61_000)
    assert json.loads(committed)["commitTs"] == ES + 61_000
    row = parse_message(committed, "binlog.shop", 1, 55, RULES)
    assert (row["dt"], row["hour"], row["event_ts_ms"], row["commit_ts_ms"]) == (
        "2024-03-02",
        "00",
        ES,
        ES + 61_000,
    )
    # Without commitTs (plain Canal, an older collector) the statement time places it.
    old = parse_message(encode(message()), "binlog.shop", 1, 55, RULES)
    assert (old["dt"], old["hour"], old["commit_ts_ms"]) == ("2024-03-01", "23", ES)
    assert encode(message(ts=1, commit_ts=ES + 61_000)) == committed
    with pytest.raises(ValueError):
        with_commit_ts(committed, ES)
    bad = parse_message(json.dumps({**message().to_flat(), "commitTs": "later"}).encode(), "t", 0, 1, RULES)
    assert isinstance(bad, Quarantined) and bad.reason.startswith("bad commit time")


def test_plain_canal_update_without_before_rebuilds_the_before_image_from_old():
    flat = message().to_flat()
    del flat["before"]
    row = parse_message(json.dumps(flat).encode(), "t", 0, 0, RULES)
    assert json.loads(row["before_json"]) == {"id": "7", "name": "new"}


def test_insert_delete_truncate_and_ddl_images():
    insert = parse_message(encode(message(type="INSERT", old=None, before=None)), "t", 0, 0, RULES)
    assert (
        insert["op"] == "c"
        and insert["before_json"] is None
        and json.loads(insert["after_json"])["id"] == "8"
    )
    delete = parse_message(encode(message(type="DELETE", old=None, before=None)), "t", 0, 1, RULES)
    assert (
        delete["op"] == "d"
        and delete["after_json"] is None
        and json.loads(delete["before_json"])["id"] == "8"
    )
    truncate = parse_message(
        encode(message(type="TRUNCATE", data=None, old=None, before=None, sql="TRUNCATE user_info_12")),
        "t",
        0,
        2,
        RULES,
    )
    assert (
        truncate["op"] == "t"
        and truncate["ddl_sql"] == "TRUNCATE user_info_12"
        and truncate["table_name"] == "user_info"
    )
    alter = parse_message(
        encode(
            message(
                type="ALTER",
                data=None,
                old=None,
                before=None,
                sql="ALTER TABLE orders ADD x INT",
                table="orders",
            )
        ),
        "t",
        0,
        3,
        RULES,
    )
    assert alter["op"] == "ddl" and alter["table_name"] == "orders" and alter["before_json"] is None


def test_heartbeats_are_recognised():
    hb = parse_message(
        encode(message(type="HEARTBEAT", table="", data=None, old=None, before=None)), "t", 1, 9, RULES
    )
    assert isinstance(hb, Heartbeat) and hb.es_ms == ES and hb.partition == 1 and hb.offset == 9


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        (b"{not json", "not JSON"),
        (b"", "empty message"),
        (b"[1, 2]", "not a JSON object"),
        (json.dumps({**message().to_flat(), "type": "UPSERT"}).encode(), "unknown type 'UPSERT'"),
        (
            json.dumps({k: v for k, v in message().to_flat().items() if k != "binlogFile"}).encode(),
            "no binlog identity: binlogFile",
        ),
        (
            json.dumps({k: v for k, v in message().to_flat().items() if k != "sourceId"}).encode(),
            "no binlog identity: sourceId",
        ),
        (json.dumps({**message().to_flat(), "binlogFile": "mysql-bin"}).encode(), "bad binlog identity"),
        (encode(message(table="user_info_12_bak")), "unknown table shop.user_info_12_bak"),
        (encode(message(table="_user_info_12_gho")), "unknown table shop._user_info_12_gho"),
        (json.dumps({**message().to_flat(), "data": [{"id": 8}]}).encode(), "data: value of column 'id'"),
        (
            json.dumps({**message().to_flat(), "data": [{}, {}]}).encode(),
            "data must be a list holding exactly one row",
        ),
        (json.dumps({**message().to_flat(), "es": "yesterday"}).encode(), "no event time"),
    ],
)
def test_bad_messages_are_quarantined_with_a_reason(value, reason):
    result = parse_message(value, "binlog.shop", 2, 17, RULES, timestamp_ms=5)
    assert isinstance(result, Quarantined)
    assert result.reason.startswith(reason), result.reason
    assert (result.value, result.topic, result.partition, result.offset, result.timestamp_ms) == (
        value,
        "binlog.shop",
        2,
        17,
        5,
    )


def _flat(**overrides) -> bytes:
    return json.dumps({**message().to_flat(), **overrides}).encode()


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        (_flat(type=["INSERT"]), "unknown type ['INSERT']"),
        (_flat(type={"t": "INSERT"}), "unknown type {'t': 'INSERT'}"),
        (_flat(es=10**17), "bad event time: es 100000000000000000 is beyond the year 9999"),
        (_flat(es=2**64), "bad event time: es 18446744073709551616"),
        (_flat(es=-1), "no event time: es is -1"),
        (_flat(type="HEARTBEAT", table="", data=None, es=10**17), "bad event time"),
        (
            b'{"type": "INSERT", "data": ' + b"[" * 100_000 + b"]" * 100_000 + b"}",
            "not JSON: nested too deeply",
        ),
        (b"[" * 100_000, "not JSON: nested too deeply"),
        (_flat(binlogFile="mysql-bin." + "9" * 25), "bad binlog identity: binlog file sequence number"),
        (_flat(data=[{"id": "8", "name": "\ud800"}]), "bad text: after_json holds a lone surrogate"),
        (_flat(table="user_info_\udc00"), "unknown table shop.user_info_\\udc00"),
    ],
)
def test_poison_messages_are_quarantined_never_raised(value, reason):
    result = parse_message(value, "binlog.shop", 0, 99, RULES, expected_database="shop")
    assert isinstance(result, Quarantined), result
    assert result.reason.startswith(reason), result.reason
    assert result.offset == 99 and result.value == value
    result.reason.encode("utf-8")  # storable as it is


def test_a_message_for_another_database_is_quarantined():
    other = encode(message(database="billing"))
    verdict = parse_message(other, "binlog.shop", 0, 5, RULES, expected_database="shop")
    assert isinstance(verdict, Quarantined)
    assert verdict.reason == "wrong database: the message is for 'billing', topic binlog.shop carries 'shop'"
    beat = encode(message(type="HEARTBEAT", database="billing", table="", data=None, old=None, before=None))
    assert isinstance(parse_message(beat, "binlog.shop", 0, 6, RULES, expected_database="shop"), Quarantined)
    # The same messages are taken on the topic that carries their database, and without an expectation.
    assert (
        parse_message(other, "binlog.billing", 0, 5, RULES, expected_database="billing")["source_db"]
        == "billing"
    )
    assert parse_message(other, "t", 0, 5, RULES)["source_db"] == "billing"
    assert isinstance(
        parse_message(beat, "binlog.billing", 0, 6, RULES, expected_database="billing"), Heartbeat
    )


def test_a_parser_fault_is_a_quarantine_verdict_naming_it(monkeypatch):
    class Exploding(ShardRules):
        def fold(self, physical: str) -> str | None:
            raise KeyError(physical)

    value = encode(message())
    verdict = parse_message(
        value, "binlog.shop", 3, 7, Exploding([]), expected_database="shop", timestamp_ms=1
    )
    assert isinstance(verdict, Quarantined)
    assert verdict.reason == "parser error: KeyError: 'user_info_12'"
    assert (verdict.value, verdict.partition, verdict.offset, verdict.timestamp_ms) == (value, 3, 7, 1)
    not_bytes = parse_message(object(), "binlog.shop", 0, 8, RULES)  # type: ignore[arg-type]
    assert isinstance(not_bytes, Quarantined) and not_bytes.reason.startswith("parser error: TypeError")


def test_the_largest_valid_event_time_and_file_number_still_land():
    row = parse_message(
        _flat(es=253_402_300_799_999, binlogFile="mysql-bin." + "9" * 20), "binlog.shop", 0, 1, RULES
    )
    assert (row["dt"], row["hour"]) == ("9999-12-31", "23")
    assert row["binlog_seq"] < Decimal(10) ** 38


def test_canonical_values():
    assert canonical_value(Decimal("-0.50")) == "-0.50"
    assert canonical_value(Decimal("1E+3")) == "1000"
    assert canonical_value(dt.datetime(2024, 1, 2, 3, 4, 5)) == "2024-01-02 03:04:05"
    assert canonical_value(dt.date(2024, 1, 2)) == "2024-01-02"
    assert canonical_value(dt.timedelta(hours=838, minutes=59, seconds=59)) == "838:59:59"
    assert canonical_value({"b": [1, b"\x01"], "a": None}) == '{"a":null,"b":[1,"AQ=="]}'
    assert canonical_value(3.0) == "3.0" and canonical_value(True) == "1" and canonical_value(None) is None


def test_shard_rules_match_the_whole_name():
    rules = ShardRules.from_mapping({"user_info": r"user_info_(\d+)", "orders": None})
    assert [
        rules.fold(n)
        for n in (
            "user_info_1",
            "user_info_123",
            "user_info_1_bak",
            "_user_info_1_gho",
            "user_info_",
            "orders",
            "orders_1",
            "Orders",
        )
    ] == [
        "user_info",
        "user_info",
        None,
        None,
        None,
        "orders",
        None,
        None,
    ]
    assert rules.shards_of("user_info", ["user_info_2", "x", "user_info_1", "user_info_1_bak"]) == [
        "user_info_1",
        "user_info_2",
    ]
    with pytest.raises(ValueError, match="bad regular expression"):
        ShardRule("t", "user_info_(")


SAMPLE = """
source_id: shop-mariadb
flavor: mariadb
replica_server_id: 4101
lateness_minutes: 20
topic_partitions: 3
databases:
  - name: shop
    tables:
      - name: user_info
        shard_regex: 'user_info_(\\d+)'
        primary_key: [id]
        business_key: [user_code]
        unique_across_shards: true
      - name: orders
        primary_key: order_id
"""


def test_config_loads_with_defaults(tmp_path):
    path = tmp_path / "shop.yaml"
    path.write_text(SAMPLE)
    cfg = load_source_config(path)
    db = cfg.database("shop")
    assert (cfg.source_id, cfg.lateness_minutes, cfg.topic_partitions, db.topic) == (
        "shop-mariadb",
        20,
        3,
        "binlog.shop",
    )
    assert db.table("user_info").merge_key == ("user_code",) and db.table("orders").primary_key == (
        "order_id",
    )
    assert db.shard_rules.fold("user_info_9") == "user_info" and db.shard_rules.fold("orders") == "orders"


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (("source_id: shop-mariadb", "source_id: 'bad id!'"), "source_id: 'bad id!' is not"),
        (("flavor: mariadb", "flavor: oracle"), "flavor: expected one of"),
        (("lateness_minutes: 20", "lateness_minutes: -1"), "lateness_minutes: expected an integer"),
        (("        primary_key: [id]\n", ""), "databases[0].tables[0].primary_key: required"),
        (
            ("'user_info_(\\d+)'", "'user_info_('"),
            "databases[0].tables[0].shard_regex: bad regular expression",
        ),
        (
            ("      - name: orders", "      - name: orders\n        colour: red"),
            "databases[0].tables[1]: unknown field(s) colour",
        ),
        (("  - name: shop", "  - name: 'shop-db'"), "databases[0].name: 'shop-db' is not a plain identifier"),
    ],
)
def test_config_errors_name_the_file_and_the_field(tmp_path, change, message):
    path = tmp_path / "broken.yaml"
    path.write_text(SAMPLE.replace(*change))
    with pytest.raises(ConfigError) as err:
        load_source_config(path)
    assert str(err.value).startswith(f"{path}: ")
    assert message in str(err.value)


def test_config_errors_for_unreadable_files(tmp_path):
    with pytest.raises(ConfigError, match="cannot read"):
        load_source_config(tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("databases: [")
    with pytest.raises(ConfigError, match=f"{bad}: not valid YAML"):
        load_source_config(bad)


def test_mysql_settings_hide_the_password(monkeypatch):
    monkeypatch.setenv("SHARP_CDC_MYSQL_PASSWORD", "s3cret-pw")
    settings = MysqlSettings.from_env("db.local", 3307, "cdc")
    assert settings.password == "s3cret-pw"
    assert "s3cret-pw" not in repr(settings) and "s3cret-pw" not in settings.describe()
