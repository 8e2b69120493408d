"""The job side of a run: what every task of a run's submitit job executes, and the attempts record.

`zbpscale.entry.TrainJob(run_dir, ...)` is pickled by submitit at submit time and called once per task; it calls
`run_train_job` here (the entry's name stays, this module may move: zbpscale/entry.py). The job exports the
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
How an attempt ended is decided by jobs/ends.py's `classify`, which the local queue's driver shares: this module
says what SLURM's job saw (its trainer's outcome as the exit status it stands for, the CANCEL stamp, the scheduler's
state, the time left).
"""

from __future__ import annotations

import os
import re
import signal
import socket
import sys
import time
from pathlib import Path
from typing import NoReturn

# TrainJob and PrepJob are also importable from here because jobs pickled by the releases of 2026-12-02 (8006dfa up
# to the entry module) name them zbpscale.jobs.executors.slurm_job.TrainJob / PrepJob: a requeue after an upgrade
# unpickles them by that name. Their state is entry's (the same attributes).
from zbpscale.entry import PrepJob, TrainJob  # noqa: F401
from zbpscale.errors import LeaseLost, ZbpError, report
from zbpscale.jobs import ends
from zbpscale.jobs.attempt import Bounds, Concluded, conclude
from zbpscale.jobs.executors import slurm_commands as slurm
from zbpscale.jobs.executors.base import ALIVE
from zbpscale.jobs.executors.slurm_sentinel import kill_step, record_hung_end, requeue, start_sentinel, step_restarts
from zbpscale.lease import job_here
from zbpscale.run.folder import RunFolder
from zbpscale.run.history import History
from zbpscale.run.snapshot import record
from zbpscale.train.exits import EXIT_ERROR, EXIT_HUNG, EXIT_LEASE_LOST, EXIT_OK, EXIT_REQUEUE, EXIT_USAGE, leave

TIMEOUT_MARGIN_S = 120  # the time-limit signal can come up to ~60 s early; allow for one slow step too


class JobFailed(ZbpError):
    """The run cannot go on (bounds exhausted, diverged, crashed); attempts.jsonl says why."""


def classify_interruption(left_s: float | None, signal_delay_s: int) -> str:
    """'timeout' when the job's limit is near (the signal was the time-limit warning), else 'preempted'."""
    if left_s is not None and left_s <= signal_delay_s + TIMEOUT_MARGIN_S:
        return "timeout"
    return "preempted"


def run_train_job(job: TrainJob) -> str:
    """One task of a run's job (`job`: its entry.TrainJob, which holds the run folder and the retry bounds)."""
    from zbpscale import signals

    signals.install()  # first: the time-limit signal may arrive while torch is still importing
    import submitit

    from zbpscale.run.config import TrainConfig
    from zbpscale.train.loop import train

    env = submitit.JobEnvironment()
    submitit.helpers.TorchDistributedEnvironment().export(set_cuda_visible_devices=False, overwrite=True)
    run_dir, main = Path(job.run_dir), env.global_rank == 0
    job_id, started = str(env.job_id), time.time()
    if main:
        lost = History.read(run_dir).unended_start(job_id)
        if lost is not None:  # the job's last attempt died without a word and SLURM started the job again
            record(run_dir, "end", job_id=job_id, executor="slurm", source="restart",
                   why=ends.classify(ends.Seen(unheard=True)).why,
                   reason=restarted(job_id, lost.get("nodes") or lost.get("host", "?")))
        record(run_dir, "start", job_id=job_id, executor="slurm", host=socket.gethostname(),
               ranks=env.num_tasks, pid=os.getpid(), nodes=os.environ.get("SLURM_JOB_NODELIST", ""),
               restarts=int(os.environ.get("SLURM_RESTART_COUNT") or 0), step=os.environ.get("SLURM_STEP_ID", ""))
    sentinel = None
    try:
        cfg = TrainConfig.from_dict(RunFolder(run_dir).read_config() or {}, source=str(RunFolder(run_dir).config))
        if main:  # watches from outside for a trainer too frozen for its own watchdog
            sentinel = start_sentinel(run_dir, job_id, since=started, timeout_s=cfg.step_timeout_s,
                                      max_crashes=job.max_crashes)
        status = train(cfg, run_dir, on_hang=lambda reason: _hung(job, run_dir, job_id, reason),
                       holder_gone=holder_gone)
    except LeaseLost as err:  # another trainer took the run over while this one was frozen: the run's records are
        report(err)           # the new holder's; nothing of this attempt (record, submitit's result) is written
        if sentinel is not None:
            sentinel.kill()
        leave(EXIT_LEASE_LOST)
    except ZbpError as err:  # a user's mistake (a config the trainer refuses, a busy run folder): one line
        if main:
            conclude(run_dir, job_id, "slurm", ends.classify(ends.Seen(codes=(EXIT_USAGE,))), Bounds.of(job),
                     words=f"{type(err).__name__}: {err}")
        report(err)
        raise SystemExit(EXIT_USAGE) from None
    except BaseException as err:
        if main:
            record_crash(job, run_dir, job_id, err)
        raise
    finally:
        if sentinel is not None:
            sentinel.kill()
            sentinel.wait()
    # The trainer has put submitit's handlers back. A stop request from now on (a late time-limit warning, a
    # preemption while requeueing) has nothing left to stop, and submitit's handler would fail the job.
    signal.signal(signal.SIGUSR2, signal.SIG_IGN)
    if main and History.read(run_dir).last_end(job_id):  # decided already: the sentinel requeued it as hung
        _wait_to_be_requeued(run_dir, job_id, since=started)
    end = ending(job, run_dir, job_id, status, main=main)
    if main:
        settle(job, run_dir, job_id, end)
    if not end.retry:  # all steps done, or stopped for good (cancelled, checkpointed)
        return end.why
    _wait_to_be_requeued(run_dir, job_id, since=started)


