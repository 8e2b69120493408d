"""`zbpscale status` speed on a generated sweep folder (#54 item 2: 10,000 runs under 2 s cold, 1 s warm).

Writes a folder the way a ladder's runs would leave it mid-way: each run with its config, plan, attempts (a few
requeues), heartbeat, and a metrics.jsonl of `--records` train records with an eval every 50 steps (about
1 MB per run at the default), some runs complete, some failed with a log. Then times, side by side, in
interleaved rounds (median): the whole command in a fresh process (`zbpscale status DIR`, table and --json),
and the in-process gathering of the rows (what --watch repeats). No SLURM here: the runs say executor local.

The run folders' heartbeats carry the index a trainer writes (the glance and goodput's fold of all but the last
20 records); after the timed rounds it is removed and the rows gathered, and `status --goodput` run, again: both
must give the same as with it (the index is a cache).

  python tools/bench_status.py
  python tools/bench_status.py --runs 100 --records 20000
  python tools/bench_status.py --runs 10000 --records 1000 --rounds 3 --cold   # root: drops the kernel's caches
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from zbpscale.jobs.status import collect_rows
from zbpscale.run.config import TrainConfig, model_config
from zbpscale.run.glance import glance_index, glance_of
from zbpscale.run.goodput import Fold
from zbpscale.run.records import records_of

SIZES = ("nano", "micro", "tiny", "mini", "s60", "s124", "s350", "s1b")
ARMS = ("bp", "zbp_n16", "zbp_n64")


def run_name(i: int) -> str:
    """The i-th run of a ladder of every preset size x 3 arms, seed after seed: `tiny-zbp_n16-s3`."""
    seed = i // (len(SIZES) * len(ARMS))
    return f"{SIZES[i % len(SIZES)]}-{ARMS[i // len(SIZES) % len(ARMS)]}" + (f"-s{seed}" if seed else "")


def build(folder: Path, runs: int, records: int, *, index: bool = True) -> None:
    """`runs` run folders (`run_name`); `index`: their heartbeats carry the glance index a trainer of this release
    writes (covering all but the last 20 train records, written after the latest heartbeat)."""
    now = time.time()
    config = json.dumps(TrainConfig(model=model_config("s60"), data_dir="data", steps=2 * records,
                                    global_batch=256).to_dict())
    lines = [json.dumps({"kind": "start", "time": now - 9e4, "derived": {"params": 6e7, "tokens_per_step": 262144}})]
    for step in range(records):
        tokens = (step + 1) * 262144
        lines.append(json.dumps({"kind": "train", "time": now - 9e4 + step, "step": step, "tokens": tokens,
                                 "loss": 3.1, "lr": 3e-4, "grad_norm": 0.8, "step_time": 0.9,
                                 "tokens_per_s": 291000.0}))
        if step % 50 == 49:
            lines.append(json.dumps({"kind": "eval", "time": now - 9e4 + step, "step": step, "tokens": tokens,
                                     "val_loss": 3.2 + 1.0 / (step + 1)}))
    metrics = ("\n".join(lines) + "\n").encode()
    at = len(("\n".join(lines[:-20]) + "\n").encode())
    beat = {"step": records, "time": now - 10}
    if index:
        beat["glance"] = glance_index(glance_of(metrics[:at]), metrics[:at], at,
                                      fold=Fold.of(records_of(metrics[:at])).state)
    for i in range(runs):
        run = folder / run_name(i)
        run.mkdir(parents=True)
        (run / "config.json").write_text(config)
        (run / "plan.json").write_text(json.dumps({"params": 6e7 + i, "gpus": 8, "gpu_hours": 40.0}))
        (run / "metrics.jsonl").write_bytes(metrics)
        (run / "heartbeat.json").write_text(json.dumps(beat))
        job = f"local-{i}"
        attempts = [{"event": "submitted", "time": now - 9e4, "job_id": job, "executor": "local"}]
        for k in range(3):
            attempts += [{"event": "start", "time": now - 9e4 + k * 100, "job_id": job},
                         {"event": "end", "time": now - 9e4 + k * 100 + 90, "job_id": job, "why": "timeout",
                          "reason": "checkpointed; requeue"}]
        if i % 10 == 0:
            attempts.append({"event": "end", "time": now - 5, "job_id": job, "why": "failed",
                             "reason": "exit status 1", "log": str(run / "logs" / f"{job}_0.log")})
            (run / "logs").mkdir()
            (run / "logs" / f"{job}_0.log").write_text("x\n" * 5000 + "RuntimeError: boom\n")
        elif i % 10 == 1:
            (run / "COMPLETE").write_text("{}\n")
        (run / "attempts.jsonl").write_text("".join(json.dumps(a) + "\n" for a in attempts))


def drop_caches() -> bool:
    """Drop the kernel's page, dentry and inode caches (root only); False where this machine does not allow it."""
    try:
        subprocess.run(["sync"], check=True)
        Path("/proc/sys/vm/drop_caches").write_text("3\n")
        return True
    except OSError:
        return False


