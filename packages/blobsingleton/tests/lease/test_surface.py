"""The library's public surface: a small root, the rest in named submodules."""

from __future__ import annotations

import importlib
import warnings

import blobsingleton
import pytest


def test_the_root_exports_what_a_decorator_or_lease_user_needs_and_no_more() -> None:
    assert len(blobsingleton.__all__) <= 16
    for name in blobsingleton.__all__:
        assert hasattr(blobsingleton, name), name


def test_an_unknown_name_is_still_an_attribute_error() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(AttributeError):
            blobsingleton.no_such_name  # noqa: B018


def test_every_error_is_defined_in_errors_under_the_one_root() -> None:
    import pkgutil

    from blobsingleton import errors

    public = [i for i in pkgutil.iter_modules(blobsingleton.__path__) if not i.name.startswith("_")]
    for info in public:  # (private modules' own control-flow errors never reach a caller)
        module = importlib.import_module(f"blobsingleton.{info.name}")
        for value in vars(module).values():
            if (
                isinstance(value, type)
                and issubclass(value, Exception)
                and value.__module__.startswith("blobsingleton")
            ):
                assert value.__module__ == "blobsingleton.errors", value
                assert issubclass(value, errors.BlobSingletonError), value
