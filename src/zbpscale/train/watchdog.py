"""The hang watchdog: a rank that makes no step for `step_timeout_s` ends the attempt, saying who stopped.

A hung collective (a rank stopped, a peer on a lost node, a deadlock) holds a job until its time limit. Every
rank runs a `Watchdog` thread beside its training loop. The loop calls `beat(step)` after each step (and
after an evaluation or a checkpoint); the thread stamps `<run_dir>/.ranks/<rank>.json` with the rank's last
step and a liveness time every second or so. When no step came for `timeout_s`, the thread of every rank that
can still run:
  1. writes every thread's Python stack to stderr (the job's log), with faulthandler;
  2. names the hang: the ranks whose liveness stamp went stale (stopped or gone), else "every rank alive but
     blocked" (a collective that never completes), and the step they stopped after;
  3. on rank 0, calls `on_hang(reason)` (the trainer's end record; the job's requeue decision);
  4. prints one last line and leaves with EXIT_HUNG (the process is blocked in C++: nothing else can end it).
The job layer counts a hang as a crash (max_crashes) and requeues from the last checkpoint.

The thread writes into the run folder (its stamp, rank 0's hang record), so it asks `guard` first, as every writer
of the trainer does. Once the run folder is another trainer's (this one was paused or frozen past its lease), it
writes nothing more; the training thread finds out at its next write and leaves, and when that thread does not
come back within `timeout_s` (a woken trainer is past it at once), the watchdog leaves in its place: one line
naming the new holder and EXIT_LEASE_LOST, having written nothing.
"""

from __future__ import annotations

import faulthandler
import json
import os
import socket
import sys
import threading
import time
from pathlib import Path
from typing import Callable

from zbpscale.errors import LeaseLost, report
from zbpscale.files import temp_path
from zbpscale.proc import process_start_time
from zbpscale.run.folder import RunFolder
from zbpscale.train.exits import EXIT_HUNG, EXIT_LEASE_LOST, leave

HOST = socket.gethostname()
PID_START = process_start_time(os.getpid())  # with the pid, names this process (pids are reused)
STAMP_S = 1.0  # liveness stamp period; a stamp older than STALE_STAMPS periods is a rank that stopped
STALE_STAMPS = 5


class Watchdog:
    """One rank's watchdog (start it once the loop is about to begin; `stop()` when training ends)."""

    def __init__(self, run_dir: Path, rank: int, world_size: int, timeout_s: float,
                 on_hang: Callable[[str], None] | None = None, guard: Callable[[], None] | None = None):
        """`guard()`: raises LeaseLost once this process may no longer write into the run folder."""
        self.folder, self.rank, self.world = RunFolder(run_dir), rank, world_size
        self.timeout_s, self.on_hang, self.guard = timeout_s, on_hang, guard
        self.step, self.last = -1, time.monotonic()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="zbpscale-watchdog", daemon=True)

    def start(self) -> Watchdog:
        if self.timeout_s > 0:
            self.folder.ranks.mkdir(exist_ok=True)
            self._stamp()
            self._thread.start()
        return self

    def beat(self, step: int) -> None:
        """The loop made progress: `step` steps are done."""
        self.step, self.last = step, time.monotonic()

    def stop(self) -> None:
        self._stop.set()

    def _stamp(self) -> None:
        """Rewrite this rank's stamp (a rename: readers see a whole one; no fsync: it only matters while we run)."""
        path = self.folder.rank_file(self.rank)
        tmp = temp_path(path)
        tmp.write_text(json.dumps({"step": self.step, "alive": time.time(), "pid": os.getpid(), "pid_start": PID_START,
                                   "host": HOST}))
        if self._lease_lost() is not None:  # paused between the look and the rename: the stamp is not ours to write
            tmp.unlink(missing_ok=True)
            return
        os.replace(tmp, path)

    def _watch(self) -> None:
        while not self._stop.wait(STAMP_S):
            lost = self._lease_lost()
            if lost is None:
                self._stamp()
            if time.monotonic() - self.last <= self.timeout_s:
                continue
            if lost is None:
                self._fire()
            elif not self._stop.is_set():  # the training thread, if it is leaving, says it itself
                report(lost)
                leave(EXIT_LEASE_LOST)

    def _lease_lost(self) -> LeaseLost | None:
        """Why this process may no longer write into the run folder (`guard`), or None."""
        try:
            if self.guard is not None:
                self.guard()
        except LeaseLost as err:
            return err
        return None

    def who(self) -> str:
        """Which ranks stopped reporting, from their stamps, in words."""
        now, stale = time.time(), []
        for rank in range(self.world):
            try:
                stamp = json.loads(self.folder.rank_file(rank).read_text())
            except (OSError, ValueError):
                stale.append(f"rank {rank} (never reported)")
                continue
            if now - stamp["alive"] > STALE_STAMPS * STAMP_S:
                stale.append(f"rank {rank} (pid {stamp['pid']}, silent for {now - stamp['alive']:.0f} s)")
        if stale:
            return f"{', '.join(stale)} stopped reporting"
        if self.world == 1:
            return "the trainer is alive but its step does not finish (a call that never returns)"
        return "every rank is alive but blocked (a collective that never completes)"

    def _fire(self) -> None:
        reason = f"no step for {self.timeout_s:g} s after step {self.step}: {self.who()}"
        print(f"watchdog (rank {self.rank}): {reason}; every thread's stack:", file=sys.stderr, flush=True)
        faulthandler.dump_traceback(file=sys.stderr, all_threads=True)
        if self.rank == 0 and self.on_hang is not None:
            try:
                self.on_hang(reason)
            except BaseException as err:  # the process ends next whatever happens here: say what went wrong
                print(f"watchdog: recording the hang failed: {type(err).__name__}: {err}", file=sys.stderr)
        print(f"hung: {reason}", file=sys.stderr, flush=True)
        os._exit(EXIT_HUNG)
