"""The writer lock (zbpscale/lease.py), against real processes on real files: what a second taker gets is compared
with who really holds the lock (the pid of a live child process, the nonce in the lease file on disk), with and
without a working flock; a dead holder's lease against the kernel's word that its pid is gone; a lease from
"another node" against the clock and the staleness bound; racing contenders against the one lease left on disk;
and two trainers on two pretended nodes whose flock is node-local against the one that really trains."""

from __future__ import annotations

import errno
import fcntl
import hashlib
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from conftest import wait_until
from zbpscale import lease
from zbpscale.run.folder import RunFolder

# A child that takes the lock on argv[1] and holds it until killed. argv[2]: the kernel lock it finds: "real",
# "missing" (flock raises ENOSYS, as on Lustre noflock) or "node-local" (flock always succeeds, as on GPFS or
# Lustre localflock seen from two nodes); argv[3], optional: the node it pretends to be (host and machine).
HOLDER = textwrap.dedent("""\
    import errno, fcntl, socket, sys, time
    from zbpscale import lease

    def missing(*args):
        raise OSError(errno.ENOSYS, "Function not implemented")

    if sys.argv[2] == "missing":
        fcntl.flock = missing
    elif sys.argv[2] == "node-local":
        fcntl.flock = lambda *args: None
    if len(sys.argv) > 3:
        socket.gethostname = lambda: sys.argv[3]
        lease.MACHINE = "machine-of-" + sys.argv[3]
    start = float(sys.argv[4]) if len(sys.argv) > 4 else 0.0
    while time.time() < start:  # contenders start together
        time.sleep(0.001)
    lock, holder = lease.try_lock(sys.argv[1], stale_after_s=60.0)
    print("held" if lock else f"busy ({holder})", flush=True)
    if lock:
        time.sleep(600)
    """)


def hold(path: Path, kernel: str, *node: str) -> subprocess.Popen:
    """A child holding the lock on `path` (it has said "held" when this returns)."""
    child = subprocess.Popen([sys.executable, "-c", HOLDER, str(path), kernel, *node], stdout=subprocess.PIPE,
                             text=True)
    assert child.stdout.readline().strip() == "held"
    return child


def kill(child: subprocess.Popen) -> None:
    child.send_signal(signal.SIGKILL)
    child.wait()


def missing_flock(*args):
    raise OSError(errno.ENOSYS, "Function not implemented")


def stale_lease(path: Path, *, host: str = "node-b", age_s: float, job: str = "") -> lease.Holder:
    """A lease left on `path` by a process of another node, last renewed `age_s` ago."""
    holder = lease.Holder(host=host, pid=4242, start=1, machine="machine-of-" + host, job=job, since=time.time(),
                          nonce="f" * 32)
    assert lease._create(lease.lease_path(path), holder)
    then = time.time() - age_s
    os.utime(lease.lease_path(path), (then, then))
    return holder


@pytest.mark.parametrize("kernel", ["real", "missing"])
def test_a_live_holder_keeps_the_lock_and_a_killed_one_loses_it(tmp_path, monkeypatch, kernel):
    """With flock working or missing: refused while the child lives (naming its pid and this host); once it is
    killed with -9 (no release ran: its lease is still on disk), the lock is taken at once (its pid is gone)."""
    if kernel == "missing":
        monkeypatch.setattr(fcntl, "flock", missing_flock)
    path = tmp_path / ".trainer.lock"
    child = hold(path, kernel)
    try:
        lock, holder = lease.try_lock(path)
        assert lock is None and holder == f"pid {child.pid} on {socket.gethostname()}"
    finally:
        kill(child)
    assert lease.read_holder(lease.lease_path(path)).pid == child.pid  # left behind by the killed child
    lock, holder = lease.try_lock(path)
    assert lock is not None and holder == ""
    assert lease.read_holder(lease.lease_path(path)).pid == os.getpid()
    lock.release()
    assert not lease.lease_path(path).exists()


def test_missing_flock_still_excludes_in_one_process(tmp_path, monkeypatch):
    monkeypatch.setattr(fcntl, "flock", missing_flock)
    path = tmp_path / ".submit.lock"
    with lease.try_lock(path)[0]:
        assert lease.try_lock(path) == (None, f"pid {os.getpid()} on {socket.gethostname()}")
    assert lease.try_lock(path)[0] is not None


def test_a_lock_error_that_is_not_missing_flock_is_raised(tmp_path, monkeypatch):
    def broken(*args):
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(fcntl, "flock", broken)
    with pytest.raises(OSError, match="Input/output"):
        lease.try_lock(tmp_path / ".trainer.lock")


