"""The local executor: a detached queue that runs a sweep's jobs on one node's GPUs (or CPU) without SLURM.

queue.py holds the on-disk state, slots.py the GPU scheduling, driver.py the detached driver, rank.py the
process of one rank. `python -m zbpscale.submit SWEEP --executor local` is the way in.
"""
