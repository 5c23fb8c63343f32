"""A job-log database that cannot be reached fails the run before any data is written, the password hidden.

The URL forms are the ones that leaked before: a plain `user:password@`, a `?password=` query parameter with
percent-encoded characters, and a raw password holding `@`, `:` and `/` that SQLAlchemy cannot even parse. The step
failure (what Dagster stores in its event log and run index, with the cause chain) shows no part of the password.
"""

from __future__ import annotations

import pytest
from dagster import AssetKey, DagsterInstance, materialize

from sharp_dagster.servers.ports import free_port

PORT = free_port()  # nothing listens there
FORMS = {
    f"postgresql://etl:s3cret-pw@127.0.0.1:{PORT}/joblog": (
        ["s3cret-pw"],
        f"postgresql://etl:***@127.0.0.1:{PORT}/joblog",
    ),
    f"postgresql://etl@127.0.0.1:{PORT}/joblog?password=Qp%40ss%2Fword": (
        ["Qp%40ss%2Fword", "Qp@ss/word"],
        None,
    ),
    f"postgresql://etl:Rp@ss:w/rd@127.0.0.1:{PORT}/joblog": (["Rp@ss", "ss:w/rd", "w/rd"], None),
}


@pytest.mark.parametrize("url", list(FORMS), ids=["userinfo", "query-password", "raw-specials"])
def test_unreachable_log_database_fails_before_writing(isolated, spark, monkeypatch, url):
    from sharp_dagster.definitions import defs

    leaks, shown = FORMS[url]
    monkeypatch.setenv("SHARP_LOG_DB_URL", url)
    result = materialize(
        list(defs.assets),
        selection=[AssetKey(["ods", "product"])],
        partition_key="2024-01-01",
        instance=DagsterInstance.ephemeral(),
        resources=defs.resources,
        raise_on_error=False,
    )
    assert not result.success
    failure = next(e for e in result.all_events if e.is_step_failure)
    text = failure.step_failure_data.error.to_string()
    assert "job log unavailable, nothing was written" in text, text
    if shown:
        assert shown in text, text
    for leak in leaks:
        assert leak not in text, text
    from sharp_dagster.spark.tables import TableRef

    monkeypatch.undo()  # the catalog lives in the (reachable) job-log database of the module
    assert not defs.resources["spark"].store().exists(TableRef("ods", "product"))
