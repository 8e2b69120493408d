"""The sentinel of a SLURM attempt: a process that rank 0 of a run's job starts beside the trainer, to catch a
trainer too frozen for its own watchdog (jobs/sentinel.py says what it watches and what it does).

    python -m zbpscale.jobs.executors.slurm_sentinel RUN_DIR JOB_ID PARENT_PID SINCE TIMEOUT_S MAX_CRASHES

It lives as long as the trainer's process (PARENT_PID) and is killed when the trainer returns. It ignores the
stop signals SLURM sends to every process of a job (the time-limit warning, a cancel, the SIGTERM of a requeue):
it must outlive them to watch the last checkpoint and, after it has requeued a frozen job, to kill the frozen
ranks before the scheduler's SIGCONT wakes them. Started by the same release as the job's code, so its module
path is no promise (unlike zbpscale.entry's).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from zbpscale import lease
from zbpscale.jobs import sentinel
from zbpscale.run.folder import RunFolder


def start_sentinel(run_dir: Path, job_id: str, *, since: float, timeout_s: float, max_crashes: int):
    """Start the sentinel of this attempt (rank 0): a child process; None when there is no bound to watch."""
    if timeout_s <= 0:
        return None
    argv = [sys.executable, "-m", __spec__.name if __spec__ else "zbpscale.jobs.executors.slurm_sentinel",
            str(run_dir), job_id, str(os.getpid()), str(since), str(timeout_s), str(max_crashes)]
    return subprocess.Popen(argv, stdin=subprocess.DEVNULL)  # its output goes to the job's log


def main(argv: list[str]) -> int:
    from zbpscale.jobs.executors.slurm_job import hung_from_outside
    from zbpscale.proc import pid_alive, process_start_time

    for sig in (signal.SIGTERM, signal.SIGUSR2, signal.SIGINT):
        signal.signal(sig, signal.SIG_IGN)
    run_dir, job_id, parent = Path(argv[0]), argv[1], int(argv[2])
    since, timeout_s, max_crashes = float(argv[3]), float(argv[4]), int(argv[5])
    parent_start = process_start_time(parent)
    while parent_start is not None and pid_alive(parent, parent_start):
        hang = sentinel.check(run_dir, since=since, timeout_s=timeout_s)
        if hang is not None and not sentinel.holds(run_dir, parent):  # frozen past its lease and taken over meanwhile:
            holder = lease.taken_by(RunFolder(run_dir).trainer_lease)
            print(f"sentinel: {run_dir} is another trainer's now ({holder}); the frozen trainer (pid {parent}) is "
                  "killed, nothing recorded", file=sys.stderr, flush=True)
            for pid in hang.pids or (parent,):
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
            return 0
        if hang is not None:
            print(f"sentinel: {hang.reason}" + (f"\n{hang.detail}" if hang.detail else ""), file=sys.stderr,
                  flush=True)
            sentinel.record_hang(run_dir, hang)
            hung_from_outside(run_dir, job_id, hang.reason, max_crashes=max_crashes, pids=hang.pids or (parent,))
            return 0
        time.sleep(sentinel.CHECK_S)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
