"""Training-step benchmark: BP against ZBP arms side by side in one run.

Measures ms per training step (forward + backward + AdamW step) and the step's peak memory above the
resting state (parameters, gradients-free, optimizer state), for bp and ZBP n = 4, 16, 64 with central and
forward differences, each with the plain, the fused (direct queries) and the closed-form estimator
(`ZBPConfig.impl`; closed needs rademacher probes and is skipped for other --probe kinds). Arms are timed in
interleaved rounds (median per arm) so that machine noise hits them alike; ratios are to BP measured in the
same run. Fused and closed arms compile their kernels during the warm-up step (CPU; printed), not while timed.

  python tools/bench_step.py                      # CPU config of the issue: d=128 L=4 H=4 T=128 batch 8, 2 threads
  python tools/bench_step.py --impl fused,closed  # the fast arms only (plus bp)
  python tools/bench_step.py --json               # the same figures as JSON records
  python tools/bench_step.py --threads 1 --clock process   # CPU time: when the other core is busy
  python tools/bench_step.py --impl closed --probe-hash 1  # the probes of runs made before 2026-12-06
  python tools/bench_step.py --device cuda --d 512 --layers 8 --heads 8 --seq 1024 --batch 8   # GPU reference

CPU peak memory is read in a fresh subprocess per arm (VmHWM reset through /proc/self/clear_refs, with
glibc's mmap threshold fixed so freed tensors leave the resident set); GPU peak memory from
torch.cuda.max_memory_allocated.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

import torch

from zbpscale.run.config import ModelConfig
from zbpscale.train.model import Transformer
from zbpscale.zbp import ZBPConfig

ZBP_ARMS = [(f"zbp_n{n}" + ("_fwd" if s == "forward" else ""), n, s)
            for n in (4, 16, 64) for s in ("central", "forward")]
IMPLS = ("plain", "fused", "closed")
ARMS = [("bp", None, None, None)] + [(f"{arm}/{impl}", n, s, impl) for impl in IMPLS for arm, n, s in ZBP_ARMS]


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--d", type=int, default=128, help="model width")
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--seq", type=int, default=128, help="sequence length T")
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--threads", type=int, default=2, help="torch CPU threads")
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    p.add_argument("--bf16", action=argparse.BooleanOptionalAction, default=None,
                   help="bf16 autocast (default: on for cuda, off for cpu)")
    p.add_argument("--probe", default="rademacher")
    p.add_argument("--chunk", type=int, default=16, help="probes per batched query")
    p.add_argument("--probe-hash", type=int, default=2, choices=(1, 2),
                   help="the counter hash of the fused and closed paths (ZBPConfig.probe_hash; 1: runs made before "
                        "2026-12-06)")
    p.add_argument("--steps", type=int, default=2, help="timed steps per arm and round")
    p.add_argument("--rounds", type=int, default=3, help="interleaved rounds; the median round counts")
    p.add_argument("--arms", default=",".join(["bp"] + [a for a, _, _ in ZBP_ARMS]), help="comma-separated subset")
    p.add_argument("--impl", default=",".join(IMPLS), help="estimators to run each ZBP arm with: plain, fused, closed")
    p.add_argument("--clock", default="wall", choices=["wall", "process"],
                   help="wall time, or this process's CPU time (CPU, --threads 1: robust to a busy neighbour core)")
    p.add_argument("--json", action="store_true", help="print JSON records instead of a table")
    p.add_argument("--memory-of", default=None, help=argparse.SUPPRESS)  # internal: one arm's memory
    args = p.parse_args(argv)
    arm_names = ["bp"] + [a for a, _, _ in ZBP_ARMS]
    for value, allowed, flag in ((args.arms, arm_names, "--arms"), (args.impl, IMPLS, "--impl")):
        unknown = sorted(set(value.split(",")) - set(allowed))
        if unknown:
            p.error(f"{flag}: unknown {', '.join(unknown)}; allowed: {', '.join(allowed)}")
    return args


def build(args, n: int | None, scheme: str | None, impl: str | None):
    zbp = None if n is None else ZBPConfig(n=n, scheme=scheme, probe=args.probe, chunk=args.chunk, impl=impl,
                                           probe_hash=args.probe_hash)
    cfg = ModelConfig(n_layer=args.layers, n_head=args.heads, d_model=args.d, max_seq_len=args.seq, zbp=zbp)
    torch.manual_seed(0)
    model = Transformer(cfg).to(args.device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=args.device == "cuda")
    gen = torch.Generator().manual_seed(1)
    x, y = (torch.randint(0, cfg.vocab_size, (args.batch, args.seq), generator=gen).to(args.device)
            for _ in range(2))
    bf16 = args.bf16 if args.bf16 is not None else args.device == "cuda"
    step_no = [0]

    def step() -> None:
        model.set_zbp_clock(step=step_no[0])
        step_no[0] += 1
        opt.zero_grad(set_to_none=True)
        with torch.autocast(args.device, dtype=torch.bfloat16, enabled=bf16):
            _, loss = model(x, y)
        loss.backward()
        opt.step()

    return step


def sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def _rss_kb(field: str) -> int:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"{field} not in /proc/self/status")


def peak_mb_here(args, n, scheme, impl) -> float:
    step = build(args, n, scheme, impl)
    step()  # optimizer state exists from here on
    sync(args.device)
    if args.device == "cuda":
        base = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        step()
        sync(args.device)
        return (torch.cuda.max_memory_allocated() - base) / 2**20
    base = _rss_kb("VmRSS")
    with open("/proc/self/clear_refs", "w") as fh:
        fh.write("5")  # reset VmHWM to the current RSS
    step()
    return (_rss_kb("VmHWM") - base) / 1024


def peak_mb(args, name: str) -> float:
    if args.device == "cuda":
        _, n, scheme, impl = next(a for a in ARMS if a[0] == name)
        torch.cuda.empty_cache()
        return peak_mb_here(args, n, scheme, impl)
    env = dict(os.environ, MALLOC_MMAP_THRESHOLD_="65536", MALLOC_TRIM_THRESHOLD_="0")
    cmd = [sys.executable, __file__, *sys.argv[1:], "--memory-of", name]
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True).stdout
    return float(out.strip().splitlines()[-1])


def main(argv=None) -> None:
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    if args.memory_of:
        _, n, scheme, impl = next(a for a in ARMS if a[0] == args.memory_of)
        print(peak_mb_here(args, n, scheme, impl))
        return
    wanted, impls = args.arms.split(","), args.impl.split(",")
    chosen = [a for a in ARMS if a[0] == "bp" or (a[0].split("/")[0] in wanted and a[3] in impls
                                                   and (a[3] != "closed" or args.probe == "rademacher"))]
    steps = {name: build(args, n, scheme, impl) for name, n, scheme, impl in chosen}
    if not args.json:
        print(f"# d={args.d} L={args.layers} H={args.heads} T={args.seq} batch={args.batch} "
              f"device={args.device} threads={args.threads} probe={args.probe} chunk={args.chunk} clock={args.clock}; "
              f"{args.rounds} rounds x {args.steps} steps", flush=True)
    for name, step in steps.items():  # warm-up: allocator, optimizer state, kernels (fused: compiles them)
        t0 = time.perf_counter()
        step()
        if name.endswith(("/fused", "/closed")) and not args.json:
            print(f"# warm-up {name}: {time.perf_counter() - t0:.1f} s", flush=True)
    clock = time.process_time if args.clock == "process" else time.perf_counter
    times: dict[str, list[float]] = {name: [] for name in steps}
    for _ in range(args.rounds):
        for name, step in steps.items():
            sync(args.device)
            t0 = clock()
            for _ in range(args.steps):
                step()
            sync(args.device)
            times[name].append((clock() - t0) * 1000 / args.steps)
    ms = {name: statistics.median(t) for name, t in times.items()}
    records = []
    for name, n, scheme, impl in chosen:
        records.append({
            "arm": name, "n": n or 0, "scheme": scheme or "exact", "probe": args.probe if n else "-",
            "impl": impl or "-",
            "ms_per_step": round(ms[name], 2), "ratio_to_bp": round(ms[name] / ms["bp"], 2),
            "peak_mb": round(peak_mb(args, name), 1),
        })
    bp_mb = records[0]["peak_mb"]
    for r in records:
        r["peak_ratio_to_bp"] = round(r["peak_mb"] / bp_mb, 2) if bp_mb > 0 else None
    if args.json:
        print(json.dumps(records, indent=1))
        return
    print(f"{'arm':<20}{'ms/step':>10}{'x BP':>8}{'peak MB':>10}{'x BP':>8}")
    for r in records:
        print(f"{r['arm']:<20}{r['ms_per_step']:>10.1f}{r['ratio_to_bp']:>8.2f}"
              f"{r['peak_mb']:>10.1f}{r['peak_ratio_to_bp'] or float('nan'):>8.2f}")


if __name__ == "__main__":
    main()
