"""The local queue's driver: `python -m zbpscale.entry local-driver JOBS_ROOT` (zbpscale/entry.py), started by submit.

One driver per queue (its lock says which: queue.py). Every tick it renews its lease, and
  1. applies cancel requests (a queued job is dropped; a running one gets SIGUSR2, checkpoints, stops);
  2. reaps finished attempts and records them in the run's attempts.jsonl, classified as the SLURM job's are
     (jobs/ends.py's `classify`, from the ranks' exit statuses, the COMPLETE stamp and this driver's own signal):
       all ranks exit 0 and COMPLETE is there         -> completed
       exit 75 after our time-limit SIGUSR2 (or killed at the limit) -> timeout, requeued within max_timeouts
       exit 75 otherwise (a dead driver's PDEATHSIG, an outside SIGTERM) -> preempted, within max_preemptions
       exit 2 (a user's mistake) or 3 (diverged)       -> failed: retrying cannot help
       exit 4 (the hang watchdog: no step for step_timeout_s) -> hung, requeued like a crash
       a trainer frozen past step_timeout_s (jobs/sentinel.py; its watchdog cannot act) -> killed, hung, likewise
       anything else (an exception, a rank killed)     -> crashed, requeued from the last checkpoint within
                                                          max_crashes, with the log's last line as the reason;
       (whether it starts again, and its one end record: jobs/attempt.py's `conclude`, shared with the SLURM job)
  3. signals attempts at their time limit minus the sweep's signal delay, and kills them at the limit;
  4. starts queued jobs on free GPU slots (local_queue/slots.py), each rank pinned to its own GPU (two jobs that
     make one file, two sweeps' preps of one data folder, one after the other);
and leaves when nothing is queued or running. A driver that finds entries marked running from a dead driver
adopts them: it waits for their processes to end (the kernel told them to checkpoint: rank.py), signalling them by
pid as it signals its own (a cancel, the time limit, a hang: a frozen rank that the kernel's signal did not stop
is killed), and then settles them by their records, since their exit statuses went with the dead driver
(`settle_adopted`): the trainer's own end record says how it ended; one this driver killed ended killed; an attempt
that logged steps and left no end record was killed with its driver (kill -9 of both, the OOM killer): crashed,
with the steps it logged past its checkpoint named as dropped; a command job (the data prep, which outlives its
driver) by the file it makes (`Entry.makes`): done if it is there.
An attempt's end is recorded once: one whose end is in the run's attempts but whose entry still says running (its
driver died, or a full disk refused the entry, in between) follows that end. A tick that fails on a file (a full
disk) is logged and tried again; the driver does not leave its jobs unwatched for it.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from zbpscale import signals
from zbpscale.jobs import ends, sentinel
from zbpscale.jobs.attempt import Bounds, conclude
from zbpscale.jobs.executors.local_queue.queue import CANCELS_ONLY, LIVE, Entry, LocalQueue
from zbpscale.jobs.executors.local_queue.slots import Held, Want, gpu_inventory, rank_env, schedule
from zbpscale.proc import pid_alive, process_start_time
from zbpscale.run.folder import RunFolder, job_log
from zbpscale.run.history import History
from zbpscale.run.records import tail_records
from zbpscale.run.snapshot import Snapshot
from zbpscale.train.exits import EXIT_DIVERGED, EXIT_HUNG, EXIT_OK, EXIT_REQUEUE, EXIT_USAGE

RANK_COMMAND = ["-m", "zbpscale.entry", "local-rank"]  # python ... RUN_DIR: one rank (a name kept across releases)
TICK_S = 0.2
DRIVER_INFO_S = 2.0  # the driver rewrites its info file (pid, GPUs, entries) this often
FAILED_RANK_GRACE_S = 10.0  # a rank failed: the others get this long to notice before they are killed
TROUBLE_EVERY_S = 60.0  # a file error that lasts (a full disk) is logged again this often
AGAIN = ("timeout", "preempted", "crashed", "hung")
"""The ends of an attempt that the queue starts again (an end over its bound is recorded failed: jobs/attempt.py)."""
TRAINER_EXITS = {"completed": EXIT_OK, "checkpointed": EXIT_REQUEUE, "hung": EXIT_HUNG, "diverged": EXIT_DIVERGED,
                 "failed": EXIT_USAGE}
"""The exit status of a rank whose trainer wrote the end record `why` (train/cli.py, train/watchdog.py): how an
adopted attempt, whose statuses went with the dead driver, is settled."""


def log(msg: str) -> None:
    print(f"{time.strftime('%Y-%m-%d %H:%M:%S')} {msg}", flush=True)


class Driver:
    def __init__(self, queue: LocalQueue, *, starts: bool = True):
        self.q = queue
        self.starts = starts
        """False: started by a cancel, it applies cancel requests and settles what a dead driver left running, and
        starts nothing (a run of the sweep not cancelled stays stopped: submit again to go on), until a submitter
        asks it to (queue.py's `want_starts`)."""
        self.inventory = gpu_inventory()
        self.procs: dict[str, list[subprocess.Popen]] = {}  # job id -> ranks we started
        self.first_exit: dict[str, float] = {}
        self.checked: dict[str, float] = {}  # job id -> when its hang was last checked
        self.hangs: dict[str, str] = {}  # job id -> what catch_hang saw
        self.killed: set[str] = set()  # adopted attempts this driver killed (their exit statuses are unseen)
        self.beat = 0.0
        self.troubled = ("", 0.0)  # the last file error a tick hit, and when it was said (trouble)

    # ------------------------------------------------------------------------------------------------ loop
    def run(self, lock) -> int:
        """Drive the queue until it is empty; `lock` is the held driver lock (released on the way out)."""
        log(f"driver {os.getpid()} on {socket.gethostname()}: GPUs {self.inventory or 'none'}"
            + ("" if self.starts else " (for a cancel: it starts nothing)"))
        try:
            while True:
                if not lock.renew():  # judged gone (silent past QUEUE_LEASE_STALE_S) and replaced: it has the queue
                    log(f"another driver has taken the queue over ({lock.taken_by()}): driver exits")
                    return 0
                try:
                    self.tick()
                    if not self.busy() and self._leave(lock):
                        log("queue empty: driver exits" if not self.live() else
                            "cancels applied; the jobs still queued wait for a submit: driver exits")
                        return 0
                except OSError as err:  # a full disk, say: its jobs stay watched, and what failed is tried again
                    self.trouble(err)
                time.sleep(TICK_S)
        finally:
            with contextlib.suppress(OSError):
                lock.release()

    def trouble(self, err: OSError) -> None:
        """A tick that failed on a file (ENOSPC, EIO): said in the log, once a minute while it lasts. The next tick
        does the same work again from the files: an attempt whose end was recorded but whose entry was not written
        is not concluded twice (`settle`)."""
        said = f"{type(err).__name__}: {err}"
        if said != self.troubled[0] or time.time() - self.troubled[1] > TROUBLE_EVERY_S:
            self.troubled = (said, time.time())
            with contextlib.suppress(OSError):
                log(f"cannot go on with this tick ({said}); trying again")

    def live(self) -> list[Entry]:
        return [e for e in self.q.entries() if e.state in LIVE]

    def busy(self) -> bool:
        """Whether it has work left: a live entry; for one that starts nothing, an attempt still running or a cancel
        request (what is queued waits for a submitter's driver), or a submitter's ask to start jobs."""
        if self.starts:
            return bool(self.live())
        return any(e.state == "running" for e in self.q.entries()) or bool(self.q.cancel_requests()) \
            or self.q.starts_wanted()

    def _leave(self, lock) -> bool:
        with self.q.submit_lock():
            if self.busy():
                return False
            self.q.write_driver_info({**self.info(), "exited": time.time()})
            lock.release()  # before submit.lock, so a waiting submitter starts a new driver
            return True

    def tick(self) -> None:
        now = time.time()
        if self.q.starts_wanted():  # a submitter's: one that started nothing starts jobs from here on
            self.starts = True
            self.q.clear_starts()
        entries = {e.job_id: e for e in self.q.entries()}
        for job_id in self.q.cancel_requests():
            if job_id in entries:
                self.cancel(entries[job_id], now)
            self.q.clear_cancel(job_id)
        for e in entries.values():
            if e.state == "running":
                self.watch(e, now)
        if self.starts:
            self.start_ready(now)
        if now - self.beat >= DRIVER_INFO_S:
            self.q.write_driver_info(self.info())
            self.beat = now

    def info(self) -> dict:
        return {"pid": os.getpid(), "host": socket.gethostname(), "inventory": self.inventory,
                "max_parallel": self.max_parallel(), "updated": time.time()}

    def max_parallel(self) -> int:
        """Runs at once: the last submit's --max-parallel, else as many as the GPUs allow (1 on a CPU-only node). A
        kept value below 1 (releases before 2026-12-05 took any) is no bound of its own: it had stopped the queue."""
        n = int(self.q.settings().get("max_parallel", 0))
        return n if n >= 1 else (0 if self.inventory else 1)

    # ---------------------------------------------------------------------------------------- start a job
    def start_ready(self, now: float) -> None:
        entries = self.q.entries()
        by_id = {e.job_id: e for e in entries}
        held = [Held(gpus=tuple(e.assigned), ends_by=e.started + e.time_s) for e in entries if e.state == "running"]
        making = {e.makes for e in entries if e.state == "running" and e.makes}
        ready = []
        for e in entries:
            if e.state != "queued" or (e.makes and e.makes in making):  # its file is being made: it waits
                continue
            dep = by_id.get(e.after) if e.after else None
            if dep is not None and dep.state in ("failed", "cancelled"):
                self.finish(e, "failed", f"dependency {dep.job_id} ({dep.name}) {dep.state}: {dep.reason}",
                            log_file=job_log(Path(dep.log_dir), dep.job_id))  # the log that says why
            elif dep is None or dep.state == "completed":
                ready.append(e)
        wants = [Want(key=e.job_id, gpus=e.gpus, time_s=e.time_s) for e in ready]
        for job_id, gpus in schedule(wants, held, self.inventory, now=now, max_parallel=self.max_parallel()):
            e = by_id[job_id]
            if e.makes and e.makes in making:  # two that make one file, ready together: the first only
                continue
            self.launch(e, gpus)
            if e.makes:
                making.add(e.makes)

    def launch(self, e: Entry, gpus: tuple[str, ...]) -> None:
        e.attempts += 1
        for seen in (self.checked, self.hangs):  # an earlier attempt's
            seen.pop(e.job_id, None)
        e.state, e.started, e.assigned, e.port = "running", time.time(), list(gpus), _free_port()
        e.signalled, e.signalled_at, e.pids = "", 0.0, []
        self.q.write(e)  # running before any rank starts: an entry that cannot be written starts none
        log_dir = Path(e.log_dir)
        log_dir.mkdir(parents=True, exist_ok=True)
        procs = []
        for rank in range(e.ranks):
            env = {**os.environ, "ZBPSCALE_DRIVER_PID": str(os.getpid()), "ZBPSCALE_JOB_ID": e.job_id,
                   **rank_env(rank=rank, world_size=e.ranks, gpu=gpus[rank] if gpus else None, port=e.port,
                              threads=e.threads)}
            rank_cmd = [*signals.BLOCKED_PYTHON, *RANK_COMMAND, e.run_dir]  # stop signals held back
            cmd = e.command if e.kind == "command" else rank_cmd
            with open(job_log(log_dir, e.job_id, rank), "ab") as out:
                out.write(f"=== {e.job_id} attempt {e.attempts} rank {rank} started "
                          f"{time.strftime('%Y-%m-%d %H:%M:%S')} ===\n".encode())
                out.flush()
                procs.append(subprocess.Popen(cmd, env=env, stdin=subprocess.DEVNULL, stdout=out,
                                              stderr=subprocess.STDOUT, cwd=e.run_dir or None))
        e.pids = [[p.pid, process_start_time(p.pid) or 0] for p in procs]
        self.procs[e.job_id] = procs
        self.q.write(e)
        if e.kind == "train":
            from zbpscale.run.snapshot import record

            record(Path(e.run_dir), "start", job_id=e.job_id, executor="local", host=socket.gethostname(),
                   ranks=e.ranks, pid=procs[0].pid, gpus=list(gpus), logs=str(log_dir))
        log(f"{e.job_id} {e.name}: attempt {e.attempts} started, GPUs {list(gpus) or 'none'}, port {e.port}")

    # ----------------------------------------------------------------------------------- watch, signal, end
    def watch(self, e: Entry, now: float) -> None:
        procs = self.procs.get(e.job_id)
        if procs is None:  # adopted from a dead driver: its ranks got SIGUSR2 and are checkpointing
            if not any(pid_alive(pid, start) for pid, start in e.pids):
                self.settle_adopted(e)
                return
            failed = False  # their exit statuses are unseen: a rank that left may have checkpointed
        else:
            codes = [p.poll() for p in procs]
            if all(c is not None for c in codes):
                self.procs.pop(e.job_id)
                self.first_exit.pop(e.job_id, None)
                self.settle(e, codes)
                return
            failed = any(c not in (None, 0, EXIT_REQUEUE) for c in codes)
        if failed:  # a rank died: the others may hang
            first = self.first_exit.setdefault(e.job_id, now)
            if now - first > FAILED_RANK_GRACE_S:
                self.signal(e, signal.SIGKILL, e.signalled or "kill")
        elif now >= e.started + e.time_s:
            self.signal(e, signal.SIGKILL, "cancel" if e.signalled == "cancel" else "timeout")
        elif e.signalled == "cancel" and now >= e.signalled_at + e.signal_delay_s:
            self.signal(e, signal.SIGKILL, "cancel")
        elif not e.signalled and now >= e.started + e.time_s - e.signal_delay_s:
            log(f"{e.job_id} {e.name}: time limit in {e.signal_delay_s:g} s, SIGUSR2")
            self.signal(e, signal.SIGUSR2, "timeout")
        elif not e.signalled and e.kind == "train" and now >= self.checked.get(e.job_id, 0) + sentinel.CHECK_S:
            self.checked[e.job_id] = now
            self.catch_hang(e, now)

    def catch_hang(self, e: Entry, now: float) -> None:
        """A trainer frozen past its step_timeout_s (jobs/sentinel.py: its own watchdog cannot act): say what is
        seen in the run's log and records, kill its ranks (SIGKILL ends a stopped process too) and requeue it, as
        a hang (settle)."""
        run_dir = Path(e.run_dir)
        hang = sentinel.check(run_dir, since=e.started, timeout_s=Snapshot(run_dir).step_timeout, now=now)
        if hang is None:
            return
        if e.pids and not sentinel.holds(run_dir, e.pids[0][0]):  # frozen past its lease and replaced meanwhile
            log(f"{e.job_id} {e.name}: frozen, and its run folder is another trainer's now: killing its ranks, "
                "recording nothing")
            self.signal(e, signal.SIGKILL, "lost")
            return
        log(f"{e.job_id} {e.name}: hung: {hang.reason}; killing its ranks")
        with open(job_log(Path(e.log_dir), e.job_id), "a") as out:
            out.write(f"driver: {hang.reason}\n" + (f"{hang.detail}\n" if hang.detail else ""))
        sentinel.record_hang(run_dir, hang)
        self.hangs[e.job_id] = hang.reason
        self.signal(e, signal.SIGKILL, "hung")

    def signal(self, e: Entry, sig: int, why: str) -> None:
        """`sig` to the attempt's live ranks: its processes, or, adopted from a dead driver, the pids its entry names
        (each by its start time too: a pid taken since by another process is not signalled)."""
        procs = self.procs.get(e.job_id)
        if procs is None:
            for pid, start in e.pids:
                if pid_alive(pid, start):
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, sig)
            if sig == signal.SIGKILL:
                self.killed.add(e.job_id)
        for p in procs or []:
            if p.poll() is None:
                p.send_signal(sig)
        if e.signalled != why:
            e.signalled, e.signalled_at = why, time.time()
            self.q.write(e)

    def cancel(self, e: Entry, now: float) -> None:
        if e.state == "queued":
            self.finish(e, "cancelled", "cancelled before it started")
        elif e.state == "running" and e.signalled != "cancel":
            log(f"{e.job_id} {e.name}: cancel, SIGUSR2 (checkpoint first)")
            self.signal(e, signal.SIGUSR2, "cancel")

    def settle(self, e: Entry, codes: list[int | None], unheard_after: int | None = None) -> None:
        """An attempt ended: record why (jobs/ends.py's `classify`, from its ranks' exit statuses, the run's COMPLETE
        stamp and this driver's own signal: `e.signalled`), then requeue or finish the entry. `unheard_after`: the
        last step logged by an adopted attempt that died without a word (settle_adopted)."""
        log_file = job_log(Path(e.log_dir), e.job_id)
        if e.kind == "command":
            ok = all(c == 0 for c in codes)
            self.finish(e, "completed" if ok else "failed", "exit status 0" if ok else _failure(codes, log_file))
            return
        run_dir = Path(e.run_dir)
        said = History.read(run_dir).last_end(e.job_id)
        if said and said.get("time", 0) >= e.started:  # concluded by a driver that could not write the entry after
            why = said.get("why", "failed")             # (it died, the disk was full): the entry follows that end
            self._then(e, why, said.get("reason", ""), again=why in AGAIN)
            return
        end = ends.classify(ends.Seen(codes=tuple(codes), complete=RunFolder(run_dir).complete.exists(),
                                      stop=e.signalled, unheard=unheard_after is not None))

        def words() -> str:  # what only this driver can say, asked where the classifier says nothing
            return self._detail(e, codes, unheard_after) if end.retry else _failure(codes, log_file, run_dir)

        done = conclude(run_dir, e.job_id, "local", end, Bounds.of(e), words=words, log=str(log_file))
        self._then(e, done.why, done.reason, again=done.again)

    def _then(self, e: Entry, why: str, reason: str, *, again: bool) -> None:
        """The entry of an attempt concluded (its end recorded, unless the run's records are another trainer's
        now): queued again, or ended."""
        if again:
            e.state, e.assigned, e.pids, e.signalled, e.port = "queued", [], [], "", 0
            self.q.write(e)
            log(f"{e.job_id} {e.name}: {why}, requeued ({reason})")
        else:
            self.finish(e, why, reason, record=False)

    def _detail(self, e: Entry, codes: list[int | None], unheard_after: int | None) -> str:
        """Why an attempt that is started again ended, where only this driver can say: the steps an unheard one
        dropped, the hang it caught (catch_hang), else the failing rank's exit and the last line of its log."""
        if unheard_after is not None:
            return _dropped(Path(e.run_dir), unheard_after)
        if e.signalled == "hung":
            return self.hangs.pop(e.job_id, "hung: killed by the driver")
        return _failure(codes, job_log(Path(e.log_dir), e.job_id), Path(e.run_dir))

    def settle_adopted(self, e: Entry) -> None:
        """An attempt adopted from a dead driver ended, its exit statuses unseen: its records say how. The trainer's
        end record of this attempt gives the status its ranks exited with (TRAINER_EXITS), and `settle` decides as
        for any attempt. Without one, an attempt that logged steps died without a word, killed with its driver: a
        crash (unless the run is complete), whose reason names the steps past its checkpoint that are dropped and
        redone (`_dropped`). One that logged none stopped before its first step (told to while compiling, it writes
        no end record): nothing is lost, and it is settled as interrupted. One this driver killed (a cancel, its time
        limit or a hang: `watch`) ended as its ranks killed by SIGKILL do."""
        killed = e.job_id in self.killed
        self.killed.discard(e.job_id)
        unseen = [-signal.SIGKILL if killed else None] * len(e.pids)
        if e.kind != "train":  # a command: done if it made its file (the prep's manifest.json, written last)
            if e.makes and Path(e.makes).exists():
                self.finish(e, "completed", f"{e.makes} is there (its exit status went with a dead driver)")
            else:
                self.settle(e, unseen)
            return
        last = tail_records(RunFolder(Path(e.run_dir)).metrics, ("train", "end"))
        end, train = last.get("end", {}), last.get("train", {})
        word = end.get("why") if end.get("time", 0) >= e.started else None  # this attempt's own end record
        if word in TRAINER_EXITS:
            self.settle(e, [TRAINER_EXITS[word]] * len(e.pids))
        elif killed:
            self.settle(e, unseen)
        else:
            stepped = word is None and train.get("time", 0) >= e.started
            self.settle(e, unseen, unheard_after=train["step"] if stepped else None)

    def finish(self, e: Entry, state: str, reason: str, log_file: Path | None = None, *, record: bool = True) -> None:
        """End the entry; its run's attempts.jsonl gets the end unless `record` is False (a folder no longer its)."""
        if e.kind == "train" and record:
            self._record_end(e, state, reason, log_file)
        e.state, e.reason, e.ended, e.assigned = state, reason, time.time(), []
        self.q.write(e)
        log(f"{e.job_id} {e.name}: {state} ({reason})")

    def _record_end(self, e: Entry, why: str, reason: str, log_file: Path | None = None) -> None:
        from zbpscale.run.snapshot import record

        record(Path(e.run_dir), "end", job_id=e.job_id, executor="local", why=why, reason=reason,
               log=str(log_file or job_log(Path(e.log_dir), e.job_id)))


