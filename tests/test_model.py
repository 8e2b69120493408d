"""The model against closed forms and references.

Compared: parameter counts of every preset with the closed-form formula; BP gradients with float64 central
finite differences of the loss; the ZBP arm's parameter gradients (orthogonal probes, whole bases) with the
BP arm's; logits of a sequence with those of the same sequence whose future was changed (causality); and
the loss of a tiny model before and after 100 optimizer steps, for bp and for ZBP n=16.
"""

import dataclasses

import pytest
import torch

from zbpscale.errors import ConfigError
from zbpscale.run.config import SIZES, ModelConfig, model_config, n_params
from zbpscale.train.model import Transformer
from zbpscale.zbp import ZBPConfig

# A model small enough for float64 checks; T=4 so that every causal row length (1..4) and the SwiGLU unit
# (2h = 12) divide n = 12: orthogonal probes then cover whole bases of every unit.
MICRO = ModelConfig(n_layer=2, n_head=2, d_model=8, d_ff=6, max_seq_len=4, vocab_size=50)


def paired_models(cfg: ModelConfig, zbp: ZBPConfig, dtype=torch.float64):
    bp = Transformer(cfg).to(dtype)
    zb = Transformer(dataclasses.replace(cfg, zbp=zbp)).to(dtype)
    zb.load_state_dict(bp.state_dict())
    return bp, zb


def grads(model, idx, tgt):
    model.zero_grad()
    _, loss = model(idx, tgt)
    loss.backward()
    return torch.cat([p.grad.flatten() for p in model.parameters()])


@pytest.mark.parametrize("size", list(SIZES))
def test_parameter_count_matches_closed_form(size):
    cfg = SIZES[size]
    with torch.device("meta"):
        model = Transformer(cfg)
    params = dict(model.named_parameters())
    assert sum(p.numel() for p in params.values()) == n_params(cfg)
    tables = sum(params[k].numel() for k in ("wte.weight", "wpe.weight", "lm_head.weight"))
    assert n_params(cfg) - tables == n_params(cfg, embeddings=False)
    assert cfg.padded_vocab % 64 == 0 and cfg.padded_vocab >= 50257


def test_presets_are_ordered_by_size_and_near_their_names():
    counts = [n_params(c) for c in SIZES.values()]
    assert counts == sorted(counts)
    for name, target in {"s60": 60e6, "s124": 124e6, "s350": 350e6, "s1b": 1e9}.items():
        assert abs(n_params(SIZES[name]) / target - 1) < 0.05


@pytest.mark.parametrize("pos_emb", ["learned", "rope"])
def test_bp_gradients_match_float64_finite_differences(pos_emb):
    torch.manual_seed(1)
    model = Transformer(dataclasses.replace(MICRO, pos_emb=pos_emb)).double()
    idx, tgt = torch.randint(0, 50, (2, 4)), torch.randint(0, 50, (2, 4))
    grad = grads(model, idx, tgt)
    params = list(model.parameters())
    for trial in range(3):
        direction = [torch.randn_like(p) for p in params]
        h = 1e-6

        def loss_at(sign):
            with torch.no_grad():
                for p, d in zip(params, direction):
                    p.add_(sign * h * d)
                loss = model(idx, tgt)[1].item()
                for p, d in zip(params, direction):
                    p.sub_(sign * h * d)
            return loss

        fd = (loss_at(1) - loss_at(-1)) / (2 * h)
        analytic = float(grad @ torch.cat([d.flatten() for d in direction]))
        assert fd == pytest.approx(analytic, rel=1e-6, abs=1e-9)


@pytest.mark.parametrize("pos_emb", ["learned", "rope"])
@pytest.mark.parametrize("cores", ["both", "attn", "ffn"])
def test_zbp_with_whole_orthogonal_bases_equals_bp(pos_emb, cores):
    """Plumbing check: with a whole basis per unit the estimator is exact, so ZBP grads == BP grads."""
    torch.manual_seed(2)
    zbp = ZBPConfig(n=12, probe="orthogonal", eps=1e-5, chunk=5, cores=cores)
    bp, zb = paired_models(dataclasses.replace(MICRO, pos_emb=pos_emb), zbp)
    idx, tgt = torch.randint(0, 50, (3, 4)), torch.randint(0, 50, (3, 4))
    g_bp, g_zbp = grads(bp, idx, tgt), grads(zb, idx, tgt)
    assert torch.linalg.vector_norm(g_zbp - g_bp) / torch.linalg.vector_norm(g_bp) < 1e-6
    # ... and with fewer probes it is not: the check can fail.
    zb_few = Transformer(dataclasses.replace(zb.cfg, zbp=dataclasses.replace(zbp, n=3))).double()
    zb_few.load_state_dict(bp.state_dict())
    g_few = grads(zb_few, idx, tgt)
    assert torch.linalg.vector_norm(g_few - g_bp) / torch.linalg.vector_norm(g_bp) > 1e-3


