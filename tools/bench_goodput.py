"""Goodput under faults: one nano run on CPU under a schedule of time limits and kill -9s, through the job layer.

Submits a sweep of one nano run (bp, CPU) to the local queue (default) or to a running test SLURM, with a time
limit of `--time-min` minutes whose warning (SIGUSR2) comes `--signal-delay` seconds before it: every attempt that
lives that long checkpoints and is requeued, as at a real time limit. On top, `--kill ATTEMPT:SECONDS,...` kills
(-9) the trainer (rank 0's process, the pid its `start` event names) of that attempt that many seconds after its
first step. The local queue requeues a killed attempt itself (a crash, within max_crashes); on SLURM the job either
starts the run again itself (a new job step) or ends FAILED, and then the benchmark submits the sweep again, as a
person would (the next submit records the end from sacct).
When the run is complete it prints each attempt's accounting (run/goodput.py) and the run's:

  goodput   productive training time / wall time held by the attempts (the queue wait not held, shown beside)
  restart   an interruption (an attempt's end) -> the first step of the next attempt: queue wait + start-up
  lost      the time of steps done again after a kill (from the checkpoint resumed to the kill)

    python tools/bench_goodput.py                                  # local queue: kills in attempts 1 and 3
    python tools/bench_goodput.py --executor slurm --slurm-dir /tmp/zbpscale-slurm   # a test SLURM already running
    python tools/bench_goodput.py --steps 4000 --kill 2:20 --json

SLURM: start a cluster first (`python tools/slurm_local.py start DIR`, as tests/test_submit_slurm.py's fixture does);
the benchmark never starts or stops one. Its minimum time limit is one minute, as on the local queue.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

from zbpscale.jobs.goodput_table import WORDS
from zbpscale.run import goodput
from zbpscale.run.folder import RunFolder
from zbpscale.run.history import read_attempts
from zbpscale.run.records import read_records

REPO = Path(__file__).resolve().parents[1]


def sweep_file(folder: Path, args: argparse.Namespace) -> Path:
    path = folder / "bench.py"
    path.write_text(textwrap.dedent(f"""\
        from zbpscale.jobs.sweep import Data, Resources, Size, Sweep, arm

        CPU = Resources(nodes=1, gpus_per_node=0, tasks_per_node=1, cpus_per_task={args.cpus}, time_min={args.time_min})
        SWEEP = Sweep(
            name="goodput",
            sizes=(Size(name="nano", global_batch=4, seq_len=32, tokens=4 * 32 * {args.steps}, lr=3e-3,
                        resources=CPU),),
            arms=(arm("bp"),),
            data=Data(dir={str(folder / "data")!r}, source="embedded", workers=1),
            train=(("eval_every", {args.eval_every}), ("eval_batches", 1), ("ckpt_every", {args.ckpt_every}),
                   ("ckpt_every_s", 0)),
            root={str(folder / "jobs")!r},
            max_timeouts=50,
            max_crashes=50,
            signal_delay_s={args.signal_delay},
        )
        """))
    return path


def submit(sweep: Path, executor: str, env: dict) -> None:
    out = subprocess.run([sys.executable, "-m", "zbpscale.submit", str(sweep), "--executor", executor],
                         cwd=sweep.parent, env=env, capture_output=True, text=True, timeout=300)
    if out.returncode != 0:
        raise SystemExit(f"submit failed:\n{out.stdout}{out.stderr}")


def job_final(job: str, env: dict) -> bool:
    """Whether SLURM's accounting says the job has ended for good (not pending a requeue)."""
    out = subprocess.run(["sacct", "-n", "-X", "-P", "-j", job, "-o", "State"], env=env, capture_output=True,
                         text=True, timeout=30)
    return out.stdout.strip().split(" ")[0] in {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "OUT_OF_MEMORY",
                                                "NODE_FAIL", "BOOT_FAIL", "DEADLINE"}


def drive(run: Path, sweep: Path, args: argparse.Namespace, env: dict) -> list[str]:
    """Submit, kill -9 on schedule, resubmit after a kill on SLURM, until the run is complete; what was done."""
    kills = dict((int(a), float(s)) for a, s in (k.split(":") for k in args.kill.split(",") if k))
    done, log = set(), []
    submit(sweep, args.executor, env)
    deadline = time.time() + args.timeout
    while not RunFolder(run).complete.exists():
        if time.time() > deadline:
            raise SystemExit(f"the run did not complete within {args.timeout:.0f} s; see {run}")
        starts = [a for a in read_attempts(run) if a["event"] == "start"]
        firsts = [r["time"] for r in read_records(run) if r["kind"] == "start"]
        n = len(starts)
        if n in kills and n not in done and len(firsts) >= n and time.time() - firsts[-1] >= kills[n]:
            os.kill(starts[-1]["pid"], signal.SIGKILL)
            done.add(n)
            log.append(f"attempt {n}: kill -9 of pid {starts[-1]['pid']} {time.time() - firsts[-1]:.1f} s after its "
                       "first step")
            if args.executor == "slurm":
                job = starts[-1]["job_id"]
                while not job_final(job, env):  # or SLURM restarts it within the job (a new job step)
                    if sum(a["event"] == "start" for a in read_attempts(run)) > n:
                        log.append(f"attempt {n}: job {job} started the run again itself")
                        break
                    time.sleep(1)
                else:
                    submit(sweep, args.executor, env)  # records the kill's end from sacct and resumes
                    log.append(f"attempt {n}: job {job} ended; submitted again")
        time.sleep(0.2)
    return log


