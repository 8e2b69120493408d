"""CPU back end of the fused estimator: torch.compile (Inductor) graphs in which no probe is ever written.

Per call, three compiled graphs:
  words       hashes every entry's probe word(s) (`counter.word`): one int32 per entry serves 32 rademacher
              probes; gaussian probes mix one word per entry with one seed per probe;
  queries     streams over (unit, probe): generates the probe entries from the words, queries the box at
              x + eps u (and x - eps u for central differences, in the same pass) and reduces each query
              to its sums at once; output (units, n);
  accumulate  regenerates the probes and forms sum_i c_i u_i; output (units, width).
Probes exist only as expressions inside the generated loops (a unit's row stays in L1 while its n probes
stream past). The causal score core is folded first: rows t and T-1-t share one row of T + 1 entries (padded
to whole 8-wide vectors), so the queries touch ~T^2/2 entries and never a masked one.

Graphs are compiled once per process, dtype and thread count, with dynamic shapes: any batch, length, width
and n reuse them, provided no input has a dimension of size 1 and no two inputs alias (both would force a
recompile; the inputs are built to avoid them). A first compile costs ~10 s per graph on 2 cores, and
Inductor's disk cache makes later processes fast. If Inductor fails, `CompileFailed` is raised; `fused.fast_vjp`
then falls back ('auto', with one warning line) or re-raises ('fused', 'closed').
"""

from __future__ import annotations

import functools
import math

import torch
import torch.nn.functional as F

from zbpscale.zbp import counter
from zbpscale.zbp.boxes import causal_mask, swiglu

# ---- layouts -------------------------------------------------------------------------------------------


@functools.lru_cache(maxsize=8)
def _fold_plan(t: int, device: torch.device):
    """Index maps of the causal fold: folded row r holds row r (columns 0..r), then row T-1-r, then dead
    padding up to a multiple of 8 entries (whole vectors: no masked tail in the compiled loops)."""
    r_count, width = (t + 1) // 2, 8 * math.ceil((t + 1) / 8)
    r = torch.arange(r_count, device=device).view(-1, 1)
    j = torch.arange(width, device=device).view(1, -1)
    left = j <= r  # (R, W): the entry belongs to unit r
    right = ~left & (j <= t) & (t - 1 - r > r)  # ... to unit T-1-r (odd T: the middle row has no partner)
    row = torch.where(left, r, t - 1 - r)  # original row of each folded entry
    col = torch.where(left, j, j - r - 1)  # its original column
    gather = torch.where(left | right, row * t + col, 0).flatten()  # (R*W,) into the flat (T*T) matrix
    orig_r = torch.arange(t, device=device).view(-1, 1)
    orig_c = torch.arange(t, device=device).view(1, -1)
    partner = t - 1 - orig_r  # folded row of the rows in the second half
    unfold = torch.where(orig_r < r_count, orig_r * width + orig_c, partner * width + orig_c + partner + 1)
    unfold = torch.where(orig_c <= orig_r, unfold, 0).flatten()  # (T*T,) into the flat folded matrix
    return gather, unfold, left, right, row, col


@functools.lru_cache(maxsize=8)
def _softmax_layout(bh: int, t: int, device: torch.device, dtype: torch.dtype):
    """Per-shape constants of the folded score core, (BH*R, W) each: live mask, left/right unit weights,
    and the original (row, column) of every entry for the probe hash."""
    gather, unfold, left, right, row, col = _fold_plan(t, device)
    live = (left | right).repeat(bh, 1)
    lf, rf = left.to(dtype).repeat(bh, 1), right.to(dtype).repeat(bh, 1)
    rows = torch.arange(bh, device=device).repeat_interleave(left.shape[0]).view(-1, 1) * t + row.repeat(bh, 1)
    return gather, unfold, live, lf, rf, rows, col.repeat(bh, 1)


@functools.lru_cache(maxsize=8)
def _row_layout(units: int, width: int, device: torch.device, dtype: torch.dtype):
    """Per-shape constants of plain rows: weights (all left) and (row, column) of every entry."""
    rows = torch.arange(units, device=device).view(-1, 1).expand(units, width).contiguous()
    cols = torch.arange(width, device=device).view(1, -1).expand(units, width).contiguous()
    ones = torch.ones(units, width, device=device, dtype=dtype)
    return ones, torch.zeros_like(ones), rows, cols


def _probe_inputs(probe: str, seed: int, n: int, rows: torch.Tensor, cols: torch.Tensor, version: int = 2):
    """What the compiled kernels regenerate probes from: the words of every entry (and, gaussian, the
    per-probe seeds), by hash `version` (ZBPConfig.probe_hash). Graph inputs never have a dimension of size 1, so
    one graph serves every n."""
    words, seeds = counter.call_seeds(probe, seed, n, rows.device)
    if len(words) == 1:
        words = torch.cat([words, words])  # a second, unused word
    words = _run("words" if version == 2 else "words1", words, rows, cols)  # (W * units, width) int32
    return (words,) if seeds is None else (words, seeds)


