"""The old name of `servers/process.py`, kept only while branches written against it are merged; import from
`sharp_dagster.servers.process` instead (nothing in main imports this one)."""

from sharp_dagster.servers.process import spawn_logged, stop_process

__all__ = ["spawn_logged", "stop_process"]
