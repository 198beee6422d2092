"""Static check: every app setting the code reads is in infra/main.bicep, in
local.settings.sample.json and in the settings table of docs/settings.md, and nothing else is.

"The code" is the deployed app: function_app.py, functions/, shared/ and the library. A
setting is read where a string literal is passed to a settings reader (`setting`, `require`,
`number_setting`, `from_settings`, a `connection=` argument...), named in a `("NAME", "default")`
convention, or bound as `%NAME%` in a trigger.
"""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SOURCES = [ROOT / "function_app.py", ROOT / "functions", ROOT / "shared",
           ROOT / "packages" / "blobsingleton" / "src"]  # fmt: skip
READERS = {
    "setting",
    "require",
    "number_setting",
    "whole_setting",
    "from_settings",
    "getenv",
    "get",
}
#: Set by the platform, never by us (the library reads them to compute the host id, as the
#: host does; the app reads WEBSITE_AUTH_ENABLED to know App Service authentication is on),
#: and the host's own override of that id.
PLATFORM = {
    "WEBSITE_INSTANCE_ID", "WEBSITE_SITE_NAME", "WEBSITE_SLOT_NAME", "WEBSITE_SKU",
    "WEBSITE_HOSTNAME", "CONTAINER_NAME", "LEGION_SERVICE_HOST", "AzureWebJobsScriptRoot",
    "AzureFunctionsWebHost__hostid", "WEBSITE_AUTH_ENABLED",
    # Kubernetes-managed hosting and Container Apps, read for the host id as the host reads them
    "KUBERNETES_SERVICE_HOST", "POD_NAMESPACE", "MANAGED_ENVIRONMENT",
}  # fmt: skip
#: Read by the host, the Python worker or the local tools, not by the code: allowed where they
#: belong (FUNCTIONS_REQUEST_BODY_SIZE_LIMIT: the host's request body limit, which devhost
#: honours).
#: The Python worker's OpenTelemetry switch (docs/telemetry.md), which devhost honours.
WORKER_TELEMETRY = {"PYTHON_ENABLE_OPENTELEMETRY"}
HOST_ONLY = {
    "template": {"FUNCTIONS_REQUEST_BODY_SIZE_LIMIT"},
    "sample": {
        "FUNCTIONS_WORKER_RUNTIME",
        "AzureWebJobsFeatureFlags",
        "FUNCTIONS_REQUEST_BODY_SIZE_LIMIT",
        *WORKER_TELEMETRY,
    },
    "docs": {"FUNCTIONS_REQUEST_BODY_SIZE_LIMIT", *WORKER_TELEMETRY},
}
_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_]*")
_BINDING = re.compile(r"^%([A-Za-z_][A-Za-z0-9_]*)%(?:$|-)")


def _python_files() -> list[Path]:
    files: list[Path] = []
    for source in SOURCES:
        files.extend([source] if source.is_file() else sorted(source.rglob("*.py")))
    return files


def _reader_name(call: ast.Call) -> str:
    target = call.func
    if isinstance(target, ast.Attribute):
        if target.attr == "get" and not (
            isinstance(target.value, ast.Attribute) and target.value.attr == "environ"
        ):
            return ""  # dict.get of something other than os.environ
        return target.attr
    return target.id if isinstance(target, ast.Name) else ""


def settings_read_by_the_code() -> set[str]:
    found: set[str] = set()
    for path in _python_files():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Call):
                literal_args = [a for a in node.args[:1] if isinstance(a, ast.Constant)]
                if _reader_name(node) in READERS:
                    found.update(str(a.value) for a in literal_args if isinstance(a.value, str))
                for keyword in node.keywords:
                    if keyword.arg == "connection" and isinstance(keyword.value, ast.Constant):
                        found.add(str(keyword.value.value))
            elif isinstance(node, ast.Tuple) and len(node.elts) == 2:
                name, default = node.elts
                if (isinstance(name, ast.Constant) and isinstance(default, ast.Constant)
                        and isinstance(name.value, str) and name.value.isupper()
                        and name.value.endswith(("_CONTAINER", "_QUEUE", "_TABLE"))):  # fmt: skip
                    found.add(name.value)
            elif isinstance(node, ast.Constant) and (match := _BINDING.match(str(node.value))):
                found.add(match.group(1))
    for default in _function_defaults():
        found.add(default)
    return {n for n in found if _NAME.fullmatch(n)} - PLATFORM


