"""The zeroth-order estimate of a black box's vector-Jacobian product, from forward queries only.

Definition: for a box f applied independently to each unit (the last dimension of x), an upstream
gradient g and n random probes u_1..u_n per unit with E[u u^T] = I,

    central (2n queries):      est = (1/n) sum_i  < g, f(x + eps u_i) - f(x - eps u_i) > / (2 eps)  u_i
    forward (n queries + f(x)): est = (1/n) sum_i  < g, f(x + eps u_i) - f(x) > / eps               u_i

Each bracket is a finite-difference directional derivative g^T J u_i, so est -> J^T g as eps -> 0 and
E[est] = J^T g exactly in that limit. Its noise-to-signal ratio E|est - J^T g|^2 / |J^T g|^2 grows as
c * d / n (see `probes.theory_nsr`: c = 1 for rademacher, gaussian, sphere).

Caveats:
  - The variance grows with the unit dimension d: the score core's long rows are the hard case.
  - The estimate is stochastic, so `torch.autograd.gradcheck` does not apply; compare NSR with theory.
  - Forward differences carry a per-call error of O(eps) (central: O(eps^2)); it is the term
    (eps/2) (u^T H u) u, odd in u, so for symmetric probes its mean is zero and the bias of the expectation
    is O(eps^2) for both schemes. Forward differences save half the queries at the price of more noise.
  - Measurements run in fp32 (fp64 stays fp64) with autocast off: in bf16, x + eps u rounds back to x
    for eps << |x| * 2^-8 and the difference is noise.
  - Reproducibility rests on the seed (and `seq0`) alone: ranks must derive their seeds from the same base
    seed; with `seq0` a sequence's probes depend on its index in the global batch, not on the call's shape.
  - impl='fused' and 'closed' (or 'auto' where they apply) compute the same estimator without
    materialising probes (`zbp.fused`, `zbp.closed_form`), with counter-hash probes: for one seed they draw
    other probes than this plain path, with the same law. The plain path is the reference.

Boundary: `estimate(box, x, g, cfg, seed=...)` takes the whole `ZBPConfig` (validated once, where it was
built) and a box that says what it is (`boxes`); `estimate_vjp` is its keyword form for one-off calls.
"""

from __future__ import annotations

from typing import Callable

import torch

from zbpscale.zbp import fused
from zbpscale.zbp.boxes import measurement_dtype
from zbpscale.zbp.config import ZBPConfig
from zbpscale.zbp.probes import ProbeStream

__all__ = ["Box", "estimate", "estimate_vjp", "measurement_dtype", "nsr"]

Box = Callable[[torch.Tensor], torch.Tensor]


def estimate(f: Box, x: torch.Tensor, g: torch.Tensor, cfg: ZBPConfig, *, seed: int,
             mask: torch.Tensor | None = None, y: torch.Tensor | None = None, seq0: int | None = None
             ) -> torch.Tensor:
    """Estimate J^T g of the box `f` at `x` from forward queries, one estimate per unit.

    f:     the black box; applied to a tensor of shape (k, *x.shape) it must act on each unit (last
           dimension) independently and return (k, *g.shape). The model's boxes (`boxes.causal_softmax`,
           `row_softmax`, `swiglu`) say what they are, which opens the fast paths (`cfg.impl`).
    x:     (..., d) input; g: (..., d_out) upstream gradient of f(x).
    cfg:   the estimator's settings, whole (n, probe, scheme, eps, chunk, impl; `cores` and `seed` are the
           caller's business: `seed` here is the call's own).
    mask:  optional boolean tensor broadcastable to x: live entries; by default the box's own (`f.mask(x)`).
           Masked entries are never perturbed and get exactly zero gradient.
    y:     f(x) in the measurement dtype, if already known (saves one query for `forward`).
    seq0:  x's first dimension is sequences, the first of them sequence seq0 of a larger batch: each sequence
           draws its probes by its index there, so estimating the batch in pieces gives the whole's estimate
           (`ZBPConfig.seeding` 'global'). None: the probes are drawn by x's shape.
    Returns the estimate in the measurement dtype (fp32, or fp64 for fp64 inputs), shaped like x.
    """
    dtype = measurement_dtype(x.dtype)
    with torch.no_grad(), torch.autocast(x.device.type, enabled=False):
        units_per_seq = x[:1].numel() // x.shape[-1] if x.dim() > 1 else 0  # the fast paths' row offset
        est = fused.fast_vjp(f, x.detach(), g.detach(), cfg, seed, row0=(seq0 or 0) * units_per_seq)
        if est is not None:
            return est
        if mask is None and hasattr(f, "mask"):
            mask = f.mask(x)
        x = x.detach().to(dtype)
        g = g.detach().to(dtype)
        n, eps = cfg.n, cfg.eps
        if cfg.scheme == "forward":
            y = f(x) if y is None else y.to(dtype)
        stream = ProbeStream(cfg.probe, x.shape, n=n, seed=seed, mask=mask, device=x.device, dtype=dtype, seq0=seq0)
        est = torch.zeros_like(x)
        for start in range(0, n, cfg.chunk):
            u = stream.next(min(cfg.chunk, n - start))  # (k, ..., d)
            if cfg.scheme == "central":
                df = (f(x + eps * u) - f(x - eps * u)) / (2 * eps)
            else:
                df = (f(x + eps * u) - y) / eps
            coef = (df * g).sum(-1, keepdim=True)  # (k, ..., 1): g^T J u_i per unit
            est += (coef * u).sum(0)
        return est / n


def estimate_vjp(
    f: Box,
    x: torch.Tensor,
    g: torch.Tensor,
    *,
    n: int,
    probe: str = "rademacher",
    scheme: str = "central",
    eps: float = 1e-3,
    seed: int = 0,
    chunk: int | None = None,
    mask: torch.Tensor | None = None,
    y: torch.Tensor | None = None,
    impl: str = "plain",
) -> torch.Tensor:
    """`estimate` with the settings as keywords (chunk: all n at once by default); they are checked by the
    `ZBPConfig` built from them, so errors name its fields."""
    cfg = ZBPConfig(n=n, probe=probe, scheme=scheme, eps=eps, chunk=n if chunk is None else chunk, impl=impl)
    return estimate(f, x, g, cfg, seed=seed, mask=mask, y=y)


def nsr(est: torch.Tensor, exact: torch.Tensor, *, per_unit: bool = False) -> float:
    """Noise-to-signal ratio |est - exact|^2 / |exact|^2 (fp64).

    per_unit=False pools all units (units with large gradients weigh more); per_unit=True averages the
    ratio of each unit (last dimension), the tighter estimate of E[NSR] when units differ in scale.
    """
    err = (est.double() - exact.double()).pow(2).sum(-1)
    ref = exact.double().pow(2).sum(-1)
    if per_unit:
        return float((err / ref).mean())
    return float(err.sum() / ref.sum())
