"""`python -m zbpscale.submit SWEEP`: plan every size x arm run of a sweep and submit what is missing.

    python -m zbpscale.submit sweeps/ladder.py --dry-run        # the plan, touching nothing
    python -m zbpscale.submit sweeps/ladder.py                  # submit: SLURM where it is set up, else the local queue
    python -m zbpscale.submit sweeps/ladder.py --only 's60-*,*-bp'
    python -m zbpscale.submit sweeps/smoke.py --wait            # stay until every run has finished (exit 1: one failed)

Idempotent: complete runs are skipped, partial runs resume from their folder, a run whose recorded job is
still queued or running is left alone, so the same command can be re-run at any time. When the sweep's data
are not prepared, a prep job is submitted first and the training jobs wait for it (afterok). The sweep file is
the truth for what it still decides: a run that has not trained takes the file's current values; one that has
keeps its own, said in one line (`--apply-changes` gives it those safe on resume: config_notes); a run folder the
file no longer plans whose job is live is named with the command that cancels it (unplanned_notes), and so is a live
job submitted with other Resources, signal_delay_s or max_* than the file now gives, which it keeps through its
requeues (settings_notes).

Without SLURM (or with `--executor local`) the runs go to the node's detached local queue (executors/local_queue/): it
outlives the terminal, packs runs onto the node's GPUs (CPU runs: `--max-parallel` at a time, default 1) and
requeues them after their time limit just as the SLURM jobs requeue themselves.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import math
import os
import shlex
import sys
import time
from pathlib import Path

from zbpscale.argtypes import at_least
from zbpscale.data import manifest_path
from zbpscale.errors import ConfigError, ZbpError
from zbpscale.files import read_json, unwritable
from zbpscale.jobs import executors, tuning
from zbpscale.jobs import runs as found
from zbpscale.jobs.executors import Executor, View
from zbpscale.jobs.poller import Poller
from zbpscale.jobs.settings import SweepSettings
from zbpscale.jobs.state import SUBMITS, Action, RunState, decide, record_unheard
from zbpscale.jobs.sweep import PlannedRun, Sweep, data_path, load_sweep, lr_text, prep_source, refuse_other_owner
from zbpscale.jobs.sweep_checks import in_sweep_file
from zbpscale.jobs.sweep_edits import config_notes, settings_notes, trained, unplanned_notes
from zbpscale.lease import wait_lock
from zbpscale.run.config import RESUME_SAFE, batch_plan, n_params
from zbpscale.run.folder import RunFolder
from zbpscale.run.snapshot import Snapshot, keep_missing
from zbpscale.tables import (
    ALIKE,
    boxed,
    color_on,
    fit_columns,
    fmt_tokens,
    named,
    on_terminal,
    plain_lines,
    plural,
    seed_count,
    terminal_width,
    wrap,
)
from zbpscale.text import matches, patterns, select, shown_path


def run_action(run: PlannedRun, view: View, *, retry: bool = False) -> Action:
    """What submit does with a run (state.ACTIONS), from a look at its folder and the executors' `view`."""
    seen = Snapshot(run.run_dir)
    return decide(seen, view.of(seen.history.job_id)).action(seen.folder, retry=retry)


def broken_notes(runs: list[found.Run]) -> list[str]:
    """One line per broken run (decided): what is wrong with its folder."""
    return [f"{run.name}: broken run folder: {run.state.reason}" for run in runs if run.state.state == "broken"]


# ------------------------------------------------------------------------------------------------ plan
WAITS = "wait (tuning)"
"""The plan's action of a run whose lr waits for its tuning runs."""


def plan_rows(runs: list[PlannedRun], actions: dict[str, Action], states: dict[str, RunState],
              looks: dict[str, Snapshot] | None = None) -> list[dict]:
    """One row per run; a run left alone is shown with its state (`leave (queued)`, `leave (complete)`), so the
    action column never calls a queued run running. A run that goes on with the config it has (sweep_edits.trained;
    `looks`: {run: the look at its folder}) is shown with that config's numbers, not the sweep file's, which it
    does not take (its shape or steps edited since it trained)."""
    rows = []
    for run in runs:
        own = (looks or {}).get(run.name)
        kept = own.train_config if own is not None and trained(run, states[run.name].state) else None
        cfg, res = kept or run.train_config(), run.size.resources
        micro, accum = batch_plan(cfg, res.world_size)  # the trainer's own split; a bad one is an error here too
        hours = run.estimated_hours()
        rows.append({
            "run": run.name, "seed": run.seed, "params": n_params(cfg.model),
            "n": n_params(cfg.model, embeddings=False),
            "tokens": cfg.steps * cfg.global_batch * cfg.seq_len,
            "steps": cfg.steps, "global_batch": cfg.global_batch, "micro": micro, "accum": accum,
            "world": res.world_size, "gpus": res.gpus, "nodes": res.nodes, "hours": hours,
            "gpu_hours": hours * res.gpus if not math.isnan(hours) else math.nan,
            "role": run.role, "action": WAITS if run.waits_for
            else f"leave ({states[run.name].state})" if actions[run.name] == "leave" else actions[run.name],
        })
    return rows


