"""App settings and host.json parsing (no storage needed)."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest

from devhost.app_settings import instance_settings, load_app_settings, parse_assignment
from devhost.host_config import HostConfigError, load_host_config, parse_timespan, queue_options
from devhost.supervisor import HostOptions, Supervisor
from harness.kit import development_storage_down

ROOT = Path(__file__).resolve().parents[2]


def test_env_wins_over_local_settings_and_sample_is_the_fallback(tmp_path: Path) -> None:
    (tmp_path / "local.settings.sample.json").write_text(
        json.dumps({"Values": {"A": "from-sample", "B": "from-sample"}})
    )
    settings = load_app_settings(tmp_path, environ={"B": "from-env"})
    assert settings.values["A"] == "from-sample"
    assert settings.values["B"] == "from-env"
    assert any("local.settings.sample.json" in note for note in settings.notes)

    (tmp_path / "local.settings.json").write_text(json.dumps({"Values": {"A": "from-local"}}))
    settings = load_app_settings(tmp_path, environ={})
    assert settings.values == {"A": "from-local"}
    assert settings.notes == []


def test_instance_settings_replace_the_instance_number() -> None:
    result = instance_settings({"X": "1"}, {"Q": "notifications-{instance}"}, 3)
    assert result == {"X": "1", "Q": "notifications-3", "WEBSITE_INSTANCE_ID": "devhost-3"}
    assert parse_assignment("A=b=c") == ("A", "b=c")
    with pytest.raises(ValueError):
        parse_assignment("novalue")


def test_supervisor_gives_each_instance_its_settings(tmp_path: Path) -> None:
    options = HostOptions(
        instances=2,
        app_dir=str(tmp_path),
        settings={"COMMON": "c", "GONE": None},
        instance_settings={"NOTIFICATIONS_QUEUE": "notifications-{instance}"},
    )
    supervisor = Supervisor(options)
    one = supervisor.settings_for(1)
    assert one["NOTIFICATIONS_QUEUE"] == "notifications-1"
    assert one["WEBSITE_INSTANCE_ID"] == "devhost-1"
    assert one["COMMON"] == "c" and one["GONE"] is None
    assert one["DEVHOST_FUNCTION_KEY"] == supervisor.function_key != ""


def test_timespans() -> None:
    assert parse_timespan("00:00:02") == 2.0
    assert parse_timespan("00:01:30.5") == 90.5
    assert parse_timespan("1.00:00:00") == 86400.0
    with pytest.raises(HostConfigError):
        parse_timespan("2 seconds")


def test_queue_defaults_are_the_hosts() -> None:
    options = queue_options({}, cores=4)
    assert options.batch_size == 16
    assert options.new_batch_threshold == 32  # batchSize / 2 * cores
    assert options.max_polling_interval == 60.0
    assert options.visibility_timeout == 0.0
    assert options.max_dequeue_count == 5
    assert options.message_encoding == "base64"
    with pytest.raises(HostConfigError):
        queue_options({"batchSize": 64})


def test_repo_host_json_and_app_setting_overrides() -> None:
    config = load_host_config(ROOT, settings={})
    assert config.queues.max_polling_interval == 2.0
    assert config.queues.new_batch_threshold == 8
    overridden = load_host_config(
        ROOT,
        settings={
            "AzureFunctionsJobHost__extensions__queues__maxPollingInterval": "00:00:00.2",
            "AzureFunctionsJobHost__extensions__queues__maxDequeueCount": "2",
        },
    )
    assert overridden.queues.max_polling_interval == 0.2
    assert overridden.queues.max_dequeue_count == 2
    assert overridden.queues.batch_size == 16


def test_scenarios_start_azurite_only_when_development_storage_is_down(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("AzureWebJobsStorage", raising=False)
    settings = tmp_path / "local.settings.json"

    def storage_setting(value: str) -> None:
        settings.write_text(json.dumps({"Values": {"AzureWebJobsStorage": value}}))

    storage_setting("DefaultEndpointsProtocol=https;AccountName=x;AccountKey=eA==")
    assert development_storage_down(str(tmp_path)) is False  # a real account: never
    storage_setting("UseDevelopmentStorage=true")
    listener = socket.socket()
    try:
        listener.bind(("127.0.0.1", 10000))
    except OSError:  # something already serves the emulator's port on this machine
        assert development_storage_down(str(tmp_path)) is False
        return
    with listener:
        listener.listen()
        assert development_storage_down(str(tmp_path)) is False  # an emulator is up
    assert development_storage_down(str(tmp_path)) is True
