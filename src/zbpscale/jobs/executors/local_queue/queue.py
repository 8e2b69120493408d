"""The local queue's state on disk: what `status` reads from any shell, and how submit and cancel talk to the driver.

One queue serves every sweep under a jobs root (so two sweeps on one node share its GPUs), in `<root>/.localq/`:

    driver.lock     flock held by the live driver for its whole life (released by the kernel when it dies)
    submit.lock     flock held while entries are added, and while the driver decides to exit
    driver.json     the driver's pid, host, GPU inventory, and a heartbeat (`updated`)
    driver.log      the driver's own log
    settings.json   max_parallel (re-read by the driver every tick)
    entries/<job>.json  one queue entry per job: queued -> running -> completed | failed | cancelled;
                    a requeued job goes back to queued with its place (seq) kept
    cancel/<job>    a cancel request, applied by the driver

Only the driver changes an entry after it is written; submit and cancel only add files. Exit protocol: the
driver leaves only while holding submit.lock and after finding nothing live, so an entry added under that lock
is always seen by a live driver or makes the submitter start a new one.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from zbpscale.files import atomic_write

QUEUE_DIR = ".localq"
LIVE = ("queued", "running")  # an entry then ends completed, failed or cancelled (attempts.py's words)
SCHEDULER_STATE = {"queued": "PENDING", "running": "RUNNING"}  # as squeue would say it (see slurm.ALIVE)


@dataclass
class Entry:
    """One job of the local queue (a training run, or the data-prep job the runs of a sweep wait for)."""

    job_id: str
    """`local-<n>`, unique in the queue; kept across requeues like a SLURM job id."""
    name: str
    """`<sweep>/<run>` (or `<sweep>/prep-data`), for people."""
    kind: str = "train"
    """train (ranks of local_queue/rank.py on run_dir) or command (ranks running `command`: the data prep)."""
    run_dir: str = ""
    """The run folder (train jobs)."""
    command: list[str] = field(default_factory=list)
    """The command line (command jobs)."""
    log_dir: str = ""
    """Where `<job>_<rank>.log` files go."""
    gpus: int = 0
    """GPUs the job needs (one rank each); 0 = a CPU job."""
    ranks: int = 1
    """Processes the job starts (one per GPU, or the CPU run's tasks)."""
    threads: int = 1
    """OMP_NUM_THREADS of each rank."""
    time_s: float = 24 * 3600.0
    """Time limit of one attempt."""
    signal_delay_s: float = 180.0
    """SIGUSR2 goes this long before the limit (the trainer checkpoints at the next step)."""
    max_timeouts: int = 20
    """Requeues after a time limit before the run fails."""
    max_preemptions: int = 100
    """Requeues after other interruptions (the driver was killed, an outside SIGTERM) before it fails."""
    max_crashes: int = 3
    """Requeues after a crash (a rank killed or failing with an exception) before the run fails."""
    after: str = ""
    """Job id that must complete first ('' = none)."""
    seq: int = 0
    """Priority: submission order."""
    submitted: float = 0.0
    state: str = "queued"
    started: float = 0.0
    """Start of the current attempt (running)."""
    assigned: list[str] = field(default_factory=list)
    """GPU ids of the current attempt."""
    pids: list[list[int]] = field(default_factory=list)
    """[pid, kernel start time] of each rank of the current attempt."""
    port: int = 0
    """Rendezvous port of the current attempt."""
    signalled: str = ""
    """Why the driver signalled the current attempt: timeout | kill | cancel ('' = not signalled)."""
    signalled_at: float = 0.0
    attempts: int = 0
    """Attempts started so far."""
    ended: float = 0.0
    reason: str = ""
    """Why it ended (final states)."""


class LocalQueue:
    """Paths and file operations of one queue folder (see the module docstring)."""

    def __init__(self, root: str | Path):
        self.dir = Path(root).absolute() / QUEUE_DIR
        self.entries_dir = self.dir / "entries"
        self.cancel_dir = self.dir / "cancel"

    # --------------------------------------------------------------------------------------------- entries
    def entries(self) -> list[Entry]:
        """Every entry, by priority."""
        out = []
        if self.entries_dir.is_dir():
            for path in self.entries_dir.glob("*.json"):
                try:
                    out.append(Entry(**json.loads(path.read_text())))
                except (json.JSONDecodeError, TypeError, OSError):
                    continue  # a file being replaced; the next read sees it
        return sorted(out, key=lambda e: e.seq)

    def write(self, entry: Entry) -> None:
        _write_json(self.entries_dir / f"{entry.job_id}.json", dataclasses.asdict(entry))

    def add(self, specs: list[Entry]) -> list[Entry]:
        """Give new entries job ids and a place at the end of the queue, and write them (hold `submit_lock`)."""
        counter = self.dir / "next_id"
        n = int(counter.read_text()) if counter.exists() else 1
        added = []
        for spec in specs:
            entry = dataclasses.replace(spec, job_id=spec.job_id or f"local-{n}", seq=n, submitted=time.time())
            for i, other in enumerate(specs):  # dependencies named by position ("#0") become job ids
                if entry.after == f"#{i}":
                    entry.after = added[i].job_id
            self.write(entry)
            added.append(entry)
            n += 1
        _write_json(counter, n)
        return added

    def states(self) -> dict[str, str]:
        """{job id: squeue-style state} of live entries, for submit's run_action."""
        return {e.job_id: SCHEDULER_STATE[e.state] for e in self.entries() if e.state in LIVE}

    # ---------------------------------------------------------------------------------------------- cancel
    def request_cancel(self, job_id: str) -> None:
        self.cancel_dir.mkdir(parents=True, exist_ok=True)
        (self.cancel_dir / job_id).write_text(f"{time.time()}\n")

    def cancel_requests(self) -> list[str]:
        return sorted(p.name for p in self.cancel_dir.glob("*")) if self.cancel_dir.is_dir() else []

    def clear_cancel(self, job_id: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            (self.cancel_dir / job_id).unlink()

    # -------------------------------------------------------------------------------------- settings, driver
    def settings(self) -> dict:
        return _read_json(self.dir / "settings.json") or {}

    def set_max_parallel(self, n: int) -> None:
        _write_json(self.dir / "settings.json", {**self.settings(), "max_parallel": n})

    def driver_info(self) -> dict:
        return _read_json(self.dir / "driver.json") or {}

    def write_driver_info(self, info: dict) -> None:
        _write_json(self.dir / "driver.json", info)

    @contextlib.contextmanager
    def submit_lock(self):
        self.dir.mkdir(parents=True, exist_ok=True)
        with open(self.dir / "submit.lock", "a") as fh:
            fcntl.flock(fh, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(fh, fcntl.LOCK_UN)

    def try_driver_lock(self):
        """The open, exclusively locked driver.lock, or None when another driver holds it."""
        self.dir.mkdir(parents=True, exist_ok=True)
        fh = open(self.dir / "driver.lock", "a")
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            fh.close()
            return None
        return fh

    def driver_alive(self) -> bool:
        """Whether a driver holds the queue (a kernel lock: right even after kill -9 and pid reuse)."""
        if not (self.dir / "driver.lock").exists():
            return False
        fh = self.try_driver_lock()
        if fh is None:
            return True
        fh.close()
        return False

    def start_driver(self) -> None:
        """Start a detached driver (its own session: the terminal closing or Ctrl-C does not reach it)."""
        self.dir.mkdir(parents=True, exist_ok=True)
        log = open(self.dir / "driver.log", "ab")
        package_root = str(Path(__file__).resolve().parents[2])  # importable from any cwd, installed or not
        path = os.pathsep.join(p for p in (package_root, os.environ.get("PYTHONPATH", "")) if p)
        env = {**os.environ, "PYTHONUNBUFFERED": "1", "PYTHONPATH": path}
        subprocess.Popen([sys.executable, "-m", "zbpscale.jobs.executors.local_queue.driver", str(self.dir.parent)],
                         stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                         close_fds=True, env=env, cwd=str(self.dir))
        log.close()

    def ensure_driver(self) -> bool:
        """Start a driver when entries are live and none holds the queue; True if one was started."""
        if self.driver_alive() or not any(e.state in LIVE for e in self.entries()):
            return False
        self.start_driver()
        deadline = time.time() + 20  # until it holds the queue: a submit right after this one must see it alive
        while not self.driver_alive() and time.time() < deadline:
            time.sleep(0.05)
        return True


def _read_json(path: Path):
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return None


def _write_json(path: Path, obj) -> None:
    """Atomic: a reader sees the old file or the new one, never half of one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, json.dumps(obj, indent=1) + "\n")
