"""tools/browser_check.py against small pages written for each test: what real headless Chromium reports for each
page is compared with what the page was written to do.

A clean page with every asked-for id passes with empty lists and a PNG screenshot of the viewport's size; a page
with a console.error, an uncaught exception, a request to loopback (127.0.0.1:9, where nothing listens: never an
outside address) or without an asked-for id fails, naming what went wrong. A check cut short by its timeout
leaves no Chromium running and no profile behind. Skipped, with the reason, where no Chromium is installed
(`python tools/browser_check.py install`). Each check starts its own Chromium: about half a second.
"""

import json
import os
import struct
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from conftest import load_tool

REPO = Path(__file__).resolve().parents[1]
browser_check = load_tool("browser_check")
pytestmark = pytest.mark.skipif(browser_check.available() is None,
                                reason="no Chromium on PATH: run `python tools/browser_check.py install`")


def _page(tmp_path: Path, body: str, title: str = "Report") -> Path:
    path = tmp_path / "page.html"
    path.write_text(f"<!doctype html><html><head><meta charset='utf-8'><title>{title}</title></head>"
                    f"<body>{body}</body></html>")
    return path


def _png_size(path: Path) -> tuple[int, int]:
    """(width, height) from a PNG's IHDR chunk, which the format puts first."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR"
    return struct.unpack(">II", data[16:24])


def test_clean_page_passes_with_a_viewport_screenshot(tmp_path):
    dot = "data:image/gif;base64,R0lGODlhAQABAAAAACw="  # a data: URL is part of the file: allowed
    page = _page(tmp_path, f"<h1 id='runs'>Runs</h1><div id='laws'>Laws</div><img src='{dot}'>", title="Clean")
    shot = tmp_path / "first.png"
    out = subprocess.run([sys.executable, "tools/browser_check.py", "check", str(page), "--ids", "runs,laws",
                          "--screenshot", str(shot), "--json"], cwd=REPO, capture_output=True, text=True,
                         timeout=120)  # a check takes ~0.5 s alone; 60 s is the tool's own limit
    assert out.returncode == 0, out.stdout + out.stderr
    result = json.loads(out.stdout)
    assert result == {"console_errors": [], "requests": [], "missing_ids": [], "screenshot": str(shot),
                      "title": "Clean"}
    assert _png_size(shot) == browser_check.VIEWPORT


def test_console_error_fails_naming_it(tmp_path):
    result = browser_check.check(_page(tmp_path, "<script>console.error('x')</script>"))
    assert result["console_errors"] == ["console.error: x"]
    assert not browser_check.passed(result)


def test_uncaught_exception_fails_naming_it(tmp_path):
    result = browser_check.check(_page(tmp_path, "<script>throw new Error('boom')</script>"))
    assert result["console_errors"] == ["uncaught exception: Error: boom"]
    assert not browser_check.passed(result)


def test_network_request_fails_naming_the_url(tmp_path):
    page = _page(tmp_path, "<img src='http://127.0.0.1:9/x.png'>")
    out = subprocess.run([sys.executable, "tools/browser_check.py", "check", str(page)], cwd=REPO,
                         capture_output=True, text=True, timeout=120)  # ~0.5 s alone
    assert out.returncode == 1, out.stdout + out.stderr
    assert "network request: http://127.0.0.1:9/x.png" in out.stdout
    result = browser_check.check(page)
    assert result["requests"] == ["http://127.0.0.1:9/x.png"]
    # the failed load is a console error too, as a reader's console shows it
    assert any("http://127.0.0.1:9/x.png" in e for e in result["console_errors"])


def test_missing_id_fails_naming_it(tmp_path):
    result = browser_check.check(_page(tmp_path, "<div id='runs'></div>"), ids=("runs", "laws"))
    assert result["missing_ids"] == ["laws"]
    assert result["console_errors"] == [] and result["requests"] == []
    assert not browser_check.passed(result)


def test_timeout_leaves_no_chromium_and_no_profile(tmp_path, monkeypatch):
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))  # the check's profile goes here, and only this test's
    with pytest.raises(browser_check.BrowserCheckError, match="gave up after"):
        browser_check.check(_page(tmp_path, "<p>slow enough</p>"), timeout_s=0.01)
    assert list(scratch.iterdir()) == []
    alive = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:  # ended while we looked
            continue
        if str(scratch).encode() in cmdline:
            alive.append(pid)
    assert alive == []
