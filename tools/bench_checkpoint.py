"""Checkpoint stall (#42 item 5): how long a checkpoint save blocks the trainer, as a part of a checkpoint interval.

Two measurements, both through the trainer's own save (checkpoint.save: torch.save to a temp file, fsync, rename,
prune; every rank waits for rank 0):

  nano, trained  a real CPU run of the nano preset (train(), batch 4 x 32 tokens as the job-layer sweeps train it)
                 checkpointing every `--every` steps (32: sweeps/mini_ladder.py's ckpt_every, the CPU sweeps' interval):
                 the trainer's own count of its blocked time (its end record's ckpt_s / ckpts) against that interval
                 in its own median step time
  a large preset the largest preset whose checkpoint (weights and AdamW's two moments: 12 bytes a parameter) fits in
                 half of this machine's available memory (a machine shared with other work; `--sizes` to choose),
                 saved `--repeat` times; its optimizer state is filled without a step (a step of s350 on 2 cores
                 takes minutes and changes nothing of what is written). Against the paper's ladder interval:
                 sweeps/ladder.py checkpoints every 1000 steps or 1800 s, whichever comes first, and its step time
                 is the plan's (Sweep.estimated_hours at the sweep's assumed MFU on H200s / steps). The disk is this
                 machine's, not a cluster's: bytes and MB/s are printed to rescale it, and s1b is extrapolated from
                 them when it is not measured.

    python tools/bench_checkpoint.py                 # nano trained, and the largest preset that fits
    python tools/bench_checkpoint.py --sizes s124 --repeat 5
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

REPO = Path(__file__).resolve().parents[1]
BYTES_PER_PARAM = 12  # fp32 weights + AdamW's exp_avg and exp_avg_sq
LADDER_EVERY, LADDER_EVERY_S = 1000, 1800.0  # sweeps/ladder.py's ckpt_every, ckpt_every_s


def available_bytes() -> int:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) * 1024
    return 0


def largest_fitting() -> str:
    from zbpscale.train.schema import SIZES, n_params

    room = available_bytes() / 2
    fits = [s for s, m in SIZES.items() if BYTES_PER_PARAM * n_params(m) * 1.3 < room]
    return fits[-1]


def ladder_interval(size: str) -> tuple[float, float] | None:
    """(step seconds, checkpoint interval seconds) of `size`'s bp run in the paper's ladder, from its plan."""
    from zbpscale.jobs.sweep import expand, load_sweep

    runs = [r for r in expand(load_sweep(REPO / "sweeps" / "ladder.py")) if r.size.name == size and r.arm.name == "bp"
            and r.seed == 0]
    if not runs:
        return None
    step_s = runs[0].estimated_hours() * 3600 / runs[0].size.steps
    return step_s, min(LADDER_EVERY * step_s, LADDER_EVERY_S)


def nano_trained(folder: Path, steps: int, every: int) -> dict:
    """The trainer's own count of its blocked save time in a real nano run."""
    from zbpscale.run.folder import RunFolder
    from zbpscale.train.loop import train
    from zbpscale.train.metrics import read_records
    from zbpscale.train.schema import TrainConfig, model_config

    cfg = TrainConfig(model=model_config("nano", max_seq_len=32), data_dir=str(folder / "data"), steps=steps,
                      global_batch=4, lr=3e-3, eval_every=0, eval_batches=1, ckpt_every=every, ckpt_every_s=0,
                      device="cpu")
    run = folder / "nano"
    train(cfg, run)
    records = read_records(run)
    end = next(r for r in records if r["kind"] == "end")
    step_s = statistics.median(r["step_time"] for r in records if r["kind"] == "train")
    per_save = end["ckpt_s"] / end["ckpts"]
    nbytes = RunFolder(run).list_checkpoints()[-1][1].stat().st_size
    return {"size": "nano", "saves": end["ckpts"], "blocked_s": per_save, "bytes": nbytes, "step_s": step_s,
            "interval": f"{every} steps", "interval_s": every * step_s, "fraction": per_save / (every * step_s)}


