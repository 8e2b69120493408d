"""Triton kernels of the fused estimator (CUDA): one program per unit, nothing of size n * d in memory.

A program owns one unit (a score row, or one token's SwiGLU input [a; b]) and walks it in column tiles of
BLOCK entries, three times:
  1. (softmax only) the row's max m over its live entries;
  2. for every tile, the (N_PAD, BLOCK) probe tile is generated in registers from the counter hash
     (`zbpscale.zbp.counter`, the same arithmetic on uint32), the box is queried at x +- eps u, and the
     per-probe sums are accumulated in fp32: softmax <g, e>, sum e with e = exp(x - m +- eps u), SwiGLU
     <g, silu(a +- eps ua) * (b +- eps ub)>; the coefficients c_i (N_PAD values) stay in registers;
  3. for every tile the probes are generated again and sum_i c_i u_i is written, the only store.
A causal score row t is walked up to its t + 1 live entries (rounded up to a tile), never over the masked
ones. Reads per unit: 3 (softmax) or 2 passes over x and g; writes: one estimate.

`HAVE_TRITON` is False where triton is not installed; nothing here is imported by the CPU path. With
TRITON_INTERPRET=1 set before the first import, the kernels run on CPU tensors (slowly), which is how the
test suite checks them without a GPU.
"""

from __future__ import annotations

import torch

from zbpscale.zbp import counter

try:
    import triton
    import triton.language as tl

    HAVE_TRITON = True
except ImportError:  # the CPU path does not need it
    HAVE_TRITON = False

TILE = 4096  # probe-tile entries per program (N_PAD * BLOCK)


