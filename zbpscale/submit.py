"""`python -m zbpscale.submit SWEEP`: plan every size x arm run of a sweep and submit what is missing.

    python -m zbpscale.submit sweeps/ladder.py --dry-run        # the plan, touching nothing
    python -m zbpscale.submit sweeps/ladder.py                  # submit: SLURM when it answers, else the local queue
    python -m zbpscale.submit sweeps/ladder.py --only 's60-*,*-bp'
    python -m zbpscale.submit sweeps/smoke.py --wait            # stay until every run has finished (exit 1: one failed)

Idempotent: complete runs are skipped, partial runs resume from their folder, a run whose recorded job is
still queued or running is left alone, so the same command can be re-run at any time. When the sweep's data
are not prepared, a prep job is submitted first and the training jobs wait for it (afterok).

Without SLURM (or with `--executor local`) the runs go to the node's detached local queue (zbpscale.local): it
outlives the terminal, packs runs onto the node's GPUs (CPU runs: `--max-parallel` at a time, default 1) and
requeues them after their time limit just as the SLURM jobs requeue themselves.
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import math
import shlex
import shutil
import sys
import time
from pathlib import Path

from zbpscale import signals, slurm
from zbpscale.errors import BrokenRunFolder, ConfigError
from zbpscale.runfolder import (
    CANCEL, CONFIG, HEARTBEAT, LOGS, PLAN, RunFolder, RunState, atomic_write, last_submitted, list_checkpoints,
    read_attempts, read_json, reconcile, record, run_state,
)
from zbpscale.sweep import Run, Sweep, data_path, expand, load_sweep
from zbpscale.schema import batch_plan


def last_job_id(run_dir: Path) -> str | None:
    return last_submitted(read_attempts(run_dir)).get("job_id")


TODO = ("new", "resume", "retry")  # the actions that submit a job


def run_action(run: Run, jobs: dict[str, tuple[str, str]], *, retry: bool = False) -> str:
    """What submit does with a run, from its state (runfolder.run_state; `jobs`: {job id: (scheduler state, how
    it ended)}): new or resume, retry (a failed run, only with --retry), complete (skip), running (its job is
    queued or running: leave it alone), failed (left alone without --retry), broken (left alone until fixed)."""
    return ACTIONS[decide(run, jobs).next](run, retry)


ACTIONS = {
    "skip": lambda run, retry: "complete",
    "wait": lambda run, retry: "running",
    "fix": lambda run, retry: "broken",
    "retry": lambda run, retry: "retry" if retry else "failed",
    "resume": lambda run, retry: "resume" if list_checkpoints(run.run_dir) else "new",
}


def decide(run: Run, jobs: dict[str, tuple[str, str]]) -> RunState:
    """The run's state, after giving a SLURM attempt that died without a record its end record from sacct."""
    attempts = read_attempts(run.run_dir)
    job_state, how = jobs.get(last_submitted(attempts).get("job_id", ""), ("", ""))
    return run_state(run.run_dir, reconcile(run.run_dir, attempts, job_state, how), job_state)


def broken_notes(runs: list[Run], actions: dict[str, str]) -> list[str]:
    """One line per broken run: what is wrong with its folder."""
    notes = []
    for run in runs:
        if actions[run.name] == "broken":
            try:
                RunFolder(run.run_dir).read_config()
            except BrokenRunFolder as err:
                notes.append(f"{run.name}: broken run folder: {err}")
    return notes


# ------------------------------------------------------------------------------------------------ plan
def plan_rows(runs: list[Run], actions: dict[str, str]) -> list[dict]:
    rows = []
    for run in runs:
        cfg, res = run.train_config(), run.size.resources
        micro, accum = batch_plan(cfg, res.world_size)  # the trainer's own split; a bad one is an error here too
        hours = run.estimated_hours()
        rows.append({
            "run": run.name, "params": run.size.params, "tokens": cfg.steps * cfg.global_batch * cfg.seq_len,
            "steps": cfg.steps, "global_batch": cfg.global_batch, "micro": micro, "accum": accum,
            "world": res.world_size, "gpus": res.gpus, "nodes": res.nodes, "hours": hours,
            "gpu_hours": hours * res.gpus if not math.isnan(hours) else math.nan, "action": actions[run.name],
        })
    return rows


