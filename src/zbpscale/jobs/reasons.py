"""Why a job failed, in a line, from the tail of its log: status sharpens a vague reason (an exit status, a job
ended without a record) with what the log says (an out-of-memory, srun's word on a killed task, the last line of a
Python traceback). Reads only the log's last 64 KiB; writes nothing."""

from __future__ import annotations

import re
import signal
from dataclasses import replace
from pathlib import Path

from zbpscale.jobs.state import RunState


def log_tail(path: Path, lines: int = 40) -> list[str]:
    try:
        with open(path, "rb") as fh:
            fh.seek(0, 2)
            size = fh.tell()
            fh.seek(max(0, size - 65536))
            return fh.read().decode(errors="replace").splitlines()[-lines:]
    except OSError:
        return []


def refine_reason(reason: str, log) -> str:
    """Sharpen a vague reason from the log's tail: an OOM, or the last line of a Python traceback."""
    tail = log_tail(Path(log), 60) if log else []
    text = "\n".join(tail)
    if "CUDA out of memory" in text or "OutOfMemoryError" in text:
        return "out of memory (CUDA)" + (f"; {reason}" if reason else "")
    if reason and not (reason.startswith(("job ended", "killed by")) or re.fullmatch(r"exit status \d+", reason)):
        return reason  # already says why
    killed = _srun_killed(tail)
    if killed:  # what sacct would have said, from srun's own line (accounting down or lagging)
        return killed + (f" ({reason})" if reason else "")
    if "Traceback (most recent call last)" in text:
        last = next((ln for ln in reversed(tail) if ln.strip() and not ln.startswith(" ")), "")
        return f"{last.strip()}" + (f" ({reason})" if reason else "")
    return reason or "ended without a reason on record"


_SIGNALS = {signal.strsignal(sig): sig for sig in signal.Signals if signal.strsignal(sig)}


def _srun_killed(tail: list[str]) -> str:
    """srun's word on a task that a signal ended (`srun: error: node1: task 0: Killed`), as sacct words it: "a
    task was killed by signal 9 (SIGKILL) on node1"; "" when the log has none."""
    for line in reversed(tail):
        m = re.match(r"srun: error: (\S+): tasks? [\d,\-]+: (.+?)(?: \(core dumped\))?$", line.strip())
        if m and m.group(2) in _SIGNALS:
            sig = _SIGNALS[m.group(2)]
            return f"a task was killed by signal {sig.value} ({sig.name}) on {m.group(1)}"
    return ""


def refined(decided: RunState) -> RunState:
    """The state, with a failed run's reason sharpened from its log (refine_reason), as status shows it."""
    return replace(decided, reason=refine_reason(decided.reason, decided.log)) if decided.state == "failed" else decided