def ratio_notes(sweep: Sweep, runs: list[PlannedRun]) -> list[str]:
    """Where each ZBP arm's step-time ratio (which scales its GPU-hours) comes from; an arm that gives none is
    planned as fast as BP, which the plan says. Only for a plan of GPU runs (a CPU plan estimates no time)."""
    if not any(r.size.resources.gpus for r in runs):
        return []
    notes = []
    for a in (a for a in sweep.arms if a.zbp is not None and any(r.arm == a for r in runs)):
        if a.step_time_ratio == 1.0 and not a.ratio_source:
            notes.append(f"{a.name}: no step_time_ratio: planned as fast as BP (measure it: tools/gpu_check.sh)")
        elif a.ratio_source:
            sizes = [s.name for s in sweep.sizes]
            figures = ", ".join(f"{a.ratio(s):g}" for s in sizes)
            notes.append(f"{a.name}: step-time ratio {figures} ({', '.join(sizes)}), from {a.ratio_source}")
    return notes


def tuning_notes(sweep: Sweep, runs: list[PlannedRun], tuned: tuning.Tuned) -> list[str]:
    """A tuning sweep's word on each final size and arm: its lr and where it came from (the tuning runs' best, a
    grid edge, the lr law), or what it waits for; and the tuning's share of the plan's GPU-hours."""
    if sweep.tune is None:
        return []
    notes, said = [], set()
    for run in (r for r in runs if r.role == "final"):
        key = (run.size.name, run.arm.name)
        if key in said:
            continue
        said.add(key)
        head = f"{run.size.name}-{run.arm.name}: "
        if run.waits_for:
            notes.append(head + f"{_waiting(sweep.tune, key, tuned)} {plural(len(run.waits_for), 'tuning run')} "
                         f"({', '.join(run.waits_for[:3])}{', ...' if len(run.waits_for) > 3 else ''})")
        else:
            choice = tuned.choices.get(key)
            notes.append(head + f"lr {lr_text(run.lr)}, {run.lr_from}" + (
                f" (the optimum may lie beyond it: raise Tune.extend, now {sweep.tune.extend}, or widen Tune.grid)"
                if choice is not None and choice.edge else ""))
    repeated = sorted(set(sweep.tune.seeds) & set(sweep.seeds))
    if sweep.tune.budget == 1 and repeated:
        notes.append(f"Tune.budget=1: the final run of seed {', '.join(map(str, repeated))} at a tuned size repeats "
                     "its best tuning run (the same seed, lr and tokens); Tune.budget < 1, or tuning seeds the final "
                     "runs do not use, spend the GPU-hours elsewhere")
    hours = [(r.role, r.estimated_hours() * r.size.resources.gpus) for r in runs]
    planned = {(r.size.name, r.arm.name) for r in runs if r.role == "tuning"}
    chosen = {(r.size.name, r.arm.name) for r in runs}  # --only: the sizes and arms of the runs it selects
    checks = [PlannedRun(sweep, size, arm, seed, role="tuning") for size in sweep.sizes if size.name in
              sweep.tune.check for arm in sweep.arms if (size.name, arm.name) in chosen - planned
              for _ in sweep.tune.check_grid for seed in sweep.tune.seeds]  # not planned before the law is known
    if not checks and not planned:  # --only chose none of the tuning: its runs are not this plan's
        return notes
    later = [r.estimated_hours() * r.size.resources.gpus for r in checks]
    timed = not any(math.isnan(h) for h in [h for _, h in hours] + later)  # CPU runs: counted, not timed
    said = []
    if planned:
        said.append(plural(sum(role == "tuning" for role, _ in hours), "run") + (
            f", {sum(h for role, h in hours if role == 'tuning'):,.1f} GPU-hours of the plan's "
            f"{sum(h for _, h in hours):,.1f}" if timed else ""))
    if checks:
        said.append(plural(len(checks), "run") + (f", {sum(later):,.1f} GPU-hours" if timed else "") + " to come "
                    f"for the check at {', '.join(dict.fromkeys(r.size.name for r in checks))} (planned once the lr "
                    "law is known)")
    notes.append(f"tuning: {'; '.join(said)}; budget {sweep.tune.budget:g} of a size's tokens")
    return notes


def _waiting(tune, key: tuple[str, str], tuned: tuning.Tuned) -> str:
    """Where the lr of a final run of (size, arm) `key` will come from, before 'waits for N tuning runs'."""
    size, law = key[0], f"the lr law of {', '.join(tune.sizes)}"
    if size in tune.sizes:
        return "lr waits for"
    if size in tune.check and key in tuned.centers:
        return f"lr from a check around {lr_text(tuned.centers[key])}, {law}'s lr here, which waits for"
    if size in tune.check:
        return f"lr from a check around {law}, which waits for"
    return f"lr from {law}, which waits for"


