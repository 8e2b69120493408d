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

from zbpscale.errors import BrokenRunFolder
from zbpscale.slurm import ALIVE

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


# ---------------------------------------------------------------------------------------------- the state
# A run's state, as `zbpscale status` shows it and `submit` acts on it. What a plain submit does with each:
#   complete                     skip
#   running, stalled, queued     leave alone (its job is live)
#   stopped                      resume; leave alone when its local-queue job waits for the driver (submit
#                                starts the driver again)
#   cancelled, new               resume (from the last checkpoint, or from step 0)
#   failed                       resume when the job died without deciding (killed, node lost: a crash);
#                                leave alone when it decided to fail (bounds spent, diverged, a mistake):
#                                `submit --retry` after fixing the cause
#   broken                       leave alone: config.json must be fixed or the folder moved aside
STATES = ("running", "stalled", "queued", "stopped", "new", "cancelled", "failed", "broken", "complete")
DRIVER_DOWN = "DRIVER_DOWN"  # a local-queue job whose driver is not running (its entry still waits)
SLURM_REASONS = {"OUT_OF_MEMORY": "out of memory (the OOM killer)", "NODE_FAIL": "node failure",
                 "CANCELLED": "cancelled in SLURM (scancel or an admin)", "BOOT_FAIL": "node boot failure",
                 "TIMEOUT": "time limit reached without a checkpoint", "DEADLINE": "deadline reached"}


@dataclass(frozen=True)
class RunState:
    """A run's state (one of STATES), why in one line, the log to read, and what a plain submit does next:
    `skip`, `wait` (leave alone), `resume` (new when there is no checkpoint), `retry` (only with --retry) or
    `fix` (the folder is broken)."""

    state: str
    reason: str = ""
    log: str = ""
    next: str = "resume"


def run_state(run_dir: Path, attempts: list[dict], job_state: str = "", *, now: float | None = None,
              stall_after_s: float = 900.0) -> RunState:
    """Decide a run's state from its folder and the scheduler's word on its latest job (`job_state`, squeue's
    spelling, or DRIVER_DOWN; "" when unknown). The one place where this is decided: status shows it, submit
    acts on it, `submit --wait` prints it."""
    folder, now = RunFolder(run_dir), time.time() if now is None else now
    if folder.complete.exists():
        return RunState("complete", next="skip")
    sub = last_submitted(attempts)
    job, executor = sub.get("job_id", ""), sub.get("executor", "")
    try:
        folder.read_config()
    except BrokenRunFolder as err:
        if job_state not in ALIVE:
            return RunState("broken", str(err), next="fix")
    if job_state == "RUNNING":
        starts = [a["time"] for a in attempts if a.get("event") == "start" and a.get("job_id") == job]
        beat = read_json(folder.heartbeat).get("time")
        started = starts[-1] if starts else now  # silent since the heartbeat, or since the start (start-up counts)
        last_sign = beat if beat is not None and beat >= started else started
        if now - last_sign > stall_after_s:
            return RunState("stalled", f"no heartbeat for {age(now - last_sign)}", next="wait")
        return RunState("running", next="wait")
    if job_state in ALIVE:
        return RunState("queued", next="wait")
    if job_state == DRIVER_DOWN:
        return RunState("stopped", "the local queue's driver is not running: submit again to go on", next="wait")
    end = last_end(attempts, job)
    slurm_says = SLURM_REASONS.get(job_state) if executor == "slurm" else None
    log = lambda: end.get("log") or str(log_path(run_dir, sub, job))  # noqa: E731
    if end.get("why") == "failed" and not slurm_says:
        return RunState("failed", end.get("reason", ""), log(), next="retry")
    if end.get("why") == "cancelled" and not slurm_says:
        return RunState("cancelled", end.get("reason", ""))
    if end.get("why") == "crashed":  # killed and not requeued (on SLURM: found by reconcile())
        return RunState("failed", end.get("reason", ""), log())
    if job and (not end or slurm_says):  # gone without a record, and SLURM's accounting cannot say why
        reason = slurm_says or f"job ended ({job_state or 'state unknown'}) without a record"
        return RunState("cancelled" if job_state == "CANCELLED" else "failed", reason,
                        "" if job_state == "CANCELLED" else log())
    if job:
        return RunState("stopped", f"{end.get('why')}: {end.get('reason', '')}; nothing queued")
    own = tail_records(folder.metrics, ("start", "end"))
    if not own:
        return RunState("new")
    # Trained directly (python -m zbpscale.train), not through a job: the run's own records say.
    started, stopped = own.get("start", {}), own.get("end", {})
    beat = read_json(folder.heartbeat).get("time")
    if not (stopped and stopped.get("time", 0) >= started.get("time", 0)):
        if beat is not None and now - beat <= stall_after_s:
            return RunState("running", next="wait")
    reason = f"{stopped.get('status', 'no end record')}: {stopped.get('reason', '')} (run directly, no job)"
    if stopped.get("status") == "diverged":
        return RunState("failed", reason, next="retry")
    return RunState("stopped", reason)


def reconcile(run_dir: Path, attempts: list[dict], job_state: str, how: str = "") -> list[dict]:
    """Give a SLURM attempt that died without a word (kill -9, the OOM killer, a lost node) the `end` record it
    could not write, from the scheduler's account (`how`: its exit in words), marked `"source": "sacct"`;
    returns the attempts with it. A crash counts against no bound here: a plain submit resumes the run.
    Only when SLURM says the job has ended and its latest attempt started after its latest end."""
    sub = last_submitted(attempts)
    job = sub.get("job_id", "")
    if sub.get("executor") != "slurm" or not job_state or job_state in ALIVE or job_state == "COMPLETED":
        return attempts
    starts = [a for a in attempts if a.get("event") == "start" and a.get("job_id") == job]
    if not starts or last_end(attempts, job) or (Path(run_dir) / COMPLETE).exists():
        return attempts
    reason = (SLURM_REASONS.get(job_state) or f"job ended {job_state}") + (f", {how}" if how else "")
    end = {"job_id": job, "executor": "slurm", "why": "cancelled" if job_state == "CANCELLED" else "crashed",
           "reason": reason, "log": str(log_path(run_dir, sub, job)), "source": "sacct"}
    record(run_dir, "end", **end)
    return read_attempts(run_dir)


def last_end(attempts: list[dict], job: str) -> dict:
    """The `end` record of the job's latest attempt, {} if that attempt has none. A requeued SLURM job keeps its
    id, so an end before the job's latest start belongs to an earlier attempt."""
    starts = [a.get("time", 0) for a in attempts if a.get("event") == "start" and a.get("job_id") == job]
    since = starts[-1] if starts else 0
    return next((a for a in reversed(attempts) if a.get("event") == "end" and a.get("job_id") == job
                 and a.get("time", 0) >= since), {})


def log_path(run_dir: Path, submitted: dict, job: str) -> Path:
    """The job's log file (the local queue's `<job>_0.log`, submitit's `<job>_0_log.out`), else its folder."""
    logs = Path(submitted.get("logs") or Path(run_dir) / LOGS)
    for name in (f"{job}_0.log", f"{job}_0_log.out", f"{job}_0_log.err"):
        if (logs / name).exists():
            return logs / name
    found = sorted(logs.glob(f"{job}_*"), key=lambda p: p.stat().st_mtime) if logs.is_dir() else []
    return found[-1] if found else logs


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
