"""How an attempt ended (jobs/ends.py) and what follows it (jobs/attempt.py): the classifier against a literal table
of what an executor saw -> the end it names, one row per rule and per edge between rules; then both executors, each
fed a situation in its own terms (the local driver: its ranks' exit statuses, the COMPLETE stamp and its own signal;
the SLURM job: its trainer's outcome, the CANCEL stamp, the scheduler's state, the time left), against the same
classifier: each hands it the same `Seen`, and each records the end it names, or, given another classifier, that
one's; and a table of situations and earlier ends through both executors' own paths, which give the same record."""

from __future__ import annotations

import inspect
import sys
from pathlib import Path

import pytest

from zbpscale.entry import TrainJob
from zbpscale.jobs import ends
from zbpscale.jobs.ends import LEASE_LOST, Ending, Seen
from zbpscale.jobs.executors import slurm_job, slurm_sentinel
from zbpscale.jobs.executors.local_queue.driver import Driver
from zbpscale.jobs.executors.local_queue.queue import Entry, LocalQueue
from zbpscale.run.folder import RunFolder
from zbpscale.run.history import History, Retry

CHECKPOINTED, KILLED = "checkpointed", "killed at the limit"

TABLE = [  # (what the executor saw, how the attempt ended)
    # -- the run is complete: the stamp wins over every signal and status
    (Seen(codes=(0, 0), complete=True), Ending("completed", "all steps done")),             # every rank done
    (Seen(codes=(75,), complete=True, stop="timeout"), Ending("completed", "all steps done")),  # done as the limit came
    (Seen(codes=(None,), complete=True, unheard=True), Ending("completed", "all steps done")),  # done, then killed
    (Seen(codes=(0,)), Ending("crashed", retry=True)),              # exit 0 without the stamp is no completion
    # -- it ran and died without a word: a crash, unless a cancel came (below)
    (Seen(codes=(None,), unheard=True), Ending("crashed", retry=True)),                   # SLURM's next start or step
    # -- a cancel: checkpointed (every status 75 or unseen), or killed (every rank by a signal)
    (Seen(codes=(75, 75), stop="cancel"), Ending("cancelled", "zbpscale cancel; checkpointed")),
    (Seen(codes=(-9, -15), stop="cancel"), Ending("cancelled", "zbpscale cancel; killed")),  # killed after its delay
    (Seen(codes=(None,), stop="cancel"), Ending("cancelled", "zbpscale cancel; checkpointed")),  # adopted, unseen
    # adopted, found dead (killed with its driver) as the cancel came: cancelled, not started again (it was, and
    # trained on after the cancel)
    (Seen(codes=(None, None), unheard=True, stop="cancel"),
     Ending("cancelled", "zbpscale cancel; it had died without an end record")),
    (Seen(codes=(75,), stop="scancel"), Ending("cancelled", "scancel; checkpointed")),    # SLURM: CANCELLED
    (Seen(codes=(75, 1), stop="cancel"), Ending("crashed", retry=True)),  # a rank crashed while checkpointing
    # -- the scheduler's own word (#59): an admin's requeue, a killed batch script; neither is a cancel
    (Seen(codes=(75,), stop="requeued"), Ending("preempted", "requeued by SLURM (sacct: REQUEUED); checkpointed",
                                                retry=True, by_scheduler=True)),          # SLURM: REQUEUED
    (Seen(codes=(75,), stop="batch"), Ending("crashed", "the job's batch script was killed (SLURM: FAILED, "
                                                        "JobLaunchFailure); checkpointed")),  # FAILED 0:9
    # -- found frozen and killed by its executor: hung, whatever the statuses
    (Seen(codes=(-9, -9), stop="hung"), Ending("hung", retry=True)),     # the local driver's catch_hang
    (Seen(codes=(None,), stop="hung"), Ending("hung", retry=True)),      # SLURM's sentinel (the process is alive)
    # -- interrupted: at the time limit -> timeout, else preempted
    (Seen(codes=(75, 75), stop="timeout"), Ending("timeout", CHECKPOINTED, retry=True)),  # SIGUSR2 at the limit
    (Seen(codes=(-9,), stop="timeout"), Ending("timeout", KILLED, retry=True)),           # killed at the limit
    (Seen(codes=(3,), stop="timeout"), Ending("timeout", KILLED, retry=True)),  # the limit's kill outranks a status
    (Seen(codes=(75,)), Ending("preempted", CHECKPOINTED, retry=True)),     # a signal from elsewhere
    (Seen(codes=(None, None)), Ending("preempted", CHECKPOINTED, retry=True)),  # adopted: the kernel's SIGUSR2
    (Seen(codes=(75, 75), stop="kill"), Ending("crashed", retry=True)),  # its peers killed after a rank failed
    # -- the run folder is another trainer's: failed, nothing recorded
    (Seen(codes=(5, -9)), Ending("failed", LEASE_LOST, record=False)),   # the trainer's EXIT_LEASE_LOST
    (Seen(codes=(-9,), stop="lost"), Ending("failed", LEASE_LOST, record=False)),  # found frozen and replaced
    (Seen(codes=(5, 2)), Ending("failed", LEASE_LOST, record=False)),    # lease lost outranks a usage error
    # -- a user's mistake or a divergence: the same attempt would end the same way
    (Seen(codes=(2,)), Ending("failed")),                                 # EXIT_USAGE
    (Seen(codes=(3, -15)), Ending("failed")),                             # EXIT_DIVERGED, its peer killed
    (Seen(codes=(2, 4)), Ending("failed")),                               # a mistake outranks a hang
    # -- the trainer's watchdog: no step for step_timeout_s
    (Seen(codes=(4, -9)), Ending("hung", retry=True)),                    # EXIT_HUNG
    (Seen(codes=(4, 1)), Ending("hung", retry=True)),                     # a hang outranks a crash
    # -- anything else: a crash, started again where the executor restarts crashes
    (Seen(codes=(1,)), Ending("crashed", retry=True)),                    # an exception
    (Seen(codes=(-9, 75)), Ending("crashed", retry=True)),                # one rank killed (kill -9, the OOM killer)
    (Seen(codes=(130,)), Ending("crashed", retry=True)),                  # a status train/exits.py does not promise
    (Seen(codes=(1,), restarts_crashes=False, peer_lost=True), Ending("crashed")),  # old SLURM job: a lost peer
    (Seen(codes=(1,), restarts_crashes=False), Ending("failed")),         # old SLURM job: its own exception
    (Seen(codes=(2,), restarts_crashes=False, peer_lost=True), Ending("failed")),  # a mistake stays a mistake
]


