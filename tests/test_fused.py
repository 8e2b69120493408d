"""The fused estimator (`zbp.fused`, `zbp.counter`, `zbp.fused_triton`) against the plain formula.

Compared: the fused estimate with the plain formula est = (1/n) sum_i <g, df_i> u_i evaluated on the same
counter-hash probes, materialised (both boxes, central and forward, causal mask and none, rademacher and
gaussian); the counter probes' moments with E[u u^T] = I; fused estimates of one seed with each other
(bitwise) and across probe counts; `auto` with the plain path where fused does not apply; the Triton
kernels with the same formula, under TRITON_INTERPRET=1 on CPU and on a GPU. The NSR-law and unbiasedness
tests of the fused path sit with the plain ones, parametrised over impl, in tests/test_zbp.py.
The CPU graphs compile once per test session (dynamic shapes), so the shapes here vary freely.
"""

import functools
import importlib.util
import signal

import pytest
import torch

from conftest import counter_plain, run_in_triton_interpreter
from zbpscale.errors import ConfigError
from zbpscale.zbp import (
    ZBPConfig,
    causal_mask,
    causal_softmax,
    counter,
    estimate_vjp,
    fused,
    fused_cpu,
    masked_softmax,
    row_softmax,
    swiglu,
    zbp_apply,
)
from zbpscale.zbp.fused_cpu import CompileFailed


def case(box: str, seed: int = 0, device: str = "cpu"):
    """(f, x, g, mask) of a small case: causal scores with an odd and an even T, plain rows, SwiGLU."""
    gen = torch.Generator().manual_seed(seed)
    if box.startswith("causal"):
        t = int(box[len("causal"):])
        x, g = 2 * torch.randn(2, 3, t, t, generator=gen), torch.randn(2, 3, t, t, generator=gen) * causal_mask(t)
        mask = causal_mask(t, device)
        return causal_softmax, x.to(device), g.to(device), mask
    if box == "rows":
        x, g = 2 * torch.randn(5, 7, 24, generator=gen), torch.randn(5, 7, 24, generator=gen)
        return row_softmax, x.to(device), g.to(device), None
    x, g = torch.randn(3, 5, 48, generator=gen), torch.randn(3, 5, 24, generator=gen)
    return swiglu, x.to(device), g.to(device), None


def rel(a, b) -> float:
    return float(torch.linalg.vector_norm(a - b) / torch.linalg.vector_norm(b))


BOXES = ["causal16", "causal15", "rows", "swiglu"]


@pytest.mark.parametrize("probe", fused.FUSED_PROBES)
@pytest.mark.parametrize("scheme", ["central", "forward"])
@pytest.mark.parametrize("box", BOXES)
def test_fused_equals_the_plain_formula_on_the_same_probes(box, scheme, probe):
    f, x, g, mask = case(box)
    kw = dict(n=20, probe=probe, scheme=scheme, eps=1e-3, seed=5, mask=mask)
    est = estimate_vjp(f, x, g, impl="fused", **kw)
    # fp32 finite differences carry ~1e-4 relative rounding noise, differently summed on each side
    assert rel(est, counter_plain(f, x, g, **kw)) < 1e-3
    if mask is not None:
        assert torch.all(est[..., ~mask] == 0)


@pytest.mark.parametrize("probe", fused.FUSED_PROBES)
def test_counter_probes_have_identity_second_moment_and_are_independent(probe):
    n, units, d = 256, 256, 40
    u = counter.probes(probe, 3, n, torch.arange(units).view(-1, 1), torch.arange(d))  # (n, units, d)
    flat = u.reshape(n, units * d).double()
    assert abs(float(flat.mean())) < 0.005  # 2.6M entries: sd 6e-4
    # E[u u^T] = I within a unit: 65536 samples per entry (sd 0.004), the max over 1560 off-diagonals
    second = torch.einsum("nud,nue->de", u.double(), u.double()) / (n * units)
    assert torch.allclose(second, torch.eye(d, dtype=torch.float64), atol=0.025)
    # probes are uncorrelated with each other: 10240 samples per pair (sd 0.01), max over 32640 pairs
    across_probes = (flat @ flat.T) / flat.shape[1]
    assert float((across_probes - torch.eye(n, dtype=torch.float64)).abs().max()) < 0.07
    if probe == "rademacher":
        assert torch.all(u.abs() == 1)
    else:
        assert float(flat.pow(4).mean()) == pytest.approx(3.0, rel=0.05)


