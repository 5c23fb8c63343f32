"""Binlog CDC: from a MySQL/MariaDB source's binlog to the ODS tables, in six rooms, lowest first.

- `source/`: what a source is (its YAML, columns, shard groups, clock) and reading a live server's schema.
- `change/`: the change message (Canal flat JSON + binlog identity), its positions, typed images, DDL.
- `capture/`: the collector: binlog events to Kafka messages, its saved position, its topics.
- `landing/`: Kafka offsets to the raw binlog table, typed images tables and hourly done markers.
- `merge/`: the fold of a day's changes onto a state (`merge_day`) and which changes a day merges.
- `ods/`: ODS tables as a current state with a tag per day: the bootstrap, the staged merge, publish, upkeep.

A room imports only from the rooms listed before it (and from the package's lower floors: `spark/`, `periods`,
`settings`, ...); `capture/` and `landing/` do not import each other
(`sharp_dagster_tests/house/test_floors.py` keeps it so).
"""
