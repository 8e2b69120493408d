"""The fused estimator: the zeroth-order VJP of `estimate_vjp`, computed without materialising probes.

Definition: for the model's two boxes (softmax over a score row's live entries; SwiGLU), per unit (a row,
or a token's [a; b]) and with counter-hash probes u_i (`zbpscale.zbp.counter`, rademacher or gaussian),

    c_i = < g, f(x + eps u_i) - f(x - eps u_i) > / (2 eps)      central: 2n queries
    c_i = < g, f(x + eps u_i) - f(x) > / eps                     forward: n + 1 queries (f(x) queried here)
    est = (1/n) sum_i c_i u_i

the same estimator as the plain path. What differs is the data flow: each query is reduced to its scalar
<g, f(.)> where it is computed (the box output is never written), probes are generated from the hash where
they are used and generated again for sum_i c_i u_i, so nothing of shape (n, ..., d) exists: a unit is read
once per pass. For the softmax row the query is <g, e> / sum(e) with e = exp(x + eps u - m), m the unit's
max over its live entries (softmax is shift invariant), computed honestly at every probe. Masked entries of
a causal score row are never queried: CPU folds rows t and T-1-t into one row of T + 1 entries, the Triton
kernels walk a row only up to its t + 1 live entries.

Back ends (`ZBPConfig.impl`: 'fused' insists, 'auto' uses them where they apply and, on CPU, from
CPU_MIN_N probes; else the plain path):
  cuda  Triton kernels (`fused_triton`), one program per unit, fp32 in registers.
  cpu   torch.compile (Inductor) graphs (`fused_cpu`), compiled once per process with dynamic shapes.

Caveats:
  - Probes come from the counter hash, not from `ProbeStream`: for one seed the fused and the plain
    estimates differ, with the same law (unbiased; NSR (d-1)/n rademacher, (d+1)/n gaussian). Tests check
    the laws for both, and the fused kernels against the plain formula on the same materialised probes.
  - Deterministic: the same seed gives bitwise the same estimate (chunk is ignored: there are no chunks);
    entry (unit, column) of probe i is a function of (seed, i, unit, column) alone, whatever n, the tiling
    or the back end, so CPU and GPU draw the same probes.
  - Queries run in fp32 (fp64 on CPU for fp64 inputs), as in the plain path; forward differences are biased
    at O(eps), as there.
  - Only rademacher and gaussian probes, and the softmax box only with the causal mask or none.
  - CPU: the first call compiles (~10 s per graph on 2 cores, cached on disk); a compiler failure makes
    'auto' warn once and run the plain path for the rest of the process.
"""

from __future__ import annotations

import functools

import torch

from zbpscale.errors import ConfigError
from zbpscale.zbp import fused_cpu
from zbpscale.zbp.boxes import causal_mask, masked_softmax, swiglu
from zbpscale.zbp.config import FUSED_PROBES
from zbpscale.zbp.estimator import measurement_dtype
from zbpscale.zbp.fused_cpu import CompileFailed

__all__ = ["CPU_MIN_N", "CompileFailed", "FUSED_PROBES", "available", "box_kind", "fused_vjp"]

# 'auto' on CPU takes the compiled graphs from this many probes: below it they are no faster than the plain
# path (tools/bench_step.py, tiny model, 2 threads: n=4 1.21x BP fused vs 1.19x plain; n=16 1.40x vs 3.18x)
# and cost a compilation per process (8-30 s). On CUDA 'auto' always takes the Triton kernels.
CPU_MIN_N = 16


def box_kind(f, x: torch.Tensor, mask: torch.Tensor | None) -> str | None:
    """'softmax' or 'swiglu' when the fused kernels implement the box f on x with this mask, else None."""
    if f is swiglu:
        return "swiglu" if mask is None and x.shape[-1] % 2 == 0 else None
    if isinstance(f, functools.partial) and f.func is masked_softmax and not f.args and set(f.keywords) <= {"mask"}:
        box_mask = f.keywords.get("mask")
        if box_mask is None and mask is None:
            return "softmax"
        if box_mask is not None and mask is not None and _is_causal(box_mask, x) and (
                mask is box_mask or torch.equal(mask, box_mask)):
            return "softmax"
    return None


def _is_causal(mask: torch.Tensor, x: torch.Tensor) -> bool:
    t = x.shape[-1]
    if x.dim() < 2 or x.shape[-2] != t or mask.shape != (t, t):
        return False
    return mask is causal_mask(t, mask.device) or torch.equal(mask.cpu(), causal_mask(t))


def available(x: torch.Tensor) -> bool:
    """Whether a fused back end can run on x's device and dtype in this process (CUDA: triton installed;
    CPU: torch.compile has not failed)."""
    if x.is_cuda:
        from zbpscale.zbp import fused_triton

        return fused_triton.HAVE_TRITON and x.dtype in (torch.float32, torch.bfloat16, torch.float16)
    return x.device.type == "cpu" and x.is_floating_point() and not fused_cpu.broken


def fused_vjp(kind: str, x: torch.Tensor, g: torch.Tensor, *, n: int, probe: str, scheme: str, eps: float,
              seed: int, mask: torch.Tensor | None) -> torch.Tensor:
    """The fused estimate of J^T g for box `kind` ('softmax' or 'swiglu'), in the measurement dtype.

    x: (..., T, T) scores with the causal `mask`, (..., d) rows without, or (..., 2h) SwiGLU inputs;
    g: upstream gradient of the box output. Any float dtype; queries run in fp32 (fp64 for fp64 on CPU).
    """
    if probe not in FUSED_PROBES:
        raise ConfigError(f"the fused estimator draws {', '.join(FUSED_PROBES)} probes, not {probe!r}",
                          hint="use impl='plain' for sphere and orthogonal probes")
    central = scheme == "central"
    if x.is_cuda:
        from zbpscale.zbp import fused_triton

        return fused_triton.estimate(kind, x, g, n=n, probe=probe, central=central, eps=eps, seed=seed,
                                     causal=mask is not None)
    dtype = measurement_dtype(x.dtype)
    x, g = x.to(dtype), g.to(dtype)
    if kind == "swiglu":
        return fused_cpu.swiglu_vjp(x, g, n=n, probe=probe, central=central, eps=eps, seed=seed)
    return fused_cpu.softmax(x, g, n=n, probe=probe, central=central, eps=eps, seed=seed, causal=mask is not None)