def test_a_node_local_flock_does_not_let_a_second_node_in(tmp_path, monkeypatch):
    """flock succeeds for everyone (node-local): the lease held by a live process of "node-a" refuses this node,
    naming it, however old the holder is on its own node; the stale rule still needs the bound."""
    monkeypatch.setattr(fcntl, "flock", lambda *args: None)
    path = tmp_path / ".trainer.lock"
    child = hold(path, "node-local", "node-a")
    try:
        lock, holder = lease.try_lock(path, stale_after_s=60.0)
        assert lock is None and holder.startswith(f"pid {child.pid} on node-a, lease renewed ")
    finally:
        kill(child)
    # Killed on "node-a": from here its pid proves nothing, so only the bound frees it.
    assert lease.try_lock(path, stale_after_s=60.0)[0] is None
    lock, _ = lease.try_lock(path, stale_after_s=0.0)
    assert lock is not None


@pytest.mark.parametrize("age_s, taken", [(30.0, False),  # renewed within the bound: its holder may live
                                          (90.0, True)])  # older than the bound: gone
def test_a_lease_of_another_node_is_taken_over_only_after_the_bound(tmp_path, monkeypatch, age_s, taken):
    monkeypatch.setattr(fcntl, "flock", missing_flock)
    path = tmp_path / ".trainer.lock"
    stale_lease(path, age_s=age_s)
    lock, holder = lease.try_lock(path, stale_after_s=60.0)
    assert (lock is not None) == taken
    if not taken:
        assert holder == "pid 4242 on node-b, lease renewed 30s ago"
    assert lease.read_holder(lease.lease_path(path)).pid == (os.getpid() if taken else 4242)
    assert lease.try_lock(path, stale_after_s=None)[0] is None  # None: never by age


def test_a_lease_of_this_host_before_a_reboot_is_taken_over_at_once(tmp_path):
    """A node that crashed and rebooted: its trainer's lease names this host with the previous boot id. No
    process survives a reboot, so it is taken over at once, whatever the bound (none here: a run without a hang
    bound would otherwise wait for ever); a lease of another host with that boot id is not."""
    path = tmp_path / ".trainer.lock"
    boot, _, ns = lease.MACHINE.partition("/")
    old = lease.Holder(host=socket.gethostname(), pid=4242, start=1, machine=f"another-boot/{ns}", since=time.time(),
                       nonce="e" * 32)
    assert lease._create(lease.lease_path(path), old)
    other = lease.Holder(**{**old.__dict__, "host": "node-b"})
    assert not lease.judge(None)(other) and lease.judge(None)(old)
    lock, holder = lease.try_lock(path, stale_after_s=None)
    assert lock is not None and holder == ""
    lock.release()


def test_a_lease_renewed_in_this_hosts_future_names_the_skew_and_waits_no_more_than_the_bound(tmp_path,
                                                                                               monkeypatch):
    """node-b's clock runs 300 s ahead: its lease says it was renewed in our future. A contender names the skew
    (not "renewed 0s ago"); a waiter takes over a lease that stays unchanged for the bound by its own clock (1 s
    here, not 301 s), and never one that its holder keeps renewing, however its clock runs."""
    import threading

    monkeypatch.setattr(fcntl, "flock", missing_flock)
    path = tmp_path / ".submit.lock"
    stale_lease(path, age_s=-300.0)
    lock, holder = lease.try_lock(path, stale_after_s=1.0)
    here = socket.gethostname()
    assert lock is None and f"lease renewed 5m in this host's future: the clocks of node-b and {here} disagree by " \
        "at least 5m (check NTP)" in holder, holder
    t0 = time.monotonic()
    lock, holder = lease.wait_lock(path, stale_after_s=1.0, wait_s=30.0, poll_s=0.05)
    assert lock is not None and holder == "" and 1.0 < time.monotonic() - t0 < 10.0
    lock.release()

    stale_lease(path, age_s=-300.0)
    stop = threading.Event()

    def renew() -> None:  # the holder lives and renews, by its clock 300 s ahead
        while not stop.wait(0.1):
            then = time.time() + 300.0
            os.utime(lease.lease_path(path), (then, then))

    renewer = threading.Thread(target=renew)
    renewer.start()
    try:
        lock, holder = lease.wait_lock(path, stale_after_s=1.0, wait_s=3.0, poll_s=0.05)
    finally:
        stop.set()
        renewer.join()
    assert lock is None and "pid 4242 on node-b" in holder


