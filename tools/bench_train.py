"""Trainer overhead benchmark: `train()` against a minimal plain-PyTorch loop, same model, same batches.

Both run the same BP model on the same prepared data (the trainer's own loader), one after the other in
alternating rounds; per-step time is wall clock between consecutive steps (the trainer's includes its
logging, heartbeat, grad clipping and the loss collective). Goal: trainer tokens/s >= 0.95 of the plain loop.
With --trackers, a third arm in the same rounds: the trainer reporting to those experiment trackers (W&B offline
unless the environment says otherwise); goal: its ratio to the plain loop within 2% of the trainer's without.

  zbpscale prepare-data --source embedded --data data/embedded
  python tools/bench_train.py --data data/embedded            # tiny model, CPU, 2 threads
  python tools/bench_train.py --data data/embedded --trackers tensorboard,wandb
  python tools/bench_train.py --data ... --size s60 --batch 16 --device cuda
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

import torch

from zbpscale.data.loader import TokenLoader
from zbpscale.run.config import TrainConfig, model_config
from zbpscale.run.records import read_records
from zbpscale.train.loop import build_optimizer, lr_at, train
from zbpscale.train.model import Transformer


def plain_loop(cfg: TrainConfig, device: str, bf16: bool) -> list[float]:
    """Seconds per step of the simplest correct loop: batch, forward, backward, AdamW step."""
    torch.manual_seed(cfg.seed)
    model = Transformer(cfg.model).to(device)
    opt = build_optimizer(model, cfg)
    loader = TokenLoader(cfg.data_dir, seq_len=cfg.seq_len, global_batch=cfg.global_batch, seed=cfg.seed)
    stamps = []
    for step in range(cfg.steps):
        for group in opt.param_groups:
            group["lr"] = lr_at(step, cfg)
        x, y = (t.to(device) for t in loader.batch(step))
        with torch.autocast(device, dtype=torch.bfloat16, enabled=bf16):
            _, loss = model(x, y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        loss.item()  # the trainer reads the loss every step too
        stamps.append(time.perf_counter())
    return [b - a for a, b in zip(stamps, stamps[1:])]


def trainer_steps(cfg: TrainConfig, root: Path) -> list[float]:
    run = Path(tempfile.mkdtemp(dir=root))
    train(cfg, run)
    times = [r["time"] for r in read_records(run) if r["kind"] == "train"]
    return [b - a for a, b in zip(times, times[1:])]


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", required=True, help="prepared data folder")
    p.add_argument("--size", default="tiny")
    p.add_argument("--batch", type=int, default=8, help="global batch (sequences)")
    p.add_argument("--steps", type=int, default=20, help="steps per round")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    p.add_argument("--trackers", default="", help="also time the trainer with these trackers, e.g. tensorboard,wandb")
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    os.environ.setdefault("WANDB_MODE", "offline")  # a benchmark never waits on a network
    torch.set_num_threads(args.threads)
    bf16 = args.device == "cuda"
    cfg = TrainConfig(model=model_config(args.size), data_dir=args.data, steps=args.steps,
                      global_batch=args.batch, eval_every=0, eval_batches=1, ckpt_every=0, ckpt_every_s=0,
                      device=args.device, bf16=bf16)
    tracked = dataclasses.replace(cfg, trackers=tuple(t for t in args.trackers.split(",") if t))
    plain, trainer, with_trackers = [], [], []
    with tempfile.TemporaryDirectory() as root:
        for _ in range(args.rounds):
            plain += plain_loop(cfg, args.device, bf16)[2:]  # drop warm-up steps
            trainer += trainer_steps(cfg, Path(root))[2:]
            if tracked.trackers:
                with_trackers += trainer_steps(tracked, Path(root))[2:]
    tokens = args.batch * cfg.seq_len
    plain_tps, trainer_tps = tokens / statistics.median(plain), tokens / statistics.median(trainer)
    record = {"size": args.size, "device": args.device, "batch": args.batch, "plain_tokens_per_s": round(plain_tps),
              "trainer_tokens_per_s": round(trainer_tps), "ratio": round(trainer_tps / plain_tps, 3)}
    line = (f"plain loop {plain_tps:,.0f} tok/s, trainer {trainer_tps:,.0f} tok/s, ratio {trainer_tps / plain_tps:.3f}")
    if with_trackers:
        tracked_tps = tokens / statistics.median(with_trackers)
        record.update(trackers=args.trackers, trackers_tokens_per_s=round(tracked_tps),
                      trackers_ratio=round(tracked_tps / plain_tps, 3))
        line += f"; with {args.trackers} {tracked_tps:,.0f} tok/s, ratio {tracked_tps / plain_tps:.3f}"
    if args.json:
        print(json.dumps(record))
    else:
        print(f"{line} ({args.size}, batch {args.batch}, {args.device})")


if __name__ == "__main__":
    main()
