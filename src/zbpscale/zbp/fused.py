"""The fused estimator: the zeroth-order VJP of `estimate_vjp`, computed without materialising probes.

Definition: for the model's two boxes (softmax over a score row's live entries; SwiGLU), per unit (a row,
or a token's [a; b]) and with counter-hash probes u_i (`zbpscale.zbp.counter`, rademacher or gaussian),

    c_i = < g, f(x + eps u_i) - f(x - eps u_i) > / (2 eps)      central: 2n queries
    c_i = < g, f(x + eps u_i) - f(x) > / eps                     forward: n + 1 queries (f(x) queried here)
    est = (1/n) sum_i c_i u_i

the same estimator as the plain path. What differs is the data flow: each query is reduced to its scalar
<g, f(.)> where it is computed (the box output is never written), probes are generated from the hash where
they are used and generated again for sum_i c_i u_i, so nothing of shape (n, ..., d) exists: a unit is read
once per pass. For the softmax row the query is <g, e> / sum(e) with e = exp(x + eps u - m), m the unit's
max over its live entries (softmax is shift invariant), computed honestly at every probe. Masked entries of
a causal score row are never queried: CPU folds rows t and T-1-t into one row of T + 1 entries, the Triton
kernels walk a row only up to its t + 1 live entries.

Back ends of the direct queries (`ZBPConfig.impl='fused'`):
  cuda  Triton kernels (`fused_triton`), one program per unit, fp32 in registers.
  cpu   torch.compile (Inductor) graphs (`fused_cpu`), compiled once per process with dynamic shapes.
For rademacher probes `zbp.closed_form` computes the same estimate from exact closed forms of the queries
(`impl='closed'`). This module also chooses the path (`choose`): a box says what it is (`boxes.SoftmaxBox`,
`boxes.SwiGLUBox`), the config says what was asked; 'auto' takes closed for rademacher, these kernels for
gaussian, both only where the back end runs and, on CPU, from CPU_MIN_N probes; the plain path elsewhere.

Caveats:
  - Probes come from the counter hash, not from `ProbeStream`: for one seed the fused and the plain
    estimates differ, with the same law (unbiased; NSR (d-1)/n rademacher, (d+1)/n gaussian). Tests check
    the laws for both, and the fused kernels against the plain formula on the same materialised probes.
  - Deterministic: the same seed gives bitwise the same estimate (chunk is ignored: there are no chunks);
    entry (unit, column) of probe i is a function of (seed, i, unit, column) alone, whatever n, the tiling
    or the back end, so CPU and GPU draw the same probes.
  - Queries run in fp32 (fp64 on CPU for fp64 inputs), as in the plain path; forward differences carry an
    O(eps) per-call error with zero mean (bias O(eps^2)), as there.
  - Only rademacher and gaussian probes, and only the boxes that say what they are (`boxes.causal_softmax`,
    `row_softmax`, `swiglu`); any other callable, even one computing the same function, takes the plain path.
  - `row0` lets a caller estimate a tensor in pieces (`zbp.attention`'s slices, a micro-batch of the global
    batch: `ZBPConfig.seeding`) with the whole's probes.
  - CPU: the first call compiles (~10 s per graph on 2 cores, cached on disk).

Falling back: a fast path that fails to compile or launch under 'auto' (an old driver refusing the bundled
ptxas's cubin, a compiler error, Inductor without a C++ compiler) falls back in order closed -> fused ->
plain, once per process and device, with one warning line naming the path, the error's first line and what
the next path costs; `failed` keeps why, `used` what each box kind last ran, and `warm_up` runs every core
once before training so that the start record can say which path each core takes. An out-of-memory error is
not a kernel failure and propagates, as does any failure while a stop was requested (a Ctrl-C reaches the
compiler's workers too): a stop is not a broken compiler.
"""

from __future__ import annotations

import sys

import torch

from zbpscale.errors import ConfigError
from zbpscale.zbp import fused_cpu
from zbpscale.zbp.boxes import causal_softmax, measurement_dtype, swiglu
from zbpscale.zbp.config import CLOSED_PROBES, FUSED_PROBES, ZBPConfig
from zbpscale.zbp.fused_cpu import CompileFailed

__all__ = ["CPU_MIN_N", "CompileFailed", "available", "choose", "fast_vjp", "fused_vjp", "warm_up"]

# 'auto' on CPU takes the compiled graphs from this many probes: below it they are no faster than the plain
# path (tools/bench_step.py, tiny model, 2 threads: n=4 1.21x BP fused vs 1.19x plain; n=16 1.40x vs 3.18x)
# and cost a compilation per process (8-30 s). On CUDA 'auto' always takes the Triton kernels.
CPU_MIN_N = 16

