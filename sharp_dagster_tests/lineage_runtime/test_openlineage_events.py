"""OpenLineage events without Spark: built from the parser's lineage, valid against the spec's JSON schema, written
to the data folder by default and POSTed to an HTTP endpoint (a local server of the test) by environment variable,
with the API key sent but never logged."""

from __future__ import annotations

import json
import logging
import os
import threading
from datetime import datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from sharp_dagster.lineage import openlineage
from sharp_dagster.lineage.openlineage import JobLineage, build_run_event, emit_run_event
from sharp_dagster.lineage.parser import parse_script
from sharp_dagster_tests.lineage_runtime.ol_schema import column_lineage_of, validate_run_event

SQL = (
    "INSERT OVERWRITE TABLE ads.t SELECT o.user_id, SUM(o.qty * o.price) AS amount, u.city "
    "FROM dwd.orders o JOIN dwd.users u ON u.user_id = o.user_id WHERE o.dt = '2024-01-01' "
    "GROUP BY o.user_id, u.city"
)


@pytest.fixture()
def ol_env(tmp_path, monkeypatch):
    """A data folder of its own and no OpenLineage configuration; every OPENLINEAGE* variable restored after."""
    saved = {k: v for k, v in os.environ.items() if k.startswith("OPENLINEAGE")}
    for key in saved:
        monkeypatch.delenv(key)
    monkeypatch.setenv("SHARP_DATA_DIR", str(tmp_path / "data"))
    yield tmp_path
    for key in [k for k in os.environ if k.startswith("OPENLINEAGE")]:
        del os.environ[key]
    os.environ.update(saved)


def _lineage() -> JobLineage:
    parsed = parse_script(SQL, dialect="spark")
    schemas = {
        "dwd.orders": {"user_id": "", "qty": "", "price": "", "dt": ""},
        "dwd.users": {"user_id": "", "city": ""},
    }
    return JobLineage.from_script(parsed, "ads.t", schemas, SQL)


def _dict(event) -> dict:
    from openlineage.client.serde import Serde

    return json.loads(Serde.to_json(event))


@pytest.mark.parametrize("kind", ["START", "COMPLETE", "FAIL"])
def test_events_are_valid_against_the_spec_and_carry_the_parsers_column_lineage(kind):
    event = _dict(
        build_run_event(
            kind,
            job_name="ads/t",
            run_id=openlineage.new_run_id(),
            namespace="sharp_dagster",
            warehouse_uri="file:///warehouse",
            lineage=_lineage(),
            nominal_start=datetime(2024, 1, 1),
            nominal_end=datetime(2024, 1, 2),
            output_fields=[("user_id", "bigint"), ("amount", "decimal(20,2)"), ("city", "string")]
            if kind == "COMPLETE"
            else None,
            error="Failure: boom" if kind == "FAIL" else None,
            spark_version="4.0.0",
        )
    )
    validate_run_event(event)
    assert event["eventType"] == kind
    parsed = parse_script(SQL, dialect="spark")
    assert column_lineage_of(event) == {c.target[len("ads.t.") :]: sorted(c.sources) for c in parsed.columns}
    assert column_lineage_of(event)["amount"] == ["dwd.orders.price", "dwd.orders.qty"]
    indirect = event["outputs"][0]["facets"]["columnLineage"]["dataset"]
    assert {f"{f['name']}.{f['field']}" for f in indirect} == set(parsed.dataset_dependencies)
    assert sorted(i["name"] for i in event["inputs"]) == ["dwd.orders", "dwd.users"]
    assert ("errorMessage" in event["run"]["facets"]) == (kind == "FAIL")


def test_schema_validation_catches_a_broken_event():
    event = _dict(
        build_run_event(
            "START",
            job_name="ads/t",
            run_id=openlineage.new_run_id(),
            namespace="n",
            warehouse_uri="file:///w",
            lineage=_lineage(),
        )
    )
    event["run"]["runId"] = "not-a-uuid"
    with pytest.raises(AssertionError, match="runId"):
        validate_run_event(event)
    event = _dict(
        build_run_event(
            "START",
            job_name="ads/t",
            run_id=openlineage.new_run_id(),
            namespace="n",
            warehouse_uri="file:///w",
            lineage=_lineage(),
        )
    )
    del event["outputs"][0]["facets"]["columnLineage"]["fields"]["amount"]["inputFields"]
    with pytest.raises(AssertionError, match="columnLineage"):
        validate_run_event(event)
    with pytest.raises(ValueError, match="must be one of"):
        build_run_event("RUNNING", job_name="x", run_id="y", namespace="n", warehouse_uri="w", lineage=None)


def test_default_transport_appends_to_the_data_folder(ol_env):
    run_id = openlineage.new_run_id()
    lineage = _lineage()
    emit_run_event(
        "START", job_name="ads/t", run_id=run_id, nominal_start=datetime(2024, 1, 1), lineage=lineage
    )
    emit_run_event(
        "COMPLETE", job_name="ads/t", run_id=run_id, output_fields=[("user_id", "bigint")], lineage=lineage
    )
    path = ol_env / "data" / "openlineage" / "events.jsonl"
    events = [json.loads(line) for line in path.read_text().splitlines()]
    assert [e["eventType"] for e in events] == ["START", "COMPLETE"]
    assert {e["run"]["runId"] for e in events} == {run_id}
    for event in events:
        validate_run_event(event)
    assert events[1]["outputs"][0]["facets"]["schema"]["fields"] == [
        {"name": "user_id", "type": "bigint", "fields": []}
    ]


class _Collector(BaseHTTPRequestHandler):
    received: list[tuple[str, dict, dict]] = []

    def do_POST(self):  # noqa: N802 (http.server's naming)
        body = self.rfile.read(int(self.headers["Content-Length"]))
        self.received.append((self.path, dict(self.headers), json.loads(body)))
        self.send_response(201)
        self.end_headers()

    def log_message(self, *args):  # keep the test output quiet
        pass


def test_http_endpoint_by_environment_with_the_key_never_logged(ol_env, monkeypatch, caplog):
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Collector)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        _Collector.received.clear()
        monkeypatch.setenv("OPENLINEAGE_URL", f"http://127.0.0.1:{server.server_address[1]}")
        monkeypatch.setenv("OPENLINEAGE_API_KEY", "sekrit-key-123")
        with caplog.at_level(logging.INFO):
            event = emit_run_event(
                "START", job_name="ads/t", run_id=openlineage.new_run_id(), lineage=_lineage()
            )
        assert event is not None
        (path, headers, body) = _Collector.received[0]
        assert path == "/api/v1/lineage"
        assert headers["Authorization"] == "Bearer sekrit-key-123"
        validate_run_event(body)
        assert column_lineage_of(body)["amount"] == ["dwd.orders.price", "dwd.orders.qty"]
        assert not (ol_env / "data" / "openlineage" / "events.jsonl").exists()
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)
    # The endpoint gone: the run goes on, the warning names neither the URL nor the key.
    with caplog.at_level(logging.DEBUG):
        assert emit_run_event("COMPLETE", job_name="ads/t", run_id=openlineage.new_run_id()) is None
    assert "sekrit-key-123" not in caplog.text
    warning = [r.getMessage() for r in caplog.records if r.name == "sharp_dagster.lineage.openlineage"]
    assert warning and "not sent" in warning[-1] and "127.0.0.1" not in warning[-1]
