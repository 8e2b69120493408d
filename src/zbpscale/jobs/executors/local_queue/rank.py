"""One rank of a local-queue run: `python -m zbpscale.entry local-rank RUN_DIR` (zbpscale/entry.py), started by the
driver. Drivers of the releases of 2026-12-02 (8006dfa up to the entry module) start it by this module's own name,
`python -m zbpscale.jobs.executors.local_queue.rank RUN_DIR`, which therefore still works.

The environment (RANK, WORLD_SIZE, MASTER_PORT, its own GPU in CUDA_VISIBLE_DEVICES) comes from the driver.
The stop flag is installed before torch is imported, and the kernel is asked to send SIGUSR2 if the driver
dies, so a killed driver makes the run checkpoint and stop instead of training on unsupervised. Exit status
is the trainer's: 0 completed, 75 checkpointed (requeue me), 3 diverged, 2 a configuration error.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys

PR_SET_PDEATHSIG = 1


def _stop_with_driver() -> None:
    driver = int(os.environ.get("ZBPSCALE_DRIVER_PID", "0"))
    if not driver:
        return
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGUSR2)
    except (OSError, AttributeError):
        pass  # not Linux: the driver's own SIGUSR2 on cancel and time limits still works
    if os.getppid() != driver:  # the driver died before the request above: stop now
        os.kill(os.getpid(), signal.SIGUSR2)


def main(argv: list[str]) -> int:
    from zbpscale import signals

    signals.install()
    _stop_with_driver()
    from zbpscale.train.cli import main as train_main

    return train_main(["--run-dir", argv[0]])


if __name__ == "__main__":
    code = main(sys.argv[1:])
    # The trainer has closed and fsynced everything it wrote: skip the interpreter's teardown of torch (about a
    # second), so the queue sees the exit, and starts the next run, at once.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
