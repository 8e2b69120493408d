"""The paper's ladder: s60 -> s1b x {bp, zbp_n16, zbp_n64} on FineWeb-Edu, 8-GPU nodes.

Budgets follow 20 tokens per parameter (Chinchilla). Global batches are fixed per size (so the accumulation
steps follow from the world size); one job attempt asks for 24 h and longer runs requeue and resume.
Step-time ratios of the ZBP arms are the CPU figures of tools/bench_step.py (fused estimator, tiny model);
replace them with GPU measurements when available (tools/gpu_check.sh).

    python -m zbpscale.submit sweeps/ladder.py --dry-run
"""

from zbpscale.sweep import Data, Resources, Size, Sweep, arm

NODE = Resources(nodes=1, gpus_per_node=8, cpus_per_task=12, mem_gb=0, time_min=24 * 60)
TWO_NODES = Resources(nodes=2, gpus_per_node=8, cpus_per_task=12, mem_gb=0, time_min=24 * 60)

SWEEP = Sweep(
    name="ladder",
    sizes=(
        Size(name="s60", global_batch=256, micro_batch=32, lr=1.5e-3, resources=NODE),
        Size(name="s124", global_batch=256, micro_batch=32, lr=1.0e-3, resources=NODE),
        Size(name="s350", global_batch=512, micro_batch=16, lr=6e-4, resources=NODE),
        Size(name="s1b", global_batch=1024, micro_batch=8, lr=4e-4, resources=TWO_NODES),
    ),
    arms=(
        arm("bp"),
        arm("zbp_n16", step_time_ratio=1.4),
        arm("zbp_n64", step_time_ratio=1.9),
        # arm("zbp_n4", step_time_ratio=1.2),   # optional: the cheapest estimator
    ),
    data=Data(dir="data/fineweb-edu", source="fineweb-edu", config="sample-100BT", tokens=25_000_000_000,
              workers=16),
    train=(("eval_every", 500), ("eval_batches", 20), ("ckpt_every", 1000), ("ckpt_every_s", 1800),
           ("diag_every", 1000)),
)