def test_the_schedulers_word_frees_a_lease_before_the_bound(tmp_path, monkeypatch):
    monkeypatch.setattr(fcntl, "flock", missing_flock)
    path = tmp_path / ".trainer.lock"
    stale_lease(path, age_s=5.0, job="77")
    asked = []

    def ended(holder):
        asked.append(holder.job)
        return holder.job == "77"

    lock, _ = lease.try_lock(path, stale_after_s=3600.0, gone=ended)
    assert lock is not None and asked == ["77"]


def test_the_schedulers_word_is_not_asked_about_a_holder_on_this_machine(tmp_path, monkeypatch):
    """A live holder here is alive whatever a scheduler says (it would kill it first)."""
    monkeypatch.setattr(fcntl, "flock", missing_flock)
    path = tmp_path / ".trainer.lock"
    child = hold(path, "missing")
    try:
        assert lease.try_lock(path, gone=lambda holder: True)[0] is None
    finally:
        kill(child)


@pytest.mark.parametrize("kernel", ["missing", "node-local"])
def test_contenders_racing_for_a_stale_lease_one_wins(tmp_path, monkeypatch, kernel):
    """Eight processes start together on one stale lease, three times over: exactly one says "held" each time,
    and the lease on disk names it."""
    for round in range(3):
        path = tmp_path / f"r{round}" / ".trainer.lock"
        path.parent.mkdir()
        stale_lease(path, age_s=3600.0)
        start = time.time() + 1.0
        children = [subprocess.Popen([sys.executable, "-c", HOLDER, str(path), kernel, f"node-{i}", str(start)],
                                     stdout=subprocess.PIPE, text=True) for i in range(8)]
        try:
            said = [c.stdout.readline().strip() for c in children]
        finally:
            for c in children:
                kill(c)
        winners = [c.pid for c, line in zip(children, said) if line == "held"]
        assert len(winners) == 1, said
        assert lease.read_holder(lease.lease_path(path)).pid == winners[0]
        assert not list(path.parent.glob("*.takeover-*")), "a claim was left behind"


def test_a_contender_that_judged_a_lease_stale_too_late_loses(tmp_path, monkeypatch):
    """The interleaving the claim exists for: B reads the stale lease, then A takes it over completely, then B
    goes on with its stale view. B must not remove A's new lease."""
    monkeypatch.setattr(fcntl, "flock", missing_flock)
    path = tmp_path / ".trainer.lock"
    stale_lease(path, age_s=3600.0)
    real_read, taken = lease.read_holder, []

    def read(path_):
        found = real_read(path_)
        if not taken:  # B's first look, before it acts on it: A takes the lease over meanwhile
            taken.append(None)
            taken[0] = lease.try_lock(path, stale_after_s=60.0)[0]
        return found

    monkeypatch.setattr(lease, "read_holder", read)
    b, holder = lease.try_lock(path, stale_after_s=60.0)
    monkeypatch.setattr(lease, "read_holder", real_read)
    a = taken[0]
    assert a is not None and b is None
    assert lease.read_holder(lease.lease_path(path)).nonce == a.holder.nonce
    assert a.renew(force=True)


def test_a_claim_left_by_a_dead_contender_is_taken_over(tmp_path, monkeypatch):
    """A contender killed in the middle of a takeover leaves its claim; the claim is judged like a lease."""
    monkeypatch.setattr(fcntl, "flock", missing_flock)
    path = tmp_path / ".trainer.lock"
    stale = stale_lease(path, age_s=3600.0)
    claim = lease.lease_path(path).with_name(f"{lease.lease_path(path).name}.takeover-{stale.nonce}")
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    assert lease._create(claim, lease.Holder(host=socket.gethostname(), pid=int(dead.stdout), start=1,
                                             machine=lease.MACHINE, nonce="e" * 32))
    lock, _ = lease.try_lock(path, stale_after_s=60.0)
    assert lock is not None and not claim.exists()


def test_renew_release_and_a_lease_taken_from_under_its_holder(tmp_path, monkeypatch):
    monkeypatch.setattr(fcntl, "flock", missing_flock)
    path = tmp_path / ".trainer.lock"
    lock, _ = lease.try_lock(path)
    file = lease.lease_path(path)
    os.utime(file, (1.0, 1.0))
    assert lock.renew() and os.stat(file).st_mtime == 1.0  # throttled: within RENEW_S of the last
    assert lock.renew(force=True) and time.time() - os.stat(file).st_mtime < 5
    # Another process judged this one gone and took the lease over: renew says so, release leaves theirs.
    file.unlink()
    other = stale_lease(path, age_s=0.0)
    assert not lock.renew(force=True) and lock.taken_by().startswith("pid 4242 on node-b")
    lock.release()
    assert lease.read_holder(file).nonce == other.nonce


