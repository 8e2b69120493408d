"""The sentinel of a SLURM attempt: a process that rank 0 of a run's job starts beside the trainer, to catch a
trainer too frozen for its own watchdog (jobs/sentinel.py says what it watches and what it does).

    python -m zbpscale.jobs.executors.slurm_sentinel RUN_DIR JOB_ID PARENT_PID SINCE TIMEOUT_S MAX_CRASHES

It lives as long as the trainer's process (PARENT_PID) and is killed when the trainer returns; rank 0 starts it
again if it dies before (`Supervised`). It ignores the
stop signals SLURM sends to every process of a job (the time-limit warning, a cancel, the SIGTERM of a requeue):
it must outlive them to watch the last checkpoint and, after it has requeued a frozen job, to kill the frozen
ranks before the scheduler's SIGCONT wakes them. Started by the same release as the job's code, so its module
path is no promise (unlike zbpscale.entry's).

How a hung attempt ends on SLURM is here too (`hung_from_outside`, and `record_hung_end` for the trainer's own
watchdog: slurm_job.py), with the two scheduler actions it takes: the job step killed (`kill_step`: the batch
script starts a new one, `step_restarts`) or, for a job of an older release, the job requeued (`requeue`).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from zbpscale import lease
from zbpscale.jobs import ends, sentinel
from zbpscale.jobs.attempt import Bounds, conclude
from zbpscale.run.folder import RunFolder


def start_sentinel(run_dir: Path, job_id: str, *, since: float, timeout_s: float, max_crashes: int):
    """Start the sentinel of this attempt (rank 0), supervised; None when there is no bound to watch."""
    if timeout_s <= 0:
        return None
    argv = [sys.executable, "-m", __spec__.name if __spec__ else "zbpscale.jobs.executors.slurm_sentinel",
            str(run_dir), job_id, str(os.getpid()), str(since), str(timeout_s), str(max_crashes)]
    return Supervised(argv)


class Supervised:
    """The sentinel's process, started again when it dies (kill -9, the OOM killer): a thread of rank 0 looks every
    SUPERVISE_S, so a trainer that freezes after its sentinel died is still caught, unless it froze within that
    second. A sentinel that exits 0 has done its work (the trainer gone, or a hang recorded and acted on); one
    that keeps dying is given up after MAX_STARTS, in a line of the job's log."""

    SUPERVISE_S = 1.0
    MAX_STARTS = 10

    def __init__(self, argv: list[str]):
        self.argv, self.starts, self.lock = argv, 0, threading.Lock()
        self.stopped = threading.Event()
        self.proc = self._start()
        self.thread = threading.Thread(target=self._watch, name="sentinel-supervisor", daemon=True)
        self.thread.start()

    def _start(self) -> subprocess.Popen:
        self.starts += 1
        return subprocess.Popen(self.argv, stdin=subprocess.DEVNULL)  # its output goes to the job's log

    def _watch(self) -> None:
        while not self.stopped.wait(self.SUPERVISE_S):
            with self.lock:
                code = self.proc.poll()
                if code is None or self.stopped.is_set():
                    continue
                if code == 0:
                    return
                how = f"signal {-code}" if code < 0 else f"exit status {code}"
                if self.starts >= self.MAX_STARTS:
                    print(f"sentinel: pid {self.proc.pid} ended ({how}), started {self.starts} times: no sentinel "
                          "now (the trainer's own watchdog still watches)", file=sys.stderr, flush=True)
                    return
                old = self.proc.pid
                self.proc = self._start()
                print(f"sentinel: pid {old} ended ({how}); started again (pid {self.proc.pid})", file=sys.stderr,
                      flush=True)

    def kill(self) -> None:
        """Stop watching and kill the sentinel (the trainer returned)."""
        with self.lock:
            self.stopped.set()
            self.proc.kill()

    def wait(self) -> None:
        self.thread.join()
        self.proc.wait()


def step_restarts() -> bool:
    """Whether this job's batch script starts a crashed or hung attempt again as a new step (`slurm.step_restarts`:
    jobs submitted since #42); a job of an older release requeues itself instead."""
    return os.environ.get("ZBPSCALE_STEP_RESTARTS") == "1"


def hung_from_outside(run_dir: Path, job_id: str, reason: str, *, max_crashes: int, pids: tuple[int, ...]) -> None:
    """The sentinel (jobs/sentinel.py) found the trainer frozen: record the hang, then end the frozen attempt: its
    step killed (the batch script starts a new one within max_crashes), or, for a job of an older release, the job
    requeued from the last checkpoint or, over max_crashes, its tasks killed so that it ends failed. The
    frozen ranks of this node (`pids`) are killed first: woken by the scheduler's SIGCONT and SIGTERM instead, a
    trainer would checkpoint and take the requeue for a cancel (a job that ended is still requeued)."""
    again = record_hung_end(run_dir, job_id, reason, Bounds(crashes=max_crashes), ends.Seen(stop="hung"))
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    if step_restarts():  # the batch script decides on the next step once this one has ended
        kill_step()
        return
    if again:
        requeue(job_id)
        return
    try:
        subprocess.run(["scancel", "--signal=KILL", job_id], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError) as err:
        print(f"scancel --signal=KILL {job_id} did not go through ({err})", file=sys.stderr, flush=True)


def record_hung_end(run_dir: Path, job_id: str, reason: str, bounds: Bounds, seen: ends.Seen) -> bool:
    """Record the end of an attempt that hung (`seen`: by the trainer's watchdog, or caught from outside), as
    jobs/ends.py classifies it, counted as a crash (failed over max_crashes); whether it may be started again."""
    return conclude(run_dir, job_id, "slurm", ends.classify(seen), bounds, words=reason,
                    again="restart" if step_restarts() else "requeue").again


def kill_step(*, tries: int = 6, wait_s: float = 5.0) -> None:
    """End this job step at once, every task on every node (SIGKILL: a frozen rank, here or on another node,
    would keep it alive for ever; its peers are blocked on it). The batch script then decides (`step_ended`).
    A refusal (a controller too busy to answer in time) is said and asked again, up to `tries` times: nothing
    else ends a step that a stopped rank holds."""
    step = f"{os.environ.get('SLURM_JOB_ID', '')}.{os.environ.get('SLURM_STEP_ID', '')}"
    for attempt in range(1, tries + 1):
        try:
            done = subprocess.run(["scancel", "--signal=KILL", step], capture_output=True, text=True, timeout=60)
            if done.returncode == 0:
                return
            why = (done.stderr.strip().splitlines() or [f"exit status {done.returncode}"])[-1]
        except (OSError, subprocess.SubprocessError) as err:
            why = str(err)
        print(f"scancel --signal=KILL {step} did not go through ({why}); try {attempt}/{tries}", file=sys.stderr,
              flush=True)
        if attempt < tries:
            time.sleep(wait_s)


def requeue(job_id: str) -> None:
    """`scontrol requeue` the job: the same submission starts again and resumes from the run folder."""
    try:
        subprocess.run(["scontrol", "requeue", job_id], check=True, capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError) as err:
        # A preempting scheduler may already be requeueing the job (PreemptMode=REQUEUE): say so and go on.
        print(f"scontrol requeue {job_id} did not go through ({err}); the scheduler may requeue it itself",
              file=sys.stderr, flush=True)


def main(argv: list[str]) -> int:
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
