"""Stop requests as a flag: on SIGUSR2, SIGTERM or SIGINT (Ctrl-C) the handler only records the signal.

A second Ctrl-C while the first is pending raises KeyboardInterrupt at once (abort without a checkpoint),
as people expect of a trainer in a terminal.

The trainer reads `received()` at each step boundary, where the ranks agree on it and checkpoint; no
collective ever runs in a handler. `install()` is idempotent and keeps a signal that already arrived, so a
job can install it first thing (a time-limit signal may come while torch is still importing) and the
trainer's own `install()` sees that signal. `restore()` puts the previous handlers back and clears the flag.
`unwind` is the other way, for commands that hold children: the signal raised as KeyboardInterrupt.

A signal can also come before any Python code of ours runs: SLURM sends the time-limit warning up to a minute
early, so with a short limit it can reach a requeued attempt during interpreter start-up, when SIGUSR2 still
kills. Jobs are therefore started through `BLOCKED_PYTHON`, which blocks both signals and execs the real
interpreter: a blocked signal stays pending across exec, and `install()` unblocks it into the flag.
"""

from __future__ import annotations

import signal
import sys

SIGNALS = (signal.SIGUSR2, signal.SIGTERM)  # the schedulers' stop signals (held back during start-up)
# `BLOCKED_PYTHON + ["-m", module, ...]` runs `python -m module ...` with SIGNALS blocked until install().
# The wrapper starts without site (-S), so its own unprotected start-up is a few milliseconds.
_BLOCK = "import os, signal, sys; signal.pthread_sigmask(signal.SIG_BLOCK, (signal.SIGUSR2, signal.SIGTERM)); "
BLOCKED_PYTHON = [sys.executable, "-S", "-c", _BLOCK + "os.execv(sys.executable, [sys.executable] + sys.argv[1:])"]
# A SLURM job's task: submitit appends `-u -m submitit.core._submit FOLDER`; the same signals held back, it runs as
# `python -u -m zbpscale.entry slurm-task FOLDER` (submitit's entry, then an exit without the teardown).
BLOCKED_TASK_PYTHON = [sys.executable, "-S", "-c", _BLOCK + "os.execv(sys.executable, [sys.executable, '-u', '-m', "
                       "'zbpscale.entry', 'slurm-task', sys.argv[-1]])"]
_received = 0
_previous: dict | None = None


def _handle(signum, frame) -> None:
    global _received
    if signum == signal.SIGINT and _received == signal.SIGINT:
        raise KeyboardInterrupt  # Ctrl-C twice: do not wait for the checkpoint
    _received = signum


def unwind(signum, frame) -> None:
    """A handler for a command that holds children, not the trainer: the stop signal (SIGTERM: `kill`, scancel)
    unwinds it as Ctrl-C does, a KeyboardInterrupt in the main thread, so that its `finally` blocks stop what it
    started (the data prep's tokenizer pool, `zbpscale sync`'s upload)."""
    raise KeyboardInterrupt(f"signal {signum}")


def install() -> None:
    global _previous
    if _previous is None:
        _previous = {s: signal.signal(s, _handle) for s in (*SIGNALS, signal.SIGINT)}
    signal.pthread_sigmask(signal.SIG_UNBLOCK, SIGNALS)  # a signal held back by BLOCKED_PYTHON lands here now


def received() -> int:
    """The signal number of the last stop request since install(), or 0."""
    return _received


def restore() -> None:
    global _previous, _received
    if _previous is not None:
        for s, handler in _previous.items():
            signal.signal(s, handler)
    _previous, _received = None, 0
