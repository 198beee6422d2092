"""The documentation's links resolve, and the README stays a landing page.

Every relative link and image in the README, the changelog, `docs/` and the library's page names
a file or folder of the repository, and an `#anchor` names a heading of its Markdown target as
GitHub makes anchors (or an HTML `id`/`name`). Links inside code are not links. Static: no
service, so `make test-fast` runs it.
"""

from __future__ import annotations

import re
import unicodedata
import urllib.parse
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
README_MAX_LINES = 250


def documentation(root: Path = ROOT) -> list[Path]:
    """The pages whose links are checked."""
    pages = [root / "README.md", root / "CHANGELOG.md", root / "packages/blobsingleton/README.md"]
    return [*pages, *sorted((root / "docs").rglob("*.md"))]


_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
_CODE_SPAN = re.compile(r"(`+)(.+?)\1", re.S)
_INLINE_LINK = re.compile(  # [text](target "title") and ![alt](target)
    r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]" r"\(\s*<?([^)\s>]*)>?(?:\s+\"[^\"]*\")?\s*\)"
)
_REFERENCE = re.compile(r"^ {0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s|$)", re.M)
_HTML_TARGET = re.compile(r"\b(?:src|href)\s*=\s*\"([^\"]*)\"")
_HTML_ANCHOR = re.compile(r"\b(?:id|name)\s*=\s*\"([^\"]+)\"")
_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:|^//")
_ATX = re.compile(r"^ {0,3}(#{1,6})(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*$")
_SETEXT = re.compile(r"^ {0,3}(=+|-+)[ \t]*$")
_LINE_ANCHOR = re.compile(r"^L\d+(?:-L\d+)?$")


def _prose_lines(text: str) -> list[str]:
    """The lines outside fenced code blocks (fenced lines become empty)."""
    lines, fence = [], ""
    for line in text.splitlines():
        match = _FENCE.match(line)
        if fence:
            if match and match.group(1)[0] == fence[0] and len(match.group(1)) >= len(fence):
                fence = ""
            lines.append("")
        elif match:
            fence = match.group(1)
            lines.append("")
        else:
            lines.append(line)
    return lines


def slug(heading: str) -> str:
    """GitHub's anchor for a heading's Markdown text (github-slugger on the rendered text):
    lower case, every character but letters, digits, marks, `_`, `-` and spaces dropped, each
    space a hyphen."""
    codes: list[str] = []

    def keep_code(match: re.Match[str]) -> str:
        codes.append(match.group(2).strip())
        return f"\x00{len(codes) - 1}\x00"

    text = _CODE_SPAN.sub(keep_code, heading)
    text = re.sub(r"!?\[((?:[^\[\]]|\[[^\]]*\])*)\]\([^)]*\)", r"\1", text)  # links: their text
    text = re.sub(r"<[^>]+>", "", text)  # inline HTML
    text = re.sub(r"\*+|(?<![0-9A-Za-z])_+|_+(?![0-9A-Za-z])", "", text)  # emphasis
    text = re.sub(r"\x00(\d+)\x00", lambda m: codes[int(m.group(1))], text).strip().lower()
    kept = (c for c in text if c in "-_ " or unicodedata.category(c)[0] in "LNM")
    return "".join(kept).replace(" ", "-")


def anchors(text: str) -> set[str]:
    """Every anchor a Markdown page has on GitHub: its headings' slugs (repeats get -1, -2,
    ...) and the `id`/`name` of its HTML elements."""
    found: set[str] = set(_HTML_ANCHOR.findall(text))
    seen: dict[str, int] = {}
    lines = _prose_lines(text)
    for number, line in enumerate(lines):
        heading = None
        atx = _ATX.match(line)
        if atx:
            heading = atx.group(2) or ""
        elif (
            _SETEXT.match(line)
            and number
            and lines[number - 1].strip()
            and not lines[number - 1].lstrip().startswith(("|", "-", "*", "#", ">"))
        ):
            heading = lines[number - 1].strip()
        if heading is None:
            continue
        base = slug(heading)
        count = seen.get(base, 0)
        seen[base] = count + 1
        found.add(base if count == 0 else f"{base}-{count}")
    return found


def links(text: str) -> list[str]:
    """The link and image targets of a page, outside code."""
    prose = _CODE_SPAN.sub("", "\n".join(_prose_lines(text)))
    return [
        *_INLINE_LINK.findall(prose),
        *_REFERENCE.findall(prose),
        *_HTML_TARGET.findall(prose),
    ]


