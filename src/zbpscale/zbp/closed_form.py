"""Closed-form queries for Rademacher probes: the fused estimate with no transcendental per probe entry.

Definition: the estimator of `zbp.fused` (same counter-hash probes, same est = (1/n) sum_i c_i u_i), where
each probe's coefficient c_i = <g, f(x + eps u_i) - f(x -+ ...)> / (k eps) is evaluated from an exact
identity instead of querying the box. For u in {-1, +1}^d, e^(eps u_j) = cosh(eps) + u_j sinh(eps), so
with C = cosh eps, s = sinh eps:

  softmax   p = softmax(x) over the unit's live entries, w = p * (g - <g, p>)  (= J^T g),
            W_i = <u_i, w>, P_i = <u_i, p>:
              <g, softmax(x + eps u)> = (C S + s <u, v>) / (C + s P),  S = <g, p>, v = g * p
              central  c_i = C s W_i / (eps (C^2 - s^2 P_i^2))
              forward  c_i = s W_i / (eps (C + s P_i))
  swiglu    x = [a; b], u = [s; t]: silu(a_j + eps s_j) = m_j + s_j delta_j, with
            m = (silu(a + eps) + silu(a - eps)) / 2, delta = (silu(a + eps) - silu(a - eps)) / 2:
              central  c_i = <s_i, g delta b / eps> + <t_i, g m>
              forward  c_i = K / eps + <s_i, g delta b / eps> + <t_i, g m> + <s_i * t_i, g delta>,
                       K = sum g (m - silu(a)) b  (K / eps: forward differences' O(eps) per-call term)
            m, delta and m - silu(a) come from sigma(a + eps) +- sigma(a - eps) in closed form
            (sinh eps / (cosh a + C), tanh(a/2) (1 - C) / (cosh a + C), ...), not from a difference of two
            queries.
So each probe costs two (softmax) or two to three (swiglu) signed sums of precomputed vectors, and the
transcendental work is O(d) per unit whatever n. The closed forms are the queries' differences taken
analytically: they carry no 1/eps cancellation, so this estimate is *more* accurate than the direct queries
(fp32 finite differences with eps = 1e-3 carry ~1e-4 relative rounding noise); tests compare it with fp64 direct
queries on the same materialised probes, to ~1e-6. What cancellation is left is backprop's own: g - <g, p> of a
saturated score row (as fp32 autograd's softmax VJP), and 1 + tanh(a) / (1 + C / cosh a) where a is far below 0
(entries of size e^a: exact to fp32 rounding per token).

Back ends: CPU, torch.compile graphs (`fused_cpu`'s words and accumulate, plus the signed sums here); CUDA,
Triton (`closed_triton`). The physical box would still take 2n (or n + 1) queries: metrics and docs count
those, not what this shortcut evaluates.

Caveats:
  - Rademacher probes only (the identity needs u_j^2 = 1); the other families use the direct queries.
  - The causal score core folds as in `fused_cpu` (rows t and T-1-t share a row of T + 1 entries).
"""

from __future__ import annotations

import math

import torch

from zbpscale.zbp import fused_cpu
from zbpscale.zbp.boxes import causal_mask
from zbpscale.zbp.fused_cpu import _probes, _run


def softmax_factors(eps: float, central: bool) -> tuple[float, float, float]:
    """(k, q, r) such that c_i = k W_i / (q + r P_i) (forward) or k W_i / (q - r P_i^2) (central)."""
    ch, sh = math.cosh(eps), math.sinh(eps)
    if central:
        return ch * sh / eps, ch * ch, sh * sh
    return sh / eps, ch, sh


def swiglu_terms(x: torch.Tensor, g: torch.Tensor, eps: float, central: bool):
    """Per-entry vectors of the SwiGLU identity: (A (..., 2h) = [g delta b / eps; g m], E (..., h) = g delta
    or None, K (..., 1) = sum g (m - silu(a)) b / eps or None), in x's dtype."""
    h = x.shape[-1] // 2
    a, b = x[..., :h], x[..., h:]
    ce = math.cosh(eps)
    den = torch.cosh(a) + ce  # inf for |a| > ~89 (fp32): every ratio below then goes to its limit
    sig_sum = 1 + torch.tanh(a) / (1 + ce / torch.cosh(a))  # sigma(a + eps) + sigma(a - eps)
    sig_diff = math.sinh(eps) / den  # sigma(a + eps) - sigma(a - eps)
    m = (a * sig_sum + eps * sig_diff) / 2
    delta = (a * sig_diff + eps * sig_sum) / 2
    A = torch.cat([g * delta * b / eps, g * m], -1)
    if central:
        return A, None, None
    d2 = (a * torch.tanh(a / 2) * (-2 * math.sinh(eps / 2) ** 2) / den + eps * sig_diff) / 2  # m - silu(a)
    return A, g * delta, (g * d2 * b).sum(-1, keepdim=True) / eps


# ---- compiled graphs (CPU) ----------------------------------------------------------------------------


