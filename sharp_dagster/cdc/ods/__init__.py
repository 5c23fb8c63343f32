"""ODS tables as a current state with an Iceberg tag per published day: the snapshot bootstrap of a live source
(`bootstrap.py`, `snapshot.py`), a day merged onto a branch (`merge.py`: which rows; `write.py`: how they land), staged for the rules and published or
dropped (`stage.py`, `store.py`: the day tags and branches, through `spark/refs.py`), the tags' names (`versions.py`), reading a day (`read.py`), compaction and expiry
(`upkeep.py`), and the migration from `dt`-partitioned tables (`migrate.py`).

The top room of `cdc/`: may import every other room.
"""
