"""The smoke sweep: the tiny model x {bp, zbp_n4} on the embedded corpus, CPU only, about 40 s on 2 idle cores.

    python -m zbpscale.submit sweeps/smoke.py --wait
"""

from zbpscale.sweep import Data, Resources, Size, Sweep, arm

CPU = Resources(nodes=1, gpus_per_node=0, tasks_per_node=1, cpus_per_task=2, time_min=30)

SWEEP = Sweep(
    name="smoke",
    sizes=(Size(name="tiny", global_batch=8, tokens=8 * 128 * 20, lr=3e-3, seq_len=128, resources=CPU),),
    arms=(arm("bp"), arm("zbp_n4", step_time_ratio=1.25)),
    data=Data(dir="data/embedded", source="embedded", workers=1),
    train=(("eval_every", 10), ("eval_batches", 2), ("ckpt_every", 10), ("diag_every", 10)),
    max_timeouts=3,
    max_preemptions=5,
    signal_delay_s=30,
)
