"""`ZBPConfig`: how a ZBP arm estimates the backward pass of its physical (black-box) cores."""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass

from zbpscale.errors import ConfigError

PROBES = ("rademacher", "gaussian", "sphere", "orthogonal")
SCHEMES = ("central", "forward")
CORES = ("both", "attn", "ffn", "none")
IMPLS = ("auto", "plain", "fused", "closed")
SEEDINGS = ("global", "micro")
PROBE_HASHES = (1, 2)
FUSED_PROBES = ("rademacher", "gaussian")
CLOSED_PROBES = ("rademacher",)


@dataclass(frozen=True, kw_only=True)
class ZBPConfig:
    """Settings of the zeroth-order estimator used in place of backprop through the physical cores."""

    n: int = 16
    """Probes per unit (one score row, or one token of the SwiGLU core) and per backward pass."""
    probe: str = "rademacher"
    """Probe family: rademacher (+-1 entries), gaussian, sphere (norm sqrt(d)), orthogonal (scaled basis)."""
    scheme: str = "central"
    """central: 2n queries, per-call error O(eps^2); forward: n queries plus the forward output, per-call
    error O(eps). For symmetric probes (all four families) the O(eps) term has zero mean, so the bias of the
    expectation is O(eps^2) for both schemes; forward differences are noisier per call, not more biased."""
    eps: float = 1e-3
    """Perturbation per probe entry: the box is queried at x +- eps * u."""
    chunk: int = 16
    """Probes per batched query of the plain path; bounds its memory (the score core holds chunk * B*H*T^2
    values per tensor). The fused path holds no probes and ignores it."""
    cores: str = "both"
    """Which cores are physical black boxes: both, attn (score-space softmax), ffn (SwiGLU), none."""
    seed: int = 0
    """Base seed of the probes; per-call seeds derive from it with the step, layer and core (`seeding`)."""
    seeding: str = "global"
    """Where a core call's probes come from (`zbp.block.call_seed`). global: (seed, step, layer, core) and each
    sequence's index in the step's global batch, so that a sequence draws the same probes whatever the number of
    ranks, the accumulation steps and the micro batch (a run on 8 GPUs and on 4 are the same run, to rounding).
    micro: (seed, step, global micro-batch index, layer, core) and the row's place in its micro-batch, so the
    probes follow the micro batch size, which by default (micro_batch 0) follows the world size; what runs made
    before 2026-12-02 (config format < 4) did, kept so that they resume as they were trained."""
    probe_hash: int = 2
    """The counter hash the fused and closed paths draw their probes from (`zbp.counter.word`). 2: no two core
    calls share probes. 1: what runs made before 2026-12-06 (config format < 5) drew, kept so that they resume as
    they were trained: two calls whose seed words were close shared every probe, permuted over their rows. The plain
    path's probes do not depend on it."""
    impl: str = "auto"
    """How estimates are computed. plain: the reference (`estimate_vjp`), chunked, probes from ProbeStream.
    fused: kernels that query the box directly and never materialise probes (`zbp.fused`: Triton on CUDA,
    torch.compile on CPU), with counter-hash probes; rademacher or gaussian only. closed: the same estimate
    from exact closed forms of the queries (`zbp.closed_form`), no transcendental per probe entry; rademacher
    only. auto: the fastest exact path that applies (the model's two boxes and a working back end: closed for
    rademacher, fused for gaussian; on CPU from n=16, the compile's break-even), plain elsewhere."""

    def __post_init__(self) -> None:
        if not isinstance(self.n, int) or self.n < 1:
            raise ConfigError(f"ZBPConfig.n must be an integer >= 1, got {self.n!r}")
        if self.probe not in PROBES:
            raise ConfigError(f"ZBPConfig.probe must be one of {', '.join(PROBES)}; got {self.probe!r}")
        if self.scheme not in SCHEMES:
            raise ConfigError(f"ZBPConfig.scheme must be one of {', '.join(SCHEMES)}; got {self.scheme!r}")
        if not self.eps > 0:
            raise ConfigError(f"ZBPConfig.eps must be > 0, got {self.eps!r}")
        if not isinstance(self.chunk, int) or self.chunk < 1:
            raise ConfigError(f"ZBPConfig.chunk must be an integer >= 1, got {self.chunk!r}")
        if self.cores not in CORES:
            raise ConfigError(f"ZBPConfig.cores must be one of {', '.join(CORES)}; got {self.cores!r}")
        if self.impl not in IMPLS:
            raise ConfigError(f"ZBPConfig.impl must be one of {', '.join(IMPLS)}; got {self.impl!r}")
        if self.probe_hash not in PROBE_HASHES or isinstance(self.probe_hash, bool):
            raise ConfigError(f"ZBPConfig.probe_hash must be one of {', '.join(map(str, PROBE_HASHES))}; got "
                              f"{self.probe_hash!r}")
        if self.seeding not in SEEDINGS:
            raise ConfigError(f"ZBPConfig.seeding must be one of {', '.join(SEEDINGS)}; got {self.seeding!r}")
        if self.impl == "fused" and self.probe not in FUSED_PROBES:
            raise ConfigError(f"ZBPConfig.impl='fused' draws {' or '.join(FUSED_PROBES)} probes, not "
                              f"{self.probe!r}", hint="use impl='auto' or 'plain'")
        if self.impl == "closed" and self.probe not in CLOSED_PROBES:
            raise ConfigError(f"ZBPConfig.impl='closed' needs {' or '.join(CLOSED_PROBES)} probes (u_j^2 = 1), "
                              f"not {self.probe!r}", hint="use impl='auto', 'fused' or 'plain'")

    @property
    def attn_physical(self) -> bool:
        return self.cores in ("both", "attn")

    @property
    def ffn_physical(self) -> bool:
        return self.cores in ("both", "ffn")


