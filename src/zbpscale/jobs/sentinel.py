"""A hang the trainer cannot report: watched from outside the trainer's process.

The trainer's own watchdog (train/watchdog.py) is a thread of the trainer: it catches a rank blocked in a
collective, but not a trainer that is itself frozen (SIGSTOP, a debugger, a process stuck in the kernel on a
filesystem that does not answer): its thread is frozen too, and the job would sit until its time limit. So
something outside it watches the attempt's progress, from the run folder:
  - on SLURM, a sentinel process that rank 0 of the job starts beside the trainer (executors/slurm_sentinel.py;
    it leaves when the trainer's process does, and dies with the job);
  - on the local queue, the driver itself (driver.py, every tick).
Progress is the heartbeat (rank 0 rewrites it every few seconds while it steps); it counts only once this attempt
has made its first step (set-up and the estimator's compile are not steps). The step a hang is named after is the
last one this attempt's records hold (metrics.jsonl's last train record, written as each step ends): the
heartbeat, rewritten at most every TRAINER_BEAT_S (train/metrics.py), may lag it by many steps (`steps_done`).
When the heartbeat is older than `step_timeout_s` + WATCHDOG_FIRST_S (the trainer's watchdog gets the first word: a
blocked collective is its to report) and this attempt has no end record yet (in attempts.jsonl or metrics.jsonl), the
watcher:
  1. writes what it can see of each rank's process into the job's log (its state, e.g. `T (stopped)` or
     `D (disk sleep)`; its kernel stack where readable): a frozen Python process cannot print its own stacks;
  2. records `hung` (metrics.jsonl's end record and the attempt's end, with what it saw as the reason) and has
     the attempt requeued from the last checkpoint, counted against max_crashes like every hang; over that bound
     the run is failed (driver.py: `requeue`; SLURM: slurm_sentinel.hung_from_outside).
The ranks it names and kills are those whose watchdog stamped this attempt (`.ranks/`, newer than its start),
on this host, with the pid and start time the stamp gives (never a reused pid). Torch-free.
Caveat: the watcher reads the run folder; a filesystem that blocks every reader blocks it too.
"""

from __future__ import annotations

import socket
import time
from dataclasses import dataclass
from pathlib import Path

from zbpscale import lease
from zbpscale.files import read_json
from zbpscale.proc import pid_alive
from zbpscale.run.folder import RunFolder
from zbpscale.run.history import History
from zbpscale.run.records import tail_records

WATCHDOG_FIRST_S = 15.0
"""How long past step_timeout_s the outside watcher waits: the trainer's own watchdog (which fires at
step_timeout_s, and writes the stacks itself) acts first when it can."""
CHECK_S = 2.0
"""How often a watcher looks."""
PROCESS_STATES = {"R": "running", "S": "sleeping",
                  "D": "in uninterruptible sleep (a filesystem or device that does not answer)",
                  "T": "stopped (SIGSTOP or a debugger)", "t": "stopped by a debugger", "Z": "a zombie"}
"""/proc/PID/stat's state letters, in words."""


@dataclass(frozen=True)
class Hang:
    """An attempt that made no step for longer than its bound."""

    step: int
    """Steps done when it went silent (`steps_done`)."""
    silent_s: float
    reason: str
    """What was seen, in one line: which ranks, their processes' states."""
    detail: str
    """More lines for the log: each local rank's kernel stack where readable."""
    pids: tuple[int, ...] = ()
    """The ranks' processes on this host that still exist (to be killed: a stopped process takes SIGKILL)."""


def check(run_dir: Path, *, since: float, timeout_s: float, now: float | None = None) -> Hang | None:
    """The hang of the attempt that started at `since` (its start event's time), or None: no bound (timeout_s
    0), no step yet, still stepping, or already ended (its own end record)."""
    now = time.time() if now is None else now
    folder = RunFolder(run_dir)
    beat = read_json(folder.heartbeat)
    if timeout_s <= 0 or beat.get("time", 0) < since:
        return None
    silent = now - beat["time"]
    if silent <= timeout_s + WATCHDOG_FIRST_S:
        return None
    if _ended_since(run_dir, since):
        return None
    seen, detail, pids = _ranks(folder, since, now)
    step = steps_done(folder, beat, since)
    reason = f"no step for {silent:.0f} s (step_timeout_s={timeout_s:g}) after step {step}, " \
             f"seen from outside the trainer: {seen}"
    return Hang(step=step, silent_s=silent, reason=reason, detail=detail, pids=pids)


