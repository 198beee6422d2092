"""The pages' Python examples cannot go stale: every ```python block of README.md, the
library's page (packages/blobsingleton/README.md, its docs/) and docs/ runs here, or, marked as
a fragment, is compiled and type-checked; each as a reader copies it, alone, and in page order.

How a page's blocks are checked (the conventions page authors follow):

- A ```python block runs twice: alone, in a fresh module, as a reader who copies only it would
  run it; and in page order, the page's blocks one after another in one fresh module. Both
  inside `blobsingleton.testing.memory_backends()` (no Azurite, no storage setting:
  `AzureWebJobsStorage` is unset), from the repository root (the app's `shared` and
  `functions` import). Each `test_*` function a block defines is then called, as pytest would
  (given `monkeypatch` or `tmp_path` if it names them).
- `<!-- fragment -->` on the line right before the fence: the block is compiled and
  type-checked (alone too), never run (it needs Azure, or is an excerpt).
- A file a block imports is on the page, collapsed: a ```python block inside
  `<details><summary><code>orders.py</code>...</summary>` ... `</details>` is the module
  `orders`, importable by the blocks after it (alone too: a reader saves the file beside).
- Nothing a block needs is hidden: a page holding a `<!-- setup:` comment (hidden code, not
  shown on GitHub) fails the suite.
- Every block is type-checked by mypy (not strict; an empty `...` body and a name defined again
  by a later block are allowed), each page as one module and each block alone as another,
  at the page's line numbers, so an error names the page's line.

Static and in memory: no service, so `make test-fast` runs it.
"""

from __future__ import annotations

import asyncio
import inspect
import re
import sys
import types
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from blobsingleton.testing import memory_backends
from mypy import api

ROOT = Path(__file__).resolve().parent.parent

_FENCE = re.compile(r"^( *)(`{3,}|~{3,})\s*(\S*)")  # indented too: a block in a list
_FRAGMENT = "<!-- fragment -->"
_HIDDEN = "<!-- setup:"
_DETAILS = re.compile(r"<details>.*?<code>([A-Za-z_][A-Za-z0-9_]*)\.py</code>")
_DETAILS_END = "</details>"


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
    """One ```python block of a page: its code, whether it is a fragment, and the module it is
    when it is a file shown in `<details>` (None: an example)."""

    page: Path
    code: Snippet
    fragment: bool
    module: str | None = None


def blocks(page: Path) -> list[Block]:
    """The ```python blocks of `page`, in order, with their fragment marks and modules."""
    lines = page.read_text().splitlines()
    found: list[Block] = []
    module: str | None = None
    number = 0
    while number < len(lines):
        line = lines[number]
        details = _DETAILS.search(line)
        if details is not None:
            module = details.group(1)
        elif _DETAILS_END in line:
            module = None
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
            found.append(Block(page, Snippet(number + 2, code), fragment, module))
        number = end + 1
    return found


def _closes(line: str, marker: str) -> bool:
    stripped = line.strip()
    return stripped == marker[0] * len(stripped) and len(stripped) >= len(marker)


def hidden_code(page: Path) -> list[int]:
    """The lines of `page` that open a hidden `<!-- setup:` comment."""
    lines = page.read_text().splitlines()
    return [n for n, line in enumerate(lines, 1) if line.strip().startswith(_HIDDEN)]


def module_text(page: Path, found: list[Block]) -> str:
    """`found` blocks as one module, each at its own line of the page."""
    out = [""] * len(page.read_text().splitlines())
    for block in found:
        for offset, text in enumerate(block.code.code.splitlines()):
            out[block.code.line - 1 + offset] = text
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
    return _run(page, blocks(page), _module_name(page, root), fixtures)


def run_alone(block: Block, fixtures: Fixtures, root: Path = ROOT) -> list[str]:
    """Run `block` as a reader who copies only it (and saves the page's files before it) would:
    in a fresh module; returns the `test_*` functions called."""
    found = blocks(block.page)
    files = [b for b in found[: found.index(block)] if b.module is not None]
    name = f"{_module_name(block.page, root)}_{block.code.line}"
    return _run(block.page, [*files, block], name, fixtures)


def _run(page: Path, found: list[Block], name: str, fixtures: Fixtures) -> list[str]:
    module = types.ModuleType(name)
    module.__file__ = str(page)
    registered = [name]
    sys.modules[name] = module
    called: list[str] = []
    try:
        with memory_backends():
            for block in found:
                code = compile(block.code.placed(), str(page), "exec")
                if block.module is not None:  # a file of the page: a module of its own
                    file_module = types.ModuleType(block.module)
                    file_module.__file__ = str(page)
                    sys.modules[block.module] = file_module
                    registered.append(block.module)
                    if not block.fragment:
                        exec(code, vars(file_module))
                    continue
                before = set(vars(module))
                if not block.fragment:
                    exec(code, vars(module))
                for test_name in sorted(set(vars(module)) - before):
                    if _call_test(module, test_name, fixtures):
                        called.append(test_name)
    finally:
        for registered_name in registered:
            sys.modules.pop(registered_name, None)
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


