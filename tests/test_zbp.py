"""The ZBP method against exact autograd.

Compared: the estimator's noise-to-signal ratio with the closed-form law of each probe family, the mean of
many estimates with the exact VJP (unbiasedness), estimates drawn with different chunk sizes with each
other, the autograd block's backward with the estimator, and bf16-autocast estimates with fp32 ones.
Exact VJPs come from torch.autograd on the same box. Laws and unbiasedness are checked for the plain path
and, for the probe families they draw, for the fast ones (`impl`: fused for rademacher and gaussian,
closed for rademacher); the fast paths against the plain formula on the same probes are in
tests/test_fused.py and tests/test_closed_form.py.
"""

import dataclasses
import math

import pytest
import torch

from zbpscale.errors import ConfigError
from zbpscale.zbp import (
    PROBES,
    ProbeStream,
    ZBPClock,
    ZBPConfig,
    arm_name,
    arm_zbp_config,
    call_seed,
    call_seq0,
    causal_mask,
    causal_softmax,
    estimate,
    estimate_vjp,
    nsr,
    row_softmax,
    swiglu,
    theory_nsr,
    zbp_apply,
)

# (probe, impl): every family on the plain path, the two the fused kernels draw on the fused path, rademacher
# on the closed-form path
PROBE_IMPLS = [(p, "plain") for p in PROBES] + [("rademacher", "fused"), ("gaussian", "fused"),
                                                ("rademacher", "closed")]
IMPLS = ["plain", "fused", "closed"]


