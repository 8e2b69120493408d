"""Distributed set-up from the environment (torchrun, submitit, or a plain single process).

Reads RANK / WORLD_SIZE / LOCAL_RANK / MASTER_ADDR / MASTER_PORT as torchrun and
submitit's `TorchDistributedEnvironment().export()` set them; NCCL on GPU, gloo on CPU. Without
WORLD_SIZE (or with 1) it is a single process and no process group is created.

ZBPSCALE_DIST_BACKEND=gloo runs CUDA ranks over gloo instead of NCCL. NCCL refuses two ranks on one GPU;
gloo does not, so `tools/gpu_check.sh` uses it to run the multi-rank GPU paths (DDP gradient sync of CUDA
tensors, the stop vote, the checkpoint barrier, per-rank device placement) on a single GPU. It is slower
than NCCL and proves nothing about NCCL itself.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch
import torch.distributed as dist

from zbpscale.errors import ConfigError


@dataclass(frozen=True)
class DistEnv:
    """Where this process sits in the job."""

    rank: int
    world_size: int
    local_rank: int
    device: torch.device

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.world_size > 1


def _env_int(name: str, default: int) -> int:
    value = os.environ.get(name, "")
    if value == "":
        return default
    try:
        return int(value)
    except ValueError:
        raise ConfigError(f"environment variable {name}={value!r} is not an integer") from None


BACKEND_ENV = "ZBPSCALE_DIST_BACKEND"
BACKENDS = ("nccl", "gloo")


def backend_for(device: torch.device) -> str:
    """The process-group backend for ranks on `device`: nccl on CUDA, gloo on CPU, or $ZBPSCALE_DIST_BACKEND."""
    chosen = os.environ.get(BACKEND_ENV, "")
    if chosen == "":
        return "nccl" if device.type == "cuda" else "gloo"
    if chosen not in BACKENDS:
        raise ConfigError(f"{BACKEND_ENV}={chosen!r} is not one of {', '.join(BACKENDS)}")
    if chosen == "nccl" and device.type != "cuda":
        raise ConfigError(f"{BACKEND_ENV}=nccl needs CUDA ranks, but this rank runs on {device.type}",
                          hint=f"unset {BACKEND_ENV} (CPU ranks use gloo)")
    return chosen


def init(device: str = "auto") -> DistEnv:
    """Join the process group described by the environment and pick this rank's device.

    device: auto (this rank's GPU when CUDA is available, else cpu), cpu, or cuda.
    """
    rank, world = _env_int("RANK", 0), _env_int("WORLD_SIZE", 1)
    local_rank = _env_int("LOCAL_RANK", 0)
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda":
        if not torch.cuda.is_available():
            raise ConfigError("device 'cuda' was asked for but no CUDA device is visible",
                              hint="check CUDA_VISIBLE_DEVICES, or train on the CPU (a run by hand: --set device=cpu)")
        dev = torch.device("cuda", local_rank % torch.cuda.device_count())
        torch.cuda.set_device(dev)
    elif device == "cpu":
        dev = torch.device("cpu")
    else:
        raise ConfigError(f"device must be auto, cpu or cuda; got {device!r}")
    if world > 1 and not dist.is_initialized():
        for name in ("MASTER_ADDR", "MASTER_PORT"):
            if not os.environ.get(name):
                raise ConfigError(f"WORLD_SIZE={world} but {name} is not set",
                                  hint="launch with torchrun, or through `python -m zbpscale.submit`")
        backend = backend_for(dev)
        kwargs = {"device_id": dev} if backend == "nccl" else {}
        dist.init_process_group(backend, rank=rank, world_size=world, **kwargs)
    return DistEnv(rank=rank, world_size=world, local_rank=local_rank, device=dev)


def all_reduce_sum(values: list[float], env: DistEnv) -> list[float]:
    """Sum a few floats over ranks in one collective (float64); identity on a single process."""
    if not env.distributed:
        return list(values)
    t = torch.tensor(values, dtype=torch.float64, device=env.device)
    dist.all_reduce(t)
    return t.tolist()


def broadcast_object(value, env: DistEnv):
    """Rank 0's `value` (a small picklable object) on every rank; itself on a single process."""
    if not env.distributed:
        return value
    box = [value]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def barrier(env: DistEnv) -> None:
    if env.distributed:
        dist.barrier()


def shutdown(env: DistEnv) -> None:
    if env.distributed and dist.is_initialized():
        dist.destroy_process_group()
