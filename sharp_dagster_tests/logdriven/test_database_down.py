"""A job-log database that cannot be reached fails the run before any data is written, the password hidden."""

from __future__ import annotations

from dagster import AssetKey, DagsterInstance, materialize

from sharp_dagster.servers.ports import free_port


def test_unreachable_log_database_fails_before_writing(isolated, spark, monkeypatch):
    from sharp_dagster.definitions import defs

    port = free_port()  # nothing listens there
    monkeypatch.setenv("SHARP_LOG_DB_URL", f"postgresql://etl:s3cret-pw@127.0.0.1:{port}/joblog")
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
    assert f"postgresql://etl:***@127.0.0.1:{port}/joblog" in text
    assert "s3cret-pw" not in text
    assert "job log unavailable, nothing was written" in text
    from sharp_dagster.settings import Settings

    assert not (Settings.from_env().warehouse_dir / "ods.db" / "product" / "dt=2024-01-01").exists()
