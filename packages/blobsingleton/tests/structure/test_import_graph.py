"""The library's modules import each other without a circle (issue 40, item 5; issue 47).

The graph is read from the source with `ast`: every import of a library module counts, at
module level, deferred into a function, or under `if TYPE_CHECKING:` (an import that only
dodges a circle, by deferring it or by leaving it to the type checker, is still a circle: the
two modules still need each other to be understood). A package's own `__init__` running before
its submodules is not an edge: it is how every package loads, and `from blobsingleton import
_keys` needs nothing of `__init__` but the submodule.
"""

from __future__ import annotations

import ast
import textwrap
from collections.abc import Iterator
from pathlib import Path

import blobsingleton
import pytest

SOURCE = Path(blobsingleton.__file__).resolve().parent


def module_names(root: Path) -> dict[str, Path]:
    """Every module under the package folder `root`, by dotted name."""
    found = {}
    for path in root.rglob("*.py"):
        parts = [root.name, *path.relative_to(root).with_suffix("").parts]
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def _imports(tree: ast.AST) -> Iterator[ast.Import | ast.ImportFrom]:
    """Every import statement of `tree`, `if TYPE_CHECKING:` ones included."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import | ast.ImportFrom):
            yield node


def import_graph(root: Path) -> dict[str, set[str]]:
    """Module -> the package's modules it imports (`root`: the package folder)."""
    modules = module_names(root)
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in _imports(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            else:
                base = node.module or ""
                if node.level:
                    anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join([*anchor, base] if base else anchor)
                targets = [
                    f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base
                    for alias in node.names
                ]
            for target in targets:
                while target and target not in modules:  # `import a.b.c` of a name in a.b
                    target = target.rpartition(".")[0]
                if target and target != name:
                    graph[name].add(target)
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import circle of `graph` as a path (first == last), or None."""
    done: set[str] = set()
    path: list[str] = []
    on_path: set[str] = set()

    def visit(module: str) -> list[str] | None:
        path.append(module)
        on_path.add(module)
        for target in sorted(graph[module]):
            if target in on_path:
                return [*path[path.index(target) :], target]
            if target not in done:
                found = visit(target)
                if found:
                    return found
        on_path.discard(path.pop())
        done.add(module)
        return None

    for module in sorted(graph):
        if module not in done:
            found = visit(module)
            if found:
                return found
    return None


def test_the_library_has_no_import_circle() -> None:
    graph = import_graph(SOURCE)
    assert len(graph) > 30 and graph["blobsingleton._singleton"]  # the source was read
    cycle = find_cycle(graph)
    assert cycle is None, "import circle: " + " -> ".join(cycle or [])


def reached(graph: dict[str, set[str]], start: set[str]) -> set[str]:
    """Every module the modules `start` import, directly or through others."""
    reach: set[str] = set()
    todo = list(start)
    while todo:
        for target in graph[todo.pop()] - reach:
            reach.add(target)
            todo.append(target)
    return reach


def lib(*names: str) -> set[str]:
    return {f"blobsingleton.{name}" for name in names}


def test_the_backends_are_below_the_decorators_that_build_them() -> None:
    """Blob Storage's lease, semaphore and fair line are built in `_singleton`, its record store
    in `_once`, DEFER's queue send in `_busy`; nothing those backends import reaches back to a
    decorator (the circle a registry module once had)."""
    graph = import_graph(SOURCE)
    assert lib("_blob_lease", "_line", "_semaphore") <= graph["blobsingleton._singleton"]
    assert lib("_blob_records") <= graph["blobsingleton._once"]
    assert lib("_queues") <= graph["blobsingleton._busy"]
    backends = lib("_blob_lease", "_line", "_semaphore", "_blob_records", "_queues", "_keys")
    assert not reached(graph, backends) & lib("_singleton", "_once", "_busy")


def test_the_connection_imports_no_backend() -> None:
    """`_connection` (settings, account, containers, storage errors) sits below every backend:
    the backends import it, it imports none of them (the test backends' slot, which names
    leases and record stores, is `_backends`, above them)."""
    graph = import_graph(SOURCE)
    below = reached(graph, lib("_connection"))
    assert below <= lib("_telemetry", "_azure_sdk", "_storage_errors", "errors")
    assert lib("_connection") <= graph["blobsingleton._blob_lease"]


def write_package(root: Path, files: dict[str, str]) -> Path:
    package = root / "pkg"
    for name, text in files.items():
        path = package / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text), encoding="utf-8")
    return package


@pytest.mark.parametrize(
    "low",
    [
        "from pkg import high\n",
        "from pkg.high import build\n",
        "from . import high\n",
        "import pkg.high\n",
        "def now():\n    from pkg import high  # (it imports this module)\n    return high\n",
        "if True:\n    class Hook:\n        from pkg.high import build\n",
    ],
    ids=["module", "name", "relative", "dotted", "deferred", "nested"],
)
def test_a_circle_is_found_however_it_is_imported(tmp_path: Path, low: str) -> None:
    package = write_package(
        tmp_path,
        {"__init__.py": "", "low.py": low, "high.py": "from pkg import low\ndef build(): ...\n"},
    )
    assert find_cycle(import_graph(package)) in (
        ["pkg.high", "pkg.low", "pkg.high"],
        ["pkg.low", "pkg.high", "pkg.low"],
    )


def test_imports_only_a_type_checker_runs_are_a_circle_too(tmp_path: Path) -> None:
    package = write_package(
        tmp_path,
        {
            "__init__.py": "from pkg.high import build\n",
            "low.py": """\
                from typing import TYPE_CHECKING
                if TYPE_CHECKING:
                    from pkg.high import build
                else:
                    import json
                """,
            "high.py": "from pkg import low\ndef build(): ...\n",
        },
    )
    graph = import_graph(package)
    assert graph == {"pkg": {"pkg.high"}, "pkg.low": {"pkg.high"}, "pkg.high": {"pkg.low"}}
    assert find_cycle(graph) == ["pkg.high", "pkg.low", "pkg.high"]


def test_a_submodule_importing_a_name_of_its_package_root_is_a_circle(tmp_path: Path) -> None:
    package = write_package(
        tmp_path,
        {"__init__.py": "from pkg.low import Thing\nVERSION = 1\n",
         "low.py": "from pkg import VERSION\nclass Thing: ...\n"},
    )  # fmt: skip
    assert find_cycle(import_graph(package)) == ["pkg", "pkg.low", "pkg"]