@pytest.mark.parametrize("seen, expected", TABLE)
def test_the_classifier_names_each_end_as_the_table_does(seen, expected):
    assert ends.classify(seen) == expected


def test_every_rule_has_a_row():
    """Every `return` of the classifier (one a rule, the last line two) is reached by a row of the table."""
    code, hit, before = ends.classify.__code__, set(), sys.gettrace()

    def trace(frame, event, arg):
        if frame.f_code is code and event == "line":
            hit.add(frame.f_lineno)
        return trace

    sys.settrace(trace)
    try:
        for seen, _ in TABLE:
            ends.classify(seen)
    finally:
        sys.settrace(before)
    lines, first = inspect.getsourcelines(code)
    returns = {first + i for i, line in enumerate(lines) if line.strip().startswith("return")}
    assert len(returns) == 12 and returns <= hit
    assert {e.why for s, e in TABLE if not s.restarts_crashes} == {"crashed", "failed"}  # the last line, both ways


# ------------------------------------------------------------------------- both executors, one classifier
@pytest.fixture
def spy(monkeypatch):
    """Every Seen handed to the classifier, in order; the classifier itself still answers."""
    seen, real = [], ends.classify

    def classify(s: Seen) -> Ending:
        seen.append(s)
        return real(s)

    monkeypatch.setattr(ends, "classify", classify)
    return seen


