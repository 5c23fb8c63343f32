"""The demo's Dagster instance opens without the first-run "join the Dagster community" dialog (Dagster's `nux`
instance setting), and a `dagster.yaml` the user already has is left as it is."""

from __future__ import annotations

from types import SimpleNamespace

from dagster import DagsterInstance

from sharp_dagster.dagster_home import ensure_dagster_home


def test_a_new_home_has_no_first_run_dialog(tmp_path, monkeypatch):
    monkeypatch.delenv("DAGSTER_HOME", raising=False)
    home = ensure_dagster_home(SimpleNamespace(dagster_home=tmp_path / "dagster_home"))
    with DagsterInstance.from_config(str(home)) as instance:
        assert instance.nux_enabled is False


def test_the_users_instance_settings_stay(tmp_path, monkeypatch):
    home = tmp_path / "mine"
    home.mkdir()
    (home / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    assert ensure_dagster_home(SimpleNamespace(dagster_home=tmp_path / "other")) == home
    assert (home / "dagster.yaml").read_text() == "telemetry:\n  enabled: false\n"