def test_every_rademacher_probe_bit_is_independent():
    """Above n = 32 probes draw bits from one hash word each; within a unit, for columns a, b, the
    statistic z = sum_i u_ia u_ib has Var(z) / n = 1 for independent entries (checked for the first 16, 32,
    64 and 128 probes), and the products u_ia u_ib of two probes are uncorrelated. A two-round hash gave
    0.91-1.05 and product correlations up to 0.95."""
    n, rows, chunk, pairs = 128, 100_000, 20_000, [(0, 1), (0, 2), (3, 7), (5, 6), (1, 17), (10, 40)]
    prefixes = torch.tensor([16, 32, 64, 128])
    cols = torch.tensor(sorted({c for p in pairs for c in p}))
    where = {int(c): j for j, c in enumerate(cols)}
    sums = torch.zeros(len(pairs), 2, len(prefixes), dtype=torch.float64)  # sum of z, of z^2 over rows
    prods = torch.zeros(len(pairs), n, n, dtype=torch.float64)  # sum over rows of (u_ia u_ib) (u_ja u_jb)
    for start in range(0, rows, chunk):
        u = counter.probes("rademacher", 3, n, torch.arange(start, start + chunk).view(-1, 1), cols, torch.int8)
        for k, (a, b) in enumerate(pairs):
            prod = (u[:, :, where[a]] * u[:, :, where[b]]).double()  # (n, chunk)
            z = prod.cumsum(0)[prefixes - 1]  # (prefixes, chunk): z over the first m probes
            sums[k] += torch.stack([z.sum(1), z.pow(2).sum(1)])
            prods[k] += prod @ prod.T
    var = (sums[:, 1] / rows - (sums[:, 0] / rows) ** 2) / prefixes  # (pairs, prefixes)
    assert torch.allclose(var, torch.ones_like(var), atol=0.03), var  # sd 0.0045 each
    off = prods / rows - torch.eye(n, dtype=torch.float64)  # correlations of probe pairs' products, sd 0.003
    assert float(off.abs().max()) < 0.025  # the max of 6 * 128 * 127 / 2 entries: ~5.4 sd


def test_two_calls_whose_seed_words_are_close_share_no_probes():
    """A helper's hunt: hash 1 began with s ^ r, so row r of a call with seed word s drew the probes of row
    r ^ s ^ s' of a call with seed word s': two attention calls of s1b (2^24 rows each) whose seed words differed
    below 2^24 shared every probe, permuted over their rows (86 pairs of attention layers of one step in 200 steps
    of s1b's call seeds). Hash 2, the default (ZBPConfig.probe_hash), parts such rows: their words agree in half
    their bits, as any two words do; hash 1 is kept, unchanged, for the runs made before it."""
    s, close = torch.tensor(0x2F6C91A3), torch.tensor(0x2F6C91A3 ^ 0x5A5)
    rows, cols = torch.arange(8192).view(-1, 1), torch.arange(64)
    assert torch.equal(counter.word(s, rows, cols, 1), counter.word(close, rows ^ 0x5A5, cols, 1))
    a, b = counter.word(s, rows, cols), counter.word(close, rows ^ 0x5A5, cols)
    same = (a ^ b).bitwise_not() & counter.M32  # the bits in which they agree
    agree = float(sum(((same >> k) & 1).sum() for k in range(32))) / (32 * a.numel())
    assert abs(agree - 0.5) < 0.001 and not torch.any(a == b), agree  # 16.8M bits: sd 1.2e-4
    a1 = counter.word(s, rows, cols, 1)  # and hash 2 is not hash 1 of other seeds: its words are its own
    assert abs(float(((a ^ a1).bitwise_not() & 1).double().mean()) - 0.5) < 0.01
    # Rows whose state before the column meets by chance: a 32-bit state (one word a row) lets R^2 / 2^32 pairs of
    # the R = 2^20 rows of two calls meet (about 256), each then sharing every probe; hash 2's state is two words.
    rows = torch.arange(1 << 20)
    h1 = {seed: counter.mix(torch.tensor(seed) ^ rows) for seed in (0x2F6C91A3, 0x7B0E44D1)}
    one_word = {seed: counter.mix(h ^ counter.mix(torch.tensor(seed))) for seed, h in h1.items()}  # h2 alone
    (ha, hb), (sa, sb) = one_word.values(), one_word
    order = torch.argsort(hb)
    at = torch.searchsorted(hb[order], ha).clamp(max=len(rows) - 1)
    met = hb[order][at] == ha
    ra, rb = rows[met], order[at[met]]
    assert len(ra) > 100  # the chance meetings a one-word state has
    cols = torch.arange(64)
    wa, wb = counter.word(torch.tensor(sa), ra.view(-1, 1), cols), counter.word(torch.tensor(sb), rb.view(-1, 1), cols)
    assert not torch.any(torch.all(wa == wb, dim=1))  # no such row pair shares its probes


