"""Counter-based probes: every probe entry is a pure function of (seed, probe index, unit, column).

The fused estimator (`zbpscale.zbp.fused`) generates probes inside its kernels from this hash instead of
drawing them from a torch generator, so nothing of shape (n, ..., d) is ever written. The same functions,
run eagerly, are the reference the fused kernels are tested against; the Triton kernels implement the same
arithmetic on uint32 (`fused_triton._word`), so CPU and GPU draw identical probes for the same seed.

  mix(h)         = h ^= h >> 16; h *= 0x45D9F3B; h ^= h >> 16; h *= 0x45D9F3B; h ^= h >> 16   (mod 2^32)
  word(s, r, c)  = mix(mix(h1 ^ c) ^ h2),  h1 = mix(s ^ r), h2 = mix(h1 ^ mix(s))
                   r: unit (row) index mod 2^32, c: column index (ZBPConfig.probe_hash 2; hash 1, what runs made
                   before 2026-12-06 drew: mix(mix(mix(s ^ r) ^ c)))
  rademacher     entry of probe i = +1 if bit (i mod 32) of word(s_{i // 32}, r, c) is set, else -1,
                 with s_w = mix_seed(seed, w) mod 2^32: one hash serves 32 probes
  gaussian       Box-Muller from the two 16-bit halves of mix(word(s_base, r, c) ^ s_i), s_base = mix_seed(seed, -1):
                 one hash per entry and call, one mix per probe entry (tails cut at 4.9 sigma)

One hash word serves 32 rademacher probes, so its 32 bits must be independent of each other, also between
two columns of one unit. With two rounds after the column, mix(mix(s ^ r) ^ c), they were not: the final
`h ^= h >> 16` left bit k and bit k + 16 of w_a ^ w_b correlated for nearby columns a, b, and above n = 16
Var(sum_i u_ia u_ib) / n came out 0.91-1.05 instead of 1 (E[u u^T] = I held; the NSR law bent, a two-entry
causal row measured 0.90x theory at n = 64). The third round makes every bit of the word independent to the
precision tests/test_fused.py measures (100 000 rows, n up to 128); it costs one mix per 32 probe entries.

Two calls must not share probes either. Hash 1 began with s ^ r: row r of a call with seed word s had the probes of
row r ^ s ^ s' of a call with seed word s', so two calls whose seed words differ by less than their row count drew
the same probes, permuted over their rows (two attention calls of s1b, 2^24 rows each: one pair in 2^8; some pair
of attention layers of a step shared every probe in about a third of s1b's steps). And a row's state before its
column was one 32-bit word: among 2^24 rows of two calls, 2^16 pairs of rows meet by chance there. Hash 2 carries
two words per row into the column, (h1, h2), which no two (seed word, row) pairs share (h1 equal means s ^ r equal,
so s differs, and so does h2): no row of any call draws another row's probes, at the cost of one mix more per row
(the Triton kernels, whose row is one number a program) or per word (the CPU graphs, where each entry carries its
row: 4 for 3).

Units and columns are those of the box's input as the caller lays it out (the score core: unit = flat row
index over (B, H, T), column = key position), not of any internal re-layout, so the probe of an entry does
not depend on how a kernel tiles, folds or chunks the work. Integers are uint32 values held in int64
tensors: every product stays below 2^63, so CPU code never relies on overflow.
"""

from __future__ import annotations

import math

import torch

from zbpscale.zbp.probes import mix_seed

M32 = 0xFFFFFFFF
MUL = 0x45D9F3B
WORD_BITS = 32


def mix(h: torch.Tensor) -> torch.Tensor:
    """A 32-bit integer hash (a bijection on [0, 2^32)) of int64 tensors holding uint32 values."""
    h = ((h ^ (h >> 16)) * MUL) & M32
    h = ((h ^ (h >> 16)) * MUL) & M32
    return h ^ (h >> 16)


def word(s: torch.Tensor, row: torch.Tensor, col: torch.Tensor, version: int = 2) -> torch.Tensor:
    """32 independent random bits per (seed word, row, column), broadcasting over all three (int64 in and out);
    `version`: ZBPConfig.probe_hash."""
    if version == 1:
        return mix(mix(mix(s ^ (row & M32)) ^ (col & M32)))
    h1 = mix(s ^ (row & M32))
    return mix(mix(h1 ^ (col & M32)) ^ mix(h1 ^ mix(s)))


def seed_words(seed: int, count: int, device: torch.device | str = "cpu", *, first: int = 0) -> torch.Tensor:
    """(count,) int64: the 32-bit seeds s_first .. s_(first+count-1) of one call."""
    return torch.tensor([mix_seed(seed, first + w) & M32 for w in range(count)], dtype=torch.int64, device=device)


def call_seeds(probe: str, seed: int, n: int, device: torch.device | str = "cpu"):
    """(word seeds, probe seeds) of a call: words hash (seed word, row, column) into the per-entry words;
    probe seeds (gaussian only, else None) are mixed into the one word per entry, one per probe."""
    if probe == "rademacher":
        return seed_words(seed, math.ceil(n / WORD_BITS), device), None
    return seed_words(seed, 1, device, first=-1), seed_words(seed, n, device)


def rademacher_sign(w: torch.Tensor, bit: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """+-1 from bit `bit` of the words w (broadcasting)."""
    return (((w >> bit) & 1) * 2 - 1).to(dtype)


def gaussian(base: torch.Tensor, s: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """N(0, 1) entries from per-entry words `base` and probe seeds `s` (broadcasting): Box-Muller on the
    two 16-bit halves of mix(base ^ s), each a uniform in (0, 1)."""
    h = mix(base ^ s)
    u1 = ((h >> 16).to(dtype) + 0.5) * 2.0**-16
    u2 = ((h & 0xFFFF).to(dtype) + 0.5) * 2.0**-16
    return torch.sqrt(-2.0 * torch.log(u1)) * torch.cos((2 * math.pi) * u2)


def probes(probe: str, seed: int, n: int, rows: torch.Tensor, cols: torch.Tensor,
           dtype: torch.dtype = torch.float32, version: int = 2) -> torch.Tensor:
    """The n probes of a call, materialised: (n, *broadcast(rows, cols).shape). Reference only.

    rows, cols: int64 index tensors of each entry's unit and column (broadcast against each other); `version`:
    the hash's (ZBPConfig.probe_hash).
    """
    words, seeds = call_seeds(probe, seed, n, rows.device)
    i = torch.arange(n, device=rows.device)
    extra = (1,) * len(torch.broadcast_shapes(rows.shape, cols.shape))
    if probe == "rademacher":
        w = word(words[i // WORD_BITS].view(n, *extra), rows, cols, version)
        return rademacher_sign(w, (i % WORD_BITS).view(n, *extra), dtype)
    return gaussian(word(words[0], rows, cols, version), seeds.view(n, *extra), dtype)
