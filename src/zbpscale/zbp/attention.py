"""`ZBPAttention`: causal attention whose score-space softmax is a physical box, without keeping the scores.

Definition: y = softmax(q k^T * scale, causal) v exactly in forward, through fused attention
(`F.scaled_dot_product_attention`), which never writes the (B, H, T, T) scores. Backward recomputes them,
(B*H) slice by slice as flash attention does, and per slice forms

    s = q k^T * scale,  p = softmax(s),  dp = dy v^T,
    ds = the zeroth-order estimate of J_softmax(s)^T dp   (`fused.fast_vjp`, closed or fused, same seed),
    dq = ds k * scale,  dk = ds^T q * scale,  dv = p^T dy,

so the gradients are those of scores -> `ZBPBlock(causal_softmax)` -> p @ v (the same probes: a slice's
rows keep their flat row index in the whole score tensor, `row0`, counted from the micro-batch's first sequence
`seq0` in the global batch where one is given), while only q, k, v are saved. Peak
memory in backward is one slice's few (slice, T, T) fp32 tensors, set by `SLICE_ENTRIES`.

Slices are used where a fast path serves the score core (`applies`); the plain reference path draws its
probes by shape (or per sequence, `seq0`), not by row, so with impl='plain' backward recomputes the whole
(B, H, T, T) at once (still nothing of that size is kept between forward and backward).

Caveats:
  - Under bf16 autocast the forward's scores are not rounded to bf16 before the softmax (fused attention
    keeps them in fp32), while backward recomputes S, P and dy V^T in bf16 as the explicit core computed
    them: the two forms' outputs differ at bf16 rounding, their gradients are the same.
  - The box would still be queried 2n (or n + 1) times per row: only what is stored changes.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from zbpscale.zbp import fused
from zbpscale.zbp.boxes import causal_softmax, measurement_dtype
from zbpscale.zbp.config import ZBPConfig
from zbpscale.zbp.estimator import estimate

SLICE_ENTRIES = 1 << 24  # score entries recomputed at once in backward (64 MB per fp32 tensor)


def applies(cfg: ZBPConfig, q: torch.Tensor) -> bool:
    """Whether a fast path (closed or fused) estimates the score core for these q (B, H, T, hd)."""
    t = q.shape[-2]
    path, _ = fused.choose(causal_softmax, q.new_empty((0, t, t)), cfg)  # 0 rows: only kind, shape, device
    return path is not None


class ZBPAttention(torch.autograd.Function):
    """softmax(q k^T * scale, causal) v; q, k, v: (B, H, T, hd). See the module docstring."""

    @staticmethod
    def forward(ctx, q, k, v, cfg: ZBPConfig, seed: int, seq0: int | None = None):
        device = q.device.type
        # the dtype the explicit core would compute the scores in: autocast's, else the inputs'
        ctx.dtype = torch.get_autocast_dtype(device) if torch.is_autocast_enabled(device) else q.dtype
        ctx.cfg, ctx.seed, ctx.seq0 = cfg, seed, seq0
        ctx.save_for_backward(q, k, v)
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)

    @staticmethod
    def backward(ctx, dy):
        q, k, v = ctx.saved_tensors
        cfg, seed, seq0, dtype = ctx.cfg, ctx.seed, ctx.seq0, ctx.dtype
        B, H, T, hd = q.shape
        scale = hd**-0.5
        qf, kf, vf, dyf = (t.to(dtype).reshape(B * H, T, hd) for t in (q, k, v, dy))
        dq, dk, dv = torch.empty_like(qf), torch.empty_like(kf), torch.empty_like(vf)
        fast = applies(cfg, qf)
        step = max(1, SLICE_ENTRIES // (T * T)) if fast else B * H  # plain: probes are drawn by shape
        with torch.autocast(q.device.type, enabled=False):
            for i in range(0, B * H, step):
                sl = slice(i, i + step)
                s = (qf[sl] @ kf[sl].transpose(-2, -1)) * scale  # (slice, T, T), as the explicit core
                dp = dyf[sl] @ vf[sl].transpose(-2, -1)  # upstream gradient of p
                row0 = ((seq0 or 0) * H + i) * T  # flat index of the slice's first score row (in the global batch)
                est = fused.fast_vjp(causal_softmax, s, dp, cfg, seed, row0=row0) if fast else None
                if est is None:  # the plain path (or a fast back end that failed since `applies`: by shape)
                    whole = step == B * H
                    shape = (B, H, T, T) if whole else s.shape
                    est = estimate(causal_softmax, s.view(shape), dp.view(shape), cfg, seed=seed,
                                   seq0=seq0 if whole else None).view(s.shape)
                ds = est.to(dtype) * scale
                p = causal_softmax(s.to(measurement_dtype(dtype))).to(dtype)  # as `ZBPBlock` queries it
                dv[sl] = p.transpose(-2, -1) @ dyf[sl]
                dq[sl] = ds @ kf[sl]
                dk[sl] = ds.transpose(-2, -1) @ qf[sl]
        return (dq.view(B, H, T, hd).to(q.dtype), dk.view(B, H, T, hd).to(k.dtype), dv.view(B, H, T, hd).to(v.dtype),
                None, None, None)


def zbp_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cfg: ZBPConfig, seed: int,
                  seq0: int | None = None) -> torch.Tensor:
    """Causal attention with a zeroth-order backward through its softmax (`ZBPAttention`); seq0: the global index
    of the batch's first sequence, as `estimate`'s."""
    return ZBPAttention.apply(q, k, v, cfg, seed, seq0)
