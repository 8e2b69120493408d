"""A run's state: its folder joined with the scheduler's view of its latest job, decided in one place.

Two vocabularies, each used verbatim by status, submit's plan, submit --wait, collect and plot:
  State   what a run is in (STATES; `zbpscale status`'s state column, collect's `state` field);
  Action  what submit does with it (ACTIONS; the plan's action column): new, resume, retry, or leave it alone.
How one attempt ended is another word (`why`, run/history.py: completed, timeout, ...); a run is `complete` when
its trainer wrote COMPLETE, and a grid run of a tuning sweep also when its trainer stopped it at a non-finite loss
(its lr is too high: an answer, `answered_too_high`).

Deciding reads nothing and writes nothing: `decide` is a function of one look at the run's folder (a Snapshot,
run/snapshot.py: each file read at most once) and the scheduler's view of its job. An attempt that died without a
word (kill -9, a lost node) is given the end it could not write from the scheduler's account (`unheard_end`) in
memory; only submit records it (`record_unheard`), under the sweep's lock, so status, collect and a dry run never
write.

What a plain submit does with each state (RunState.next; `submit --retry` turns retry into an action):
  complete                     leave
  running, stalled, queued     leave (its job is live)
  unknown                      leave (the scheduler does not answer: the job may be alive)
  stopped                      resume; leave when its local-queue job waits for the driver (submit starts the
                               driver again)
  cancelled, new               resume (new when there is no checkpoint)
  failed                       resume when the job died without deciding (killed, node lost: a crash, or its
                               prep job failed); retry when it decided to fail (bounds spent, diverged, a
                               mistake): `submit --retry` after fixing the cause, else leave
  broken                       leave: config.json must be fixed or the folder moved aside (whether or not a job
                               waits for it: one that starts would stop at once; a running trainer is running)
"""

from __future__ import annotations

import math
import socket
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from zbpscale.jobs.executors.base import DRIVER_DOWN, NEVER_REASON, UNKNOWN, JobView
from zbpscale.proc import pid_alive, process_start_time, process_started_at
from zbpscale.run.folder import RunFolder
from zbpscale.run.history import End, History
from zbpscale.run.records import TRAINER_BEAT_S
from zbpscale.run.snapshot import Snapshot, record
from zbpscale.tables import age

State = Literal["running", "stalled", "queued", "unknown", "stopped", "new", "cancelled", "failed", "broken",
                "complete"]
STATES: tuple[State, ...] = State.__args__
IN_PROGRESS: tuple[State, ...] = ("running", "stalled", "queued")
"""A job holds the run: its numbers are still changing."""

Action = Literal["new", "resume", "retry", "leave"]
ACTIONS: tuple[Action, ...] = Action.__args__
SUBMITS: tuple[Action, ...] = ("new", "resume", "retry")
"""The actions that submit a job."""

Next = Literal["resume", "retry", "leave"]


@dataclass(frozen=True)
class RunState:
    """A run's state, why in one line, the log to read, and what a plain submit does next (`resume`: new when
    there is no checkpoint; `retry`: only with --retry, else leave)."""

    state: State
    reason: str = ""
    log: str = ""
    next: Next = "resume"

    def action(self, folder: RunFolder, *, retry: bool = False) -> Action:
        """What submit does with the run, in ACTIONS' words."""
        if self.next == "resume":
            return "resume" if folder.list_checkpoints() else "new"
        if self.next == "retry":
            return "retry" if retry else "leave"
        return "leave"


STALL_S = 900.0
"""A running job silent this long is stalled, for a run without a hang bound (step_timeout_s 0), and for any run
before its attempt's first step (set-up, the estimator's compile)."""


def stall_bound(run: Snapshot) -> float:
    """How long a running trainer may be silent before status calls it stalled: its step_timeout_s (past which
    its watchdog, or the sentinel, ends it), else STALL_S."""
    return run.step_timeout or STALL_S


def decide(run: Snapshot, job: JobView = JobView(), *, now: float | None = None,
           stall_after_s: float | None = None) -> RunState:
    """The run's state from one look at its folder and the scheduler's view of its latest job, an attempt that
    died without a word given the end the scheduler's account gives it (in memory, `heard`): what status and
    collect show and submit acts on. `stall_after_s`: how long a running trainer may be silent (None: stall_bound,
    its own step_timeout_s). Reads nothing but the snapshot, writes nothing."""
    now = time.time() if now is None else now
    history = heard(run, job)
    if run.complete:
        return RunState("complete", next="leave")
    sub, job_id = history.submitted, history.job_id
    if run.broken and job.state not in ("RUNNING", "COMPLETING"):  # a running trainer read its config when it
        return RunState("broken", run.broken, next="leave")  # started; a job that waits would start on one refused
    if job.state == UNKNOWN:
        return RunState("unknown", job.reason, next="leave")
    if job.state == "COMPLETING":  # its processes are ending (on a lost node: until SLURM calls the node down)
        return RunState("running", "its job is ending (COMPLETING)", next="leave")
    if job.state == "RUNNING":
        beat = run.heartbeat.get("time")
        started = history.last_start().get("time", now)  # silent since the beat, or the start (start-up counts)
        last_sign = beat if beat is not None and beat >= started else started
        bound = stall_after_s
        if bound is None:  # the run's own: set-up and the estimator's compile are no steps; a beat every few s
            bound = max(stall_bound(run), STALL_S if last_sign == started else 2 * TRAINER_BEAT_S)
        if now - last_sign > bound:
            return RunState("stalled", f"no heartbeat for {age(now - last_sign)} (stalled after {age(bound)})",
                            next="leave")
        return RunState("running", next="leave")
    if job.state == DRIVER_DOWN:
        return RunState("stopped", "the local queue's driver is not running: submit again to go on", next="leave")
    if job.live and job.reason == NEVER_REASON:  # submit cancels it and queues a new job
        return RunState("failed", "its data-prep job failed, so it would wait for ever (DependencyNeverSatisfied)",
                        job.log)
    if job.live:  # the scheduler's reason when it is news (a node down or drained, a limit), not a turn in line
        said = job.reason if job.source == "submit" or job.reason not in WAITING_IN_LINE else ""
        return RunState("queued", said, next="leave")
    end = history.last_end()
    log = lambda: str(run.folder.here(end["log"]) if end.get("log") else run.folder.log_path(sub, job_id))  # noqa: E731
    if end.get("why") == "failed" and not job.words:
        if answered_too_high(run):
            stopped = run.own["end"]
            return RunState("complete", f"its lr is too high, an answer of its grid (the trainer stopped it at step "
                                        f"{stopped.get('step')}: {stopped.get('reason', 'diverged')})", next="leave")
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
    return direct_state(run, now, stall_after_s)


