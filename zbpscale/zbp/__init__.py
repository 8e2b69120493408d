"""The ZBP method: probes, the zeroth-order VJP estimator, the black boxes and the autograd block.

The estimator has a plain reference form (`estimate_vjp`) and a fused one for the model's two boxes
(`zbp.fused`: counter-hash probes in Triton kernels on CUDA or torch.compile graphs on CPU), chosen by
`ZBPConfig.impl`.

Runs in a plain single process: nothing here knows about DDP, files or jobs.
"""

from zbpscale.zbp.block import ZBPClock, ZBPBlock, call_seed, zbp_apply
from zbpscale.zbp.boxes import causal_mask, masked_softmax, swiglu
from zbpscale.zbp.config import CORES, PROBES, SCHEMES, ZBPConfig, arm_zbp_config
from zbpscale.zbp.estimator import estimate_vjp, nsr
from zbpscale.zbp.probes import ProbeStream, mix_seed, theory_nsr

__all__ = [
    "CORES", "PROBES", "SCHEMES", "ProbeStream", "ZBPClock", "ZBPConfig", "ZBPBlock", "arm_zbp_config",
    "call_seed", "causal_mask", "estimate_vjp", "masked_softmax", "mix_seed", "nsr", "swiglu",
    "theory_nsr", "zbp_apply",
]