def wait_local_driver(jobs: Path) -> None:
    from zbpscale.jobs.executors.local_queue.queue import LocalQueue

    queue, deadline = LocalQueue(jobs), time.time() + 60
    while queue.driver_alive() and time.time() < deadline:
        time.sleep(0.5)


def wait_ended(run: Path, timeout: float = 120) -> None:
    """Until the last attempt's end event is recorded (by the driver, or the SLURM job, after the trainer exits)."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        events = [a["event"] for a in read_attempts(run)]
        if events.count("end") >= events.count("start"):
            return
        time.sleep(0.5)


def report(run: Path) -> dict:
    attempts = goodput.read_attempts(run)
    g = goodput.Goodput.of(attempts)
    ends = [a.get("why") for a in read_attempts(run) if a["event"] == "end"]
    resumes = [r for r in read_records(run) if r["kind"] == "resume"]
    return {"attempts": [{"ended": why, **{k: getattr(a, k) for k in ("queue", "startup", "training", "saves",
                                                                      "lost", "other", "restart")}, "held": a.held}
                         for a, why in zip(attempts, ends + [None] * len(attempts))],
            "held_s": g.held, "goodput": g.fraction, **{f"{b}_s": getattr(g, b) for b in goodput.BUCKETS},
            "queue_s": g.queue, "restarts_s": list(g.restarts),
            "redo_steps": [r.get("redo_steps", 0) for r in resumes]}


def print_report(figures: dict, log: list[str]) -> None:
    for line in log:
        print(line)
    print(f"{'attempt':>7} {'ended':>10} {'held':>7} {'queue':>6} {'start-up':>8} {'train':>7} {'saves':>6} "
          f"{'lost':>6} {'other':>6} {'restart':>7}")
    for i, a in enumerate(figures["attempts"], 1):
        restart = "" if a["restart"] is None else f"{a['restart']:.1f}"
        print(f"{i:>7} {a['ended'] or '':>10} {a['held']:>7.1f} {a['queue']:>6.1f} {a['startup']:>8.1f} "
              f"{a['training']:>7.1f} {a['saves']:>6.2f} {a['lost']:>6.1f} {a['other']:>6.1f} {restart:>7}")
    held = figures["held_s"]
    print(f"held {held:.1f} s: goodput {100 * figures['goodput']:.1f}% (training / held); "
          + ", ".join(f"{WORDS[b]} {100 * figures[f'{b}_s'] / held:.1f}%" for b in goodput.BUCKETS if b != "training")
          + f"; queue {figures['queue_s']:.1f} s beside")
    restarts = figures["restarts_s"]
    if restarts:
        print(f"restart (interruption -> first step of the next attempt): median {statistics.median(restarts):.1f} s,"
              f" max {max(restarts):.1f} s over {len(restarts)}; steps redone after kills: {figures['redo_steps']}")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--executor", choices=("local", "slurm"), default="local")
    p.add_argument("--slurm-dir", help="the state folder of a running test SLURM (tools/slurm_local.py)")
    p.add_argument("--steps", type=int, default=3000)
    p.add_argument("--ckpt-every", type=int, default=100, help="steps between periodic checkpoints")
    p.add_argument("--eval-every", type=int, default=0)
    p.add_argument("--time-min", type=int, default=1, help="each attempt's time limit, minutes")
    p.add_argument("--signal-delay", type=int, default=30,
                   help="seconds before the time limit that the warning (SIGUSR2) comes: attempts are cut after "
                        "time-min * 60 - this")
    p.add_argument("--kill", default="1:15,3:10", help="ATTEMPT:SECONDS after its first step, comma-separated")
    p.add_argument("--cpus", type=int, default=1)
    p.add_argument("--timeout", type=float, default=1200)
    p.add_argument("--keep", action="store_true", help="keep the temp folder (its path is printed)")
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    env = {**os.environ, "OMP_NUM_THREADS": str(args.cpus)}
    if args.executor == "slurm":
        sys.path.insert(0, str(REPO / "tools"))
        import slurm_local

        if not args.slurm_dir or not slurm_local.is_running(args.slurm_dir):
            raise SystemExit("--executor slurm needs --slurm-dir of a running test SLURM "
                             "(python tools/slurm_local.py start DIR)")
        env = {**env, **slurm_local.env(args.slurm_dir),
               "PATH": os.pathsep.join([env.get("PATH", os.defpath), "/usr/sbin", "/sbin"])}
    tmp = tempfile.mkdtemp(prefix="zbpscale-bench-goodput-", dir="/tmp")
    folder = Path(tmp)
    subprocess.run([sys.executable, "-m", "zbpscale.cli", "prepare-data", "--source", "embedded", "--data",
                    str(folder / "data"), "--offline"], check=True, capture_output=True)
    sweep = sweep_file(folder, args)
    run = folder / "jobs" / "goodput" / "nano-bp"
    try:
        log = drive(run, sweep, args, env)
        if args.executor == "local":
            wait_local_driver(folder / "jobs")
        wait_ended(run)
        figures = report(run)
    finally:
        if not args.keep:
            import shutil

            shutil.rmtree(folder, ignore_errors=True)
        else:
            print(f"kept: {folder}")
    if args.json:
        print(json.dumps({"log": log, **figures}, indent=1))
    else:
        print_report(figures, log)
    return 0


if __name__ == "__main__":
    sys.exit(main())
