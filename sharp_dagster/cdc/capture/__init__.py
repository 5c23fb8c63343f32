"""The collector (`sharp-dagster cdc collect`): binlog events read from the server (`binlog_server.py`,
`binlog_events.py`), held until their transaction commits (`txn_buffer.py`), turned into messages
(`collector_messages.py`) and sent to Kafka (`collector_output.py`, `kafka_topics.py`); where it resumes
(`collector_state.py`, `collector_db.py`).

May import `source/` and `change/`; not `landing/` (the topic is the only thing they share).
"""