def settle(job: TrainJob, run_dir: Path, job_id: str, end: ends.Ending) -> Concluded:
    """Rank 0's end of an attempt whose trainer returned (`end`: `ending`'s): recorded, and, at its time limit or
    preempted, requeued within the sweep's bounds, else failed (JobFailed: the job ends FAILED)."""
    done = conclude(run_dir, job_id, "slurm", end, Bounds.of(job))
    if end.retry and not done.again:
        raise JobFailed(f"{run_dir.name}: {done.reason}; not requeued",
                        hint="submit again with --retry (after raising the sweep's bound or time limit)")
    if done.again and not end.by_scheduler:  # SLURM requeued it itself: a second requeue is not ours to ask
        requeue(job_id)
    return done


def restarted(job_id: str, where: str) -> str:
    """Why the attempt on `where` of a job that SLURM started again left no end record, in accounting's word on
    that earlier run when it has one (NODE_FAIL: a node lost, which SLURM requeues by itself)."""
    said = (slurm.earlier_ends(job_id) or [""])[-1]
    if said == "NODE_FAIL":
        return f"node failure (sacct: NODE_FAIL) of its attempt on {where}; SLURM requeued the job"
    how = f"sacct: {said}" if said else "a lost node, or the job requeued by the scheduler"
    return f"no end record: SLURM started the job again ({how}) after its attempt on {where}"


def resubmission(job: TrainJob):
    """submitit's own fallback, for a signal that beats `run_train_job` to it: requeue the same call (the run
    folder, not the job object, holds the state)."""
    import submitit

    return submitit.helpers.DelayedSubmission(job)


def ending(job: TrainJob, run_dir: Path, job_id: str, status: str, *, main: bool) -> ends.Ending:
    """How an attempt whose trainer returned `status` (completed | checkpointed: it caught a stop signal) ended. The
    stop, in the order asked: the run folder's CANCEL stamp (`zbpscale cancel` sent the signal), the scheduler's
    cancel (scancel: SIGTERM, then the job is killed), else the time left: little, the time-limit warning; plenty or
    unknown, a preemption. Only rank 0 (`main`), which records the end, asks the time left."""
    if status == "completed":
        return ends.classify(ends.Seen(codes=(EXIT_OK,), complete=True))
    stop: ends.Stop = ""
    if RunFolder(run_dir).cancel.exists():
        stop = "cancel"
    elif stopped := scheduler_stop(job_id):
        stop = stopped
    elif main and classify_interruption(slurm.seconds_left(job_id), job.signal_delay_s) == "timeout":
        stop = "timeout"
    return ends.classify(ends.Seen(codes=(EXIT_REQUEUE,), stop=stop))


