"""The operator floor: the `sharp-dagster` command line (`main.py`, one module per command group) and the re-run
of periods through Dagster (`rerun.py`). It stands on everything below it; nothing below imports it."""
