"""The hourly landing: a Kafka offset range read by Spark (`land.py`, the broker watch in `kafka_source.py`), each
record parsed on the executors (`parser.py`), appended to the raw binlog table and its typed images tables
(`image_tables.py`), and the done markers of the hours passed (`done_markers.py`).

May import `source/` and `change/`; not `capture/`.
"""
