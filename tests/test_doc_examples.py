"""The pages' Python examples cannot go stale: every ```python block of README.md, the
library's page (packages/blobsingleton/README.md, its docs/) and docs/ runs here, or, marked as
a fragment, is compiled and type-checked.

How a page's blocks are checked (the conventions page authors follow):

- A ```python block runs. A page's blocks run in order in one fresh module, so a block may use
  what an earlier block of its page defined, inside `blobsingleton.testing.memory_backends()`
  (no Azurite, no storage setting: `AzureWebJobsStorage` is unset), from the repository root
  (the app's `shared` and `functions` import). Each `test_*` function a block defines is then
  called, as pytest would (given `monkeypatch` or `tmp_path` if it names them).
- `<!-- fragment -->` on the line right before the fence: the block is compiled and
  type-checked, never run (it needs Azure, or is an excerpt).
- `<!-- setup: CODE -->` (on one line, or `<!-- setup:` then lines of code then `-->`), anywhere
  between the previous block and this one: hidden code run (a fragment's too) and
  type-checked before the block, for what the page leaves out (a stub
  `def charge(order: dict) -> Receipt: ...`, a setting).
- Every block, run or fragment, with its setups, is type-checked by mypy (not strict; an
  empty `...` body and a name defined again by a later block are allowed), each page as one
  module whose line numbers are the page's, so an error names the page's line.

Static and in memory: no service, so `make test-fast` runs it.
"""

from __future__ import annotations

import asyncio
import inspect
import re
import sys
import textwrap
import types
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from blobsingleton.testing import memory_backends
from mypy import api

ROOT = Path(__file__).resolve().parent.parent

_FENCE = re.compile(r"^( *)(`{3,}|~{3,})\s*(\S*)")  # indented too: a block in a list
_FRAGMENT = "<!-- fragment -->"
_SETUP = "<!-- setup:"
_END = "-->"


def pages(root: Path = ROOT) -> list[Path]:
    """The pages whose examples are checked."""
    found = [root / "README.md", root / "packages/blobsingleton/README.md"]
    found += sorted((root / "docs").rglob("*.md"))
    found += sorted((root / "packages/blobsingleton/docs").rglob("*.md"))
    return [page for page in found if page.is_file()]


@dataclass
class Snippet:
    """Code at a page's line (1-based, of its first line)."""

    line: int
    code: str

    def placed(self) -> str:
        """The code preceded by blank lines, so it compiles at the page's line numbers."""
        return "\n" * (self.line - 1) + self.code


@dataclass
class Block:
    """One ```python block of a page: its code, whether it is a fragment, its setups."""

    page: Path
    code: Snippet
    fragment: bool
    setups: list[Snippet] = field(default_factory=list)


def blocks(page: Path) -> list[Block]:
    """The ```python blocks of `page`, in order, with their fragment marks and setups."""
    lines = page.read_text().splitlines()
    found: list[Block] = []
    setups: list[Snippet] = []
    number = 0
    while number < len(lines):
        line = lines[number]
        if line.strip().startswith(_SETUP):
            setup, number = _setup(lines, number)
            setups.append(setup)
            continue
        fence = _FENCE.match(line)
        if fence is None:
            number += 1
            continue
        indent, marker, info = fence.groups()
        end = number + 1
        while end < len(lines) and not _closes(lines[end], marker):
            end += 1
        if info.lower() == "python":
            body = [text[len(indent) :] if text.startswith(indent) else text for text in lines]
            code = "\n".join(body[number + 1 : end]) + "\n"
            fragment = number > 0 and lines[number - 1].strip() == _FRAGMENT
            found.append(Block(page, Snippet(number + 2, code), fragment, setups))
            setups = []
        number = end + 1
    return found


def _closes(line: str, marker: str) -> bool:
    stripped = line.strip()
    return stripped == marker[0] * len(stripped) and len(stripped) >= len(marker)


