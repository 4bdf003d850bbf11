"""The README and the pages under docs/ hold together: every relative link names a file that exists,
and every ``#anchor`` names a heading of the file it points into, by GitHub's rules (lowercase, spaces
to '-', punctuation dropped, a repeated heading numbered -1, -2 ...). The README stays a guide a new
user reads first: under 600 lines, each long part a page of docs/ that the index lists."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DOCS = REPO / "docs"
# the pages checked: the README, every page of docs/, and the other Markdown files that link into them
PAGES = sorted({REPO / "README.md", *DOCS.glob("*.md"), REPO / "SECURITY.md", REPO / "ARCHITECTURE.md",
                REPO / "bench" / "README.md", REPO / "clients" / "README.md", REPO / "workloads" / "README.md"})
LINK = re.compile(r"!?\[((?:[^\[\]]|\[[^\]]*\])*)\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
FENCE = re.compile(r"^\s*(```|~~~)")


def prose(text: str) -> str:
    """The text a Markdown renderer turns into links: fenced code blocks and inline code spans blanked."""
    out, fenced = [], False
    for line in text.splitlines():
        if FENCE.match(line):
            fenced = not fenced
            out.append("")
            continue
        out.append("" if fenced else re.sub(r"(`+).*?\1", "", line))
    return "\n".join(out)


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: the rendered text (links reduced to their text, code to its
    content), lowercased, every character but letters, digits, '-', '_' and spaces dropped, spaces to '-'."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading).strip().lower()
    return "".join("-" if c == " " else c for c in text if c.isalnum() or c in "-_ ")


def anchors(path: Path) -> set[str]:
    """Every anchor GitHub gives the headings of a Markdown file (repeats numbered as GitHub does)."""
    seen: dict[str, int] = {}
    found = set()
    fenced = False
    for line in path.read_text(encoding="utf-8").splitlines():
        if FENCE.match(line):
            fenced = not fenced
        if fenced or not (m := re.match(r"#{1,6} (.+?)\s*#*\s*$", line)):
            continue
        base = slug(m.group(1))
        n = seen.get(base, 0)
        seen[base] = n + 1
        found.add(base if n == 0 else f"{base}-{n}")
    return found


def links(path: Path) -> list[str]:
    return [m.group(2) for m in LINK.finditer(prose(path.read_text(encoding="utf-8")))]


def test_the_slug_follows_githubs_rules() -> None:
    assert slug("The model: `--api`, tokens and cost") == "the-model---api-tokens-and-cost"
    assert slug("Optimizing a kernel (`kernelopt optimize`)") == "optimizing-a-kernel-kernelopt-optimize"
    assert slug("Kernels against the vendor (`python bench/vendor.py`, 2026-12-02)") == \
        "kernels-against-the-vendor-python-benchvendorpy-2026-12-02"
    assert slug("Windows (WSL2)") == "windows-wsl2"
    assert slug("Use [it](x.md) from Python") == "use-it-from-python"
    assert slug("tune_cache and `kernelopt_mcp`") == "tune_cache-and-kernelopt_mcp"


@pytest.mark.parametrize("page", PAGES, ids=[p.relative_to(REPO).as_posix() for p in PAGES])
def test_every_relative_link_and_anchor_resolves(page: Path) -> None:
    broken = []
    for target in links(page):
        if re.match(r"[a-zA-Z][a-zA-Z0-9+.-]*:", target):  # https:, mailto: ...: not ours to check offline
            continue
        path_part, _, anchor = target.partition("#")
        dest = (page.parent / path_part).resolve() if path_part else page
        if not dest.exists():
            broken.append(f"{target}: no such file {dest}")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            broken.append(f"{target}: no heading of {dest.relative_to(REPO)} has the anchor #{anchor}")
    assert not broken, f"{page.relative_to(REPO)}: " + "; ".join(broken)


def test_a_broken_link_or_anchor_is_found(tmp_path: Path) -> None:
    """The check above is not vacuous: it sees links in prose, not in code, and checks their anchors."""
    page = tmp_path / "page.md"
    page.write_text("# Top\n\n## A `code` heading\n\nsee [here](#a-code-heading), [gone](missing.md)\n\n"
                    "```\n[not a link](nowhere.md)\n```\n`[nor this](nowhere.md)`\n")
    assert links(page) == ["#a-code-heading", "missing.md"]
    assert anchors(page) == {"top", "a-code-heading"}


def test_the_readme_is_a_guide_under_600_lines() -> None:
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    assert len(readme.splitlines()) < 600, "README.md is for a first read: move long reference text to docs/"
    for section in ("## Set-up", "## Tests", "## Problems written in PyTorch", "## Use it from Python"):
        assert f"\n{section}\n" in readme, section


def test_the_docs_index_lists_every_page() -> None:
    index = (DOCS / "README.md").read_text(encoding="utf-8")
    listed = {t for t in links(DOCS / "README.md") if not t.startswith(("#", "..")) and t.endswith(".md")}
    pages = {p.name for p in DOCS.glob("*.md")} - {"README.md"}
    assert listed == pages, f"docs/README.md lists {sorted(listed)}, docs/ holds {sorted(pages)}"
    assert "../README.md" in index
    readme_links = set(links(REPO / "README.md"))
    assert "docs/README.md" in readme_links, "the README points to the docs index"
    assert {t.split("#")[0] for t in readme_links if t.startswith("docs/")} >= {f"docs/{p}" for p in pages}, \
        "every page of docs/ is linked from the README section it continues"
