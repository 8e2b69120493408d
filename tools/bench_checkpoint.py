"""Checkpoint stall (#42 item 5, #54 item 1): how long a checkpoint save blocks the trainer, synchronous and in the
background side by side, as a part of a checkpoint interval.

A synchronous save (checkpoint.save: torch.save to a temp file, fsync, rename, prune) blocks the trainer for the
whole write; a background one (checkpoint.Background, the trainer's periodic saves since #54) only while it copies
the state into host memory it keeps, then a thread writes it. Measured:

  nano, trained  a real CPU run of the nano preset (train(), batch 4 x 32 tokens as the job-layer sweeps train it)
                 checkpointing every `--every` steps (32: sweeps/mini_ladder.py's ckpt_every): the trainer's own
                 rows of its saves (its end record's ckpt_saves: blocked, time to landed, the slowdown of the steps
                 that overlapped the write) against that interval in its own median step time
  a large preset the largest preset whose checkpoint (weights and AdamW's two moments: 12 bytes a parameter) fits
                 twice (the state and its host copy) in half of this machine's available memory (`--sizes` to
                 choose), saved `--repeat` times each way, the two ways alternating; its optimizer state is filled
                 without a step (a step of s350 on 2 cores takes minutes and changes nothing of what is written).
                 The background save's first copy also allocates its host memory (said apart: `first`). Against the
                 paper's ladder interval: sweeps/ladder.py checkpoints every 1000 steps or 1800 s, whichever comes
                 first, at the plan's step time (Sweep.estimated_hours at its assumed MFU on H200s / steps). The disk
                 and memory are this machine's: bytes, MB/s and GB/s are printed to rescale them, and s1b is
                 extrapolated from them when it is not measured.

    python tools/bench_checkpoint.py                 # nano trained, and the largest preset that fits
    python tools/bench_checkpoint.py --sizes s124 --repeat 5 --json
    python tools/bench_checkpoint.py --sizes s350 --repeat 2 --device cuda --no-trained   # a GPU's copy (gpu_check)
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
    from zbpscale.run.config import SIZES, n_params

    room = available_bytes() / 2
    fits = [s for s, m in SIZES.items() if 2 * BYTES_PER_PARAM * n_params(m) * 1.3 < room]  # the state and its copy
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
    from zbpscale.run.config import TrainConfig, model_config
    from zbpscale.run.folder import RunFolder
    from zbpscale.run.records import read_records
    from zbpscale.train.loop import train

    cfg = TrainConfig(model=model_config("nano", max_seq_len=32), data_dir=str(folder / "data"), steps=steps,
                      global_batch=4, lr=3e-3, eval_every=0, eval_batches=1, ckpt_every=every, ckpt_every_s=0,
                      device="cpu")
    run = folder / "nano"
    train(cfg, run)
    records = read_records(run)
    end = next(r for r in records if r["kind"] == "end")
    step_s = statistics.median(r["step_time"] for r in records if r["kind"] == "train")
    rows = [row for row in end["ckpt_saves"] if "landed_s" in row]  # the periodic saves (the final one waits)
    blocked = statistics.median(row["blocked_s"] for row in rows)
    slowdowns = [row["slowdown"] for row in rows if "slowdown" in row]
    nbytes = RunFolder(run).list_checkpoints()[-1][1].stat().st_size
    return {"size": "nano", "way": "background (trainer)", "saves": len(rows), "blocked_s": blocked,
            "landed_s": statistics.median(row["landed_s"] for row in rows), "bytes": nbytes, "step_s": step_s,
            "overlap_steps": statistics.median(row["overlap_steps"] for row in rows),
            "slowdown": statistics.median(slowdowns) if slowdowns else None,
            "interval": f"{every} steps", "interval_s": every * step_s, "fraction": blocked / (every * step_s)}


def saved_directly(folder: Path, size: str, repeat: int, device: str = "cpu") -> list[dict]:
    """Blocked seconds of a synchronous save and of a background one for `size`'s model and a filled AdamW state on
    `device`, `repeat` of each, alternating: a row for each way (medians; the background's first save apart). On a
    GPU the background copy goes to pinned host memory."""
    import torch

    from zbpscale.run.config import model_config
    from zbpscale.run.folder import RunFolder
    from zbpscale.train import checkpoint
    from zbpscale.train.model import Transformer

    model = Transformer(model_config(size)).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    for group in optimizer.param_groups:
        for p in group["params"]:
            optimizer.state[p] = {"step": torch.tensor(1.0), "exp_avg": torch.zeros_like(p),
                                  "exp_avg_sq": torch.zeros_like(p)}

    def payload() -> dict:
        return {"model": model.state_dict(), "optimizer": optimizer.state_dict(), "numerics": {}}

    writer = checkpoint.Background(folder / f"{size}-background", keep=1)
    sync, blocked, landed = [], [], []
    for step in range(1, repeat + 1):
        t0 = time.perf_counter()
        checkpoint.save(folder / f"{size}-sync", step, payload(), keep=1)
        sync.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        writer.start(step, payload())
        blocked.append(time.perf_counter() - t0)
        done = writer.wait()
        assert done.error is None, done.error
        landed.append(done.landed_s)
    nbytes = RunFolder(folder / f"{size}-sync").list_checkpoints()[-1][1].stat().st_size
    later = blocked[1:] or blocked
    ladder = ladder_interval(size)
    interval = dict(step_s=ladder[0], interval="ladder: 1000 steps or 1800 s", interval_s=ladder[1]) if ladder else {}
    size = size if device == "cpu" else f"{size} ({device})"
    rows = [{"size": size, "way": "synchronous", "saves": repeat, "blocked_s": statistics.median(sync),
             "bytes": nbytes, "mb_per_s": nbytes / statistics.median(sync) / 1e6, **interval},
            {"size": size, "way": "background", "saves": repeat, "blocked_s": statistics.median(later),
             "first_blocked_s": blocked[0], "landed_s": statistics.median(landed), "bytes": nbytes,
             "copy_gb_per_s": nbytes / statistics.median(later) / 1e9, **interval}]
    for row in rows:
        if ladder:
            row["fraction"] = row["blocked_s"] / ladder[1]
    return rows


def extrapolated(measured: list[dict], size: str) -> list[dict]:
    """`size`'s saves, both ways, at the measured throughputs (bytes in proportion to parameters)."""
    from zbpscale.run.config import model_config, n_params

    sync, background = measured
    nbytes = sync["bytes"] * n_params(model_config(size)) / n_params(model_config(sync["size"]))
    step_s, interval_s = ladder_interval(size)
    common = {"size": f"{size} (extrapolated)", "saves": 0, "bytes": int(nbytes), "step_s": step_s,
              "interval": "ladder: 1000 steps or 1800 s", "interval_s": interval_s}
    return [{**common, "way": "synchronous", "blocked_s": nbytes / (sync["mb_per_s"] * 1e6),
             "mb_per_s": sync["mb_per_s"], "fraction": nbytes / (sync["mb_per_s"] * 1e6) / interval_s},
            {**common, "way": "background", "blocked_s": nbytes / (background["copy_gb_per_s"] * 1e9),
             "copy_gb_per_s": background["copy_gb_per_s"],
             "fraction": nbytes / (background["copy_gb_per_s"] * 1e9) / interval_s}]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", help="comma-separated presets to save directly (default: the largest that fits)")
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--every", type=int, default=32, help="the nano run's checkpoint interval, steps")
    p.add_argument("--steps", type=int, default=200, help="the nano run's steps")
    p.add_argument("--device", default="cpu", help="where the directly saved model lives (cuda: a GPU's state)")
    p.add_argument("--no-trained", action="store_true", help="leave out the nano run (its saves are CPU ones)")
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory(prefix="zbpscale-bench-ckpt-", dir="/tmp") as tmp:
        folder = Path(tmp)
        if not args.no_trained:
            subprocess.run([sys.executable, "-m", "zbpscale.cli", "prepare-data", "--source", "embedded", "--data",
                            str(folder / "data"), "--offline"], check=True, capture_output=True)
            rows.append(nano_trained(folder, args.steps, args.every))
        for size in (args.sizes.split(",") if args.sizes else [largest_fitting()]):
            rows += saved_directly(folder, size, args.repeat, args.device)
    if not any(r["size"].startswith("s1b") for r in rows) and len(rows) >= 2 and args.device == "cpu":
        rows += extrapolated(rows[-2:], "s1b")
    if args.json:
        print(json.dumps(rows, indent=1))
        return 0
    print(f"{'size':<18} {'way':<20} {'saves':>5} {'blocked':>9} {'landed':>8} {'GB':>6} {'rate':>10} {'step':>8} "
          f"{'interval':>9} {'stall':>7}  interval of")
    for r in rows:
        rate = f"{r['mb_per_s']:.0f} MB/s" if "mb_per_s" in r else \
            f"{r['copy_gb_per_s']:.1f} GB/s" if "copy_gb_per_s" in r else ""
        landed = f"{r['landed_s']:.3f}s" if "landed_s" in r else ""
        print(f"{r['size']:<18} {r['way']:<20} {r['saves']:>5} {r['blocked_s']:>8.3f}s {landed:>8} "
              f"{r['bytes'] / 1e9:>6.2f} {rate:>10} {r.get('step_s', 0):>7.3f}s {r.get('interval_s', 0):>8.0f}s "
              f"{100 * r.get('fraction', 0):>6.2f}%  {r.get('interval', '')}")
    for r in rows:
        extra = [f"first save {r['first_blocked_s']:.3f}s (allocates the host copy)" if "first_blocked_s" in r else "",
                 f"{r['overlap_steps']:.0f} steps overlapped each write, {r['slowdown']:.2f}x their usual time"
                 if r.get("slowdown") else ""]
        if any(extra):
            print(f"  {r['size']} {r['way']}: " + "; ".join(e for e in extra if e))
    return 0


if __name__ == "__main__":
    sys.exit(main())
