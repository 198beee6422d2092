"""Function apps and handlers the harness runs on devhost (demo, batch, handoff)."""
