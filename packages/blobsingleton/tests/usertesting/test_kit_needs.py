"""The test kit's needs are named where they are missed (issue 48, items 3 and 8): importing
`blobsingleton.testing` without azure-functions fails naming the `[test]` extra, and the
busy-policy check takes the app itself, as often as tests call it (azure-functions refuses a
second `app.get_functions()` of one app: "does not have a unique function name")."""

from __future__ import annotations

import importlib
import sys

import azure.functions as func
import pytest
from blobsingleton import Busy, once
from blobsingleton.testing import check_busy_policies


def test_importing_the_kit_without_azure_functions_names_the_extra(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "azure.functions", None)  # as if not installed
    monkeypatch.delitem(sys.modules, "blobsingleton.testing")
    named = r"azure-functions.*\[test\] extra.*blobsingleton\[test\]"
    with pytest.raises(ImportError, match=named):
        importlib.import_module("blobsingleton.testing")


def _app(busy: object) -> func.FunctionApp:
    app = func.FunctionApp()

    @app.service_bus_queue_trigger(arg_name="msg", queue_name="orders", connection="SB")
    @once("charge-{order_id}", busy=busy)  # type: ignore[call-overload]
    def take_order(msg) -> None: ...  # type: ignore[no-untyped-def]  # only the binding says

    return app


def test_the_busy_policy_check_takes_the_app_and_runs_twice() -> None:
    good = _app(Busy.skip())
    check_busy_policies(good)
    check_busy_policies(good)  # a second test of the same app
    [function] = good.get_functions()  # the worker's own indexing still works after them
    assert function.get_function_name() == "take_order"
    bad = _app(Busy.defer(queue="orders"))
    for _ in range(2):
        with pytest.raises(TypeError, match="serviceBusTrigger"):
            check_busy_policies(bad)
    with pytest.raises(TypeError, match="serviceBusTrigger"):
        check_busy_policies(bad.get_functions())  # the indexed functions, as before
