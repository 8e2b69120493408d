"""A run's state: its folder joined with the scheduler's view of its latest job, decided in one place.

`zbpscale status` shows it, `submit` acts on it, `submit --wait` prints it, all from the same `run_state`.
What a plain submit does with each state:
  complete                     skip
  running, stalled, queued     leave alone (its job is live)
  unknown                      leave alone (the scheduler does not answer: the job may be alive)
  stopped                      resume; leave alone when its local-queue job waits for the driver (submit
                               starts the driver again)
  cancelled, new               resume (from the last checkpoint, or from step 0)
  failed                       resume when the job died without deciding (killed, node lost: a crash, or its
                               prep job failed); leave alone when it decided to fail (bounds spent, diverged, a
                               mistake): `submit --retry` after fixing the cause
  broken                       leave alone: config.json must be fixed or the folder moved aside
"""

from __future__ import annotations

import socket
import time
from dataclasses import dataclass
from pathlib import Path

from zbpscale.errors import BrokenRunFolder, ConfigError
from zbpscale.executors.base import DRIVER_DOWN, NEVER_REASON, UNKNOWN, JobView
from zbpscale.runfolder import (
    COMPLETE, RunFolder, age, last_submitted, log_path, pid_alive, read_attempts, read_json, record, tail_records,
)

STATES = ("running", "stalled", "queued", "unknown", "stopped", "new", "cancelled", "failed", "broken", "complete")


@dataclass(frozen=True)
class RunState:
    """A run's state (one of STATES), why in one line, the log to read, and what a plain submit does next:
    `skip`, `wait` (leave alone), `resume` (new when there is no checkpoint), `retry` (only with --retry) or
    `fix` (the folder is broken)."""

    state: str
    reason: str = ""
    log: str = ""
    next: str = "resume"


def check_config(folder: RunFolder) -> None:
    """A BrokenRunFolder when the trainer would refuse the run's config.json: not JSON, or not a valid config
    by the trainer's own validation (TrainConfig.from_dict). A missing config is not broken (a new run)."""
    from zbpscale.schema import TrainConfig

    config = folder.read_config()
    if config is not None:
        try:
            TrainConfig.from_dict(config, source=str(folder.config))
        except ConfigError as err:
            raise BrokenRunFolder(str(err.args[0]), hint="fix it, or move the run folder aside to start anew") from None


def run_state(run_dir: Path, attempts: list[dict], job: JobView = JobView(), *, now: float | None = None,
              stall_after_s: float = 900.0) -> RunState:
    """Decide a run's state from its folder and the scheduler's view of its latest job."""
    folder, now = RunFolder(run_dir), time.time() if now is None else now
    if folder.complete.exists():
        return RunState("complete", next="skip")
    sub = last_submitted(attempts)
    job_id = sub.get("job_id", "")
    try:
        check_config(folder)
    except BrokenRunFolder as err:
        if not job.live:
            return RunState("broken", str(err), next="fix")
    if job.state == UNKNOWN:
        return RunState("unknown", job.reason, next="wait")
    if job.state == "COMPLETING":  # its processes are ending (on a lost node: until SLURM calls the node down)
        return RunState("running", "its job is ending (COMPLETING)", next="wait")
    if job.state == "RUNNING":
        starts = [a["time"] for a in attempts if a.get("event") == "start" and a.get("job_id") == job_id]
        beat = read_json(folder.heartbeat).get("time")
        started = starts[-1] if starts else now  # silent since the heartbeat, or since the start (start-up counts)
        last_sign = beat if beat is not None and beat >= started else started
        if now - last_sign > stall_after_s:
            return RunState("stalled", f"no heartbeat for {age(now - last_sign)}", next="wait")
        return RunState("running", next="wait")
    if job.state == DRIVER_DOWN:
        return RunState("stopped", "the local queue's driver is not running: submit again to go on", next="wait")
    if job.live and job.reason == NEVER_REASON:  # submit cancels it and queues a new job
        return RunState("failed", "its data-prep job failed, so it would wait for ever (DependencyNeverSatisfied)",
                        job.log)
    if job.live:
        return RunState("queued", job.reason if job.source == "submit" else "", next="wait")
    end = last_end(attempts, job_id)
    log = lambda: end.get("log") or str(log_path(run_dir, sub, job_id))  # noqa: E731
    if end.get("why") == "failed" and not job.words:
        return RunState("failed", end.get("reason", ""), log(), next="retry")
    if end.get("why") == "cancelled" and not job.words:
        return RunState("cancelled", end.get("reason", ""))
    if end.get("why") in ("crashed", "hung"):  # killed, lost a peer, or hung, and not requeued
        return RunState("failed", end.get("reason", ""), log())
    if job_id and (not end or job.words):  # gone without a record, and the scheduler cannot say why
        reason = job.words or f"job ended ({job.state or 'state unknown'}) without a record"
        return RunState("cancelled" if job.state == "CANCELLED" else "failed", reason,
                        "" if job.state == "CANCELLED" else log())
    if job_id:
        return RunState("stopped", f"{end.get('why')}: {end.get('reason', '')}; nothing queued")
    return direct_state(folder, now, stall_after_s)


