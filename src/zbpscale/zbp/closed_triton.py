"""Triton kernels of the closed-form estimator (`zbp.closed_form`): rademacher probes, one program per unit.

Softmax row (three passes over the row's live entries, BLOCK columns at a time):
  1. online max m, z = sum e, a = sum g e with e = exp(x - m) (rescaled when m grows): S = a / z;
  2. p = e / z, w = p (g - S); the (N_PAD, BLOCK) probe tile is generated from the counter hash
     (`fused_triton._probes`) and W_i += <u_i, w>, P_i += <u_i, p>: no exp per probe entry;
  3. c_i from (W_i, P_i) (`closed_form.softmax_factors`), probes generated again, sum_i c_i u_i stored.
SwiGLU token (two passes over its h columns): the per-entry vectors of `closed_form.swiglu_terms` are formed
in registers and reduced against the probe tiles of s (columns j) and t (columns h + j); then the estimate.
The transcendental work is O(d) per unit, independent of n. With TRITON_INTERPRET=1 set before triton's
first import, the kernels run on CPU tensors (tests/test_closed_form.py).
"""

from __future__ import annotations

import math

import torch

from zbpscale.zbp import counter
from zbpscale.zbp.closed_form import softmax_factors
from zbpscale.zbp.fused_triton import HAVE_TRITON, TILE

if HAVE_TRITON:
    import triton
    import triton.language as tl

    from zbpscale.zbp.fused_triton import _probes


