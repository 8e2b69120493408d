"""The paper's ladder: s60 -> s1b x {bp, zbp_n16, zbp_n64} on FineWeb-Edu, 8-GPU nodes.

Budgets follow 20 tokens per parameter (Chinchilla). Global batches are fixed per size (so the accumulation
steps follow from the world size); one job attempt asks for 24 h and longer runs requeue and resume.

Step-time ratios of the ZBP arms (ZBP step time / BP step time, scaling the plan's GPU-hours) are GPU figures:
one H200, bf16 autocast, batch 8 x 1024 tokens, the fused (direct-query) Triton estimator, measured with
tools/bench_step.py --device cuda (the shapes tools/gpu_check.sh benchmarks). Measured: s124's shape
(d640 L12 H10) 2.68 / 5.89 and s1b's (d2048 L16 H16) 2.20 / 4.46. Not yet measured at these exact shapes:
s60 takes the reference shape's figures (d512 L8 H8, the nearest measured: 2.28 / 4.78), s350 the
interpolation between s124 and s1b in log non-embedding parameters. tools/gpu_check.sh prints new s124 and
s1b figures (per estimator); paste them here when the kernels change.

Each arm's learning rate is tuned (Tune, #53): 5 lrs around each size's at s60 and s124, a 3-point check around
the lr law's lr at s350 (planned once s60 and s124 have given the law), the law lr*(N) = a N^b alone at s1b; the
plan says which lr came from where, and a final run waits for its tuning runs (`submit --wait` sends it).

Seeds 0, 1, 2 at every size: the gap's power law is fitted once per seed and its interval comes from the spread
of the seeds' exponents (results/fit.py), so every seed runs every size; three seeds are the fewest that give
that interval two degrees of freedom. A seed of the final runs costs 852 GPU-hours at the plan's 35% MFU (s1b
736 of them); the tuning adds 73 (s60 and s124) and 304 (the check at s350): 2,932 GPU-hours in all. Seed 0 and
the tuning first, then the others:

    python -m zbpscale.submit sweeps/ladder.py --dry-run
    python -m zbpscale.submit sweeps/ladder.py --only '*-bp,*-zbp_n16,*-zbp_n64,*-lr*' --wait   # seed 0, tuning
"""

from zbpscale.sweep import Data, Resources, Size, Sweep, Tune, arm

MEASURED = ("one H200, bf16, the fused direct-query Triton estimator of 2026-11 (tools/bench_step.py); the closed "
            "form's ratios are not measured on a GPU yet: tools/gpu_check.sh gives them")
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
        arm("zbp_n16", step_time_ratio={"s60": 2.28, "s124": 2.68, "s350": 2.41, "s1b": 2.20}, ratio_source=MEASURED),
        arm("zbp_n64", step_time_ratio={"s60": 4.78, "s124": 5.89, "s350": 5.10, "s1b": 4.46}, ratio_source=MEASURED),
        # arm("zbp_n4", step_time_ratio=1.5),   # optional: the cheapest estimator (not measured on GPU)
    ),
    seeds=(0, 1, 2),
    # Each arm's lr, tuned: 5 lrs around each size's at s60 and s124, a 3-point check around the lr law's lr at
    # s350, the law alone at s1b (#53; the plan says which lr came from where).
    tune=Tune(sizes=("s60", "s124"), grid=(0.25, 0.5, 1.0, 2.0, 4.0), check=("s350",)),
    data=Data(dir="data/fineweb-edu", source="fineweb-edu", config="sample-100BT", tokens=25_000_000_000,
              workers=16),
    train=(("eval_every", 500), ("eval_batches", 20), ("ckpt_every", 1000), ("ckpt_every_s", 1800),
           ("diag_every", 1000)),
)
