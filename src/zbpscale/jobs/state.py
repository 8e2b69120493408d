"""A run's state: its folder joined with the scheduler's view of its latest job, decided in one place.

Two vocabularies, each used verbatim by status, submit's plan, submit --wait, collect and plot:
  State   what a run is in (STATES; `zbpscale status`'s state column, collect's `state` field);
  Action  what submit does with it (ACTIONS; the plan's action column): new, resume, retry, or leave it alone.
An attempt's end (`why`, attempts.py: completed, timeout, ...) and the trainer's end record (metrics.py) say how
one attempt ended; a run is `complete` when its trainer wrote COMPLETE.

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
  broken                       leave: config.json must be fixed or the folder moved aside
"""

from __future__ import annotations

import re
import signal
import socket
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Literal

from zbpscale.errors import BrokenRunFolder, ConfigError, ZbpError
from zbpscale.files import read_json
from zbpscale.jobs.attempts import last_end, last_submitted, read_attempts, record
from zbpscale.jobs.executors.base import DRIVER_DOWN, NEVER_REASON, UNKNOWN, JobView
from zbpscale.jobs.layout import RunFolder
from zbpscale.proc import pid_alive
from zbpscale.tables import age
from zbpscale.train.metrics import HEARTBEAT_S, tail_records

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


def check_config(folder: RunFolder) -> None:
    """A BrokenRunFolder when the trainer would refuse the run's config.json: not JSON, or not a valid config
    by the trainer's own validation (TrainConfig.from_dict). A missing config is not broken (a new run)."""
    from zbpscale.train.schema import TrainConfig

    config = folder.read_config()
    if config is not None:
        try:
            TrainConfig.from_dict(config, source=str(folder.config))
        except ConfigError as err:
            raise BrokenRunFolder(str(err.args[0]), hint="fix it, or move the run folder aside to start anew") from None


STALL_S = 900.0
"""A running job silent this long is stalled, for a run without a hang bound (step_timeout_s 0), and for any run
before its attempt's first step (set-up, the estimator's compile)."""


def step_timeout(folder: RunFolder) -> float:
    """The run's step_timeout_s, from its config.json (migrated); 0 (no bound) without a config the trainer takes."""
    from zbpscale.train.schema import TrainConfig

    try:
        return TrainConfig.from_dict(folder.read_config() or {}).step_timeout_s
    except ZbpError:
        return 0.0


def stall_bound(folder: RunFolder) -> float:
    """How long a running trainer may be silent before status calls it stalled: its step_timeout_s (past which
    its watchdog, or the sentinel, ends it), else STALL_S."""
    return step_timeout(folder) or STALL_S


def run_state(run_dir: Path, attempts: list[dict], job: JobView = JobView(), *, now: float | None = None,
              stall_after_s: float | None = None) -> RunState:
    """Decide a run's state from its folder and the scheduler's view of its latest job; `stall_after_s`: how long
    a running trainer may be silent (None: stall_bound, its own step_timeout_s)."""
    folder, now = RunFolder(run_dir), time.time() if now is None else now
    if folder.complete.exists():
        return RunState("complete", next="leave")
    sub = last_submitted(attempts)
    job_id = sub.get("job_id", "")
    try:
        check_config(folder)
    except BrokenRunFolder as err:
        if not job.live:
            return RunState("broken", str(err), next="leave")
    if job.state == UNKNOWN:
        return RunState("unknown", job.reason, next="leave")
    if job.state == "COMPLETING":  # its processes are ending (on a lost node: until SLURM calls the node down)
        return RunState("running", "its job is ending (COMPLETING)", next="leave")
    if job.state == "RUNNING":
        starts = [a["time"] for a in attempts if a.get("event") == "start" and a.get("job_id") == job_id]
        beat = read_json(folder.heartbeat).get("time")
        started = starts[-1] if starts else now  # silent since the heartbeat, or since the start (start-up counts)
        last_sign = beat if beat is not None and beat >= started else started
        bound = stall_after_s
        if bound is None:  # the run's own: set-up and the estimator's compile are no steps; a beat every few s
            bound = max(stall_bound(folder), STALL_S if last_sign == started else 2 * HEARTBEAT_S)
        if now - last_sign > bound:
            return RunState("stalled", f"no heartbeat for {age(now - last_sign)} (stalled after {age(bound)})",
                            next="leave")
        return RunState("running", next="leave")
    if job.state == DRIVER_DOWN:
        return RunState("stopped", "the local queue's driver is not running: submit again to go on", next="leave")
    if job.live and job.reason == NEVER_REASON:  # submit cancels it and queues a new job
        return RunState("failed", "its data-prep job failed, so it would wait for ever (DependencyNeverSatisfied)",
                        job.log)
    if job.live:
        return RunState("queued", job.reason if job.source == "submit" else "", next="leave")
    end = last_end(attempts, job_id)
    log = lambda: end.get("log") or str(folder.log_path(sub, job_id))  # noqa: E731
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


