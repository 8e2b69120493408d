"""`zbpscale cancel SWEEP [--only ...]`: stop a sweep's runs cleanly, on SLURM or the local queue.

SWEEP is what `zbpscale status` takes: a sweep file or a sweep folder (jobs/<sweep>).

A running job is asked to checkpoint first (SIGUSR2, as at a time limit) and then ends without requeueing; a
job still waiting is dropped. Either way the run keeps its folder, and submitting the sweep again resumes it.
A running SLURM job's run folder also gets a CANCEL stamp, which its trainer honours at its next step like the
signal: where the scheduler does not answer (a controller down), that stamp is how a run not known to have ended
is stopped, and it counts as stopped once its folder records the end of its job's attempt. The command waits
(`--no-wait` does not) until the cancelled jobs have stopped, showing which are left; it exits non-zero if any
run could not be stopped.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from zbpscale.argtypes import at_least
from zbpscale.errors import ZbpError
from zbpscale.jobs.runs import Run
from zbpscale.jobs.settings import POLL_S
from zbpscale.run.folder import RunFolder
from zbpscale.run.snapshot import Snapshot
from zbpscale.tables import named
from zbpscale.text import HINTED

DECIDED = ("completed", "failed", "cancelled")
"""Ends after which a run's job never trains again, whatever the executor: nothing to stop."""


def one_sweep(target: str, only: str | None) -> tuple[Path, list[Run]]:
    """(jobs root, the runs chosen that have a folder) of one sweep, a file or a folder, found as `zbpscale status`
    finds them (runs.find_runs); --only chooses among all of them (a planned run not submitted yet, chosen, is
    nothing to cancel, not a pattern that matches no run)."""
    from zbpscale.jobs.runs import find_runs
    from zbpscale.text import select

    sweeps = find_runs(target)
    if len(sweeps) > 1:
        raise ZbpError(f"{target} holds {len(sweeps)} sweeps ({', '.join(n for n, _ in sweeps)})",
                       hint="name one: zbpscale cancel jobs/<sweep> (or its sweep file)")
    (_, runs), = sweeps
    chosen = [r for r in select(runs, only) if r.folder.config.exists()]  # chosen among the sweep file's runs too
    return (runs[0].run_dir.parent.parent if runs else Path("jobs")), chosen


def request(root: Path, runs: list[Run]) -> tuple[list[Run], list[Run]]:
    """Ask every live job of the runs to stop, through the executor that holds it, all of an executor's jobs in
    one go (SLURM: one scancel per signal), or through its run folder's CANCEL stamp where the scheduler does not
    answer; a line for each. Returns (the runs asked, those that could not be)."""
    from zbpscale.jobs import executors

    looks = {r.run_dir: Snapshot(r.run_dir) for r in runs}
    view = executors.view_all(root, {d: look.history for d, look in looks.items()})
    by_kind: dict[str, list[tuple[Run, str, executors.JobView]]] = {}
    asked, failed = [], []
    for run in runs:
        history = looks[run.run_dir].history
        seen = view.of(history.job_id)
        if seen.state == executors.UNKNOWN and history.last_end().get("why") not in DECIDED:
            # the scheduler is silent: the job may be running, and its trainer reads the stamp all the same
            RunFolder(run.run_dir).cancel.write_text("cancel\n")
            print(f"{run.name}: job {history.job_id}: the scheduler does not answer ({view.failed or seen.reason}); "
                  "asked through its run folder (CANCEL): its trainer checkpoints and stops at its next step",
                  flush=True)
            asked.append(run)
        elif seen.live and seen.state != executors.UNKNOWN:
            by_kind.setdefault(history.executor, []).append((run, history.job_id, seen))
    for kind, jobs in by_kind.items():
        back = executors.get(kind, root)
        why = back.cancel_all([(run.run_dir, job, seen) for run, job, seen in jobs])
        for run, job, seen in jobs:
            if job in why:
                print(f"{run.name}: job {job} ({back.name}, {seen.state.lower()}) could not be stopped: {why[job]}",
                      file=sys.stderr, flush=True)
                failed.append(run)
            else:
                print(f"{run.name}: job {job} ({back.name}, {seen.state.lower()}) asked to stop", flush=True)
                asked.append(run)
    return asked, failed


def wait_stopped(root: Path, runs: list[Run], *, timeout_s: float, poll_s: float = POLL_S, tick_s: float = 1.0,
                 poller=None) -> list[str]:
    """Wait until none of the runs has a live job, reading their folders every `tick_s` and asking the scheduler
    at most once per `poll_s` (and once more when a folder changes: jobs/poller.py); returns the names still live
    at the timeout."""
    from zbpscale.jobs.poller import Poller

    poller = poller or Poller(root, poll_s=poll_s, say=lambda line: print(line, flush=True))
    deadline, shown = time.time() + timeout_s, None
    while True:
        looks = {r.run_dir: Snapshot(r.run_dir) for r in runs}
        view = poller.look(looks)
        left = [r.name for r in runs if stopping(view.of(looks[r.run_dir].history.job_id), looks[r.run_dir])]
        if not left or time.time() > deadline:
            return left
        if left != shown:
            print(f"waiting for {named(left)} to checkpoint and stop", flush=True)
            shown = left
        time.sleep(tick_s)


def stopping(seen, look: Snapshot) -> bool:
    """Whether a run asked to stop may still be running: its job is live, or (the scheduler silent) its folder has
    recorded no end of the job's latest attempt."""
    from zbpscale.jobs import executors

    if seen.state == executors.UNKNOWN:
        return not look.history.last_end()
    return seen.live


def add_arguments(p) -> None:
    p.add_argument("sweep", help="a sweep file (sweeps/ladder.py) or a sweep folder (jobs/ladder)")
    p.add_argument("--only", metavar="PATTERNS", help="comma-separated run-name patterns, e.g. 's60-*,*-bp'")
    p.add_argument("--no-wait", action="store_true", help="ask and return; do not wait for the jobs to stop")
    p.add_argument("--timeout", type=at_least(0, float), default=900.0, metavar="SECONDS",
                   help="how long to wait for the jobs to stop (default 900)")


def run(args) -> int:
    root, runs = one_sweep(args.sweep, args.only)
    asked, failed = request(root, runs)
    if not asked and not failed:
        print("nothing to cancel: no run of the selection has a queued or running job")
        return 0
    unstopped = (f"could not stop {named([r.name for r in failed], HINTED)} (the lines above say why; run zbpscale "
                 "cancel again)") if failed else ""
    if args.no_wait or not asked:
        if unstopped:
            print(unstopped, file=sys.stderr)
        return 1 if failed else 0
    from zbpscale.jobs.poller import poll_s_of

    left = wait_stopped(root, asked, timeout_s=args.timeout, poll_s=poll_s_of(args.sweep))
    if left:
        print(f"still stopping after {args.timeout:g} s: {named(left, HINTED)} (see their logs/)", file=sys.stderr)
    else:
        print(f"stopped: {named([r.name for r in asked])} (submit the sweep again to resume "
              f"{'it' if len(asked) == 1 else 'them'})")
    if unstopped:
        print(unstopped, file=sys.stderr)
    return 1 if left or failed else 0
