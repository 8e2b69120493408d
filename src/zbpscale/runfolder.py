"""The run folder and a run's lifecycle, owned in one torch-free place.

Every part of zbpscale that touches a run (the trainer, both executors, submit, status, cancel, collect) takes
from here where a file lives, what an exit code or a run name means, how a file is written atomically, how an
attempt is recorded, whether an interrupted attempt may be retried and whether a process is still alive. What
state a run is in is decided in runstate.py.

    <run_dir>/config.json      the resolved TrainConfig (written by submit or the trainer, checked on resume)
              plan.json        parameters, GPUs and planned GPU-hours (submit; read by status)
              metrics.jsonl    the trainer's records (zbpscale.metrics)
              heartbeat.json   step, tokens, time, host, pid, pid_start, rewritten every few seconds
              attempts.jsonl   one event per line: submitted | start | end (why, reason, log)
              checkpoints/     ckpt_<step>.pt, written atomically, the newest K kept
              logs/            the executor's own stdout/stderr files
              .trainer.lock    flock held by the live trainer (rank 0) for its whole life: one writer per folder
              .ranks/<r>.json  each rank's last step and liveness stamp (the hang watchdog, watchdog.py)
              COMPLETE         the trainer finished every step
              CANCEL           `zbpscale cancel` asked the job to stop; the next checkpoint ends it

Run names are `{size}-{arm}` plus `-s{seed}` for seeds other than 0; sizes and arms never contain '-'.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import time
from dataclasses import dataclass
from pathlib import Path

from zbpscale.errors import BrokenRunFolder

CONFIG = "config.json"
PLAN = "plan.json"
METRICS = "metrics.jsonl"
HEARTBEAT = "heartbeat.json"
ATTEMPTS = "attempts.jsonl"
CHECKPOINTS = "checkpoints"
LOGS = "logs"
COMPLETE = "COMPLETE"
TRAINER_LOCK = ".trainer.lock"
RANKS = ".ranks"
CANCEL = "CANCEL"

# Exit codes of a training process (python -m zbpscale.train, a local-queue rank).
EXIT_OK = 0
EXIT_USAGE = 2  # a user's mistake (ZbpError): retrying cannot help
EXIT_DIVERGED = 3  # non-finite loss or gradient norm: stopped before the optimizer update
EXIT_HUNG = 4  # no step for step_timeout_s (watchdog.py): retried from the last checkpoint, as a crash
EXIT_REQUEUE = 75  # checkpointed on request (a signal): run me again to continue

# Why an attempt ended (`why` of an `end` event in attempts.jsonl).
ENDS = ("completed", "timeout", "preempted", "crashed", "hung", "failed", "cancelled")

_NAME = re.compile(r"(?P<size>[^-]+)-(?P<arm>[^-]+)(?:-s(?P<seed>\d+))?")
_CKPT = re.compile(r"ckpt_(\d{8})\.pt")


def parse_run_name(name: str) -> tuple[str, str, int] | None:
    """(size, arm, seed) of a run name, or None if it is not one."""
    m = _NAME.fullmatch(name)
    return (m["size"], m["arm"], int(m["seed"] or 0)) if m else None


def run_name(size: str, arm: str, seed: int = 0) -> str:
    return f"{size}-{arm}" + (f"-s{seed}" if seed else "")


@dataclass(frozen=True)
class RunFolder:
    """Where every file of one run lives (submitit's JobPaths, for a run)."""

    path: Path

    def __post_init__(self) -> None:
        object.__setattr__(self, "path", Path(self.path))

    config = property(lambda self: self.path / CONFIG)
    plan = property(lambda self: self.path / PLAN)
    metrics = property(lambda self: self.path / METRICS)
    heartbeat = property(lambda self: self.path / HEARTBEAT)
    attempts = property(lambda self: self.path / ATTEMPTS)
    checkpoints = property(lambda self: self.path / CHECKPOINTS)
    logs = property(lambda self: self.path / LOGS)
    complete = property(lambda self: self.path / COMPLETE)
    cancel = property(lambda self: self.path / CANCEL)

    @property
    def name(self) -> str:
        return self.path.name

    def read_config(self) -> dict | None:
        """The run's config.json as a dict, None when there is none; a `BrokenRunFolder` when it cannot be
        read as a JSON object (the run cannot go on until it is fixed or moved aside)."""
        try:
            text = self.config.read_text()
        except FileNotFoundError:
            return None
        except OSError as err:
            raise BrokenRunFolder(f"{self.config} cannot be read ({err.strerror})",
                                  hint="check the file's permissions") from None
        try:
            config = json.loads(text)
        except json.JSONDecodeError as err:
            raise BrokenRunFolder(f"{self.config} is not valid JSON (line {err.lineno}: {err.msg})",
                                  hint="restore it, or move the run folder aside to start the run anew") from None
        if not isinstance(config, dict):
            raise BrokenRunFolder(f"{self.config} holds a {type(config).__name__}, not a config object",
                                  hint="restore it, or move the run folder aside to start the run anew")
        return config


def list_checkpoints(run_dir: Path) -> list[tuple[int, Path]]:
    """(step, path) of the run's finished checkpoints (`checkpoints/ckpt_<8-digit step>.pt`), oldest first."""
    folder = Path(run_dir) / CHECKPOINTS
    if not folder.is_dir():
        return []
    found = [(int(m.group(1)), p) for p in folder.iterdir() if (m := _CKPT.fullmatch(p.name))]
    return sorted(found)


# ------------------------------------------------------------------------------------------- atomic writes
def atomic_write(path: Path, data: str | bytes | list[bytes]) -> None:
    """Write `data` so that `path` is either absent, its old content, or the complete new file: a temp file in
    the same folder, fsync, rename, fsync of the folder. On any error the temp file is removed and the error
    raised (a full disk leaves no half-written file behind, and the old file intact)."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    chunks = [data.encode()] if isinstance(data, str) else [data] if isinstance(data, (bytes, bytearray)) else data
    try:
        with open(tmp, "wb") as fh:
            for chunk in chunks:
                fh.write(chunk)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    fsync_dir(path.parent)


def fsync_dir(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def remove_stale_temps(folder: Path) -> None:
    """Delete the temp files a killed writer left in `folder` (they never carry a final name)."""
    for tmp in Path(folder).glob(".*.tmp-*"):
        tmp.unlink(missing_ok=True)


# ------------------------------------------------------------------------------------------ attempts record
def record(run_dir: Path, event: str, **fields) -> None:
    """Append one event (submitted | start | end) to the run's attempts record, fsynced."""
    path = Path(run_dir) / ATTEMPTS
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as fh:
        fh.write(json.dumps({"event": event, "time": time.time(), **fields}) + "\n")
        fh.flush()
        os.fsync(fh.fileno())


def read_attempts(run_dir: Path) -> list[dict]:
    """Every event of the run's attempts record, in order (a torn last line is skipped)."""
    from zbpscale.metrics import read_jsonl

    return read_jsonl(Path(run_dir) / ATTEMPTS)


def last_submitted(attempts: list[dict]) -> dict:
    """The run's latest `submitted` event (job id, executor, logs), or {} if it was never submitted."""
    return next((a for a in reversed(attempts) if a.get("event") == "submitted"), {})


def count_ends(attempts: list[dict], why: str) -> int:
    """Attempts that ended for `why`, since the run was last submitted with --retry (which resets the count)."""
    since = max((a.get("time", 0) for a in attempts if a.get("event") == "submitted" and a.get("retry")),
                default=0)
    return sum(1 for a in attempts if a.get("event") == "end" and a.get("why") == why and a.get("time", 0) >= since)


def requeue_counts(attempts: list[dict]) -> tuple[int, int, int]:
    """(timeouts, preemptions, failures) since the last --retry, as status's T/P/F column shows them: failures
    are the attempts that crashed, hung or failed."""
    return (count_ends(attempts, "timeout"), count_ends(attempts, "preempted"),
            sum(count_ends(attempts, why) for why in ("crashed", "hung", "failed")))


@dataclass(frozen=True)
class Retry:
    """The retry decision for an interrupted attempt: `ok` to requeue; `reason` for the attempts record."""

    ok: bool
    reason: str


def retry_decision(attempts: list[dict], why: str, bounds: dict[str, int], how: str = "checkpointed") -> Retry:
    """May an attempt that ended for `why` (timeout | preempted | crashed) be requeued? Each kind is counted
    against its own bound, bounds = {"timeout": max_timeouts, "preempted": max_preemptions, "crashed":
    max_crashes}; a hang counts as a crash. The attempt being decided is not in `attempts` yet. Both executors
    decide with this."""
    kinds = ("crashed", "hung") if why in ("crashed", "hung") else (why,)
    why = "crashed" if why == "hung" else why
    used, bound = sum(count_ends(attempts, k) for k in kinds) + 1, bounds[why]
    if used > bound:
        return Retry(False, f"{why} {used} times, over max_{_plural(why)}={bound}")
    return Retry(True, f"{how}; requeue {used}/{bound}")


def _plural(why: str) -> str:
    return {"timeout": "timeouts", "preempted": "preemptions", "crashed": "crashes"}[why]


def log_path(run_dir: Path, submitted: dict, job: str) -> Path:
    """The job's log file (the local queue's `<job>_0.log`, submitit's `<job>_0_log.out`), else its folder."""
    logs = Path(submitted.get("logs") or Path(run_dir) / LOGS)
    for name in (f"{job}_0.log", f"{job}_0_log.out", f"{job}_0_log.err"):
        if (logs / name).exists():
            return logs / name
    found = sorted(logs.glob(f"{job}_*"), key=lambda p: p.stat().st_mtime) if logs.is_dir() else []
    return found[-1] if found else logs


# ---------------------------------------------------------------------------------------------- processes
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


def lock_run_folder(run_dir: Path):
    """The run folder's trainer lock (try_lock): one trainer per run folder."""
    return try_lock(Path(run_dir) / TRAINER_LOCK)


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


def age(seconds: float) -> str:
    return f"{seconds:.0f}s" if seconds < 120 else f"{seconds / 60:.0f}m" if seconds < 7200 else f"{seconds / 3600:.1f}h"


def read_json(path: Path) -> dict:
    try:
        value = json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return {}
    return value if isinstance(value, dict) else {}


def tail_records(path: Path, kinds: tuple[str, ...], max_bytes: int = 1 << 20) -> dict[str, dict]:
    """The last record of each kind in a JSONL file, reading backwards from the end in growing blocks."""
    found: dict[str, dict] = {}
    try:
        size = Path(path).stat().st_size
    except OSError:
        return found
    block = 16384
    with open(path, "rb") as fh:
        while True:
            start = max(0, size - block)
            fh.seek(start)
            lines = fh.read(size - start).splitlines()
            if start > 0:
                lines = lines[1:]  # the first line may be cut
            for line in reversed(lines):
                kind = _kind_of(line)
                if kind not in kinds or kind in found:
                    continue  # decode only the lines asked for
                try:
                    found[kind] = json.loads(line)
                except (json.JSONDecodeError, UnicodeDecodeError):
                    continue  # a torn line
            if len(found) == len(kinds) or start == 0 or block >= max_bytes:
                return found
            block *= 4


def _kind_of(line: bytes) -> str | None:
    """The `kind` of a metrics line without decoding it (MetricsLog writes `{"kind": "...", ...` first)."""
    if not line.startswith(b'{"kind": "'):
        return None
    end = line.find(b'"', 10)
    return line[10:end].decode() if end > 0 else None
