"""A run's history: its attempts, one event per line of `<run>/attempts.jsonl`, read once into a `History`. Torch-free.

Each event is a typed record below (`record` refuses a field its type does not have): `submitted` by submit (an
executor), `start` by the job when an attempt begins, `end` when it ends. A `History` answers every question asked
of those events (the latest submission and its job, that job's last start and its end, the requeue counts, the
retry rule) so that no other module filters the events by hand; both executors decide a retry with it.

How an attempt ended and what state a run is in are two vocabularies:
  `why` (WHYS)    how one attempt ended: the word of an attempt's `end` event and of the trainer's `end` record
                  (run/records.py), and `train()`'s return value. The trainer knows TRAINER_ENDS (completed,
                  checkpointed, diverged, hung, failed, interrupted); the job layer, which also knows why a
                  checkpointed attempt stopped, records ENDS (completed, timeout, preempted, cancelled, crashed,
                  hung, failed).
  state           what a run is in now (jobs/state.py: complete, running, failed, ...), decided from its folder,
                  this history and the scheduler's view of its job: a run is `complete` once, an attempt
                  `completed` its steps.
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, TypedDict, Union

from zbpscale.cached import cached
from zbpscale.errors import BrokenRunFolder
from zbpscale.files import append_jsonl, check_fields, json_lines, read_bytes
from zbpscale.run.folder import RunFolder

Why = Literal["completed", "checkpointed", "timeout", "preempted", "cancelled", "crashed", "hung", "diverged",
              "failed", "interrupted"]
WHYS: tuple[Why, ...] = Why.__args__
"""How an attempt ended, in the one vocabulary of the trainer's end record and the attempts' end events."""
TRAINER_ENDS: tuple[Why, ...] = ("completed", "checkpointed", "diverged", "hung", "failed", "interrupted")
"""What the trainer knows of its own end (`why` of its end record; interrupted: a second Ctrl-C, no checkpoint)."""
ENDS: tuple[Why, ...] = ("completed", "timeout", "preempted", "cancelled", "crashed", "hung", "failed")
"""What the job layer records (`why` of an `end` event): a checkpointed attempt as timeout, preempted or cancelled."""


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
    settings: dict  # what the job keeps through its requeues: Resources, signal_delay_s, max_* (since 2026-12-06)


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
    restarts: int  # SLURM_RESTART_COUNT: how often SLURM has requeued the job (since #42)
    step: str  # SLURM_STEP_ID: a crash's restart inside the allocation is a new step of the same job (since #42)
    gpus: list[int]  # the local queue's GPUs
    logs: str


class End(TypedDict, total=False):
    """An attempt ended: by the job itself, its executor, or submit for one that died without a word (the end the
    scheduler's account gives it: jobs/state.py's unheard_end)."""

    event: Literal["end"]
    time: float
    job_id: str
    executor: str
    why: Why
    reason: str
    log: str  # the log to read
    source: str  # squeue | sacct: recorded by submit from the scheduler's account; restart: by the job's next start;
    # step: by the job's batch script, after a job step that died without a word (slurm_job.step_ended)


Event = Union[Submitted, Start, End]
EVENTS: dict[str, type] = {"submitted": Submitted, "start": Start, "end": End}


def record(run_dir: Path, event: str, **fields) -> None:
    """Append one event (submitted | start | end) to the run's attempts record, fsynced. A field the event's
    record type does not have is a bug (TypeError): every reader knows the fields from the type."""
    check_fields(EVENTS[event], fields)
    if fields.get("why", "completed") not in ENDS:
        raise TypeError(f"End.why must be one of {', '.join(ENDS)}, got {fields['why']!r}")
    append_jsonl(RunFolder(run_dir).attempts, {"event": event, "time": time.time(), **fields})  # time: now unless given


def read_attempts(run_dir: Path) -> list[Event]:
    """Every event of the run's attempts record, in order (a torn line is skipped: a writer killed mid-line); [] where
    there is none; a `BrokenRunFolder` where it cannot be read (a folder in its place, no permission) or holds bytes
    but no event (garbled, or another file in its place): none would say the run is new, and a submit would queue a
    second job beside one that may run."""
    path = RunFolder(run_dir).attempts
    hint = "restore it as the file of the run's attempts, one JSON line each"
    try:
        data = read_bytes(path)
    except FileNotFoundError:
        return []
    except OSError as err:
        raise BrokenRunFolder(f"{path} cannot be read ({err.strerror})", hint=hint) from None
    events = [e for e in json_lines(data) if isinstance(e, dict)]
    if data.strip() and not any("event" in e for e in events):
        raise BrokenRunFolder(f"{path} holds {len(data):,} bytes but no event zbpscale writes (garbled, or another "
                              "file in its place): a job of the run may still be queued or running",
                              hint=f"{hint}, or move it aside once no job of the run is left queued or running")
    return events


@dataclass(frozen=True)
class Retry:
    """The retry decision for an interrupted attempt: `ok` to requeue; `reason` for the attempts record."""

    ok: bool
    reason: str


@dataclass(frozen=True)
class History:
    """A run's attempts as one value: the events, read once (`History.read`), and what they say. "The job" is
    the run's latest submitted job; a requeued SLURM job keeps its id, so an end before the job's latest start
    belongs to an earlier attempt."""

    events: tuple[Event, ...] = ()

    @classmethod
    def read(cls, run_dir: Path) -> History:
        """The run's events; one whose time is not a number (a hand edit) is skipped, as a garbled line is."""
        return cls(tuple(e for e in read_attempts(run_dir) if _timed(e)))

    @cached
    def _by_event(self) -> dict[str, list[dict]]:
        """The events of each kind, in order (status asks a history for them some 30 times a run)."""
        found: dict[str, list[dict]] = {}
        for a in self.events:
            found.setdefault(a.get("event"), []).append(a)
        return found

    def _of(self, event: str, job: str | None = None) -> list[dict]:
        return [a for a in self._by_event.get(event, ()) if job is None or a.get("job_id") == job]

    def _last(self, job: str) -> tuple[Start, End]:
        """(the start of `job`'s latest attempt, that attempt's end), each {} when there is none."""
        starts = self._of("start", job)
        start = starts[-1] if starts else {}
        since = start.get("time", 0)
        return start, next((a for a in reversed(self._of("end", job)) if a.get("time", 0) >= since), {})

    @cached
    def _latest(self) -> tuple[Start, End]:
        """`_last` of the latest job: status asks for its start and end some 3 times a run each."""
        return self._last(self.job_id)

    @cached
    def submitted(self) -> Submitted:
        """The latest `submitted` event (job id, executor, logs), {} if the run was never submitted (asked some 10
        times a run by status's decision and row)."""
        subs = self._of("submitted")
        return subs[-1] if subs else {}

    @cached
    def job_id(self) -> str:
        """The latest submitted job's id, "" if none."""
        return self.submitted.get("job_id", "")

    @property
    def executor(self) -> str:
        """The executor that holds the latest job ("" for records older than the local queue: SLURM)."""
        return self.submitted.get("executor", "")

    def starts(self, job: str | None = None) -> list[Start]:
        """Every attempt's start, or only `job`'s."""
        return self._of("start", job)

    def last_start(self, job: str | None = None) -> Start:
        """The latest attempt's start of `job` (default: the latest job), {} if it never started."""
        return (self._latest if job is None or job == self.job_id else self._last(job))[0]

    def last_end(self, job: str | None = None) -> End:
        """The `end` of `job`'s latest attempt (default: the latest job), {} if that attempt has none."""
        return (self._latest if job is None or job == self.job_id else self._last(job))[1]

    def ends_since(self, job: str | None, since: float) -> list[End]:
        """`job`'s end events (any job's for None) recorded at `since` or later."""
        return [a for a in self._of("end", job) if a.get("time", 0) >= since]

    def attempts(self) -> list[tuple[Start, End | None]]:
        """Every attempt a job started, oldest first: its start event and its end event (the job's first end at or
        after the start and before the job's next start; None when none was recorded: killed without a word, or
        running). A start without a time (a garbled event) is no attempt."""
        starts = [s for s in self._of("start") if "time" in s]
        found = []
        for j, s in enumerate(starts):
            job, since = s.get("job_id"), s["time"]
            until = min((n["time"] for n in starts[j + 1:] if n.get("job_id") == job), default=float("inf"))
            found.append((s, next((e for e in self._of("end") if e.get("job_id") == job
                                   and since <= e.get("time", -1) <= until), None)))
        return found

    def waited(self, start: Start) -> float:
        """Seconds the attempt `start` began waited in the queue: from the latest submission, or end of an attempt,
        before it (a requeued job) to its start."""
        before = [e["time"] for kind in ("submitted", "end") for e in self._of(kind)
                  if "time" in e and e["time"] <= start["time"]]
        return start["time"] - max(before, default=start["time"])

    def unended_start(self, job: str) -> Start | None:
        """The job's latest attempt when it has no end record (it died without a word: a lost node, a kill), else
        None. Asked by the job's next start: SLURM starts a job again under the same id (NODE_FAIL is requeued by
        the scheduler itself), and that attempt gets its end record then, so that it is counted."""
        start = self.last_start(job)
        return start if start and not self.last_end(job) else None

    @property
    def nodes(self) -> str:
        """Where the latest attempt ran (SLURM's node list), "" if unknown."""
        starts = self.starts()
        return starts[-1].get("nodes", "") if starts else ""

    @cached
    def _counted_ends(self) -> Counter:
        """The attempts' ends since the run was last submitted with --retry (which resets the counts), by why."""
        since = max((a.get("time", 0) for a in self._of("submitted") if a.get("retry")), default=0)
        return Counter(a.get("why") for a in self._of("end") if a.get("time", 0) >= since)

    def count_ends(self, why: str) -> int:
        """Attempts that ended for `why`, since the run was last submitted with --retry (which resets the count)."""
        return self._counted_ends[why]

    def requeue_counts(self) -> tuple[int, int, int]:
        """(timeouts, preemptions, failures) since the last --retry, as status's T/P/F column shows them: failures
        are the attempts that crashed, hung or failed."""
        return (self.count_ends("timeout"), self.count_ends("preempted"),
                sum(self.count_ends(why) for why in ("crashed", "hung", "failed")))

    def retry(self, why: str, bounds: dict[str, int], how: str = "checkpointed", again: str = "requeue") -> Retry:
        """May an attempt that ended for `why` (timeout | preempted | crashed | hung) be requeued? Each kind is
        counted against its own bound, bounds = {"timeout": max_timeouts, "preempted": max_preemptions, "crashed":
        max_crashes}; a hang counts as a crash. The attempt being decided is not in the history yet. Both
        executors decide with this; `again` names what follows in the reason (a SLURM crash's restart as a new
        job step says "restart")."""
        kinds = ("crashed", "hung") if why in ("crashed", "hung") else (why,)
        why = "crashed" if why == "hung" else why
        used, bound = sum(self.count_ends(k) for k in kinds) + 1, bounds[why]
        if used > bound:
            return Retry(False, f"{why} {used} time{'s' if used != 1 else ''}, over max_{_plural(why)}={bound}")
        return Retry(True, f"{how}; {again} {used}/{bound}")

    def with_event(self, event: dict) -> History:
        """This history with one more event (a decision shown before, or without, recording it)."""
        return History((*self.events, event))


def _timed(event: dict) -> bool:
    t = event.get("time", 0)
    return isinstance(t, (int, float)) and not isinstance(t, bool)


def _plural(why: str) -> str:
    return {"timeout": "timeouts", "preempted": "preemptions", "crashed": "crashes"}[why]
