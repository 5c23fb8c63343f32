"""What a CDC source is: its YAML (`config.py`, each field's check in `config_fields.py`), a column's declared type
(`columns.py`), shard groups folded into one logical table (`shards.py`), the source's clock (`clock.py`) and the
YAML written from a live server's information_schema (`introspect.py`, `cdc init`).

The lowest room of `cdc/`: imports nothing of the other rooms.
"""
