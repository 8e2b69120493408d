"""Measure what a crash costs on SLURM: the time from a crash to the first step of the attempt that follows it.

Two faults, each on a fresh nano run (CPU, one task) submitted by `python -m zbpscale.submit` to the SLURM that
SLURM_CONF names (tools/slurm_local.py's, say): the trainer killed with -9 at step 12, and the trainer frozen with
SIGSTOP at step 12 (its sentinel records the hang after step_timeout_s=5 and ends the attempt). Printed per fault:
the seconds from the fault (kill) or from the hang's record (SIGSTOP) to the next attempt's first step, and how
the attempt came back (a new job step, a requeue, or not at all: the job ended and waits for a submit).

    eval "$(python tools/slurm_local.py start)"
    python tools/bench_restart.py                                  # this checkout
    python tools/bench_restart.py --src /path/to/older/checkout/src  # an older release, side by side

`--src` puts another checkout's package first on PYTHONPATH for the submit and its jobs (they inherit it).
A requeue here waits for the test SLURM's cred_expire=10 (~15 s); a site's default (120 s) makes it ~170 s.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

from zbpscale.files import read_jsonl

SWEEP = """\
from zbpscale.jobs.sweep import Data, Resources, Size, Sweep, arm

CPU = Resources(gpus_per_node=0, tasks_per_node=1, cpus_per_task=1, time_min=30)
SWEEP = Sweep(name={name!r}, sizes=(Size(name="nano", global_batch=4, seq_len=32, tokens=4 * 32 * 60, lr=3e-3,
                                         resources=CPU),),
              arms=(arm("bp"),), data=Data(dir={data!r}, source="embedded"), root={root!r}, signal_delay_s=30,
              train=(("eval_every", 0), ("eval_batches", 1), ("ckpt_every", 5), ("ckpt_every_s", 0),
                     ("step_timeout_s", 5.0)))
"""


def wait(predicate, what: str, timeout: float = 600.0):
    deadline = time.time() + timeout
    while not (found := predicate()):
        if time.time() > deadline:
            raise SystemExit(f"timed out waiting for {what}")
        time.sleep(0.2)
    return found


def job_state(job: str) -> str:
    out = subprocess.run(["squeue", "-h", "-r", "-t", "all", "-j", job, "-o", "%T"], capture_output=True, text=True)
    return out.stdout.strip()


def one(fault: str, folder: Path, data: Path, env: dict) -> str:
    sweep = folder / f"{fault}.py"
    sweep.write_text(SWEEP.format(name=fault, data=str(data), root=str(folder / "jobs")))
    subprocess.run([sys.executable, "-m", "zbpscale.submit", str(sweep), "--executor", "slurm"], env=env, check=True,
                   capture_output=True, text=True, timeout=300)
    run = folder / "jobs" / fault / "nano-bp"
    attempts, metrics = run / "attempts.jsonl", run / "metrics.jsonl"
    trains = lambda: [r for r in read_jsonl(metrics) if r.get("kind") == "train"]  # noqa: E731
    wait(lambda: len(trains()) >= 12 and any(run.glob("checkpoints/*")), "step 12 and a checkpoint")
    start = [a for a in read_jsonl(attempts) if a["event"] == "start"][-1]
    job = start["job_id"]
    os.kill(start["pid"], signal.SIGKILL if fault == "kill9" else signal.SIGSTOP)
    at = time.time()
    if fault == "stop":  # the clock starts when the hang is recorded (step_timeout_s after the last step)
        at = wait(lambda: next((a["time"] for a in read_jsonl(attempts) if a["event"] == "end"), None),
                  "the hang record")

    def back():
        later = [r for r in trains() if r["time"] > at]
        if later:
            return later
        if job_state(job) in ("FAILED", "COMPLETED", "CANCELLED"):
            return "ended"
        return None

    came = wait(back, "the next attempt's first step")
    if came == "ended":
        return f"{fault:>6}: no restart: job {job} ended {job_state(job)} (a submit resumes it)"
    starts = [a for a in read_jsonl(attempts) if a["event"] == "start"]
    how = ("a new job step" if starts[-1].get("step") not in (None, "0") else "a requeue") if len(starts) > 1 \
        else "?"
    seconds = min(r["time"] for r in came) - at
    subprocess.run(["scancel", job], capture_output=True)
    return f"{fault:>6}: {seconds:5.1f} s to the next attempt's first step ({how})"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--src", help="another checkout's src folder to measure (put first on PYTHONPATH)")
    ap.add_argument("--data", help="a prepared embedded corpus (default: prepared here, in the temp folder)")
    args = ap.parse_args(argv)
    if not os.environ.get("SLURM_CONF"):
        raise SystemExit("SLURM_CONF is not set: start a SLURM first (eval \"$(python tools/slurm_local.py start)\")")
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    if args.src:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(Path(args.src).absolute()), env.get("PYTHONPATH")]))
    folder = Path(tempfile.mkdtemp(prefix="bench-restart-"))
    data = Path(args.data) if args.data else folder / "data"
    if not args.data:
        subprocess.run([sys.executable, "-m", "zbpscale.cli", "prepare-data", "--source", "embedded", "--data",
                        str(data)], env=env, check=True, capture_output=True, text=True, timeout=600)
    version = subprocess.run([sys.executable, "-c", "import zbpscale, sys; print(zbpscale.__file__)"], env=env,
                             capture_output=True, text=True).stdout.strip()
    print(f"zbpscale from {version}")
    for fault in ("kill9", "stop"):
        print(textwrap.indent(one(fault, folder, data, env), "  "), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
