"""The load, demo, chaos and fault harness around devhost: scenarios, faults, services."""
