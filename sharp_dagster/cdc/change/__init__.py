"""The change message and what it carries: Canal flat JSON with its binlog identity (`messages.py`), binlog
positions and the raw table's columns (`binlog_schema.py`), a column value as text (`canonical_values.py`), typed
row images (`images.py`) and the DDL the images follow (`schema_evolution.py`).

May import `source/` only.
"""
