"""The back ends that run a sweep's jobs, behind one interface (base.Executor) and one view of every job.

    slurm.py   SLURM through submitit (the view reconciles squeue with accounting)
    local.py   this node's local queue (local_queue/)

A new back end is one module with an `Executor` subclass, added to KINDS. Every `submitted` event in a run's
attempts.jsonl names the executor that holds its job, so a sweep whose runs went to different back ends is
viewed through each (`view_all`).
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from zbpscale.errors import ConfigError
from zbpscale.jobs.executors.base import DRIVER_DOWN, UNKNOWN, Executor, JobView, View
from zbpscale.jobs.executors.local import LocalExecutor
from zbpscale.jobs.executors.slurm import SlurmExecutor

KINDS: dict[str, type[Executor]] = {"slurm": SlurmExecutor, "local": LocalExecutor}

__all__ = ["DRIVER_DOWN", "KINDS", "UNKNOWN", "Executor", "JobView", "View", "asked", "choose", "get", "view_all",
           "view_of"]


def get(kind: str, root: Path) -> Executor:
    """The executor that `submitted` events name `kind` (old records without one were SLURM's)."""
    try:
        return KINDS[kind or "slurm"](root)
    except KeyError:
        raise ConfigError(f"unknown executor {kind!r}", hint=f"one of: {', '.join(KINDS)}") from None


AUTO_WAIT_S = 60.0
"""How long `--executor auto` waits for the controller of a machine with SLURM configured (a controller restarts in
seconds to a minute); ZBPSCALE_SLURM_WAIT_S overrides it."""


def choose(requested: str, root: Path, *, wait: bool = True) -> Executor:
    """The executor for a submit: the one asked for, or (`auto`) SLURM when a controller answers, else local. A
    machine with SLURM configured (slurm_commands.configured) is SLURM's however long its controller is silent: auto
    waits AUTO_WAIT_S for it, then refuses, rather than train a sweep on a login node (`wait` False, a dry run:
    SLURM's at once, its view saying that the controller does not answer)."""
    from zbpscale.jobs.executors import slurm_commands as slurm

    if requested not in ("auto", "slurm"):
        return get(requested, root)
    if slurm.answers():
        return get("slurm", root)
    if requested == "slurm":
        raise ConfigError("--executor slurm, but no SLURM controller answers here (sinfo failed)",
                          hint="check SLURM_CONF and that the controller is up (sinfo), or use --executor local")
    where = slurm.configured()
    if not where:
        return get("local", root)
    if not wait:
        return get("slurm", root)
    wait_s = float(os.environ.get("ZBPSCALE_SLURM_WAIT_S") or AUTO_WAIT_S)
    print(f"SLURM is configured here ({where}) but its controller does not answer (sinfo): waiting up to "
          f"{wait_s:g} s for it", flush=True)
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        time.sleep(min(5.0, max(0.0, deadline - time.monotonic())))
        if slurm.answers():
            return get("slurm", root)
    raise ConfigError(f"SLURM is configured here ({where}) but its controller did not answer (sinfo) within "
                      f"{wait_s:g} s; nothing submitted",
                      hint="submit again once sinfo answers, or --executor local to train on this machine")


def view_all(root: Path, histories: dict, *, now: float | None = None) -> View:
    """One view of the latest job of every run ({run: its History}, any key), each asked of the executor that
    holds it (one call each, whatever the number of runs); a job whose latest attempt's end its run folder
    recorded is marked `ended` (its why), so accounting is not asked about it again."""
    return view_of(root, [asked(h) for h in histories.values()], now=now)


def asked(history) -> tuple[str, dict] | None:
    """What `view_of` asks about a run's latest job: (its executor, its submitted event, with `ended` when its
    latest attempt's end is recorded); None for a run never submitted."""
    if not history.job_id:
        return None
    end, sub = history.last_end(), history.submitted
    return history.executor, {**sub, "ended": end["why"]} if end else sub


def view_of(root: Path, asks: list, *, now: float | None = None) -> View:
    """`view_all` from its runs' `asked` (status asks them in the processes that read the runs)."""
    now = time.time() if now is None else now
    by_kind: dict[str, list[dict]] = {}
    for ask in asks:
        if ask is not None:
            by_kind.setdefault(ask[0], []).append(ask[1])
    view = View()
    for kind, submitted in by_kind.items():
        view.update(get(kind, root).view(submitted, now=now))
    return view