def units_for(d: int) -> int:
    """Units per measurement: the mean per-unit NSR then has a spread of ~1-3% (tolerance 10%)."""
    return max(1024, 131072 // d)


softmax_rows = row_softmax  # a box that says what it is: the fast paths serve it


def make_case(core: str, d: int, units: int | None = None, seed: int = 0):
    """(box, x, g, exact J^T g) for `units` independent units of dimension d, in fp32."""
    gen = torch.Generator().manual_seed(seed)
    units = units or units_for(d)
    if core == "attn":  # score rows of length d -> softmax
        f, x, g = softmax_rows, 2 * torch.randn(units, d, generator=gen), torch.randn(units, d, generator=gen)
    else:  # SwiGLU tokens: u = [a; b] in R^d -> silu(a) * b in R^(d/2)
        f, x, g = swiglu, torch.randn(units, d, generator=gen), torch.randn(units, d // 2, generator=gen)
    return f, x, g, exact_vjp(f, x, g)


def exact_vjp(f, x, g):
    x = x.detach().clone().requires_grad_(True)
    (v,) = torch.autograd.grad(f(x), x, g)
    return v


@pytest.mark.parametrize("core", ["attn", "ffn"])
@pytest.mark.parametrize("d", [32, 128, 512])
@pytest.mark.parametrize("n", [4, 16, 64])
@pytest.mark.parametrize("probe, impl", PROBE_IMPLS)
def test_nsr_matches_theory(core, d, n, probe, impl):
    f, x, g, v = make_case(core, d)
    est = estimate_vjp(f, x, g, n=n, probe=probe, seed=1, chunk=16, impl=impl)
    measured, theory = nsr(est, v, per_unit=True), theory_nsr(probe, d, n)
    if theory == 0:  # orthogonal with n a multiple of d: whole bases reconstruct the VJP exactly
        assert measured < 1e-6
    else:
        assert measured == pytest.approx(theory, rel=0.10)


def test_orthogonal_cycling_law_between_whole_bases():
    # n = 12 probes in d = 8: one whole basis plus half of a fresh one.
    f, x, g, v = make_case("ffn", 8, units=8192)
    est = estimate_vjp(f, x, g, n=12, probe="orthogonal", seed=3)
    assert nsr(est, v, per_unit=True) == pytest.approx(theory_nsr("orthogonal", 8, 12), rel=0.10)
    assert theory_nsr("orthogonal", 8, 12) == pytest.approx(1 / 9)


@pytest.mark.parametrize("probe, impl, n", [(p, i, 16) for p, i in PROBE_IMPLS if p in ("rademacher", "gaussian")]
                         + [("rademacher", "closed", 64), ("rademacher", "closed", 128)])
def test_causal_core_nsr_follows_row_lengths(probe, impl, n):
    """The masked score core: row t has t+1 live entries, so the NSR is the |v|^2-weighted law per row.
    n = 64 and 128: probes from several hash words, whose bits must all be independent for this law."""
    T = 64
    gen = torch.Generator().manual_seed(5)
    mask = causal_mask(T)
    s, g = torch.randn(16, 2, T, T, generator=gen), torch.randn(16, 2, T, T, generator=gen) * mask
    f = causal_softmax
    v = exact_vjp(f, s, g)
    est = estimate_vjp(f, s, g, n=n, probe=probe, seed=2, mask=mask, chunk=8, impl=impl)
    row_energy = v.double().pow(2).sum(-1).sum((0, 1))  # (T,)
    per_row = torch.tensor([theory_nsr(probe, t + 1, n) for t in range(T)], dtype=torch.float64)
    expected = float((per_row * row_energy).sum() / row_energy.sum())
    assert nsr(est, v) == pytest.approx(expected, rel=0.10)


@pytest.mark.parametrize("core", ["attn", "ffn"])
@pytest.mark.parametrize("probe, impl", PROBE_IMPLS)
def test_mean_of_estimates_is_unbiased(core, probe, impl):
    d, n, draws = 64, 8, 64
    f, x, g, v = make_case(core, d, units=64)
    mean = sum(estimate_vjp(f, x, g, n=n, probe=probe, seed=s, impl=impl) for s in range(draws)) / draws
    rel_err = math.sqrt(nsr(mean, v))
    assert rel_err <= 3 * math.sqrt(theory_nsr(probe, d, n) / draws)


@pytest.mark.parametrize("core", ["attn", "ffn"])
@pytest.mark.parametrize("impl", IMPLS)
def test_forward_differences_follow_the_law_at_small_eps(core, impl):
    f, x, g, v = make_case(core, 128)
    est = estimate_vjp(f, x, g, n=16, scheme="forward", eps=1e-3, seed=4, impl=impl)
    assert nsr(est, v, per_unit=True) == pytest.approx(theory_nsr("rademacher", 128, 16), rel=0.10)


@pytest.mark.parametrize("probe, impl", PROBE_IMPLS)
@pytest.mark.parametrize("scheme", ["central", "forward"])
def test_same_seed_same_estimate_whatever_the_chunk(probe, impl, scheme):
    mask = causal_mask(32)
    f = causal_softmax
    s, g = torch.randn(2, 3, 32, 32), torch.randn(2, 3, 32, 32)
    kw = dict(n=20, probe=probe, scheme=scheme, mask=mask, impl=impl)
    runs = [estimate_vjp(f, s, g, seed=11, chunk=c, **kw) for c in (1, 3, 7, 20)]
    for est in runs[1:]:
        assert torch.linalg.vector_norm(est - runs[0]) <= 1e-6 * torch.linalg.vector_norm(runs[0])
    again = estimate_vjp(f, s, g, seed=11, chunk=3, **kw)
    assert torch.equal(again, runs[1])
    other = estimate_vjp(f, s, g, seed=12, chunk=3, **kw)
    assert not torch.allclose(other, runs[1])


@pytest.mark.parametrize("probe", PROBES)
def test_probes_have_identity_second_moment_on_live_entries(probe):
    mask = causal_mask(6)
    u = ProbeStream(probe, (6, 6), n=4096, seed=0, mask=mask).next(4096)  # (n, 6 rows, 6)
    assert torch.all(u[:, ~mask] == 0)
    for t in range(6):
        second = torch.einsum("ni,nj->ij", u[:, t, : t + 1], u[:, t, : t + 1]) / u.shape[0]
        assert torch.allclose(second, torch.eye(t + 1), atol=0.1)
    if probe in ("sphere", "orthogonal", "rademacher"):
        live = mask.sum(-1).float()
        assert torch.allclose(u.pow(2).sum(-1), live.expand(u.shape[0], 6), rtol=1e-5)


def test_orthogonal_probes_form_bases_per_row_length():
    mask = causal_mask(5)
    u = ProbeStream("orthogonal", (5, 5), n=10, seed=0, mask=mask).next(10)  # (10, 5, 5)
    row = u[:, 3, :4]  # row 3 has 4 live entries: probes 0-3 and 4-7 are two bases, scaled by sqrt(4)
    for block in (row[0:4], row[4:8]):
        assert torch.allclose(block @ block.T, 4 * torch.eye(4), atol=1e-5)
    assert not torch.allclose(row[0:4], row[4:8])


@pytest.mark.parametrize("impl", IMPLS)
def test_causal_core_leaves_masked_scores_without_gradient(impl):
    T = 16
    mask = causal_mask(T)
    s = torch.randn(2, 2, T, T, requires_grad=True)
    cfg = ZBPConfig(n=8, impl=impl)
    p = zbp_apply(causal_softmax, s, cfg, seed=3, mask=mask)
    assert torch.all(p[..., ~mask] == 0)
    p.backward(torch.randn_like(p))
    assert torch.all(s.grad[..., ~mask] == 0)
    assert torch.all(s.grad[..., mask].abs().sum() > 0)


@pytest.mark.parametrize("scheme", ["central", "forward"])
@pytest.mark.parametrize("impl", IMPLS)
def test_block_forward_is_exact_and_backward_is_the_estimate(scheme, impl):
    cfg = ZBPConfig(n=8, scheme=scheme, chunk=3, impl=impl)
    u = torch.randn(4, 5, 24, requires_grad=True)
    y = zbp_apply(swiglu, u, cfg, seed=42)
    assert torch.equal(y, swiglu(u.detach()))
    g = torch.randn_like(y)
    y.backward(g)
    expected = estimate_vjp(swiglu, u, g, n=8, scheme=scheme, seed=42, chunk=3, impl=impl)
    assert torch.equal(u.grad, expected)


@pytest.mark.parametrize("impl", IMPLS)
def test_bf16_autocast_measures_in_fp32(impl):
    """Under CPU bf16 autocast the estimate's NSR equals the fp32 one; a bf16 measurement would not."""
    T, n, eps = 64, 16, 1e-3
    mask = causal_mask(T)
    f = causal_softmax
    gen = torch.Generator().manual_seed(0)
    s = (4 * torch.randn(8, 4, T, T, generator=gen)).bfloat16()  # bf16 scores, as under autocast
    g = torch.randn(8, 4, T, T, generator=gen).bfloat16()
    v = exact_vjp(f, s.float(), g.float())  # exact VJP at the same (bf16-rounded) point, in fp32
    cfg = ZBPConfig(n=n, eps=eps, impl=impl)

    s_leaf = s.clone().requires_grad_(True)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        p = zbp_apply(f, s_leaf, cfg, seed=9, mask=mask)
    p.backward(g)
    assert p.dtype == torch.bfloat16 and s_leaf.grad.dtype == torch.bfloat16
    fp32 = estimate_vjp(f, s.float(), g.float(), n=n, eps=eps, seed=9, mask=mask, impl=impl)
    # The gradient handed back is rounded to bf16 (relative error ~2^-9 per entry), nothing more.
    assert nsr(s_leaf.grad.float(), v) == pytest.approx(nsr(fp32, v), rel=0.10)

    # Control: the same differences taken in bf16 lose the signal (x + eps u rounds back to x), so this
    # test can tell the two apart. Cosine, not NSR: an all-zero estimate has NSR 1, below the honest 2.
    u = ProbeStream("rademacher", s.shape, n=n, seed=9, mask=mask, dtype=torch.bfloat16).next(n)
    df = (f(s + eps * u) - f(s - eps * u)) / (2 * eps)
    est_bf16 = ((df * g).sum(-1, keepdim=True) * u).sum(0) / n

    def cosine(a, b):
        return float(torch.nn.functional.cosine_similarity(a.double().flatten(), b.double().flatten(), dim=0))

    assert cosine(s_leaf.grad, v) == pytest.approx(cosine(fp32, v), rel=0.05)
    assert cosine(est_bf16, v) < 0.5 * cosine(fp32, v)


def test_call_seeds_differ_by_every_coordinate_and_repeat():
    """Seeding 'micro' (runs before 2026-12-02): the seed tells micro-batches and ranks apart; the probes are drawn
    by the micro-batch's shape (call_seq0 None)."""
    cfg = ZBPConfig(seed=7, seeding="micro")
    base = call_seed(cfg, ZBPClock(step=3, micro=1, rank=0), layer=2, core="attn")
    assert base == call_seed(cfg, ZBPClock(step=3, micro=1, rank=0), layer=2, core="attn")
    variants = [
        call_seed(dataclasses.replace(cfg, seed=8), ZBPClock(step=3, micro=1), 2, "attn"),
        call_seed(cfg, ZBPClock(step=4, micro=1), 2, "attn"),
        call_seed(cfg, ZBPClock(step=3, micro=2), 2, "attn"),
        call_seed(cfg, ZBPClock(step=3, micro=1, rank=1), 2, "attn"),
        call_seed(cfg, ZBPClock(step=3, micro=1), 3, "attn"),
        call_seed(cfg, ZBPClock(step=3, micro=1), 2, "ffn"),
    ]
    assert len({base, *variants}) == 7
    assert call_seq0(cfg, ZBPClock(seq0=4)) is None


def test_global_call_seeds_ignore_the_micro_batch_and_rank():
    """Seeding 'global': one seed per (seed, step, layer, core), whichever micro-batch or rank computes the call;
    its sequences are told apart by their index in the global batch (call_seq0)."""
    cfg = ZBPConfig(seed=7)
    base = call_seed(cfg, ZBPClock(step=3), layer=2, core="attn")
    assert base == call_seed(cfg, ZBPClock(step=3, micro=5, rank=1, seq0=20), 2, "attn")
    variants = [call_seed(dataclasses.replace(cfg, seed=8), ZBPClock(step=3), 2, "attn"),
                call_seed(cfg, ZBPClock(step=4), 2, "attn"), call_seed(cfg, ZBPClock(step=3), 3, "attn"),
                call_seed(cfg, ZBPClock(step=3), 2, "ffn")]
    assert len({base, *variants}) == 5
    assert call_seq0(cfg, ZBPClock(seq0=20)) == 20


@pytest.mark.parametrize("probe, impl", [("rademacher", "plain"), ("orthogonal", "plain"), ("gaussian", "fused"),
                                         ("rademacher", "closed")])
@pytest.mark.parametrize("core", ["attn", "ffn"])
def test_a_batch_estimated_in_pieces_at_their_seq0_is_the_whole_estimate(core, probe, impl):
    """Seeding 'global': sequence b of a piece that starts at sequence seq0 of the global batch draws its probes by
    seq0 + b, so 6 sequences estimated at once, as 2 pieces of 3 or as 3 of 2 (any world size, accumulation and
    micro batch) give one estimate; drawn by the piece's shape (seq0 None, seeding 'micro') they do not."""
    gen = torch.Generator().manual_seed(0)
    # Sizes the compiled graphs see are never 1 and never equal to each other, and pieces are fresh tensors (as the
    # model's cores get them): anything else would specialise, and recompile, the graphs (`fused_cpu`)
    if core == "attn":  # (B, H, T, T) causal scores
        f, x, g = causal_softmax, 2 * torch.randn(6, 3, 6, 6, generator=gen), torch.randn(6, 3, 6, 6, generator=gen)
    else:  # (B, T, 2h) SwiGLU inputs
        f, x, g = swiglu, torch.randn(6, 5, 14, generator=gen), torch.randn(6, 5, 7, generator=gen)
    cfg = ZBPConfig(n=20, probe=probe, impl=impl)
    whole = estimate(f, x, g, cfg, seed=5, seq0=0)
    for size in (3, 2):
        pieces = [estimate(f, x[i:i + size].clone(), g[i:i + size].clone(), cfg, seed=5, seq0=i)
                  for i in range(0, 6, size)]
        assert torch.allclose(torch.cat(pieces), whole, rtol=1e-5, atol=1e-6), size  # equal probes: rounding
    assert not torch.allclose(estimate(f, x[3:].clone(), g[3:].clone(), cfg, seed=5), whole[3:])  # it can fail


@pytest.mark.parametrize(
    "fields, field",
    [({"probe": "uniform"}, "probe"), ({"n": 0}, "n"), ({"eps": 0.0}, "eps"), ({"eps": -1e-3}, "eps"),
     ({"chunk": 0}, "chunk"), ({"scheme": "backward"}, "scheme"), ({"cores": "mlp"}, "cores"),
     ({"impl": "fast"}, "impl"), ({"impl": "fused", "probe": "sphere"}, "impl"), ({"seeding": "rank"}, "seeding")],
)
def test_bad_settings_name_the_field(fields, field):
    with pytest.raises(ConfigError, match=rf"ZBPConfig\.{field}"):
        ZBPConfig(**fields)


def test_arm_names():
    assert arm_zbp_config("bp") is None
    assert arm_zbp_config("zbp_n16") == ZBPConfig(n=16)
    assert arm_zbp_config("zbp_n16").impl == "auto"
    assert arm_zbp_config("zbp_n16", impl="plain") == ZBPConfig(n=16, impl="plain")
    assert arm_zbp_config("zbp_n4_fwd") == ZBPConfig(n=4, scheme="forward")
    assert arm_zbp_config("zbp_n64_gaussian", cores="ffn") == ZBPConfig(n=64, probe="gaussian", cores="ffn")
    with pytest.raises(ConfigError, match="unknown arm 'zbp16'"):
        arm_zbp_config("zbp16")


@pytest.mark.parametrize("arm", ["bp", "zbp_n16", "zbp_n4_fwd", "zbp_n64_gaussian", "zbp_n8_fwd_sphere"])
def test_an_arm_s_name_is_read_back_from_its_settings(arm):
    """arm_name is arm_zbp_config's inverse (what names a run trained by hand, from its config); settings no name
    carries are left out."""
    assert arm_name(arm_zbp_config(arm)) == arm
    assert arm_name(arm_zbp_config(arm, impl="plain", cores="ffn") if arm != "bp" else None) == arm