def data_notes(sweep: Sweep, runs: list[PlannedRun]) -> list[str]:
    """Check the runs against the sweep's data when it is already prepared: a ConfigError for a run that could
    not start (a vocabulary smaller than the data's, no training window, not one validation window per rank), a
    note for each run that will evaluate on a smaller batch than its global batch. Nothing to check (no notes)
    before the data exist."""
    from zbpscale.data.loader import read_manifest, split_windows, val_fit, vocab_problem

    if not manifest_path(data_path(sweep)).exists() or not runs:
        return []
    manifest = read_manifest(data_path(sweep))
    if refused := other_data(sweep, manifest):
        raise refused
    notes = []
    for run in runs:
        cfg, world = run.train_config(), run.size.resources.world_size
        if problem := vocab_problem(cfg.model.vocab_size, manifest, data_path(sweep)):
            raise ConfigError(f"{run.name}: {problem.args[0]}", hint=problem.hint)
        if split_windows(manifest, "train", cfg.seq_len) == 0:
            raise ConfigError(f"{run.name}: no training shard of {data_path(sweep)} holds {cfg.seq_len + 1} tokens",
                              hint="prepare more tokens (larger shards), or a shorter seq_len")
        windows = split_windows(manifest, "val", cfg.seq_len)
        batch, n = val_fit(windows, cfg.global_batch, world, cfg.eval_batches)
        if n == 0:
            raise ConfigError(f"{run.name}: the validation split of {data_path(sweep)} holds {windows} window(s) "
                              f"of {cfg.seq_len + 1} tokens, fewer than one per rank ({world})",
                              hint="prepare with a larger --val-tokens, or a shorter seq_len")
        if batch < cfg.global_batch:
            notes.append(f"{run.name}: the validation split holds {windows} windows of {cfg.seq_len + 1} tokens, "
                         f"fewer than global_batch={cfg.global_batch}: it will evaluate on one batch of {batch}")
    return notes


def other_data(sweep: Sweep, manifest: dict) -> ConfigError | None:
    """The refusal of a sweep whose prepared folder (its `manifest`) holds data prepared with other options than
    its Data (`data_differs`); None where they agree. Submit raises it; doctor shows it."""
    if differ := data_differs(sweep, manifest.get("settings", {})):
        return ConfigError(f"{data_path(sweep)} holds data prepared with other options than the sweep's Data "
                           f"({differ}): its runs would train on them", hint="give the sweep's Data a dir of its own "
                           "(a prep job fills it), or set Data to what the folder holds")
    return None


def data_differs(sweep: Sweep, kept: dict) -> str:
    """Where a sweep's Data (its source, its hub config where it names one, its token budget) and the settings a
    prepared folder's manifest kept differ, in words ("" where they agree, or where the manifest does not say). A
    relative local: source is the same as the prep job took it (from the sweep's home) or as it is written."""
    data = sweep.data
    asked = {"source": (data.source, prep_source(sweep)), "tokens": (data.tokens or None,),
             **({"config": (data.config,)} if data.config else {})}  # each field's spellings of the sweep's value
    return ", ".join(f"{k}: {kept[k]!r} there, {said[0]!r} in the sweep" for k, said in asked.items()
                     if k in kept and kept[k] not in said)


def prep_problem(sweep: Sweep) -> None:
    """What the sweep's data-prep job would fail on at once, said before anything is queued (its runs would fail
    with it, and need --retry after the fix): a local source that names no file, a data folder it cannot write."""
    from zbpscale.data.sources import resolve_source

    if manifest_path(data_path(sweep)).exists():
        return
    resolve_source(prep_source(sweep), config=sweep.data.config)
    if (why := unwritable(data_path(sweep))) is not None:
        raise ConfigError(f"the sweep's data cannot be prepared into {data_path(sweep)}: {why}",
                          hint="set Data.dir in the sweep file to a folder you can write")


def budget_notes(runs: list[PlannedRun]) -> list[str]:
    """One line per size whose `tokens` are not a whole number of steps: the run trains whole steps, so its tokens
    are rounded up to the next step (the plan's tokens column shows what it trains)."""
    notes = []
    for run in (r for r in runs if r.role != "tuning"):  # a grid run trains Tune.budget of them: said in tuning's
        cfg, asked = run.train_config(), run.size.tokens
        step = cfg.global_batch * cfg.seq_len
        if asked and cfg.steps * step != asked:
            how = "rounded up" if cfg.steps * step > asked else "cut"
            note = (f"{run.size.name}: tokens {asked:,} {how} to {cfg.steps * step:,} ({plural(cfg.steps, 'step')} of "
                    f"{step:,} tokens)")
            notes += [note] if note not in notes else []
    return notes


def tracker_lines(sweep: Sweep, path: str) -> list[str]:
    """Where the sweep's trackers show its runs, as commands: TensorBoard over the sweep's folder; W&B online (a
    WANDB_API_KEY here, which jobs inherit) in its project, else written offline and uploaded by `zbpscale sync`."""
    from zbpscale.train.trackers import offline

    lines = []
    if "tensorboard" in sweep.trackers:
        lines.append(f"tensorboard --logdir {shown_path(sweep.jobs_dir)}   # TensorBoard: every run of the sweep")
    if "wandb" in sweep.trackers:
        lines.append(f"zbpscale sync {path}   # W&B: runs written offline here, uploaded by this" if offline() else
                     f"# W&B: online, project {sweep.name!r} (WANDB_API_KEY is set)")
    return lines


PLAN_COLUMNS = ("run", "params", "N", "tokens", "steps", "batch", "micro x accum x world", "GPUs x nodes",
                "est. h", "GPU-h", "action")
PLAN_KEEP = ("run", "action", "params", "N", "tokens", "GPU-h", "steps", "batch", "GPUs x nodes", "est. h",
             "micro x accum x world")
