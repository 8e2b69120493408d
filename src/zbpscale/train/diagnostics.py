"""Diagnostics of a model on a fixed batch: branch gains rho_k, the estimator's NSR and c per core, and
the cosine between ZBP and BP parameter gradients.

- Branch gains, per block k and branch (attn, mlp), with F_k the branch (sublayer then its norm):
  forward  ||F_k(h_k)|| / ||h_k||;  backward ||J_{F_k}^T g|| / ||g|| for the upstream gradient g at the branch
  output (the gain of the gradient flowing back through the branch rather than the skip connection).
- Per physical core: the ZBP estimate against the exact VJP on the same input and upstream gradient. With
  err_u = |est_u - exact_u|^2, ref_u = |exact_u|^2 and d_u the unit's live dimension (units with zero exact
  VJP, e.g. score rows of length 1, are left out), `core_stats` reports
    c          energy-weighted: sum_u err_u * n / d_u  /  sum_u ref_u   (the headline figure; theory (d-1)/d for
               rademacher, i.e. ~1), which is the per-unit c_u = NSR_u * n / d_u averaged with weights ref_u;
    c_median   the median of c_u;  c_mean  their plain mean;  nsr  sum_u err_u / sum_u ref_u;
    floor_frac the fraction of units at the measurement floor: where fp32 rounding of a query
               <g, f(x +- eps u)> (about 2^-24 sum_j |g_j f_j|) divided by eps is as large as the unit's exact
               VJP norm, the estimate is rounding noise, not the estimator's statistics. Score rows near
               saturation (exact VJP tiny, but not zero) sit there; one of them made c_mean 1e10 on trained GPU
               runs, which is why c is energy-weighted. The criterion is an order of magnitude, not a bound.
- grad_cosine: cosine between the parameter gradients of the ZBP arm and of exact backprop on the batch.
Everything runs in fp32, without autocast, and leaves the parameters' .grad untouched.
"""

from __future__ import annotations

import torch

from zbpscale.run.records import BlockRow, CoreRow
from zbpscale.train.model import Transformer
from zbpscale.zbp import ZBPConfig, estimate_vjp, mix_seed
from zbpscale.zbp.block import CORE_IDS

MAX_ROWS = 4  # sequences of the batch used: enough for stable ratios, cheap enough to leave on


def _norm(t: torch.Tensor) -> float:
    return float(torch.linalg.vector_norm(t.detach().double()))


def core_stats(est: torch.Tensor, exact: torch.Tensor, out: torch.Tensor, g: torch.Tensor, d: torch.Tensor,
               zbp: ZBPConfig) -> dict:
    """The estimate's error statistics of one core (see the module docstring). est, exact: (..., d_in) per unit;
    out, g: the box output f(x) and its upstream gradient (..., d_out); d: (...) live input dimension per unit."""
    err = (est.double() - exact.double()).pow(2).sum(-1)
    ref = exact.double().pow(2).sum(-1)
    live = ref > 1e-30 * ref.max()
    err, ref, d = err[live], ref[live], d.to(ref.device)[live].double()
    c_unit = err / ref * zbp.n / d
    query_error = 2.0**-24 * (g.double() * out.double()).abs().sum(-1)[live]  # fp32 rounding of <g, f(.)>
    floor = (query_error / zbp.eps).pow(2) * (0.5 if zbp.scheme == "central" else 2.0)
    return {"d_mean": float(d.mean()), "n": zbp.n, "nsr": float(err.sum() / ref.sum()),
            "c": float((err * zbp.n / d).sum() / ref.sum()), "c_median": float(c_unit.median()),
            "c_mean": float(c_unit.mean()), "floor_frac": float((floor >= ref).double().mean())}


def diagnose(model: Transformer, batch: tuple[torch.Tensor, torch.Tensor], zbp: ZBPConfig | None,
             *, diag_seed: int = 0) -> dict:
    """Diagnostics of `model` (not wrapped in DDP) on `batch`; see the module docstring."""
    device = next(model.parameters()).device
    x, y = (t[:MAX_ROWS].to(device) for t in batch)
    was_training = model.training
    model.eval()
    params = [p for p in model.parameters() if p.requires_grad]
    branches: list[tuple[int, str, list]] = []
    cores: list[tuple[int, str, torch.Tensor, object, torch.Tensor | None, torch.Tensor]] = []
    handles = []

    def keep_input(store):
        return lambda module, args: store.append(args[0])

    def keep_output(store):
        return lambda module, args, out: store.append(out)

    for k, block in enumerate(model.blocks):
        for name, inner, norm in (("attn", block.attn, block.attn_norm), ("mlp", block.mlp, block.mlp_norm)):
            store: list = []
            handles += [inner.register_forward_pre_hook(keep_input(store)),
                        norm.register_forward_hook(keep_output(store))]
            branches.append((k, name, store))

    def core_hook(layer, core, u, box, mask):
        out = box(u)
        cores.append((layer, core, u, box, mask, out))
        return out

    physical = {"attn": zbp is not None and zbp.attn_physical, "ffn": zbp is not None and zbp.ffn_physical}
    for block in model.blocks:
        if physical["attn"]:
            block.attn.core_hook = core_hook
        if physical["ffn"]:
            block.mlp.core_hook = core_hook
    try:
        with torch.autocast(device.type, enabled=False):
            _, loss = model(x, y)
            outs = [store[1] for _, _, store in branches] + [c[5] for c in cores]
            grads = torch.autograd.grad(loss, params + outs, retain_graph=True)
    finally:
        for h in handles:
            h.remove()
        for block in model.blocks:
            block.attn.core_hook = block.mlp.core_hook = None
    bp_grads, g_out = grads[: len(params)], grads[len(params):]

    block_rows: list[BlockRow] = []
    for (k, name, (h_in, h_out)), g in zip(branches, g_out):
        (back,) = torch.autograd.grad(h_out, h_in, g, retain_graph=True)
        block_rows.append(BlockRow(layer=k, branch=name, fwd_gain=_norm(h_out) / max(_norm(h_in), 1e-30),
                                   bwd_gain=_norm(back) / max(_norm(g), 1e-30)))

    core_rows: list[CoreRow] = []
    for (layer, core, u, box, mask, out), g in zip(cores, g_out[len(branches):]):
        (exact,) = torch.autograd.grad(out, u, g, retain_graph=True)
        u, g = u.detach(), g.detach()
        est = estimate_vjp(box, u, g, n=zbp.n, probe=zbp.probe, scheme=zbp.scheme, eps=zbp.eps,
                           seed=mix_seed(diag_seed, layer, CORE_IDS[core]), chunk=zbp.chunk, mask=mask,
                           impl=zbp.impl)
        d = mask.sum(-1).expand(exact.shape[:-1]) if mask is not None else torch.full(exact.shape[:-1], u.shape[-1])
        core_rows.append(CoreRow(layer=layer, core=core, **core_stats(est, exact, out.detach(), g, d, zbp)))

    cosine = None
    if zbp is not None:
        with torch.autocast(device.type, enabled=False):
            _, loss_zbp = model(x, y)
            zbp_grads = torch.autograd.grad(loss_zbp, params)
        a = torch.cat([g.flatten().double() for g in zbp_grads])
        b = torch.cat([g.flatten().double() for g in bp_grads])
        cosine = float(a @ b / (a.norm() * b.norm()))
    model.train(was_training)
    return {"loss": loss.item(), "blocks": block_rows, "cores": core_rows, "grad_cosine": cosine}