def _sums4(wl, pl, wr, pr, pin, n: int):
    """(units, n) each: <u_i, wl>, <u_i, pl>, <u_i, wr>, <u_i, pr>, the probes generated once per entry."""
    units, width = wl.shape
    u = _probes(pin, n, units, width, wl.dtype)  # (units, n, width), never written
    return tuple((u * t.unsqueeze(1)).sum(-1) for t in (wl, pl, wr, pr))


def _sums2(w, p, pin, n: int):
    units, width = w.shape
    u = _probes(pin, n, units, width, w.dtype)
    return (u * w.unsqueeze(1)).sum(-1), (u * p.unsqueeze(1)).sum(-1)


def _swiglu_sums(A, E, pin, n: int):
    """(units, n): <u_i, A> + <s_i * t_i, E>, u = [s; t]; s and t are generated from the words of columns
    j and h + j side by side, so that their product fuses into the same loop."""
    units, width = A.shape
    h = width // 2
    words = pin[0]
    s = _probes((words[:, :h],), n, units, h, A.dtype)  # (units, n, h)
    t = _probes((words[:, h:],), n, units, h, A.dtype)
    a_s, a_t, e = (v.unsqueeze(1) for v in (A[:, :h], A[:, h:], E))
    return (s * a_s + t * a_t + s * t * e).sum(-1)


def _swiglu_sums_central(A, pin, n: int):
    units, width = A.shape
    return (_probes(pin, n, units, width, A.dtype) * A.unsqueeze(1)).sum(-1)


def _swiglu_graph(x, g, eps: float, central: bool):
    return swiglu_terms(x, g, eps, central)


fused_cpu._GRAPHS.update({"closed_terms": _swiglu_graph, "closed_sums4": _sums4, "closed_sums2": _sums2,
                          "closed_swiglu": _swiglu_sums, "closed_swiglu_central": _swiglu_sums_central})


def _coef(W, P, k: float, q: float, r: float, central: bool, n: int):
    return (k / n) * W / ((q - r * P * P) if central else (q + r * P))


def softmax(x: torch.Tensor, g: torch.Tensor, *, n: int, central: bool, eps: float, seed: int,
            causal: bool, row0: int = 0, version: int = 2) -> torch.Tensor:
    """The closed-form estimate for softmax rows on CPU: causal (..., T, T) scores, or (..., d) rows without a
    mask. x, g in the measurement dtype; row0 and `version` (the probe hash's) as `fused_cpu.softmax`."""
    t = x.shape[-1]
    k, q, r = softmax_factors(eps, central)
    mask = causal_mask(t, x.device) if causal else None
    p = torch.softmax(x if mask is None else x.masked_fill(~mask, float("-inf")), -1)  # 0 where masked
    w = p * (g - (g * p).sum(-1, keepdim=True))  # J^T g, (..., T)
    if not causal:
        lf, _, rows, cols = fused_cpu._row_layout(x.numel() // t, t, x.device, x.dtype)
        pin = fused_cpu._probe_inputs("rademacher", seed, n, rows + row0 if row0 else rows, cols, version)
        W, P = _run("closed_sums2", w.reshape(-1, t), p.reshape(-1, t).clone(), pin, n)  # (U, n) each
        c = _coef(W, P, k, q, r, central, n)
        return _run("accumulate", c, torch.zeros_like(c), lf, pin, n).view(x.shape)
    lead = x.shape[:-2]
    bh = math.prod(lead)
    gather, unfold, _, lf, rf, rows, cols = fused_cpu._softmax_layout(bh, t, x.device, x.dtype)
    wf = w.reshape(bh, t * t).index_select(1, gather).view(lf.shape)  # (BH*R, W) folded
    pf = p.reshape(bh, t * t).index_select(1, gather).view(lf.shape)
    pin = fused_cpu._probe_inputs("rademacher", seed, n, rows + row0 if row0 else rows, cols, version)
    WL, PL, WR, PR = _run("closed_sums4", wf * lf, pf * lf, wf * rf, pf * rf, pin, n)
    est = _run("accumulate", _coef(WL, PL, k, q, r, central, n), _coef(WR, PR, k, q, r, central, n), lf, pin, n)
    est = est.view(bh, -1).index_select(1, unfold).view(*lead, t, t)
    return est.masked_fill(~mask, 0.0)


def swiglu_vjp(x: torch.Tensor, g: torch.Tensor, *, n: int, central: bool, eps: float, seed: int,
               row0: int = 0, version: int = 2) -> torch.Tensor:
    """The closed-form estimate for SwiGLU inputs x (..., 2h) and gradients g (..., h) on CPU (measurement
    dtype); row0 and `version` as `fused_cpu.swiglu_vjp`."""
    width = x.shape[-1]
    A, E, K = _run("closed_terms", x.reshape(-1, width), g.reshape(-1, width // 2), eps, central)
    ones, _, rows, cols = fused_cpu._row_layout(A.shape[0], width, x.device, x.dtype)
    pin = fused_cpu._probe_inputs("rademacher", seed, n, rows + row0 if row0 else rows, cols, version)
    if central:
        c = _run("closed_swiglu_central", A, pin, n)  # (U, n)
    else:
        c = _run("closed_swiglu", A, E, pin, n) + K
    c = c * (1 / n)
    return _run("accumulate", c, torch.zeros_like(c), ones, pin, n).view(x.shape)