def timed_status(folder: Path, *extra: str) -> tuple[float, str]:
    """(seconds, stdout) of `zbpscale status DIR *extra` in a fresh process."""
    t = time.perf_counter()
    out = subprocess.run([sys.executable, "-m", "zbpscale.cli", "status", str(folder), *extra], capture_output=True,
                         text=True, check=False)
    return time.perf_counter() - t, out.stdout


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=100)
    p.add_argument("--records", type=int, default=5000, help="train records per run")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--cold", action="store_true", help="also time status after dropping the kernel's caches (root)")
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="zbpscale-bench-status-") as tmp:
        folder = Path(tmp) / "jobs" / "ladder"
        t = time.perf_counter()
        build(folder, args.runs, args.records)
        print(f"built {args.runs} run folders in {time.perf_counter() - t:.0f} s", file=sys.stderr)
        size_mb = sum(f.stat().st_size for f in folder.rglob("*") if f.is_file()) / 1e6
        labels = ("zbpscale status DIR", "zbpscale status DIR --json", "zbpscale status DIR --goodput",
                  "rows in process", "rows in process, no index", "status --goodput --json",
                  "status --goodput --json, no index")
        times: dict[str, list[float]] = {label: [] for label in labels}
        if args.cold:
            times["zbpscale status DIR, caches dropped"] = []
        for _ in range(args.rounds):
            for label, extra in zip(labels[:3], ([], ["--json"], ["--goodput"])):
                times[label].append(timed_status(folder, *extra)[0])
            if args.cold and drop_caches():
                times["zbpscale status DIR, caches dropped"].append(timed_status(folder)[0])
            t = time.perf_counter()
            rows = collect_rows(folder)
            times["rows in process"].append(time.perf_counter() - t)
            took, accounted = timed_status(folder, "--goodput", "--json")
            times["status --goodput --json"].append(took)
        assert len(rows) == args.runs
        for beat in folder.glob("*/heartbeat.json"):  # the index is a cache: the same rows without it
            beat.write_text(json.dumps({k: v for k, v in json.loads(beat.read_text()).items() if k != "glance"}))
        for _ in range(args.rounds):
            t = time.perf_counter()
            without = collect_rows(folder)
            times["rows in process, no index"].append(time.perf_counter() - t)
            took, unindexed = timed_status(folder, "--goodput", "--json")
            times["status --goodput --json, no index"].append(took)
        assert unindexed == accounted, "goodput differs without the heartbeats' index"

        def aged(rs: list[dict]) -> list[dict]:
            return [{k: v for k, v in r.items() if k != "heartbeat_age_s"} for r in rs]

        assert aged(without) == aged(rows), "the rows differ without the heartbeats' index"
    print(f"{args.runs} runs, {size_mb:.0f} MB of run folders; median of {args.rounds} rounds")
    for label, ts in times.items():
        if ts:
            print(f"  {label:<38} {statistics.median(ts):6.3f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
