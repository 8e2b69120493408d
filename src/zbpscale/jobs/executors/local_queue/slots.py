"""GPU slots of the local queue: the node's inventory, which queued runs start now, and each rank's environment.

Scheduling is EASY backfill over GPUs, pure and testable without a GPU:
  - queued runs are taken in priority order (submission order; a requeued run keeps its place);
  - a run starts when enough GPUs are free (the lowest free ids, so packed runs sit side by side);
  - the first run that does not fit gets a *reservation*: the time at which, by the time limits of the runs
    holding GPUs, enough of them will be free ("shadow time"). Later runs may still start on free GPUs, but only
    if they end (by their own time limit) before the shadow time, or use GPUs the reserved run will not need.
So small runs fill the node, and a big run waits at most one time limit once it heads the queue: it is never
starved. CPU-only runs need no GPU; `max_parallel` bounds how many runs (of any kind) run at once.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Want:
    """A queued run as the scheduler sees it."""

    key: str
    """Queue entry id."""
    gpus: int
    """GPUs it needs (0 = a CPU run)."""
    time_s: float
    """Its attempt's time limit: the latest it can hold its GPUs once started."""


@dataclass(frozen=True)
class Held:
    """A running run as the scheduler sees it."""

    gpus: tuple[str, ...]
    """The GPU ids it holds."""
    ends_by: float
    """Start time plus its time limit (Unix seconds)."""


def gpu_driver_present(root: str = "/") -> bool:
    """Whether this node has a GPU driver's device files (NVIDIA's /dev/nvidiaN or /proc/driver/nvidia/gpus/*,
    AMD's /dev/kfd): without them no GPU can be found, by nvidia-smi or by torch."""
    top = Path(root)
    return (any(top.glob("dev/nvidia[0-9]*")) or any(top.glob("proc/driver/nvidia/gpus/*"))
            or (top / "dev" / "kfd").exists())


def gpu_inventory(environ: dict | None = None, *, ask_torch: bool = True) -> list[str]:
    """The node's GPU ids: CUDA_VISIBLE_DEVICES when set (ids or UUIDs; '' or -1 = none), else nvidia-smi's
    list, else none on a node without a GPU driver, else torch's count (the driver stays light: torch is imported
    only as the last resort, on a node with a GPU driver but no nvidia-smi, and not at all with ask_torch=False:
    no GPU then). A CPU node never imports torch here (~2 s a submit and a driver start)."""
    environ = os.environ if environ is None else environ
    visible = environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        ids = [v.strip() for v in visible.split(",") if v.strip()]
        return [] if not ids or ids[0].startswith("-") else ids
    if shutil.which("nvidia-smi"):
        try:
            out = subprocess.run(["nvidia-smi", "--query-gpu=index", "--format=csv,noheader"], capture_output=True,
                                 text=True, timeout=30)
            if out.returncode == 0:
                return [line.strip() for line in out.stdout.splitlines() if line.strip()]
        except (OSError, subprocess.TimeoutExpired):
            pass
    if not ask_torch or not gpu_driver_present():
        return []
    try:
        import torch
    except ImportError:
        return []
    return [str(i) for i in range(torch.cuda.device_count())] if torch.cuda.is_available() else []


def schedule(queued: list[Want], held: list[Held], inventory: list[str], *, now: float,
             max_parallel: int = 0) -> list[tuple[str, tuple[str, ...]]]:
    """Which queued runs start now and on which GPUs: [(key, gpu ids)], by EASY backfill (module docstring).

    queued must be in priority order; max_parallel = 0 means no bound beyond the GPUs.
    """
    busy = {g for h in held for g in h.gpus}
    free = [g for g in inventory if g not in busy]
    running = list(held)
    starts: list[tuple[str, tuple[str, ...]]] = []
    shadow, spare = None, 0  # the reservation: its time and the GPUs it leaves over
    for want in queued:
        if max_parallel and len(running) >= max_parallel:
            break
        if want.gpus > len(inventory):
            continue  # can never run here; submit refuses these, so only a changed inventory gets here
        fits = want.gpus <= len(free)
        if shadow is None:
            if fits:
                gpus, free = tuple(free[:want.gpus]), free[want.gpus:]
                starts.append((want.key, gpus))
                running.append(Held(gpus=gpus, ends_by=now + want.time_s))
                continue
            shadow, spare = _reservation(want.gpus, len(free), running)
            continue
        if fits and (now + want.time_s <= shadow or want.gpus <= spare):
            if now + want.time_s > shadow:
                spare -= want.gpus
            gpus, free = tuple(free[:want.gpus]), free[want.gpus:]
            starts.append((want.key, gpus))
            running.append(Held(gpus=gpus, ends_by=now + want.time_s))
    return starts


def _reservation(need: int, free: int, running: list[Held]) -> tuple[float, int]:
    """(shadow time, spare GPUs): when `need` GPUs will be free at the latest, and how many are left over then."""
    available = free
    for held in sorted(running, key=lambda h: h.ends_by):
        available += len(held.gpus)
        if available >= need:
            return held.ends_by, available - need
    return float("inf"), 0


def rank_env(*, rank: int, world_size: int, gpu: str | None, port: int, threads: int = 0) -> dict[str, str]:
    """The environment of one rank of a local run (on top of the driver's): torchrun's variables, and exactly
    its own GPU in CUDA_VISIBLE_DEVICES ('' for a CPU run, so it never touches a GPU it was not given)."""
    env = {
        "RANK": str(rank), "LOCAL_RANK": str(rank), "WORLD_SIZE": str(world_size),
        "LOCAL_WORLD_SIZE": str(world_size), "GROUP_RANK": "0",
        "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port),
        "CUDA_VISIBLE_DEVICES": gpu if gpu is not None else "",
    }
    if threads:
        env["OMP_NUM_THREADS"] = str(threads)
    return env