def _function_defaults() -> set[str]:
    """`connection: str = "AzureWebJobsStorage"` style defaults of settings readers."""
    names: set[str] = set()
    for path in _python_files():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                params = node.args.args + node.args.kwonlyargs
                defaults = [*node.args.defaults, *node.args.kw_defaults]
                for param, default in zip(reversed(params), reversed(defaults), strict=False):
                    if (param.arg in ("connection", "name") and isinstance(default, ast.Constant)
                            and default.value == "AzureWebJobsStorage"):  # fmt: skip
                        names.add("AzureWebJobsStorage")
    return names


def _base(name: str) -> str:
    """`AzureWebJobsStorage__accountName` is the identity-based form of AzureWebJobsStorage."""
    return name.split("__")[0]


def template_settings() -> set[str]:
    text = (ROOT / "infra" / "main.bicep").read_text()
    block = text.split("var appSettings = {", 1)[1].split("\n}", 1)[0]
    return {_base(line.split(":")[0].strip()) for line in block.splitlines() if ":" in line}


def sample_settings() -> set[str]:
    values = json.loads((ROOT / "local.settings.sample.json").read_text())["Values"]
    return {_base(name) for name in values}


def documented_settings() -> set[str]:
    """The settings in the first column of docs/settings.md's table (its first section)."""
    text = (ROOT / "docs" / "settings.md").read_text()
    section = text.split("# App settings\n", 1)[1].split("\n## ", 1)[0]
    names: set[str] = set()
    for line in section.splitlines():
        if line.startswith("| `"):
            names.update(re.findall(r"`([A-Za-z_][A-Za-z0-9_]*)`", line.split("|")[1]))
    return names


def test_the_scan_finds_settings_of_every_kind() -> None:
    code = settings_read_by_the_code()
    # one of each way of reading: setting(), whole_setting(), ("NAME", default), %NAME%, connection
    assert {"IMPORTS_CONTAINER", "JOB_MAX_UNITS", "LEASE_CONTAINER", "IMPORT_SCHEDULE",
            "AzureWebJobsStorage", "EMAIL_FROM"} <= code  # fmt: skip


def test_template_sample_and_docs_list_exactly_the_settings_the_code_reads() -> None:
    code = settings_read_by_the_code()
    lists = {
        "template": ("infra/main.bicep", template_settings()),
        "sample": ("local.settings.sample.json", sample_settings()),
        "docs": ("docs/settings.md settings table", documented_settings()),
    }
    for kind, (where, listed) in lists.items():
        allowed = HOST_ONLY[kind]
        assert not code - listed, f"{where} lacks {sorted(code - listed)}"
        assert not listed - code - allowed, (
            f"{where} lists unread {sorted(listed - code - allowed)}"
        )


def test_the_template_keeps_storage_keyless_and_the_app_identity_based() -> None:
    text = (ROOT / "infra" / "main.bicep").read_text()
    assert "allowSharedKeyAccess: false" in text
    assert "identity: { type: 'SystemAssigned' }" in text
    assert "runtime: { name: 'python', version: '3.11' }" in text
    assert "tier: 'FlexConsumption'" in text
    assert "AzureWebJobsStorage__accountName" in text
    # No storage key anywhere; the one listKeys reads the function app's own blobs_extension
    # system key, which the Event Grid subscription of the arrivals' blob trigger posts with.
    assert not re.search(r"AccountKey|listKeys\((?!'\$\{app\.id\}/host/default')", text)
    assert text.count("listKeys(") == 1
    for role in ("b7e6dc6d-f1e8-4753-8033-0f276bb0955b", "974c5e8b-45b9-4653-ba55-5f855dd0fb88",
                 "0a9a7e1f-b9d0-4cc4-a60d-0319b160aaa3"):  # fmt: skip
        assert role in text