NEXT = {"closed": "fused", "fused": "plain"}
"""Where 'auto' goes when a path fails."""
COST = {"fused": "direct queries, n exp per entry instead of O(1): steps ~1.2x slower at n=64 on CPU",
        "plain": "materialises the n probes (n x the core's memory): steps ~2-3x slower at n=16 on CPU"}
"""What falling back to a path costs, for the warning (docs/benchmarks.md)."""
CORE_KINDS = {"attn": "softmax", "ffn": "swiglu"}
"""The model's physical cores and the box kind each one is."""

failed: dict[tuple[str, str], str] = {}
"""(device type, path) -> the first line of why the path failed in this process."""
used: dict[str, str] = {}
"""Box kind -> the path its latest estimate ran: closed, fused or plain."""


def error_line(err: BaseException) -> str:
    """'Type: first line' of an error; Triton's compilation errors say where and what, not their source."""
    what = getattr(err, "error_message", None)
    if what is not None and getattr(err, "node", None) is not None:
        text = f"at {err.node.lineno}:{err.node.col_offset}: {what}"
    else:
        lines = [line.strip() for line in str(err).splitlines() if line.strip()]
        text = lines[0] if lines else "(no message)"
    return f"{type(err).__name__}: {text}"


def box_kind(box, x: torch.Tensor) -> str | None:
    """'softmax' or 'swiglu' where the fast paths implement the box on x, else None. The box says its kind;
    nothing is inferred from how it was built."""
    kind = getattr(box, "kind", None)
    if kind == "swiglu":
        return kind if x.shape[-1] % 2 == 0 else None
    if kind == "softmax":
        return kind if not box.causal or (x.dim() >= 2 and x.shape[-2] == x.shape[-1]) else None
    return None


def available(x: torch.Tensor) -> bool:
    """Whether a fast back end can run on x's device and dtype in this process (CUDA: triton installed)."""
    if x.is_cuda:
        from zbpscale.zbp import fused_triton

        return fused_triton.HAVE_TRITON and x.dtype in (torch.float32, torch.bfloat16, torch.float16)
    return x.device.type == "cpu" and x.is_floating_point()


def choose(box, x: torch.Tensor, cfg: ZBPConfig) -> tuple[str | None, str]:
    """(path, why): path 'closed' or 'fused', or None with the reason ('' where auto just prefers plain).
    'auto' skips the paths that failed in this process (`failed`)."""
    if cfg.impl == "plain":
        return None, ""
    if cfg.impl == "auto":
        path = _working(x.device.type, "closed" if cfg.probe in CLOSED_PROBES else "fused")
        if path == "plain":
            return None, ""
    else:
        path = cfg.impl
        if (x.device.type, path) in failed:
            return None, f"the {path} path failed in this process ({failed[x.device.type, path]})"
    probes = CLOSED_PROBES if path == "closed" else FUSED_PROBES
    if box_kind(box, x) is None:
        return None, "the box is not one the fast paths implement (boxes.causal_softmax, row_softmax, swiglu)"
    if cfg.probe not in probes:
        return None, f"the {path} path draws {' or '.join(probes)} probes, not {cfg.probe!r}"
    if not available(x):
        return None, f"no {path} back end for {x.dtype} on {x.device.type} in this process"
    if cfg.impl == "auto" and x.device.type == "cpu" and cfg.n < CPU_MIN_N:
        return None, ""  # below the CPU break-even the plain path is as fast and compiles nothing
    return path, ""


def fast_vjp(box, x: torch.Tensor, g: torch.Tensor, cfg: ZBPConfig, seed: int, *, row0: int = 0
             ) -> torch.Tensor | None:
    """The closed-form or fused estimate, as `choose` picks; None where auto runs the plain path (also after
    the fast paths failed: see the module's Falling back). impl='fused' or 'closed' insists: it raises where
    its path cannot run. row0: the flat unit index (score row, or SwiGLU token) of x's first unit in a larger
    tensor the caller splits into pieces; the probes of a unit are drawn by its index there, so the pieces'
    estimates are those of the whole."""
    path, why = choose(box, x, cfg)
    if path is None and cfg.impl in ("fused", "closed"):
        raise ConfigError(f"impl={cfg.impl!r} cannot run here: {why}", hint="use impl='auto' or 'plain'")
    kind = box_kind(box, x)
    while path is not None:
        try:
            est = fused_vjp(kind, x, g, cfg, seed, closed=path == "closed", causal=box_causal(box), row0=row0)
        except Exception as err:  # noqa: BLE001 - see _recoverable
            if cfg.impl != "auto" or not _recoverable(err, x):
                raise
            _fall_back(path, x.device.type, err)
            path, _ = choose(box, x, cfg)
            continue
        used[kind] = path
        return est
    if kind is not None:
        used[kind] = "plain"
    return None