@pytest.mark.parametrize("arm", [None, ZBPConfig(n=4)])
@pytest.mark.parametrize("pos_emb", ["learned", "rope"])
def test_future_tokens_never_change_earlier_logits(arm, pos_emb):
    torch.manual_seed(3)
    cfg = ModelConfig(n_layer=2, n_head=2, d_model=16, max_seq_len=12, vocab_size=64, pos_emb=pos_emb, zbp=arm)
    model = Transformer(cfg)
    idx = torch.randint(0, 64, (2, 12))
    changed = idx.clone()
    changed[:, 7:] = torch.randint(0, 64, (2, 5))
    with torch.no_grad():
        a, b = model(idx)[0], model(changed)[0]
    assert torch.equal(a[:, :7], b[:, :7])
    assert not torch.allclose(a[:, 7:], b[:, 7:])
    # Gradient side: a loss on position 3 sends no gradient to the embedding of a later token.
    logits = model(idx)[0]
    logits[:, 3].sum().backward()
    later = idx[:, 4:].flatten().unique()
    earlier = idx[:, :4].flatten().unique()
    only_later = later[~torch.isin(later, earlier)]
    assert torch.all(model.wte.weight.grad[only_later] == 0)


@pytest.mark.parametrize("seeding", ["global", "micro"])
def test_zbp_gradients_do_not_depend_on_how_the_global_batch_is_split(seeding):
    """A global batch of 4 sequences as one micro-batch, or as two of 2 accumulated (what 1 rank and 2 ranks
    compute, or two micro batch sizes), in fp64: with seeding 'global' each sequence draws its probes by its index
    in the global batch (the clock's seq0) and the ZBP gradients agree to rounding; with 'micro' they differ. (The
    fast paths' offsets: tests/test_zbp.py, pieces at their seq0, and tests/test_attention.py at seq0 5.)"""
    torch.manual_seed(0)
    model = Transformer(dataclasses.replace(MICRO, zbp=ZBPConfig(n=4, seeding=seeding))).double()
    x, y = torch.randint(0, 50, (4, 4)), torch.randint(0, 50, (4, 4))

    def grads(micro: int) -> torch.Tensor:
        model.zero_grad()
        for m in range(4 // micro):
            model.set_zbp_clock(step=3, micro=m, seq0=m * micro)
            rows = slice(m * micro, (m + 1) * micro)
            (model(x[rows], y[rows])[1] * micro / 4).backward()
        return torch.cat([p.grad.flatten() for p in model.parameters()])

    whole, split = grads(4), grads(2)
    assert torch.allclose(split, whole, rtol=1e-9, atol=1e-12) == (seeding == "global")


def markov_batches(vocab: int, steps: int, batch: int, T: int, seed: int = 0):
    """Sequences from a fixed random Markov chain where each token has 2 likely successors."""
    gen = torch.Generator().manual_seed(seed)
    successors = torch.randint(0, vocab, (vocab, 2), generator=gen)
    for _ in range(steps):
        seq = torch.empty(batch, T + 1, dtype=torch.long)
        seq[:, 0] = torch.randint(0, vocab, (batch,), generator=gen)
        for t in range(T):
            pick = torch.randint(0, 2, (batch,), generator=gen)
            seq[:, t + 1] = successors[seq[:, t], pick]
        yield seq[:, :-1], seq[:, 1:]


@pytest.mark.parametrize("arm", ["bp", "zbp_n16"])
def test_tiny_model_loss_falls_over_100_steps(arm):
    torch.manual_seed(4)
    zbp = None if arm == "bp" else ZBPConfig(n=16)
    cfg = ModelConfig(n_layer=2, n_head=2, d_model=64, max_seq_len=32, vocab_size=128, zbp=zbp)
    model = Transformer(cfg)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.0)
    losses = []
    for step, (x, y) in enumerate(markov_batches(128, 100, 16, 32)):
        model.set_zbp_clock(step=step)
        _, loss = model(x, y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    first, last = sum(losses[:5]) / 5, sum(losses[-10:]) / 10
    assert first > 4.5  # ~ ln(128) at init
    assert last < first - 1.5, f"{arm}: loss {first:.2f} -> {last:.2f}"


def test_model_config_rejects_bad_shapes_and_sizes():
    with pytest.raises(ConfigError, match=r"n_head=3 must divide d_model=128"):
        ModelConfig(n_layer=2, n_head=3, d_model=128)
    with pytest.raises(ConfigError, match=r"unknown size 's2b'; allowed: nano, micro, tiny, mini, s60"):
        model_config("s2b")
    with pytest.raises(ConfigError, match=r"pos_emb must be one of learned, rope"):
        ModelConfig(n_layer=2, n_head=2, d_model=16, pos_emb="alibi")
    with pytest.raises(ConfigError, match=r"max_seq_len=8"):
        Transformer(ModelConfig(n_layer=1, n_head=1, d_model=8, max_seq_len=8, vocab_size=16))(
            torch.zeros(1, 9, dtype=torch.long))
    assert model_config("tiny", zbp=ZBPConfig(n=4)).zbp.n == 4
