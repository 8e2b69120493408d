"""What decides a run's last bits besides its config and data, and how a resumed attempt keeps it.

An attempt resumed from a checkpoint continues bit for bit when it computes with the same kernels as the
attempt that wrote the checkpoint. What picks the kernels, and so the rounding:
  - the torch build (its MKL, oneDNN and its own kernels);
  - the processor: the CPU model (ATen and MKL choose a kernel variant per instruction set; a different
    variant rounds differently) or, on CUDA, the GPU model;
  - on CPU, the number of intra-op threads: a matmul or a reduction may split its work differently over 2
    threads than over 1 (a full `sum` of 1.6M floats does on the CPU of this project's CI kind). Measured at the
    test shapes with tools/first_diff.py: a fresh process at a given thread count repeats every op bit for bit,
    whatever the process did before; only the thread count and the kernel variant change results.

Every checkpoint carries the `fingerprint()` of the attempt that wrote it. A resumed attempt on CPU takes the
checkpoint's thread count, whatever its environment says (`adopt`); the other differences cannot be undone
and are named, so that a run that is no longer bitwise says so in its log and in its `resume` record.
"""

from __future__ import annotations

import platform

import torch

_COMPARED = {"cpu": ("torch", "cpu", "cpu_capability"), "cuda": ("torch", "gpu")}


def cpu_model() -> str:
    """The processor's model name (Linux: /proc/cpuinfo), else what the platform module knows."""
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def fingerprint(device: torch.device) -> dict:
    """What this process computes with: torch build, CPU model and instruction set, intra-op threads, GPU."""
    fp = {"torch": str(torch.__version__), "cpu": cpu_model(),
          "cpu_capability": str(torch.backends.cpu.get_cpu_capability()), "threads": torch.get_num_threads()}
    if device.type == "cuda":
        fp["gpu"] = torch.cuda.get_device_name(device)
    return fp


def adopt(saved: dict | None, device: torch.device) -> tuple[list[str], list[str]]:
    """Make this attempt compute like the one that wrote the checkpoint (`saved`: its fingerprint), where
    that is in our hands. Returns (what was kept, what differs and breaks bit-for-bit resume), in words."""
    if not saved:
        return [], []
    now = fingerprint(device)
    kept = []
    if device.type == "cpu" and saved.get("threads") and saved["threads"] != now["threads"]:
        torch.set_num_threads(saved["threads"])
        kept.append(f"{saved['threads']} CPU threads as before (this attempt was given {now['threads']})")
    differs = [f"{key} {saved[key]} -> {now.get(key)}" for key in _COMPARED.get(device.type, ("torch",))
               if key in saved and saved[key] != now.get(key)]
    return kept, differs
