"""OLMo2-style decoder-only transformer with the ZBP physical/digital partition.

Block (reordered norm, the norm sits on each sublayer's output):  h = x + norm(attn(x)); out = h + norm(mlp(h)).
RMSNorm everywhere, QK-norm, SwiGLU, no biases, untied embeddings, learned absolute positions (RoPE as an
option), GPT-2 vocabulary padded to a multiple of 64. With `zbp` set, the score-space softmax and/or the
SwiGLU nonlinearity become black boxes whose backward is the zeroth-order estimate (`zbpscale.zbp`);
everything else stays exact autograd. This module imports nothing distributed and touches no files.
"""

from __future__ import annotations

import math
from typing import Callable

import torch
import torch.nn as nn
import torch.nn.functional as F

from zbpscale.errors import ConfigError
from zbpscale.run.config import ModelConfig
from zbpscale.zbp import ZBPClock, call_seed, call_seq0, causal_mask, causal_softmax, swiglu, zbp_apply
from zbpscale.zbp.attention import zbp_attention

# A core hook replaces a core's forward (diagnostics use it to see each core's input and upstream
# gradient): hook(layer, core, x, box, mask) -> box output. With a hook set, the core runs what it returns.
CoreHook = Callable[[int, str, torch.Tensor, Callable, "torch.Tensor | None"], torch.Tensor]


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.rms_norm(x, self.weight.shape, self.weight, self.eps)