def estimate(kind: str, x: torch.Tensor, g: torch.Tensor, *, n: int, central: bool, eps: float, seed: int,
             causal: bool, row0: int = 0, version: int = 2) -> torch.Tensor:
    """The closed-form estimate on CUDA (or under TRITON_INTERPRET=1). x, g: fp32, bf16 or fp16 (read as
    they are, computed in fp32); layout as `fused.fused_vjp`; `version`: the probe hash's. Returns fp32."""
    x, g = x.contiguous(), g.contiguous()
    d = x.shape[-1]
    n_pad = max(2, triton.next_power_of_2(n))
    words, _ = counter.call_seeds("rademacher", seed, n, x.device)
    words = torch.cat([words, words.new_zeros(max(1, n_pad // counter.WORD_BITS))])  # in-bounds (N_PAD,) loads
    width = d // 2 if kind == "swiglu" else d
    block = max(16, min(TILE // n_pad, triton.next_power_of_2(width)))
    est = torch.empty_like(x, dtype=torch.float32) if kind == "swiglu" or not causal else torch.zeros_like(
        x, dtype=torch.float32)  # causal: the masked entries are never written
    units = x.numel() // d
    common = dict(n=n, eps=eps, CENTRAL=central, N_PAD=n_pad, BLOCK=block, HASH=version,
                  num_warps=4 if n_pad * block <= 2048 else 8)
    if kind == "swiglu":
        ce = math.cosh(eps)
        _swiglu_kernel[(units,)](x, g, est, words, d // 2, row0, ce, math.sinh(eps), -2 * math.sinh(eps / 2) ** 2,
                                 **common)
    else:
        k, q, r = softmax_factors(eps, central)
        _softmax_kernel[(units,)](x, g, est, words, d, row0, k / n, q, r, CAUSAL=causal, **common)
    return est


if HAVE_TRITON:

    @triton.jit
    def _softmax_kernel(x_ptr, g_ptr, out_ptr, w_ptr, d, row0, k, q, r, n, eps, CAUSAL: tl.constexpr,
                        CENTRAL: tl.constexpr, N_PAD: tl.constexpr, BLOCK: tl.constexpr, HASH: tl.constexpr):
        unit = tl.program_id(0)
        if CAUSAL:
            length = (unit % d) + 1  # row t of a causal (T, T) block has t + 1 live entries
        else:
            length = d
        off = unit.to(tl.int64) * d
        lane = tl.arange(0, BLOCK)
        m = tl.full((), float("-inf"), tl.float32)
        z = tl.zeros((), tl.float32)
        a = tl.zeros((), tl.float32)
        for c0 in range(0, length, BLOCK):  # 1. online max, sum e, sum g e
            live = c0 + lane < length
            x = tl.load(x_ptr + off + c0 + lane, mask=live, other=float("-inf")).to(tl.float32)
            g = tl.load(g_ptr + off + c0 + lane, mask=live, other=0.0).to(tl.float32)
            m_new = tl.maximum(m, tl.max(x, 0))
            e = tl.exp(x - m_new)
            rescale = tl.exp(m - m_new)
            z = z * rescale + tl.sum(e, 0)
            a = a * rescale + tl.sum(g * e, 0)
            m = m_new
        s_g = a / z
        w_sum = tl.zeros((N_PAD,), tl.float32)
        p_sum = tl.zeros((N_PAD,), tl.float32)
        for c0 in range(0, length, BLOCK):  # 2. W_i = <u_i, w>, P_i = <u_i, p>
            cols = c0 + lane
            live = cols < length
            x = tl.load(x_ptr + off + cols, mask=live, other=float("-inf")).to(tl.float32)
            g = tl.load(g_ptr + off + cols, mask=live, other=0.0).to(tl.float32)
            p = tl.exp(x - m) / z  # dead: 0
            w = p * (g - s_g)
            u = _probes(w_ptr, w_ptr, unit + row0, cols, N_PAD, BLOCK, False, HASH)
            w_sum += tl.sum(u * w[None, :], 1)
            p_sum += tl.sum(u * p[None, :], 1)
        if CENTRAL:
            c = k * w_sum / (q - r * p_sum * p_sum)
        else:
            c = k * w_sum / (q + r * p_sum)
        c = tl.where(tl.arange(0, N_PAD) < n, c, 0.0)
        for c0 in range(0, length, BLOCK):  # 3. sum_i c_i u_i
            cols = c0 + lane
            u = _probes(w_ptr, w_ptr, unit + row0, cols, N_PAD, BLOCK, False, HASH)
            tl.store(out_ptr + off + cols, tl.sum(c[:, None] * u, 0), mask=cols < length)

    @triton.jit
    def _swiglu_kernel(x_ptr, g_ptr, out_ptr, w_ptr, h, row0, ce, se, one_minus_ce, n, eps, CENTRAL: tl.constexpr,
                       N_PAD: tl.constexpr, BLOCK: tl.constexpr, HASH: tl.constexpr):
        unit = tl.program_id(0)
        x_off = unit.to(tl.int64) * 2 * h
        g_off = unit.to(tl.int64) * h
        lane = tl.arange(0, BLOCK)
        acc = tl.zeros((N_PAD,), tl.float32)
        k_vec = tl.zeros((BLOCK,), tl.float32)
        for c0 in range(0, h, BLOCK):
            cols = c0 + lane
            live = cols < h
            a = tl.load(x_ptr + x_off + cols, mask=live, other=0.0).to(tl.float32)
            b = tl.load(x_ptr + x_off + h + cols, mask=live, other=0.0).to(tl.float32)
            g = tl.load(g_ptr + g_off + cols, mask=live, other=0.0).to(tl.float32)  # dead: every term 0
            # cosh and tanh from exp(-|a|), which never overflows: cosh a = (e^|a| + e^-|a|) / 2
            ea = tl.exp(-tl.abs(a))
            inv_cosh = 2 * ea / (1 + ea * ea)  # 1 / cosh a
            tanh_a = tl.where(a >= 0, 1.0, -1.0) * (1 - ea * ea) / (1 + ea * ea)
            tanh_half = tl.where(a >= 0, 1.0, -1.0) * (1 - ea) / (1 + ea)  # tanh(a / 2)
            inv_den = inv_cosh / (1 + ce * inv_cosh)  # 1 / (cosh a + C)
            sig_sum = 1 + tanh_a / (1 + ce * inv_cosh)  # sigma(a + eps) + sigma(a - eps)
            sig_diff = se * inv_den  # sigma(a + eps) - sigma(a - eps)
            mid = (a * sig_sum + eps * sig_diff) / 2
            delta = (a * sig_diff + eps * sig_sum) / 2
            us = _probes(w_ptr, w_ptr, unit + row0, cols, N_PAD, BLOCK, False, HASH)
            ut = _probes(w_ptr, w_ptr, unit + row0, cols + h, N_PAD, BLOCK, False, HASH)
            acc += tl.sum(us * (g * delta * b / eps)[None, :] + ut * (g * mid)[None, :], 1)
            if not CENTRAL:
                acc += tl.sum(us * ut * (g * delta)[None, :], 1)
                d2 = (a * tanh_half * one_minus_ce * inv_den + eps * sig_diff) / 2  # m - silu(a)
                k_vec += g * d2 * b
        if not CENTRAL:
            acc += tl.sum(k_vec, 0) / eps
        c = tl.where(tl.arange(0, N_PAD) < n, acc / n, 0.0)
        for c0 in range(0, h, BLOCK):
            cols = c0 + lane
            live = cols < h
            us = _probes(w_ptr, w_ptr, unit + row0, cols, N_PAD, BLOCK, False, HASH)
            tl.store(out_ptr + x_off + cols, tl.sum(c[:, None] * us, 0), mask=live)
            ut = _probes(w_ptr, w_ptr, unit + row0, cols + h, N_PAD, BLOCK, False, HASH)
            tl.store(out_ptr + x_off + h + cols, tl.sum(c[:, None] * ut, 0), mask=live)
