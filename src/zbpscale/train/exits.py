"""How a training process tells whoever started it (an executor, a shell) how it ended: its exit code. Torch-free.

The executors read them (a local-queue rank's exit, a SLURM job's trainer), so they are a promise across releases.
"""

EXIT_OK = 0
EXIT_USAGE = 2  # a user's mistake (ZbpError): retrying cannot help
EXIT_DIVERGED = 3  # non-finite loss or gradient norm: stopped before the optimizer update
EXIT_HUNG = 4  # no step for step_timeout_s (train/watchdog.py): retried from the last checkpoint, as a crash
EXIT_REQUEUE = 75  # checkpointed on request (a signal): run me again to continue
