"""App settings for the local host: environment plus `local.settings.json` `Values`, env wins.

This is what `func start` does: it reads `Values` from local.settings.json into the worker's
environment unless the variable is already set. When only the committed sample exists
(local.settings.json is git-ignored), the sample is used and the caller is told so.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import blobsingleton
import blobsingleton.config

LOCAL_SETTINGS = "local.settings.json"
SAMPLE_SETTINGS = "local.settings.sample.json"


class SettingsFileError(ValueError):
    """local.settings.json exists but cannot be used."""


@dataclass(frozen=True)
class AppSettings:
    """The merged settings and where the file part came from (for one log line)."""

    values: dict[str, str]
    source: Path | None = None
    notes: list[str] = field(default_factory=list)


def _read_values(path: Path) -> dict[str, str]:
    try:
        data = json.loads(path.read_text(encoding="utf-8-sig"))
    except (OSError, json.JSONDecodeError) as error:
        raise SettingsFileError(f"{path}: {error}") from error
    if data.get("IsEncrypted"):
        raise SettingsFileError(f"{path}: encrypted settings are not supported by devhost")
    values = data.get("Values") or {}
    if not isinstance(values, dict):
        raise SettingsFileError(f"{path}: 'Values' must be an object")
    return {str(k): "" if v is None else str(v) for k, v in values.items()}


def load_app_settings(
    app_dir: Path | str = ".", environ: Mapping[str, str] | None = None
) -> AppSettings:
    """Settings as the app will see them: file `Values` overlaid by the environment."""
    app_dir = Path(app_dir)
    environ = os.environ if environ is None else environ
    notes: list[str] = []
    source: Path | None = None
    file_values: dict[str, str] = {}
    for name in (LOCAL_SETTINGS, SAMPLE_SETTINGS):
        path = app_dir / name
        if path.is_file():
            source = path
            file_values = _read_values(path)
            if name == SAMPLE_SETTINGS:
                notes.append(f"{LOCAL_SETTINGS} not found: using {SAMPLE_SETTINGS}")
            break
    else:
        notes.append(f"neither {LOCAL_SETTINGS} nor {SAMPLE_SETTINGS} found: environment only")
    merged = {**file_values, **dict(environ)}
    return AppSettings(values=merged, source=source, notes=notes)


def instance_id(instance: int) -> str:
    """The WEBSITE_INSTANCE_ID devhost gives instance number `instance` (Azure gives a hex id)."""
    return f"devhost-{instance}"


def instance_number(website_instance_id: str | None) -> int | None:
    """The instance number of a devhost WEBSITE_INSTANCE_ID (as owner records carry it), else
    None: how a harness maps "who holds this key" back to a process."""
    text = website_instance_id or ""
    number = text.removeprefix("devhost-")
    return int(number) if number != text and number.isdigit() else None


def instance_settings(
    base: Mapping[str, str | None], overrides: Mapping[str, str], instance: int
) -> dict[str, str | None]:
    """Settings of one instance: `overrides` win; `{instance}` in their values is replaced."""
    result: dict[str, str | None] = dict(base)
    for name, value in overrides.items():
        result[name] = value.replace("{instance}", str(instance))
    result["WEBSITE_INSTANCE_ID"] = instance_id(instance)
    return result


def with_host_id(settings: dict[str, str | None], app_dir: Path | str) -> dict[str, str | None]:
    """`settings` with the host id a local host has, as Core Tools does: machine name and app
    folder (`AzureWebJobsScriptRoot`), unless `AzureFunctionsWebHost__hostid` is set. Fixed
    here, because each instance's WEBSITE_INSTANCE_ID would otherwise make the app derive an
    App Service id from a site name it does not have."""
    settings.setdefault("AzureWebJobsScriptRoot", str(Path(app_dir).resolve()))
    local = {k: v for k, v in settings.items() if k != "WEBSITE_INSTANCE_ID"}
    settings["AzureFunctionsWebHost__hostid"] = blobsingleton.config.host_id(local)
    return settings


def parse_assignment(text: str) -> tuple[str, str]:
    """`NAME=VALUE` from the command line."""
    name, sep, value = text.partition("=")
    if not sep or not name.strip():
        raise ValueError(f"expected NAME=VALUE, got {text!r}")
    return name.strip(), value
