"""Benchmark commands: each prints one JSON object (`python -m bench NAME --json`)."""
