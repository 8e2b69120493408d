"""`core_stats` against a planted saturated score row. The estimate is formed as the fused direct-query kernels
form it: each query reduced to <g, e> / sum(e) with e = exp(x - max(x) +- eps u) in fp32, then differenced.
For the planted row (exact VJP ~1e-8 per entry, above the dead-unit cut-off) that difference is fp32 rounding
noise; the plain mean of per-unit c explodes with it, the energy-weighted c and the median stay at theory
((d-1)/d for rademacher probes), and the floor fraction counts exactly that row. The whole-model diagnostics
are compared with theory in tests/test_train.py."""

import functools

import pytest
import torch

from zbpscale.train.diagnostics import core_stats
from zbpscale.zbp import ZBPConfig, masked_softmax


def kernel_query(x, g, shift):
    """<g, softmax(x + shift)> in the fused kernels' arithmetic (fp32): the row's max taken before the shift."""
    e = torch.exp(x - x.amax(-1, keepdim=True) + shift)
    return (g * e).sum(-1) / e.sum(-1)


def reduced_query_estimate(x, g, *, n, eps):
    """Central estimate with rademacher probes from the kernels' reduced queries."""
    u = (torch.randint(0, 2, (n, *x.shape)) * 2 - 1).to(x.dtype)  # (n, units, d)
    c = (kernel_query(x, g, eps * u) - kernel_query(x, g, -eps * u)) / (2 * eps)  # (n, units)
    return (c.unsqueeze(-1) * u).sum(0) / n


def test_a_saturated_row_sits_at_the_floor_and_leaves_c_at_theory():
    torch.manual_seed(0)
    units, d = 400, 24
    zbp = ZBPConfig(n=16)
    x = torch.randn(units, d)
    x[0] = 0.0
    x[0, 0] = 18.0  # p ~ one-hot: the exact VJP is ~e^-18 per entry, the query floor ~2^-24 / eps
    g = torch.randn(units, d)
    box = functools.partial(masked_softmax, mask=None)
    xr = x.clone().requires_grad_()
    out = box(xr)
    (exact,) = torch.autograd.grad(out, xr, g)
    est = reduced_query_estimate(x, g, n=zbp.n, eps=zbp.eps)
    dims = torch.full((units,), d)
    stats = core_stats(est, exact, out.detach(), g, dims, zbp)
    rest = core_stats(est[1:], exact[1:], out.detach()[1:], g[1:], dims[1:], zbp)

    assert stats["c_mean"] > 100 * rest["c_mean"]  # one noise row dominates a mean of ratios
    theory = (d - 1) / d
    assert stats["c"] == pytest.approx(theory, rel=0.1)
    assert stats["c"] == pytest.approx(rest["c"], rel=1e-6)  # the planted row weighs ~nothing in c
    assert 0.6 * theory < stats["c_median"] < 1.1 * theory  # the median of a skewed (chi-square-like) c_u
    assert stats["floor_frac"] == 1 / units and rest["floor_frac"] == 0.0
    assert stats["nsr"] == pytest.approx(rest["nsr"], rel=1e-6)