def _setup(lines: list[str], number: int) -> tuple[Snippet, int]:
    """The setup comment starting at `lines[number]`, and the line after it."""
    first = lines[number].strip()[len(_SETUP) :]
    if _END in first:
        return Snippet(number + 1, first.split(_END)[0].strip() + "\n"), number + 1
    code: list[str] = [first.strip()] if first.strip() else []
    start = number + 1 if code else number + 2
    end = number + 1
    while end < len(lines) and _END not in lines[end]:
        code.append(lines[end])
        end += 1
    if end < len(lines) and lines[end].split(_END)[0].strip():
        code.append(lines[end].split(_END)[0])
    return Snippet(start, textwrap.dedent("\n".join(code)) + "\n"), end + 1


def module_text(page: Path, found: list[Block]) -> str:
    """The page's setups and blocks as one module, each at its own line of the page."""
    out = [""] * len(page.read_text().splitlines())
    for block in found:
        for snippet in [*block.setups, block.code]:
            for offset, text in enumerate(snippet.code.splitlines()):
                out[snippet.line - 1 + offset] = text
    return "\n".join(out) + "\n"


def _module_name(page: Path, root: Path) -> str:
    relative = page.resolve().relative_to(root.resolve())
    return "doc_" + re.sub(r"\W", "_", str(relative.with_suffix("")))


@dataclass
class Fixtures:
    """What a page's `test_*` functions may ask for by name."""

    monkeypatch: pytest.MonkeyPatch
    tmp_path: Path


def run_page(page: Path, fixtures: Fixtures, root: Path = ROOT) -> list[str]:
    """Run `page`'s blocks (fragments compiled only) in order in one module; returns the
    `test_*` functions called. Raises what a block raises, its traceback at the page's lines."""
    name = _module_name(page, root)
    module = types.ModuleType(name)
    module.__file__ = str(page)
    sys.modules[name] = module
    called: list[str] = []
    try:
        with memory_backends():
            for block in blocks(page):
                before = set(vars(module))
                for snippet in block.setups:
                    exec(compile(snippet.placed(), str(page), "exec"), vars(module))
                code = compile(block.code.placed(), str(page), "exec")
                if not block.fragment:
                    exec(code, vars(module))
                for test_name in sorted(set(vars(module)) - before):
                    if _call_test(module, test_name, fixtures):
                        called.append(test_name)
    finally:
        del sys.modules[name]
    return called


def _call_test(module: types.ModuleType, test_name: str, fixtures: Fixtures) -> bool:
    test = getattr(module, test_name)
    if not test_name.startswith("test") or not inspect.isfunction(test):
        return False
    if test.__module__ != module.__name__:
        return False  # imported, not defined on the page
    arguments = {}
    for parameter in inspect.signature(test).parameters:
        if not hasattr(fixtures, parameter):
            raise TypeError(f"{test_name} asks for {parameter!r}: only monkeypatch, tmp_path")
        arguments[parameter] = getattr(fixtures, parameter)
    outcome = test(**arguments)
    if inspect.iscoroutine(outcome):
        asyncio.run(outcome)
    return True


def type_errors(checked: list[Path], workdir: Path, root: Path = ROOT) -> list[str]:
    """mypy on each page's blocks as one module: its errors, as `page:line: error: ...` (the
    page relative to `root`, else its name). Incremental, in mypy's cache under `root`."""
    config = workdir / "mypy.ini"
    config.write_text(
        "[mypy]\npython_version = 3.11\ncheck_untyped_defs = True\nallow_redefinition = True\n"
        f"follow_imports = silent\nmypy_path = {root}\nwarn_unused_ignores = True\n"
        "disable_error_code = no-redef, empty-body\n"
    )
    files: dict[str, Path] = {}
    for page in checked:
        module = workdir / f"{_module_name(page, page.parent)}_{len(files)}.py"
        module.write_text(module_text(page, blocks(page)))
        files[module.name] = page
    cache = ROOT / ".mypy_cache" / "doc-examples"
    report, errors, _ = api.run(
        ["--config-file", str(config), "--cache-dir", str(cache), "--show-error-codes",
         "--no-error-summary", *(str(workdir / name) for name in files)]
    )  # fmt: skip
    problems = []
    for line in (report + errors).splitlines():
        path, _, rest = line.partition(":")
        if Path(path).name in files:  # (an error kept in the cache names an earlier run's path)
            page = files[Path(path).name]
            named = page.relative_to(root) if page.is_relative_to(root) else page.name
            if ": error:" in line:
                problems.append(f"{named}:{rest}")
        elif line.strip():
            problems.append(line)  # mypy's own trouble (a bad option, a crash)
    return problems


