"""The runs a command works on: one `Run` that status, submit, cancel and collect pass around, found one way.

A `Run` is a run's name (with its size, arm and seed), its folder, what its sweep file plans for it (`planned`, a
sweep.PlannedRun; None for a run found only on disk), and, once decided (`decided`), the look at its folder, its
history (its attempts, read once), the scheduler's view of its latest job and its state. `find_runs` finds them for
every command: from a sweep file, every run it plans (folder or not) and the run folders beside them that it no
longer plans (`unplanned`); from a sweep folder, the run folders in it; from a jobs root (or nothing: ./jobs), every
sweep's. A folder found on disk is named by its own records when its name is not `{size}-{arm}[-s{seed}]`
(`identity`). Deciding writes nothing (jobs/state.py).
"""

from __future__ import annotations

import dataclasses
import functools
import time
from dataclasses import dataclass
from pathlib import Path

from zbpscale.errors import ConfigError, ZbpError
from zbpscale.jobs.executors.base import JobView, View
from zbpscale.jobs.reasons import refined
from zbpscale.jobs.state import RunState, decide, heard
from zbpscale.jobs.sweep import PlannedRun, Sweep, find_sweeps, load_sweep, not_found, refuse_other_owner
from zbpscale.run.config import SIZES, TrainConfig
from zbpscale.run.folder import RunFolder, parse_run_name
from zbpscale.run.history import History
from zbpscale.run.snapshot import Snapshot
from zbpscale.tables import named
from zbpscale.text import matches, patterns, runs_hint
from zbpscale.zbp.config import arm_name, arm_zbp_config


@dataclass(frozen=True)
class Run:
    """One run as the commands see it (see the module docstring)."""

    name: str
    run_dir: Path
    size: str
    arm: str
    seed: int = 0
    planned: PlannedRun | None = None
    """What the sweep file plans (its Size, Arm and config), when the run was found through it."""
    history: History = History()
    job: JobView = JobView()
    state: RunState = RunState("new")
    seen: Snapshot | None = dataclasses.field(default=None, compare=False, repr=False)
    """The look at its folder it was decided on (None before `decided`)."""
    unplanned: bool = False
    """A run folder of the sweep's folder that the sweep file, found through it, no longer plans (its size, arm or
    seed removed from the file, or a folder made by hand); False for every run found without a sweep file."""
    unchecked: bool = False
    """An entry of a sweep's folder not yet tested to be a run's (find_runs' `checked=False`: status tests it with
    its look, `Snapshot.is_run`, and leaves it out where it is not)."""

    @property
    def folder(self) -> RunFolder:
        return RunFolder(self.run_dir)

    @classmethod
    def of(cls, planned: PlannedRun) -> Run:
        """A run a sweep file plans."""
        return cls(planned.name, planned.run_dir, planned.size.name, planned.arm.name, planned.seed, planned)

    @classmethod
    def found(cls, run_dir: Path, *, unchecked: bool = False) -> Run:
        """A run folder found on disk, named as `identity` says."""
        folder = RunFolder(run_dir)
        return cls(folder.name, folder.path, *identity(folder), unchecked=unchecked)


def identity(folder: RunFolder) -> tuple[str, str, int]:
    """(size, arm, seed) of a run folder found on disk: from its name when it is `{size}-{arm}[-s{seed}]` (what a
    sweep names its runs), else from its own config.json (a run trained by hand into any folder): the size preset
    of its model's shape (else the folder's name), the arm of its estimator settings and its seed; without a
    config the trainer would take, the folder's name is its size and its arm is ''. A name whose arm part names no
    arm (`tiny-bp.old`, `tiny-rerun`: a run moved aside or trained by hand) goes by its config too: as an arm of its
    own it was compared with bp as if it were a ZBP arm."""
    parsed = parse_run_name(folder.name)
    if parsed and is_arm(parsed[1]):
        return parsed
    try:
        config = TrainConfig.from_dict(folder.read_config() or {})
    except ZbpError:
        return folder.name, "", 0
    shape = dataclasses.replace(config.model, zbp=None)
    size = next((name for name, preset in SIZES.items()  # a sweep's Size may set its own context length
                 if dataclasses.replace(preset, max_seq_len=shape.max_seq_len) == shape), folder.name)
    return size, arm_name(config.model.zbp), config.seed


@functools.lru_cache(maxsize=256)
def is_arm(name: str) -> bool:
    """Whether `name` is an arm's name (zbp.arm_zbp_config's: bp, zbp_n16, zbp_n4_fwd, ...)."""
    try:
        arm_zbp_config(name)
    except (ZbpError, ValueError, TypeError):
        return False
    return True


def unplanned(sweep: Sweep, planned: set[str], *, checked: bool = True) -> list[Run]:
    """The run folders of the sweep's folder that its sweep file does not plan (`planned`: the names it does), as
    found on disk and marked `unplanned` (`checked=False`: every entry, `unchecked`)."""
    return [dataclasses.replace(Run.found(p, unchecked=not checked), unplanned=True)
            for p in RunFolder.all_in(sweep.jobs_dir, but=planned, checked=checked)]