def data_notes(sweep: Sweep, runs: list[Run]) -> list[str]:
    """Check the runs against the sweep's data when it is already prepared: a ConfigError for a run that could
    not start (no training window, not one validation window per rank), a note for each run that will evaluate
    on a smaller batch than its global batch. Nothing to check (no notes) before the data exist."""
    from zbpscale.data.loader import read_manifest, split_windows, val_fit

    if not (data_path(sweep) / "manifest.json").exists():
        return []
    manifest = read_manifest(data_path(sweep))
    notes = []
    for run in runs:
        cfg, world = run.train_config(), run.size.resources.world_size
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


def print_plan(sweep: Sweep, rows: list[dict]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"sweep {sweep.name}: {len(rows)} runs", title_justify="left")
    for col in ("run", "params", "tokens", "steps", "batch", "micro x accum x world", "GPUs x nodes", "est. h",
                "GPU-h", "action"):
        table.add_column(col, justify="left" if col in ("run", "action") else "right")

    def fmt_tokens(n: int) -> str:
        return f"{n / 1e9:,.2f}B" if n >= 1e8 else f"{n / 1e6:,.2f}M" if n >= 1e5 else f"{n:,}"

    def fmt_h(h: float) -> str:
        return "?" if math.isnan(h) else f"{h:,.1f}"

    for r in rows:
        table.add_row(r["run"], f"{r['params'] / 1e6:,.1f}M", fmt_tokens(r["tokens"]), f"{r['steps']:,}",
                      str(r["global_batch"]), f"{r['micro']} x {r['accum']} x {r['world']}",
                      f"{r['gpus']} x {r['nodes']}", fmt_h(r["hours"]), fmt_h(r["gpu_hours"]), r["action"])
    console = Console(width=max(120, shutil.get_terminal_size().columns))
    console.print(table)
    total = sum(r["gpu_hours"] for r in rows if not math.isnan(r["gpu_hours"]))
    todo = sum(r["gpu_hours"] for r in rows if not math.isnan(r["gpu_hours"]) and r["action"] in TODO)
    console.print(f"GPU-hours: {total:,.1f} planned, {todo:,.1f} still to run (assumes {sweep.assumed_mfu:.0%} MFU "
                  f"of {sweep.gpu_peak_tflops:g} TFLOP/s per GPU, ZBP arms scaled by their step_time_ratio)"
                  + ("; '?': CPU runs, whose time the plan does not estimate" if any(math.isnan(r["hours"]) for r in rows)
                     else ""))
    console.print(f"runs in {sweep.jobs_dir}; data in {data_path(sweep)}", soft_wrap=True)


# ------------------------------------------------------------------------------------------------ slurm
def sbatch_parameters(run: Run) -> dict:
    """submitit SlurmExecutor parameters of a run (golden-tested against the generated sbatch script)."""
    res = run.size.resources
    params: dict = {
        "job_name": f"{run.sweep.name}/{run.name}",
        "nodes": res.nodes,
        "ntasks_per_node": res.ranks_per_node,
        "cpus_per_task": res.cpus_per_task,
        "time": res.time_min,
        "signal_delay_s": run.sweep.signal_delay_s,
        "stderr_to_stdout": True,
        "additional_parameters": {"requeue": True, **{k: v for k, v in res.extra_sbatch}},
    }
    if res.gpus_per_node:
        params["gpus_per_node"] = res.gpus_per_node
    if res.mem_gb:
        params["mem"] = f"{res.mem_gb}GB"
    for name in ("partition", "account", "qos", "constraint"):
        if getattr(res, name):
            params[name] = getattr(res, name)
    return params


def _executor(folder: Path, params: dict, max_num_timeout: int = 0, python: list[str] | None = None):
    import submitit

    executor = submitit.SlurmExecutor(folder=str(folder), max_num_timeout=max_num_timeout,
                                      python=shlex.join(python or [sys.executable]))
    executor.update_parameters(**params)
    return executor


def submit_prep(sweep: Sweep) -> str:
    """Submit the data-prep job on a training node; returns its job id."""
    from zbpscale.data.prepare import PrepConfig
    from zbpscale.job import PrepJob

    res = sweep.sizes[0].resources
    cfg = PrepConfig(source=sweep.data.source, out=data_path(sweep), tokens=sweep.data.tokens or None,
                     workers=sweep.data.workers, config=sweep.data.config)
    params = {"job_name": f"{sweep.name}/prep-data", "nodes": 1, "ntasks_per_node": 1,
              "cpus_per_task": max(1, sweep.data.workers), "time": 24 * 60, "stderr_to_stdout": True}
    for name in ("partition", "account", "qos"):
        if getattr(res, name):
            params[name] = getattr(res, name)
    folder = sweep.jobs_dir / "prep-data-logs"
    job = _executor(folder, params).submit(PrepJob(cfg))
    print(f"data not prepared at {cfg.out}: prep job {job.job_id} (logs in {folder})")
    return str(job.job_id)


