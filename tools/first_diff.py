"""Where do two training runs first differ? Every op's output, compared bit for bit, step by step.

Runs the real trainer in child processes under a dispatch mode that hashes the output of every aten op (the
forward, autograd's backward, gradient clipping, the optimizer) and, at the start of each recorded step, every
parameter and optimizer-state tensor. Two comparisons:

  # a straight run against one stopped by a real SIGUSR2 after step K and resumed in a fresh process
  python tools/first_diff.py --size nano --steps 12 --resume-at 6 --threads 2
  # the same run at two thread counts (or two environments: --env-b MKL_CBWR=COMPATIBLE)
  python tools/first_diff.py --size nano --steps 6 --threads 1 --threads-b 2

It prints the first op whose output differs (step, position, op, shape) or how many ops agreed; exit 0 when
the runs agree bit for bit, 1 when they differ. The data is the embedded corpus, prepared in a temp folder.
Code that torch.compile runs (the fused ZBP estimator from n=16 on CPU) does not dispatch op by op, and a
compile traces under the recorder: there, --states-only compares the state tensors at each step's start.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path


def _digest(t) -> str:
    import torch

    t = t.detach()
    if t.device.type != "cpu":
        t = t.cpu()
    raw = t.contiguous().reshape(-1).view(torch.uint8) if t.numel() else t.new_empty(0, dtype=torch.uint8)
    return hashlib.sha1(raw.numpy().tobytes()).hexdigest()[:16]


def child(args) -> None:
    """Train under the recorder; write one JSON line per recorded op to args.trace."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_flatten

    from zbpscale.run.config import TrainConfig
    from zbpscale.train.loop import train
    from zbpscale.train.model import Transformer

    cfg = TrainConfig.from_dict(json.loads(Path(args.config).read_text()))
    out = open(args.trace, "w")
    clock = {"step": -1, "seen": set()}

    class Recorder(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, a=(), kw=None):
            result = func(*a, **(kw or {}))
            uninitialised = "empty" in func.__name__  # empty, empty_like, new_empty, ...: garbage by contract
            if clock["step"] >= args.record_from and not args.states_only and not uninitialised:
                for i, t in enumerate(x for x in tree_flatten(result)[0] if isinstance(x, torch.Tensor)):
                    out.write(json.dumps({"step": clock["step"], "op": str(func), "out": i,
                                          "shape": list(t.shape), "dtype": str(t.dtype).removeprefix("torch."),
                                          "hash": _digest(t)}) + "\n")
            return result

    original = Transformer.set_zbp_clock

    def set_clock(model, *, step, micro=0, rank=None, seq0=0):
        if step not in clock["seen"]:  # the first micro-batch of a step: record the state it starts from
            clock["seen"].add(step)
            clock["step"] = step
            if step >= args.record_from:
                with torch.utils._python_dispatch._disable_current_modes():
                    _record_state(out, step, model, _optimizer(model))
        if args.stop_after is not None and step == args.stop_after:
            os.kill(os.getpid(), signal.SIGUSR2)  # a real stop request: checkpoint after this step, exit
        return original(model, step=step, micro=micro, rank=rank, seq0=seq0)

    Transformer.set_zbp_clock = set_clock
    with Recorder():
        train(cfg, args.run_dir)
    out.close()


_OPTIMIZERS = []  # the trainer's optimizer, captured at construction (it is local to train())


def _optimizer(model):
    return _OPTIMIZERS[-1] if _OPTIMIZERS else None  # the trainer builds one


def _record_state(out, step: int, model, optimizer) -> None:
    for name, t in model.state_dict().items():
        out.write(json.dumps({"step": step, "op": f"state:model.{name}", "out": 0, "shape": list(t.shape),
                              "dtype": str(t.dtype), "hash": _digest(t)}) + "\n")
    if optimizer is None:
        return
    names = {id(p): n for n, p in model.named_parameters()}
    for p, st in optimizer.state.items():
        for key, t in sorted(st.items()):
            if hasattr(t, "shape"):
                out.write(json.dumps({"step": step, "op": f"state:adam.{names.get(id(p), '?')}.{key}", "out": 0,
                                      "shape": list(t.shape), "dtype": str(t.dtype), "hash": _digest(t)}) + "\n")


def _capture_optimizers() -> None:
    import torch

    init = torch.optim.AdamW.__init__

    def capturing(self, *a, **kw):
        init(self, *a, **kw)
        _OPTIMIZERS.append(self)

    torch.optim.AdamW.__init__ = capturing


