"""The end of one attempt, decided once for both executors: whether it starts again, and the one record it gets.

    conclude(run_dir, job_id, executor, end, bounds, words=..., again="requeue") -> Concluded

An executor says what it saw and jobs/ends.py's `classify` names the end (`end`: why, and whether the attempt may
start again). `conclude` is the rest, the same for the SLURM job, its sentinel, its batch script's step loop and the
local queue's driver: an end that may start again is counted against the run's bounds (History.retry: each kind
against its own, a hang as a crash) and is started again within them, else failed; the end record is written once,
naming the executor (none for a run folder that is another trainer's now). What follows is the executor's to do:
requeue the job, start a new step, or let the attempt end.

The words are the executor's: what it alone can say of the attempt (the exception's last line, the hang it caught,
the failing rank's exit and log line), asked for only when the classifier has none; `again` names how an attempt
starts again in the record's reason ("checkpointed; requeue 1/3", "RuntimeError: boom; restart 1/3"). A crash or a
hang over its bound keeps the words of its last one: "crashed 4 times, over max_crashes=3 (last: ...)".
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from zbpscale.jobs import ends
from zbpscale.run.history import History, Why
from zbpscale.run.snapshot import record


@dataclass(frozen=True)
class Bounds:
    """How many times a run's attempts may end each way and start again (the sweep's max_timeouts,
    max_preemptions, max_crashes: a job's or a queue entry's, read once)."""

    timeouts: int | None = None
    preemptions: int | None = None
    crashes: int | None = None

    @classmethod
    def of(cls, holder) -> Bounds:
        """The bounds a SLURM job (entry.TrainJob) or a local queue entry carries (None where it has none)."""
        return cls(getattr(holder, "max_timeouts", None), getattr(holder, "max_preemptions", None),
                   getattr(holder, "max_crashes", None))

    def as_dict(self) -> dict[str, int]:
        """History.retry's bounds: {"timeout": ..., "preempted": ..., "crashed": ...}, those known."""
        found = {"timeout": self.timeouts, "preempted": self.preemptions, "crashed": self.crashes}
        return {why: n for why, n in found.items() if n is not None}


@dataclass(frozen=True)
class Concluded:
    """What became of an attempt that ended."""

    why: Why
    """What its end record says (failed for an end that may start again but is over its bound)."""
    reason: str
    again: bool
    """It starts again: the executor requeues it or starts a new step (the end `retry` and within its bound)."""
    end: ends.Ending
    """The classifier's end it was decided from."""


def conclude(run_dir: Path, job_id: str, executor: str, end: ends.Ending, bounds: Bounds, *,
             words: str | Callable[[], str] = "", again: str = "requeue", **fields) -> Concluded:
    """Decide whether the attempt that ended as `end` starts again, within `bounds`, and write its end record (see
    the module docstring); `words`: the executor's reason where the classifier gives none (a callable: asked only
    then); `fields`: more of the record (its log, its source)."""
    said = end.reason or (words() if callable(words) else words)
    why, reason, more = end.why, said, False
    if end.retry:
        retry = History.read(run_dir).retry(end.why, bounds.as_dict(), said, again=again)
        more = retry.ok
        why = end.why if retry.ok else "failed"
        reason = retry.reason if retry.ok or end.why not in ("crashed", "hung") else f"{retry.reason} (last: {said})"
    if end.record:
        record(run_dir, "end", job_id=job_id, executor=executor, why=why, reason=reason, **fields)
    return Concluded(why, reason, more, end)
