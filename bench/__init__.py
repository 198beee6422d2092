"""Benchmark commands: each prints one JSON object (`python -m bench NAME --json`).

`SHARED` (public, for the tests): the setting that points every benchmark at an Azurite that
is already running instead of starting its own.
"""

from bench._storage import SHARED

__all__ = ["SHARED"]