def _pages_with_examples() -> Iterator[Path]:
    for page in pages():
        if blocks(page):
            yield page


EXAMPLE_PAGES = list(_pages_with_examples())


@pytest.fixture
def fixtures(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Fixtures:
    for setting in ("AzureWebJobsStorage", "AzureWebJobsStorage__accountName"):
        monkeypatch.delenv(setting, raising=False)
    monkeypatch.chdir(ROOT)
    return Fixtures(monkeypatch, tmp_path)


@pytest.mark.parametrize(
    "page", EXAMPLE_PAGES, ids=[str(p.relative_to(ROOT)) for p in EXAMPLE_PAGES]
)
def test_every_example_of_the_page_runs(page: Path, fixtures: Fixtures) -> None:
    run_page(page, fixtures)


@pytest.fixture(scope="module")
def type_report(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    """One mypy run over every page with examples, and the stale sample page below."""
    work = tmp_path_factory.mktemp("doc-examples")
    sample = work / "stale-page.md"
    sample.write_text(STALE)
    return type_errors([*EXAMPLE_PAGES, sample], work)


def test_every_example_type_checks(type_report: list[str]) -> None:
    assert {ROOT / "README.md", ROOT / "packages/blobsingleton/README.md"} <= set(EXAMPLE_PAGES)
    assert [line for line in type_report if not line.startswith("stale-page.md:")] == []


STALE = """# A page

Text.

<!-- setup:
import os
QUEUE = os.environ.get("Q", "q")
-->

```python
from blobsingleton import Busy, once

@once("email-{event_id}", busy=Busy.SKIP)
def send(event_id: str) -> str:
    return event_id
```

<!-- setup: calls: list[str] = [] -->
<!-- fragment -->
```python
send("e1").upper()  # a SKIP result used as if always there
```

```python
def test_it_sends() -> None:
    calls.append(send("e2") or "")
```

```python
from blobsingleton import once

@once("email-{event_id}", storage=FingerprintStore())
def deliver(event_id: str) -> None: ...
```
"""


def test_the_checker_runs_blocks_in_order_and_finds_a_stale_one_at_its_line(
    tmp_path: Path, fixtures: Fixtures
) -> None:
    page = tmp_path / "page.md"
    page.write_text(STALE)
    found = blocks(page)
    assert [(b.code.line, b.fragment, [s.line for s in b.setups]) for b in found] == [
        (11, False, [6]), (21, True, [18]), (25, False, []), (30, False, []),
    ]  # fmt: skip
    assert found[0].setups[0].code == 'import os\nQUEUE = os.environ.get("Q", "q")\n'
    assert found[1].setups[0].code == "calls: list[str] = []\n"
    with pytest.raises(NameError, match="FingerprintStore") as raised:
        run_page(page, fixtures, root=tmp_path)
    assert raised.traceback[-1].lineno + 1 == 32  # the page's line (0-based in pytest)
    nested = tmp_path / "nested.md"
    nested.write_text("- in a list:\n\n  ```python\n  x = 1\n  ```\n")
    assert [(b.code.line, b.code.code) for b in blocks(nested)] == [(4, "x = 1\n")]
    # Fragments compile without running; the earlier blocks ran, their test called:
    page.write_text(STALE.split("```python\nfrom blobsingleton import once")[0])
    assert run_page(page, fixtures, root=tmp_path) == ["test_it_sends"]


def test_the_checker_type_checks_fragments_at_the_pages_lines(type_report: list[str]) -> None:
    problems = [line for line in type_report if line.startswith("stale-page.md:")]
    assert len(problems) == 2, type_report
    assert problems[0].startswith('stale-page.md:21: error: Item "None" of "str | None"')
    assert problems[1].startswith('stale-page.md:32: error: Name "FingerprintStore" is not')