def submit_run(run: Run, *, depends_on: str | None = None, retry: bool = False) -> str:
    """Write the run's resolved config and submit its job; returns the job id."""
    from zbpscale.job import TrainJob

    run_dir = write_config(run)
    params = sbatch_parameters(run)
    if depends_on:
        params["additional_parameters"]["dependency"] = f"afterok:{depends_on}"
    # BLOCKED_PYTHON: a stop signal that comes during start-up waits for the job's handler instead of killing it
    executor = _executor(run_dir / LOGS, params, max_num_timeout=run.sweep.max_timeouts,
                         python=signals.BLOCKED_PYTHON)
    job = executor.submit(TrainJob(str(run_dir), max_timeouts=run.sweep.max_timeouts,
                                   max_preemptions=run.sweep.max_preemptions, signal_delay_s=run.sweep.signal_delay_s))
    record(run_dir, "submitted", job_id=str(job.job_id), executor="slurm", logs=str(run_dir / LOGS), retry=retry)
    return str(job.job_id)


# ------------------------------------------------------------------------------------------------ main
def select(runs: list[Run], only: str | None) -> list[Run]:
    if not only:
        return runs
    patterns = [p.strip() for p in only.split(",") if p.strip()]
    chosen = [r for r in runs if any(fnmatch.fnmatchcase(r.name, p) for p in patterns)]
    if not chosen:
        raise ConfigError(f"--only {only!r} matches no run", hint="runs: " + ", ".join(r.name for r in runs))
    return chosen


def choose_executor(executor: str) -> str:
    """slurm or local: `auto` is SLURM when a controller answers, else the local queue."""
    if executor == "local":
        return "local"
    if slurm.answers():
        return "slurm"
    if executor == "slurm":
        raise ConfigError("--executor slurm, but no SLURM controller answers here (sinfo failed)",
                          hint="check SLURM_CONF and that the controller is up (sinfo), or use --executor local")
    return "local"


def scheduler_states(kind: str, sweep: Sweep, runs: list[Run]) -> dict[str, tuple[str, str]]:
    """{job id: (squeue-style state, how it ended)} of the runs' jobs: the local queue's live entries, or
    SLURM's account of the runs' latest jobs (finished ones too, with their exit)."""
    if kind == "local":
        from zbpscale.local.queue import LocalQueue

        return {job: (state, "") for job, state in LocalQueue(sweep.jobs_root).states().items()}
    return slurm.job_outcomes([j for r in runs if (j := last_job_id(r.run_dir))])


def submit(path: str, *, dry_run: bool = False, only: str | None = None, executor: str = "auto",
           max_parallel: int = 0, retry: bool = False) -> tuple[Sweep, list[Run], str, dict[str, str]]:
    """Plan and submit a sweep; returns the sweep, the selected runs, the executor and {run name: action}.
    retry: submit failed runs again (from their last checkpoint), with fresh timeout/preemption/crash counts."""
    sweep = load_sweep(path)
    runs = select(expand(sweep), only)
    kind = choose_executor(executor)
    actions = {r.name: run_action(r, scheduler_states(kind, sweep, runs), retry=retry) for r in runs}
    notes = data_notes(sweep, [r for r in runs if actions[r.name] in TODO]) + broken_notes(runs, actions)
    print_plan(sweep, plan_rows(runs, actions))
    for note in notes:
        print(f"note: {note}")
    if dry_run:
        if kind == "local":  # what the real submit would refuse, said now (without importing torch)
            from zbpscale.local.slots import gpu_inventory

            try:
                check_fits_here([r for r in runs if actions[r.name] in TODO], gpu_inventory(ask_torch=False))
            except ConfigError as err:
                print(f"warning: the local queue could not run this: {err}")
        return sweep, runs, kind, actions
    if kind == "local":
        actions = submit_local(sweep, runs, max_parallel=max_parallel, retry=retry)
    else:
        todo = [r for r in runs if actions[r.name] in TODO]
        prep = None
        if todo and not (data_path(sweep) / "manifest.json").exists():
            prep = submit_prep(sweep)
        for run in todo:
            job = submit_run(run, depends_on=prep, retry=actions[run.name] == "retry")
            print(f"{run.name}: {actions[run.name]} -> job {job} (logs in {run.run_dir.absolute() / 'logs'})")
    skipped = {k: v for k, v in actions.items() if v not in TODO}
    if skipped:
        jobs = scheduler_states(kind, sweep, runs) if "running" in skipped.values() else {}
        words = {r.name: progress(r, jobs) if actions[r.name] == "running" else actions[r.name] for r in runs}
        print("left alone: " + ", ".join(f"{k} ({words[k]})" for k in skipped))
    if any(v == "failed" for v in skipped.values()):
        print("failed runs are left alone: fix the cause (zbpscale status --logs RUN), then submit again with --retry")
    return sweep, runs, kind, actions


