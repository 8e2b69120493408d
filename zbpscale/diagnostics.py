"""Diagnostics of a model on a fixed batch: branch gains rho_k, the estimator's NSR and c per core, and
the cosine between ZBP and BP parameter gradients.

- Branch gains, per block k and branch (attn, mlp), with F_k the branch (sublayer then its norm):
  forward  ||F_k(h_k)|| / ||h_k||;  backward ||J_{F_k}^T g|| / ||g|| for the upstream gradient g at the branch
  output (the gain of the gradient flowing back through the branch rather than the skip connection).
- Per physical core: the ZBP estimate against the exact VJP on the same input and upstream gradient, as the
  mean per-unit NSR and c = mean over units of NSR_u * n / d_u (d_u the unit's live dimension; units with
  zero exact VJP, e.g. score rows of length 1, are left out). Theory: c = (d - 1) / d for rademacher.
- grad_cosine: cosine between the parameter gradients of the ZBP arm and of exact backprop on the batch.
Everything runs in fp32, without autocast, and leaves the parameters' .grad untouched.
"""

from __future__ import annotations

import torch

from zbpscale.model import Transformer
from zbpscale.zbp import ZBPConfig, estimate_vjp, mix_seed
from zbpscale.zbp.block import CORE_IDS

MAX_ROWS = 4  # sequences of the batch used: enough for stable ratios, cheap enough to leave on


def _norm(t: torch.Tensor) -> float:
    return float(torch.linalg.vector_norm(t.detach().double()))


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

    block_rows = []
    for (k, name, (h_in, h_out)), g in zip(branches, g_out):
        (back,) = torch.autograd.grad(h_out, h_in, g, retain_graph=True)
        block_rows.append({"layer": k, "branch": name, "fwd_gain": _norm(h_out) / max(_norm(h_in), 1e-30),
                           "bwd_gain": _norm(back) / max(_norm(g), 1e-30)})

    core_rows = []
    for (layer, core, u, box, mask, out), g in zip(cores, g_out[len(branches):]):
        (exact,) = torch.autograd.grad(out, u, g, retain_graph=True)
        u, g = u.detach(), g.detach()
        est = estimate_vjp(box, u, g, n=zbp.n, probe=zbp.probe, scheme=zbp.scheme, eps=zbp.eps,
                           seed=mix_seed(diag_seed, layer, CORE_IDS[core]), chunk=zbp.chunk, mask=mask,
                           impl=zbp.impl)
        err = (est.double() - exact.double()).pow(2).sum(-1)
        ref = exact.double().pow(2).sum(-1)
        d = (mask.sum(-1).expand(ref.shape) if mask is not None else torch.full_like(ref, u.shape[-1])).double()
        live = ref > 1e-30 * ref.max()
        unit_nsr = err[live] / ref[live]
        core_rows.append({"layer": layer, "core": core, "d_mean": float(d[live].mean()), "n": zbp.n,
                          "nsr": float(unit_nsr.mean()), "c": float((unit_nsr * zbp.n / d[live]).mean())})

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
