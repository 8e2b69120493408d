"""The run folder and a run's lifecycle, owned in one torch-free place.

Every part of zbpscale that touches a run (the trainer, both executors, submit, status, cancel, collect) takes
from here where a file lives, what an exit code or a run name means, how a file is written atomically, how an
attempt is recorded and whether an interrupted attempt may be retried.

    <run_dir>/config.json      the resolved TrainConfig (written by submit or the trainer, checked on resume)
              plan.json        parameters, GPUs and planned GPU-hours (submit; read by status)
              metrics.jsonl    the trainer's records (zbpscale.metrics)
              heartbeat.json   step, tokens, time, host, pid, rewritten every few seconds
              attempts.jsonl   one event per line: submitted | start | end (why, reason, log)
              checkpoints/     ckpt_<step>.pt, written atomically, the newest K kept
              logs/            the executor's own stdout/stderr files
              COMPLETE         the trainer finished every step
              CANCEL           `zbpscale cancel` asked the job to stop; the next checkpoint ends it

Run names are `{size}-{arm}` plus `-s{seed}` for seeds other than 0; sizes and arms never contain '-'.
"""

from __future__ import annotations

import json
import os
import re
import time
from dataclasses import dataclass
from pathlib import Path

CONFIG = "config.json"
PLAN = "plan.json"
METRICS = "metrics.jsonl"
HEARTBEAT = "heartbeat.json"
ATTEMPTS = "attempts.jsonl"
CHECKPOINTS = "checkpoints"
LOGS = "logs"
COMPLETE = "COMPLETE"
CANCEL = "CANCEL"

# Exit codes of a training process (python -m zbpscale.train, a local-queue rank).
EXIT_OK = 0
EXIT_USAGE = 2  # a user's mistake (ZbpError): retrying cannot help
EXIT_DIVERGED = 3  # non-finite loss or gradient norm: stopped before the optimizer update
EXIT_REQUEUE = 75  # checkpointed on request (a signal): run me again to continue

# Why an attempt ended (`why` of an `end` event in attempts.jsonl).
ENDS = ("completed", "timeout", "preempted", "crashed", "failed", "cancelled")

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
        from zbpscale.errors import BrokenRunFolder

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


@dataclass(frozen=True)
class Retry:
    """The retry decision for an interrupted attempt: `ok` to requeue; `reason` for the attempts record."""

    ok: bool
    reason: str


def retry_decision(attempts: list[dict], why: str, bounds: dict[str, int], how: str = "checkpointed") -> Retry:
    """May an attempt that ended for `why` (timeout | preempted | crashed) be requeued? Each kind is counted
    against its own bound, bounds = {"timeout": max_timeouts, "preempted": max_preemptions, "crashed":
    max_crashes}; the attempt being decided is not in `attempts` yet. Both executors decide with this."""
    used, bound = count_ends(attempts, why) + 1, bounds[why]
    if used > bound:
        return Retry(False, f"{why} {used} times, over max_{_plural(why)}={bound}")
    return Retry(True, f"{how}; requeue {used}/{bound}")


def _plural(why: str) -> str:
    return {"timeout": "timeouts", "preempted": "preemptions", "crashed": "crashes"}[why]
