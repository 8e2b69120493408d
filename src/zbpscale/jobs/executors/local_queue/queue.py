"""The local queue's state on disk: what `status` reads from any shell, and how submit and cancel talk to the driver.

One queue serves every sweep under a jobs root (so two sweeps on one node share its GPUs), in `<root>/.localq/`:

    driver.lock     held by the live driver for its whole life (lease.try_lock: a flock where it works, and
                    driver.lease, renewed every tick; a driver killed on this node is seen gone at once)
    submit.lock     held while entries are added, and while the driver decides to exit (with submit.lease)
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
import json
import math
import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from zbpscale.files import atomic_write
from zbpscale.lease import kernel_held, lease_path, live_holder, read_holder, try_lock, wait_lock

QUEUE_DIR = ".localq"
LIVE = ("queued", "running")  # an entry then ends completed, failed or cancelled (run/history.py's words)
SCHEDULER_STATE = {"queued": "PENDING", "running": "RUNNING"}  # as squeue would say it (see base.ALIVE)
QUEUE_LEASE_STALE_S = 300.0
JOB_ID = "local-"  # and the entry's number: local-12
"""A queue lease not renewed for this long is its holder gone (seen from another node: on this one, its pid says).
The driver renews every tick, and is slowest before its first (the GPU inventory may import torch); a submit
holds submit.lock for a few file writes and the driver's start-up (ensure_driver: at most 20 s)."""


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
    makes: str = ""
    """The file whose presence says a command job's work is done (the data prep's manifest.json; '' = none): an
    attempt whose exit status went with a dead driver is settled by it, and two jobs that make one file never run
    at once (the second runs after the first, and finds it made or refuses in its own words)."""
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