def _rope_tables(cfg: ModelConfig) -> tuple[torch.Tensor, torch.Tensor]:
    half = cfg.head_dim // 2
    inv_freq = cfg.rope_theta ** (-torch.arange(half, dtype=torch.float64) / half)
    angles = torch.outer(torch.arange(cfg.max_seq_len, dtype=torch.float64), inv_freq)  # (T, hd/2)
    return angles.cos().float(), angles.sin().float()


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotary embedding on (B, H, T, hd), rotating the two halves of each head as pairs."""
    x1, x2 = x.chunk(2, dim=-1)
    cos, sin = cos.to(x.dtype), sin.to(x.dtype)
    return torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1)


class Attention(nn.Module):
    def __init__(self, cfg: ModelConfig, layer: int, clock: ZBPClock):
        super().__init__()
        d = cfg.d_model
        self.cfg, self.layer, self.clock = cfg, layer, clock
        self.q, self.k, self.v, self.o = (nn.Linear(d, d, bias=False) for _ in range(4))
        self.q_norm, self.k_norm = RMSNorm(d, cfg.norm_eps), RMSNorm(d, cfg.norm_eps)
        self.physical = cfg.zbp is not None and cfg.zbp.attn_physical
        self.core_hook: CoreHook | None = None

    def forward(self, x: torch.Tensor, rope: tuple[torch.Tensor, torch.Tensor] | None) -> torch.Tensor:
        B, T, C = x.shape
        H, hd = self.cfg.n_head, self.cfg.head_dim
        q = self.q_norm(self.q(x)).view(B, T, H, hd).transpose(1, 2)  # (B, H, T, hd)
        k = self.k_norm(self.k(x)).view(B, T, H, hd).transpose(1, 2)
        v = self.v(x).view(B, T, H, hd).transpose(1, 2)
        if rope is not None:
            cos, sin = rope[0][:T], rope[1][:T]
            q, k = _rotate(q, cos, sin), _rotate(k, cos, sin)
        if self.core_hook is not None:
            s = (q @ k.transpose(-2, -1)) * hd**-0.5  # (B, H, T, T) scores
            y = self.core_hook(self.layer, "attn", s, causal_softmax, causal_mask(T, x.device)) @ v
        elif self.physical:  # scores recomputed in backward, never stored (zbp.attention)
            zbp = self.cfg.zbp
            seed = call_seed(zbp, self.clock, self.layer, "attn")
            y = zbp_attention(q, k, v, zbp, seed, call_seq0(zbp, self.clock))
        else:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.o(y.transpose(1, 2).reshape(B, T, C))


class MLP(nn.Module):
    def __init__(self, cfg: ModelConfig, layer: int, clock: ZBPClock):
        super().__init__()
        self.cfg, self.layer, self.clock = cfg, layer, clock
        self.w_in = nn.Linear(cfg.d_model, 2 * cfg.hidden, bias=False)  # u = [a; b]
        self.w_out = nn.Linear(cfg.hidden, cfg.d_model, bias=False)
        self.physical = cfg.zbp is not None and cfg.zbp.ffn_physical
        self.core_hook: CoreHook | None = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        u = self.w_in(x)  # (B, T, 2h)
        if self.core_hook is not None:
            a = self.core_hook(self.layer, "ffn", u, swiglu, None)
        elif self.physical:
            zbp = self.cfg.zbp
            seed = call_seed(zbp, self.clock, self.layer, "ffn")
            a = zbp_apply(swiglu, u, zbp, seed, seq0=call_seq0(zbp, self.clock))
        else:
            a = swiglu(u)
        return self.w_out(a)


class Block(nn.Module):
    def __init__(self, cfg: ModelConfig, layer: int, clock: ZBPClock):
        super().__init__()
        self.attn, self.attn_norm = Attention(cfg, layer, clock), RMSNorm(cfg.d_model, cfg.norm_eps)
        self.mlp, self.mlp_norm = MLP(cfg, layer, clock), RMSNorm(cfg.d_model, cfg.norm_eps)

    def forward(self, x: torch.Tensor, rope=None) -> torch.Tensor:
        h = x + self.attn_norm(self.attn(x, rope))
        return h + self.mlp_norm(self.mlp(h))


class Transformer(nn.Module):
    """The decoder. `forward(idx, targets)` -> (logits (B, T, V_padded), mean cross-entropy or None)."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.cfg = cfg
        self.zbp_clock = ZBPClock()
        self.wte = nn.Embedding(cfg.padded_vocab, cfg.d_model)
        self.wpe = nn.Embedding(cfg.max_seq_len, cfg.d_model) if cfg.pos_emb == "learned" else None
        self.blocks = nn.ModuleList(Block(cfg, i, self.zbp_clock) for i in range(cfg.n_layer))
        self.norm_f = RMSNorm(cfg.d_model, cfg.norm_eps)
        self.lm_head = nn.Linear(cfg.d_model, cfg.padded_vocab, bias=False)
        if cfg.pos_emb == "rope":
            cos, sin = _rope_tables(cfg)
            self.register_buffer("rope_cos", cos, persistent=False)
            self.register_buffer("rope_sin", sin, persistent=False)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        std = self.cfg.init_std
        for name, p in self.named_parameters():
            if p.dim() == 1:
                nn.init.ones_(p)  # norm weights
            elif name.endswith(("o.weight", "w_out.weight")):
                nn.init.normal_(p, std=std / math.sqrt(2 * self.cfg.n_layer))
            else:
                nn.init.normal_(p, std=std)

    def set_zbp_clock(self, *, step: int, micro: int = 0, rank: int | None = None, seq0: int = 0) -> None:
        """Tell the physical cores where training is, so each call draws its own reproducible probes: the step,
        the micro-batch (its global index, and seq0: the global batch's index of its first sequence)."""
        self.zbp_clock.step, self.zbp_clock.micro, self.zbp_clock.seq0 = step, micro, seq0
        if rank is not None:
            self.zbp_clock.rank = rank

    def forward(self, idx: torch.Tensor, targets: torch.Tensor | None = None):
        B, T = idx.shape
        if T > self.cfg.max_seq_len:
            raise ConfigError(f"sequence length {T} exceeds ModelConfig.max_seq_len={self.cfg.max_seq_len}")
        x = self.wte(idx)  # (B, T, d)
        rope = None
        if self.wpe is not None:
            x = x + self.wpe(torch.arange(T, device=idx.device))
        else:
            rope = (self.rope_cos, self.rope_sin)
        for block in self.blocks:
            x = block(x, rope)
        logits = self.lm_head(self.norm_f(x))  # (B, T, V_padded)
        loss = None
        if targets is not None:
            flat = logits.view(-1, logits.size(-1))
            loss = F.cross_entropy(flat.to(torch.promote_types(flat.dtype, torch.float32)), targets.reshape(-1))
        return logits, loss
