"""A fault-matrix world that fails to build stops the servers it started (the session fixture never sees it)."""

from __future__ import annotations

import os

import pytest

from sharp_dagster.servers import broker as broker_module
from sharp_dagster_tests.faults import conftest as worlds


class _Broker:
    """Stands in for `LocalBroker`: records what the build does with it."""

    made: list[_Broker] = []

    def __init__(self, base_dir):
        self.cleaned = False
        _Broker.made.append(self)

    def start(self) -> _Broker:
        return self

    @property
    def bootstrap_servers(self) -> str:
        return "127.0.0.1:9"

    def cleanup(self) -> None:
        self.cleaned = True


def test_a_failed_build_stops_its_broker(monkeypatch, tmp_path_factory):
    monkeypatch.setattr(broker_module, "LocalBroker", _Broker)

    def broken() -> None:
        raise RuntimeError("catalog unreachable")

    monkeypatch.setattr(worlds, "point_catalog", broken)
    monkeypatch.delenv("SHARP_CLAIM_TIMEOUT_S", raising=False)
    _Broker.made.clear()

    with pytest.raises(RuntimeError, match="catalog unreachable"):
        worlds._build("sqlite", tmp_path_factory)

    assert [b.cleaned for b in _Broker.made] == [True]
    assert "SHARP_CLAIM_TIMEOUT_S" not in os.environ  # the build's environment was restored too
