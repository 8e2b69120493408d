"""Local-queue overhead: from one run's end to the next run's start, with the model's start-up shown apart.

Submits a sweep of `--runs` short nano runs (seeds 0..N-1, CPU) to the local queue one at a time
(`--max-parallel 1`) and reads the records the runs and the driver wrote:

  queue gap   the previous run's last metrics record (its trainer is done) -> the next run's launch (the driver's
              `start` record): process exit, the driver noticing it, recording it, and starting the next ranks;
  exit        of which: that last record -> the driver's `end` record of the previous run (the process exiting
              and the driver noticing);
  start-up    that launch -> the next run's trainer `start` record (interpreter, torch import, model, data);
  first step  the trainer `start` record -> its first `train` record.

The issue's figure is the queue gap (goal: under 2 s); start-up is the model's own and excluded from it.

  python tools/bench_queue.py             # 4 runs
  python tools/bench_queue.py --runs 6 --json
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

from zbpscale.run.history import read_attempts
from zbpscale.run.records import read_records


def sweep_file(folder: Path, runs: int, steps: int) -> Path:
    path = folder / "bench.py"
    path.write_text(textwrap.dedent(f"""\
        from zbpscale.jobs.sweep import Data, Resources, Size, Sweep, arm

        CPU = Resources(gpus_per_node=0, tasks_per_node=1, cpus_per_task=2, time_min=30)
        SWEEP = Sweep(
            name="bench",
            sizes=(Size(name="nano", global_batch=4, seq_len=32, tokens=4 * 32 * {steps}, resources=CPU),),
            arms=(arm("bp"),),
            seeds=tuple(range({runs})),
            data=Data(dir={str(folder / "data")!r}, source="embedded", workers=1),
            train=(("eval_every", 0), ("eval_batches", 1), ("ckpt_every", 0), ("ckpt_every_s", 0)),
            root={str(folder / "jobs")!r},
        )
        """))
    return path


def measure(folder: Path, runs: int) -> list[dict]:
    rows, previous = [], None
    for seed in range(runs):
        run_dir = folder / "jobs" / "bench" / ("nano-bp" + (f"-s{seed}" if seed else ""))
        records = read_records(run_dir)
        launch = next(a["time"] for a in read_attempts(run_dir) if a["event"] == "start")
        start = next(r["time"] for r in records if r["kind"] == "start")
        first = next(r["time"] for r in records if r["kind"] == "train")
        if previous is not None:
            rows.append({"from": previous[0], "to": run_dir.name, "queue_gap_s": launch - previous[1],
                         "exit_s": previous[2] - previous[1], "startup_s": start - launch,
                         "first_step_s": first - start})
        ended = next(a["time"] for a in read_attempts(run_dir) if a["event"] == "end")
        previous = (run_dir.name, records[-1]["time"], ended)
    return rows


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=4)
    p.add_argument("--steps", type=int, default=5, help="steps per run")
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="zbpscale-bench-queue-") as tmp:
        folder = Path(tmp)
        subprocess.run([sys.executable, "-m", "zbpscale.cli", "prepare-data", "--source", "embedded", "--data",
                        str(folder / "data"), "--offline"], check=True, capture_output=True)
        sweep = sweep_file(folder, args.runs, args.steps)
        subprocess.run([sys.executable, "-m", "zbpscale.submit", str(sweep), "--executor", "local", "--wait",
                        "--max-parallel", "1"], check=True, capture_output=True, cwd=folder)
        rows = measure(folder, args.runs)
    if args.json:
        print(json.dumps(rows, indent=1))
        return 0
    print(f"{'transition':<28} {'queue gap':>10} {'(exit)':>7} {'start-up':>9} {'first step':>11}")
    for r in rows:
        print(f"{r['from'] + ' -> ' + r['to']:<28} {r['queue_gap_s']:>9.2f}s {r['exit_s']:>6.2f}s "
              f"{r['startup_s']:>8.2f}s {r['first_step_s']:>10.2f}s")
    gaps = [r["queue_gap_s"] for r in rows]
    print(f"queue gap: median {statistics.median(gaps):.2f} s, max {max(gaps):.2f} s (goal: under 2 s); "
          f"start-up median {statistics.median(r['startup_s'] for r in rows):.2f} s (excluded)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