# ---- compiled graphs -----------------------------------------------------------------------------------


def _probes(pin: tuple[torch.Tensor, ...], n: int, units: int, width: int, dtype: torch.dtype) -> torch.Tensor:
    """(units, n, width) probes, as an expression Inductor fuses into its consumer (never written)."""
    if len(pin) == 1:  # rademacher: bit i % 32 of word i // 32
        words = pin[0].view(-1, 1, units, width).expand(-1, counter.WORD_BITS, units, width)
        words = words.reshape(-1, units, width)[:n]  # (n, units, width)
        bit = (torch.arange(n, device=words.device, dtype=torch.int32) % counter.WORD_BITS).view(n, 1, 1)
        return torch.where((words >> bit) & 1 != 0, 1.0, -1.0).to(dtype).transpose(0, 1)
    base, seeds = pin  # gaussian: one word per entry (the first plane), mixed with one seed per probe
    base = base[:units].to(torch.int64) & counter.M32
    return counter.gaussian(base.unsqueeze(0), seeds.view(n, 1, 1), dtype).transpose(0, 1)


def _words(seeds: torch.Tensor, rows: torch.Tensor, cols: torch.Tensor) -> torch.Tensor:
    """(W * units, width) int32: word w of every entry, stacked over w."""
    return counter.word(seeds.view(-1, 1, 1), rows, cols).to(torch.int32).flatten(0, 1)


def _words1(seeds: torch.Tensor, rows: torch.Tensor, cols: torch.Tensor) -> torch.Tensor:
    """`_words` by hash 1 (runs made before 2026-12-06 resume with it)."""
    return counter.word(seeds.view(-1, 1, 1), rows, cols, 1).to(torch.int32).flatten(0, 1)


def _softmax_sums(gl, gr, lf, rf, z):
    """(sum g e, sum e) over the left and over the right unit of each folded row, e = exp(z)."""
    gl, gr, lf, rf = (t.unsqueeze(1) for t in (gl, gr, lf, rf))
    # one exp per use keeps Inductor from writing e out (on CPU it realises reused exps); the loop shares them
    return ((gl * torch.exp(z)).sum(-1), (lf * torch.exp(z)).sum(-1),
            (gr * torch.exp(z)).sum(-1), (rf * torch.exp(z)).sum(-1))


def _softmax_queries(xs, gl, gr, lf, rf, pin, n: int, step):
    """Per folded row and probe, the sums of `_softmax_sums` at xs + step u: (units, n) each."""
    units, width = xs.shape
    u = step * _probes(pin, n, units, width, xs.dtype)  # (units, n, width)
    return _softmax_sums(gl, gr, lf, rf, xs.unsqueeze(1) + u)


def _softmax_queries2(xs, gl, gr, lf, rf, pin, n: int, step):
    """`_softmax_queries` at +step and at -step in one pass (the probe is generated once for both)."""
    units, width = xs.shape
    u = step * _probes(pin, n, units, width, xs.dtype)  # (units, n, width)
    x = xs.unsqueeze(1)
    return _softmax_sums(gl, gr, lf, rf, x + u) + _softmax_sums(gl, gr, lf, rf, x - u)


def _swiglu_query(x, g, u):
    """<g, silu(a + ua) * (b + ub)> per token and probe for x = [a; b] (units, 2h) and u (units, n, 2h)."""
    h = g.shape[-1]
    return (g.unsqueeze(1) * F.silu(x[:, None, :h] + u[..., :h]) * (x[:, None, h:] + u[..., h:])).sum(-1)


def _swiglu_queries(x, g, pin, n: int, step):
    """Per token and probe: <g, silu(a + step ua) * (b + step ub)>, (units, n)."""
    units, width = x.shape
    return _swiglu_query(x, g, step * _probes(pin, n, units, width, x.dtype))


def _swiglu_queries2(x, g, pin, n: int, step):
    """The difference of `_swiglu_queries` at +step and at -step, in one pass."""
    units, width = x.shape
    u = step * _probes(pin, n, units, width, x.dtype)  # (units, n, 2h)
    return _swiglu_query(x, g, u) - _swiglu_query(x, g, -u)


def _accumulate(c_left, c_right, lf, pin, n: int):
    """est = sum_i c_i u_i, regenerating the probes; c_left/right: (units, n) of the left/right unit."""
    units, width = lf.shape
    c = lf.unsqueeze(1) * c_left.unsqueeze(-1) + (1 - lf.unsqueeze(1)) * c_right.unsqueeze(-1)
    return (c * _probes(pin, n, units, width, lf.dtype)).sum(1)  # (units, width)


_GRAPHS = {"words": _words, "words1": _words1, "softmax": _softmax_queries, "softmax2": _softmax_queries2,
           "swiglu": _swiglu_queries, "swiglu2": _swiglu_queries2, "accumulate": _accumulate}