"""The plan's columns in the order they are given up on a narrow terminal (the last first; `tables`)."""


def plan_cells(r: dict) -> dict[str, str]:
    def fmt_tokens(n: int) -> str:
        return f"{n / 1e9:,.2f}B" if n >= 1e8 else f"{n / 1e6:,.2f}M" if n >= 1e5 else f"{n:,}"

    def fmt_h(h: float) -> str:
        return "?" if math.isnan(h) else f"{h:,.1f}"

    return {"run": r["run"], "params": f"{r['params'] / 1e6:,.1f}M", "N": f"{r['n'] / 1e6:,.2f}M",
            "tokens": fmt_tokens(r["tokens"]),
            "steps": f"{r['steps']:,}", "batch": str(r["global_batch"]),
            "micro x accum x world": f"{r['micro']} x {r['accum']} x {r['world']}",
            "GPUs x nodes": f"{r['gpus']} x {r['nodes']}", "est. h": fmt_h(r["hours"]), "GPU-h": fmt_h(r["gpu_hours"]),
            "action": r["action"]}


def print_plan(sweep: Sweep, rows: list[dict]) -> None:
    """The plan's table, its sizes by non-embedding N (a rung of one's own where its N puts it, as status, collect
    and the figures order it; in the sweep file's order it stood first), then its footer."""
    width = terminal_width()
    rows = sorted(rows, key=lambda r: r["n"])  # stable: a size's runs in the sweep's order of arms and seeds
    shown = [plan_cells(r) for r in rows]
    columns = fit_columns(PLAN_COLUMNS, PLAN_KEEP, shown, width)
    print(f"sweep {sweep.name}: {plural(len(rows), 'run')}, {seed_count(r['seed'] for r in rows)}")
    table = boxed(columns, shown, {"run", "action"}, color=on_terminal() and color_on(), width=width)  # 10,000: 0.1 s
    print("\n".join(table), flush=True)

    def hours(actions=None) -> float:
        """The GPU-hours of the rows whose action is one of `actions` (None: every row)."""
        return sum(r["gpu_hours"] for r in rows if not math.isnan(r["gpu_hours"])
                   and (actions is None or r["action"] in actions))

    total, now, waiting = hours(), hours(SUBMITS), hours((WAITS,))
    later = f", {waiting:,.1f} in runs that wait for their tuning" if waiting else ""
    cpu = "; '?': CPU runs, whose time the plan does not estimate" if any(math.isnan(r["hours"]) for r in rows) else ""
    print(wrap(f"GPU-hours: {total:,.1f} planned, {now:,.1f} in the runs to submit now{later} (assumes "
               f"{sweep.assumed_mfu:.0%} MFU of {sweep.gpu_peak_tflops:g} TFLOP/s per GPU, ZBP arms scaled by their "
               f"step_time_ratio){cpu}", width=width))
    if total:
        print(wrap(seed_cost(sweep, rows), width=width))
    places = [os.path.normpath(p) for p in (sweep.jobs_dir, data_path(sweep))]  # without a Data.dir's '..'
    print(wrap(f"runs in {places[0]}; data in {places[1]}", width=width))
    print(wrap("params: all parameters; N: non-embedding parameters, what the fits and figures put on their axis",
               width=width), flush=True)


def seed_cost(sweep: Sweep, rows: list[dict]) -> str:
    """What the seeds of the plan cost: 'seeds 0, 1, 2: 851.7 GPU-hours each, 2,555.0 for the 3', or, for a sweep
    of one seed, what one more would add."""
    rows = [r for r in rows if r.get("role") != "tuning"]  # a tuning sweep's grid: its own note, no seed's cost
    seeds = sorted({r["seed"] for r in rows})
    hours = {s: sum(r["gpu_hours"] for r in rows if r["seed"] == s and not math.isnan(r["gpu_hours"])) for s in seeds}
    if len(sweep.seeds) == 1:
        return (f"one seed ({seeds[0]}): no seed-to-seed spread, so no error bars; each further seed (Sweep.seeds) "
                f"adds {hours[seeds[0]]:,.1f} GPU-hours")
    each = f"{hours[seeds[0]]:,.1f} GPU-hours" + (" each" if len(seeds) > 1 else "")
    if len(set(hours.values())) > 1:
        each = ", ".join(f"seed {s} {h:,.1f}" for s, h in hours.items()) + " GPU-hours"
    listed = lambda ss: ", ".join(map(str, ss))  # noqa: E731
    which = f"seed{'s' if len(seeds) > 1 else ''} {listed(seeds)}"
    if len(seeds) < len(sweep.seeds):
        which += f" (of the sweep's {len(sweep.seeds)}: {listed(sweep.seeds)})"
    return f"{which}: {each}" + (f", {sum(hours.values()):,.1f} for the {len(seeds)}" if len(seeds) > 1 else "")


# ------------------------------------------------------------------------------------------------ main
def look(sweep: Sweep, runs: list[PlannedRun], *, poller: Poller | None = None, unplanned: list[found.Run] = ()
         ) -> tuple[dict[str, found.Run], View]:
    """Every run decided ({run name: runs.Run with its look, history, job view and state}), the `unplanned` run folders
    (runs.unplanned: those the sweep file no longer plans) too, and the executors' view of the runs' latest jobs
    (one question per executor; through `poller` when given)."""
    decided, view = found.decided([found.Run.of(r) for r in runs] + list(unplanned), sweep.jobs_root,
                                  look=poller.look if poller else None)
    return {r.name: r for r in decided}, view