_ENTRY_FIELDS = {f.name for f in dataclasses.fields(Entry)}
"""What an entry file may say: a field written by a newer release is left out (an older one's missing fields take
Entry's defaults), so that a driver reads the entries of any release."""


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
                    fields = json.loads(path.read_text())
                    entry = Entry(**{k: v for k, v in fields.items() if k in _ENTRY_FIELDS})
                except (ValueError, TypeError, OSError, AttributeError):  # ValueError: not JSON, not UTF-8
                    continue  # a file being replaced (the next read sees it), or garbled by hand
                if isinstance(entry.seq, int) and isinstance(entry.job_id, str) and isinstance(entry.name, str):
                    out.append(entry)  # else its order and its name are not known: as unreadable
        return sorted(out, key=lambda e: e.seq)

    def write(self, entry: Entry) -> None:
        _write_json(self.entries_dir / f"{entry.job_id}.json", dataclasses.asdict(entry))

    def add(self, specs: list[Entry]) -> list[Entry]:
        """Give new entries job ids and a place at the end of the queue, and write them (hold `submit_lock`)."""
        counter, n = self.dir / "next_id", self._next_number()
        added = []
        for spec in specs:
            entry = dataclasses.replace(spec, job_id=spec.job_id or f"{JOB_ID}{n}", seq=n, submitted=time.time())
            for i, other in enumerate(specs):  # dependencies named by position ("#0") become job ids
                if entry.after == f"#{i}":
                    entry.after = added[i].job_id
            self.write(entry)
            added.append(entry)
            n += 1
        _write_json(counter, n)
        return added

    def _next_number(self) -> int:
        """The number of the next job id (`local-<n>`), kept in next_id; where that is missing or garbled (.localq
        deleted or edited by hand), one past every number an entry or a run folder's attempts record under the jobs
        root holds, so that no id is given twice: a run's job is known by its id, and status, cancel and submit took
        another run's job for its own."""
        try:
            n = int((self.dir / "next_id").read_text())
        except (OSError, ValueError):
            n = 0
        if n >= 1:
            return n
        from zbpscale.errors import ZbpError
        from zbpscale.run.folder import RunFolder
        from zbpscale.run.history import read_attempts

        used = [e.seq for e in self.entries()]
        root = self.dir.parent
        for sweep in [p for p in root.iterdir() if p.is_dir()] if root.is_dir() else []:
            for run in RunFolder.all_in(sweep):
                with contextlib.suppress(ZbpError):  # a broken record: status says so; its ids are not known
                    used += [int(job[len(JOB_ID):]) for job in (e.get("job_id") for e in read_attempts(run))
                             if isinstance(job, str) and job.startswith(JOB_ID) and job[len(JOB_ID):].isdigit()]
        return max(used, default=0) + 1

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
    def submit_lock(self, poll_s: float = 0.02):
        """Hold submit.lock (waiting for it) while entries are added."""
        lock, _ = wait_lock(self.dir / "submit.lock", stale_after_s=QUEUE_LEASE_STALE_S, wait_s=math.inf, poll_s=poll_s)
        with lock:
            yield

    def try_driver_lock(self):
        """The held driver lock (a lease.Lock: renew it, release it), or None when another driver holds it."""
        return try_lock(self.dir / "driver.lock", stale_after_s=QUEUE_LEASE_STALE_S)[0]

    def driver_alive(self) -> bool:
        """Whether a driver holds the queue: its lease names a process not provably gone (on this node: its pid
        and start time, so right after kill -9 and pid reuse); without a lease, a driver of an older release
        holding the kernel lock (it outlives an upgrade). Writes nothing."""
        path = self.dir / "driver.lock"
        if read_holder(lease_path(path)) is None:
            return kernel_held(path)
        return live_holder(path, stale_after_s=QUEUE_LEASE_STALE_S) is not None

    def start_driver(self, *, starts: bool = True) -> None:
        """Start a detached driver (its own session: the terminal closing or Ctrl-C does not reach it); `starts`
        False: one that applies cancel requests and settles what a dead driver left, and starts nothing (a cancel's:
        driver.py) until a submitter asks it to (`ensure_driver`)."""
        self.dir.mkdir(parents=True, exist_ok=True)
        log = open(self.dir / "driver.log", "ab")
        env = {**os.environ, "PYTHONUNBUFFERED": "1", "PYTHONPATH": driver_pythonpath()}
        subprocess.Popen([sys.executable, "-m", "zbpscale.entry", "local-driver", str(self.dir.parent),
                          *([] if starts else [CANCELS_ONLY])], stdin=subprocess.DEVNULL, stdout=log,
                         stderr=subprocess.STDOUT, start_new_session=True, close_fds=True, env=env, cwd=str(self.dir))
        log.close()

    def ensure_driver(self, *, starts: bool = True) -> bool:
        """Start a driver when entries are live and none holds the queue; True if one was started. `starts` False (a
        cancel): one that starts nothing; True (a submitter): a driver that holds the queue and starts nothing is
        asked to start jobs again (`want_starts`)."""
        if self.driver_alive():
            if starts:
                self.want_starts()
            return False
        if not any(e.state in LIVE for e in self.entries()):
            return False
        began = time.time()
        self.start_driver(starts=starts)
        deadline = began + 20  # until it holds the queue: a submit right after this one must see it alive
        while not self.driver_alive() and time.time() < deadline:
            if self.driver_info().get("exited", 0) >= began:  # it did its work and left already (a cancel's)
                break
            time.sleep(0.05)
        return True

    def want_starts(self) -> None:
        """Ask the driver that holds the queue to start jobs (one started by a cancel starts none until asked)."""
        (self.dir / STARTS).write_text(f"{time.time()}\n")

    def starts_wanted(self) -> bool:
        return (self.dir / STARTS).exists()

    def clear_starts(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            (self.dir / STARTS).unlink()


CANCELS_ONLY = "--cancels-only"
"""The driver's flag for one that starts nothing (`start_driver`)."""
STARTS = "starts"
"""The file in the queue's folder by which a submitter asks a driver that starts nothing to start jobs."""


def driver_pythonpath() -> str:
    """PYTHONPATH for the driver (and the ranks it starts, which inherit it): this process's, led by the folder that
    holds the zbpscale package it runs, so that the driver (started in the queue's folder) imports the same code
    wherever it came from: a source folder, an editable install, or PYTHONPATH. An installed package's folder is a
    site directory, which the interpreter finds by itself: it is not added (it would overtake PYTHONPATH)."""
    import site

    import zbpscale

    root = str(Path(zbpscale.__file__).resolve().parents[1])
    given = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    sites = {str(Path(p).resolve()) for p in [*site.getsitepackages(), site.getusersitepackages()]}
    return os.pathsep.join(given if root in sites or root in given else [root, *given])


def _read_json(path: Path):
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):  # ValueError: not JSON, not UTF-8
        return None


def _write_json(path: Path, obj) -> None:
    """Atomic: a reader sees the old file or the new one, never half of one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, json.dumps(obj, indent=1) + "\n")