def direct_state(folder: RunFolder, now: float, stall_after_s: float) -> RunState:
    """A run trained directly (python -m zbpscale.train), not through a job: its own records say. A trainer
    that is gone without an end record is failed at once when it ran on this host (its heartbeat names the
    process), else once its heartbeat is older than `stall_after_s`."""
    own = tail_records(folder.metrics, ("start", "end"))
    if not own:
        return RunState("new")
    started, stopped = own.get("start", {}), own.get("end", {})
    beat = read_json(folder.heartbeat)
    if not (stopped and stopped.get("time", 0) >= started.get("time", 0)):
        here = beat.get("host") == socket.gethostname() and beat.get("pid") and beat.get("pid_start")
        if here and not pid_alive(beat["pid"], beat["pid_start"]):
            return RunState("failed", f"the trainer (pid {beat['pid']}) is gone without an end record (run directly, "
                                      "no job)")
        if "time" in beat and now - beat["time"] <= stall_after_s:
            return RunState("running", next="wait")
    reason = f"{stopped.get('status', 'no end record')}: {stopped.get('reason', '')} (run directly, no job)"
    if stopped.get("status") == "diverged":
        return RunState("failed", reason, next="retry")
    return RunState("stopped", reason)


def reconcile(run_dir: Path, attempts: list[dict], job: JobView) -> list[dict]:
    """Give an attempt that died without a word (kill -9, the OOM killer, a lost node) the `end` record it could
    not write, from the scheduler's account of its job (marked with that account's `source`); returns the
    attempts with it. A crash counts against no bound here: a plain submit resumes the run. Only when the
    scheduler's own account (squeue or sacct) says the job ended, and its latest attempt started after its
    latest end."""
    sub = last_submitted(attempts)
    job_id = sub.get("job_id", "")
    if job.source not in ("squeue", "sacct") or job.live or job.state in ("", "COMPLETED"):
        return attempts
    starts = [a for a in attempts if a.get("event") == "start" and a.get("job_id") == job_id]
    if not starts or last_end(attempts, job_id) or (Path(run_dir) / COMPLETE).exists():
        return attempts
    reason = (job.words or f"job ended {job.state}") + (f", {job.how}" if job.how else "")
    end = {"job_id": job_id, "executor": sub.get("executor", ""),
           "why": "cancelled" if job.state == "CANCELLED" else "crashed", "reason": reason,
           "log": str(log_path(run_dir, sub, job_id)), "source": job.source}
    record(run_dir, "end", **end)
    return read_attempts(run_dir)


def last_end(attempts: list[dict], job: str) -> dict:
    """The `end` record of the job's latest attempt, {} if that attempt has none. A requeued SLURM job keeps its
    id, so an end before the job's latest start belongs to an earlier attempt."""
    starts = [a.get("time", 0) for a in attempts if a.get("event") == "start" and a.get("job_id") == job]
    since = starts[-1] if starts else 0
    return next((a for a in reversed(attempts) if a.get("event") == "end" and a.get("job_id") == job
                 and a.get("time", 0) >= since), {})


def decide(run_dir: Path, attempts: list[dict], job: JobView, **kwargs) -> RunState:
    """reconcile, then run_state: what status shows and submit acts on."""
    return run_state(run_dir, reconcile(run_dir, attempts, job), job, **kwargs)