_ARM = re.compile(r"zbp_n(?P<n>\d+)(?P<fwd>_fwd)?(?:_(?P<probe>rademacher|gaussian|sphere|orthogonal))?")


def arm_zbp_config(arm: str, **overrides) -> ZBPConfig | None:
    """The estimator settings of a named training arm: `bp` -> None (exact backprop), `zbp_n16` -> n=16.

    Names: `bp`, `zbp_n<N>`, optionally followed by `_fwd` (forward differences) and `_<probe>`,
    e.g. `zbp_n4_fwd`, `zbp_n64_gaussian`. `overrides` replace any other field.
    """
    if arm == "bp":
        if overrides:
            raise ConfigError(f"arm 'bp' takes no ZBP settings, got {sorted(overrides)}")
        return None
    match = _ARM.fullmatch(arm)
    if match is None:
        raise ConfigError(
            f"unknown arm {arm!r}",
            hint="arms are 'bp' or 'zbp_n<N>[_fwd][_<probe>]', e.g. zbp_n16, zbp_n4_fwd, zbp_n64_gaussian",
        )
    fields = {"n": int(match["n"]), "scheme": "forward" if match["fwd"] else "central"}
    if match["probe"]:
        fields["probe"] = match["probe"]
    return dataclasses.replace(ZBPConfig(**fields), **overrides)


def arm_name(zbp: ZBPConfig | None) -> str:
    """The arm's name of estimator settings, the inverse of `arm_zbp_config`: None -> `bp`, n=16 -> `zbp_n16`,
    forward differences `_fwd`, a probe other than rademacher `_<probe>`. Settings no name carries (cores, eps,
    impl, ...) are left out: a run's config holds them."""
    if zbp is None:
        return "bp"
    return (f"zbp_n{zbp.n}" + ("_fwd" if zbp.scheme == "forward" else "")
            + (f"_{zbp.probe}" if zbp.probe != ZBPConfig.probe else ""))