@pytest.mark.parametrize("bad", [0, 3, True, "2"])
def test_a_probe_hash_no_release_drew_is_refused(bad):
    with pytest.raises(ConfigError, match=f"ZBPConfig.probe_hash must be one of 1, 2; got {bad!r}"):
        ZBPConfig(probe_hash=bad)


@pytest.mark.parametrize("closed", [False, True])
def test_each_hash_s_kernels_draw_that_hash_s_probes(closed):
    """A run resumes with the hash it was made with: each CPU path (fused, closed) draws the probes counter.probes
    gives for the config's probe_hash, and not the other hash's."""
    for box in ("causal16", "swiglu"):
        f, x, g, mask = case(box)
        kw = dict(n=40, probe="rademacher", scheme="central", eps=1e-3, seed=5, mask=mask)
        for version in (1, 2):
            cfg = ZBPConfig(n=40, impl="closed" if closed else "fused", probe_hash=version)
            est = fused.fused_vjp("swiglu" if box == "swiglu" else "softmax", x, g, cfg, 5, closed=closed,
                                  causal=mask is not None)
            assert rel(est, counter_plain(f, x, g, version=version, **kw)) < 1e-3, (box, version)
            assert rel(est, counter_plain(f, x, g, version=3 - version, **kw)) > 0.1, (box, version)


@pytest.mark.parametrize("probe", fused.FUSED_PROBES)
def test_probe_i_depends_on_seed_and_i_only(probe):
    rows, cols = torch.arange(6).view(-1, 1), torch.arange(10)
    many = counter.probes(probe, 7, 70, rows, cols)
    assert torch.equal(many[:20], counter.probes(probe, 7, 20, rows, cols))
    assert not torch.equal(many[:20], counter.probes(probe, 8, 20, rows, cols))


@pytest.mark.parametrize("box", ["causal16", "swiglu"])
def test_same_seed_same_fused_estimate_bitwise(box):
    f, x, g, mask = case(box)
    kw = dict(n=12, probe="rademacher", eps=1e-3, mask=mask, impl="fused")
    first = estimate_vjp(f, x, g, seed=11, **kw)
    assert torch.equal(first, estimate_vjp(f, x, g, seed=11, chunk=5, **kw))  # chunk: plain path only
    assert not torch.allclose(first, estimate_vjp(f, x, g, seed=12, **kw))


