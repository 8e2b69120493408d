"""What a job holds on to while zbpscale is upgraded under it: the names a SLURM job pickles and the commands the
local queue runs.

A job may be queued or requeued by one release and start under the next (`pip install -U zbpscale` while a sweep
runs): submitit unpickles a job's callable by its import path when the job starts, again at every requeue, and the
local queue starts each rank (and its driver) as `python -m <module>`. So these names are a promise, kept from
release to release whatever moves behind them:

    zbpscale.entry.TrainJob                              a run's SLURM job (submitted by jobs/executors/slurm.py)
    zbpscale.entry.PrepJob                               the data-prep SLURM job the runs of a sweep wait for
    python -m zbpscale.entry local-rank RUN_DIR          one rank of a local-queue run
    python -m zbpscale.entry local-driver JOBS_ROOT      the local queue's driver (and with --cancels-only, a
                                                         cancel's: one that starts nothing)
    python -m zbpscale.entry slurm-step-ended FOLDER CODE BEGAN
                                                         a SLURM job's batch script, after each job step: whether
                                                         to start the step again (exit 0) after a crash or hang
    python -m zbpscale.entry slurm-task FOLDER           one task of a run's SLURM job: submitit's own entry,
                                                         then an exit without the interpreter's teardown

Each is thin: it imports its implementation when it is called, never at import, and holds plain data (strings,
numbers, a dict), so that the state pickled by an older release loads into a newer class: an attribute added later
has a class-level default (the value that reproduces the older behaviour), and `__setstate__` ignores what a class
no longer has. tests/test_upgrade.py unpickles jobs made by older releases and runs them.
"""

from __future__ import annotations

import sys
from typing import NoReturn

COMMANDS = {"local-rank": 1, "local-driver": 1, "slurm-step-ended": 3, "slurm-task": 1}
"""Each command and how many arguments it takes."""


class TrainJob:
    """The callable of a run's SLURM job: trains the run folder (which resumes by itself) and ends, requeues or
    fails the job (jobs/executors/slurm_job.py says how)."""

    run_dir: str = ""
    """The run folder (absolute)."""
    max_timeouts: int = 20
    """Requeues after a time limit before the run fails."""
    max_preemptions: int = 100
    """Requeues after a preemption before the run fails."""
    signal_delay_s: int = 180
    """How long before its time limit the job is signalled (tells a time limit from a preemption)."""
    max_crashes: int = 3
    """Requeues after a crash or a hang before the run fails (jobs pickled before 2026-12-01 have no such bound;
    they never met a hang, which came with it)."""

    def __init__(self, run_dir: str, *, max_timeouts: int, max_preemptions: int, signal_delay_s: int,
                 max_crashes: int = 3):
        self.run_dir = str(run_dir)
        self.max_timeouts, self.max_preemptions, self.max_crashes = max_timeouts, max_preemptions, max_crashes
        self.signal_delay_s = signal_delay_s

    def __setstate__(self, state: dict) -> None:
        _set_known(self, state)

    def __call__(self) -> str:
        from zbpscale.jobs.executors import slurm_job

        return slurm_job.run_train_job(self)

    def checkpoint(self):
        """submitit's hook for a stop signal that beats `__call__` to it: requeue the same call."""
        from zbpscale.jobs.executors import slurm_job

        return slurm_job.resubmission(self)


class PrepJob:
    """The callable of the data-prep SLURM job: `prepare` with the sweep's PrepConfig, held as a dict of its fields
    (an older release pickled the PrepConfig itself; both run)."""

    prep_config: dict | object = None
    """PrepConfig's fields by name (data/prepare.py)."""

    def __init__(self, prep_config):
        import dataclasses

        self.prep_config = {f.name: getattr(prep_config, f.name) for f in dataclasses.fields(prep_config)}

    def __setstate__(self, state: dict) -> None:
        _set_known(self, state)

    def __call__(self) -> str:
        from zbpscale.jobs.executors import slurm_job

        return slurm_job.run_prep_job(self)


def _set_known(job, state: dict) -> None:
    """Unpickle: take the attributes this class knows; one it no longer has is dropped (its class-level defaults
    stand in for the ones an older release did not have)."""
    known = {name for name in vars(type(job)) if not name.startswith("_") and not callable(getattr(type(job), name))}
    job.__dict__.update({k: v for k, v in state.items() if k in known})


def main(argv: list[str]) -> int:
    """`python -m zbpscale.entry COMMAND PATH [CODE BEGAN]`: the local queue's processes, a SLURM job's task and its
    batch script's question (see the module docstring)."""
    flags = ["--cancels-only"] if argv[:1] == ["local-driver"] and argv[-1:] == ["--cancels-only"] else []
    argv = argv[:len(argv) - len(flags)]
    if not argv or argv[0] not in COMMANDS or len(argv) != 1 + COMMANDS[argv[0]]:
        print("usage: python -m zbpscale.entry {local-rank RUN_DIR, local-driver JOBS_ROOT [--cancels-only], "
              "slurm-step-ended FOLDER CODE BEGAN, slurm-task FOLDER} (started by the local queue and by SLURM jobs)",
              file=sys.stderr)
        return 2
    command, path = argv[:2]
    if command == "slurm-task":
        submitit_task(path)
    if command == "slurm-step-ended":
        from zbpscale.jobs.executors import slurm_job

        return slurm_job.step_ended(path, argv[2], argv[3])
    if command == "local-rank":
        local_rank(path)
    from zbpscale.jobs.executors.local_queue import driver

    return driver.main([path, *flags])


def submitit_task(folder: str) -> NoReturn:
    """One task of a SLURM job, as `python -m submitit.core._submit FOLDER` runs it (the callable unpickled, its
    result or error pickled), then the process's exit with submitit's status without the interpreter's teardown:
    by then every file is written and closed, and tearing torch down may abort a rank that did all its work
    (gloo's threads at finalization: `terminate called without an active exception`, SIGABRT, seen on rank 1 of a
    2-node job after its last step), which SLURM would record as the job FAILED."""
    import logging
    import os
    import traceback

    from submitit.core.submission import submitit_main

    code = 0
    sys.argv = ["submitit", folder]  # what submitit's argument parser reads
    try:
        submitit_main()
    except SystemExit as stop:  # the trainer's exit statuses pass through submitit as SystemExit
        code = stop.code if isinstance(stop.code, int) else 0 if stop.code is None else 1
    except BaseException:  # submitit has pickled the error; say it as the interpreter would, and fail
        traceback.print_exc()
        code = 1
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)  # as train.exits.leave, which this thin entry does not import (tests/test_layout.py)


def local_rank(run_dir: str) -> NoReturn:
    """One rank of a local-queue run, to its end: the process exits with the trainer's status."""
    import os

    from zbpscale.jobs.executors.local_queue import rank

    code = rank.main([run_dir])
    # The trainer has closed and fsynced everything it wrote: skip the interpreter's teardown of torch (about a
    # second), so the queue sees the exit, and starts the next run, at once.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
