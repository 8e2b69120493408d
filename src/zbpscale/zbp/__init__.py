"""The ZBP method: probes, the zeroth-order VJP estimator, the black boxes and the autograd block.

The estimator has a plain reference form (`estimate`, `estimate_vjp`) and two fast ones for the model's two
boxes, both with counter-hash probes, in Triton kernels on CUDA or torch.compile graphs on CPU: `zbp.fused`
queries the box directly (rademacher, gaussian), `zbp.closed_form` evaluates exact closed forms of the same
queries (rademacher). `ZBPConfig.impl` chooses; `zbp.fused.choose` says which path runs.

Runs in a plain single process: nothing here knows about DDP, files or jobs. The names below load on first
use (PEP 562), so `zbpscale.zbp.config` (the torch-free ZBPConfig that job control plans with) imports no torch.
"""

import importlib

_MODULES = {
    "block": ("ZBPBlock", "ZBPClock", "call_seed", "call_seq0", "zbp_apply"),
    "boxes": ("SoftmaxBox", "SwiGLUBox", "causal_mask", "causal_softmax", "masked_softmax", "measurement_dtype",
              "row_softmax", "swiglu"),
    "config": ("CORES", "IMPLS", "PROBES", "SCHEMES", "ZBPConfig", "arm_name", "arm_zbp_config"),
    "estimator": ("estimate", "estimate_vjp", "nsr"),
    "probes": ("ProbeStream", "mix_seed", "theory_nsr"),
}
_WHERE = {name: module for module, names in _MODULES.items() for name in names}
__all__ = sorted(_WHERE)


def __getattr__(name: str):
    if name not in _WHERE:
        raise AttributeError(f"module 'zbpscale.zbp' has no attribute {name!r}")
    return getattr(importlib.import_module(f"zbpscale.zbp.{_WHERE[name]}"), name)