def test_the_liveness_probe_only_reads(tmp_path, monkeypatch):
    monkeypatch.setattr(fcntl, "flock", missing_flock)
    path = tmp_path / "driver.lock"
    assert lease.live_holder(path) is None and not path.exists()
    child = hold(path, "missing")
    try:
        assert lease.live_holder(path).pid == child.pid
    finally:
        kill(child)
    before = sorted(p.name for p in tmp_path.iterdir())
    assert lease.live_holder(path) is None
    assert sorted(p.name for p in tmp_path.iterdir()) == before


def test_a_holder_of_an_older_release_is_named_from_the_lock_file(tmp_path):
    """Before the lease, the flock holder wrote "pid N on HOST" into the lock file itself."""
    path = tmp_path / ".trainer.lock"
    path.write_text("pid 99 on old-node\n")
    with open(path) as held:
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        assert lease.try_lock(path) == (None, "pid 99 on old-node")


# ------------------------------------------------------------------------------------------------ two trainers
NODE = textwrap.dedent("""\
    # Pretend to be the node named in ZBPSCALE_TEST_NODE, on a filesystem whose flock is node-local; with
    # ZBPSCALE_TEST_SLACK_S, a trainer's lease bound is its step_timeout_s plus that (no set-up allowance).
    import fcntl, os, socket
    node = os.environ.get("ZBPSCALE_TEST_NODE")
    if node:
        socket.gethostname = lambda: node
        real = os.uname()
        os.uname = lambda: os.uname_result((real.sysname, node, real.release, real.version, real.machine))
        fcntl.flock = lambda *args: None
        import zbpscale.lease
        zbpscale.lease.MACHINE = "machine-of-" + node
    if os.environ.get("ZBPSCALE_TEST_SLACK_S"):
        import zbpscale.train.loop as loop
        loop.SETUP_S, loop.LEASE_SLACK_S = 0.0, float(os.environ["ZBPSCALE_TEST_SLACK_S"])
    """)


