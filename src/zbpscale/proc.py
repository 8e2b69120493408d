"""Processes on this host: is one still alive (not a reused pid).

Torch-free, and imports nothing of zbpscale: the trainer, the local queue's driver, the run state and the locks
(lease.py) use it.
"""

from __future__ import annotations

from pathlib import Path


def pid_alive(pid: int, start_time: int) -> bool:
    """Whether the process `pid` that started at kernel tick `start_time` still runs (not a reused pid)."""
    return process_start_time(pid) == start_time


def process_start_time(pid: int) -> int | None:
    """The kernel start time (clock ticks since boot) of a live, non-zombie process, or None."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2:].split()  # after "pid (comm) "
    return None if fields[0] in ("Z", "X") else int(fields[19])