STALE_SAID = 100
"""Runs left as they are whose looks a release before kept, from which submit says it keeps them anew (a second
for a thousand)."""


def say_keeping(count: int) -> None:
    """The line before submit keeps anew the looks a release before kept (run/snapshot.py's keep_missing)."""
    if count >= STALE_SAID:
        print(f"keeping a look at {plural(count, 'run')} whose look a release before kept (status reads their files "
              "until it is kept)", flush=True)


SUBMIT_LOCK_STALE_S = 120.0
"""A sweep's submit lease not renewed for this long (its thread renews it every few seconds) is a submit gone."""


@contextlib.contextmanager
def sweep_lock(sweep: Sweep, *, wait_s: float = 900.0, poll_s: float = 0.2):
    """One submit at a time plans and submits a sweep (two terminals or login nodes, a cron job and a person): the
    others wait, then see its jobs. lease.try_lock on <sweep folder>/.submit.lock, renewed by a thread while the
    submit lives: a holder that died on this node is seen at once, one on another node SUBMIT_LOCK_STALE_S later. A
    submit that wrote nothing beside its lock (one refused) removes the folders it made for it: it leaves nothing."""
    path = sweep.jobs_dir / ".submit.lock"
    made = [p for p in (sweep.jobs_dir, *sweep.jobs_dir.parents) if not p.exists()]  # made by this submit's lock
    lock, holder = wait_lock(path, stale_after_s=SUBMIT_LOCK_STALE_S, wait_s=wait_s, poll_s=poll_s,
                             waiting=lambda holder: print(f"another submit of sweep {sweep.name} is under way "
                                                          f"({holder}): waiting for it", flush=True))
    if lock is None:
        raise ConfigError(f"another submit of sweep {sweep.name} ({holder}) still holds {path} after {wait_s:.0f} s",
                          hint="let it finish, or stop it, then submit again")
    try:
        with lock.keep_renewed():
            yield lock
    finally:
        if made and sweep.jobs_dir.is_dir() and [p.name for p in sweep.jobs_dir.iterdir()] == [path.name]:
            path.unlink(missing_ok=True)
            with contextlib.suppress(OSError):  # one that is not empty (another submit's lock) stays
                for folder in made:
                    folder.rmdir()


