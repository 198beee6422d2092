"""The default namespace is the Functions host id, computed by the host's own rules.

Cases from azure-functions-host's ScriptHostIdProviderTests (GetDefaultHostId_*), plus the
slot rule of GetAzureWebsiteUniqueSlotName.
"""

from __future__ import annotations

import logging
import socket

import pytest
from blobsingleton import _keys
from blobsingleton.config import host_id, namespace
from blobsingleton.errors import InvalidKey, SettingMissing

HOST_SETTINGS = (
    "AzureFunctionsWebHost__hostid",
    "BLOBSINGLETON_NAMESPACE",
    "WEBSITE_INSTANCE_ID",
    "WEBSITE_SITE_NAME",
    "WEBSITE_SLOT_NAME",
    "WEBSITE_SKU",
    "WEBSITE_HOSTNAME",
    "CONTAINER_NAME",
    "LEGION_SERVICE_HOST",
    "AzureWebJobsScriptRoot",
    "MANAGED_ENVIRONMENT",
    "KUBERNETES_SERVICE_HOST",
    "POD_NAMESPACE",
)


@pytest.fixture(autouse=True)
def clean(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    for name in HOST_SETTINGS:
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


@pytest.mark.parametrize(
    ("site", "expected"),
    [
        ("TEST-FUNCTIONS--", "test-functions"),
        ("TEST-FUNCTIONS-" + "X" * 74, "test-functions-xxxxxxxxxxxxxxxxx"),
        ("TEST-FUNCTIONS-XXXXXXXXXXXXXXXX-XXXX", "test-functions-xxxxxxxxxxxxxxxx"),  # 32nd is '-'
    ],
)
def test_on_app_service_the_site_name_cut_to_32_lower_without_trailing_dashes(
    clean: pytest.MonkeyPatch, site: str, expected: str
) -> None:
    clean.setenv("WEBSITE_INSTANCE_ID", "123123")
    clean.setenv("WEBSITE_SITE_NAME", site)
    assert host_id() == expected


def test_linux_consumption_takes_the_host_name(clean: pytest.MonkeyPatch) -> None:
    clean.setenv("WEBSITE_SITE_NAME", "TEST-FUNCTIONS-XXXXXXXXXXXXXXXX-XXXX")
    clean.setenv("CONTAINER_NAME", "testContainer")
    clean.setenv("WEBSITE_HOSTNAME", "testsite.azurewebsites.net")
    assert host_id() == "testsite"


@pytest.mark.parametrize(
    ("site", "expected"),
    [
        ("myfunctionstestapp", "6606e225f163a70190e4f4357d3dad78"),
        ("TEST-FUNCTIONS-" + "X" * 74, "9dd2d6d54f1135ee6db6116f084b29bd"),
        ("TEST-FUNCTIONS-" + "X" * 73 + "A", "c842e18afa2a84eac2818a956687a72e"),
        ("TEST-FUNCTIONS-" + "X" * 73 + "B", "b595edd5b794d34e79c81361c823487c"),
    ],
)
def test_flex_consumption_hashes_the_name(
    clean: pytest.MonkeyPatch, site: str, expected: str
) -> None:
    clean.setenv("WEBSITE_SKU", "FlexConsumption")
    clean.setenv("WEBSITE_SITE_NAME", site)
    assert host_id() == expected


def test_a_slot_other_than_production_is_its_own_host(clean: pytest.MonkeyPatch) -> None:
    clean.setenv("WEBSITE_INSTANCE_ID", "1")
    clean.setenv("WEBSITE_SITE_NAME", "Payroll")
    clean.setenv("WEBSITE_SLOT_NAME", "Production")
    production = host_id()
    clean.setenv("WEBSITE_SLOT_NAME", "staging")
    assert (production, host_id()) == ("payroll", "payroll-staging")


def test_the_explicit_host_id_setting_wins(clean: pytest.MonkeyPatch) -> None:
    clean.setenv("WEBSITE_INSTANCE_ID", "1")
    clean.setenv("WEBSITE_SITE_NAME", "payroll")
    clean.setenv("AzureFunctionsWebHost__hostid", "test-host-id")
    assert host_id() == "test-host-id"


def test_locally_machine_name_and_a_hash_of_the_app_folder(
    clean: pytest.MonkeyPatch, tmp_path: object
) -> None:
    machine = "".join(ch for ch in socket.gethostname() if ch.isalnum()).lower()
    clean.setenv("AzureWebJobsScriptRoot", "/apps/one")
    one = host_id()
    clean.setenv("AzureWebJobsScriptRoot", "/apps/two")
    assert one.startswith(machine[:20]) and one != host_id()
    assert len(one) <= 32 and one == one.lower()


def test_no_site_name_where_the_host_needs_one_says_what_to_set(
    clean: pytest.MonkeyPatch,
) -> None:
    clean.setenv("WEBSITE_SKU", "FlexConsumption")  # placeholder mode: no site name yet
    with pytest.raises(SettingMissing, match="BLOBSINGLETON_NAMESPACE"):
        host_id()


def test_the_namespace_setting_shares_keys_across_apps_on_purpose(
    clean: pytest.MonkeyPatch,
) -> None:
    clean.setenv("WEBSITE_INSTANCE_ID", "1")
    clean.setenv("WEBSITE_SITE_NAME", "payroll")
    assert namespace() == "payroll"
    clean.setenv("BLOBSINGLETON_NAMESPACE", "shared-jobs")
    assert namespace() == "shared-jobs"
    assert namespace("given") == "given"


@pytest.mark.parametrize("bad", ["a/b", "-x", "x" * 64, "é"])
def test_a_namespace_that_cannot_be_a_name_prefix_is_refused(bad: str) -> None:
    with pytest.raises(InvalidKey):
        namespace(bad)


def test_a_container_that_is_not_azures_counts_as_local(clean: pytest.MonkeyPatch) -> None:
    clean.setenv("CONTAINER_NAME", "ci-runner-7")  # a CI container, no WEBSITE_HOSTNAME
    clean.setenv("AzureWebJobsScriptRoot", "/apps/one")
    machine = "".join(ch for ch in socket.gethostname() if ch.isalnum()).lower()
    assert host_id().startswith(machine[:20])


def test_in_kubernetes_managed_hosting_and_container_apps_the_site_name(
    clean: pytest.MonkeyPatch,
) -> None:
    """The host's IsAnyKubernetesEnvironment: Container Apps (MANAGED_ENVIRONMENT) or a pod
    given its namespace (KUBERNETES_SERVICE_HOST and POD_NAMESPACE) take the site name, as App
    Service does; every replica the same id."""
    clean.setenv("WEBSITE_SITE_NAME", "Payroll")
    clean.setenv("MANAGED_ENVIRONMENT", "true")
    assert host_id() == "payroll"
    clean.delenv("MANAGED_ENVIRONMENT")
    clean.setenv("KUBERNETES_SERVICE_HOST", "10.0.0.1")
    clean.setenv("POD_NAMESPACE", "functions")
    assert host_id() == "payroll"
    clean.delenv("WEBSITE_SITE_NAME")
    with pytest.raises(SettingMissing, match="AzureFunctionsWebHost__hostid"):
        host_id()


def test_a_plain_kubernetes_pod_is_local_to_the_host_and_so_here(
    clean: pytest.MonkeyPatch,
) -> None:
    """KEDA's pods have KUBERNETES_SERVICE_HOST and no POD_NAMESPACE unless the deployment
    gives it: the host takes the machine (pod) name there, a new one per replica."""
    clean.setenv("KUBERNETES_SERVICE_HOST", "10.0.0.1")
    clean.setenv("WEBSITE_SITE_NAME", "payroll")
    machine = "".join(ch for ch in socket.gethostname() if ch.isalnum()).lower()
    assert host_id().startswith(machine[:20])


def warnings_logged(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]


def test_the_local_fallback_is_logged_once_naming_both_settings(
    clean: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    clean.setattr(_keys, "_warned_local", set())
    clean.setenv("AzureWebJobsScriptRoot", "/apps/one")
    with caplog.at_level(logging.WARNING, logger="blobsingleton"):
        first = namespace()
        assert namespace() == first
    [message] = warnings_logged(caplog)
    assert first in message
    assert "AzureFunctionsWebHost__hostid" in message and "BLOBSINGLETON_NAMESPACE" in message


@pytest.mark.parametrize(
    "settings",
    [
        {"BLOBSINGLETON_NAMESPACE": "orders"},
        {"AzureFunctionsWebHost__hostid": "orders"},
        {"WEBSITE_INSTANCE_ID": "1", "WEBSITE_SITE_NAME": "orders"},
        {"CONTAINER_NAME": "c", "WEBSITE_HOSTNAME": "orders.azurewebsites.net"},
        {"MANAGED_ENVIRONMENT": "true", "WEBSITE_SITE_NAME": "orders"},
    ],
)
def test_no_warning_where_the_namespace_is_the_apps_own(
    clean: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, settings: dict[str, str]
) -> None:
    clean.setattr(_keys, "_warned_local", set())
    for name, value in settings.items():
        clean.setenv(name, value)
    with caplog.at_level(logging.WARNING, logger="blobsingleton"):
        assert namespace() == "orders"
        assert namespace("given") == "given"
    assert warnings_logged(caplog) == []
