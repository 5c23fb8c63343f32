"""deploy/: the environment file lists every setting the code reads, each with its meaning; deploy/dagster.yaml
makes a Dagster instance whose runs, events and schedules are in PostgreSQL (a real server)."""

from __future__ import annotations

import re
import shutil

import pytest
import yaml

from sharp_dagster.settings import REPO_ROOT
from sharp_dagster_tests.cluster.deploy_support import DEPLOY, env_file_settings

_READ = re.compile(r"""["'](SHARP_[A-Z0-9_]+)["']""")


def _settings_the_code_reads() -> set[str]:
    names: set[str] = set()
    for path in (REPO_ROOT / "sharp_dagster").rglob("*.py"):
        names.update(_READ.findall(path.read_text()))
    return names


def test_env_file_lists_every_setting() -> None:
    settings = env_file_settings()
    readme = (REPO_ROOT / "README.md").read_text()
    documented = set(re.findall(r"^\| `(SHARP_[A-Z0-9_]+)`", readme, flags=re.M))
    dagster_yaml = yaml.safe_load((DEPLOY / "dagster.yaml").read_text())
    from_yaml = set(re.findall(r"'env': '([A-Z0-9_]+)'", str(dagster_yaml)))
    missing = (_settings_the_code_reads() | documented | from_yaml | {"DAGSTER_HOME"}) - settings.keys()
    assert not missing, f"deploy/sharp.env lacks {sorted(missing)}"
    assert documented, "README's configuration table was not found"
    # No secret in the file: every password-like setting is empty.
    for name, value in settings.items():
        if any(word in name for word in ("PASSWORD", "SECRET", "WEBHOOK")) or name == "SHARP_LOG_DB_URL":
            assert value == "", f"deploy/sharp.env carries a value for the secret {name}"


@pytest.mark.postgres
def test_dagster_yaml_is_an_instance_on_postgres(pg_server, tmp_path, monkeypatch) -> None:
    from dagster import DagsterInstance, asset, materialize
    from dagster_postgres import PostgresEventLogStorage, PostgresRunStorage, PostgresScheduleStorage

    database = pg_server.create_database().rsplit("/", 1)[1]
    home = tmp_path / "dagster_home"
    home.mkdir()
    shutil.copy(DEPLOY / "dagster.yaml", home / "dagster.yaml")
    env = env_file_settings()
    for name in ("DAGSTER_PG_HOST", "DAGSTER_PG_PORT", "DAGSTER_PG_DB", "DAGSTER_PG_USER"):
        assert name in env
    monkeypatch.setenv("DAGSTER_PG_HOST", "127.0.0.1")
    monkeypatch.setenv("DAGSTER_PG_PORT", str(pg_server.port))
    monkeypatch.setenv("DAGSTER_PG_DB", database)
    monkeypatch.setenv("DAGSTER_PG_USER", "postgres")
    monkeypatch.setenv("DAGSTER_PG_PASSWORD", "")
    monkeypatch.setenv("DAGSTER_MAX_CONCURRENT_RUNS", env["DAGSTER_MAX_CONCURRENT_RUNS"])

    @asset
    def answer() -> int:
        return 42

    with DagsterInstance.from_config(str(home)) as instance:
        assert isinstance(instance.run_storage, PostgresRunStorage)
        assert isinstance(instance.event_log_storage, PostgresEventLogStorage)
        assert isinstance(instance.schedule_storage, PostgresScheduleStorage)
        assert type(instance.run_coordinator).__name__ == "QueuedRunCoordinator"
        result = materialize([answer], instance=instance)
        assert result.success
    # A second instance from the same file (another process, in production) sees the run and its materialization.
    with DagsterInstance.from_config(str(home)) as other:
        assert other.get_run_by_id(result.run_id) is not None
        assert other.get_latest_materialization_event(answer.key) is not None
