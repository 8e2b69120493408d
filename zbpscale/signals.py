"""Stop requests as a flag: on SIGUSR2 or SIGTERM the handler only records the signal.

The trainer reads `received()` at each step boundary, where the ranks agree on it and checkpoint; no
collective ever runs in a handler. `install()` is idempotent and keeps a signal that already arrived, so a
job can install it first thing (a time-limit signal may come while torch is still importing) and the
trainer's own `install()` sees that signal. `restore()` puts the previous handlers back and clears the flag.
"""

from __future__ import annotations

import signal

SIGNALS = (signal.SIGUSR2, signal.SIGTERM)
_received = 0
_previous: dict | None = None


def _handle(signum, frame) -> None:
    global _received
    _received = signum


def install() -> None:
    global _previous
    if _previous is None:
        _previous = {s: signal.signal(s, _handle) for s in SIGNALS}


def received() -> int:
    """The signal number of the last stop request since install(), or 0."""
    return _received


def restore() -> None:
    global _previous, _received
    if _previous is not None:
        for s, handler in _previous.items():
            signal.signal(s, handler)
    _previous, _received = None, 0