def direct_state(folder: RunFolder, now: float, stall_after_s: float | None) -> RunState:
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
        if "time" in beat and now - beat["time"] <= (stall_after_s if stall_after_s is not None else
                                                     stall_bound(folder)):
            return RunState("running", next="leave")
    how = stopped.get("status", "no end record")
    reason = ("" if how == "failed" else f"{how}: ") + f"{stopped.get('reason', '')} (run directly, no job)"
    if stopped.get("status") in ("diverged", "failed"):
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
    if not starts or last_end(attempts, job_id) or RunFolder(run_dir).complete.exists():
        return attempts
    reason = (job.words or f"job ended {job.state}") + (f", {job.how}" if job.how else "")
    end = {"job_id": job_id, "executor": sub.get("executor", ""),
           "why": "cancelled" if job.state == "CANCELLED" else "crashed", "reason": reason,
           "log": str(RunFolder(run_dir).log_path(sub, job_id)), "source": job.source}
    record(run_dir, "end", **end)
    return read_attempts(run_dir)


def log_tail(path: Path, lines: int = 40) -> list[str]:
    try:
        with open(path, "rb") as fh:
            fh.seek(0, 2)
            size = fh.tell()
            fh.seek(max(0, size - 65536))
            return fh.read().decode(errors="replace").splitlines()[-lines:]
    except OSError:
        return []


def refine_reason(reason: str, log) -> str:
    """Sharpen a vague reason from the log's tail: an OOM, or the last line of a Python traceback."""
    tail = log_tail(Path(log), 60) if log else []
    text = "\n".join(tail)
    if "CUDA out of memory" in text or "OutOfMemoryError" in text:
        return "out of memory (CUDA)" + (f"; {reason}" if reason else "")
    if reason and not (reason.startswith(("job ended", "killed by")) or re.fullmatch(r"exit status \d+", reason)):
        return reason  # already says why
    killed = _srun_killed(tail)
    if killed:  # what sacct would have said, from srun's own line (accounting down or lagging)
        return killed + (f" ({reason})" if reason else "")
    if "Traceback (most recent call last)" in text:
        last = next((ln for ln in reversed(tail) if ln.strip() and not ln.startswith(" ")), "")
        return f"{last.strip()}" + (f" ({reason})" if reason else "")
    return reason or "ended without a reason on record"


_SIGNALS = {signal.strsignal(sig): sig for sig in signal.Signals if signal.strsignal(sig)}


def _srun_killed(tail: list[str]) -> str:
    """srun's word on a task that a signal ended (`srun: error: node1: task 0: Killed`), as sacct words it: "a
    task was killed by signal 9 (SIGKILL) on node1"; "" when the log has none."""
    for line in reversed(tail):
        m = re.match(r"srun: error: (\S+): tasks? [\d,\-]+: (.+?)(?: \(core dumped\))?$", line.strip())
        if m and m.group(2) in _SIGNALS:
            sig = _SIGNALS[m.group(2)]
            return f"a task was killed by signal {sig.value} ({sig.name}) on {m.group(1)}"
    return ""


def refined(decided: RunState) -> RunState:
    """The state, with a failed run's reason sharpened from its log (refine_reason), as status shows it."""
    return replace(decided, reason=refine_reason(decided.reason, decided.log)) if decided.state == "failed" else decided


def sweep_states(folder: Path, *, stall_after_s: float | None = None) -> dict[str, RunState]:
    """The state of every run folder in a sweep folder, as status decides it (one look at the scheduler; a
    failed run's reason sharpened from its log)."""
    from zbpscale.jobs import executors

    run_dirs = [p for p in sorted(folder.iterdir()) if RunFolder(p).config.exists()] if folder.is_dir() else []
    attempts = {p.name: read_attempts(p) for p in run_dirs}
    now = time.time()
    view = executors.view_all(folder.parent, attempts, now=now)
    states = {}
    for p in run_dirs:
        states[p.name] = refined(decide(p, attempts[p.name], view.of(last_submitted(attempts[p.name]).get("job_id")),
                                        now=now, stall_after_s=stall_after_s))
    return states


def decide(run_dir: Path, attempts: list[dict], job: JobView, **kwargs) -> RunState:
    """reconcile, then run_state: what status shows and submit acts on."""
    return run_state(run_dir, reconcile(run_dir, attempts, job), job, **kwargs)

