"""The README and docs/ stay short, current and consistent with the code.

Results of runs (commit hashes, dates, timings of one machine) belong in benchmarks/results/ and in
commit messages, not in the pages a newcomer reads; docs/configuration.md is generated.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from semcache.cli import app
from semcache.config_doc import REGENERATE

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
PAGES = [README, *sorted(DOCS.glob("*.md"))]
MAX_README_LINES = 300

# A commit hash as people paste them: 7 to 40 hex digits, with at least one digit and one letter.
COMMIT_HASH = re.compile(r"\b(?=[0-9a-f]*[0-9])(?=[0-9a-f]*[a-f])[0-9a-f]{7,40}\b")
ISO_DATE = re.compile(r"\b(19|20)\d\d-[01]\d-[0-3]\d\b")
LINK = re.compile(r"\]\(([^)\s]+)\)")


def test_the_readme_stays_short() -> None:
    lines = README.read_text(encoding="utf-8").count("\n")
    assert lines <= MAX_README_LINES, f"README.md has {lines} lines; move the detail to docs/"


@pytest.mark.parametrize("page", PAGES, ids=lambda page: page.name)
def test_no_commit_hashes_or_dates(page: Path) -> None:
    text = page.read_text(encoding="utf-8")
    hashes = sorted(set(COMMIT_HASH.findall(text)))
    dates = sorted({match.group(0) for match in ISO_DATE.finditer(text)})
    assert not hashes and not dates, f"{page.name}: run logs belong in commit messages: {hashes + dates}"


@pytest.mark.parametrize("page", PAGES, ids=lambda page: page.name)
def test_links_between_pages_resolve(page: Path) -> None:
    text = page.read_text(encoding="utf-8")
    for target in LINK.findall(text):
        if "://" in target or target.startswith("mailto:"):
            continue
        path, _, anchor = target.partition("#")
        linked = (page.parent / path).resolve() if path else page
        assert linked.is_file(), f"{page.name}: {target} links to a missing file"
        if anchor and linked.suffix == ".md":
            assert anchor in _anchors(linked), f"{page.name}: {target} links to a missing heading"


def test_the_readme_links_every_docs_page() -> None:
    text = README.read_text(encoding="utf-8")
    for page in sorted(DOCS.glob("*.md")):
        assert f"(docs/{page.name})" in text, f"README.md does not link docs/{page.name}"


def test_the_configuration_page_is_what_the_settings_generate() -> None:
    result = CliRunner().invoke(app, ["config", "--markdown"])
    assert result.exit_code == 0, result.output
    written = (DOCS / "configuration.md").read_text(encoding="utf-8")
    assert written == result.stdout, f"docs/configuration.md is out of date: run `{REGENERATE}`"


def _anchors(page: Path) -> set[str]:
    """GitHub's anchors for a page's headings."""
    anchors = set()
    for line in page.read_text(encoding="utf-8").splitlines():
        if line.startswith("#"):
            heading = line.lstrip("#").strip().lower()
            anchors.add(re.sub(r"[^\w\- ]", "", heading).replace(" ", "-"))
    return anchors
