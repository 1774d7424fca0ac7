"""The README and docs/ stay short, current and consistent with the code.

Results of runs (commit hashes, dates, timings of one machine) belong in benchmarks/results/ and in
commit messages, not in the pages a newcomer reads; docs/configuration.md is generated.
"""

from __future__ import annotations

import itertools
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from semcache.cli import app
from semcache.config_doc import REGENERATE
from semcache.server import create_app
from semcache.settings import Settings

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


# The line that installs torch, in each place a newcomer or a build copies it from.
TORCH_INSTALL = re.compile(r"pip install (?:--quiet )?((?:--(?:extra-)?index-url \S+ )?torch\S*)")


def test_the_install_lines_take_the_cpu_build_of_torch_alike() -> None:
    """README, Makefile and Dockerfile install torch with the same words, pinned to the CPU build
    (PyPI's Linux torch, pinned to a version or not, is the CUDA one), at pyproject.toml's version."""
    lines = {name: TORCH_INSTALL.findall((ROOT / name).read_text()) for name in ("README.md", "Makefile", "Dockerfile")}
    assert all(len(found) == 1 for found in lines.values()), lines
    commands = {found[0] for found in lines.values()}
    assert len(commands) == 1, lines
    (command,) = commands
    pinned = re.search(r'"torch==([^"]+)"', (ROOT / "pyproject.toml").read_text())
    assert pinned is not None and command.endswith(f"torch=={pinned[1]}+cpu"), (command, pinned)
    assert command.startswith("--extra-index-url https://download.pytorch.org/whl/cpu "), command


def _synopses(text: str, command: str) -> list[str]:
    """Each synopsis of ``command`` in a page's code blocks, with its indented continuation lines."""
    found, lines = [], text.splitlines()
    for number, line in enumerate(lines):
        if line.startswith(command + " "):
            more = itertools.takewhile(lambda following: following.startswith(" " * 8), lines[number + 1 :])
            found.append(" ".join([line, *(following.strip() for following in more)]))
    return found


@pytest.mark.parametrize("name", ["pairs", "trace"])
def test_every_eval_synopsis_names_every_flag(name: str) -> None:
    """The synopses in docs/ and in ``semcache eval NAME --help`` name each option the command has."""
    command = typer.main.get_command(app).commands["eval"].commands[name]  # type: ignore[attr-defined]
    flags = {opt for param in command.params for opt in param.opts + param.secondary_opts if opt.startswith("--")}
    flags -= {"--help"}
    help_text = subprocess.run(
        [sys.executable, "-m", "semcache", "eval", name, "--help"], capture_output=True, text=True, timeout=60,
        env={**os.environ, "COLUMNS": "400"}, check=True,
    ).stdout  # fmt: skip
    synopses = [line.strip().removeprefix("In full: ") for line in help_text.splitlines() if "In full: " in line]
    for page in ("operations.md", "hit-quality.md"):
        synopses += _synopses((DOCS / page).read_text(), f"semcache eval {name}")
    assert len(synopses) == 3, synopses
    for synopsis in synopses:
        named = set(re.findall(r"--[a-z-]+", synopsis))
        assert named == flags, (synopsis, flags - named)


def test_the_docs_say_threshold_is_the_prior_and_what_passthrough_routes_reaches() -> None:
    """threshold is each namespace's line only until it learns its own; passthrough_routes does not
    reach the /v1 routes that semcache answers itself, and says so for each of them."""
    rows = {
        row.split("`")[1]: row for row in (DOCS / "configuration.md").read_text().splitlines() if row.startswith("| `")
    }
    quality = next(row for row in (DOCS / "hit-quality.md").read_text().splitlines() if row.startswith("| `threshold`"))
    for row in (rows["threshold"], quality):
        assert "prior" in row and "minimum cosine" not in row.lower(), row
    paths = create_app(Settings()).openapi()["paths"]
    own = {path for path in paths if path.startswith("/v1/") and not path.startswith(("/v1/semcache/", "/v1/{"))}
    assert own == {"/v1/chat/completions", "/v1/responses", "/v1/completions", "/v1/models", "/v1/embeddings"}
    for path in own:
        assert path in rows["passthrough_routes"], path
    assert "Besides chat completions" not in (DOCS / "http-api.md").read_text()