def test_auto_is_plain_where_fused_does_not_apply():
    f, x, g, _ = case("swiglu")
    for probe in ("sphere", "orthogonal"):  # no fused generator for these
        auto = estimate_vjp(f, x, g, n=8, probe=probe, seed=1, impl="auto")
        assert torch.equal(auto, estimate_vjp(f, x, g, n=8, probe=probe, seed=1, impl="plain"))
    other_box = lambda u: torch.tanh(u)  # noqa: E731 - a box the kernels do not implement
    auto = estimate_vjp(other_box, x, x, n=8, seed=1, impl="auto")
    assert torch.equal(auto, estimate_vjp(other_box, x, x, n=8, seed=1, impl="plain"))
    with pytest.raises(ConfigError, match="impl='fused' cannot run here"):
        estimate_vjp(other_box, x, x, n=8, seed=1, impl="fused")
    with pytest.raises(ConfigError, match=r"ZBPConfig\.impl"):
        ZBPConfig(impl="fused", probe="orthogonal")
    # A box that does not say what it is gets the plain path, even when it computes the same function.
    anonymous = functools.partial(masked_softmax, mask=None)
    _, xr, gr, _ = case("rows")
    assert torch.equal(estimate_vjp(anonymous, xr, gr, n=16, seed=1, impl="auto"),
                       estimate_vjp(anonymous, xr, gr, n=16, seed=1, impl="plain"))
    # On CPU, below the break-even number of probes auto is plain; from it on, closed for rademacher probes
    # and fused (direct queries) for gaussian ones.
    few, many = fused.CPU_MIN_N - 1, fused.CPU_MIN_N
    assert torch.equal(estimate_vjp(f, x, g, n=few, seed=1, impl="auto"),
                       estimate_vjp(f, x, g, n=few, seed=1, impl="plain"))
    assert torch.equal(estimate_vjp(f, x, g, n=many, seed=1, impl="auto"),
                       estimate_vjp(f, x, g, n=many, seed=1, impl="closed"))
    assert torch.equal(estimate_vjp(f, x, g, n=many, probe="gaussian", seed=1, impl="auto"),
                       estimate_vjp(f, x, g, n=many, probe="gaussian", seed=1, impl="fused"))


def test_a_failing_compiler_falls_back_closed_fused_plain_with_one_line_each(monkeypatch, capsys):
    """Auto falls back in order, once per process: the closed form's own graphs failing leaves the direct
    queries (the same estimate as impl='fused'); every graph failing leaves the plain path. One warning line
    per failed path, naming it, the compiler's first line and the next path's cost; insisting impls raise."""
    real = fused_cpu._compiled

    def closed_broken(name):
        if name.startswith("closed"):
            raise RuntimeError("no C++ compiler\n(long Inductor trace)")
        return real(name)

    monkeypatch.setattr(fused, "failed", {})
    monkeypatch.setattr(fused, "used", {})
    monkeypatch.setattr(fused_cpu, "_compiled", closed_broken)
    f, x, g, _ = case("swiglu")
    n = fused.CPU_MIN_N  # where auto would take the compiled graphs
    direct = estimate_vjp(f, x, g, n=n, seed=1, impl="fused")
    assert torch.equal(estimate_vjp(f, x, g, n=n, seed=1, impl="auto"), direct)
    assert fused.used == {"swiglu": "fused"} and list(fused.failed) == [("cpu", "closed")]
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("warning: zbpscale: the closed ZBP estimator failed on cpu "
                                               "(RuntimeError: no C++ compiler); the fused path from now on")
    assert fused.COST["fused"] in err[0]
    with pytest.raises(ConfigError, match="impl='closed' cannot run here: the closed path failed"):
        estimate_vjp(f, x, g, n=n, seed=1, impl="closed")

    monkeypatch.setattr(fused_cpu, "_compiled", lambda name: (_ for _ in ()).throw(RuntimeError("no compiler")))
    plain = estimate_vjp(f, x, g, n=n, seed=1)
    assert torch.equal(estimate_vjp(f, x, g, n=n, seed=1, impl="auto"), plain)
    assert fused.used == {"swiglu": "plain"} and fused.paths_used() == {"ffn": "plain"}
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1
    assert "the fused ZBP estimator failed on cpu (RuntimeError: no compiler); the plain path" in err[0]
    assert torch.equal(estimate_vjp(f, x, g, n=n, seed=1, impl="auto"), plain)
    assert capsys.readouterr().err == ""  # once per process
    with pytest.raises(ConfigError, match="impl='fused' cannot run here"):
        estimate_vjp(f, x, g, n=n, seed=1, impl="fused")


def test_a_stop_during_compile_is_not_a_compiler_failure(monkeypatch):
    """Ctrl-C reaches Inductor's workers too, and the compile fails: with a stop requested that failure
    propagates (the trainer stops) instead of marking the path failed for the process."""
    from zbpscale import signals

    monkeypatch.setattr(fused, "failed", {})
    monkeypatch.setattr(fused_cpu, "_compiled", lambda name: (_ for _ in ()).throw(RuntimeError("worker died")))
    monkeypatch.setattr(signals, "_received", signal.SIGINT)
    f, x, g, _ = case("swiglu")
    with pytest.raises(CompileFailed):
        estimate_vjp(f, x, g, n=fused.CPU_MIN_N, seed=1, impl="auto")
    assert fused.failed == {}


