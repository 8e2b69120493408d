"""The polite poller: how every command that waits (submit --wait, status --watch, cancel) asks the scheduler.

Reading run folders is free; asking SLURM is an RPC to a controller that sites rate-limit (they ask for 60-120 s
between polls, and `rl_enable` makes excess calls fail). So a waiter reads the folders as often as it likes and
asks a rate-limited back end (`Executor.rate_limited`) through one `Poller`:
  - at most once per `poll_s` (Sweep.poll_s: POLL_S, 60 s, unless the sweep says otherwise, never under
    MIN_POLL_S; jobs/settings.py), one question for every job of every run it watches (SLURM: one squeue, and one
    sacct for the jobs squeue no longer lists whose end their run folder has not recorded; executors.view_all). A
    command given a sweep folder rather than its file waits by the poll_s that the last submit kept in the folder
    (`poll_s_of`; a folder from before that, or a jobs root: POLL_S);
  - plus once early when the folders suggest a change (`Polled.marks`: an attempts event that the scheduler's
    account did not write, a COMPLETE marker, a heartbeat gone stale), SETTLE_S after it is first seen (a trainer
    writes its end moments before its job leaves the queue) and no sooner than EARLY_GAP_S after the last ask;
  - a scheduler that does not answer (squeue or sacct: `Socket timed out`, `Resource temporarily unavailable`, a
    daemon down) is asked again after `backoff_s` (doubling, up to MAX_BACKOFF_S), said once, and never turned
    into a run state: every job keeps its last-seen state, and one the poller has no answer for is UNKNOWN (left
    alone), never ended or failed.
Back ends whose view reads files (the local queue) are asked on every look. Decides nothing, writes nothing.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from zbpscale.jobs import executors
from zbpscale.jobs.executors import UNKNOWN, JobView, View
from zbpscale.jobs.settings import POLL_S, SweepSettings
from zbpscale.run.snapshot import Snapshot
from zbpscale.tables import age

MAX_BACKOFF_S = 600.0
"""The longest wait before asking a scheduler that did not answer again (submitit's sacct interval)."""
EARLY_GAP_S = 10.0
"""An early ask (a folder changed) comes no sooner than this after the last ask."""
SETTLE_S = 5.0
"""An early ask waits this long after the change is first seen: the folder changes before the scheduler does."""
HEARTBEAT_STALE_S = 120.0
"""A heartbeat older than this (the trainer rewrites it every few seconds while it steps) suggests a dead job."""


def backoff_s(failures: int, poll_s: float) -> float:
    """Seconds until the next ask after `failures` asks in a row went unanswered: poll_s doubled for each, at
    most MAX_BACKOFF_S (never less than poll_s)."""
    return poll_s if failures <= 0 else max(poll_s, min(MAX_BACKOFF_S, poll_s * 2 ** failures))


def poll_s_of(target: str | Path | None) -> float:
    """The poll_s of a command's target: a sweep file's own; a sweep folder's, as its last submit kept it
    (SweepSettings); else (a jobs root, a folder made before submit kept its settings) POLL_S."""
    path = Path(target or "jobs")
    if path.is_file() and path.suffix == ".py":
        from zbpscale.jobs.sweep import load_sweep

        return load_sweep(path).poll_s
    kept = SweepSettings.read(path)
    return POLL_S if kept is None else kept.poll_s


@dataclass(frozen=True)
class Polled:
    """What a Poller reads of a look at a run folder (`polled`): taken where the look is (status: in the processes
    that read the runs), told to `Poller.look_at`."""

    job_id: str
    executor: str
    ask: tuple[str, dict] | None
    """Its history's question of its latest job (executors.asked)."""
    polite: bool
    """Its job's back end is rate-limited (SLURM): asked at most once per poll_s."""
    signs: tuple = ()
    """A polite run's `marks` as read: its attempts events the scheduler's account did not write (a submit, a start,
    an end by the job itself), its COMPLETE marker, its heartbeat's time."""

    def marks(self, *, now: float, stale_s: float = HEARTBEAT_STALE_S) -> tuple:
        """What of its folder, when it changes, suggests that the scheduler has news: its signs, with whether its
        heartbeat has gone stale in place of its time."""
        own, complete, beat = self.signs
        return own, complete, beat is not None and now - beat > stale_s


def polled(run: Snapshot) -> Polled:
    """What a Poller reads of a look at a run folder (a polite run's heartbeat too)."""
    history = run.history
    kind = executors.KINDS.get(history.executor or "slurm")
    polite = bool(history.job_id) and kind is not None and kind.rate_limited
    signs = (sum(1 for a in history.events if not a.get("source")), run.complete, run.heartbeat.get("time")) \
        if polite else ()
    return Polled(history.job_id, history.executor, executors.asked(history), polite, signs)


def _clock(t: float) -> str:
    return time.strftime("%H:%M:%S", time.localtime(t))


class Poller:
    """The scheduler's view of the runs' latest jobs for a command that looks again and again (see the module
    docstring); `look` is as cheap as reading the run folders except when an ask is due. `say`: where the one
    line about a scheduler that stopped (or started again) answering goes; None: only the view's notes say it."""

    def __init__(self, root: Path, *, poll_s: float = POLL_S, clock: Callable[[], float] = time.time,
                 say: Callable[[str], None] | None = None):
        self.root, self.poll_s, self.clock, self.say = Path(root), float(poll_s), clock, say
        self.asks = 0  # questions asked of the rate-limited back ends so far (one per back end per ask)
        self.asked_at: float | None = None
        self.answered_at: float | None = None
        self.next_at = 0.0
        self.failures = 0
        self.error = ""
        self.jobs: dict[str, JobView] = {}  # the last answer about each job
        self.asked: set[str] = set()  # the jobs of the last answered ask (not in `jobs`: no source lists them)
        self.notes: list[str] = []
        self.marks: dict = {}  # each run's Polled.marks at the last ask
        self.changed_at: float | None = None

    def look(self, runs: dict[Path, Snapshot]) -> View:
        """The view of the latest job of every run ({run folder: a look at it}): the free back ends asked now,
        the rate-limited ones as last answered unless an ask is due."""
        return self.look_at({d: polled(run) for d, run in runs.items()})

    def look_at(self, runs: dict[Path, Polled]) -> View:
        """`look`, told what each run's look says ({run folder: `polled` of it})."""
        now = self.clock()
        polite = {d: p for d, p in runs.items() if p.polite}
        view = executors.view_of(self.root, [p.ask for d, p in runs.items() if d not in polite], now=now)
        if polite:
            marks = {d: p.marks(now=now) for d, p in polite.items()}
            if self.due(now, marks):
                self._ask(polite, marks, now)
            view.update(self._seen(polite, marks))
        return view

    def ask_soon(self) -> None:
        """Ask at the next look: jobs were just submitted, and the last answer cannot know them."""
        self.next_at = 0.0

    def due(self, now: float, marks: dict) -> bool:
        """Whether to ask now: never asked; poll_s (or the back-off) since the last ask; or, when answering, the
        folders changed since the last ask, SETTLE_S ago, and EARLY_GAP_S have passed since it."""
        if self.asked_at is None or now >= self.next_at:
            return True
        if self.failures or marks == self.marks:
            self.changed_at = None if marks == self.marks else self.changed_at
            return False
        self.changed_at = now if self.changed_at is None else self.changed_at
        return now >= self.changed_at + SETTLE_S and now >= self.asked_at + EARLY_GAP_S

    def _ask(self, runs: dict[Path, Polled], marks: dict, now: float) -> None:
        fresh = executors.view_of(self.root, [p.ask for p in runs.values()], now=now)
        kinds = {p.executor or "slurm" for p in runs.values()}
        self.asks += len(kinds)
        self.asked_at, self.marks, self.changed_at = now, marks, None
        if not fresh.failed:
            if self.failures and self.say:
                self.say(f"the scheduler answers again ({_clock(now)})")
            self.failures, self.error, self.answered_at, self.next_at = 0, "", now, now + self.poll_s
            self.jobs, self.notes = dict(fresh.jobs), list(fresh.notes)
            self.asked = {p.job_id for p in runs.values()}
            return
        self.failures += 1
        delay = backoff_s(self.failures, self.poll_s)
        self.next_at, self.error = now + delay, fresh.failed
        self.jobs.update({job: seen for job, seen in fresh.jobs.items() if seen.source == "squeue"})
        if self.failures == 1 and self.say:
            self.say(f"the scheduler is not answering ({fresh.failed}): asking again in {age(delay)}, then less "
                     f"often (at most every {age(MAX_BACKOFF_S)}) until it does; runs keep their last-seen states")

    def _seen(self, runs: dict[Path, Polled], marks: dict) -> View:
        """The last answers, for the runs' jobs now: a job nobody answered for, or one last seen ended whose run
        folder changed since, is UNKNOWN (left alone) until the next ask."""
        view = View(notes=list(self.notes))
        if self.failures:
            since = f"as of its last answer at {_clock(self.answered_at)}" if self.answered_at else "unknown"
            view.notes.append(f"the scheduler is not answering ({self.error}): states {since}; asking again at "
                              f"{_clock(self.next_at)}")
        for run_dir, run in runs.items():
            job = run.job_id
            seen, changed = self.jobs.get(job), marks[run_dir] != self.marks.get(run_dir)
            if seen is not None and (seen.live or not changed):
                view.jobs[job] = seen
            elif job not in self.asked or changed:
                view.jobs[job] = JobView(UNKNOWN, reason="its run folder changed since the scheduler was last asked"
                                         if job in self.asked else "the scheduler has not been asked about it yet")
            # else: asked, and no source lists it
        return view