def saved_directly(folder: Path, size: str, repeat: int) -> dict:
    """Blocked seconds of checkpoint.save for `size`'s model and a filled AdamW state, the median of `repeat`."""
    import torch

    from zbpscale.run.folder import RunFolder
    from zbpscale.train import checkpoint
    from zbpscale.train.model import Transformer
    from zbpscale.train.schema import model_config

    model = Transformer(model_config(size))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    for group in optimizer.param_groups:
        for p in group["params"]:
            optimizer.state[p] = {"step": torch.tensor(1.0), "exp_avg": torch.zeros_like(p),
                                  "exp_avg_sq": torch.zeros_like(p)}
    run = folder / size
    times = []
    for step in range(1, repeat + 1):
        t0 = time.perf_counter()
        checkpoint.save(run, step, {"model": model.state_dict(), "optimizer": optimizer.state_dict(), "numerics": {}},
                        keep=1)
        times.append(time.perf_counter() - t0)
    nbytes = RunFolder(run).list_checkpoints()[-1][1].stat().st_size
    row = {"size": size, "saves": repeat, "blocked_s": statistics.median(times), "bytes": nbytes,
           "mb_per_s": nbytes / statistics.median(times) / 1e6}
    ladder = ladder_interval(size)
    if ladder:
        row.update(step_s=ladder[0], interval="ladder: 1000 steps or 1800 s", interval_s=ladder[1],
                   fraction=row["blocked_s"] / ladder[1])
    return row


def extrapolated(measured: dict, size: str) -> dict:
    """`size`'s save at the measured throughput (bytes in proportion to parameters)."""
    from zbpscale.train.schema import model_config, n_params

    nbytes = measured["bytes"] * n_params(model_config(size)) / n_params(model_config(measured["size"]))
    blocked = nbytes / (measured["mb_per_s"] * 1e6)
    step_s, interval_s = ladder_interval(size)
    return {"size": f"{size} (extrapolated)", "saves": 0, "blocked_s": blocked, "bytes": int(nbytes),
            "mb_per_s": measured["mb_per_s"], "step_s": step_s, "interval": "ladder: 1000 steps or 1800 s",
            "interval_s": interval_s, "fraction": blocked / interval_s}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", help="comma-separated presets to save directly (default: the largest that fits)")
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--every", type=int, default=32, help="the nano run's checkpoint interval, steps")
    p.add_argument("--steps", type=int, default=200, help="the nano run's steps")
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory(prefix="zbpscale-bench-ckpt-", dir="/tmp") as tmp:
        folder = Path(tmp)
        subprocess.run([sys.executable, "-m", "zbpscale.cli", "prepare-data", "--source", "embedded", "--data",
                        str(folder / "data"), "--offline"], check=True, capture_output=True)
        rows.append(nano_trained(folder, args.steps, args.every))
        for size in (args.sizes.split(",") if args.sizes else [largest_fitting()]):
            rows.append(saved_directly(folder, size, args.repeat))
    if not any(r["size"] == "s1b" for r in rows) and "mb_per_s" in rows[-1]:
        rows.append(extrapolated(rows[-1], "s1b"))
    if args.json:
        print(json.dumps(rows, indent=1))
        return 0
    print(f"{'size':<18} {'saves':>5} {'blocked':>9} {'GB':>6} {'MB/s':>6} {'step':>8} {'interval':>9} {'stall':>7}"
          "  interval of")
    for r in rows:
        mb = f"{r['mb_per_s']:.0f}" if "mb_per_s" in r else ""
        print(f"{r['size']:<18} {r['saves']:>5} {r['blocked_s']:>8.3f}s {r['bytes'] / 1e9:>6.2f} {mb:>6} "
              f"{r.get('step_s', 0):>7.3f}s {r.get('interval_s', 0):>8.0f}s {100 * r.get('fraction', 0):>6.2f}%"
              f"  {r.get('interval', '')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