def test_block_backward_is_the_fused_estimate_under_bf16_autocast():
    f, x, g, mask = case("causal16")
    cfg = ZBPConfig(n=8, impl="fused")
    s = x.bfloat16().requires_grad_(True)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        p = zbp_apply(f, s, cfg, seed=4, mask=mask)
    p.backward(g.bfloat16())
    expected = estimate_vjp(f, s.detach().float(), g.bfloat16().float(), n=8, seed=4, mask=mask, impl="fused")
    assert torch.equal(s.grad, expected.bfloat16())


# ---- Triton ---------------------------------------------------------------------------------------------


def triton_equals_the_plain_formula():
    """Run by test_triton_kernels_equal_the_plain_formula_in_the_interpreter in a child process."""
    from zbpscale.zbp import fused_triton

    settings = [(4, "central"), (40, "forward")]  # one word of probe bits, then two words
    for i, probe in enumerate(fused.FUSED_PROBES):
        for j, box in enumerate(("causal12", "rows", "swiglu")):
            f, x, g, mask = case(box)
            x, g = x[:1].contiguous(), g[:1].contiguous()  # few programs: the interpreter runs each in numpy
            for n, scheme in settings if box == "causal12" else settings[(i + j) % 2:][:1]:
                kw = dict(n=n, probe=probe, eps=1e-3, seed=5)
                est = fused_triton.estimate("swiglu" if box == "swiglu" else "softmax", x, g,
                                            central=scheme == "central", causal=mask is not None, **kw)
                err = rel(est, counter_plain(f, x, g, scheme=scheme, mask=mask, **kw))
                assert err < 1e-3, (probe, box, n, scheme, err)
        f, x, g, mask = case("causal12")  # hash 1, as runs made before hash 2 resume with it
        x, g = x[:1].contiguous(), g[:1].contiguous()
        kw = dict(n=40, probe=probe, eps=1e-3, seed=5)
        est = fused_triton.estimate("softmax", x, g, central=True, causal=True, version=1, **kw)
        assert rel(est, counter_plain(f, x, g, scheme="central", mask=mask, version=1, **kw)) < 1e-3, probe


@pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="triton is not installed")
@pytest.mark.skipif(torch.cuda.is_available(), reason="a GPU is here: test_triton_kernels_on_gpu runs them")
def test_triton_kernels_equal_the_plain_formula_in_the_interpreter():
    """TRITON_INTERPRET=1 must be set before triton is first imported (torch.compile imports it), so the
    kernels run in a fresh interpreter: it loads this file and calls triton_equals_the_plain_formula."""
    run_in_triton_interpreter(__file__, "triton_equals_the_plain_formula")


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("probe", fused.FUSED_PROBES)
@pytest.mark.parametrize("scheme", ["central", "forward"])
def test_triton_kernels_on_gpu(probe, scheme):
    pytest.importorskip("triton")
    for box in ("causal16", "causal15", "rows", "swiglu"):
        f, x, g, mask = case(box, device="cuda")
        kw = dict(n=40, probe=probe, scheme=scheme, eps=1e-3, seed=5, mask=mask)
        est = estimate_vjp(f, x, g, impl="fused", **kw)
        assert rel(est, counter_plain(f, x, g, **kw)) < 1e-3, box
        f, x, g, mask = case(box)
        cpu = estimate_vjp(f, x, g, impl="fused", **{**kw, "mask": mask})
        assert rel(est.cpu(), cpu) < 1e-3, box  # the same probes on both back ends
    # a long causal row (T = 1024, several tiles per row) in bf16, as the model hands it over
    t = 1024
    mask = causal_mask(t, "cuda")
    f = causal_softmax
    x = (2 * torch.randn(1, 2, t, t, device="cuda")).bfloat16()
    g = torch.randn(1, 2, t, t, device="cuda").bfloat16() * mask
    kw = dict(n=64, probe=probe, scheme=scheme, eps=1e-3, seed=9, mask=mask)
    est = estimate_vjp(f, x, g, impl="fused", **kw)
    assert rel(est, counter_plain(f, x.float(), g.float(), **kw)) < 1e-3
