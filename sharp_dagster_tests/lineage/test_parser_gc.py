"""parse_script and CPython's cyclic GC: no cyclic garbage left behind, no collection run inside a call, and the
collector's state restored however the call ends (the causes of the parser's former 10-300 ms tail)."""

from __future__ import annotations

import gc
import sys
import threading

import pytest

from sharp_dagster.lineage import gc_quiet
from sharp_dagster.lineage.parser import LineageParseError, parse_script

SQL = (
    "WITH c AS (SELECT a, b FROM ods.s WHERE k IN (SELECT k FROM ods.k)) INSERT OVERWRITE TABLE dwd.t "
    "PARTITION (dt = '1') SELECT c.a, sum(c.b) OVER (PARTITION BY c.a) FROM c JOIN ods.u u ON u.a = c.a"
)


@pytest.fixture()
def gc_state():
    enabled, threshold = gc.isenabled(), gc.get_threshold()
    yield
    gc.set_threshold(*threshold)
    (gc.enable if enabled else gc.disable)()


def test_parse_leaves_no_cyclic_garbage(gc_state):
    parse_script(SQL)
    gc.collect()
    gc.disable()
    for _ in range(20):
        parse_script(SQL)
    assert gc.collect() == 0


# Frames of parse_script's work: sqlglot's parse, the lineage walk, the result, the AST release.
_WORK = {
    ("dialect.py", "parse"),
    ("statements.py", "statement"),
    ("parser.py", "_result"),
    ("gc_quiet.py", "release"),
}


def _inside_parse_work() -> bool:
    frame = sys._getframe(1)
    while frame is not None:
        if (frame.f_code.co_filename.rsplit("/", 1)[-1], frame.f_code.co_name) in _WORK:
            return True
        frame = frame.f_back
    return False


def test_no_collection_starts_while_a_call_works(gc_state):
    starts: list[bool] = []

    def watch(phase: str, info: dict) -> None:
        if phase == "start":
            starts.append(_inside_parse_work())

    gc.enable()
    gc.set_threshold(
        10, 1, 1
    )  # a collection every few allocations: dozens would start inside an unpaused call
    gc.callbacks.append(watch)
    try:
        for _ in range(20):
            parse_script(SQL)
            [{} for _ in range(50)]  # allocations between calls: collections do run out here
    finally:
        gc.callbacks.remove(watch)
    assert len(starts) >= 20 and not any(starts)


def test_collector_state_is_restored_on_success_error_and_when_it_was_off(gc_state):
    gc.enable()
    parse_script(SQL)
    assert gc.isenabled()
    with pytest.raises(LineageParseError):
        parse_script("SELECT a FROM WHERE")
    assert gc.isenabled()
    gc.disable()
    parse_script(SQL)
    assert not gc.isenabled()  # a caller that turned the collector off keeps it off


def test_overlapping_calls_share_one_pause(gc_state):
    gc.enable()
    seen_inside: list[bool] = []
    barrier = threading.Barrier(4)

    def worker() -> None:
        barrier.wait()
        for _ in range(30):
            with gc_quiet.paused():
                seen_inside.append(gc.isenabled())
                parse_script(SQL)

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(seen_inside) == 120 and not any(seen_inside)
    assert gc.isenabled()