def record_crash(job: TrainJob, run_dir: Path, job_id: str, err: BaseException) -> None:
    """Record the end of an attempt whose trainer raised `err` (rank 0): a crash, which the batch script starts again
    as a new step within max_crashes; a job submitted by an older release does not, so there a lost rank is no
    decision (recorded crashed: a submit resumes) and anything else fails the run."""
    last = f"{type(err).__name__}: {(str(err).strip().splitlines() or [''])[-1]}"
    seen = ends.Seen(codes=(EXIT_ERROR,), restarts_crashes=step_restarts(), peer_lost=lost_peer(err))
    end = ends.classify(seen)
    if seen.peer_lost and seen.restarts_crashes:  # the rank that died first is the cause, and srun knows which
        print(f"{run_dir.name}: lost a peer rank ({last}); the batch script records which rank ended first",
              file=sys.stderr, flush=True)
        return
    conclude(run_dir, job_id, "slurm", end, Bounds.of(job), words=last, again="restart")


def _hung(job: TrainJob, run_dir: Path, job_id: str, reason: str) -> None:
    """The watchdog found no step for step_timeout_s (rank 0, just before the process leaves): record it, counted
    as a crash, and end the step: the batch script starts the attempt again from the last checkpoint as a new step
    within max_crashes. A job of an older release is requeued instead (within max_crashes)."""
    restarts = step_restarts()
    try:
        again = record_hung_end(run_dir, job_id, reason, Bounds.of(job), ends.Seen(codes=(EXIT_HUNG,)))
    finally:  # the step ends whatever became of the record (the batch script writes one for a step without it)
        if restarts:
            kill_step()
    if again and not restarts:
        requeue(job_id)


def holder_gone(holder) -> bool:
    """Whether SLURM says the trainer whose lease holds a run folder is gone (a lease.Rule, asked only of a lease
    its pid cannot answer for: one on another node): an earlier run of this very job (a requeued job keeps its id
    and counts its restarts, and SLURM starts it again only after the last run ended), or a job that squeue, else
    sacct, calls ended. Unknown (no answer, no record) is not gone."""
    if not holder.job.replace("_", "").isdigit():  # no job, or another executor's
        return False
    if holder.job == job_here():
        return holder.restarts < int(os.environ.get("SLURM_RESTART_COUNT") or 0)
    state = slurm.controller_state(holder.job)
    if state is None:
        rows = (slurm.sacct_rows([holder.job]) or {}).get(holder.job, [])
        return bool(rows) and all(row["state"] not in ALIVE for row in rows)
    return state not in ALIVE


def lost_peer(err: BaseException) -> bool:
    """Whether an exception is a collective that lost a peer (a rank killed, a node lost), not the run's fault."""
    text = str(err)
    return type(err).__name__ in ("DistBackendError", "DistNetworkError", "DistStoreError") or any(
        s in text for s in ("Connection closed by peer", "Connection reset by peer", "NCCL", "gloo"))


def scheduler_stop(job_id: str, *, wait_s: float = 3.0) -> ends.Stop:
    """What SLURM did to this job, in its own word, when a stop signal reached the trainer: "scancel" (accounting
    says CANCELLED), "requeued" (REQUEUED: an admin's `scontrol requeue`, or a preemption that requeues without the
    user's signal), "batch" (the batch script died: FAILED, or
    the controller's reason JobLaunchFailure), or "" while the controller still calls it running (the signal of a
    preemption or of the time limit). A job the controller calls ending (COMPLETING) but accounting does not yet
    know the end of is asked again for `wait_s` (accounting lags; SLURM kills the job KillWait after its SIGTERM,
    30 s by default); then, as before, a cancel."""
    deadline = time.monotonic() + wait_s
    while True:
        row = (slurm.squeue_rows([job_id]) or {}).get(job_id, {})
        if row.get("state", "").startswith("REQUEUE"):
            return "requeued"
        if row.get("state") in ALIVE - {"COMPLETING"}:
            return ""
        if row.get("reason") == "JobLaunchFailure":
            return "batch"
        rows = (slurm.sacct_rows([job_id]) or {}).get(job_id, [])
        said = rows[-1]["state"] if rows else ""
        if said.startswith("CANCELLED") or row.get("state") == "CANCELLED":
            return "scancel"
        if said == "REQUEUED":
            return "requeued"
        if said in ("FAILED", "NODE_FAIL"):
            return "batch"
        if not row and not rows or time.monotonic() > deadline:
            return "scancel" if row.get("state") == "COMPLETING" else ""
        time.sleep(1.0)


def _wait_to_be_requeued(run_dir: Path, job_id: str, *, since: float, limit_s: float = 600.0) -> NoReturn:
    """Leave without a result: the scheduler kills this attempt and starts the requeued one. If rank 0
    decided the run cannot go on (its `end` record says failed), leave at once instead."""
    deadline = time.time() + limit_s
    while time.time() < deadline:
        ends = History.read(run_dir).ends_since(job_id, since)
        if ends and ends[-1].get("why") == "failed":
            break
        time.sleep(1.0)
    raise SystemExit(1)


