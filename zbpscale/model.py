"""OLMo2-style decoder-only transformer with the ZBP physical/digital partition.

Block (reordered norm, the norm sits on each sublayer's output):  h = x + norm(attn(x)); out = h + norm(mlp(h)).
RMSNorm everywhere, QK-norm, SwiGLU, no biases, untied embeddings, learned absolute positions (RoPE as an
option), GPT-2 vocabulary padded to a multiple of 64. With `zbp` set, the score-space softmax and/or the
SwiGLU nonlinearity become black boxes whose backward is the zeroth-order estimate (`zbpscale.zbp`);
everything else stays exact autograd. This module imports nothing distributed and touches no files.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from dataclasses import dataclass
from typing import Callable

import torch
import torch.nn as nn
import torch.nn.functional as F

from zbpscale.errors import ConfigError
from zbpscale.zbp import ZBPClock, ZBPConfig, call_seed, causal_mask, masked_softmax, swiglu, zbp_apply

POS_EMBS = ("learned", "rope")

# A core hook replaces a core's forward (diagnostics use it to see each core's input and upstream
# gradient): hook(layer, core, x, box, mask) -> box output. With a hook set, the core runs what it returns.
CoreHook = Callable[[int, str, torch.Tensor, Callable, "torch.Tensor | None"], torch.Tensor]


@dataclass(frozen=True, kw_only=True)
class ModelConfig:
    """Shape of the model and which of its cores are physical black boxes."""

    n_layer: int
    """Number of transformer blocks."""
    n_head: int
    """Attention heads; must divide d_model."""
    d_model: int
    """Residual stream width."""
    d_ff: int = 0
    """SwiGLU hidden width h (the core's unit has 2h inputs); 0 means 8/3 * d_model rounded up to 64."""
    max_seq_len: int = 1024
    """Context length T (also the size of the learned position table)."""
    vocab_size: int = 50257
    """Tokenizer vocabulary (GPT-2 BPE); the embedding tables are padded to a multiple of 64."""
    pos_emb: str = "learned"
    """Position encoding: learned (absolute table) or rope (rotary on q and k)."""
    rope_theta: float = 10000.0
    """RoPE base frequency (pos_emb == 'rope' only)."""
    norm_eps: float = 1e-6
    """RMSNorm epsilon."""
    init_std: float = 0.02
    """Std of the normal init; output projections use init_std / sqrt(2 * n_layer)."""
    zbp: ZBPConfig | None = None
    """None: the bp arm (exact backprop everywhere). Otherwise the estimator of the physical cores."""

    def __post_init__(self) -> None:
        for name in ("n_layer", "n_head", "d_model", "max_seq_len", "vocab_size"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ConfigError(f"ModelConfig.{name} must be an integer >= 1, got {value!r}")
        if self.d_model % self.n_head:
            raise ConfigError(
                f"ModelConfig.n_head={self.n_head} must divide d_model={self.d_model}",
                hint=f"allowed n_head values: {[h for h in range(1, self.d_model + 1) if self.d_model % h == 0]}",
            )
        if self.pos_emb not in POS_EMBS:
            raise ConfigError(f"ModelConfig.pos_emb must be one of {', '.join(POS_EMBS)}; got {self.pos_emb!r}")
        if self.pos_emb == "rope" and self.head_dim % 2:
            raise ConfigError(f"ModelConfig: rope needs an even head dim, got {self.head_dim}")
        if not isinstance(self.d_ff, int) or self.d_ff < 0:
            raise ConfigError(f"ModelConfig.d_ff must be an integer >= 0 (0 = automatic), got {self.d_ff!r}")
        if self.zbp is not None and not isinstance(self.zbp, ZBPConfig):
            raise ConfigError(f"ModelConfig.zbp must be a ZBPConfig or None, got {type(self.zbp).__name__}")

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_head

    @property
    def hidden(self) -> int:
        return self.d_ff or 64 * math.ceil(8 * self.d_model / 3 / 64)

    @property
    def padded_vocab(self) -> int:
        return 64 * math.ceil(self.vocab_size / 64)


# Named sizes, ordered by parameter count. Ladder sizes are named after their total parameter count;
# the two tiny ones (tests, smoke runs) after their non-embedding count.
SIZES: dict[str, ModelConfig] = {
    "nano": ModelConfig(n_layer=2, n_head=2, d_model=32, max_seq_len=64),  # job-layer tests: fast steps
    "tiny": ModelConfig(n_layer=4, n_head=4, d_model=128, max_seq_len=128),
    "mini": ModelConfig(n_layer=4, n_head=4, d_model=256, max_seq_len=256),
    "s60": ModelConfig(n_layer=12, n_head=6, d_model=384),
    "s124": ModelConfig(n_layer=12, n_head=10, d_model=640),
    "s350": ModelConfig(n_layer=20, n_head=16, d_model=1024),
    "s1b": ModelConfig(n_layer=16, n_head=16, d_model=2048),
}


def model_config(size: str, **overrides) -> ModelConfig:
    """The preset `size`, with any field replaced (e.g. zbp=ZBPConfig(n=16), max_seq_len=256)."""
    if size not in SIZES:
        raise ConfigError(f"unknown size {size!r}; allowed: {', '.join(SIZES)}")
    return dataclasses.replace(SIZES[size], **overrides)


def n_params(cfg: ModelConfig, *, embeddings: bool = True) -> int:
    """Closed-form parameter count. Without embeddings: the token and position tables and the LM head
    are left out (the blocks and the final norm remain)."""
    d, h = cfg.d_model, cfg.hidden
    per_block = 4 * d * d + 3 * d * h + 4 * d  # q k v o, w_in (d x 2h), w_out (h x d); q/k/attn/mlp norms
    body = cfg.n_layer * per_block + d  # + final norm
    if not embeddings:
        return body
    tables = 2 * cfg.padded_vocab * d + (cfg.max_seq_len * d if cfg.pos_emb == "learned" else 0)
    return body + tables


def flops_per_token(cfg: ModelConfig) -> float:
    """Training FLOPs per token of the bp arm: 6 * (matmul parameters) + 12 * L * T * d for attention."""
    matmul_params = n_params(cfg, embeddings=False) + cfg.padded_vocab * cfg.d_model  # blocks + LM head
    return 6.0 * matmul_params + 12.0 * cfg.n_layer * cfg.max_seq_len * cfg.d_model


def size_table() -> str:
    """A plain-text table of the presets: shape and parameter counts."""
    rows = ["size   layers  heads  d_model  d_ff   seq   params   non-embedding"]
    for name, c in SIZES.items():
        rows.append(
            f"{name:<6} {c.n_layer:>6} {c.n_head:>6} {c.d_model:>8} {c.hidden:>5} {c.max_seq_len:>5} "
            f"{n_params(c) / 1e6:>7.1f}M {n_params(c, embeddings=False) / 1e6:>12.2f}M"
        )
    return "\n".join(rows)


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
        if self.physical or self.core_hook is not None:
            s = (q @ k.transpose(-2, -1)) * hd**-0.5  # (B, H, T, T) scores
            mask = causal_mask(T, x.device)
            box = functools.partial(masked_softmax, mask=mask)
            if self.core_hook is not None:
                p = self.core_hook(self.layer, "attn", s, box, mask)
            else:
                seed = call_seed(self.cfg.zbp, self.clock, self.layer, "attn")
                p = zbp_apply(box, s, self.cfg.zbp, seed, mask)
            y = p @ v
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
            a = zbp_apply(swiglu, u, self.cfg.zbp, call_seed(self.cfg.zbp, self.clock, self.layer, "ffn"))
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

    def set_zbp_clock(self, *, step: int, micro: int = 0, rank: int | None = None) -> None:
        """Tell the physical cores where training is, so each call draws its own reproducible probes."""
        self.zbp_clock.step, self.zbp_clock.micro = step, micro
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
