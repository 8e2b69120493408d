"""One writer per file across hosts: a kernel lock where one holds, and a lease file that names its holder.

`try_lock(path)` takes the lock on `path` (a run folder's `.trainer.lock`, a sweep's `.submit.lock`, the local
queue's locks) or says who holds it. It has two parts:
  - the kernel lock, `flock` on `path`: the fast answer "held" where it works, released by the kernel however
    its holder dies. Where `flock` is missing (Lustre mounted `noflock`: ENOSYS) it is skipped. Its "free" is
    never trusted on its own: on Lustre `localflock` and GPFS it only excludes processes of one node.
  - the lease, `lease_path(path)` (`.trainer.lock` -> `.trainer.lease`): a small JSON file naming its holder
    (host, pid, the process's start time, the machine: boot id and pid namespace, job id, creation time and a
    nonce), created atomically (written to a temp file, then `os.link`ed to its name, which fails if the name
    exists, on NFS too). Its mtime is its last renewal: the holder calls `Lock.renew()` while it lives.
A lease is taken over only when its holder is provably gone:
  1. it ran on this machine (same boot, same pid namespace) and its pid is dead, or reused (start time differs);
     or it ran on this host before the host rebooted (another boot id: no process survives a reboot);
  2. the caller's `gone(holder)` says so (a scheduler that knows the holder's job ended);
  3. its last renewal is older than the caller's `stale_after_s` (None: never by age): for a holder that renews
     at least that often while it lives, or kills itself first (the trainer's hang watchdog).
Takeover is race-free between contenders: a contender first creates `<lease>.takeover-<nonce of the stale
lease>` the same exclusive way (a claim: one contender per stale lease gets it), removes the lease only if it is
still the stale one, then creates its own exclusively like anyone; the claim goes after. Nothing but the claim's
holder can change the lease meanwhile: its holder is gone, others lack the claim, and creation needs the name
free. A claim left by a contender that died mid-takeover is judged, and taken over, by the same rules.
Releasing removes the lease only if it is still ours (under the same claim), then unlocks the kernel lock.

A holder must write nothing once its lease is gone, whatever wakes it (a node frozen in I/O for minutes, a
SIGSTOP): it asks `Lock.renew()` before every write. Within RENEW_S of its last look the answer is in memory; later
the lease's nonce on disk is read (and the lease touched); after a silence longer than QUIET_S the look is made
under the takeover claim, so that a contender that judged the silent holder gone either finishes its takeover
first (the holder then sees another nonce) or finds the holder renewed when it judges again under the claim.
Processes that write under another's lease (a trainer's other ranks) ask a `Follower` the same question. What
no check closes: a holder frozen between a check and its write (a few microseconds), and a holder judged gone by
the caller's `gone` rule (its job ended) while it still runs, until its next look (at most RENEW_S).
`wait_lock` waits for a lock, judging a lease that stays unchanged for the bound by its own clock: a holder
whose clock runs ahead costs no more than the bound.

Assumed of the filesystem: an exclusive create (`link`, else O_EXCL) that fails for all clients but one, and a
file's mtime visible to every client within the bound; of the hosts: clocks that agree to well within the bound
(NTP). Torch-free; imports only shared modules.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import socket
import threading
import time
import uuid
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable, Optional

from zbpscale.errors import ZbpError
from zbpscale.proc import pid_alive, process_start_time
from zbpscale.tables import age

NO_KERNEL_LOCK = {errno.ENOSYS, errno.EOPNOTSUPP, errno.ENOTSUP, errno.ENOLCK}
"""What flock raises where the filesystem has none (Lustre noflock: ENOSYS; FUSE mounts; NFS without lockd:
ENOLCK); any other error is raised."""
RENEW_S = 5.0
"""`Lock.renew` touches the lease at most this often (one stat, read and utime): cheap for a metadata server."""
MAX_DEPTH = 2
"""A claim on a claim is as deep as a takeover goes (a contender that died while taking over a dead holder's)."""
SKEW_S = 2.0
"""A lease renewed more than this far in the future was renewed by a clock ahead of this host's (named in messages)."""
QUIET_S = 2 * RENEW_S
"""A holder silent longer than this (paused, frozen in I/O, a long step) confirms its lease under the takeover claim
(`Lock.renew`): it may have been judged gone meanwhile."""


def _machine() -> str:
    """This kernel's boot and pid namespace: two processes can compare pids only when these agree."""
    parts = []
    for read in (lambda: Path("/proc/sys/kernel/random/boot_id").read_text().strip(),
                 lambda: os.readlink("/proc/self/ns/pid")):
        try:
            parts.append(read())
        except OSError:
            return ""  # unknown: never "this machine", so never judged by its pid
    return "/".join(parts)


MACHINE = _machine()
"""This machine, as leases record it (a test may pretend another)."""


@dataclass(frozen=True)
class Holder:
    """Who holds (or held) a lease, as its file says."""

    host: str
    pid: int
    start: Optional[int]
    """The process's kernel start time (proc.process_start_time): with the pid, names the process."""
    machine: str
    """Boot id and pid namespace (MACHINE of the holder's process)."""
    job: str = ""
    """The scheduler's job id (`job_here`); '' outside a job."""
    restarts: int = 0
    """SLURM_RESTART_COUNT of the holder's job: a requeued job keeps its id and counts up."""
    since: float = 0.0
    """When the lease was made (Unix seconds)."""
    nonce: str = ""
    """Unique per lease: tells a lease from the one that replaced it."""
    renewed: float = 0.0
    """The file's mtime when it was read: its holder's last renewal (not stored in the file)."""

    def here(self) -> bool:
        """Whether the holder ran on this machine, where its pid can be checked."""
        return bool(self.machine) and self.machine == MACHINE

    def before_reboot(self) -> bool:
        """Whether the holder ran on this host under an earlier boot (its boot id differs from this boot's)."""
        boot, now = self.machine.partition("/")[0], MACHINE.partition("/")[0]
        return self.host == socket.gethostname() and bool(boot) and bool(now) and boot != now

    def __str__(self) -> str:
        """`pid N on HOST, job J` (and how old the lease is when it is on another machine; a lease renewed in this
        host's future names the clock skew)."""
        text = f"pid {self.pid} on {self.host}" + (f", job {self.job}" if self.job else "")
        if self.here():
            return text
        ahead = self.skew()
        if ahead:
            return (f"{text}, lease renewed {age(ahead)} in this host's future: the clocks of {self.host} and "
                    f"{socket.gethostname()} disagree by at least {age(ahead)} (check NTP)")
        return f"{text}, lease renewed {age(max(0.0, time.time() - self.renewed))} ago"

    def skew(self) -> float:
        """How far in this host's future the lease was renewed (0 when not beyond SKEW_S): a clock that runs ahead
        on the holder's host (or behind here)."""
        ahead = self.renewed - time.time()
        return ahead if ahead > SKEW_S else 0.0


def job_here() -> str:
    """The job this process runs in, as submit recorded it: SLURM's `1234` or an array's element `1234_5` (whose
    SLURM_JOB_ID is a number of its own), the local queue's ZBPSCALE_JOB_ID; '' outside a job."""
    array, task = os.environ.get("SLURM_ARRAY_JOB_ID"), os.environ.get("SLURM_ARRAY_TASK_ID")
    if array and task:
        return f"{array}_{task}"
    return os.environ.get("SLURM_JOB_ID") or os.environ.get("ZBPSCALE_JOB_ID") or ""


def me() -> Holder:
    """This process, as a new lease of it records it."""
    return Holder(host=socket.gethostname(), pid=os.getpid(), start=process_start_time(os.getpid()),
                  machine=MACHINE, job=job_here(),
                  restarts=int(os.environ.get("SLURM_RESTART_COUNT") or 0), since=time.time(),
                  nonce=uuid.uuid4().hex)


def lease_path(path: Path) -> Path:
    """The lease beside the lock file `path`: `.trainer.lock` -> `.trainer.lease`."""
    path = Path(path)
    return path.with_name(path.stem + ".lease")


def read_holder(lease: Path) -> Holder | None:
    """The holder a lease names, None when there is no lease. A lease that cannot be parsed (a hand-made file)
    names an unknown holder (pid 0), judged by its age alone."""
    try:
        with open(lease, "rb") as fh:  # opening revalidates a network filesystem's cached attributes
            text, mtime = fh.read(), os.fstat(fh.fileno()).st_mtime
    except FileNotFoundError:
        return None
    try:
        fields = json.loads(text)
        known = {k: v for k, v in fields.items() if k in Holder.__dataclass_fields__ and k != "renewed"}
        return Holder(**known, renewed=mtime)
    except (ValueError, TypeError):
        return Holder(host="an unknown host", pid=0, start=None, machine="", nonce=f"unparsed-{mtime}",
                      renewed=mtime)


Rule = Callable[[Holder], bool]
"""Whether a holder is provably gone (see `judge`)."""


def judge(stale_after_s: float | None = None, gone: Rule | None = None) -> Rule:
    """The takeover rule: this machine's dead (or reused) pid, the caller's `gone`, or a lease older than
    `stale_after_s`."""
    def is_gone(holder: Holder) -> bool:
        if holder.here() and holder.pid and holder.start is not None:
            return not pid_alive(holder.pid, holder.start)  # this machine: the process itself is the answer
        if holder.before_reboot():
            return True
        if gone is not None and gone(holder):
            return True
        return stale_after_s is not None and time.time() - holder.renewed > stale_after_s
    return is_gone


class Lock:
    """A held lock: the lease (and the kernel lock where one works). `renew()` while holding, and before every write
    (it is the cheap check that the lease is still ours), `release()` once; also a context manager."""

    def __init__(self, path: Path, holder: Holder, kernel_file):
        self.path, self.lease, self.holder = Path(path), lease_path(path), holder
        self._kernel_file, self._renewed, self._held = kernel_file, time.monotonic(), True
        self._stop: threading.Event | None = None
        self._mutex = threading.Lock()  # the training thread, the watchdog and a renewal thread all ask

    def renew(self, *, force: bool = False) -> bool:
        """Whether the lease is still ours, renewed on disk at most every RENEW_S unless forced: within RENEW_S of
        the last look the answer is in memory (a clock read), later it is the lease's identity on disk (its nonce),
        touched to mark it alive. After a silence longer than QUIET_S (a pause, a node frozen in I/O) another
        process may have judged this one gone and be taking the lease over, so the look is made under the takeover
        claim, which such a process holds until its own lease is in place. False once the lease is no longer ours:
        the caller must write nothing more."""
        with self._mutex:
            now = time.monotonic()
            if not self._held or (not force and now - self._renewed < RENEW_S):
                return self._held
            quiet, self._renewed = now - self._renewed, now
            try:
                self._held = self._confirm_claimed() if quiet > QUIET_S else self._confirm()
            except FileNotFoundError:
                self._held = False
            except OSError:
                pass  # a network filesystem's passing error proves nothing: the next renewal tries again
            return self._held

    def _confirm(self) -> bool:
        """The lease on disk is still ours: touch it."""
        found = read_holder(self.lease)
        if found is None or found.nonce != self.holder.nonce:
            return False
        t = time.time()
        os.utime(self.lease, (t, t))
        return True

    def _confirm_claimed(self) -> bool:
        """`_confirm` under the claim a takeover of this lease needs: a contender holding it may be replacing it."""
        claim = self.lease.with_name(f"{self.lease.name}.takeover-{self.holder.nonce}")
        if not _create(claim, self.holder):
            return False
        try:
            return self._confirm()
        finally:
            _unlink(claim)

    def keep_renewed(self, every_s: float = RENEW_S) -> Lock:
        """Renew from a thread every `every_s` until released: for a holder that has no loop to renew from (a
        command's short-lived lock); it proves the process lives, as a kernel lock does, not that it progresses."""
        self._stop = threading.Event()

        def renew() -> None:
            while not self._stop.wait(every_s) and self.renew(force=True):
                pass

        threading.Thread(target=renew, name="zbpscale-lease", daemon=True).start()
        return self

    def taken_by(self) -> str:
        """Who holds the lease now, in words (after `renew` said it is no longer ours)."""
        return taken_by(self.lease)

    def release(self) -> None:
        """Remove the lease if it is still ours, then let go of the kernel lock; twice is harmless. A lock found
        lost (`renew` said False) touches nothing on disk."""
        if self._stop is not None:
            self._stop.set()
        with self._mutex:
            if self._kernel_file is None and not self._held:
                return
            try:
                if self._held:
                    _remove_if(self.lease, self.holder, self.holder)
            finally:
                self._held = False
                if self._kernel_file is not None:
                    self._kernel_file.close()  # closing releases the flock
                    self._kernel_file = None

    def __enter__(self) -> Lock:
        return self

    def __exit__(self, *exc) -> None:
        self.release()


class Follower:
    """A process that writes under another's lease (a trainer's ranks other than rank 0, whose lease holds the run
    folder): `renew()` is True while the lease on disk names the holder `nonce` it was given, looked at at most
    every RENEW_S (it never touches the lease). Answers like `Lock.renew`, so a writer takes either."""

    def __init__(self, path: Path, nonce: str):
        self.lease, self.nonce = lease_path(path), nonce
        self._seen, self._held = time.monotonic(), True
        self._mutex = threading.Lock()

    def renew(self, *, force: bool = False) -> bool:
        with self._mutex:
            now = time.monotonic()
            if not self._held or (not force and now - self._seen < RENEW_S):
                return self._held
            self._seen = now
            try:
                found = read_holder(self.lease)
                self._held = found is not None and found.nonce == self.nonce
            except OSError:
                pass  # unreadable for a moment: the holder's own renewal decides
            return self._held

    def taken_by(self) -> str:
        return taken_by(self.lease)


def try_lock(path: Path, *, stale_after_s: float | None = None, gone: Rule | None = None
             ) -> tuple[Lock | None, str]:
    """Take the lock on `path` without waiting: (the held Lock, "") or (None, who holds it: "pid N on HOST, job J").
    `stale_after_s` and `gone`: when another's lease counts as its holder's being gone (`judge`)."""
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fh = open(path, "a+")
    except OSError as err:  # a folder under a file, an immutable one, /proc, a read-only mount: the user's to fix
        raise ZbpError(f"cannot write {err.filename or path}: {err.strerror or err} ("
                       f"{errno.errorcode.get(err.errno, 'errno')} {err.errno})", hint="choose a folder you can "
                       "write, or fix its permissions") from None
    kernel_file, busy = _kernel_lock(fh)
    if busy:
        return None, _describe(path)
    mine, lease = me(), lease_path(path)
    won, holder = _acquire(lease, mine, judge(stale_after_s, gone))
    if not won:
        if kernel_file is not None:
            kernel_file.close()
        return None, str(holder) if holder else _describe(path)
    for claim in lease.parent.glob(f"{lease.name}.takeover-*"):  # claims on leases gone since: litter
        _unlink(claim)
    return Lock(path, mine, kernel_file), ""


def wait_lock(path: Path, *, stale_after_s: float, wait_s: float, poll_s: float = 0.2,
              waiting: Callable[[str], None] | None = None) -> tuple[Lock | None, str]:
    """`try_lock` until it is ours or `wait_s` has passed: (the Lock, "") or (None, who holds it). `waiting(holder)`
    is called once, when the first try finds the lock held. A lease that stays exactly as it was (same holder, same
    renewal) for `stale_after_s` of this process's own clock is a holder gone, however far its host's clock is
    from this one's: a lease renewed in this host's future (clock skew) costs no more than the bound."""
    deadline, seen, said = time.monotonic() + wait_s, {}, False

    def unchanged(holder: Holder) -> bool:
        first = seen.setdefault((holder.nonce, holder.renewed), time.monotonic())
        return time.monotonic() - first > stale_after_s

    while True:
        lock, holder = try_lock(path, stale_after_s=stale_after_s, gone=unchanged)
        if lock is not None or time.monotonic() > deadline:
            return lock, holder
        if not said and waiting is not None:
            waiting(holder)
            said = True
        time.sleep(poll_s)


def taken_by(lease: Path) -> str:
    """Who holds `lease` now, in words, for one that was ours: its holder, or that it was released since."""
    return str(read_holder(lease) or "who has released it since")


def live_holder(path: Path, *, stale_after_s: float | None = None, gone: Rule | None = None) -> Holder | None:
    """The holder of the lock on `path` that is not provably gone, or None; reads only (a liveness probe)."""
    holder = read_holder(lease_path(path))
    return None if holder is None or judge(stale_after_s, gone)(holder) else holder


def kernel_held(path: Path) -> bool:
    """Whether another process holds the kernel lock on `path`: a holder of an older release, which wrote no
    lease. Probes without waiting (holding the lock for an instant when it is free); False where there is none."""
    if not Path(path).exists():
        return False
    kernel_file, busy = _kernel_lock(open(path, "a+"))
    if kernel_file is not None:
        kernel_file.close()
    return busy


# ------------------------------------------------------------------------------------------------ internals
def _kernel_lock(fh):
    """An exclusive flock on the open lock file `fh`: (fh, now holding it, False), (None, True) when another holds
    it, (None, False) when this filesystem has no flock (fh closed in both)."""
    try:
        fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        fh.close()
        return None, True
    except OSError as err:
        fh.close()
        if err.errno in NO_KERNEL_LOCK:
            return None, False
        raise
    return fh, False


def _describe(path: Path) -> str:
    """Who holds `path`, for a message: its lease's holder, else what a holder of an older release wrote into
    the lock file itself ("pid N on HOST")."""
    holder = read_holder(lease_path(path))
    if holder is not None:
        return str(holder)
    try:
        return Path(path).read_text().strip() or "another process"
    except OSError:
        return "another process"


def _acquire(lease: Path, mine: Holder, is_gone: Rule, depth: int = 0) -> tuple[bool, Holder | None]:
    """Create `lease` for `mine`, taking over a provably gone holder's; (won, the holder that keeps it)."""
    holder = None
    for _ in range(3):  # a lease that vanishes between a failed create and its read: look again
        if _create(lease, mine):
            return True, None
        holder = read_holder(lease)
        if holder is None:
            continue
        if depth >= MAX_DEPTH or not is_gone(holder):
            return False, holder
        claim = lease.with_name(f"{lease.name}.takeover-{holder.nonce}")
        claimed, _ = _acquire(claim, mine, is_gone, depth + 1)
        if not claimed:
            return False, holder  # another contender is taking it over
        try:
            now = read_holder(lease)
            if now is not None and now.nonce == holder.nonce:
                if now.renewed != holder.renewed and not is_gone(now):  # renewed meanwhile (a paused holder
                    return False, now                                    # that woke): judged again, it stays
                _unlink(lease)  # still the gone holder's, and only the claim's holder may touch it
            if _create(lease, mine):
                return True, None
        finally:
            _unlink(claim)
        return False, read_holder(lease) or holder
    return False, holder


def _remove_if(lease: Path, owner: Holder, mine: Holder) -> None:
    """Remove `lease` if it still names `owner`, under a claim (no takeover can swap it meanwhile)."""
    claim = lease.with_name(f"{lease.name}.takeover-{owner.nonce}")
    if not _create(claim, mine):
        return  # someone judged the owner gone and is taking the lease over: it is theirs to replace
    try:
        now = read_holder(lease)
        if now is not None and now.nonce == owner.nonce:
            _unlink(lease)
    finally:
        _unlink(claim)


def _create(lease: Path, holder: Holder) -> bool:
    """Create `lease` naming `holder` if no file has that name: whole or not at all, visible to every client."""
    tmp = lease.with_name(f".{lease.name}.tmp-{os.getpid()}-{holder.nonce[:8]}")  # files.temp_path's pattern
    body = json.dumps({k: v for k, v in asdict(holder).items() if k != "renewed"}) + "\n"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        os.write(fd, body.encode())
        os.fsync(fd)
    finally:
        os.close(fd)
    t = time.time()
    os.utime(tmp, (t, t))  # born renewed, by this host's clock (the one its renewals use)
    try:
        os.link(tmp, lease)
        return True
    except FileExistsError:
        return os.stat(tmp).st_nlink == 2  # NFS: a retried link whose first try went through
    except OSError as err:
        if err.errno not in (errno.EPERM, errno.EOPNOTSUPP, errno.ENOTSUP, errno.ENOSYS, errno.EMLINK):
            raise
        return _create_exclusive(lease, body)  # no hard links here (some FUSE mounts): O_EXCL
    finally:
        _unlink(tmp)


def _create_exclusive(lease: Path, body: str) -> bool:
    try:
        fd = os.open(lease, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    except FileExistsError:
        return False
    try:
        os.write(fd, body.encode())
        os.fsync(fd)
    finally:
        os.close(fd)
    return True


def _unlink(path: Path) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
