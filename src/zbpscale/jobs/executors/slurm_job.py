"""The job side of a run: what every task of a run's submitit job executes, and the attempts record.

`TrainJob(run_dir, ...)` is pickled by submitit at submit time and called once per task. It exports the
distributed environment, runs the trainer on the run folder (which resumes by itself), and maps the result:
  completed          -> the job ends COMPLETED;
  checkpointed (the trainer caught USR2/SIGTERM and saved) -> rank 0 tells timeout from preemption, counts it
                        against the sweep's bounds, and requeues the job (`scontrol requeue`: the same
                        submission restarts and resumes from the run folder, not from pickled state);
  checkpointed with a CANCEL file in the run folder (`zbpscale cancel`), or because `scancel` sent SIGTERM
                        (SLURM already calls the job CANCELLED) -> the job ends, not requeued;
  bounds exhausted, diverged or an exception -> the job fails, with the reason in attempts.jsonl.
Every attempt is recorded in <run_dir>/attempts.jsonl: `submitted`, `start` and `end` events with the job id,
the executor, times and, for `end`, `why` (completed | timeout | preempted | failed | cancelled) and `reason`.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import NoReturn

from zbpscale.errors import ZbpError, report
from zbpscale.jobs.attempts import EXIT_USAGE, read_attempts, record, retry_decision
from zbpscale.jobs.executors import slurm_commands as slurm
from zbpscale.jobs.layout import RunFolder

TIMEOUT_MARGIN_S = 120  # the time-limit signal can come up to ~60 s early; allow for one slow step too


class JobFailed(ZbpError):
    """The run cannot go on (bounds exhausted, diverged, crashed); attempts.jsonl says why."""


def classify_interruption(left_s: float | None, signal_delay_s: int) -> str:
    """'timeout' when the job's limit is near (the signal was the time-limit warning), else 'preempted'."""
    if left_s is not None and left_s <= signal_delay_s + TIMEOUT_MARGIN_S:
        return "timeout"
    return "preempted"


class TrainJob:
    """The callable of a run's job (see the module docstring); thin on purpose."""

    def __init__(self, run_dir: str, *, max_timeouts: int, max_preemptions: int, signal_delay_s: int,
                 max_crashes: int = 3):
        self.run_dir = str(run_dir)
        self.max_timeouts, self.max_preemptions, self.max_crashes = max_timeouts, max_preemptions, max_crashes
        self.signal_delay_s = signal_delay_s

    def __call__(self) -> str:
        from zbpscale import signals

        signals.install()  # first: the time-limit signal may arrive while torch is still importing
        import submitit

        from zbpscale.train.loop import train
        from zbpscale.train.schema import TrainConfig

        env = submitit.JobEnvironment()
        submitit.helpers.TorchDistributedEnvironment().export(set_cuda_visible_devices=False, overwrite=True)
        run_dir, main = Path(self.run_dir), env.global_rank == 0
        job_id, started = str(env.job_id), time.time()
        if main:
            record(run_dir, "start", job_id=job_id, executor="slurm", host=socket.gethostname(),
                   ranks=env.num_tasks, pid=os.getpid(), nodes=os.environ.get("SLURM_JOB_NODELIST", ""))
        try:
            cfg = TrainConfig.from_dict(RunFolder(run_dir).read_config() or {}, source=str(RunFolder(run_dir).config))
            status = train(cfg, run_dir, on_hang=lambda reason: self._hung(run_dir, job_id, reason))
        except ZbpError as err:  # a user's mistake (a config the trainer refuses, a busy run folder): one line
            if main:
                record(run_dir, "end", job_id=job_id, why="failed", reason=f"{type(err).__name__}: {err}")
            report(err)
            raise SystemExit(EXIT_USAGE) from None
        except BaseException as err:
            if main:
                last = (str(err).strip().splitlines() or [""])[-1]
                why = "crashed" if lost_peer(err) else "failed"  # a lost rank is no decision: a submit resumes
                record(run_dir, "end", job_id=job_id, why=why, reason=f"{type(err).__name__}: {last}")
            raise
        # The trainer has put submitit's handlers back. A stop request from now on (a late time-limit warning, a
        # preemption while requeueing) has nothing left to stop, and submitit's handler would fail the job.
        signal.signal(signal.SIGUSR2, signal.SIG_IGN)
        if status == "completed":
            if main:
                record(run_dir, "end", job_id=job_id, why="completed", reason="all steps done")
            return "completed"
        if RunFolder(run_dir).cancel.exists():  # `zbpscale cancel` sent the signal: stop here, checkpointed
            if main:
                record(run_dir, "end", job_id=job_id, why="cancelled", reason="zbpscale cancel; checkpointed")
            return "cancelled"
        if cancelled_by_scheduler(job_id):  # scancel: SIGTERM, then the job is killed
            if main:
                record(run_dir, "end", job_id=job_id, why="cancelled", reason="scancel; checkpointed")
            return "cancelled"
        if main:
            self._requeue_or_fail(run_dir, job_id)
        _wait_to_be_requeued(run_dir, job_id, since=started)

    def checkpoint(self):
        """submitit's own fallback, for a signal that beats `__call__` to it: requeue the same call (the run
        folder, not this object, holds the state)."""
        import submitit

        return submitit.helpers.DelayedSubmission(self)

    def _hung(self, run_dir: Path, job_id: str, reason: str) -> None:
        """The watchdog found no step for step_timeout_s (rank 0, just before the process leaves): record it
        and requeue the job from the last checkpoint, counted as a crash."""
        retry = retry_decision(read_attempts(run_dir), "hung", {"crashed": self.max_crashes}, reason)
        record(run_dir, "end", job_id=job_id, why="hung" if retry.ok else "failed",
               reason=retry.reason if retry.ok else f"{retry.reason} (last: {reason})")
        if retry.ok:
            _requeue(job_id)

    def _requeue_or_fail(self, run_dir: Path, job_id: str) -> None:
        why = classify_interruption(slurm.seconds_left(job_id), self.signal_delay_s)
        bounds = {"timeout": self.max_timeouts, "preempted": self.max_preemptions}
        retry = retry_decision(read_attempts(run_dir), why, bounds)
        if not retry.ok:
            record(run_dir, "end", job_id=job_id, why="failed", reason=retry.reason)
            raise JobFailed(f"{run_dir.name}: {retry.reason}; not requeued",
                            hint="submit again with --retry (after raising the sweep's bound or time limit)")
        record(run_dir, "end", job_id=job_id, why=why, reason=retry.reason)
        _requeue(job_id)