def steps_done(folder: RunFolder, beat: dict, since: float) -> int:
    """Steps the attempt that started at `since` has done: its last train record's step + 1 (records are 0-based,
    written as each step ends), or the heartbeat's count where that is higher (a run with log_every > 1) or this
    attempt has no train record yet."""
    train = tail_records(folder.metrics, ("train",)).get("train", {})
    logged = train["step"] + 1 if train.get("time", 0) >= since and "step" in train else 0
    return max(logged, int(beat.get("step", 0)))


def _ended_since(run_dir: Path, since: float) -> bool:
    """Whether the attempt has ended by its own word: its end in attempts.jsonl, or the trainer's end record (the
    watchdog writes that one before the job layer's)."""
    history = History.read(run_dir)
    starts = [a for a in history.starts() if a.get("time", 0) >= since - 1]
    if starts and history.last_end(starts[-1].get("job_id", "")):
        return True
    return tail_records(RunFolder(run_dir).metrics, ("end",)).get("end", {}).get("time", 0) >= since


def _ranks(folder: RunFolder, since: float, now: float) -> tuple[str, str, tuple[int, ...]]:
    """(one line on every rank that stamped this attempt: its pid, host, how long silent, its process's state when
    it is on this host; the kernel stacks of those, for the log; the pids of those that still run)."""
    words, stacks, pids = [], [], []
    stamps = folder.rank_files()
    for path in stamps:
        stamp = read_json(path)
        if "pid" not in stamp or stamp.get("alive", 0) < since:  # an earlier attempt's
            continue
        pid, host = stamp["pid"], stamp.get("host", "")
        where = f"pid {pid}" + (f" on {host}" if host else "")
        local = host == socket.gethostname() and (stamp.get("pid_start") is None or pid_alive(pid, stamp["pid_start"]))
        state = process_state(pid) if local else ""
        quiet = f", silent for {now - stamp['alive']:.0f} s" if "alive" in stamp else ""
        words.append(f"rank {path.stem} ({where}{quiet})" + (f" {state}" if state else ""))
        stack = _read(f"/proc/{pid}/stack") if state else ""
        if stack:
            stacks.append(f"rank {path.stem} (pid {pid}) kernel stack:\n{stack.rstrip()}")
        if state and state != "gone":
            pids.append(pid)
    if not words:
        return "no rank stamped its liveness", "", ()
    return "; ".join(words), "\n".join(stacks), tuple(pids)


def process_state(pid: int) -> str:
    """A local process's state in words ("stopped (SIGSTOP or a debugger)"), "gone", or "" when unreadable."""
    text = _read(f"/proc/{pid}/stat")
    if not text:
        return "gone"
    code = text[text.rindex(")") + 2:].split()[0]
    return PROCESS_STATES.get(code, code)


def _read(path: str) -> str:
    try:
        return Path(path).read_text()
    except OSError:
        return ""


def holds(run_dir: Path, trainer_pid: int) -> bool:
    """Whether the run folder's lease still names the trainer `trainer_pid` (rank 0) of this machine. A watcher
    writes a hang into the folder only on behalf of the trainer that holds it: one frozen past its lease may have
    been replaced by another trainer meanwhile, whose folder it is now."""
    holder = lease.read_holder(RunFolder(run_dir).trainer_lease)
    return holder is not None and holder.here() and holder.pid == trainer_pid


def record_hang(run_dir: Path, hang: Hang) -> None:
    """The trainer's own end record (metrics.jsonl), written for it: it cannot."""
    from zbpscale.train.metrics import MetricsLog

    log = MetricsLog(run_dir)
    log.write("end", step=hang.step - 1, why="hung", reason=hang.reason)
    log.close()
