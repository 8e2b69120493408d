"""A run's attempts: how an attempt ends, its record in attempts.jsonl, and whether it may be retried. Torch-free.

One event per line of `<run_dir>/attempts.jsonl`, each a typed record below (`record` refuses a field its type
does not have): `submitted` by submit (an executor), `start` by the job when an attempt begins, `end` when it
ends, with `why` one of ENDS. The retry rule (`retry_decision`) and status's T/P/F counts read them; both
executors decide with the same rule. Exit codes are how a training process tells its executor how it ended.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, TypedDict, Union

from zbpscale.files import append_jsonl, check_fields, read_jsonl
from zbpscale.jobs.layout import RunFolder

# Exit codes of a training process (python -m zbpscale.train, a local-queue rank).
EXIT_OK = 0
EXIT_USAGE = 2  # a user's mistake (ZbpError): retrying cannot help
EXIT_DIVERGED = 3  # non-finite loss or gradient norm: stopped before the optimizer update
EXIT_HUNG = 4  # no step for step_timeout_s (train/watchdog.py): retried from the last checkpoint, as a crash
EXIT_REQUEUE = 75  # checkpointed on request (a signal): run me again to continue

Why = Literal["completed", "timeout", "preempted", "crashed", "hung", "failed", "cancelled"]
ENDS: tuple[Why, ...] = Why.__args__
"""Why an attempt ended (`why` of an `end` event)."""


class Submitted(TypedDict, total=False):
    """submit queued a job for the run."""

    event: Literal["submitted"]
    time: float
    job_id: str
    executor: str  # slurm | local
    logs: str  # the executor's log folder
    retry: bool  # submitted with --retry: the requeue counts start again
    name: str  # the job's name
    grace_s: float  # how long the scheduler may take to show a new job (SLURM)
    prep_job: str  # the data-prep job it waits for (afterok), if any
    prep_log: str


class Start(TypedDict, total=False):
    """An attempt began: the job's rank 0 (SLURM) or the local queue's driver."""

    event: Literal["start"]
    time: float
    job_id: str
    executor: str
    host: str
    ranks: int
    pid: int
    nodes: str  # SLURM's node list
    gpus: list[int]  # the local queue's GPUs
    logs: str


class End(TypedDict, total=False):
    """An attempt ended: by the job itself, its executor, or `reconcile` for one that died without a word."""

    event: Literal["end"]
    time: float
    job_id: str
    executor: str
    why: Why
    reason: str
    log: str  # the log to read
    source: str  # squeue | sacct: written by reconcile, from the scheduler's account; restart: by the job's next start


Event = Union[Submitted, Start, End]
EVENTS: dict[str, type] = {"submitted": Submitted, "start": Start, "end": End}


def record(run_dir: Path, event: str, **fields) -> None:
    """Append one event (submitted | start | end) to the run's attempts record, fsynced. A field the event's
    record type does not have is a bug (TypeError): every reader knows the fields from the type."""
    check_fields(EVENTS[event], fields)
    if fields.get("why", "completed") not in ENDS:
        raise TypeError(f"End.why must be one of {', '.join(ENDS)}, got {fields['why']!r}")
    append_jsonl(RunFolder(run_dir).attempts, {"event": event, "time": time.time(), **fields})


def read_attempts(run_dir: Path) -> list[Event]:
    """Every event of the run's attempts record, in order (a torn last line is skipped)."""
    return read_jsonl(RunFolder(run_dir).attempts)


def last_submitted(attempts: list[Event]) -> Event:
    """The run's latest `submitted` event (job id, executor, logs), or {} if it was never submitted."""
    return next((a for a in reversed(attempts) if a.get("event") == "submitted"), {})


def count_ends(attempts: list[Event], why: str) -> int:
    """Attempts that ended for `why`, since the run was last submitted with --retry (which resets the count)."""
    since = max((a.get("time", 0) for a in attempts if a.get("event") == "submitted" and a.get("retry")),
                default=0)
    return sum(1 for a in attempts if a.get("event") == "end" and a.get("why") == why and a.get("time", 0) >= since)


def requeue_counts(attempts: list[Event]) -> tuple[int, int, int]:
    """(timeouts, preemptions, failures) since the last --retry, as status's T/P/F column shows them: failures
    are the attempts that crashed, hung or failed."""
    return (count_ends(attempts, "timeout"), count_ends(attempts, "preempted"),
            sum(count_ends(attempts, why) for why in ("crashed", "hung", "failed")))


@dataclass(frozen=True)
class Retry:
    """The retry decision for an interrupted attempt: `ok` to requeue; `reason` for the attempts record."""

    ok: bool
    reason: str


def retry_decision(attempts: list[Event], why: str, bounds: dict[str, int], how: str = "checkpointed") -> Retry:
    """May an attempt that ended for `why` (timeout | preempted | crashed) be requeued? Each kind is counted
    against its own bound, bounds = {"timeout": max_timeouts, "preempted": max_preemptions, "crashed":
    max_crashes}; a hang counts as a crash. The attempt being decided is not in `attempts` yet. Both executors
    decide with this."""
    kinds = ("crashed", "hung") if why in ("crashed", "hung") else (why,)
    why = "crashed" if why == "hung" else why
    used, bound = sum(count_ends(attempts, k) for k in kinds) + 1, bounds[why]
    if used > bound:
        return Retry(False, f"{why} {used} times, over max_{_plural(why)}={bound}")
    return Retry(True, f"{how}; requeue {used}/{bound}")


def _plural(why: str) -> str:
    return {"timeout": "timeouts", "preempted": "preemptions", "crashed": "crashes"}[why]


def unended_start(attempts: list[Event], job: str) -> Start | None:
    """The job's latest attempt when it has no end record (it died without a word: a lost node, a kill), else
    None. Asked by the job's next start: SLURM starts a job again under the same id (NODE_FAIL is requeued by
    the scheduler itself), and that attempt gets its end record then, so that it is counted."""
    starts = [a for a in attempts if a.get("event") == "start" and a.get("job_id") == job]
    return starts[-1] if starts and not last_end(attempts, job) else None


def last_end(attempts: list[Event], job: str) -> End:
    """The `end` record of the job's latest attempt, {} if that attempt has none. A requeued SLURM job keeps its
    id, so an end before the job's latest start belongs to an earlier attempt."""
    starts = [a.get("time", 0) for a in attempts if a.get("event") == "start" and a.get("job_id") == job]
    since = starts[-1] if starts else 0
    return next((a for a in reversed(attempts) if a.get("event") == "end" and a.get("job_id") == job
                 and a.get("time", 0) >= since), {})