def _requeue(job_id: str) -> None:
    try:
        subprocess.run(["scontrol", "requeue", job_id], check=True, capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError) as err:
        # A preempting scheduler may already be requeueing the job (PreemptMode=REQUEUE): say so and go on.
        print(f"scontrol requeue {job_id} did not go through ({err}); the scheduler may requeue it itself",
              file=sys.stderr, flush=True)


def lost_peer(err: BaseException) -> bool:
    """Whether an exception is a collective that lost a peer (a rank killed, a node lost), not the run's fault."""
    text = str(err)
    return type(err).__name__ in ("DistBackendError", "DistNetworkError", "DistStoreError") or any(
        s in text for s in ("Connection closed by peer", "Connection reset by peer", "NCCL", "gloo"))


def cancelled_by_scheduler(job_id: str) -> bool:
    """Whether SLURM has ended this job (scancel, an admin): the controller says CANCELLED, or COMPLETING while
    this task still runs, at once; accounting may lag, so it is asked only when the controller cannot say."""
    state = slurm.controller_state(job_id)
    if state is None:
        rows = (slurm.sacct_rows([job_id]) or {}).get(job_id, [])
        state = rows[-1]["state"] if rows else None
    return state in ("CANCELLED", "COMPLETING")


def _wait_to_be_requeued(run_dir: Path, job_id: str, *, since: float, limit_s: float = 600.0) -> NoReturn:
    """Leave without a result: the scheduler kills this attempt and starts the requeued one. If rank 0
    decided the run cannot go on (its `end` record says failed), leave at once instead."""
    deadline = time.time() + limit_s
    while time.time() < deadline:
        ends = [a for a in read_attempts(run_dir) if a.get("event") == "end" and a.get("job_id") == job_id
                and a.get("time", 0) >= since]
        if ends and ends[-1].get("why") == "failed":
            break
        time.sleep(1.0)
    raise SystemExit(1)


class PrepJob:
    """The data-prep job that training jobs depend on (afterok) when the sweep's data are missing."""

    def __init__(self, prep_config):
        self.prep_config = prep_config

    def __call__(self) -> str:
        from zbpscale.data.prepare import prepare

        prepare(self.prep_config, log=lambda line: print(line, flush=True))
        return "prepared"