def answered_too_high(run: Snapshot) -> bool:
    """A grid run of a tuning sweep whose trainer stopped it at a non-finite loss (its latest end record, after its
    latest start, says diverged): its grid's answer 'lr too high' (jobs/tuning.py's `answer`), which it is done
    giving: complete, not a failure to retry."""
    if run.plan.get("role") != "tuning":  # before its records: through the digest, they are read from the files
        return False
    stopped, started = run.own.get("end", {}), run.own.get("start", {})
    return stopped.get("why") == "diverged" and stopped.get("time", 0) >= started.get("time", 0)


WAITING_IN_LINE = ("", "None", "Priority", "Resources", "JobArrayTaskLimit", "Dependency", "BeginTime")
"""squeue's reasons of a job that simply waits its turn (BeginTime: a requeued job's short wait): not shown."""


def direct_state(run: Snapshot, now: float, stall_after_s: float | None) -> RunState:
    """A run trained directly (python -m zbpscale.train), not through a job: its own records say. A trainer
    that is gone without an end record is failed at once when it ran on this host (its heartbeat names the
    process: `trainer_gone`, for every release's heartbeat), else once its heartbeat is older than `stall_after_s`."""
    own = run.own
    if not own:
        return RunState("new")
    started, stopped = own.get("start", {}), own.get("end", {})
    beat = run.heartbeat
    if not (stopped and stopped.get("time", 0) >= started.get("time", 0)):
        if trainer_gone(beat):
            return RunState("failed", f"the trainer (pid {beat['pid']}) is gone without an end record (run directly, "
                                      "no job)")
        if "time" in beat and now - beat["time"] <= (stall_after_s if stall_after_s is not None else
                                                     stall_bound(run)):
            return RunState("running", next="leave")
    how = stopped.get("why", "no end record")
    reason = ("" if how == "failed" else f"{how}: ") + f"{stopped.get('reason', '')} (run directly, no job)"
    if stopped.get("why") in ("diverged", "failed"):
        return RunState("failed", reason, next="retry")
    return RunState("stopped", reason)


def trainer_gone(beat: dict) -> bool:
    """Whether the trainer a heartbeat names is provably gone: it ran on this host and its process is not there.
    The process is its pid and start time (`pid_start`); a heartbeat of a release before `pid_start` names the
    pid alone, whose process is gone when no process has that pid, or when the one that has it started after the
    heartbeat was written (another process reused the pid). False when it cannot tell (another host)."""
    pid = beat.get("pid")
    if not pid or beat.get("host") != socket.gethostname():
        return False
    if beat.get("pid_start") is not None:
        return not pid_alive(pid, beat["pid_start"])
    started = process_started_at(pid)
    return process_start_time(pid) is None or (started is not None and started > beat.get("time", math.inf) + 1.0)


def unheard_end(run: Snapshot, job: JobView) -> End | None:
    """The `end` event an attempt that died without a word (kill -9, the OOM killer, a lost node) could not
    write, from the scheduler's account of its job (marked with that account's `source`); None when there is none
    to add: only when the scheduler's own account (squeue or sacct) says the job ended, and its latest attempt has
    no end. Its time is the attempt's last sign of life (its heartbeat, else its start), so that the attempt's
    hours stop there. A crash counts against no bound here: a plain submit resumes the run. Writes nothing."""
    history = run.history
    if job.source not in ("squeue", "sacct") or job.live or job.state in ("", "COMPLETED"):
        return None
    if not history.last_start() or history.last_end() or run.complete:
        return None
    reason = (job.words or f"job ended {job.state}") + (f", {job.how}" if job.how else "")
    last_sign = max(history.last_start().get("time", 0), run.heartbeat.get("time", 0))
    return {"time": last_sign, "job_id": history.job_id, "executor": history.executor,
            "why": "cancelled" if job.state == "CANCELLED" else "crashed", "reason": reason,
            "log": str(run.folder.log_path(history.submitted, history.job_id)), "source": job.source}


def record_unheard(run_dir: Path, job: JobView) -> History:
    """Record the unheard end, if any, in the run's attempts (submit, under the sweep's lock: the one writer of
    what the scheduler said), from a fresh look at the folder; the history with it."""
    look = Snapshot(run_dir)
    end = unheard_end(look, job)
    if end is None:
        return look.history  # empty where attempts.jsonl cannot be read: the run is broken (Snapshot.broken)
    record(run_dir, "end", **end)
    return History.read(run_dir)


def heard(run: Snapshot, job: JobView) -> History:
    """The run's history with the unheard end, if any, in memory: what the decision and status's counts read."""
    end = unheard_end(run, job)
    return run.history if end is None else run.history.with_event({"event": "end", **end})
