"""Processes on this host: is one still alive (not a reused pid), and since when.

Torch-free, and imports nothing of zbpscale: the trainer, the local queue's driver, the run state and the locks
(lease.py) use it.
"""

from __future__ import annotations

import os
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


def process_started_at(pid: int) -> float | None:
    """When the live, non-zombie process `pid` started, in Unix seconds (to within a second: the kernel keeps the
    boot time in whole seconds), or None. For a record that names a pid without its start time: a process that
    started after the record was written is another one, which reused the pid."""
    ticks = process_start_time(pid)
    if ticks is None:
        return None
    try:
        boot = next(int(line.split()[1]) for line in Path("/proc/stat").read_text().splitlines()
                    if line.startswith("btime "))
    except (OSError, StopIteration, ValueError):
        return None
    return boot + ticks / os.sysconf("SC_CLK_TCK")