def find_runs(target: str | None, only: str | None = None, *, planned_only: bool = False, checked: bool = True
              ) -> list[tuple[str, list[Run]]]:
    """[(sweep name, its runs)] of a sweep file (every planned run, folder or not, and, unless `planned_only`, any
    other run folder in its sweep folder), a sweep folder, a jobs root or nothing (./jobs); `only`: comma-separated
    name patterns (a ConfigError naming the runs when they match none). `checked=False`: each entry of a sweep's
    folder, none tested to be a run's (marked `unchecked`: status tests each where it reads it; a sweep's cold
    folders were read one after another here, 10,000 runs: 0.75 s)."""
    path = Path(target or "jobs")
    if path.is_file() and path.suffix != ".py" and RunFolder.is_run(path.parent):  # jobs/s/tiny-bp/config.json
        raise ConfigError(f"{path} is a file of the run folder {path.parent}", hint=f"status takes the folder, "
                          f"{path.parent}; cancel and sync its sweep's folder, {path.parent.parent}, with --only "
                          f"{path.parent.name}; collect and report take the sweep whole")  # as find_sweeps says
    if path.is_file():  # a sweep file, whatever its name ends with, as submit takes it (smoke.txt was "no sweep file")
        from zbpscale.jobs.tuning import planned

        sweep = load_sweep(path)
        refuse_other_owner(sweep, path, "give")  # its folder's runs are another file's: give that one
        runs = {r.name: Run.of(r) for r in planned(sweep)[0]}
        runs.update({r.name: r for r in ([] if planned_only else unplanned(sweep, set(runs), checked=checked))})
        found = [(sweep.name, list(runs.values()))]
    elif target is not None and not path.exists():
        raise not_found(path)
    else:
        found = [(name, [Run.found(p, unchecked=not checked) for p in RunFolder.all_in(folder, checked=checked)])
                 for name, folder in find_sweeps(target)]
    if not patterns(only):
        return found
    chosen = [(name, [r for r in runs if matches(r.name, patterns(only))]) for name, runs in found]
    a_run = lambda r: not r.unchecked or RunFolder.is_run(r.run_dir)  # noqa: E731 - an entry of a folder: tested
    if not any(a_run(r) for _, runs in chosen for r in runs):
        names = sorted(r.name for _, runs in found for r in runs if a_run(r))
        raise ConfigError(f"no run matches --only {only!r}", hint=runs_hint(names))
    return chosen


def decided(runs: list[Run], root: Path, *, look=None, now: float | None = None,
            stall_after_s: float | None = None) -> tuple[list[Run], View]:
    """The runs decided: one look at each one's folder (a Snapshot: each file read at most once, and kept in
    `Run.seen` for whatever the command shows next), one view of their latest jobs (each back end asked once,
    whatever the number of runs; `look`: a Poller's, else asked now), and each one's state (state.decide: an attempt
    that died without a word given the end the scheduler's account gives it, in memory; a failed run's reason
    sharpened from its log); and the view. What status's rows, collect's states and submit's plan are made of.
    Writes nothing."""
    now = time.time() if now is None else now
    seen, view = viewed(runs, root, look=look, now=now)
    return [judged(r, seen[r.run_dir], view, now=now, stall_after_s=stall_after_s) for r in runs], view


def viewed(runs: list[Run], root: Path, *, look=None, now: float) -> tuple[dict[Path, Snapshot], View]:
    """`decided`'s first half: a look at each run's folder (its history read) and the one view of their jobs."""
    from zbpscale.jobs import executors

    seen = {r.run_dir: Snapshot(r.run_dir) for r in runs}
    view = look(seen) if look else executors.view_all(root, {d: s.history for d, s in seen.items()}, now=now)
    return seen, view


def judged(r: Run, snap: Snapshot, view: View, *, now: float, stall_after_s: float | None = None) -> Run:
    """`decided`'s second half, for one run: its state from its look and its job's view."""
    history, job, state = judgement(r, snap, view, now=now, stall_after_s=stall_after_s)
    return dataclasses.replace(r, seen=snap, history=history, job=job, state=state)


def judgement(r: Run, snap: Snapshot, view: View, *, now: float, stall_after_s: float | None = None
              ) -> tuple[History, JobView, RunState]:
    """What `judged` gives the run (its history as heard, its job's view, its state), without the new Run: status
    makes a row of each of 10,000 runs from them (a Run made again cost a third of the decision)."""
    job = view.of(snap.history.job_id)
    state = refined(decide(snap, job, now=now, stall_after_s=stall_after_s))
    if state.state == "new" and r.planned is not None and r.planned.waits_for:  # a final run of a tuning sweep
        state = dataclasses.replace(state, reason=f"waits for tuning: {named(list(r.planned.waits_for))}")
    return heard(snap, job), job, state
