"""How a training process tells whoever started it (an executor, a shell) how it ended: its exit code. Torch-free.

The executors read them (a local-queue rank's exit, a SLURM job's trainer), so they are a promise across releases.
"""

from typing import NoReturn

EXIT_OK = 0
EXIT_ERROR = 1  # an exception the trainer did not catch (Python's own status): a crash
EXIT_USAGE = 2  # a user's mistake (ZbpError): retrying cannot help
EXIT_DIVERGED = 3  # non-finite loss or gradient norm: stopped before the optimizer update
EXIT_HUNG = 4  # no step for step_timeout_s (train/watchdog.py): retried from the last checkpoint, as a crash
EXIT_LEASE_LOST = 5  # another trainer took the run folder over while this one was silent: it wrote nothing more,
# and whoever started it records nothing either (the run's records are the new holder's)
EXIT_REQUEUE = 75  # checkpointed on request (a signal): run me again to continue


def leave(code: int) -> NoReturn:
    """End the process at once with `code`, skipping the interpreter's teardown: no atexit hook, finalizer or
    library thread (a tracker's) gets to write once the process has lost its run folder (EXIT_LEASE_LOST); and a
    process that has written and closed everything is not aborted by torch's teardown (gloo's threads)."""
    import os
    import sys

    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