def broken_links(page: Path, root: Path = ROOT) -> list[str]:
    """Each relative link of `page` that names no file, or an anchor its target lacks."""
    problems = []
    text = page.read_text()
    for target in links(text):
        if _SCHEME.match(target):
            continue  # another site: not checked here
        path, _, fragment = target.partition("#")
        path = urllib.parse.unquote(path)
        if not path:
            resolved = page
        elif path.startswith("/"):
            resolved = (root / path.lstrip("/")).resolve()
        else:
            resolved = (page.parent / path).resolve()
        where = f"{page.relative_to(root)}: {target}"
        if not resolved.is_relative_to(root.resolve()) or not resolved.exists():
            problems.append(f"{where}: no such file")
        elif fragment:
            fragment = urllib.parse.unquote(fragment)
            if resolved.suffix == ".md":
                if fragment not in anchors(resolved.read_text()):
                    problems.append(f"{where}: no heading makes #{fragment}")
            elif not (resolved.is_file() and _LINE_ANCHOR.match(fragment)):
                problems.append(f"{where}: #{fragment} in a file that is not Markdown")
    return problems


def test_github_anchors_are_made_as_github_makes_them() -> None:
    assert slug("What is guaranteed, and what is not") == "what-is-guaranteed-and-what-is-not"
    assert slug("`@once`: run a key's work once") == "once-run-a-keys-work-once"
    assert slug("storm_8x1000") == "storm_8x1000"
    assert slug("`make demo`: 4 instances, 200 events") == "make-demo-4-instances-200-events"
    assert slug("A -- B **bold** _it_ [link](x.md)") == "a----b-bold-it-link"
    assert slug("Übersicht (ä)") == "übersicht-ä"
    page = "# Title\n\n## Same\n\ntext\n\n## Same\n\nSetext\n---\n\n```\n# not a heading\n```\n"
    assert anchors(page) == {"title", "same", "same-1", "setext"}


def test_the_checker_finds_a_missing_file_and_a_missing_anchor(tmp_path: Path) -> None:
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "a.md").write_text("# A page\n\n## Its part\n")
    page = tmp_path / "README.md"
    page.write_text(
        "[ok](docs/a.md) [part](docs/a.md#its-part) [self](#top) [web](https://example.com)\n"
        "[gone](docs/b.md) [wrong](docs/a.md#no-such-part) ![img](docs/missing.png)\n"
        "[up](../outside.md) `[code](not/checked.md)`\n\n```\n[fenced](not/checked.md)\n```\n"
        '<img src="docs/also-missing.png">\n\n# Top\n'
    )
    problems = broken_links(page, tmp_path)
    assert problems == [
        "README.md: docs/b.md: no such file",
        "README.md: docs/a.md#no-such-part: no heading makes #no-such-part",
        "README.md: docs/missing.png: no such file",
        "README.md: ../outside.md: no such file",
        "README.md: docs/also-missing.png: no such file",
    ]


def test_every_relative_link_of_the_documentation_resolves() -> None:
    pages = documentation()
    assert len(pages) > 5 and all(page.is_file() for page in pages)
    problems = [problem for page in pages for problem in broken_links(page)]
    assert problems == []


_NAMED_FILE = re.compile(
    r"`((?:packages|tests|devhost|harness|bench|shared|functions|docs)/[\w./-]+)(?:::\w+)?`"
)


def missing_named_files(page: Path, root: Path = ROOT) -> list[str]:
    """Repository files a page names in code spans (`tests/x/test_y.py`) that do not exist:
    a test cited as evidence must be there to read. Relative to the root, or the page's own
    package (`tests/...` on the library's page)."""
    text = "\n".join(_prose_lines(page.read_text()))
    bases = [root, *([page.parent] if page.parent != root else [])]
    found = []
    for named in _NAMED_FILE.findall(text):
        path = named.split("::")[0].rstrip("/")
        if not any((base / path).exists() for base in bases):
            found.append(f"{page.relative_to(root)}: {path}: no such file")
    return found


def test_the_checker_finds_a_file_named_in_code_that_is_gone(tmp_path: Path) -> None:
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_a.py").write_text("")
    page = tmp_path / "README.md"
    page.write_text("shown by `tests/test_a.py::test_x`, `tests/test_gone.py` and `tests/{x}/`\n")
    assert missing_named_files(page, tmp_path) == ["README.md: tests/test_gone.py: no such file"]


def test_every_file_the_documentation_names_exists() -> None:
    problems = [problem for page in documentation() for problem in missing_named_files(page)]
    assert problems == []


def test_the_readme_is_a_landing_page() -> None:
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) <= README_MAX_LINES, f"README.md has {len(lines)} lines"