def _failure(codes: list[int | None], log_file: Path, run_dir: Path | None = None) -> str:
    """One line: the failing rank's exit, and the last line of its log (a Python exception's message), or, where
    that line is only the trainer's progress (a killed rank says nothing), the last step the run logged."""
    import re

    bad = next((c for c in codes if c not in (None, 0, EXIT_REQUEUE)), None)
    how = "exit status unknown" if bad is None else (
        f"killed by {signal.Signals(-bad).name}" if bad < 0 else f"exit status {bad}")
    try:
        lines = [ln for ln in log_file.read_text(errors="replace").splitlines() if ln.strip()]
    except OSError:
        lines = []
    last = lines[-1].strip() if lines and not lines[-1].startswith("===") else ""
    if re.match(r"step \d+/\d+ ", last) or not last:  # progress, printed minutes before the end: no reason
        train = tail_records(RunFolder(run_dir).metrics, ("train",)).get("train", {}) if run_dir is not None else {}
        return how + (f" after step {train['step'] + 1}" if "step" in train else "")
    return f"{how}: {last}"


def _dropped(run_dir: Path, last_step: int) -> str:
    """Why an attempt that died without a word while its driver was gone is a crash: the steps it logged past the
    checkpoint the next attempt resumes from (0-based: checkpoint N holds steps 0..N-1), which are dropped and
    redone."""
    found = RunFolder(run_dir).list_checkpoints()
    resume = found[-1][0] if found else 0
    start = f"checkpoint {resume}" if found else "step 0 (no checkpoint)"
    lost = f"steps {resume}..{last_step} dropped" if last_step >= resume else "no step dropped"
    return (f"died without an end record while its driver was gone (killed with it): its last logged step is "
            f"{last_step}, it resumes from {start}: {lost}")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main(argv: list[str]) -> int:
    starts = CANCELS_ONLY not in argv
    argv = [a for a in argv if a != CANCELS_ONLY]
    if len(argv) != 1:
        print(f"usage: python -m {__spec__.name} JOBS_ROOT [{CANCELS_ONLY}] (started by zbpscale submit or cancel)",
              file=sys.stderr)
        return 2
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    queue = LocalQueue(argv[0])
    if not starts:  # before it holds the queue: an ask written once it is seen alive is a submitter's, kept
        queue.clear_starts()
    for _ in range(40):  # first, before the GPU inventory (which may import torch)
        lock = queue.try_driver_lock()
        if lock is not None:
            return Driver(queue, starts=starts).run(lock)
        if queue.driver_alive():
            return 0  # another driver has the queue
        time.sleep(0.05)  # the kernel lock was busy for an instant only: driver_alive's probe
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