# ------------------------------------------------------------------------------------------------ local
def check_fits_here(runs: list[Run], inventory: list[str]) -> None:
    """The local queue runs one node: refuse runs it could never start, before anything is queued."""
    for run in runs:
        res = run.size.resources
        if res.nodes > 1:
            raise ConfigError(f"{run.name} asks for {res.nodes} nodes; the local queue runs on this node only",
                              hint="submit it to SLURM, or set Resources(nodes=1) in the sweep")
        if res.gpus > len(inventory):
            raise ConfigError(f"{run.name} needs {res.gpus} GPUs; this node has {len(inventory)}",
                              hint="lower Resources.gpus_per_node in the sweep (CPU runs: gpus_per_node=0), or "
                                   "check CUDA_VISIBLE_DEVICES")


def submit_local(sweep: Sweep, runs: list[Run], *, max_parallel: int = 0, retry: bool = False) -> dict[str, str]:
    """Queue the runs that need a job on the local queue and make sure its driver runs; returns the actions.

    Actions are decided again under the queue's lock, so two submits at once never queue a run twice."""
    from zbpscale.local.queue import Entry, LocalQueue
    from zbpscale.local.slots import gpu_inventory

    check_fits_here(runs, gpu_inventory())
    queue = LocalQueue(sweep.jobs_root)
    with queue.submit_lock():
        if max_parallel:
            queue.set_max_parallel(max_parallel)
        alive = {job: (state, "") for job, state in queue.states().items()}
        actions = {r.name: run_action(r, alive, retry=retry) for r in runs}
        todo = [r for r in runs if actions[r.name] in TODO]
        specs = []
        data = data_path(sweep)
        if todo and not (data / "manifest.json").exists():
            d = sweep.data
            command = [sys.executable, "-m", "zbpscale.cli", "prepare-data", "--source", d.source, "--data", str(data),
                       "--workers", str(max(1, d.workers))]
            command += (["--tokens", str(d.tokens)] if d.tokens else []) + (["--config", d.config] if d.config else [])
            specs.append(Entry(job_id="", name=f"{sweep.name}/prep-data", kind="command", command=command,
                               log_dir=str(sweep.jobs_dir / "prep-data-logs"),
                               threads=max(1, d.workers)))
        for run in todo:
            res, run_dir = run.size.resources, write_config(run)
            specs.append(Entry(job_id="", name=f"{sweep.name}/{run.name}", run_dir=str(run_dir),
                               log_dir=str(run_dir / LOGS), gpus=res.gpus, ranks=res.world_size,
                               threads=res.cpus_per_task, time_s=res.time_min * 60.0,
                               signal_delay_s=float(sweep.signal_delay_s), max_timeouts=sweep.max_timeouts,
                               max_preemptions=sweep.max_preemptions, max_crashes=sweep.max_crashes,
                               after="#0" if specs and specs[0].kind == "command" else ""))
        added = queue.add(specs)
        for entry in added:
            if entry.kind == "command":
                print(f"data not prepared at {data}: prep job {entry.job_id} (log in {entry.log_dir})")
                continue
            name = entry.name.split("/", 1)[1]
            record(Path(entry.run_dir), "submitted", job_id=entry.job_id, executor="local", logs=entry.log_dir,
                   retry=actions[name] == "retry")
            print(f"{name}: {actions[name]} -> local job {entry.job_id} (logs in {entry.log_dir})")
        started = queue.ensure_driver()
    if started and not added:
        print("the local queue's driver was not running: started it again; its jobs go on from their checkpoints")
    if added or started:
        print(f"local queue: {queue.dir} (driver log: {queue.dir / 'driver.log'})")
    return actions


