"""The 834 reader's modules (`shared/imports/x12/`, docs/imports.md) are layered: each imports
only the modules before it in `LAYERS`, none imports the acknowledgments or the importer
(they build on the reader, not the reader on them), and only `_pyx12` and `speedups` name
the pyx12 internals the reader replaces. Static: read from the source."""

from __future__ import annotations

import ast
from pathlib import Path

import shared.imports.x12

PACKAGE = Path(shared.imports.x12.__file__).parent
LAYERS = ["_pyx12", "errors", "speedups", "stream", "members", "families", "reader"]
ABOVE_THE_READER = {"shared.imports.acks", "shared.imports.importer"}


def imported(module: str) -> set[str]:
    tree = ast.parse((PACKAGE / f"{module}.py").read_text())
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


def test_every_module_of_the_package_is_in_a_layer() -> None:
    found = {p.stem for p in PACKAGE.glob("*.py")} - {"__init__"}
    assert found == set(LAYERS)


def test_each_module_imports_only_the_layers_before_it() -> None:
    for index, module in enumerate(LAYERS):
        names = imported(module)
        ours = {n.removeprefix("shared.imports.x12.").split(".")[0] for n in names
                if n.startswith("shared.imports.x12.")}  # fmt: skip
        assert ours <= set(LAYERS[:index]), (module, ours - set(LAYERS[:index]))
        assert not names & ABOVE_THE_READER, (module, names & ABOVE_THE_READER)


def test_only_the_internals_module_and_the_speedups_touch_pyx12s_insides() -> None:
    private = ("_parse_refdes", "map_if._segment", ".seg_count", ".gs_ids", ".raw", "NodeCounter")
    for module in LAYERS:
        text = (PACKAGE / f"{module}.py").read_text()
        named = [word for word in private if word in text]
        assert module in ("_pyx12", "speedups") or not named, (module, named)