def submit(path: str, *, dry_run: bool = False, only: str | None = None, executor: str = "auto",
           max_parallel: int = 0, retry: bool = False, apply_changes: bool = False
           ) -> tuple[Sweep, list[PlannedRun], Executor, dict[str, str], list[PlannedRun]]:
    """Plan and submit a sweep; returns the sweep, the selected runs, the executor, {run name: action} and the runs
    a submit limit held back (still new: `submit_held` submits them later).
    retry: submit failed runs again (from their last checkpoint), with fresh timeout/preemption/crash counts.
    apply_changes: give runs that have trained the sweep file's new values of the fields safe on resume.
    A run whose job is live, or may be, is never submitted again."""
    sweep = load_sweep(path)
    problem = unwritable(sweep.jobs_dir)
    if problem:  # the same line for a dry run as for a submit: neither has anything to plan
        raise ConfigError(f"cannot make the sweep's folder of runs {sweep.jobs_dir}: {problem}",
                          hint="set Sweep.root in the sweep file to a folder you can write")
    refuse_other_owner(sweep, Path(path), "submit")
    planned, tuned = tuning.planned(sweep)
    runs = select(planned, only)
    dropped = [r for r in found.unplanned(sweep, {r.name for r in planned})  # their jobs go on: say so
               if not patterns(only) or matches(r.name, patterns(only))]
    back = executors.choose(executor, sweep.jobs_root, wait=not dry_run)
    with contextlib.nullcontext() if dry_run else sweep_lock(sweep) as lock:
        decided, view = look(sweep, runs, unplanned=dropped)
        if not dry_run:  # what the scheduler said of attempts that died without a word, recorded under the lock
            for r in runs:
                d = decided[r.name]
                decided[r.name] = dataclasses.replace(d, history=record_unheard(r.run_dir, d.job))
        states = {r.name: decided[r.name].state for r in runs}
        actions = {r.name: "leave" if r.waits_for else states[r.name].action(RunFolder(r.run_dir), retry=retry)
                   for r in runs}  # a final run whose lr tuning has not given yet waits (submit --wait sends it)
        todo = [r for r in runs if actions[r.name] in SUBMITS]
        if not dry_run:  # each run left as it is whose look a release before kept: kept anew, for status
            keep_missing([r.run_dir for r in runs if actions[r.name] not in SUBMITS and not decided[r.name].job.live
                          and Path(r.run_dir).is_dir()], say=say_keeping)
        if todo:
            prep_problem(sweep)
        notes = budget_notes(runs) + data_notes(sweep, todo) + ratio_notes(sweep, runs)
        notes += tuning_notes(sweep, runs, tuned)
        notes += broken_notes([decided[r.name] for r in runs]) + view.notes
        looks = {r.name: decided[r.name].seen for r in runs}
        notes += config_notes(runs, states, apply=apply_changes, dry_run=dry_run, looks=looks)
        notes += settings_notes(runs, states, looks)
        notes += unplanned_notes([decided[r.name] for r in dropped])
        notes += [f"trackers: {line}" for line in tracker_lines(sweep, path)]
        print_plan(sweep, plan_rows(runs, actions, states, looks))
        for note in notes:
            print(wrap(note, "note: "))
        try:  # what the submit refuses, the dry run refuses (without importing torch), at the sweep file's line
            back.check(todo, quick=dry_run)
        except ConfigError as err:
            raise in_sweep_file(path, err) from None
        if dry_run:
            return sweep, runs, back, actions, []
        for run in (r for r in todo if actions[r.name] == "retry"):  # say what --retry resets
            counts = decided[run.name].history.requeue_counts()
            print(f"{run.name}: --retry counts its timeouts, preemptions and failures from 0 again (status's T/P/F "
                  f"were {'/'.join(map(str, counts))}; attempts.jsonl keeps every attempt)")
        if not lock.renew(force=True):  # paused past the lease (Ctrl-Z): another submit may have queued these
            raise ConfigError(f"this submit lost {sweep.jobs_dir / '.submit.lock'} to another ({lock.taken_by()}) "
                              "while it was paused; nothing submitted", hint="submit again")
        kept = SweepSettings(name=sweep.name, sweep_file=str(Path(path).absolute()), poll_s=float(sweep.poll_s))
        kept.write(sweep.jobs_dir)  # for status and cancel given the folder, not the file
        replace_stuck(sweep, todo, decided)
        held = back.submit(sweep, {r: actions[r.name] for r in todo}, prep=bool(todo) and not
                           manifest_path(data_path(sweep)).exists(), max_parallel=max_parallel)
    left = [r for r in runs if actions[r.name] == "leave" and not r.waits_for]
    if left:
        settled = ("complete", "failed", "broken")  # their words cannot have changed since the plan
        if any(states[r.name].state not in settled for r in left):
            decided, view = look(sweep, runs)
        words = {r.name: states[r.name].state if states[r.name].state in settled
                 else progress(r, view, decided[r.name].state, decided[r.name].seen) for r in left}
        alike: dict[str, list[str]] = {}
        for r in left:
            alike.setdefault(words[r.name], []).append(r.name)
        said = []
        for r in left:  # in the runs' order; past ALIKE runs in the same words (9,000 complete), once, at the first
            names = alike[words[r.name]]
            if len(names) <= ALIKE or names[0] == r.name:
                said.append(f"{r.name if len(names) <= ALIKE else named(names)} ({words[r.name]})")
        print("left alone: " + ", ".join(said))
    if any(states[r.name].state == "failed" for r in left):
        print(f"failed runs are left alone: fix the cause (zbpscale status {shlex.quote(str(path))} --logs RUN), then "
              "submit again with --retry")
    return sweep, runs, back, actions, held


def submit_held(sweep: Sweep, held: list[PlannedRun], back: Executor, actions: dict[str, str]) -> list[PlannedRun]:
    """Submit the runs a submit limit held back (`actions`: what the first submit meant to do with them), those
    still to be submitted (another submit may have meanwhile), under the sweep's lock; returns the runs still held."""
    with sweep_lock(sweep):
        decided, _ = look(sweep, held)
        todo = {r: a for r in held
                if (a := decided[r.name].state.action(RunFolder(r.run_dir), retry=actions[r.name] == "retry"))
                in SUBMITS}
        if not todo:
            return []
        return back.submit(sweep, todo, prep=not manifest_path(data_path(sweep)).exists())


def replace_stuck(sweep: Sweep, todo: list[PlannedRun], decided: dict[str, found.Run]) -> None:
    """Cancel the live jobs of runs about to be submitted again: jobs that would wait for ever (their prep job
    failed). Any other live job keeps its run out of `todo` (state.py)."""
    for run in todo:
        history, seen = decided[run.name].history, decided[run.name].job
        if seen.live:
            why = executors.get(history.executor, sweep.jobs_root).cancel(run.run_dir, history.job_id, seen)
            if why:
                raise ZbpError(f"{run.name}: job {history.job_id} ({seen.reason or seen.state.lower()}) is to be "
                               f"replaced but could not be cancelled: {why}")
            print(f"{run.name}: job {history.job_id} cancelled ({seen.reason or seen.state.lower()}): it is replaced")


# ------------------------------------------------------------------------------------------------ run folders
# ------------------------------------------------------------------------------------------------ wait
def progress(run: PlannedRun, view: View, now: RunState | None = None, seen: Snapshot | None = None) -> str:
    """One run in a few words, in status's words: queued, step 12/30, complete, failed (reason; log), ...; `now`
    and `seen`: its state and the look at its folder it was decided on (else a look now)."""
    seen = seen or Snapshot(run.run_dir)
    now = now or decide(seen, view.of(seen.history.job_id))
    if now.state == "running":
        step = seen.heartbeat.get("step")
        return "starting" if step is None else f"step {step}/{run.steps}"
    if now.state == "failed":
        return f"failed ({now.reason}; log {now.log})"
    return f"{now.state} ({now.reason})" if now.reason else now.state


