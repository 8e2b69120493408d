"""Random probe directions for the zeroth-order estimator, regenerated from a seed, never stored.

A probe is a tensor of the input's shape `(..., d)`: one direction per *unit* (the last dimension).
Probe `i` of a call depends only on `(seed, i)` (and, for `orthogonal`, on probes `0..i` of the same
call), so the same seed gives the same probes whatever the chunk size used to draw them; and on the dtype they are
drawn in (torch's normal draws differ between fp32 and fp64; +-1 entries do not): training measures in fp32.

Families, each with E[u u^T] = I on a unit's live subspace of dimension d:
  rademacher   i.i.d. +-1 entries                              NSR (d-1)/n
  gaussian     i.i.d. N(0, 1) entries                          NSR (d+1)/n
  sphere       uniform direction, norm sqrt(d)                 NSR (d-1)/n
  orthogonal   blocks of a random orthonormal basis * sqrt(d)  NSR (d-n)/n for n <= d; n > d cycles
               through fresh full bases (a whole basis reconstructs the VJP exactly)
An optional boolean `mask` marks the live entries of each unit; masked entries get zero probe, and d is
counted per unit over the live entries only.
"""

from __future__ import annotations

import torch

from zbpscale.errors import ConfigError
from zbpscale.zbp.config import PROBES

_MASK64 = (1 << 64) - 1


def mix_seed(*parts: int) -> int:
    """Hash integers into one 63-bit seed (splitmix64 over the parts): equal parts, equal seed."""
    h = 0x9E3779B97F4A7C15
    for part in parts:
        h = (h ^ (int(part) & _MASK64)) & _MASK64
        h = (h + 0x9E3779B97F4A7C15) & _MASK64
        h = ((h ^ (h >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
        h = ((h ^ (h >> 27)) * 0x94D049BB133111EB) & _MASK64
        h ^= h >> 31
    return h & ((1 << 63) - 1)


def theory_nsr(probe: str, d: int, n: int) -> float:
    """E|est - v|^2 / |v|^2 of the exact-difference estimator with n probes in dimension d."""
    if probe == "gaussian":
        return (d + 1) / n
    if probe in ("rademacher", "sphere"):
        return (d - 1) / n
    if probe == "orthogonal":
        # n = k*d + r: k full bases plus r columns of a fresh one; est = (d/n) (k v + P_r v).
        k, r = divmod(n, d)
        a = d / n
        w = a * k - 1.0
        return w * w + (2 * w * a + a * a) * r / d
    raise ConfigError(f"unknown probe kind {probe!r}; allowed: {', '.join(PROBES)}")


class ProbeStream:
    """Draws the probes of one estimator call, chunk by chunk: `next(k)` -> (k, *shape).

    Probe i comes from a generator seeded with mix_seed(seed, i), so chunking never changes a probe. With
    `seq0` set, the first dimension is sequences of a larger batch, the first of them sequence seq0: sequence
    b's slice of probe i comes from mix_seed(seed, i, seq0 + b), so it does not depend on which other sequences
    share the call (one draw per sequence and probe instead of one per probe).
    `orthogonal` keeps the current basis block of every unit (units x d x min(n, d) values) between
    chunks: Gram-Schmidt (two passes) of fresh Gaussian vectors restricted to the unit's live entries.
    """

    def __init__(
        self,
        kind: str,
        shape: torch.Size | tuple[int, ...],
        *,
        n: int,
        seed: int,
        mask: torch.Tensor | None = None,
        device: torch.device | str = "cpu",
        dtype: torch.dtype = torch.float32,
        seq0: int | None = None,
    ):
        if kind not in PROBES:
            raise ConfigError(f"unknown probe kind {kind!r}; allowed: {', '.join(PROBES)}")
        self.kind, self.shape, self.n, self.seed, self.seq0 = kind, torch.Size(shape), n, seed, seq0
        self.device, self.dtype = torch.device(device), dtype
        self.i = 0
        self._gen = torch.Generator(device=self.device)
        d = self.shape[-1]
        if mask is None:
            self.mask = None
            self.d_live = torch.full(self.shape[:-1], d, device=self.device, dtype=dtype)
        else:
            self.mask = mask.to(device=self.device, dtype=torch.bool)
            live = torch.broadcast_to(self.mask, self.shape)
            self.d_live = live.sum(-1).to(dtype)  # (...,) live entries per unit
            self.mask = self.mask.to(dtype)
        self._scale = self.d_live.clamp(min=1).sqrt().unsqueeze(-1)  # (..., 1)
        if kind == "orthogonal":
            units = self.d_live.numel()
            self._cols = min(d, n)
            self._basis = torch.zeros(units, d, self._cols, device=self.device, dtype=dtype)
            self._period = self.d_live.reshape(units).clamp(min=1).long()

    def next(self, k: int) -> torch.Tensor:
        """The next k probes, stacked on a new leading dimension."""
        return torch.stack([self._one() for _ in range(k)])

    def _draw(self, shape: torch.Size, seed: int) -> torch.Tensor:
        """Rademacher or (every other family) standard normal entries of `shape` from `seed`."""
        self._gen.manual_seed(seed)
        if self.kind == "rademacher":
            u = torch.randint(0, 2, shape, generator=self._gen, device=self.device, dtype=self.dtype)
            return u.mul_(2).sub_(1)
        return torch.randn(shape, generator=self._gen, device=self.device, dtype=self.dtype)

    def _one(self) -> torch.Tensor:
        kind = self.kind
        if self.seq0 is None:
            u = self._draw(self.shape, mix_seed(self.seed, self.i))
        else:  # one draw per sequence: (seq, *rest)
            u = torch.stack([self._draw(self.shape[1:], mix_seed(self.seed, self.i, self.seq0 + b))
                             for b in range(self.shape[0])])
        if self.mask is not None:
            u = u * self.mask
        if kind == "sphere":
            u = u / u.norm(dim=-1, keepdim=True).clamp(min=torch.finfo(self.dtype).tiny) * self._scale
        elif kind == "orthogonal":
            u = self._orthogonal(u)
        self.i += 1
        return u

    def _orthogonal(self, g: torch.Tensor) -> torch.Tensor:
        d = self.shape[-1]
        g = g.reshape(-1, d)  # (units, d)
        col = self.i % self._period  # (units,) position inside the unit's current basis block
        self._basis.mul_((col != 0).to(self.dtype).view(-1, 1, 1))  # a new block starts afresh
        for _ in range(2):  # classical Gram-Schmidt, twice, is orthogonal to working precision
            coef = torch.einsum("udc,ud->uc", self._basis, g)
            g = g - torch.einsum("udc,uc->ud", self._basis, coef)
        q = g / g.norm(dim=-1, keepdim=True).clamp(min=torch.finfo(self.dtype).tiny)
        index = (col % self._cols).view(-1, 1, 1).expand(-1, d, 1)
        self._basis.scatter_(2, index, q.unsqueeze(-1))
        return q.reshape(self.shape) * self._scale

