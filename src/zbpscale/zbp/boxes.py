"""The two physical black boxes of the network, as per-unit functions the estimator can query.

- score-space attention core: a unit is one row of causal scores S (B, H, T, T); the box is the row-wise
  softmax over the row's live (causal) entries. Row t has d = t + 1 live entries.
- SwiGLU core: a unit is one token's pre-activation u = [a; b] in R^{2h}; the box is silu(a) * b, d = 2h.

Both act on the last dimension only and broadcast over any leading dimensions, as `estimate_vjp` needs.
Each box says what it is (`kind`, and for the softmax whether it is causal), so the estimator picks its
fast paths from that instead of inspecting the callable: `causal_softmax` is the model's score core,
`row_softmax` the same box on unmasked rows, `swiglu` the SwiGLU core. Any other callable is a box too,
served by the plain path. Queries run in `measurement_dtype`.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import ClassVar

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


def measurement_dtype(dtype: torch.dtype) -> torch.dtype:
    """Queries run in fp32, or in fp64 when the input already is fp64."""
    return torch.float64 if dtype == torch.float64 else torch.float32


@dataclass(frozen=True)
class SoftmaxBox:
    """Row-wise softmax over each row's live entries: all of them, or, causal, columns 0..t of row t of a
    (..., T, T) score block."""

    causal: bool
    """Whether the rows are causal score rows (the last two dimensions are (T, T))."""
    kind: ClassVar[str] = "softmax"

    def mask(self, s: torch.Tensor) -> torch.Tensor | None:
        """The (T, T) live mask of scores s, or None."""
        return causal_mask(s.shape[-1], s.device) if self.causal else None

    def __call__(self, s: torch.Tensor) -> torch.Tensor:
        return masked_softmax(s, self.mask(s))


@dataclass(frozen=True)
class SwiGLUBox:
    """silu(a) * b for u = [a; b] along the last dimension: (..., 2h) -> (..., h)."""

    kind: ClassVar[str] = "swiglu"

    def mask(self, u: torch.Tensor) -> None:
        return None

    def __call__(self, u: torch.Tensor) -> torch.Tensor:
        a, b = u.chunk(2, dim=-1)
        return F.silu(a) * b


causal_softmax = SoftmaxBox(causal=True)
row_softmax = SoftmaxBox(causal=False)
swiglu = SwiGLUBox()