def write_config(run: Run) -> Path:
    """Create the run folder with its resolved config (kept when it exists: the run resumes with it) and its
    plan (parameters, GPUs, estimated GPU-hours)."""
    run_dir = run.run_dir.absolute()
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / CANCEL).unlink(missing_ok=True)  # a new submission lifts an earlier `zbpscale cancel`
    if not (run_dir / CONFIG).exists():
        atomic_write(run_dir / CONFIG, json.dumps(run.train_config().to_dict(), indent=1) + "\n")
    res, hours = run.size.resources, run.estimated_hours()  # for `zbpscale status`: planned GPU-hours
    plan = {"params": run.size.params, "gpus": res.gpus, "world_size": res.world_size,
            "gpu_hours": 0.0 if not res.gpus else hours * res.gpus, "time_min": res.time_min}
    atomic_write(run_dir / PLAN, json.dumps(plan, indent=1) + "\n")
    return run_dir


# ------------------------------------------------------------------------------------------------ wait
def progress(run: Run, jobs: dict[str, tuple[str, str]]) -> str:
    """One run in a few words, in status's words: queued, step 12/30, complete, failed (reason; log), ..."""
    now = decide(run, jobs)
    if now.state == "running":
        step = read_json(run.run_dir / HEARTBEAT).get("step")
        return "starting" if step is None else f"step {step}/{run.size.steps}"
    if now.state == "failed":
        return f"failed ({now.reason}; log {now.log})"
    return f"{now.state} ({now.reason})" if now.reason else now.state


def wait_for(sweep: Sweep, runs: list[Run], kind: str, *, poll_s: float = 2.0, every_s: float = 30.0) -> bool:
    """Stay until no run has a live job, printing a line when something changes; True if all completed."""
    from zbpscale.local.queue import LocalQueue

    queue = LocalQueue(sweep.jobs_root) if kind == "local" else None
    shown, shown_at, driver_seen_dead = "", 0.0, 0
    while True:
        alive = scheduler_states(kind, sweep, runs)
        line = " | ".join(f"{r.name} {progress(r, alive)}" for r in runs)
        if line != shown or time.time() - shown_at > every_s:
            print(f"[{time.strftime('%H:%M:%S')}] {line}", flush=True)
            shown, shown_at = line, time.time()
        if not any(alive.get(last_job_id(r.run_dir) or "", ("", ""))[0] in slurm.ALIVE for r in runs):
            break  # no live job left (a run's COMPLETE comes before its job's end: wait for that too)
        if queue is not None:  # two polls in a row without a driver (not one still starting): start one
            driver_seen_dead = 0 if queue.driver_alive() else driver_seen_dead + 1
            if driver_seen_dead >= 2 and queue.ensure_driver():
                print("the local queue's driver had stopped: started a new one", flush=True)
        time.sleep(poll_s)
    bad = [r.name for r in runs if not RunFolder(r.run_dir).complete.exists()]
    print(f"all {len(runs)} runs complete" if not bad else f"not complete: {', '.join(bad)}", flush=True)
    return not bad


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("sweep", help="a sweep file, e.g. sweeps/ladder.py")
    p.add_argument("--dry-run", action="store_true", help="print the plan and touch nothing")
    p.add_argument("--only", metavar="PATTERNS", help="comma-separated run-name patterns, e.g. 's60-*,*-bp'")
    p.add_argument("--executor", default="auto", choices=("auto", "slurm", "local"),
                   help="auto: SLURM when it answers, else the local queue")
    p.add_argument("--wait", action="store_true",
                   help="stay until every run has finished, showing progress; exit 1 if one did not complete")
    p.add_argument("--max-parallel", type=int, default=0, metavar="N",
                   help="local queue: runs at once (default: as many as the GPUs allow; 1 on a CPU-only node)")
    p.add_argument("--retry", action="store_true",
                   help="submit failed runs again from their last checkpoint, with fresh requeue counts")


def run(args: argparse.Namespace) -> int:
    sweep, runs, kind, _ = submit(args.sweep, dry_run=args.dry_run, only=args.only, executor=args.executor,
                                  max_parallel=args.max_parallel, retry=args.retry)
    if not args.wait or args.dry_run:
        return 0
    try:
        return 0 if wait_for(sweep, runs, kind) else 1
    except KeyboardInterrupt:
        print(f"\nstopped watching; the jobs go on (zbpscale status {args.sweep} shows them)", file=sys.stderr)
        return 130


def main(argv: list[str] | None = None) -> int:
    """`python -m zbpscale.submit ...`, the same as `zbpscale submit ...`."""
    from zbpscale.cli import module_main

    return module_main("submit", argv)


if __name__ == "__main__":
    sys.exit(main())
