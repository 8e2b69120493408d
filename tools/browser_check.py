"""Open a local HTML file in real headless Chromium and report what a reader's browser saw: console errors,
uncaught exceptions, failed loads, every request that left the machine, missing sections, and a screenshot.

For `zbpscale report`, whose one HTML file must work from file:// with no server and no network. Chromium is
driven over the Chrome DevTools Protocol on a pipe (`--remote-debugging-pipe`: NUL-terminated JSON on file
descriptors 3 and 4), so no port is opened and no package beyond the standard library is needed. Each check
starts its own Chromium with a fresh temporary profile and no background networking, extensions, sync or
component updates, so the only requests it can see are the page's own; at the end it kills Chromium's whole
process group (by its PID, never by name) and removes the profile, also after an error or a timeout.

  python tools/browser_check.py install                         # apt-get chromium-headless-shell if missing
  python tools/browser_check.py check report.html               # summary; exit 0 only if the page is clean
  python tools/browser_check.py check report.html --ids runs,laws --screenshot first.png --json

Exit status of `check`: 0 clean, 1 the page has a console error, a request that is not file:/data: or a
missing id, 2 the check could not run (no Chromium, no such file, Chromium failed or timed out). Tests import
this file and call `available()` and `check(path, ids, screenshot)`, which returns the dict `--json` prints.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import fcntl
import json
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

PACKAGE = "chromium-headless-shell"  # Debian's headless-only build: no GTK, 19 packages with no recommends
BINARIES = ("chromium-headless-shell", "chromium", "chromium-browser", "google-chrome")
VIEWPORT = (1280, 800)  # width, height of the first screen the screenshot shows
APT_TIMEOUT_S = 600  # each apt-get call of `install`
LOCAL_SCHEMES = ("file", "data")  # a request for any other scheme is a network request
SETTLE_MS = 100  # after the load event: timers and frames that the page's load handlers started run this long
CHROMIUM_FLAGS = [
    "--headless", "--remote-debugging-pipe", "--no-first-run", "--no-default-browser-check",
    "--disable-extensions", "--disable-component-extensions-with-background-pages", "--disable-default-apps",
    "--disable-background-networking", "--disable-component-update", "--disable-sync", "--disable-breakpad",
    "--disable-domain-reliability", "--disable-client-side-phishing-detection", "--no-pings",
    "--metrics-recording-only", "--disable-features=Translate,OptimizationHints,MediaRouter",
    "--disable-gpu", "--hide-scrollbars", "--mute-audio", f"--window-size={VIEWPORT[0]},{VIEWPORT[1]}",
]


class BrowserCheckError(Exception):
    """A check that could not run (no Chromium, no such file, Chromium died or timed out); the message says why."""


def _say(msg: str) -> None:
    print(f"[browser-check] {msg}", file=sys.stderr, flush=True)


def available() -> str | None:
    """The path of a Chromium binary on PATH (the headless shell first), or None where there is none."""
    for name in BINARIES:
        path = shutil.which(name)
        if path:
            return path
    return None


def version(binary: str) -> str:
    """What `BINARY --version` prints, e.g. "Chromium 156.0.8078.114 built on Debian ..."."""
    out = subprocess.run([binary, "--version"], capture_output=True, text=True, timeout=60)
    return out.stdout.strip() or out.stderr.strip()


def install() -> str:
    """apt-get install chromium-headless-shell (no recommends) where no Chromium is on PATH; returns one line
    saying what was done. apt's own output is shown only when it fails."""
    found = available()
    if found:
        return f"already installed: {found} ({version(found)})"
    if shutil.which("apt-get") is None:
        raise BrowserCheckError(f"no Chromium on PATH and no apt-get: install Chromium ({', '.join(BINARIES)})")
    if os.geteuid() != 0:
        raise BrowserCheckError(f"no Chromium on PATH; installing it needs root: apt-get install {PACKAGE}")
    apt_env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    t0 = time.monotonic()
    for cmd in (["apt-get", "update", "-qq"],
                ["apt-get", "install", "-y", "-qq", "--no-install-recommends", PACKAGE]):
        try:  # a mirror that stops answering must not hold CI: the browser tests then skip
            out = subprocess.run(cmd, capture_output=True, text=True, env=apt_env, timeout=APT_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            raise BrowserCheckError(f"`{' '.join(cmd)}` did not finish in {APT_TIMEOUT_S} s") from None
        if out.returncode != 0:
            sys.stderr.write(out.stdout + out.stderr)
            raise BrowserCheckError(f"`{' '.join(cmd)}` failed (exit {out.returncode}); its output is above")
    found = available()
    if not found:
        raise BrowserCheckError(f"apt-get installed {PACKAGE} but none of {', '.join(BINARIES)} is on PATH")
    return f"installed {PACKAGE} in {time.monotonic() - t0:.0f} s: {found} ({version(found)})"


# ---------------------------------------------------------------------------------------------------------
# Chromium over a pipe


class _Browser:
    """One Chromium process spoken to over CDP on a pipe. Commands are answered in order of their ids; every
    event read while waiting for an answer is kept in `events`, in the order Chromium sent them. Everything
    waits against one deadline, so a check never takes longer than its timeout."""

    def __init__(self, binary: str, folder: Path, deadline: float):
        self.deadline, self.events, self._next_id, self._buffer = deadline, [], 0, b""
        self.log_path = folder / "chromium.log"
        flags = [*CHROMIUM_FLAGS, f"--user-data-dir={folder / 'profile'}"]
        if os.geteuid() == 0:
            flags.append("--no-sandbox")  # Chromium refuses to start its sandbox as root
        # Chromium reads commands on fd 3 and writes answers on fd 4. posix_spawn puts the pipe ends there in the
        # child (Popen can pass descriptors on but not renumber them, and a preexec_fn is unsafe with threads);
        # they are first moved to 10 and above, so that no dup2 overwrites the end another one is to copy.
        to_chrome_r, self._to_chrome = os.pipe()
        self._from_chrome, from_chrome_w = os.pipe()
        child_in, child_out = (fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 10) for fd in (to_chrome_r, from_chrome_w))
        log = os.open(self.log_path, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            self.pid = os.posix_spawn(binary, [binary, *flags, "about:blank"], os.environ, setsid=True,
                                      file_actions=[(os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0),
                                                    (os.POSIX_SPAWN_DUP2, log, 1), (os.POSIX_SPAWN_DUP2, log, 2),
                                                    (os.POSIX_SPAWN_DUP2, child_in, 3),
                                                    (os.POSIX_SPAWN_DUP2, child_out, 4)])
        except OSError as e:
            os.close(self._to_chrome)
            os.close(self._from_chrome)
            raise BrowserCheckError(f"could not start {binary}: {e}") from e
        finally:
            for fd in (to_chrome_r, from_chrome_w, child_in, child_out, log):
                os.close(fd)

    def _log_note(self, lines: int = 5) -> str:
        """"; Chromium's log: ..." with the last LINES lines of what Chromium printed, or "" if it printed none."""
        with contextlib.suppress(OSError):
            tail = " | ".join(self.log_path.read_text(errors="replace").strip().splitlines()[-lines:])
            return f"; Chromium's log: {tail}" if tail else ""
        return ""

    def _read_message(self, what: str) -> dict:
        while b"\0" not in self._buffer:
            left = self.deadline - time.monotonic()
            if left <= 0 or not select.select([self._from_chrome], [], [], left)[0]:
                raise TimeoutError(what)
            chunk = os.read(self._from_chrome, 1 << 20)
            if not chunk:
                raise BrowserCheckError(f"Chromium closed its pipe while {what}{self._log_note()}")
            self._buffer += chunk
        message, self._buffer = self._buffer.split(b"\0", 1)
        return json.loads(message)

    def call(self, method: str, session: str | None = None, **params) -> dict:
        """Send one command and return its result; raises BrowserCheckError with CDP's error message."""
        self._next_id += 1
        message = {"id": self._next_id, "method": method, "params": params}
        if session:
            message["sessionId"] = session
        data = json.dumps(message).encode() + b"\0"
        try:
            while data:
                data = data[os.write(self._to_chrome, data):]
        except BrokenPipeError:
            raise BrowserCheckError(f"Chromium has ended, so {method} could not be sent{self._log_note()}") from None
        while True:
            reply = self._read_message(f"waiting for the answer to {method}")
            if reply.get("id") == self._next_id:
                if "error" in reply:
                    raise BrowserCheckError(f"{method} failed: {reply['error'].get('message')}")
                return reply.get("result", {})
            self.events.append(reply)

    def wait_for(self, method: str, session: str) -> dict:
        """Read until the event METHOD of SESSION arrives (or one already read), and return its params."""
        for event in self.events:
            if event.get("method") == method and event.get("sessionId") == session:
                return event["params"]
        while True:
            event = self._read_message(f"waiting for {method}")
            self.events.append(event)
            if event.get("method") == method and event.get("sessionId") == session:
                return event["params"]

    def close(self) -> None:
        """Kill Chromium's process group (every renderer and helper it started), reap its leader and wait until
        no process of the group is running any more. The group is killed before its leader is reaped, so its id
        cannot belong to another process yet; afterwards it cannot either while a process of the group exists."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.pid, signal.SIGKILL)  # setsid made the spawned process the leader: group id = its PID
        os.waitpid(self.pid, 0)
        give_up = time.monotonic() + 10
        while _group_running(self.pid) and time.monotonic() < give_up:
            time.sleep(0.01)  # SIGKILL is sent at once but a big process takes a moment to end
        for fd in (self._to_chrome, self._from_chrome):
            with contextlib.suppress(OSError):
                os.close(fd)


def _group_running(pgid: int) -> bool:
    """Whether a process of group PGID is still running, from /proc. A zombie is not: it has ended and only waits
    for its parent (init, for Chromium's orphans) to collect its exit status."""
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat") as f:
                state, _ppid, pgrp = f.read().rsplit(")", 1)[1].split()[:3]  # after "pid (comm)"
        except (OSError, ValueError):  # ended while we looked
            continue
        if int(pgrp) == pgid and state not in ("Z", "X"):
            return True
    return False


# ---------------------------------------------------------------------------------------------------------
# The check


def _text_of(arg: dict) -> str:
    """A console.error argument as the console shows it."""
    if "value" in arg:
        return str(arg["value"])
    return arg.get("description") or arg.get("type", "?")


def _findings(events: list[dict], session: str) -> tuple[list[str], list[str]]:
    """(console errors, URLs requested) among the page session's events, in order. Console errors are
    console.error/console.assert calls, uncaught exceptions, browser log entries of level error and failed
    loads (with the URL that failed)."""
    errors, urls, url_of = [], [], {}
    for event in events:
        if event.get("sessionId") != session:
            continue
        method, p = event.get("method"), event.get("params", {})
        if method == "Network.requestWillBeSent":
            url_of[p["requestId"]] = p["request"]["url"]
            urls.append(p["request"]["url"])
        elif method == "Runtime.consoleAPICalled" and p.get("type") in ("error", "assert"):
            errors.append(f"console.{p['type']}: " + " ".join(_text_of(a) for a in p.get("args", [])))
        elif method == "Runtime.exceptionThrown":
            details = p["exceptionDetails"]
            text = details.get("exception", {}).get("description") or details.get("text", "")
            errors.append(f"uncaught exception: {text.splitlines()[0] if text else '?'}")
        elif method == "Log.entryAdded" and p["entry"].get("level") == "error":
            entry = p["entry"]
            errors.append(f"{entry.get('source', 'log')}: {entry.get('text', '')}"
                          + (f" ({entry['url']})" if entry.get("url") else ""))
        elif method == "Network.loadingFailed":
            url = url_of.get(p["requestId"], "?")
            errors.append(f"failed load: {url}: {p.get('errorText', '')}" + (" (blocked)" if p.get("blockedReason")
                                                                             else ""))
    return errors, urls


def check(path: str | os.PathLike, ids=(), screenshot: str | os.PathLike | None = None,
          timeout_s: float = 60) -> dict:
    """Open PATH (file://) in a fresh headless Chromium, wait for its load event and SETTLE_MS more, and return
    {"console_errors", "requests" (URLs whose scheme is not file:/data:), "missing_ids" (of IDS, those that
    document.getElementById does not find), "screenshot" (SCREENSHOT, a PNG of the first VIEWPORT-sized screen,
    or None), "title"}. Chromium is killed and its profile removed before this returns or raises; raises
    BrowserCheckError when no Chromium is installed, PATH is not a file, or Chromium fails or takes longer than
    TIMEOUT_S in all."""
    binary = available()
    if binary is None:
        raise BrowserCheckError("no Chromium on PATH: run `python tools/browser_check.py install`")
    page = Path(path).resolve()
    if not page.is_file():
        raise BrowserCheckError(f"{path}: no such file")
    folder = Path(tempfile.mkdtemp(prefix="zbpscale-browser-"))
    browser = None
    try:
        browser = _Browser(binary, folder, deadline=time.monotonic() + timeout_s)
        target = browser.call("Target.createTarget", url="about:blank")["targetId"]
        session = browser.call("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]
        for domain in ("Runtime", "Log", "Network", "Page"):
            browser.call(f"{domain}.enable", session)
        browser.call("Emulation.setDeviceMetricsOverride", session, width=VIEWPORT[0], height=VIEWPORT[1],
                     deviceScaleFactor=1, mobile=False)
        nav = browser.call("Page.navigate", session, url=page.as_uri())
        if nav.get("errorText"):
            raise BrowserCheckError(f"{page}: Chromium could not open it: {nav['errorText']}")
        browser.wait_for("Page.loadEventFired", session)

        def evaluate(expression: str):
            reply = browser.call("Runtime.evaluate", session, expression=expression, returnByValue=True,
                                 awaitPromise=True)
            return reply["result"].get("value")

        evaluate(f"new Promise(done => setTimeout(done, {SETTLE_MS}))")
        missing = evaluate(f"{json.dumps(list(ids))}.filter(id => !document.getElementById(id))") or []
        title = evaluate("document.title")
        shot = None
        if screenshot is not None:
            png = browser.call("Page.captureScreenshot", session, format="png")["data"]
            Path(screenshot).write_bytes(base64.b64decode(png))
            shot = str(screenshot)
        errors, urls = _findings(browser.events, session)
    except TimeoutError as e:
        note = browser._log_note() if browser else ""
        raise BrowserCheckError(f"{page}: gave up after {timeout_s:g} s {e}{note}") from None
    finally:
        if browser is not None:
            browser.close()
        shutil.rmtree(folder, ignore_errors=True)
    network = [u for u in urls if u.split(":", 1)[0].lower() not in LOCAL_SCHEMES]
    return {"console_errors": errors, "requests": network, "missing_ids": missing, "screenshot": shot,
            "title": title}


def passed(result: dict) -> bool:
    """No console error, no request that is not file:/data:, no missing id."""
    return not (result["console_errors"] or result["requests"] or result["missing_ids"])


def summary(path: str, result: dict) -> str:
    """A few lines for a person: the verdict and counts first, then each finding."""
    lines = [f"{path}: {'ok' if passed(result) else 'FAILED'}: title {result['title']!r}, "
             f"{len(result['console_errors'])} console errors, {len(result['requests'])} network requests, "
             f"{len(result['missing_ids'])} missing ids"
             + (f"; screenshot {result['screenshot']}" if result["screenshot"] else "")]
    lines += [f"  console error: {e}" for e in result["console_errors"]]
    lines += [f"  network request: {u}" for u in result["requests"]]
    lines += [f"  missing id: {i}" for i in result["missing_ids"]]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="command", required=True)
    sub.add_parser("install", help=f"apt-get install {PACKAGE} (no recommends) if no Chromium is on PATH")
    sp = sub.add_parser("check", help="open FILE in headless Chromium; exit 0 only if the page is clean")
    sp.add_argument("file", help="the HTML file, opened as file://")
    sp.add_argument("--ids", default="", help="comma-separated element ids that must exist")
    sp.add_argument("--screenshot", default=None, help=f"write a PNG of the first {VIEWPORT[0]}x{VIEWPORT[1]} screen")
    sp.add_argument("--json", action="store_true", help="print the result as JSON instead of a summary")
    sp.add_argument("--timeout", type=float, default=60, help="seconds for the whole check (default 60)")
    args = ap.parse_args(argv)
    try:
        if args.command == "install":
            print(install())
            return 0
        ids = [i.strip() for i in args.ids.split(",") if i.strip()]
        result = check(args.file, ids=ids, screenshot=args.screenshot, timeout_s=args.timeout)
    except BrowserCheckError as e:
        _say(f"error: {e}")
        return 2
    print(json.dumps(result, indent=1) if args.json else summary(args.file, result))
    return 0 if passed(result) else 1


if __name__ == "__main__":
    sys.exit(main())