def _launch(config: Path, run_dir: Path, trace: Path, *, threads: int | None, env_extra: list[str],
            record_from: int, states_only: bool, stop_after: int | None = None) -> str:
    env = dict(os.environ, HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1")
    env.pop("OMP_NUM_THREADS", None)
    if threads:
        env["OMP_NUM_THREADS"] = str(threads)
    env.update(item.split("=", 1) for item in env_extra)
    cmd = [sys.executable, __file__, "--child", "--config", str(config), "--run-dir", str(run_dir),
           "--trace", str(trace), "--record-from", str(record_from)] + (["--states-only"] if states_only else [])
    if stop_after is not None:
        cmd += ["--stop-after", str(stop_after)]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if done.returncode not in (0, 3):  # 3: EXIT_REQUEUE, the stop we asked for
        sys.exit(f"child failed ({done.returncode}):\n{done.stdout}{done.stderr}")
    return done.stdout


def compare(a: list[dict], b: list[dict], label_a: str, label_b: str) -> int:
    """Align the two op sequences (a resumed process builds first-use caches, e.g. the causal mask, at its first
    step, which the straight one built long before), then compare the aligned outputs in order."""
    import difflib

    key = lambda r: f"{r['step']} {r['op']} {r['shape']} {r['out']}"  # noqa: E731
    matcher = difflib.SequenceMatcher(None, [key(r) for r in a], [key(r) for r in b], autojunk=False)
    pairs = [(i + k, j + k) for i, j, n in matcher.get_matching_blocks() for k in range(n)]
    for count, (i, j) in enumerate(pairs):
        x, y = a[i], b[j]
        if x["hash"] != y["hash"]:
            nth = sum(r["step"] == x["step"] for r in a[:i])
            print(f"first difference: step {x['step']}, op #{nth} of that step: {x['op']} output {x['out']} "
                  f"{x['shape']} {x['dtype']} ({label_a} vs {label_b}); {count} aligned ops agreed before it")
            return 1
    alone = len(a) + len(b) - 2 * len(pairs)
    steps = sorted({r["step"] for r in a})
    print(f"bitwise equal: {len(pairs)} op outputs and state tensors over steps {steps[0]}..{steps[-1]} "
          f"({label_a} vs {label_b})" + (f"; {alone} ops ran in one run only (first-use caches)" if alone else ""))
    return 0


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--size", default="nano", help="model size preset")
    p.add_argument("--arm", default="bp")
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--batch", type=int, default=8, help="global batch (sequences)")
    p.add_argument("--micro-batch", type=int, default=0)
    p.add_argument("--resume-at", type=int, help="compare a straight run with one stopped after this many steps")
    p.add_argument("--threads", type=int, help="OMP_NUM_THREADS of run A (default: the machine's default)")
    p.add_argument("--threads-b", type=int, help="OMP_NUM_THREADS of run B (default: as A)")
    p.add_argument("--env-b", action="append", default=[], metavar="NAME=VALUE", help="extra environment of run B")
    p.add_argument("--states-only", action="store_true", help="compare only parameters and optimizer state at the "
                   "start of each step (for compiled paths)")
    p.add_argument("--keep", help="keep the runs and traces in this folder")
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--config", help=argparse.SUPPRESS)
    p.add_argument("--run-dir", help=argparse.SUPPRESS)
    p.add_argument("--trace", help=argparse.SUPPRESS)
    p.add_argument("--record-from", type=int, default=0, help=argparse.SUPPRESS)
    p.add_argument("--stop-after", type=int, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        _capture_optimizers()
        child(args)
        return 0

    from zbpscale.data.prepare import PrepConfig, prepare
    from zbpscale.run.config import TrainConfig, model_config
    from zbpscale.zbp import arm_zbp_config

    root = Path(args.keep or tempfile.mkdtemp(prefix="first-diff-"))
    root.mkdir(parents=True, exist_ok=True)
    data = root / "data"
    if not (data / "manifest.json").exists():
        prepare(PrepConfig(source="embedded", out=data, offline=True), log=lambda line: None)
    cfg = TrainConfig(model=model_config(args.size, zbp=arm_zbp_config(args.arm)), data_dir=str(data),
                      steps=args.steps, global_batch=args.batch, micro_batch=args.micro_batch, lr=3e-3,
                      warmup_steps=2, eval_every=0, eval_batches=1, ckpt_every=0, ckpt_every_s=0, device="cpu")
    config = root / "config.json"
    config.write_text(json.dumps(cfg.to_dict()))
    threads_b = args.threads_b or args.threads
    name = lambda t: f"{t} thread(s)" if t else "default threads"  # noqa: E731
    if args.resume_at is not None:
        k = args.resume_at
        _launch(config, root / "straight", root / "a.jsonl", threads=args.threads, env_extra=[], record_from=k,
                states_only=args.states_only)
        _launch(config, root / "resumed", root / "first.jsonl", threads=threads_b, env_extra=args.env_b,
                record_from=10**9, states_only=True, stop_after=k - 1)
        _launch(config, root / "resumed", root / "b.jsonl", threads=threads_b, env_extra=args.env_b, record_from=k,
                states_only=args.states_only)
        labels = (f"straight, {name(args.threads)}", f"resumed at step {k}, {name(threads_b)}")
    else:
        for run, threads, extra in (("a", args.threads, []), ("b", threads_b, args.env_b)):
            _launch(config, root / run, root / f"{run}.jsonl", threads=threads, env_extra=extra, record_from=0,
                    states_only=args.states_only)
        labels = (name(args.threads), name(threads_b) + (" " + " ".join(args.env_b) if args.env_b else ""))
    read = lambda f: [json.loads(line) for line in (root / f).read_text().splitlines()]  # noqa: E731
    rc = compare(read("a.jsonl"), read("b.jsonl"), *labels)
    if not args.keep:
        import shutil

        shutil.rmtree(root, ignore_errors=True)
    return rc


if __name__ == "__main__":
    sys.exit(main())
