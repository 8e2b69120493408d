"""What every back end answers: the `Executor` interface and its view of a run's jobs.

An executor submits runs (and the data-prep job they wait for), cancels them, and *views* the jobs a sweep's
run folders name: one `JobView` per job, saying its state in squeue's spelling, how it ended, which source said
so and why it waits. submit, status, cancel and the run state (jobs/state.py) ask it once per look and
hold no back-end branch; a new back end is one module with one class (see executors/__init__.py).

Light on purpose (no torch, no submitit at import): `zbpscale status` imports it.
"""

from __future__ import annotations

import abc
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

if TYPE_CHECKING:
    from zbpscale.jobs.sweep import PlannedRun, Sweep

ALIVE = {"PENDING", "RUNNING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "CONFIGURING", "COMPLETING",
         "SUSPENDED", "RESIZING", "SIGNALING", "STAGE_OUT", "PREEMPTED"}
"""Job states in which a job still holds or waits for resources: squeue's spelling, which every back end's view
speaks (the local queue's queued and running are PENDING and RUNNING)."""
UNKNOWN = "UNKNOWN"  # the scheduler did not answer: the job may be alive, so nothing acts on it
DRIVER_DOWN = "DRIVER_DOWN"  # a local-queue job whose driver is not running (its entry still waits)
NEVER_REASON = "DependencyNeverSatisfied"  # squeue: the job waits for a job that failed (its data prep)
UNSEEN_JOB_GRACE_S = 180.0
"""How long after its submission a job that no source lists yet counts as queued ("not yet visible")."""


@dataclass(frozen=True)
class JobView:
    """One job as the scheduler sees it now."""

    state: str = ""
    """squeue's spelling (PENDING, RUNNING, COMPLETED, CANCELLED, NODE_FAIL, ...), UNKNOWN, DRIVER_DOWN, or ""
    (no source knows the job any more)."""
    how: str = ""
    """How an ended job ended, in words ("a task was killed by signal 9 (SIGKILL)"); "" when clean or unknown."""
    words: str = ""
    """The end state in words when it says more than the trainer could ("node failure", "out of memory")."""
    source: str = ""
    """Who said so: squeue, sacct, queue (the local queue's entries), submit (not yet visible), or ""."""
    reason: str = ""
    """Why a live job waits (squeue's reason, e.g. DependencyNeverSatisfied) or why its state is uncertain."""
    log: str = ""
    """A log that explains the state when the run's own logs cannot (the failed prep job's)."""

    @property
    def live(self) -> bool:
        """The job holds or waits for resources, or may: it must not be submitted again."""
        return self.state in ALIVE or self.state in (UNKNOWN, DRIVER_DOWN)


@dataclass
class View:
    """Every job asked about (`jobs`; a job not in it is unknown to every source), a line for each source
    that could not answer (`notes`, said once in status), and what those sources said (`failed`, "" when every
    source answered: a poller backs off, jobs/poller.py)."""

    jobs: dict[str, JobView] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    failed: str = ""

    def of(self, job: str | None) -> JobView:
        return self.jobs.get(job or "", JobView())

    def update(self, other: View) -> View:
        self.jobs.update(other.jobs)
        self.notes += [n for n in other.notes if n not in self.notes]
        self.failed = "; ".join(f for f in (self.failed, other.failed) if f)
        return self


class Executor(abc.ABC):
    """A back end for a sweep's jobs, over the jobs root that holds every sweep's run folders."""

    name: ClassVar[str]
    """What `submitted` events record as `executor`, and what `--executor` takes."""
    label: ClassVar[str]
    """The back end in a sentence ("the local queue")."""
    rate_limited: ClassVar[bool] = False
    """Its view asks a shared controller that sites rate-limit (SLURM's squeue and sacct): whatever waits asks it
    at most once per Sweep.poll_s (jobs/poller.py). False: its view reads files, free as often as one likes."""

    def __init__(self, root: Path):
        self.root = Path(root)

    @abc.abstractmethod
    def view(self, submitted: list[dict], *, now: float) -> View:
        """The jobs of these `submitted` events (each with job_id, time and, when recorded, name and grace_s), in
        one question per source; `ended` in an event: the `why` of the end its run folder recorded for the job's
        latest attempt (executors.view_all), which a back end need not ask about again."""

    @abc.abstractmethod
    def submit(self, sweep: Sweep, todo: dict[PlannedRun, str], *, prep: bool, max_parallel: int = 0
               ) -> list[PlannedRun]:
        """Submit each run of `todo` ({run: new | resume | retry}), after the data-prep job when `prep`; record
        a `submitted` event in each run folder and print a line per job. Returns the runs a submit limit of the
        scheduler held back (nothing recorded of them; a line said so), to be submitted when jobs end."""

    @abc.abstractmethod
    def cancel(self, run_dir: Path, job: str, seen: JobView) -> str:
        """Ask a live job to stop: a running one checkpoints first, a waiting one is dropped; why it could not be
        asked, in one line, or ''."""

    def cancel_all(self, jobs: list[tuple[Path, str, JobView]]) -> dict[str, str]:
        """`cancel` each (run folder, job, its view), every one whatever happened to the others: {job: why} of
        those that could not be asked; a back end that can ask for many at once overrides it."""
        failed = {job: self.cancel(run_dir, job, seen) for run_dir, job, seen in jobs}
        return {job: why for job, why in failed.items() if why}

    def check(self, runs: list[PlannedRun], *, quick: bool = False) -> None:
        """Refuse, with a ConfigError, runs this back end could never start (the dry run refuses them too; `quick`:
        without slow questions such as importing torch); a sweep_checks.field_error names the sweep file's line."""

    def keep_going(self, submitted: list[dict]) -> str:
        """Restart what the jobs need to go on (the local queue's driver); a line to print when it did."""
        return ""