def step_ended(folder: str, code: str, began: str) -> int:
    """The batch script's question after a job step (begun at Unix second `began`) ended with status `code`
    (submitit's log `folder` holds the job's pickled TrainJob): 0 to start the attempt again as a new step, 1 to
    let the job end. Again when the step's attempt ended crashed or hung (its own end record), within
    max_crashes; a step that died without a word (a rank killed by the OOM killer or kill -9) gets its end record
    here, counted as a crash. Never again for a step whose trainer did not start (no start record since `began`:
    it could not launch, on a lost node, or failed in its imports): each restart follows one more crash, so the
    loop ends. Nothing is written, and the job ends, when the run folder's lease names another job's trainer."""
    from submitit.core.utils import DelayedSubmission, JobPaths

    from zbpscale.lease import read_holder

    job_id = job_here()
    if code == "0":
        return 1
    job = DelayedSubmission.load(JobPaths(folder, job_id=job_id).submitted_pickle).function
    run_dir = Path(job.run_dir)
    holder = read_holder(RunFolder(run_dir).trainer_lease)
    if holder is not None and holder.job != job_id:
        print(f"{run_dir.name}: the run folder is another job's now ({holder.job or 'no job'}); not restarted",
              file=sys.stderr, flush=True)
        return 1
    history = History.read(run_dir)
    if history.last_start(job_id).get("time", 0) < float(began):
        print(f"{run_dir.name}: the job step ended (status {code}) before its trainer started; not restarted",
              file=sys.stderr, flush=True)
        return 1
    if history.unended_start(job_id):
        how = (first_to_end(folder, job_id, began) or "a rank killed (the OOM killer, kill -9)") + (
            f", the job step ended with status {code}")
        again = conclude(run_dir, job_id, "slurm", ends.classify(ends.Seen(unheard=True)), Bounds.of(job), words=how,
                         again="restart", source="step").again
    else:  # the attempt's own end record: a crash or a hang recorded as such was counted within its bound
        again = history.last_end(job_id).get("why") in ("crashed", "hung")
    if again:
        print(f"{run_dir.name}: restarting as a new job step in this allocation (status {code})", file=sys.stderr,
              flush=True)
    return 0 if again else 1


def first_to_end(folder: str, job_id: str, began: str) -> str:
    """The rank of the job step begun at `began` that ended first, in words: "rank 1 on node2 was killed by signal
    9 (SIGKILL)", "rank 1 on node2 ended with exit code 1 (ValueError: ...)" (its own log's last error line), from
    srun's lines after the step's mark in the batch script's log (task 0's, which the batch script shares);
    "" when srun named no task, or the log has no mark (a job submitted before the mark, or beyond its tail)."""
    from submitit.core.utils import JobPaths

    from zbpscale.jobs.reasons import first_task_end, last_error, log_tail

    def log(task: int) -> list[str]:  # its stderr, or its stdout where the job sends stderr there (ours do)
        paths = JobPaths(folder, job_id=job_id, task_id=task)
        return log_tail(paths.stderr if paths.stderr.exists() else paths.stdout, 2000)

    lines = log(0)
    marks = [i for i, line in enumerate(lines) if line.strip() == f"{slurm.STEP_MARK}{began}"]
    found = first_task_end(lines[marks[-1] + 1:]) if marks else None
    if found is None:
        return ""
    tasks, node, how = found
    if not tasks:
        return f"{node} failed (srun: Node failure on {node}; SLURM ends the job NODE_FAIL and requeues it)"
    rank = re.match(r"\d+", tasks).group()
    many = rank != tasks  # `tasks 0-1`: several ended at once
    who = f"rank{'s' if many else ''} {tasks} on {node}"
    if not how.startswith("exit code"):
        return f"{who} {'were' if many else 'was'} {how}"
    error = last_error(log(int(rank))[-60:])
    return f"{who} ended with {how}" + (f" ({error})" if error else "")


def run_prep_job(job: PrepJob) -> str:
    """The data-prep job that training jobs depend on (afterok) when the sweep's data are missing."""
    from zbpscale.data.prepare import PrepConfig, prepare

    cfg = job.prep_config if isinstance(job.prep_config, PrepConfig) else PrepConfig(**job.prep_config)
    prepare(cfg, log=lambda line: print(line, flush=True))
    return "prepared"
