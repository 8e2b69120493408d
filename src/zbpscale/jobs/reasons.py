"""Why a job failed, in a line, from the tail of its log: status sharpens a vague reason (an exit status, a job
ended without a record) with what the log says (an out-of-memory, srun's word on a killed task, the last line of a
Python traceback). Reads only the log's last 64 KiB; writes nothing."""

from __future__ import annotations

import re
import signal
from dataclasses import replace
from pathlib import Path

from zbpscale.jobs.state import RunState

TAIL_BYTES = 65536
"""The most of a log's end that `log_tail` reads."""


def log_tail(path: Path, lines: int = 40) -> list[str]:
    """The last `lines` lines (str.splitlines') of the log's last TAIL_BYTES; [] where it cannot be read. Only the
    bytes from the `lines + 1`-th line break from the end are decoded and split: the same lines (a cut just after a
    b"\n" is a line's start for splitlines too, and no UTF-8 character holds that byte) without splitting thousands
    (status reads the log of each failed run: the bench's 1,000 failed of 10,000, a 10 KB log each, 0.075 -> 0.025
    s, the rest their opening and reading)."""
    try:
        with open(path, "rb") as fh:
            size = fh.seek(0, 2)
            fh.seek(max(0, size - TAIL_BYTES))
            data = fh.read()
    except OSError:
        return []
    cut = len(data)
    for _ in range(lines + 1):
        cut = data.rfind(b"\n", 0, cut)
        if cut < 0:
            break
    return data[cut + 1:].decode(errors="replace").splitlines()[-lines:]


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
    if last := last_error(tail):
        return last + (f" ({reason})" if reason else "")
    return reason or "ended without a reason on record"


_SIGNALS = {signal.strsignal(sig): sig for sig in signal.Signals if signal.strsignal(sig)}
_SRUN_TASK = re.compile(r"srun: error: (\S+): tasks? ([\d,\-]+): (.+?)(?: \(core dumped\))?$")
"""srun's line on tasks that ended badly: `srun: error: node2: task 1: Killed`, `...: tasks 0-1: Exited with exit
code 1` (its node, its task numbers, strsignal's name of the signal or the exit status)."""


def _srun_killed(tail: list[str]) -> str:
    """srun's word on a task that a signal ended (`srun: error: node1: task 0: Killed`), as sacct words it: "a
    task was killed by signal 9 (SIGKILL) on node1"; "" when the log has none."""
    for line in reversed(tail):
        m = _SRUN_TASK.match(line.strip())
        if m and m.group(3) in _SIGNALS:
            sig = _SIGNALS[m.group(3)]
            return f"a task was killed by signal {sig.value} ({sig.name}) on {m.group(1)}"
    return ""


def first_task_end(lines: list[str]) -> tuple[str, str, str] | None:
    """The task of a job step that srun saw end first, from srun's lines in the step's part of the batch log:
    (its tasks as srun numbers them, i.e. the ranks, its node, how it ended: "killed by signal 9 (SIGKILL)" or
    "exit code 1"); None when srun said nothing of a task. The first such line is the rank that died first: the
    others end after it (a peer lost, srun's kill of the rest of the step). A node lost with its tasks says nothing
    of them until SLURM calls the node failed (`srun: error: Node failure on node2`), after the survivors' ends:
    that line wins, as ("", its node, "node failure")."""
    lost = next((m.group(1) for line in lines if (m := re.match(r"srun: error: Node failure on (\S+)",
                                                                  line.strip()))), None)
    if lost:
        return "", lost, "node failure"
    for line in lines:
        m = _SRUN_TASK.match(line.strip())
        if not m:
            continue
        node, tasks, how = m.groups()
        if how in _SIGNALS:
            sig = _SIGNALS[how]
            return tasks, node, f"killed by signal {sig.value} ({sig.name})"
        code = re.fullmatch(r"Exited with exit code (\d+)", how)
        return tasks, node, f"exit code {code.group(1)}" if code else how
    return None


def last_error(lines: list[str]) -> str:
    """The last line of the last Python traceback in a log's lines (`ValueError: ...`); "" when there is none."""
    if not any("Traceback (most recent call last)" in line for line in lines):
        return ""
    return next((ln.strip() for ln in reversed(lines) if ln.strip() and not ln.startswith((" ", "\t"))), "")


def refined(decided: RunState) -> RunState:
    """The state, with a failed run's reason sharpened from its log (refine_reason), as status shows it."""
    return replace(decided, reason=refine_reason(decided.reason, decided.log)) if decided.state == "failed" else decided
