"""Load-test scenarios, one module each; discovered by name, no registry to keep in sync."""

from __future__ import annotations

import importlib
import logging
import pkgutil
from types import ModuleType


def available() -> dict[str, ModuleType]:
    """Every scenario module in this package (modules starting with "_" are helpers)."""
    found: dict[str, ModuleType] = {}
    for info in pkgutil.iter_modules(__path__):
        if info.name.startswith("_"):
            continue
        try:
            module = importlib.import_module(f"{__name__}.{info.name}")
        except Exception as error:  # one broken scenario must not break the whole CLI
            logging.getLogger("harness").warning("scenario %s not loaded: %r", info.name, error)
            continue
        if hasattr(module, "main") and hasattr(module, "add_arguments"):
            found[getattr(module, "NAME", info.name)] = module
    return found