def trainer(run: Path, node: str, site: Path, *args: str, env: dict | None = None, **kw) -> subprocess.Popen:
    env = {**os.environ, **(env or {}), "OMP_NUM_THREADS": "1", "ZBPSCALE_TEST_NODE": node,
           "PYTHONPATH": os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH")]))}
    return subprocess.Popen([sys.executable, "-m", "zbpscale.train", "--run-dir", str(run), *args], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw)


def test_two_trainers_on_two_nodes_with_a_node_local_flock(tmp_path, data_dir):
    """node-a trains; node-b, whose flock says free, exits 2 in one line naming node-a's trainer, and again after
    that trainer is killed (its lease is younger than the bound, and node-b cannot see its pid); a trainer on
    node-a itself sees the pid gone and takes the run over."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(NODE)
    run = tmp_path / "jobs" / "direct" / "nano-bp"
    first = trainer(run, "node-a", site, "--size", "nano", "--data", str(data_dir), "--steps", "100000",
                    "--set", "eval_every=0")
    try:
        wait_until(lambda: (run / "heartbeat.json").exists(), "node-a's first heartbeat", 120, proc=first)
        for _ in range(2):
            second = trainer(run, "node-b", site)
            out, err = second.communicate(timeout=120)
            assert second.returncode == 2 and "Traceback" not in err, err
            (line,) = err.strip().splitlines()
            assert f"is being trained by another trainer (pid {first.pid} on node-a, lease renewed " in line, line
            if first.poll() is None:
                kill(first)
    finally:
        if first.poll() is None:
            kill(first)
    third = trainer(run, "node-a", site)
    try:
        # no lease for a moment (the first's released, the third's not written yet): not a holder yet
        wait_until(lambda: getattr(lease.read_holder(RunFolder(run).trainer_lease), "pid", None) == third.pid,
                   "the third trainer's lease", 120, proc=third)
    finally:
        kill(third)


def test_a_trainer_whose_lease_is_taken_over_writes_no_more(tmp_path, data_dir, monkeypatch):
    """Another trainer took the run over while this one was silent (the lease on disk replaced, as a takeover
    does, during step 2 of 6; RENEW_S 0: every renewal looks, as the first one after a pause longer than the
    lease's bound does): this one stops with RunFolderBusy before it writes step 2's record, and writes no end
    record, no checkpoint and no COMPLETE; the other's lease stays."""
    from zbpscale.errors import RunFolderBusy
    from zbpscale.run.config import ModelConfig, TrainConfig
    from zbpscale.run.records import read_records
    from zbpscale.train import loop

    cfg = TrainConfig(model=ModelConfig(n_layer=2, n_head=2, d_model=32, max_seq_len=32), data_dir=str(data_dir),
                      steps=6, global_batch=8, warmup_steps=2, eval_every=0, eval_batches=1, ckpt_every=3,
                      ckpt_every_s=0, device="cpu")
    run, real_step = RunFolder(tmp_path / "run"), loop._step

    def step(r, index, time_due):
        if index == 2:
            r.lock.lease.unlink()
            stale_lease(r.lock.path, age_s=0.0)
        return real_step(r, index, time_due)

    monkeypatch.setattr(loop, "_step", step)
    monkeypatch.setattr(lease, "RENEW_S", 0.0)
    with pytest.raises(RunFolderBusy, match=r"taken over by another trainer \(pid 4242 on node-b, lease renewed"):
        loop.train(cfg, run.path)
    assert [r["step"] for r in read_records(run.path) if r["kind"] == "train"] == [0, 1]
    assert not [r for r in read_records(run.path) if r["kind"] == "end"]
    assert not run.list_checkpoints() and not run.complete.exists()
    assert lease.read_holder(run.trainer_lease).pid == 4242


def snapshot(folder: Path) -> dict[str, str]:
    """Every entry under `folder`: a file's size and sha256, a link's target, a folder as such."""
    found = {}
    for p in sorted(folder.rglob("*")):
        key = str(p.relative_to(folder))
        if p.is_symlink():
            found[key] = "-> " + os.readlink(p)
        elif p.is_dir():
            found[key] = "dir"
        else:
            found[key] = f"{p.stat().st_size} {hashlib.sha256(p.read_bytes()).hexdigest()}"
    return found


def test_a_trainer_woken_after_a_takeover_writes_nothing(tmp_path, data_dir):
    """node-a trains (hang watchdog at 8 s, lease bound 9 s, TensorBoard and W&B offline) and is SIGSTOPped past
    its bound; node-b takes the run over, resumes from node-a's checkpoint and finishes it; then node-a gets
    SIGCONT. Its watchdog and its training thread both wake past every bound; neither may write: every byte under
    the run folder (records, stamps, checkpoints, heartbeat, lease, trackers' files) is as node-b left it, and
    node-a exits 5 with one line naming the takeover. The run reads as node-b made it: every step once, in
    metrics.jsonl and in both trackers, one end record per attempt and no hang."""
    from conftest import FAKE_WANDB_KEY, check_trackers
    from zbpscale.run.records import read_records

    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(NODE)
    run = tmp_path / "jobs" / "direct" / "nano-bp"
    (tmp_path / "node-tmp").mkdir()  # the node's temp dir: node-a, taken over, leaves its open W&B folder there
    env = {"ZBPSCALE_TEST_SLACK_S": "1", "WANDB_MODE": "offline", "WANDB_API_KEY": FAKE_WANDB_KEY,
           "WANDB_SILENT": "true", "TMPDIR": str(tmp_path / "node-tmp")}
    records = lambda kind: [r for r in read_records(run) if r["kind"] == kind]  # noqa: E731
    first = trainer(run, "node-a", site, "--size", "nano", "--data", str(data_dir), "--steps", "60", "--set",
                    "global_batch=8", "--set", "eval_every=0", "--set", "ckpt_every=10", "--set", "step_timeout_s=8",
                    "--set", "trackers=tensorboard,wandb", env=env)
    second = None
    try:
        wait_until(lambda: len(records("train")) >= 25, "node-a's 25 steps", 120, proc=first, every=0.1)
        first.send_signal(signal.SIGSTOP)
        time.sleep(10.0)  # past node-a's lease bound (8 s + 1 s) and its watchdog's 8 s
        second = trainer(run, "node-b", site, env=env)
        out, err = second.communicate(timeout=300)
        assert second.returncode == 0, out + err
        before = snapshot(run)
        first.send_signal(signal.SIGCONT)
        out, err = first.communicate(timeout=120)
        after = snapshot(run)
    finally:
        for proc in (first, second):
            if proc is not None and proc.poll() is None:
                proc.send_signal(signal.SIGCONT)
                kill(proc)
    assert first.returncode == 5, err
    (line,) = err.strip().splitlines()
    assert f"{run} was taken over by another trainer" in line and "stopping without writing more" in line, line
    assert {k: v for k, v in after.items() if before.get(k) != v} == {} and set(after) == set(before)
    assert [r["step"] for r in records("train")] == list(range(60))
    assert [(r["why"], r["step"]) for r in records("end")] == [("completed", 59)]
    assert len(records("start")) == 2 and not (run / ".trainer.lease").exists()
    check_trackers(run, tmp_path / "jobs")
