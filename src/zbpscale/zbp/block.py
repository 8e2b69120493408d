"""`ZBPBlock`: an autograd Function whose forward queries a black box once and whose backward is the
zeroth-order estimate of its VJP, plus the seed bookkeeping that makes every call reproducible.

The Function saves the input, (for forward differences) the fp32 output, one integer seed and the index of its
first sequence in the step's global batch (`seq0`); the probes are regenerated from them in backward, never
stored. With `ZBPConfig.seeding` 'global' the seed of a call derives from (base seed, step, layer, core) and each
sequence draws its probes by its index in the global batch, so a sequence's probes do not depend on which rank,
micro-batch or micro batch size computed it; with 'micro' (runs before 2026-12-02) the seed derives from (base
seed, step, global micro-batch index, layer, core, rank) and the probes are drawn by the micro-batch's shape.
Either way calls differ from each other and a rerun of the same step draws the same probes; on the fused and
closed paths two calls share no probes since the counter hash's version 2 (`ZBPConfig.probe_hash`, zbp/counter.py).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from zbpscale.zbp.boxes import measurement_dtype
from zbpscale.zbp.config import ZBPConfig
from zbpscale.zbp.estimator import Box, estimate
from zbpscale.zbp.probes import mix_seed

CORE_IDS = {"attn": 0, "ffn": 1}


@dataclass
class ZBPClock:
    """Where training is, for probe seeds; the trainer advances it, the model's cores read it."""

    step: int = 0
    """Optimizer step."""
    micro: int = 0
    """Micro-batch index inside the step (gradient accumulation)."""
    rank: int = 0
    """Data-parallel rank (0 when the trainer maps every micro-batch to a global index instead)."""
    seq0: int = 0
    """Index in the step's global batch of the micro-batch's first sequence (seeding 'global')."""


def call_seed(cfg: ZBPConfig, clock: ZBPClock, layer: int, core: str) -> int:
    """The probe seed of one core call (`ZBPConfig.seeding`; 'global' leaves the sequences to `call_seq0`)."""
    if cfg.seeding == "micro":
        return mix_seed(cfg.seed, clock.step, clock.micro, layer, CORE_IDS[core], clock.rank)
    return mix_seed(cfg.seed, clock.step, layer, CORE_IDS[core])


def call_seq0(cfg: ZBPConfig, clock: ZBPClock) -> int | None:
    """The global index of a core call's first sequence, from which each sequence's probes are drawn (seeding
    'global'); None: the probes are drawn by the micro-batch's shape (seeding 'micro')."""
    return clock.seq0 if cfg.seeding == "global" else None


class ZBPBlock(torch.autograd.Function):
    """y = f(x) exactly; dL/dx = estimate_vjp(f, x, dL/dy). Queries in fp32 even under autocast."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, f: Box, mask: torch.Tensor | None, cfg: ZBPConfig, seed: int,
                seq0: int | None = None):
        with torch.autocast(x.device.type, enabled=False):
            y = f(x.to(measurement_dtype(x.dtype)))
        ctx.f, ctx.mask, ctx.cfg, ctx.seed, ctx.seq0 = f, mask, cfg, seed, seq0
        if cfg.scheme == "forward":
            ctx.save_for_backward(x, y)
        else:
            ctx.save_for_backward(x)
        return y.to(x.dtype)

    @staticmethod
    def backward(ctx, grad_y: torch.Tensor):
        x, *rest = ctx.saved_tensors
        cfg = ctx.cfg
        grad_x = estimate(ctx.f, x, grad_y, cfg, seed=ctx.seed, mask=ctx.mask, y=rest[0] if rest else None,
                          seq0=ctx.seq0)
        return grad_x.to(x.dtype), None, None, None, None, None


def zbp_apply(f: Box, x: torch.Tensor, cfg: ZBPConfig, seed: int, mask: torch.Tensor | None = None,
              seq0: int | None = None):
    """Apply the black box f to x with a zeroth-order backward (see `ZBPBlock`); seq0 as `estimate`'s."""
    return ZBPBlock.apply(x, f, mask, cfg, seed, seq0)
