"""`python -m zbpscale.submit SWEEP`: plan every size x arm run of a sweep and submit what is missing.

    python -m zbpscale.submit sweeps/ladder.py --dry-run        # the plan, touching nothing
    python -m zbpscale.submit sweeps/ladder.py                  # submit: SLURM when it answers
    python -m zbpscale.submit sweeps/ladder.py --only 's60-*,*-bp'

Idempotent: complete runs are skipped, partial runs resume from their folder, a run whose recorded job is
still queued or running is left alone, so the same command can be re-run at any time. When the sweep's data
are not prepared, a prep job is submitted first and the training jobs wait for it (afterok).
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import math
import shutil
import subprocess
import sys
from pathlib import Path

from zbpscale.errors import ConfigError, ZbpError
from zbpscale.sweep import Run, Sweep, data_path, expand, load_sweep
from zbpscale.train import batch_plan

ALIVE = {"PENDING", "RUNNING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "CONFIGURING", "COMPLETING",
         "SUSPENDED", "RESIZING", "SIGNALING", "STAGE_OUT", "PREEMPTED"}


# ------------------------------------------------------------------------------------------------ state
def slurm_answers() -> bool:
    """Whether a SLURM controller answers here (sinfo within a few seconds)."""
    if shutil.which("sinfo") is None:
        return False
    try:
        return subprocess.run(["sinfo", "-h", "-o", "%P"], capture_output=True, timeout=10).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def slurm_states(job_ids: list[str]) -> dict[str, str]:
    """Scheduler state of jobs still known to squeue (finished jobs are simply absent)."""
    if not job_ids or shutil.which("squeue") is None:
        return {}
    try:
        out = subprocess.run(["squeue", "-h", "-o", "%i %T", "-j", ",".join(job_ids)], capture_output=True,
                             text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return {}
    return dict(line.split()[:2] for line in out.stdout.splitlines() if len(line.split()) >= 2)


def last_job_id(run_dir: Path) -> str | None:
    from zbpscale.job import read_attempts

    ids = [a["job_id"] for a in read_attempts(run_dir) if a.get("event") == "submitted"]
    return ids[-1] if ids else None


def run_action(run: Run, alive: dict[str, str]) -> str:
    """What submit does with a run: new, resume, skip (complete), running (leave alone), failed."""
    from zbpscale.checkpoint import list_checkpoints
    from zbpscale.job import read_attempts
    from zbpscale.train import COMPLETE

    run_dir = run.run_dir
    if (run_dir / COMPLETE).exists():
        return "complete"
    job = last_job_id(run_dir)
    if job is not None and alive.get(job) in ALIVE:
        return "running"
    ends = [a for a in read_attempts(run_dir) if a.get("event") == "end"]
    if ends and ends[-1].get("why") == "failed":
        return "failed"
    return "resume" if list_checkpoints(run_dir) else "new"


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
    todo = sum(r["gpu_hours"] for r in rows if not math.isnan(r["gpu_hours"]) and r["action"] in ("new", "resume"))
    console.print(f"GPU-hours: {total:,.1f} planned, {todo:,.1f} still to run (assumes {sweep.assumed_mfu:.0%} MFU "
                  f"of {sweep.gpu_peak_tflops:g} TFLOP/s per GPU, ZBP arms scaled by their step_time_ratio)")


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


def _executor(folder: Path, params: dict, max_num_timeout: int = 0):
    import submitit

    executor = submitit.SlurmExecutor(folder=str(folder), max_num_timeout=max_num_timeout)
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
    folder = Path(sweep.root).absolute() / sweep.name / "prep-data-logs"
    job = _executor(folder, params).submit(PrepJob(cfg))
    print(f"data not prepared at {cfg.out}: prep job {job.job_id} (logs in {folder})")
    return str(job.job_id)


def submit_run(run: Run, *, depends_on: str | None = None) -> str:
    """Write the run's resolved config and submit its job; returns the job id."""
    from zbpscale.job import TrainJob, record
    from zbpscale.train import CONFIG

    run_dir = run.run_dir.absolute()
    run_dir.mkdir(parents=True, exist_ok=True)
    config_path = run_dir / CONFIG
    config = run.train_config().to_dict()
    if not config_path.exists():
        config_path.write_text(json.dumps(config, indent=1) + "\n")
    params = sbatch_parameters(run)
    if depends_on:
        params["additional_parameters"]["dependency"] = f"afterok:{depends_on}"
    job = _executor(run_dir / "logs", params, max_num_timeout=run.sweep.max_timeouts).submit(
        TrainJob(str(run_dir), max_timeouts=run.sweep.max_timeouts, max_preemptions=run.sweep.max_preemptions,
                 signal_delay_s=run.sweep.signal_delay_s))
    record(run_dir, "submitted", job_id=str(job.job_id), executor="slurm", logs=str(run_dir / "logs"))
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


def submit(path: str, *, dry_run: bool = False, only: str | None = None, executor: str = "auto") -> dict[str, str]:
    """Plan and submit a sweep; returns {run name: action taken}."""
    sweep = load_sweep(path)
    runs = select(expand(sweep), only)
    use_slurm = executor in ("auto", "slurm") and slurm_answers()
    alive = slurm_states([j for r in runs if (j := last_job_id(r.run_dir))]) if use_slurm else {}
    actions = {r.name: run_action(r, alive) for r in runs}
    print_plan(sweep, plan_rows(runs, actions))
    if dry_run:
        return actions
    if executor == "slurm" and not use_slurm:
        raise ConfigError("--executor slurm, but no SLURM controller answers here (sinfo failed)",
                          hint="check SLURM_CONF and that the controller is up (sinfo)")
    if not use_slurm:
        raise ConfigError("the local executor is not available yet" + ("" if executor == "local" else
                                                                       " and no SLURM answers here"),
                          hint="run on a SLURM cluster (or tools/slurm_local.py), or train single runs with "
                               "python -m zbpscale.train")
    todo = [r for r in runs if actions[r.name] in ("new", "resume")]
    prep = None
    if todo and not (data_path(sweep) / "manifest.json").exists():
        prep = submit_prep(sweep)
    for run in todo:
        job = submit_run(run, depends_on=prep)
        print(f"{run.name}: {actions[run.name]} -> job {job} (logs in {run.run_dir.absolute() / 'logs'})")
    skipped = {k: v for k, v in actions.items() if v not in ("new", "resume")}
    if skipped:
        print("left alone: " + ", ".join(f"{k} ({v})" for k, v in skipped.items()))
    return actions


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m zbpscale.submit", description=__doc__.splitlines()[0])
    p.add_argument("sweep", help="a sweep file, e.g. sweeps/ladder.py")
    p.add_argument("--dry-run", action="store_true", help="print the plan and touch nothing")
    p.add_argument("--only", help="comma-separated run-name patterns, e.g. 's60-*,*-bp'")
    p.add_argument("--executor", default="auto", choices=("auto", "slurm", "local"),
                   help="auto: SLURM when it answers, else the local queue")
    args = p.parse_args(argv)
    try:
        submit(args.sweep, dry_run=args.dry_run, only=args.only, executor=args.executor)
    except ZbpError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
