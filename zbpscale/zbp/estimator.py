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
  - Forward differences are biased at O(eps) (central: O(eps^2)); they save half the queries.
  - Measurements run in fp32 (fp64 stays fp64) with autocast off: in bf16, x + eps u rounds back to x
    for eps << |x| * 2^-8 and the difference is noise.
  - Reproducibility rests on the seed alone: ranks must derive their seeds from the same base seed.
  - impl='fused' (or 'auto' where it applies) computes the same estimator without materialising probes
    (`zbpscale.zbp.fused`), with counter-hash probes: for one seed it draws other probes than this plain
    path, with the same law. The plain path is the reference.
"""

from __future__ import annotations

from typing import Callable

import torch

from zbpscale.errors import ConfigError
from zbpscale.zbp.config import FUSED_PROBES, IMPLS, SCHEMES
from zbpscale.zbp.probes import ProbeStream

Box = Callable[[torch.Tensor], torch.Tensor]


def measurement_dtype(dtype: torch.dtype) -> torch.dtype:
    """Queries run in fp32, or in fp64 when the input already is fp64."""
    return torch.float64 if dtype == torch.float64 else torch.float32


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
    """Estimate J^T g of the box `f` at `x` from forward queries, one estimate per unit.

    f:     the black box; applied to a tensor of shape (k, *x.shape) it must act on each unit (last
           dimension) independently and return (k, *g.shape).
    x:     (..., d) input; g: (..., d_out) upstream gradient of f(x).
    mask:  optional boolean tensor broadcastable to x: live entries. Masked entries are never
           perturbed and get exactly zero gradient.
    y:     f(x) in the measurement dtype, if already known (saves one query for `forward`).
    impl:  plain (this function's loop), fused (`zbp.fused`; f must be `swiglu` or `masked_softmax` with
           the causal mask or none) or auto (fused where it applies and compiles, on CPU from
           `fused.CPU_MIN_N` probes; else plain).
    Returns the estimate in the measurement dtype (fp32, or fp64 for fp64 inputs), shaped like x.
    """
    if n < 1:
        raise ConfigError(f"n must be >= 1, got {n}")
    if scheme not in SCHEMES:
        raise ConfigError(f"scheme must be one of {', '.join(SCHEMES)}; got {scheme!r}")
    if not eps > 0:
        raise ConfigError(f"eps must be > 0, got {eps}")
    chunk = n if chunk is None else chunk
    if chunk < 1:
        raise ConfigError(f"chunk must be >= 1, got {chunk}")
    if impl not in IMPLS:
        raise ConfigError(f"impl must be one of {', '.join(IMPLS)}; got {impl!r}")
    dtype = measurement_dtype(x.dtype)
    with torch.no_grad(), torch.autocast(x.device.type, enabled=False):
        if impl != "plain":
            est = _fused_or_none(f, x.detach(), g.detach(), n=n, probe=probe, scheme=scheme, eps=eps, seed=seed,
                                 mask=mask, required=impl == "fused")
            if est is not None:
                return est
        x = x.detach().to(dtype)
        g = g.detach().to(dtype)
        if scheme == "forward":
            y = f(x) if y is None else y.to(dtype)
        stream = ProbeStream(probe, x.shape, n=n, seed=seed, mask=mask, device=x.device, dtype=dtype)
        est = torch.zeros_like(x)
        for start in range(0, n, chunk):
            u = stream.next(min(chunk, n - start))  # (k, ..., d)
            if scheme == "central":
                df = (f(x + eps * u) - f(x - eps * u)) / (2 * eps)
            else:
                df = (f(x + eps * u) - y) / eps
            coef = (df * g).sum(-1, keepdim=True)  # (k, ..., 1): g^T J u_i per unit
            est += (coef * u).sum(0)
        return est / n


def _fused_or_none(f, x, g, *, required: bool, **kw) -> torch.Tensor | None:
    """The fused estimate, or None where it does not apply (auto); impl='fused' insists."""
    from zbpscale.zbp import fused

    kind = fused.box_kind(f, x, kw["mask"])
    why = None
    if kind is None:
        why = "the box is not one the fused kernels implement (swiglu, masked_softmax with a causal mask or none)"
    elif kw["probe"] not in FUSED_PROBES:
        why = f"the fused kernels draw {' or '.join(FUSED_PROBES)} probes, not {kw['probe']!r}"
    elif not fused.available(x):
        why = f"no fused back end for {x.dtype} on {x.device.type} in this process"
    elif not required and x.device.type == "cpu" and kw["n"] < fused.CPU_MIN_N:
        return None  # auto: below the CPU break-even the plain path is as fast and compiles nothing
    if why is not None:
        if required:
            raise ConfigError(f"impl='fused' cannot run here: {why}", hint="use impl='auto' or 'plain'")
        return None
    try:
        return fused.fused_vjp(kind, x, g, **kw)
    except fused.CompileFailed:
        if required:
            raise
        return None  # warned once; plain from here on


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
