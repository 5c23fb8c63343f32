"""The fold of a day's changes onto a state: `fold.py` (`merge_day`, the contract every ODS write agrees with), its
plan (`plan.py`), one action per key and event (`actions.py`), the result row (`result.py`), and which changes a
day merges, typed images or raw rows (`change_source.py`).

May import `source/`, `change/` and `landing/` (the typed images tables it reads).
"""