def _working(device: str, path: str) -> str:
    """`path`, or the first after it in the fallback order (NEXT) that has not failed on `device`."""
    while (device, path) in failed:
        path = NEXT[path]
    return path


def _recoverable(err: Exception, x: torch.Tensor) -> bool:
    """Whether a fast path's failure is one to fall back from: on CPU the compiler's (`CompileFailed`), on CUDA
    any but running out of memory; never while a stop was requested."""
    from zbpscale import signals

    if signals.received():
        return False
    if x.is_cuda:
        return not isinstance(err, torch.cuda.OutOfMemoryError)
    return isinstance(err, CompileFailed)


def _fall_back(path: str, device: str, err: Exception) -> None:
    """Record the failure and say it, in one line on stderr (once per path and device: later calls skip it)."""
    why = error_line(err.__cause__ if isinstance(err, CompileFailed) and err.__cause__ else err)
    failed[device, path] = why
    nxt = _working(device, path)
    print(f"warning: zbpscale: the {path} ZBP estimator failed on {device} ({why}); the {nxt} path from now "
          f"on in this process ({COST[nxt]})", file=sys.stderr, flush=True)


def paths_used() -> dict[str, str]:
    """{core: path} for the cores whose estimator ran in this process, e.g. {'attn': 'closed', 'ffn': 'fused'}."""
    return {core: used[kind] for core, kind in CORE_KINDS.items() if kind in used}


def warm_up(cfg: ZBPConfig, *, seq_len: int, hidden: int, device: torch.device, dtype: torch.dtype,
            announce=None) -> dict[str, str]:
    """Run each physical core's estimator once, at its real row widths (T for the score rows, 2h for SwiGLU)
    on two units, so that what the fast paths compile (Triton kernels, Inductor graphs) is compiled, and
    what fails falls back, before the first step. `announce()` is called once before a fast path first
    runs (to say that a compile may take a while). Returns `paths_used()`."""
    gen = torch.Generator().manual_seed(0)
    inputs = {"attn": (causal_softmax, (2, seq_len, seq_len), (2, seq_len, seq_len)),
              "ffn": (swiglu, (2, 2, 2 * hidden), (2, 2, hidden))}
    for core, (box, x_shape, g_shape) in inputs.items():
        if getattr(cfg, f"{core}_physical"):
            x, g = (torch.randn(s, generator=gen).to(device, dtype) for s in (x_shape, g_shape))
            if announce is not None and choose(box, x, cfg)[0] is not None:
                announce()
                announce = None
            fast_vjp(box, x, g, cfg, seed=0)  # records the path it ran in `used`
    return paths_used()


def box_causal(box) -> bool:
    return bool(getattr(box, "causal", False))


def fused_vjp(kind: str, x: torch.Tensor, g: torch.Tensor, cfg: ZBPConfig, seed: int, *, closed: bool,
              causal: bool, row0: int = 0) -> torch.Tensor:
    """The fast estimate of J^T g for box `kind` ('softmax' or 'swiglu'), in the measurement dtype.

    x: (..., T, T) causal scores, (..., d) rows, or (..., 2h) SwiGLU inputs; g: upstream gradient of the box
    output. Any float dtype; queries run in fp32 (fp64 for fp64 on CPU). closed: the closed forms
    (rademacher), else the direct queries.
    """
    central = cfg.scheme == "central"
    kw = dict(n=cfg.n, central=central, eps=cfg.eps, seed=seed, version=cfg.probe_hash)
    if x.is_cuda:
        if closed:
            from zbpscale.zbp import closed_triton as back
        else:
            from zbpscale.zbp import fused_triton as back

            kw["probe"] = cfg.probe
        return back.estimate(kind, x, g, causal=causal, row0=row0, **kw)
    dtype = measurement_dtype(x.dtype)
    x, g = x.to(dtype), g.to(dtype)
    if closed:
        from zbpscale.zbp import closed_form as back
    else:
        back = fused_cpu
        kw["probe"] = cfg.probe
    if kind == "swiglu":
        return back.swiglu_vjp(x, g, row0=row0, **kw)
    return back.softmax(x, g, causal=causal, row0=row0, **kw)