def estimate(kind: str, x: torch.Tensor, g: torch.Tensor, *, n: int, probe: str, central: bool, eps: float,
             seed: int, causal: bool, row0: int = 0, version: int = 2) -> torch.Tensor:
    """The fused estimate on CUDA (or, under TRITON_INTERPRET=1, on CPU). x, g: fp32, bf16 or fp16, read
    as they are and measured in fp32 in registers; layout rules as `fused.fused_vjp`; `version`: the probe hash's
    (counter.word). Returns fp32."""
    x, g = x.contiguous(), g.contiguous()
    d = x.shape[-1]
    n_pad = max(2, triton.next_power_of_2(n))
    words, seeds = counter.call_seeds(probe, seed, n, x.device)
    # padded so that a kernel's (N_PAD,) loads stay in bounds; padded probes get c = 0
    words = torch.cat([words, words.new_zeros(max(1, n_pad // counter.WORD_BITS))])
    seeds = words if seeds is None else torch.cat([seeds, seeds.new_zeros(n_pad - n)])  # gaussian: per probe
    width = d // 2 if kind == "swiglu" else d
    block = max(16, min(TILE // n_pad, triton.next_power_of_2(width)))
    est = torch.zeros_like(x, dtype=torch.float32)
    units = x.numel() // d
    scale = 1.0 / ((2 if central else 1) * eps * n)
    common = dict(n=n, eps=eps, scale=scale, CENTRAL=central, GAUSS=probe == "gaussian", N_PAD=n_pad,
                  BLOCK=block, HASH=version, num_warps=4 if n_pad * block <= 2048 else 8)
    if kind == "swiglu":
        _swiglu_kernel[(units,)](x, g, est, words, seeds, d // 2, row0, **common)
    else:
        _softmax_kernel[(units,)](x, g, est, words, seeds, d, row0, CAUSAL=causal, **common)
    return est


if HAVE_TRITON:

    @triton.jit
    def _mix(h):
        """counter.mix on uint32 (products wrap mod 2^32)."""
        h = (h ^ (h >> 16)) * 0x45D9F3B
        h = (h ^ (h >> 16)) * 0x45D9F3B
        return h ^ (h >> 16)

    @triton.jit
    def _word(s, row, col, HASH: tl.constexpr):
        """counter.word of hash HASH: two rounds after the column, so that the word's 32 bits (32 probes) are
        independent; hash 2 carries two words of the row into the column, so that no two rows of any calls share
        probes."""
        if HASH == 1:
            return _mix(_mix(_mix(s ^ row) ^ col))
        h1 = _mix(s ^ row)
        return _mix(_mix(h1 ^ col) ^ _mix(h1 ^ _mix(s)))

    @triton.jit
    def _probes(w_ptr, s_ptr, row, cols, N_PAD: tl.constexpr, BLOCK: tl.constexpr, GAUSS: tl.constexpr,
                HASH: tl.constexpr):
        """(N_PAD, BLOCK) probe tile of one unit: entries (probe k, column cols[j])."""
        row = row.to(tl.uint32)
        cols = cols.to(tl.uint32)
        if GAUSS:
            base = _word(tl.load(w_ptr).to(tl.uint32), row, cols, HASH)  # (BLOCK,)
            s = tl.load(s_ptr + tl.arange(0, N_PAD)).to(tl.uint32)  # (N_PAD,) probe seeds (padded)
            h = _mix(base[None, :] ^ s[:, None])
            u1 = ((h >> 16).to(tl.float32) + 0.5) * (1.0 / 65536.0)
            u2 = ((h & 0xFFFF).to(tl.float32) + 0.5) * (1.0 / 65536.0)
            return tl.sqrt(-2.0 * tl.log(u1)) * tl.cos(6.283185307179586 * u2)
        if N_PAD <= 32:
            w = _word(tl.load(w_ptr).to(tl.uint32), row, cols, HASH)  # (BLOCK,)
            bit = (w[None, :] >> tl.arange(0, N_PAD).to(tl.uint32)[:, None]) & 1
        else:
            NW: tl.constexpr = N_PAD // 32
            s = tl.load(w_ptr + tl.arange(0, NW)).to(tl.uint32)  # (NW,) word seeds
            w = _word(s[:, None], row, cols[None, :], HASH)  # (NW, BLOCK)
            bit = (w[:, None, :] >> tl.arange(0, 32).to(tl.uint32)[None, :, None]) & 1  # (NW, 32, BLOCK)
            bit = tl.reshape(bit, (N_PAD, BLOCK))
        return tl.where(bit != 0, 1.0, -1.0)

    @triton.jit
    def _softmax_kernel(x_ptr, g_ptr, out_ptr, w_ptr, s_ptr, d, row0, n, eps, scale, CAUSAL: tl.constexpr,
                        CENTRAL: tl.constexpr, GAUSS: tl.constexpr, N_PAD: tl.constexpr, BLOCK: tl.constexpr,
                        HASH: tl.constexpr):
        unit = tl.program_id(0)
        if CAUSAL:
            length = (unit % d) + 1  # live entries: row t of a causal (T, T) block has t + 1
        else:
            length = d
        off = unit.to(tl.int64) * d
        lane = tl.arange(0, BLOCK)
        m = tl.full((BLOCK,), float("-inf"), tl.float32)
        for c0 in range(0, length, BLOCK):
            x = tl.load(x_ptr + off + c0 + lane, mask=c0 + lane < length, other=float("-inf"))
            m = tl.maximum(m, x.to(tl.float32))
        m_row = tl.max(m, 0)
        a_p = tl.zeros((N_PAD,), tl.float32)
        z_p = tl.zeros((N_PAD,), tl.float32)
        a_m = tl.zeros((N_PAD,), tl.float32)
        z_m = tl.zeros((N_PAD,), tl.float32)
        a_0 = tl.zeros((BLOCK,), tl.float32)
        z_0 = tl.zeros((BLOCK,), tl.float32)
        for c0 in range(0, length, BLOCK):
            cols = c0 + lane
            live = cols < length
            xs = tl.load(x_ptr + off + cols, mask=live, other=float("-inf")).to(tl.float32) - m_row  # dead: e=0
            g = tl.load(g_ptr + off + cols, mask=live, other=0.0).to(tl.float32)
            u = eps * _probes(w_ptr, s_ptr, unit + row0, cols, N_PAD, BLOCK, GAUSS, HASH)
            e = tl.exp(xs[None, :] + u)
            a_p += tl.sum(g[None, :] * e, 1)
            z_p += tl.sum(e, 1)
            if CENTRAL:
                e = tl.exp(xs[None, :] - u)
                a_m += tl.sum(g[None, :] * e, 1)
                z_m += tl.sum(e, 1)
            else:
                e0 = tl.exp(xs)  # f(x): the (n + 1)-th query
                a_0 += g * e0
                z_0 += e0
        if CENTRAL:
            c = a_p / z_p - a_m / z_m
        else:
            c = a_p / z_p - tl.sum(a_0, 0) / tl.sum(z_0, 0)
        c = tl.where(tl.arange(0, N_PAD) < n, c * scale, 0.0)
        for c0 in range(0, length, BLOCK):
            cols = c0 + lane
            u = _probes(w_ptr, s_ptr, unit + row0, cols, N_PAD, BLOCK, GAUSS, HASH)
            tl.store(out_ptr + off + cols, tl.sum(c[:, None] * u, 0), mask=cols < length)

    @triton.jit
    def _silu(z):
        return z / (1.0 + tl.exp(-z))

    @triton.jit
    def _swiglu_kernel(x_ptr, g_ptr, out_ptr, w_ptr, s_ptr, h, row0, n, eps, scale, CENTRAL: tl.constexpr,
                       GAUSS: tl.constexpr, N_PAD: tl.constexpr, BLOCK: tl.constexpr, HASH: tl.constexpr):
        unit = tl.program_id(0)
        x_off = unit.to(tl.int64) * 2 * h
        g_off = unit.to(tl.int64) * h
        lane = tl.arange(0, BLOCK)
        acc_p = tl.zeros((N_PAD,), tl.float32)
        acc_m = tl.zeros((N_PAD,), tl.float32)
        acc_0 = tl.zeros((BLOCK,), tl.float32)
        for c0 in range(0, h, BLOCK):
            cols = c0 + lane
            live = cols < h
            a = tl.load(x_ptr + x_off + cols, mask=live, other=0.0).to(tl.float32)
            b = tl.load(x_ptr + x_off + h + cols, mask=live, other=0.0).to(tl.float32)
            g = tl.load(g_ptr + g_off + cols, mask=live, other=0.0).to(tl.float32)  # dead: contributes 0
            ua = eps * _probes(w_ptr, s_ptr, unit + row0, cols, N_PAD, BLOCK, GAUSS, HASH)
            ub = eps * _probes(w_ptr, s_ptr, unit + row0, cols + h, N_PAD, BLOCK, GAUSS, HASH)
            acc_p += tl.sum(g[None, :] * _silu(a[None, :] + ua) * (b[None, :] + ub), 1)
            if CENTRAL:
                acc_m += tl.sum(g[None, :] * _silu(a[None, :] - ua) * (b[None, :] - ub), 1)
            else:
                acc_0 += g * _silu(a) * b  # f(x): the (n + 1)-th query
        if CENTRAL:
            c = acc_p - acc_m
        else:
            c = acc_p - tl.sum(acc_0, 0)
        c = tl.where(tl.arange(0, N_PAD) < n, c * scale, 0.0)
        for c0 in range(0, h, BLOCK):
            cols = c0 + lane
            live = cols < h
            ua = _probes(w_ptr, s_ptr, unit + row0, cols, N_PAD, BLOCK, GAUSS, HASH)
            tl.store(out_ptr + x_off + cols, tl.sum(c[:, None] * ua, 0), mask=live)
            ub = _probes(w_ptr, s_ptr, unit + row0, cols + h, N_PAD, BLOCK, GAUSS, HASH)
            tl.store(out_ptr + x_off + h + cols, tl.sum(c[:, None] * ub, 0), mask=live)
