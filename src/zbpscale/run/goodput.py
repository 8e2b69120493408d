"""Goodput: where the wall time held by a run's jobs went, from its folder's records. Torch-free; reads, never writes.

    goodput = training / held

held       the wall time the run's jobs held: the sum over its attempts of start -> end (attempts.jsonl's `start`
           and `end` events). The queue wait holds nothing, so it is not in the denominator: it is shown beside.
Each attempt's held time is split into:
  start-up  its start -> the first step of its trainer (the trainer's start record): interpreter and imports, the
            process group, model, checkpoint load, estimator compile, data (the start record's setup_s by phase);
            an attempt that never reached a step is start-up whole
  training  productive step time: the step_time of the train records that remain (a resume drops the records of
            the steps it redoes); a record written every log_every steps stands for the steps since the one before
  saves     the time the trainer was blocked in checkpoint saves (its end record's ckpt_s; for an attempt killed
            without one, what its heartbeat said, copied into the next attempt's resume record)
  lost      the time of steps that a later attempt did again (the next resume record's redo_s): from the end of the
            save it resumed from, or the killed attempt's first step, to the killed attempt's last sign of life
  other     the rest: evaluation, diagnostics, logging, the end of the attempt after its last record (the final
            barrier, the process's exit, what a kill -9 left unrecorded), and whatever an older release's records
            do not say: a run folder from before this accounting has no save or lost time, and they fall here
queue      (beside held) the wait before each attempt: from its submission, or from the end of the run's attempt
           before (a requeued job), to its start; a submission not started yet is not counted
restart    an interruption -> the first step of the next attempt (the end of one attempt to the next one's trainer
           start record): queue wait and start-up of a resume together

An attempt's end is its `end` event, or the trainer's last sign of life if that is later (an end submit dated at the
heartbeat); one without an end event (killed -9 and not yet recorded by submit, or still running) ends at that last
sign of life: the trainer's latest record or heartbeat, else its start. A run trained by hand, without attempts.jsonl,
has one attempt per trainer start record, from train() being called (setup_s' total before its start record) to its
last sign of life, and no queue. A sweep's figures are its runs' seconds summed (wall seconds, not GPU-seconds).
Held time is the one account of a run's time (`run_time`): status's GPU-hours used and collect's wall time and
GPU-hours are its held seconds, times the GPUs its jobs held (`RunTime.gpus`).
The record types read here are run/records.py's (StartRecord, TrainRecord, EndRecord, ResumeRecord, Heartbeat) and
run/history.py's events, read as plain JSON: this module sits below the trainer. metrics.jsonl is read as its Fold
(run/fold.py): through the heartbeat's index, only the records written after the latest heartbeat.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from pathlib import Path

from zbpscale.cached import cached
from zbpscale.run.account import Attempt, gpu_hours, gpus_held
from zbpscale.run.snapshot import Snapshot

BUCKETS = ("training", "startup", "saves", "lost", "other")
"""The parts of held time, in the order tables show them; they sum to held."""


@dataclass(frozen=True)
class Goodput:
    """Seconds of held time by where they went (BUCKETS), the queue wait beside them, for one run or summed."""

    held: float = 0.0
    training: float = 0.0
    startup: float = 0.0
    saves: float = 0.0
    lost: float = 0.0
    other: float = 0.0
    queue: float = 0.0
    attempts: int = 0
    restarts: tuple[float, ...] = ()
    """Interruption -> first step of the next attempt, seconds, per resume."""

    @classmethod
    def of(cls, attempts: list[Attempt]) -> Goodput:
        sums = {name: sum(getattr(a, name) for a in attempts) for name in (*BUCKETS, "queue")}
        return cls(held=sum(a.held for a in attempts), attempts=len(attempts),
                   restarts=tuple(a.restart for a in attempts if a.restart is not None), **sums)

    def __add__(self, other: Goodput) -> Goodput:
        return Goodput(**{f.name: getattr(self, f.name) + getattr(other, f.name) for f in fields(self)})

    @classmethod
    def total(cls, parts: list[Goodput]) -> Goodput:
        """The sum of `parts`, as `sum(parts, Goodput())` adds them (the same seconds, in the same order), in one
        pass: added one by one, the restarts' tuple was copied again for each part (10,000 runs: a second)."""
        return cls(restarts=tuple(r for p in parts for r in p.restarts),
                   **{f.name: sum(getattr(p, f.name) for p in parts) for f in fields(cls) if f.name != "restarts"})

    @property
    def fraction(self) -> float | None:
        """training / held (None when nothing was held)."""
        return self.training / self.held if self.held > 0 else None


def read(run: Path | Snapshot) -> Goodput:
    """The goodput of one run folder (or its copy in a results bundle), or of a look at one already taken."""
    return Goodput.of(read_attempts(run))


@dataclass(frozen=True)
class RunTime:
    """A run's time, as status, collect and goodput all count it: its accounted attempts, whose held time is the
    wall time its jobs held (`goodput`: where it went), and the GPUs it held them with."""

    attempts: tuple[Attempt, ...]
    gpus: int | None
    """The GPUs each attempt held: plan.json's (what the run's jobs ask the scheduler for), else, for a run trained
    by hand, its trainer's latest start record's (its world size on cuda, 0 on cpu); None when neither says."""

    @cached
    def goodput(self) -> Goodput:
        """Where the held time went (made when asked: status's rows ask only the held time, 10,000 times)."""
        return Goodput.of(self.attempts)

    @cached
    def held_s(self) -> float:
        return sum(a.held for a in self.attempts)  # Goodput.of's sum, in its order

    @property
    def gpu_hours(self) -> float | None:
        """held x GPUs, in hours (None when the GPUs are not known)."""
        return gpu_hours(self.held_s, self.gpus)


def run_time(run: Path | Snapshot) -> RunTime:
    """The time of one run folder (or of a look at one already taken): the one account of it."""
    look = run if isinstance(run, Snapshot) else Snapshot(run)
    return RunTime(tuple(read_attempts(look)), gpus_held(look.plan, look.own.get("start", {})))


def read_attempts(run: Path | Snapshot) -> list[Attempt]:
    """The accounted attempts of one run folder (or a look at one: its attempts, metrics and heartbeat as read
    there), oldest first."""
    return (run if isinstance(run, Snapshot) else Snapshot(run)).attempts