def type_errors(
    checked: list[Path], workdir: Path, root: Path = ROOT, alone: frozenset[Path] = frozenset()
) -> list[str]:
    """mypy on each page's blocks as one module (and, for the pages in `alone`, each block as
    a module of its own too), a page's files (`<details>`) as their modules: the errors, as
    `page:line: error: ...` (the page relative to `root`, else its name). Incremental, in
    mypy's cache under `root`."""
    config = workdir / "mypy.ini"
    config.write_text(
        "[mypy]\npython_version = 3.11\ncheck_untyped_defs = True\nallow_redefinition = True\n"
        f"follow_imports = silent\nmypy_path = {root}\nwarn_unused_ignores = True\n"
        "disable_error_code = no-redef, empty-body\n"
    )
    files: dict[str, Path] = {}

    def write(name: str, page: Path, found: list[Block]) -> None:
        (workdir / name).write_text(module_text(page, found))
        files[name] = page

    for page in checked:
        found = blocks(page)
        examples = [block for block in found if block.module is None]
        stem = f"{_module_name(page, page.parent)}_{len(files)}"
        write(f"{stem}.py", page, examples)
        for block in found:
            if block.module is not None:
                write(f"{block.module}.py", page, [block])
            elif page in alone:
                write(f"{stem}_alone_{block.code.line}.py", page, [block])
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


EXAMPLES = [block for page in EXAMPLE_PAGES for block in blocks(page) if block.module is None]


@pytest.mark.parametrize(
    "block", EXAMPLES, ids=[f"{b.page.relative_to(ROOT)}:{b.code.line}" for b in EXAMPLES]
)
def test_every_example_runs_alone_as_copied(block: Block, fixtures: Fixtures) -> None:
    run_alone(block, fixtures)


@pytest.mark.parametrize("page", pages(), ids=[str(p.relative_to(ROOT)) for p in pages()])
def test_no_page_hides_code_its_examples_need(page: Path) -> None:
    assert hidden_code(page) == [], f"{page}: a hidden <!-- setup: --> comment (use <details>)"


@pytest.fixture(scope="module")
def type_report(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    """One mypy run over every page with examples, and the stale sample page below."""
    work = tmp_path_factory.mktemp("doc-examples")
    sample = work / "stale-page.md"
    sample.write_text(STALE)
    return type_errors([*EXAMPLE_PAGES, sample], work, alone=frozenset([*EXAMPLE_PAGES, sample]))


def test_every_example_type_checks(type_report: list[str]) -> None:
    assert {ROOT / "README.md", ROOT / "packages/blobsingleton/README.md"} <= set(EXAMPLE_PAGES)
    assert [line for line in type_report if not line.startswith("stale-page.md:")] == []


STALE = """# A page

Text.

<details><summary><code>mailer.py</code>, what the examples import</summary>

```python
import os

QUEUE = os.environ.get("Q", "q")
```

</details>

```python
from blobsingleton import Busy, once
from mailer import QUEUE

@once("email-{event_id}", busy=Busy.SKIP)
def send(event_id: str) -> str:
    return event_id + QUEUE
```

<!-- fragment -->
```python
send("e1").upper()  # a SKIP result used as if always there
```

```python
calls: list[str] = []

def test_it_sends() -> None:
    calls.append(send("e2") or "")
```

```python
from blobsingleton import once

@once("email-{event_id}", storage=FingerprintStore())
def deliver(event_id: str) -> None: ...
```
"""


def test_the_checker_runs_blocks_alone_and_in_order_and_finds_a_stale_one_at_its_line(
    tmp_path: Path, fixtures: Fixtures
) -> None:
    page = tmp_path / "page.md"
    page.write_text(STALE)
    found = blocks(page)
    assert [(b.code.line, b.fragment, b.module) for b in found] == [
        (8, False, "mailer"), (16, False, None), (26, True, None), (30, False, None),
        (37, False, None),
    ]  # fmt: skip
    assert found[0].code.code == 'import os\n\nQUEUE = os.environ.get("Q", "q")\n'
    with pytest.raises(NameError, match="FingerprintStore") as raised:
        run_page(page, fixtures, root=tmp_path)
    assert raised.traceback[-1].lineno + 1 == 39  # the page's line (0-based in pytest)
    assert run_alone(found[1], fixtures, root=tmp_path) == []  # its file saved beside: runs
    with pytest.raises(NameError, match="send"):
        run_alone(found[3], fixtures, root=tmp_path)  # continues an earlier block: not alone
    nested = tmp_path / "nested.md"
    nested.write_text("- in a list:\n\n  ```python\n  x = 1\n  ```\n")
    assert [(b.code.line, b.code.code) for b in blocks(nested)] == [(4, "x = 1\n")]
    # Fragments compile without running; the earlier blocks ran, their test called:
    page.write_text(STALE.split("```python\nfrom blobsingleton import once")[0])
    assert run_page(page, fixtures, root=tmp_path) == ["test_it_sends"]
    page.write_text("Text.\n\n<!-- setup: x = 1 -->\n```python\nprint(x)\n```\n")
    assert hidden_code(page) == [3]


def test_the_checker_type_checks_fragments_and_blocks_alone_at_the_pages_lines(
    type_report: list[str],
) -> None:
    problems = sorted(line for line in type_report if line.startswith("stale-page.md:"))
    assert len(problems) == 5, type_report
    assert problems[0].startswith('stale-page.md:26: error: Item "None" of "str | None"')
    assert problems[1].startswith('stale-page.md:26: error: Name "send" is not defined')  # alone
    assert problems[2].startswith('stale-page.md:33: error: Name "send" is not defined')  # alone
    assert problems[3] == problems[4]  # in page order and alone
    assert problems[3].startswith('stale-page.md:39: error: Name "FingerprintStore" is not')