BLOCK_ORDER = ("running", "stalled", "queued", "unknown", "stopped", "cancelled", "new", "broken", "failed",
               "complete")
"""The order of the --wait block's lines (a line per state that some run is in)."""


def wait_block(runs: list[PlannedRun], states: dict[str, RunState], *, at: str, width: int = 80,
               beats: dict[str, dict] | None = None) -> list[str]:
    """The --wait progress as a few lines of at most `width` columns: a header with the time and how many runs
    are complete, running, queued, failed or in another state (those there are: a log without a failed run never
    says 'failed'), then one line per state naming its runs (a running run with its step: from `beats`, the
    heartbeats the states were decided on, else read now), folded under a hanging indent."""
    counts = {s: sum(states[r.name].state == s for r in runs) for s in BLOCK_ORDER}
    main = ("complete", "running", "queued", "failed")
    counts["other"] = sum(n for s, n in counts.items() if s not in main)
    lines = [f"[{at}] {plural(len(runs), 'run')}: " + ", ".join(f"{counts[s]} {s}" for s in (*main, "other")
                                                               if counts[s])]
    for state in (s for s in BLOCK_ORDER if counts[s]):
        items = [_item(r, (beats or {}).get(r.name)) if state in ("running", "stalled") else r.name
                 for r in runs if states[r.name].state == state]
        lines += _fold(f"  {state:<10}", items, width)
    return lines


def _item(run: PlannedRun, beat: dict | None) -> str:
    step = (read_json(RunFolder(run.run_dir).heartbeat) if beat is None else beat).get("step")
    return f"{run.name} " + ("starting" if step is None else f"{step}/{run.steps}")


def _fold(head: str, items: list[str], width: int) -> list[str]:
    """`head` (ending in a space) then the items joined by ', ', folded at `width` under an indent as wide as
    `head`."""
    lines, line, filled = [], head, False
    for i, item in enumerate(items):
        text = item + ("," if i < len(items) - 1 else "")
        if filled and len(line) + 1 + len(text) > width:
            lines.append(line)
            line, filled = " " * len(head), False
        line, filled = line + (" " if filled else "") + text, True
    return lines + [line]


def waited_on(sweep: Sweep, runs: list[PlannedRun]) -> list[PlannedRun]:
    """The grid runs outside `runs` (not selected: --only) that a selected final run's lr waits for: while one of
    them is live, `wait_for` waits for it, then submits the final run."""
    names = {n for r in runs for n in r.waits_for} - {r.name for r in runs}
    return [r for r in tuning.planned(sweep)[0] if r.name in names] if names else []


def wait_for(sweep: Sweep, runs: list[PlannedRun], back: Executor, *, tick_s: float = 2.0, every_s: float = 300.0,
             poller: Poller | None = None, width: int = 80, held: list[PlannedRun] = (),
             actions: dict[str, str] | None = None, replan=None) -> bool:
    """Stay until no run can still make progress (each is complete, failed, or has no live job, nor one that may
    be), reading the run folders every `tick_s` and asking the scheduler through a Poller (at most once per
    Sweep.poll_s, plus once when a folder changes); print the progress block when a run changes state, and at
    least every `every_s`, and a line for each run that fails; True if all completed. The runs a submit limit
    `held` back are submitted as the sweep's jobs end (or, when none of them ended, every 10 poll_s). `replan`
    (a tuning sweep: the selected runs as tuning.planned gives them now) is asked each time a run completes or
    fails: the final runs whose lr is now known, and a grid step beyond an edge, are submitted then (not a run
    complete or live already); grid runs a selected final run waits for that --only left out are waited for while
    their jobs are live (`waited_on`)."""
    poller = poller or Poller(sweep.jobs_root, poll_s=sweep.poll_s, say=lambda line: print(line, flush=True))
    shown, shown_at, told, settled = None, 0.0, set(), None
    held, live_at_try, tried_at = list(held), None, time.time()
    others = waited_on(sweep, runs) if replan is not None else []  # grid runs --only left out: the same until a replan
    while True:
        decided, _ = look(sweep, runs + others, poller=poller)  # one look at both
        states = {r.name: decided[r.name].state for r in runs}
        upstream = [decided[r.name] for r in others]
        done = {r.name for r in [*runs, *others] if decided[r.name].state.state in ("complete", "failed")}
        if replan is not None and done != settled:
            settled, before = done, {r.name: r for r in runs}
            runs = replan()
            others = waited_on(sweep, runs)
            ready = [r for r in runs if not r.waits_for and (r.name not in before or before[r.name].waits_for)
                     and not (r.name in states and (states[r.name].state == "complete" or decided[r.name].job.live))]
            if ready:
                finals = [r.name for r in ready if r.role == "final"]
                grown = [r.name for r in ready if r.role == "tuning"]
                print("tuning: " + "; ".join(filter(None, (f"the lr of {', '.join(finals)} is known" if finals else "",
                                                           f"the grid grows by {', '.join(grown)}" if grown else "")))
                      + ": submitting", flush=True)
                held += submit_held(sweep, ready, back, {r.name: "new" for r in ready})
                poller.ask_soon()
                continue
        key = [(r.name, states[r.name].state) for r in runs]
        if key != shown or time.time() - shown_at >= every_s:
            print("\n".join(wait_block(runs, states, at=time.strftime("%H:%M:%S"), width=width,
                                        beats={r.name: decided[r.name].seen.heartbeat for r in runs})), flush=True)
            shown, shown_at = key, time.time()
        for r in runs:
            now = states[r.name]
            if now.state == "failed" and r.name not in told:
                print(f"{r.name}: failed: {now.reason}" + (f" (log: {now.log})" if now.log else ""), flush=True)
                told.add(r.name)
        histories = [decided[r.name].history for r in runs]
        live = sum(decided[r.name].job.live for r in runs)
        live_at_try = live if live_at_try is None else live_at_try  # what the limit refused at
        if held and (live < live_at_try or time.time() - tried_at >= 10 * sweep.poll_s):
            before = len(held)
            held = submit_held(sweep, held, back, actions or {})
            live_at_try, tried_at = live + before - len(held), time.time()
            if len(held) < before:
                poller.ask_soon()
            continue
        if not held and not any(d.job.live and d.state.state not in ("complete", "failed")
                                for d in [*(decided[r.name] for r in runs), *upstream]):
            break  # nothing left that can go on (a COMPLETE run's job may still be leaving the queue)
        said = back.keep_going([h.submitted for h in histories if h.executor == back.name])
        if said:
            print(said, flush=True)
        time.sleep(tick_s)
    bad = [r.name for r in runs if states[r.name].state != "complete"]  # a grid run whose lr diverged is complete
    print(f"all {plural(len(runs), 'run')} complete" if not bad else f"not complete: {named(bad)}", flush=True)
    for r in (r for r in runs if r.waits_for and r.name in bad):  # its grid left out (--only) or stopped
        print(f"{r.name}: its lr waits for {named(list(r.waits_for))}, which did not answer (not selected, or "
              "cancelled or failed: status says)", flush=True)
    return not bad


