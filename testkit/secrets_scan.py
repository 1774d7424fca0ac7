"""Scanning log files for secrets that should never have been written: configured keys, Authorization
values and OpenAI-style ``sk-...`` keys.

Used after load and fault runs to prove that the redaction in ``semcache.logs`` held under pressure.
A finding never repeats the secret it found: its excerpt shows the line with the secret masked, so
the scan report itself is safe to keep, print and upload.

    report = scan_logs([log_dir, "locust.log"], secrets=[api_key, admin_key, upstream_key])
    assert report.lines_scanned > 0 and not report.findings
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

# Configured secrets shorter than this are not searched for as plain text: a two-letter key would
# match everywhere. semcache's redactor uses the same floor; the patterns still catch short ones.
MIN_LITERAL_SECRET = 4
_EXCERPT_CHARS = 160
_MASK = "***"

# An Authorization header with a value that is not the redactor's marker, as text ("Authorization:
# Bearer x"), JSON ("authorization": "x") or a header tuple (b'authorization', b'x'). The prefix is
# atomic so that backtracking cannot take "Bearer" or the b of b'...' for the value.
_AUTHORIZATION_VALUE = re.compile(
    r"(?i)\b(?:proxy-)?authorization['\"]?\s*(?:[:=]|['\"]?\s*,)"
    r"(?>\s*(?-i:b)?['\"]?\s*(?:(?:bearer|basic|token)\s+)?)(?!\[redacted\])([^\s'\",;})\]]+)"
)
# "Bearer <token>" anywhere; tokens are long, which spares prose such as "a Bearer token".
_BEARER_TOKEN = re.compile(r"(?i)\bbearer\s+(?!\[redacted\])([A-Za-z0-9._~+/=\-]{12,})")
# OpenAI-style keys: sk-..., sk-proj-...; not the tail of a word such as "disk-full".
_SK_KEY = re.compile(r"(?<![A-Za-z0-9])(sk-[A-Za-z0-9_\-]{8,})")


@dataclass(frozen=True)
class Finding:
    """One secret on one line; ``excerpt`` is the line with that secret masked."""

    path: Path
    line_number: int
    kind: str
    excerpt: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line_number}: {self.kind}: {self.excerpt}"


@dataclass
class ScanReport:
    """What a scan read and what it found."""

    files_scanned: list[Path] = field(default_factory=list)
    lines_scanned: int = 0
    findings: list[Finding] = field(default_factory=list)

    def as_dict(self) -> dict[str, object]:
        return {
            "files_scanned": [str(path) for path in self.files_scanned],
            "lines_scanned": self.lines_scanned,
            "findings": [
                {"path": str(f.path), "line_number": f.line_number, "kind": f.kind, "excerpt": f.excerpt}
                for f in self.findings
            ],
        }


def scan_for_secrets(paths: Iterable[str | Path], secrets: Iterable[str | None]) -> list[Finding]:
    """Every secret found in the files (folders are walked); see ``scan_logs`` for the counts too."""
    return scan_logs(paths, secrets).findings


def scan_logs(paths: Iterable[str | Path], secrets: Iterable[str | None]) -> ScanReport:
    """Reads every line of every file under ``paths`` and reports each secret found.

    ``secrets`` are searched for literally (``None`` and very short ones are skipped); Authorization
    values, long Bearer tokens and ``sk-`` keys are found by pattern whether configured or not.
    A path that does not exist raises ``FileNotFoundError``: a log that was never written proves nothing.
    """
    literal_secrets = sorted({s for s in secrets if s and len(s) >= MIN_LITERAL_SECRET}, key=len, reverse=True)
    report = ScanReport()
    for path in _files_under(paths):
        report.files_scanned.append(path)
        with path.open("r", encoding="utf-8", errors="replace") as lines:
            for line_number, line in enumerate(lines, start=1):
                report.lines_scanned += 1
                report.findings.extend(_findings_in_line(path, line_number, line.rstrip("\n"), literal_secrets))
    return report


def _files_under(paths: Iterable[str | Path]) -> Iterator[Path]:
    for given in paths:
        path = Path(given)
        if path.is_dir():
            yield from sorted(p for p in path.rglob("*") if p.is_file())
        elif path.is_file():
            yield path
        else:
            raise FileNotFoundError(f"no log file at {path}")


def _findings_in_line(path: Path, line_number: int, line: str, literal_secrets: list[str]) -> list[Finding]:
    found: list[tuple[str, str]] = [("configured secret", secret) for secret in literal_secrets if secret in line]
    for kind, pattern in (
        ("Authorization value", _AUTHORIZATION_VALUE),
        ("Bearer token", _BEARER_TOKEN),
        ("sk- key", _SK_KEY),
    ):
        found.extend((kind, match.group(1)) for match in pattern.finditer(line))
    if not found:
        return []
    excerpt = _masked(line, [value for _, value in found])
    # One finding per kind: a line with the same key twice is one leak, not two.
    kinds = dict.fromkeys(kind for kind, _ in found)
    return [Finding(path, line_number, kind, excerpt) for kind in kinds]


def _masked(line: str, values: list[str]) -> str:
    for value in sorted(set(values), key=len, reverse=True):
        line = line.replace(value, value[:3] + _MASK if len(value) > 8 else _MASK)
    return line if len(line) <= _EXCERPT_CHARS else line[:_EXCERPT_CHARS] + "…"
