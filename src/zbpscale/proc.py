"""Processes on this host: is one still alive (not a reused pid), and one writer per file by a kernel lock.

Torch-free, and imports nothing of zbpscale: the trainer, the local queue's driver and the run state use it.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path


def try_lock(path: Path):
    """Take an exclusive kernel lock on `path` without waiting: (the open, locked file, "") or (None, who holds it:
    "pid N on HOST", as its holder wrote). The kernel releases it when the holder dies, however it dies; close
    the file to release it."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fh = open(path, "a+")
    try:
        fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        fh.seek(0)
        holder = fh.read().strip() or "another process"
        fh.close()
        return None, holder
    fh.seek(0)
    fh.truncate()
    fh.write(f"pid {os.getpid()} on {os.uname().nodename}\n")
    fh.flush()
    return fh, ""


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
