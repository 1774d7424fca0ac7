"""The log scanner that the load and fault suites run over every log they write."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from semcache.logs import JsonFormatter, Redactor, RequestContextFilter
from testkit.secrets_scan import scan_for_secrets, scan_logs

CLIENT_KEY = "tenant-key-0123456789abcdef"
ADMIN_KEY = "adm1n-s3cret-value"


def _log(tmp_path: Path, *lines: str, name: str = "service.log") -> Path:
    path = tmp_path / name
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


@pytest.mark.parametrize(
    ("line", "kind"),
    [
        (f"request from {CLIENT_KEY} served", "configured secret"),
        ("Authorization: Bearer abc123", "Authorization value"),
        ('{"headers": {"authorization": "Basic dXNlcjpwYXNz"}}', "Authorization value"),
        ("send headers=[(b'authorization', b'Bearer xyz987')]", "Authorization value"),
        ("retrying with token Bearer eyJhbGciOiJIUzI1NiJ9.payload", "Bearer token"),
        ("upstream said: invalid key sk-proj-AbCdEf123456", "sk- key"),
    ],
)
def test_each_kind_of_secret_is_found_and_masked_in_the_report(tmp_path: Path, line: str, kind: str) -> None:
    findings = scan_for_secrets([_log(tmp_path, "a clean line", line)], [CLIENT_KEY, ADMIN_KEY])

    assert kind in {finding.kind for finding in findings}
    assert {finding.line_number for finding in findings} == {2}
    secret_parts = ("abc123", "dXNlcjpwYXNz", "xyz987", "payload", "AbCdEf123456", "0123456789abcdef")
    assert not any(part in finding.excerpt for finding in findings for part in secret_parts)


@pytest.mark.parametrize(
    "line",
    [
        "Authorization: Bearer [redacted]",
        '{"authorization": "[redacted]", "status": 401}',
        "send headers=[(b'authorization', b'Bearer [redacted]')]",
        "this path needs the admin key as a Bearer token",
        "Authorization header missing",
        "disk-full-for-good: no space left on device",
        "short secrets such as ab are not searched for as text",
    ],
)
def test_redacted_values_and_prose_are_not_findings(tmp_path: Path, line: str) -> None:
    assert scan_for_secrets([_log(tmp_path, line)], [CLIENT_KEY, "ab", None]) == []


def test_folders_are_walked_and_every_line_counted(tmp_path: Path) -> None:
    _log(tmp_path, "one", "two", name="a.log")
    (tmp_path / "nested").mkdir()
    _log(tmp_path / "nested", "three", f"four {ADMIN_KEY}", name="b.log")

    report = scan_logs([tmp_path], [ADMIN_KEY])

    assert report.lines_scanned == 4
    assert len(report.files_scanned) == 2
    assert [(f.path.name, f.line_number) for f in report.findings] == [("b.log", 2)]
    assert report.as_dict()["findings"][0]["kind"] == "configured secret"


def test_a_log_that_was_never_written_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        scan_logs([tmp_path / "missing.log"], [])


def test_what_semcache_logs_passes_the_scan_and_the_raw_text_would_not(tmp_path: Path) -> None:
    """The scanner and the log redactor agree: a line the redactor wrote is clean, the same
    message unredacted is a finding."""
    message = f"upstream call failed; Authorization: Bearer {CLIENT_KEY}; admin {ADMIN_KEY}; key sk-live-9f8e7d6c5b4a"
    record = logging.LogRecord("semcache.upstream", logging.WARNING, __file__, 1, message, None, None)
    RequestContextFilter(Redactor([CLIENT_KEY, ADMIN_KEY])).filter(record)
    written = JsonFormatter().format(record)
    assert json.loads(written)["message"] != message

    assert scan_for_secrets([_log(tmp_path, written, name="redacted.log")], [CLIENT_KEY, ADMIN_KEY]) == []
    raw = scan_for_secrets([_log(tmp_path, message, name="raw.log")], [CLIENT_KEY, ADMIN_KEY])
    assert {f.kind for f in raw} == {"configured secret", "Authorization value", "Bearer token", "sk- key"}