@functools.cache
def _compiled(name: str):
    # A graph is compiled again for each dtype, eps and scheme it meets (Dynamo specialises on floats): a training
    # process meets one or two, a process that runs many (the test suite's workers, a sweep over eps in a notebook)
    # went past Dynamo's default of 8 and its closed path failed (CompileFailed, 'recompile limit exceeded').
    torch._dynamo.config.recompile_limit = max(torch._dynamo.config.recompile_limit, RECOMPILES)
    return torch.compile(_GRAPHS[name], dynamic=True, fullgraph=True)


RECOMPILES = 64
"""Compilations of one graph per process (one per dtype x eps x scheme it meets) before Dynamo gives up."""


class CompileFailed(RuntimeError):
    """Raised out of the CPU path when Inductor failed (the compiler's error is its cause)."""


def _run(name: str, *args):
    """A compiled graph; `CompileFailed` if compiling it failed."""
    try:
        return _compiled(name)(*args)
    except Exception as err:  # noqa: BLE001 - whatever broke inside the compiler, the caller falls back
        raise CompileFailed(f"torch.compile of the {name!r} graph failed") from err


def _ratio(a, z):
    """<g, f> = sum g e / sum e, 0 for a unit without live entries."""
    return torch.where(z > 0, a / z.clamp(min=torch.finfo(z.dtype).tiny), 0.0)


def softmax(x, g, *, n, probe, central, eps, seed, causal, row0=0, version=2):
    """The fused estimate for softmax rows: causal (..., T, T) scores, or (..., d) rows without a mask.
    row0: the flat row index of x's first row in the caller's whole score tensor (probes are drawn by it)."""
    t = x.shape[-1]
    lead = x.shape[:-2] if causal else x.shape[:-1]
    if causal:  # fold the (T, T) scores of each (batch, head) to (R, W); graph inputs are fresh tensors
        bh = math.prod(lead)
        gather, unfold, live, lf, rf, rows, cols = _softmax_layout(bh, t, x.device, x.dtype)
        mask = causal_mask(t, x.device)
        xs = x - x.masked_fill(~mask, float("-inf")).amax(-1, keepdim=True)  # (..., T, T) minus each row's max
        xs = xs.reshape(bh, t * t).index_select(1, gather).view(live.shape).masked_fill(~live, float("-inf"))
        gf = g.reshape(bh, t * t).index_select(1, gather).view(live.shape)  # (BH*R, W)
        gl, gr = gf * lf, gf * rf
    else:
        lf, rf, rows, cols = _row_layout(x.numel() // t, t, x.device, x.dtype)
        xs = x.reshape(-1, t) - x.reshape(-1, t).amax(-1, keepdim=True)  # (U, d)
        gl, gr = g.reshape(-1, t) * lf, torch.zeros_like(xs)  # distinct tensors: aliasing means recompiling
    pin = _probe_inputs(probe, seed, n, rows + row0 if row0 else rows, cols, version)
    step = torch.tensor(eps, dtype=x.dtype)
    if central:
        aL, zL, aR, zR, bL, yL, bR, yR = _run("softmax2", xs, gl, gr, lf, rf, pin, n, step)  # (units, n) each
    else:
        aL, zL, aR, zR = _run("softmax", xs, gl, gr, lf, rf, pin, n, step)
        e = torch.exp(xs)  # f(x) itself: the (n + 1)-th query, once per unit
        bL, yL, bR, yR = ((w * e).sum(-1, keepdim=True) for w in (gl, lf, gr, rf))
    scale = 1 / ((2 if central else 1) * eps * n)
    c_left = (_ratio(aL, zL) - _ratio(bL, yL)) * scale
    c_right = (_ratio(aR, zR) - _ratio(bR, yR)) * scale
    est = _run("accumulate", c_left, c_right, lf, pin, n)  # (units, width)
    if causal:
        est = est.view(bh, -1).index_select(1, unfold).view(*lead, t, t)
        return est.masked_fill(~mask, 0.0)
    return est.view(*lead, t)


def swiglu_vjp(x, g, *, n, probe, central, eps, seed, row0=0, version=2):
    """The fused estimate for SwiGLU inputs x (..., 2h) and upstream gradients g (..., h). row0: the flat token
    index of x's first token in the caller's whole batch (probes are drawn by it)."""
    width = x.shape[-1]
    xf, gf = x.reshape(-1, width).clone(), g.reshape(-1, width // 2).clone()  # (U, 2h), (U, h); no views
    ones, _, rows, cols = _row_layout(xf.shape[0], width, x.device, x.dtype)
    pin = _probe_inputs(probe, seed, n, rows + row0 if row0 else rows, cols, version)
    step = torch.tensor(eps, dtype=x.dtype)
    if central:
        diff = _run("swiglu2", xf, gf, pin, n, step)  # (U, n)
    else:  # minus f(x): the (n + 1)-th query
        diff = _run("swiglu", xf, gf, pin, n, step) - (gf * swiglu(xf)).sum(-1, keepdim=True)
    c = diff * (1 / ((2 if central else 1) * eps * n))
    return _run("accumulate", c, torch.zeros_like(c), ones, pin, n).view(x.shape)
