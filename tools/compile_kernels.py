"""Every Triton kernel of the ZBP estimator compiled for sm_90 (H100/H200) and sm_80 (A100) without a GPU, at
the launches the model makes: a table of registers, spills and shared memory, and a verdict.

    python tools/compile_kernels.py              # sm_90 and sm_80; exit 1: an error, a spill, > 200 registers
    python tools/compile_kernels.py --cover      # a third of it: every variant's factors, not their product
    python tools/compile_kernels.py --arch 90 --only closed.swiglu --json k.json
    python tools/compile_kernels.py --arch 90 --device cuda   # on a GPU: also Triton's launcher, compared

How. The launchers (`closed_triton.estimate`, `fused_triton.estimate`) are called with meta tensors at the shapes
of every size of sweeps/ladder.py and sweeps/mini_ladder.py, each kernel replaced by a recorder of its launch
arguments: the attention backward's score slices (`zbp.attention.SLICE_ENTRIES` rows of T entries, the first
and the last slice's row0) and the FFN core's (micro-batch, T, 2h) inputs; dtypes bf16 (autocast) and fp32;
n = 16, 64 and 24 (not a multiple of 16); central and forward; rademacher and, for the direct-query kernels,
gaussian probes. Each distinct launch is specialised as Triton's own launcher does (dtypes, integers and
pointers divisible by 16, constexprs, num_warps) and compiled with
`triton.compile(ASTSource(...), target=GPUTarget("cuda", arch, 32))`: TTIR to PTX to a cubin with the ptxas the
triton wheel ships, no driver needed. Registers and spills (stack and local memory in 4-byte words, as the driver
counts them) are read from the cubin (cuobjdump -res-usage), shared memory from the compile metadata.

With --cover, each kernel is compiled at every dtype x scheme x probe for each architecture, once, at one n that
rotates through NS, so every kernel meets every n on each architecture and the heaviest variant (the direct-query
SwiGLU kernel, gaussian, n = 64: ~190 registers) is among them: 56 of the 168 variants, what the default test
suite compiles (the full product: `pytest -m kernels`, and tools/gpu_check.sh on a GPU).

With --device cuda the same launches are also compiled the way a training run compiles them (`warmup` on CUDA
tensors, the driver loading the cubin) and the two tables must agree: that is what makes the offline table a
statement about the GPU.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))

import torch  # noqa: E402

from zbpscale.zbp.fused import error_line  # noqa: E402

MAX_REGISTERS = 200
ARCHS = (90, 80)
SWEEPS = ("sweeps/ladder.py", "sweeps/mini_ladder.py")
NS = (16, 64, 24)
KERNELS = ("closed.softmax", "closed.swiglu", "fused.softmax", "fused.swiglu")


@dataclass(frozen=True)
class Launch:
    """One recorded kernel launch: what the launcher passed, and which sizes made it."""

    kernel: str  # e.g. closed.softmax
    variant: str  # dtype, n, scheme, probe
    args: tuple
    kwargs: dict

    def jit(self):
        from zbpscale.zbp import closed_triton, fused_triton

        module, name = self.kernel.split(".")
        return getattr(closed_triton if module == "closed" else fused_triton, f"_{name}_kernel")


@dataclass
class Row:
    """One compiled variant on one architecture."""

    kernel: str
    variant: str
    arch: int
    sizes: str
    registers: int | None = None
    spills: int | None = None
    shared: int | None = None
    seconds: float = 0.0
    error: str | None = None
    gpu_registers: int | None = None  # --device cuda: what the driver reports for Triton's own compile
    gpu_spills: int | None = None

    def problem(self) -> str | None:
        if self.error:
            return f"does not compile: {self.error}"
        if self.spills:
            return f"spills {self.spills} registers"
        if self.registers is not None and self.registers > MAX_REGISTERS:
            return f"uses {self.registers} registers (limit {MAX_REGISTERS})"
        if self.gpu_registers is not None and (self.gpu_registers, self.gpu_spills) != (self.registers, self.spills):
            return (f"the GPU compile differs: {self.gpu_registers} registers / {self.gpu_spills} spills against "
                    f"{self.registers} / {self.spills} offline")
        return None


# ---------------------------------------------------------------------------------------------- recording
class _Recorder:
    """Stands in for a JITFunction: `kernel[grid](*args, **kwargs)` records the launch instead of running it."""

    def __init__(self, name: str, sink: list):
        self.name, self.sink = name, sink

    def __getitem__(self, grid):
        return lambda *args, **kwargs: self.sink.append((self.name, args, kwargs))


def shapes() -> list[tuple[str, int, int, int, int]]:
    """(size, micro-batch, heads, T, h) for every size of the project's GPU and mini ladders."""
    from zbpscale.jobs.sweep import load_sweep

    seen = {}
    for path in SWEEPS:
        sweep = load_sweep(REPO / path)
        for size in sweep.sizes:
            model = size.shape()
            batch = size.micro_batch or max(1, size.global_batch // size.resources.world_size)
            seen[size.name] = (size.name, batch, model.n_head, model.max_seq_len, model.hidden)
    return list(seen.values())


def record_launches(only: tuple[str, ...] = KERNELS) -> list[tuple[Launch, str]]:
    """(launch, size) for every kernel call the model's cores make at every size and variant."""
    from zbpscale.zbp import attention, closed_triton, fused_triton

    sink: list = []
    saved = {}
    for kernel in KERNELS:
        module, name = kernel.split(".")
        mod = closed_triton if module == "closed" else fused_triton
        saved[kernel] = (mod, f"_{name}_kernel", getattr(mod, f"_{name}_kernel"))
        setattr(mod, f"_{name}_kernel", _Recorder(kernel, sink))
    out = []
    try:
        for size, batch, heads, t, h in shapes():
            step = max(1, attention.SLICE_ENTRIES // (t * t))
            slices = range(0, batch * heads, step)
            for dtype in (torch.bfloat16, torch.float32):
                scores = torch.empty((step, t, t), dtype=dtype, device="meta")
                ffn_x = torch.empty((batch, t, 2 * h), dtype=dtype, device="meta")
                ffn_g = torch.empty((batch, t, h), dtype=dtype, device="meta")
                for n in NS:
                    for central in (True, False):
                        for probe in ("rademacher", "gaussian"):
                            variant = (f"{str(dtype).removeprefix('torch.').replace('bfloat16', 'bf16')} n{n} "
                                       f"{'central' if central else 'forward'} {probe}")
                            common = dict(n=n, central=central, eps=1e-3, seed=1)
                            calls = []
                            if probe == "rademacher":
                                calls += [(closed_triton.estimate, {}, "closed")]
                            calls += [(fused_triton.estimate, {"probe": probe}, "fused")]
                            for launcher, extra, module in calls:
                                for row0 in sorted({slices[0] * t, slices[-1] * t}):
                                    if f"{module}.softmax" in only:
                                        launcher("softmax", scores, scores, causal=True, row0=row0, **common, **extra)
                                if f"{module}.swiglu" in only:
                                    launcher("swiglu", ffn_x, ffn_g, causal=False, **common, **extra)
                            out += [(Launch(name, variant, args, kwargs), size) for name, args, kwargs in sink]
                            sink.clear()
    finally:
        for mod, attr, fn in saved.values():
            setattr(mod, attr, fn)
    return out


def covers(kernel: str, variant: str, arch: int) -> bool:
    """Whether --cover compiles this launch on this architecture: each dtype x scheme x probe of a kernel once, at
    the n that the combination's index and the architecture's pick in turn from NS."""
    dtype, n, scheme, probe = variant.split()
    probes = ("rademacher", "gaussian") if kernel.startswith("fused") else ("rademacher",)
    combos = [(d, s, p) for d in ("bf16", "float32") for s in ("central", "forward") for p in probes]
    turn = combos.index((dtype, scheme, probe)) + ARCHS.index(arch)
    return n == f"n{NS[turn % len(NS)]}"


# ---------------------------------------------------------------------------------------------- compiling
def _specialise(launch: Launch, arch: int):
    """(options, signature, constexprs, attrs) as Triton's launcher derives them for this target."""
    from triton.backends.compiler import GPUTarget
    from triton.compiler import make_backend
    from triton.runtime.jit import create_function_from_signature

    fn = launch.jit()
    backend = make_backend(GPUTarget("cuda", arch, 32))
    binder = create_function_from_signature(fn.signature, fn.params, backend)
    bound, specialization, options = binder(*launch.args, **launch.kwargs)
    return fn._pack_args(backend, launch.kwargs, bound, specialization, options)


def _key(launch: Launch, arch: int) -> str:
    options, signature, constexprs, attrs = _specialise(launch, arch)
    return repr((launch.kernel, sorted(signature.items()), sorted(constexprs.items()), sorted(attrs.items()),
                 options.num_warps, options.num_stages))


def _cuobjdump() -> str:
    from triton import knobs

    return knobs.nvidia.cuobjdump.path


def resource_usage(cubin: bytes) -> tuple[int, int]:
    """(registers, spilled registers) of the one function in a cubin: spills are the stack frame and local
    memory per thread in 4-byte words, as the driver's CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES counts them for Triton's
    n_spills (these kernels call no function, so any stack is spilled registers)."""
    with tempfile.NamedTemporaryFile(suffix=".cubin") as fh:
        fh.write(cubin)
        fh.flush()
        out = subprocess.run([_cuobjdump(), "-res-usage", fh.name], capture_output=True, text=True, check=True).stdout
    match = re.search(r"REG:(\d+) STACK:(\d+) .*?LOCAL:(\d+)", out)
    if not match:
        raise RuntimeError(f"cuobjdump -res-usage printed no resource line: {out.strip()[:200]}")
    return int(match.group(1)), (int(match.group(2)) + int(match.group(3))) // 4


def compile_offline(launch: Launch, arch: int, row: Row) -> Row:
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    t0 = time.perf_counter()
    try:
        options, signature, constexprs, attrs = _specialise(launch, arch)
        compiled = triton.compile(ASTSource(launch.jit(), signature, constexprs, attrs),
                                  target=GPUTarget("cuda", arch, 32), options=options.__dict__)
        row.registers, row.spills = resource_usage(compiled.asm["cubin"])
        row.shared = compiled.metadata.shared
    except Exception as err:  # noqa: BLE001 - the table reports whatever the compiler raised
        row.error = error_line(err)
    row.seconds = time.perf_counter() - t0
    return row


def compile_on_gpu(launch: Launch, row: Row) -> Row:
    """Triton's own compile of the launch on the visible GPU (warmup: compiled and loaded, not run)."""
    args = [torch.empty(max(1, min(a.numel(), 1 << 20)), dtype=a.dtype, device="cuda") if isinstance(a, torch.Tensor)
            else a for a in launch.args]
    try:
        kernel = launch.jit().warmup(*args, grid=(1,), **launch.kwargs)
        kernel._init_handles()
        row.gpu_registers, row.gpu_spills = kernel.n_regs, kernel.n_spills
    except Exception as err:  # noqa: BLE001
        row.error = row.error or f"on the GPU: {error_line(err)}"
    return row


def compile_all(launches: list[tuple[Launch, str]], archs: tuple[int, ...], *, gpu: bool = False,
                workers: int = 2, progress=None, cover: bool = False) -> list[Row]:
    """One row per distinct (kernel, specialisation, arch), with the sizes that launch it; with `cover`, only the
    launches `covers` picks."""
    distinct: dict[str, tuple[Launch, list[str]]] = {}
    for arch in archs:
        for launch, size in launches:
            if cover and not covers(launch.kernel, launch.variant, arch):
                continue
            key = f"{arch}:{_key(launch, arch)}"
            entry = distinct.setdefault(key, (launch, []))
            if size not in entry[1]:
                entry[1].append(size)
    jobs = []
    for key, (launch, sizes) in distinct.items():
        arch = int(key.split(":")[0])
        block = launch.kwargs.get("BLOCK")
        jobs.append((launch, arch, Row(kernel=launch.kernel, variant=f"{launch.variant} BLOCK={block}", arch=arch,
                                       sizes=",".join(sizes))))
    rows = []
    with ThreadPoolExecutor(max_workers=workers) as pool:
        for i, row in enumerate(pool.map(lambda j: compile_offline(*j), jobs), 1):
            rows.append(row)
            if progress:
                progress(i, len(jobs), row)
    if gpu:
        major, minor = torch.cuda.get_device_capability()
        for (launch, arch, _), row in zip(jobs, rows):
            if arch == major * 10 + minor:
                compile_on_gpu(launch, row)
    return sorted(rows, key=lambda r: (r.kernel, r.arch, r.variant))


# ---------------------------------------------------------------------------------------------- output
def table(rows: list[Row]) -> str:
    gpu = any(r.gpu_registers is not None for r in rows)
    head = ["kernel", "variant", "sm", "regs", "spills", "smem B"] + (["GPU regs/spills"] if gpu else []) + [
        "sizes", "verdict"]
    body = [[r.kernel, r.variant, str(r.arch), str(r.registers if r.registers is not None else "-"),
             str(r.spills if r.spills is not None else "-"), str(r.shared if r.shared is not None else "-")]
            + ([f"{r.gpu_registers}/{r.gpu_spills}" if r.gpu_registers is not None else "-"] if gpu else [])
            + [r.sizes, r.problem() or "ok"] for r in rows]
    width = [max(len(line[i]) for line in [head, *body]) for i in range(len(head) - 1)]
    fmt = lambda line: "  ".join(c.ljust(w) for c, w in zip(line, width)) + "  " + line[-1]  # noqa: E731
    return "\n".join([fmt(head), *(fmt(line) for line in body)])


def summary(rows: list[Row]) -> dict:
    import triton

    problems = [f"{r.kernel} [{r.variant}] sm_{r.arch}: {r.problem()}" for r in rows if r.problem()]
    regs = [r.registers for r in rows if r.registers is not None]
    return {"triton": triton.__version__, "torch": torch.__version__, "variants": len(rows),
            "archs": sorted({r.arch for r in rows}), "max_registers": max(regs, default=None),
            "spilling": sum(bool(r.spills) for r in rows), "problems": problems, "ok": not problems,
            "rows": [asdict(r) for r in rows]}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--arch", default=",".join(map(str, ARCHS)), help="compute capabilities x10, comma-separated")
    p.add_argument("--only", default=",".join(KERNELS), help=f"kernels, comma-separated ({', '.join(KERNELS)})")
    p.add_argument("--device", choices=("none", "cuda"), default="none",
                   help="cuda: also compile through Triton's launcher on the visible GPU and compare")
    p.add_argument("--json", help="write the summary and every row here")
    p.add_argument("--workers", type=int, default=min(4, os.cpu_count() or 1))
    p.add_argument("--cover", action="store_true",
                   help="each kernel's dtypes, schemes and probes once per architecture, n in turn (not the product)")
    args = p.parse_args(argv)
    os.environ.setdefault("TRITON_DEFAULT_FP_FUSION", "1")  # triton 3.9 warns about the default (enabled) otherwise
    if os.environ.get("TRITON_INTERPRET") == "1":
        print("error: TRITON_INTERPRET=1 is set: the kernels are interpreted, not compiled (unset it)", file=sys.stderr)
        return 2
    only = tuple(k.strip() for k in args.only.split(",") if k.strip())
    unknown = [k for k in only if k not in KERNELS]
    if unknown:
        print(f"error: unknown kernel {unknown[0]!r} (hint: one of {', '.join(KERNELS)})", file=sys.stderr)
        return 2
    archs = tuple(int(a) for a in args.arch.split(","))
    if args.cover and not set(archs) <= set(ARCHS):
        print(f"error: --cover takes its turns over sm_{', sm_'.join(map(str, ARCHS))} (hint: leave out --arch)",
              file=sys.stderr)
        return 2
    t0 = time.perf_counter()
    launches = record_launches(only)

    def progress(i, total, row):
        if i == 1 or i == total or i % 16 == 0:
            print(f"compiled {i}/{total} ({time.perf_counter() - t0:.0f} s)", file=sys.stderr, flush=True)

    rows = compile_all(launches, archs, gpu=args.device == "cuda", workers=args.workers, progress=progress,
                       cover=args.cover)
    result = summary(rows)
    result["seconds"] = round(time.perf_counter() - t0, 1)
    print(table(rows))
    print(f"{len(rows)} variants of {len(only)} kernels for sm_{', sm_'.join(map(str, archs))} in "
          f"{result['seconds']:.0f} s (triton {result['triton']}): max {result['max_registers']} registers, "
          f"{result['spilling']} spilling" + (f"; {len(result['problems'])} problem(s):" if result["problems"] else ""))
    for line in result["problems"]:
        print(f"  {line}")
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(result, indent=1) + "\n")
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
