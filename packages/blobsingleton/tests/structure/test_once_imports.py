"""The `@once` path's modules sit on no import circle, counting imports under `if
TYPE_CHECKING:` too (issue 47: `_once` <-> `_once_handler`/`_batch` through `Results` was one,
exempted because a type checker alone ran it)."""

from __future__ import annotations

import ast
from collections.abc import Iterator

import pytest
import test_import_graph as graph_test

ONCE_PATH = (
    "_once", "_once_handler", "_batch", "_busy", "_records", "_blob_records", "_record_watch",
    "_speed", "_results", "results", "records", "batches",
)  # fmt: skip


def _every_import(tree: ast.AST) -> Iterator[ast.Import | ast.ImportFrom]:
    return (node for node in ast.walk(tree) if isinstance(node, ast.Import | ast.ImportFrom))


@pytest.mark.parametrize("module", ONCE_PATH)
def test_no_circle_reaches_back_to_the_module(module: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(graph_test, "_runs", _every_import)
    graph = graph_test.import_graph(graph_test.SOURCE)
    start = f"blobsingleton.{module}"
    seen, stack = set(), list(graph[start])
    while stack:
        reached = stack.pop()
        if reached not in seen:
            seen.add(reached)
            stack.extend(graph[reached])
    assert start not in seen, f"{start} imports something that imports it back"
