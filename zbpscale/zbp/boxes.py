"""The two physical black boxes of the network, as per-unit functions the estimator can query.

- score-space attention core: a unit is one row of causal scores S (B, H, T, T); the box is the row-wise
  softmax over the row's live (causal) entries. Row t has d = t + 1 live entries.
- SwiGLU core: a unit is one token's pre-activation u = [a; b] in R^{2h}; the box is silu(a) * b, d = 2h.

Both act on the last dimension only and broadcast over any leading dimensions, as `estimate_vjp` needs.
"""

from __future__ import annotations

import functools

import torch
import torch.nn.functional as F


@functools.lru_cache(maxsize=16)
def _causal_mask(t: int, device: torch.device) -> torch.Tensor:
    return torch.ones(t, t, dtype=torch.bool, device=device).tril()


def causal_mask(t: int, device: torch.device | str = "cpu") -> torch.Tensor:
    """(T, T) boolean mask of the live score entries: row t sees columns 0..t."""
    return _causal_mask(t, torch.device(device))


def masked_softmax(s: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """Row-wise softmax over the live entries of s (..., T); masked entries come out exactly 0."""
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf"))
    return torch.softmax(s, dim=-1)


def swiglu(u: torch.Tensor) -> torch.Tensor:
    """silu(a) * b for u = [a; b] along the last dimension: (..., 2h) -> (..., h)."""
    a, b = u.chunk(2, dim=-1)
    return F.silu(a) * b