@pytest.fixture
def driver(tmp_path, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")  # no GPU inventory to probe
    return Driver(LocalQueue(tmp_path / "queue"))


def local_end(driver: Driver, run_dir: Path, codes: list[int | None], signalled: str = "") -> dict | None:
    """Settle one attempt of a train entry of the local queue whose ranks exited with `codes` after this driver's
    `signalled`; the end it recorded in the run's attempts (None: none)."""
    run_dir.mkdir(parents=True, exist_ok=True)
    (e,) = driver.q.add([Entry(job_id="", name=f"s/{run_dir.name}", run_dir=str(run_dir),
                               log_dir=str(run_dir / "logs"), ranks=len(codes))])
    e.state, e.signalled = "running", signalled
    driver.settle(e, codes)
    return History.read(run_dir).last_end(e.job_id) or None


def slurm_ending(run_dir: Path, monkeypatch, status: str, *, scheduler: str = "RUNNING", left_s: float | None = None,
                 cancel_stamp: bool = False) -> Ending:
    """What the SLURM job's rank 0 makes of a trainer that returned `status`, with SLURM's answers replaced."""
    run_dir.mkdir(parents=True, exist_ok=True)
    if cancel_stamp:
        RunFolder(run_dir).cancel.write_text("cancel\n")
    monkeypatch.setattr(slurm_job.slurm, "squeue_rows", lambda ids, errors=None: {i: {"state": scheduler} for i in ids})
    monkeypatch.setattr(slurm_job.slurm, "sacct_rows", lambda ids, errors=None: {})  # never the suite's own cluster
    monkeypatch.setattr(slurm_job.slurm, "seconds_left", lambda job_id: left_s)
    job = TrainJob(str(run_dir), max_timeouts=2, max_preemptions=2, signal_delay_s=180)
    return slurm_job.ending(job, run_dir, "7", status, main=True)


CASES = [  # (local: ranks' statuses, the driver's signal; SLURM: trainer's outcome and SLURM's answers; the Seen)
    ([0], "", dict(status="completed"), Seen(codes=(0,), complete=True)),                      # all steps done
    ([75], "timeout", dict(status="checkpointed", left_s=30), Seen(codes=(75,), stop="timeout")),  # the limit
    ([75], "", dict(status="checkpointed", left_s=3600), Seen(codes=(75,))),                    # a preemption
    ([75], "cancel", dict(status="checkpointed", cancel_stamp=True), Seen(codes=(75,), stop="cancel")),  # cancel
]


@pytest.mark.parametrize("codes, signalled, slurm, expected", CASES)
def test_both_executors_hand_the_classifier_the_same_seen_and_record_its_end(tmp_path, monkeypatch, spy, driver,
                                                                               codes, signalled, slurm, expected):
    if expected.complete:
        (tmp_path / "local").mkdir()
        RunFolder(tmp_path / "local").complete.write_text("done\n")
    recorded = local_end(driver, tmp_path / "local", codes, signalled)
    end = slurm_ending(tmp_path / "slurm", monkeypatch, **slurm)
    assert spy == [expected, expected]
    assert end == ends.classify(expected)
    assert recorded["why"] == end.why
    assert recorded["reason"].startswith(end.reason)  # a requeue's reason goes on with its count: "; requeue 1/20"


def test_both_executors_record_a_crash_and_a_hang_as_the_classifier_names_them(tmp_path, monkeypatch, spy, driver):
    """A trainer that raised (local: exit 1), one its watchdog ended (exit 4), one found frozen from outside."""
    monkeypatch.setenv("ZBPSCALE_STEP_RESTARTS", "1")
    monkeypatch.setattr(slurm_job, "kill_step", lambda: None)
    monkeypatch.setattr(slurm_sentinel, "kill_step", lambda: None)
    job = TrainJob(str(tmp_path / "slurm"), max_timeouts=2, max_preemptions=2, signal_delay_s=180)
    (tmp_path / "slurm").mkdir()
    slurm_ends = []
    for act in (lambda: slurm_job.record_crash(job, tmp_path / "slurm", "7", RuntimeError("boom")),
                lambda: slurm_job._hung(job, tmp_path / "slurm", "7", "no step for 60 s"),
                lambda: slurm_sentinel.hung_from_outside(tmp_path / "slurm", "7", "frozen", max_crashes=3, pids=())):
        act()
        slurm_ends.append(History.read(tmp_path / "slurm").last_end("7")["why"])
    local_ends = [local_end(driver, tmp_path / f"local{i}", codes, signalled)["why"]
                  for i, (codes, signalled) in enumerate([([1], ""), ([4], ""), ([-9], "hung")])]
    assert spy == [Seen(codes=(1,)), Seen(codes=(4,)), Seen(stop="hung"),
                   Seen(codes=(1,)), Seen(codes=(4,)), Seen(codes=(-9,), stop="hung")]
    assert slurm_ends == local_ends == ["crashed", "hung", "hung"]


def test_both_executors_record_what_the_classifier_says_not_their_own_rule(tmp_path, monkeypatch, driver):
    """Another classifier, another end: a checkpointed attempt at its time limit is recorded as it says."""
    monkeypatch.setattr(ends, "classify", lambda seen: Ending("cancelled", "said the classifier"))
    recorded = local_end(driver, tmp_path / "local", [75], "timeout")
    end = slurm_ending(tmp_path / "slurm", monkeypatch, "checkpointed", left_s=30)
    assert (recorded["why"], recorded["reason"]) == (end.why, end.reason) == ("cancelled", "said the classifier")


def test_a_lease_lost_attempt_is_recorded_by_neither(tmp_path, driver):
    """The local driver records nothing of an attempt whose run folder is another trainer's; the classifier's row
    is what the SLURM job does when its trainer raises LeaseLost (it leaves at once, writing nothing)."""
    assert local_end(driver, tmp_path / "local", [5]) is None
    assert [e.state for e in driver.q.entries()] == ["failed"]
    assert ends.classify(Seen(codes=(5,))).record is False


# ------------------------------------------------------------------ one attempt lifecycle, both executors
def earlier(run_dir: Path, *whys: str) -> None:
    """Ends the run's attempts had before this one (counted against their bounds)."""
    from zbpscale.run.history import record

    run_dir.mkdir(parents=True, exist_ok=True)
    for why in whys:
        record(run_dir, "end", job_id="0", executor="test", why=why, reason="earlier")


def slurm_lifecycle(run_dir: Path, monkeypatch, act: str, requeued: list) -> None:
    """The SLURM job's own path for `act`: a trainer that returned (settle), raised (record_crash) or hung (_hung)."""
    monkeypatch.setenv("ZBPSCALE_STEP_RESTARTS", "1")
    monkeypatch.setattr(slurm_job, "requeue", requeued.append)
    monkeypatch.setattr(slurm_job, "kill_step", lambda: None)
    job = TrainJob(str(run_dir), max_timeouts=2, max_preemptions=2, max_crashes=3, signal_delay_s=180)
    if act == "crash":
        slurm_job.record_crash(job, run_dir, "7", RuntimeError("boom"))
    elif act == "hang":
        slurm_job._hung(job, run_dir, "7", "no step for 60 s")
    else:
        end = slurm_ending(run_dir, monkeypatch, "checkpointed" if act != "done" else "completed",
                           left_s=30 if act == "timeout" else 3600, cancel_stamp=act == "cancel")
        try:
            slurm_job.settle(job, run_dir, "7", end)
        except slurm_job.JobFailed:
            pass


LOCAL = {"done": ([0], ""), "timeout": ([75], "timeout"), "preempt": ([75], ""), "cancel": ([75], "cancel"),
         "crash": ([1], ""), "hang": ([4], "")}
"""Each situation as the local driver sees it: its ranks' exit statuses and its own signal."""

LIFECYCLE = [  # (the situation, the ends the run had before, what its end record says: why, and its reason's count)
    ("done", (), "completed", "all steps done"),
    ("timeout", (), "timeout", "checkpointed; requeue 1/2"),
    ("timeout", ("timeout", "timeout"), "failed", "timeout 3 times, over max_timeouts=2"),
    ("preempt", ("timeout", "timeout"), "preempted", "checkpointed; requeue 1/2"),  # each kind its own bound
    ("preempt", ("preempted", "preempted"), "failed", "preempted 3 times, over max_preemptions=2"),
    ("cancel", ("crashed",), "cancelled", "zbpscale cancel; checkpointed"),
    ("crash", (), "crashed", " 1/3"),
    ("crash", ("hung", "crashed", "crashed"), "failed", "crashed 4 times, over max_crashes=3 (last: "),  # a hang
    ("hang", ("timeout",), "hung", " 1/3"),                                                           # is a crash
    ("hang", ("crashed",) * 3, "failed", "crashed 4 times, over max_crashes=3 (last: "),
]


def test_a_bound_of_zero_is_said_of_its_one_end():
    """max_timeouts=0 (no requeue after a time limit): the first timeout fails the run, 'timeout 1 time', where
    the reason said '1 times'."""
    timeouts = History(({"event": "end", "why": "timeout", "time": 1.0},))
    assert History().retry("timeout", {"timeout": 0}) == Retry(False, "timeout 1 time, over max_timeouts=0")
    assert timeouts.retry("timeout", {"timeout": 1}) == Retry(False, "timeout 2 times, over max_timeouts=1")


@pytest.mark.parametrize("situation, before, why, said", LIFECYCLE)
def test_the_same_situation_through_both_executors_gives_the_same_record(tmp_path, monkeypatch, driver, situation,
                                                                          before, why, said):
    """#55 item 1: one lifecycle (jobs/attempt.py's conclude) for the local driver and the SLURM job: the same
    situation and the same earlier ends give the same end record (why; the reason's count or bound, the words
    before it the executor's own), each naming its executor, and the attempt starts again exactly when it says
    so (requeued by the driver; SLURM: requeued, or a crash or hang left for the batch script's next step)."""
    if situation == "done":
        (tmp_path / "local").mkdir()
        RunFolder(tmp_path / "local").complete.write_text("done\n")
    earlier(tmp_path / "local", *before)
    earlier(tmp_path / "slurm", *before)
    codes, signalled = LOCAL[situation]
    (e,) = driver.q.add([Entry(job_id="", name="s/local", run_dir=str(tmp_path / "local"),
                               log_dir=str(tmp_path / "local" / "logs"), ranks=len(codes), max_timeouts=2,
                               max_preemptions=2, max_crashes=3)])
    e.state, e.signalled = "running", signalled
    driver.settle(e, codes)
    requeued: list[str] = []
    slurm_lifecycle(tmp_path / "slurm", monkeypatch, situation, requeued)
    local, slurm = (History.read(tmp_path / run).events[-1] for run in ("local", "slurm"))
    assert (local["why"], local["executor"]) == (why, "local") and (slurm["why"], slurm["executor"]) == (why, "slurm")
    for end in (local, slurm):
        assert said in end["reason"] and (end["reason"].startswith(said) or said.startswith(" ")), end
    again = why in ("timeout", "preempted", "crashed", "hung")
    assert (driver.q.entries()[0].state == "queued") == again
    assert requeued == (["7"] if why in ("timeout", "preempted") else [])  # a crash or hang: a new step instead
