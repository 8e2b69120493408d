"""How an attempt ended, from what its executor saw: the one classifier of both executors. Pure and torch-free.

    classify(Seen(...)) -> Ending(why, reason, retry, record)

Both executors describe what they saw of an attempt's end in the same terms (`Seen`): each rank's exit status in
train/exits.py's words, the run folder's COMPLETE stamp, what stopped the attempt as the executor knows it, and
whether it died without a word. The local queue's driver reads its ranks' exit statuses and its own signals; the
SLURM job runs its trainer in its own process, so it gives the status that the trainer's outcome stands for (as
train/cli.py exits with it), and learns what stopped it from the CANCEL stamp, the scheduler's state and the time
left. The rules, first match wins (`interrupted`: every status is 75 or unseen; `killed`: every rank killed by a
signal):

    the run is complete                                   -> completed
    stopped by a cancel, interrupted or killed, or found dead without a word when the cancel came
                                                          -> cancelled
    it ran and died without a word (no end record)        -> crashed, started again
    interrupted as the scheduler requeued the job itself  -> preempted (the scheduler starts it again)
    interrupted as the job's batch script was killed      -> crashed (nothing left to start it again)
    found frozen and killed by its executor               -> hung, started again
    interrupted (not killed after a peer failed), or stopped at its time limit
                                                          -> timeout at the limit, else preempted, started again
    the run folder is another trainer's (exit 5, or found so) -> failed, nothing recorded
    exit 2 (a user's mistake) or 3 (diverged)             -> failed: the same attempt would end the same way
    exit 4 (the trainer's watchdog: no step)              -> hung, started again
    anything else (an exception, a rank killed)           -> crashed, started again; where the executor does not
                                                             start a crash again: crashed if it lost a peer, else failed

"Started again" is `Ending.retry`: the executor requeues it, or restarts it as a new job step, within the run's
bounds (jobs/attempt.py's `conclude`, for both executors: over them the attempt is failed); the reasons of those ends
are the executor's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from zbpscale.run.history import Why
from zbpscale.train.exits import EXIT_DIVERGED, EXIT_HUNG, EXIT_LEASE_LOST, EXIT_REQUEUE, EXIT_USAGE

Stop = Literal["", "timeout", "cancel", "scancel", "requeued", "batch", "kill", "hung", "lost"]
"""What stopped an attempt, as its executor knows it ("": nothing it knows of, e.g. a preemption's signal)."""

LEASE_LOST = ("another trainer took the run folder over while this attempt was silent past its lease; it wrote "
              "nothing more")


@dataclass(frozen=True, kw_only=True)
class Seen:
    """What an executor saw of an attempt that ended."""

    codes: tuple[int | None, ...] = (None,)
    """Each rank's exit status (train/exits.py; negative: killed by that signal; None: not seen, as for an attempt
    the local queue adopted from a dead driver). The SLURM job: the status its trainer's outcome stands for."""
    complete: bool = False
    """The run has done all its steps: its COMPLETE stamp (local queue); the trainer returned completed (SLURM)."""
    stop: Stop = ""
    """What stopped it: "timeout" its time limit (the local queue's SIGUSR2 or kill at the limit; SLURM's stop signal
    with the limit near); "cancel" zbpscale cancel (the local queue's request; SLURM: the run's CANCEL stamp);
    "scancel" the scheduler's cancel (SLURM's accounting says CANCELLED); "requeued" the scheduler requeued the job
    itself (an admin's `scontrol requeue`: REQUEUED); "batch" the job's batch script died (SLURM: FAILED 0:9, squeue's
    reason JobLaunchFailure), and the job with it; "kill" the ranks left
    after one failed, killed (local queue); "hung" found frozen and killed (the local driver; SLURM's sentinel);
    "lost" found frozen with the run folder another trainer's, and killed (local queue)."""
    unheard: bool = False
    """It ran and died without a word: no end record of its own (the local queue: an adopted attempt that logged
    steps; SLURM: a start record without an end, seen by the job's next start or its batch script)."""
    restarts_crashes: bool = True
    """Whether its executor starts a crashed attempt again: the local queue and SLURM jobs of #42 on (as a new step);
    a SLURM job of an older release does not."""
    peer_lost: bool = False
    """The exception was a collective that lost a peer (a rank or node killed), not the run's fault (SLURM)."""


@dataclass(frozen=True)
class Ending:
    """How an attempt ended."""

    why: Why
    reason: str = ""
    """The reason in this module's words; "" where only the executor can say it: the failing rank's exit status and
    log line, the exception, the hang it caught, the steps dropped."""
    retry: bool = False
    """Started again (requeued, or restarted as a new job step) within History.retry's bounds, else failed."""
    record: bool = True
    """False: the run folder is another trainer's now; nothing of this attempt is recorded."""
    by_scheduler: bool = False
    """The scheduler starts it again by itself (it requeued the job): the executor must not requeue it too."""


def classify(seen: Seen) -> Ending:
    """How an attempt ended, from what its executor saw (the rules: this module's docstring)."""
    codes, stop = seen.codes, seen.stop
    interrupted = all(c in (None, EXIT_REQUEUE) for c in codes)
    if seen.complete:
        return Ending("completed", "all steps done")
    if stop in ("cancel", "scancel") and (interrupted or all(c is not None and c < 0 for c in codes)):
        who = "zbpscale cancel" if stop == "cancel" else "scancel"
        how = "it had died without an end record" if seen.unheard else "checkpointed" if interrupted else "killed"
        return Ending("cancelled", f"{who}; {how}")
    if seen.unheard:
        return Ending("crashed", retry=True)
    if stop == "requeued" and interrupted:
        return Ending("preempted", "requeued by SLURM (sacct: REQUEUED); checkpointed", retry=True,
                      by_scheduler=True)
    if stop == "batch" and interrupted:
        return Ending("crashed", "the job's batch script was killed (SLURM: FAILED, JobLaunchFailure); "
                                 "checkpointed")
    if stop == "hung":
        return Ending("hung", retry=True)
    if (interrupted and stop != "kill") or stop == "timeout":
        return Ending("timeout" if stop == "timeout" else "preempted",
                      "checkpointed" if interrupted else "killed at the limit", retry=True)
    if EXIT_LEASE_LOST in codes or stop == "lost":
        return Ending("failed", LEASE_LOST, record=False)
    if any(c in (EXIT_USAGE, EXIT_DIVERGED) for c in codes):
        return Ending("failed")
    if EXIT_HUNG in codes:
        return Ending("hung", retry=True)
    if seen.restarts_crashes:
        return Ending("crashed", retry=True)
    return Ending("crashed") if seen.peer_lost else Ending("failed")