def results_table(sweep: Sweep, runs: list[PlannedRun], path: str) -> list[str]:
    """What the runs reached (final validation loss, tokens, wall time in training), then the next commands
    (`path`: the sweep file as given)."""
    from zbpscale.results.bundle import default_out
    from zbpscale.results.summary import summarize
    from zbpscale.tables import age

    rows = []
    for r in runs:
        s = summarize(r.run_dir, name=r.name, size=r.size.name, arm=r.arm.name, seed=r.seed, state=("", None))
        rows.append({"run": r.name, "val loss": "-" if s.final_val_loss is None else f"{s.final_val_loss:.3f}",
                     "tokens": fmt_tokens(s.tokens), "wall time": age(s.wall_time_s)})
    lines = plain_lines(["run", "val loss", "tokens", "wall time"], rows, {"run"})
    out = default_out(sweep.jobs_dir)
    commands = [f"zbpscale collect {shlex.quote(path)}", f"zbpscale plot {shown_path(out)}",
                f"zbpscale report {shown_path(out)}"]
    pad = max(map(len, commands)) + 3
    return lines + [f"next: {commands[0]:<{pad}}# results bundle in {shown_path(out)}",
                    f"      {commands[1]:<{pad}}# its figures and table.md",
                    f"      {commands[2]:<{pad}}# the study in one HTML page"] + \
        [f"      {line}" for line in tracker_lines(sweep, path)]


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("sweep", help="a sweep file, e.g. sweeps/ladder.py")
    p.add_argument("--dry-run", action="store_true", help="print the plan and touch nothing")
    p.add_argument("--only", metavar="PATTERNS", help="comma-separated run-name patterns, e.g. 's60-*,*-bp'")
    p.add_argument("--executor", default="auto", choices=("auto", *executors.KINDS),
                   help="auto: SLURM when it answers (waited for where SLURM is set up), else the local queue")
    p.add_argument("--wait", action="store_true",
                   help="stay until every run has finished, showing progress; exit 1 if one did not complete")
    p.add_argument("--max-parallel", type=at_least(1), default=0, metavar="N",
                   help="local queue: runs at once (default: as many as the GPUs allow; 1 on a CPU-only node); "
                        "the queue's setting, for every sweep under its jobs root, kept until a submit sets it again")
    p.add_argument("--retry", action="store_true",
                   help="submit failed runs again from their last checkpoint, with fresh requeue counts")
    p.add_argument("--apply-changes", action="store_true",
                   help="runs that have trained take the sweep file's new " + ", ".join(RESUME_SAFE) +
                   " (safe on resume; other changes need a new run)")


def run(args: argparse.Namespace) -> int:
    sweep, runs, back, actions, held = submit(args.sweep, dry_run=args.dry_run, only=args.only,
                                              executor=args.executor, max_parallel=args.max_parallel,
                                              retry=args.retry, apply_changes=args.apply_changes)
    if not args.wait or args.dry_run:
        return 0
    try:
        replan = (lambda: select(tuning.planned(sweep)[0], args.only)) if sweep.tune is not None else None
        complete = wait_for(sweep, runs, back, held=held, actions=actions, replan=replan)
    except KeyboardInterrupt:
        print(f"\nstopped watching; the jobs go on (zbpscale status {args.sweep} shows them)", file=sys.stderr)
        return 130
    shown = replan() if replan is not None else runs  # with the grid runs and final runs planned while it waited
    print("\n".join(results_table(sweep, shown, args.sweep)), flush=True)
    return 0 if complete else 1
