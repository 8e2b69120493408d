"""The polite poller (jobs/poller.py) and what waits through it: submit --wait, status, cancel.

Compared: the ask times of a Poller driven by a fake clock against literal tables (the rule: at most once per
poll_s, plus once when a run folder changes, SETTLE_S after the change and EARLY_GAP_S after the last ask; the
back-off: poll_s doubled per unanswered ask, capped at 10 minutes); what a stand-in squeue that fails with
SLURM's own rate-limit errors gets (the scheduled calls, one line said, every run state as before the outage);
the number of squeue and sacct calls one `zbpscale status` makes over two sweeps of many jobs, and the job ids
it asks accounting about, with the runs whose end is not recorded; the --wait block against 80 columns and the
states it was given; tools/count_slurm_calls.py's figures against a literal log. Against the real SLURM (marked
slurm): every SLURM command counted by that tool's shims for one status over many real jobs and one cancel of
several.
"""

import json
import os
import stat
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from conftest import config_json, load_tool, wait_until
from zbpscale.jobs import executors, submit
from zbpscale.jobs.executors import UNKNOWN, Executor, JobView, View
from zbpscale.jobs.poller import MAX_BACKOFF_S, Poller, backoff_s
from zbpscale.jobs.state import RunState, decide
from zbpscale.run.history import read_attempts
from zbpscale.run.snapshot import Snapshot

ISO = "%Y-%m-%dT%H:%M:%S"


def iso(t: float) -> str:
    return time.strftime(ISO, time.localtime(t))


class Clock:
    """A fake clock: its time is what the test sets."""

    def __init__(self, t: float = 0.0):
        self.t = t

    def __call__(self) -> float:
        return self.t


def write_run(folder: Path, name: str, job: str, *, executor: str = "slurm", beat: float | None = None,
              submitted_at: float | None = None, started: bool = True, ends: tuple = ()) -> Path:
    run = folder / name
    run.mkdir(parents=True)
    (run / "config.json").write_text(config_json(steps=50, global_batch=4))
    at = time.time() - 600 if submitted_at is None else submitted_at
    events = [{"event": "submitted", "time": at, "job_id": job, "executor": executor, "logs": str(run / "logs"),
               "name": f"{folder.name}/{name}"}]
    if started:
        events.append({"event": "start", "time": at + 1, "job_id": job, "executor": executor})
    events += [{"event": "end", "time": at + 2, "job_id": job, "executor": executor, "why": why, "reason": "r"}
               for why in ends]
    (run / "attempts.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    if beat is not None:
        (run / "heartbeat.json").write_text(json.dumps({"step": 3, "time": beat}))
    return run


def append(run: Path, **event) -> None:
    with open(run / "attempts.jsonl", "a") as fh:
        fh.write(json.dumps({"time": time.time(), **event}) + "\n")


# ------------------------------------------------------------------------------------------------ the rule
BACKOFF = [  # (poll_s, unanswered asks in a row, seconds until the next ask)
    (60, 0, 60),  # answering: every poll_s
    (60, 1, 120),  # the first miss doubles it
    (60, 2, 240),
    (60, 3, 480),
    (60, 4, 600),  # 960, capped at 10 minutes
    (60, 12, 600),  # and stays there
    (10, 1, 20),  # the least poll_s a sweep may set
    (10, 5, 320),
    (10, 6, 600),  # 640, capped
    (900, 3, 900),  # a poll_s above the cap: a scheduler that does not answer is never asked more often
]


@pytest.mark.parametrize("poll_s, failures, delay", BACKOFF)
def test_backoff_schedule(poll_s, failures, delay):
    assert backoff_s(failures, poll_s) == delay and MAX_BACKOFF_S == 600


class FakeExecutor(Executor):
    """A rate-limited back end that answers from `ANSWERS` and counts its views."""

    name = label = "fake"
    rate_limited = True
    ANSWERS: dict[str, str] = {}
    VIEWS: list[list[str]] = []

    def view(self, submitted, *, now):
        FakeExecutor.VIEWS.append([s["job_id"] for s in submitted])
        return View({s["job_id"]: JobView(self.ANSWERS.get(s["job_id"], "RUNNING"), source="fake")
                     for s in submitted})

    def submit(self, sweep, todo, *, prep, max_parallel=0):
        raise NotImplementedError

    def cancel(self, run_dir, job, seen):
        raise NotImplementedError


@pytest.fixture
def fake(monkeypatch):
    monkeypatch.setitem(executors.KINDS, "fake", FakeExecutor)
    monkeypatch.setattr(FakeExecutor, "ANSWERS", {})
    monkeypatch.setattr(FakeExecutor, "VIEWS", [])
    return FakeExecutor


def test_asks_at_most_once_per_poll_s_plus_once_per_folder_change(tmp_path, fake):
    """Every row is one look (the folders are read every time); an ask is one view of the fake back end."""
    sweep = tmp_path / "jobs" / "sw"
    runs = {n: write_run(sweep, n, job, executor="fake", beat=1e12) for n, job in (("a", "1"), ("b", "2"),
                                                                                    ("c", "3"))}
    clock = Clock()
    poller = Poller(tmp_path / "jobs", poll_s=60, clock=clock)
    events = {
        "end a": lambda: append(runs["a"], event="end", job_id="1", executor="fake", why="completed", reason="done"),
        "complete b": lambda: (runs["b"] / "COMPLETE").write_text(""),
        "resubmit c": lambda: append(runs["c"], event="submitted", job_id="9", executor="fake"),
        "end c by sacct": lambda: append(runs["c"], event="end", job_id="9", executor="fake", why="crashed",
                                         reason="r", source="sacct"),
        "stale a": lambda: (runs["a"] / "heartbeat.json").write_text(json.dumps({"step": 3, "time": clock.t - 200})),
    }
    table = [  # (time, what happens in the folders before the look, asked at this look)
        (0, None, True),  # the first look asks
        (2, None, False),  # folders read, nothing changed: no ask before poll_s
        (59, None, False),
        (60, None, True),  # poll_s after the last ask
        (64, "end a", False),  # a run's end record: seen now, asked about SETTLE_S later
        (68, None, False),
        (69, None, False),  # settled, but 9 s after the last ask (EARLY_GAP_S is 10)
        (70, None, True),  # the one early ask
        (75, None, False),  # nothing changed since
        (76, "complete b", False),  # a COMPLETE marker
        (81, None, True),
        (84, "resubmit c", False),  # a new job (the poller cannot know it yet: UNKNOWN, never gone)
        (89, None, False),  # settled, but 8 s after the last ask (EARLY_GAP_S is 10)
        (91, None, True),
        (100, "end c by sacct", False),  # written from the scheduler's own account: no news to ask about
        (120, None, False),
        (130, "stale a", False),  # a heartbeat gone stale
        (135, None, True),
        (194, None, False),
        (195, None, True),  # poll_s after the early ask
        (255, None, True),
    ]
    asked = []
    for t, event, _ in table:
        clock.t = t
        if event:
            events[event]()
        before = len(fake.VIEWS)
        view = poller.look({d: Snapshot(d) for d in runs.values()})
        asked.append(len(fake.VIEWS) > before)
        if t == 89:
            assert view.of("9").state == UNKNOWN and view.of("1").state == "RUNNING"
        if t == 91:
            assert view.of("9").state == "RUNNING" and view.of("9").source == "fake"
        if t == 2:  # between asks the answer is the last one, whatever the back end would say now
            fake.ANSWERS["2"] = "PENDING"
            assert view.of("2").state == "RUNNING"
    assert asked == [a for _, _, a in table]
    assert all(len(v) == 3 for v in fake.VIEWS) and poller.asks == sum(asked)  # one ask: every run's job at once


# ------------------------------------------------------------------------------------------------ back-off
@pytest.fixture
def standins(tmp_path, monkeypatch):
    """Stand-in squeue and sacct first on PATH: each call is a line in <name>.calls; squeue answers the rows of
    squeue.txt, or fails as SLURM does (its line from squeue.down on stderr, exit 1); sacct those of sacct.txt."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name in ("squeue", "sacct"):
        script = bin_dir / name
        script.write_text(f'#!/bin/sh\necho "$*" >> {bin_dir}/{name}.calls\n'
                          f'if [ -e {bin_dir}/{name}.down ]; then cat {bin_dir}/{name}.down >&2; exit 1; fi\n'
                          f'cat {bin_dir}/{name}.txt 2>/dev/null\n')
        script.chmod(script.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    return bin_dir


def calls(bin_dir: Path, name: str) -> list[list[str]]:
    path = bin_dir / f"{name}.calls"
    return [line.split() for line in path.read_text().splitlines()] if path.exists() else []


@pytest.mark.parametrize("error", ["squeue: error: slurm_load_jobs error: Socket timed out on send/recv operation",
                                   "slurm_load_jobs error: Resource temporarily unavailable"])
def test_a_scheduler_that_does_not_answer_is_backed_off_said_once_and_changes_no_state(tmp_path, standins, error):
    t0 = time.time()
    sweep = tmp_path / "jobs" / "sw"
    running = write_run(sweep, "nano-bp", "7", beat=t0 + 1e6)
    (standins / "squeue.txt").write_text(f"7|RUNNING|None|{iso(t0 - 600)}|sw/nano-bp\n")
    clock, said = Clock(t0), []
    poller = Poller(tmp_path / "jobs", poll_s=60, clock=clock, say=said.append)
    runs = [running]
    asked_at, states = [], set()
    for t in range(0, 2410, 10):
        clock.t = t0 + t
        if t == 50:
            (standins / "squeue.down").write_text(error + "\n")
        if t == 300:  # a run submitted during the outage
            runs.append(write_run(sweep, "nano-zbp_n4", "8", submitted_at=t0 + t, started=False))
        if t == 2100:
            (standins / "squeue.down").unlink()
            (standins / "squeue.txt").write_text(f"7|RUNNING|None|{iso(t0 - 600)}|sw/nano-bp\n"
                                                 f"8|PENDING|Priority|{iso(t0 + 300)}|sw/nano-zbp_n4\n")
        before = len(calls(standins, "squeue"))
        looks = {d: Snapshot(d) for d in runs}
        view = poller.look(looks)
        if len(calls(standins, "squeue")) > before:
            asked_at.append(t)
        decided = [decide(look, view.of(look.history.job_id)).state for look in looks.values()]
        states.add((t >= 2100, tuple(decided)))
        if 50 < t < 2100:
            assert any(error in note for note in view.notes), view.notes
    # answered at 0; then unanswered at 60, 180, 420, 900, 1500 (waits 120, 240, 480, 600, 600); answered at 2100
    assert asked_at == [0, 60, 180, 420, 900, 1500, 2100, 2160, 2220, 2280, 2340, 2400]
    assert [t2 - t1 for t1, t2 in zip(asked_at[1:6], asked_at[2:7])] == [backoff_s(n, 60) for n in range(1, 6)]
    assert len(said) == 2 and error in said[0] and "at most every 10m" in said[0] and "answers again" in said[1]
    # never a state from the outage: the running run stays running, the new one unknown (left alone) until asked
    assert states == {(False, ("running",)), (False, ("running", "unknown")), (True, ("running", "queued"))}
    assert not [a for d in runs for a in read_attempts(d) if a["event"] == "end"]
    # accounting is asked only when squeue did not list the job (the five unanswered asks), once each
    assert [c[c.index("-j") + 1] for c in calls(standins, "sacct")] == ["7", "7", "7,8", "7,8", "7,8"]


# ------------------------------------------------------------------------------------------------ status
def test_one_status_over_two_sweeps_of_many_jobs_is_one_squeue_and_one_sacct(tmp_path, standins):
    """Two sweeps of 10 runs each under ./jobs: squeue lists six live jobs of each; of the rest, accounting is
    asked about the jobs whose end their folder has not recorded (a preemption is no end of the job). Status
    writes nothing: a crash accounting tells of is shown, not recorded, so the next status asks about it again
    in the same one sacct (submit records it, and then nothing asks)."""
    now = time.time()
    squeue, sacct, unrecorded = [], [], []
    for sweep, base in (("ladder", 100), ("mini", 200)):
        for i in range(10):
            job, name = str(base + i), f"s{i}-bp"
            ends = {6: ("completed",), 8: ("cancelled",), 9: ("preempted",)}.get(i, ())
            write_run(tmp_path / "jobs" / sweep, name, job, ends=ends, submitted_at=now - 600)
            if i < 6:
                squeue.append(f"{job}|{'RUNNING' if i < 4 else 'PENDING'}|None|{iso(now - 600)}|{sweep}/{name}")
            else:
                sacct.append(f"{job}|{'FAILED|0:9' if i == 7 else 'COMPLETED|0:0'}|0:0|{iso(now - 600)}|{sweep}/{name}")
                if i in (7, 9):
                    unrecorded.append(job)
    (standins / "squeue.txt").write_text("\n".join(squeue) + "\n")
    (standins / "sacct.txt").write_text("\n".join(sacct) + "\n")

    def status() -> dict:
        out = subprocess.run([sys.executable, "-m", "zbpscale.cli", "status", "--json"], cwd=tmp_path,
                             capture_output=True, text=True, timeout=120)
        assert out.returncode in (1, 3), out.stdout + out.stderr
        return json.loads(out.stdout)

    first = status()
    (sq,), (sa,) = calls(standins, "squeue"), calls(standins, "sacct")
    assert sorted(sq[sq.index("-j") + 1].split(",")) == [str(b + i) for b in (100, 200) for i in range(10)]
    assert sorted(sa[sa.index("-j") + 1].split(",")) == sorted(unrecorded)
    # what the folders and the scheduler say together (the folders hold no COMPLETE marker)
    expect = ["running"] * 4 + ["queued"] * 2 + ["stopped", "failed", "cancelled", "stopped"]
    assert [r["state"] for r in first["ladder"]] == [r["state"] for r in first["mini"]] == expect
    folders = {p: p.read_bytes() for p in (tmp_path / "jobs").rglob("*") if p.is_file()}
    second = status()
    assert {p: p.read_bytes() for p in (tmp_path / "jobs").rglob("*") if p.is_file()} == folders
    assert len(calls(standins, "squeue")) == 2 and len(calls(standins, "sacct")) == 2
    sa = calls(standins, "sacct")[1]
    assert sorted(sa[sa.index("-j") + 1].split(",")) == sorted(unrecorded)
    assert [r["state"] for r in second["ladder"]] == expect
    from zbpscale.jobs.executors import JobView
    from zbpscale.jobs.state import record_unheard

    for sweep, base in (("ladder", 100), ("mini", 200)):  # what submit does under its lock
        record_unheard(tmp_path / "jobs" / sweep / "s7-bp", JobView("FAILED", source="sacct"))
    status()
    sa = calls(standins, "sacct")[2]
    assert sorted(sa[sa.index("-j") + 1].split(",")) == ["109", "209"]


# ------------------------------------------------------------------------------------------------ --wait
def planned(folder: Path, name: str, steps: int) -> SimpleNamespace:
    """A stand-in for a sweep file's run (jobs.sweep.PlannedRun): what --wait reads of it."""
    size, arm, *_ = name.split("-")
    return SimpleNamespace(name=name, run_dir=folder / name, size=SimpleNamespace(name=size, steps=steps),
                           arm=SimpleNamespace(name=arm), seed=0, steps=steps, role="", waits_for=())


def ladder_runs(folder: Path, n: int = 15) -> list[SimpleNamespace]:
    sizes, arms = {"s60": 4599, "s124": 9503, "s350": 13624, "s1b": 19413, "s1b-s": 19413}, ("bp", "zbp_n16",
                                                                                           "zbp_n64")
    runs = []
    for size, steps in sizes.items():
        for arm in arms:
            name = f"s1b-{arm}-s1" if size == "s1b-s" else f"{size}-{arm}"
            runs.append(planned(folder, name, steps))
    return runs[:n]


@pytest.mark.parametrize("spread", ["all running", "mixed"])
def test_the_wait_block_fits_80_columns_for_a_15_run_ladder(tmp_path, spread):
    runs = ladder_runs(tmp_path)
    order = ("running", "queued", "complete", "failed", "unknown", "stalled", "stopped")
    states = {r.name: RunState("running" if spread == "all running" else order[i % len(order)])
              for i, r in enumerate(runs)}
    for r in runs:
        r.run_dir.mkdir()
        (r.run_dir / "heartbeat.json").write_text(json.dumps({"step": r.size.steps - 1, "time": 0}))
    lines = submit.wait_block(runs, states, at="12:34:56")
    assert max(map(len, lines)) <= 80 and len(lines) <= 10, "\n".join(lines)  # a few lines, however spread
    header = lines[0]
    assert header.startswith("[12:34:56] 15 runs: ")
    counted = {k: int(v) for v, k in (part.split(" ", 1) for part in header.split(": ", 1)[1].split(", "))}
    main = ("complete", "running", "queued", "failed")
    expect = {s: sum(st.state == s for st in states.values()) for s in main}
    other = len(runs) - sum(expect.values())
    assert counted == {s: n for s, n in {**expect, "other": other}.items() if n}  # the states there are
    named = " ".join(lines[1:]).replace(",", " ").split()
    for r in runs:  # every run once, a running one with its step
        assert named.count(r.name) == 1
        if states[r.name].state == "running":
            assert named[named.index(r.name) + 1] == f"{r.size.steps - 1}/{r.size.steps}"


def test_wait_prints_on_change_asks_politely_and_ends_when_every_run_is_complete(tmp_path, fake, monkeypatch,
                                                                                 capsys):
    """Three runs whose jobs run; one completes at 100 s, the others at 300 s (their jobs still listed as
    running: a COMPLETE run holds the wait no more). Looks every 2 s of a fake clock, poll_s 60."""
    folder = tmp_path / "jobs" / "sw"
    runs = []
    for i, name in enumerate(("nano-bp", "nano-zbp_n4", "nano-zbp_n16")):
        write_run(folder, name, str(i + 1), executor="fake", beat=1e12)
        runs.append(planned(folder, name, 50))
    clock = Clock()
    poller = Poller(tmp_path / "jobs", poll_s=60, clock=clock)

    def sleep(_):
        clock.t += 2
        if clock.t == 100:
            (runs[0].run_dir / "COMPLETE").write_text("")
        if clock.t == 300:
            for r in runs[1:]:
                (r.run_dir / "COMPLETE").write_text("")

    monkeypatch.setattr(submit.time, "sleep", sleep)
    sweep = SimpleNamespace(jobs_root=tmp_path / "jobs", poll_s=60)
    assert submit.wait_for(sweep, runs, FakeExecutor(tmp_path / "jobs"), poller=poller)
    out = capsys.readouterr().out.splitlines()
    headers = [line for line in out if line.startswith("[")]
    assert [h.split("] ", 1)[1] for h in headers] == ["3 runs: 3 running", "3 runs: 1 complete, 2 running",
                                                      "3 runs: 3 complete"]
    assert out[-1] == "all 3 runs complete" and clock.t == 300
    # asks at 0, 60, early at 106 (COMPLETE seen at 100, settled at the first look 5 s on), 166, 226, 286; none
    # at 300 (the wait ended: every run complete)
    assert poller.asks == 6


# ------------------------------------------------------------------------------------------------ a folder's poll_s
class FolderOnlyExecutor(Executor):
    """A back end that writes each run's folder, as the real ones do, and queues no job."""

    name = label = "folders"

    def view(self, submitted, *, now):
        return View()

    def submit(self, sweep, todo, *, prep, max_parallel=0):
        for run in todo:
            run.write_folder()
        return []

    def cancel(self, run_dir, job, seen):
        raise NotImplementedError


def test_a_sweep_folder_waits_by_the_poll_s_of_its_sweep_file(tmp_path, monkeypatch):
    """`status jobs/<sweep> --watch` and `cancel jobs/<sweep>` wait by poll_s_of the folder: after a submit, the
    sweep file's own poll_s (it was POLL_S), and after a submit of the file edited, the new one; a dry run keeps
    nothing; a folder from before sweep.json, and a jobs root, wait by POLL_S. The kept file is neither a run of
    the folder nor a sweep of the jobs root."""
    from conftest import write_sweep
    from zbpscale.jobs.poller import poll_s_of
    from zbpscale.jobs.runs import find_runs
    from zbpscale.jobs.settings import POLL_S, SweepSettings
    from zbpscale.jobs.sweep import find_sweeps, load_sweep

    monkeypatch.setitem(executors.KINDS, "folders", FolderOnlyExecutor)
    path = write_sweep(tmp_path, "fast", tmp_path / "data", steps=4, arms=("bp", "zbp_n4"))  # data: never read
    text = path.read_text()
    path.write_text(text.replace("max_timeouts=20,", "max_timeouts=20, poll_s=10,"))
    sweep = load_sweep(path)
    folder, kept = sweep.jobs_dir, SweepSettings.path(sweep.jobs_dir)
    assert sweep.poll_s != POLL_S and poll_s_of(path) == sweep.poll_s

    submit.submit(str(path), dry_run=True, executor="folders")
    assert not folder.exists() and poll_s_of(folder) == POLL_S  # a dry run writes nothing
    submit.submit(str(path), executor="folders")
    assert poll_s_of(folder) == poll_s_of(str(folder)) == poll_s_of(path) == sweep.poll_s
    assert SweepSettings.read(folder) == SweepSettings(name="fast", sweep_file=str(path.absolute()),
                                                       poll_s=sweep.poll_s)
    assert [r.name for _, runs in find_runs(str(folder)) for r in runs] == ["nano-bp", "nano-zbp_n4"]
    assert find_sweeps(str(tmp_path / "jobs")) == [("fast", tmp_path / "jobs" / "fast")]
    assert poll_s_of(tmp_path / "jobs") == POLL_S

    path.write_text(text.replace("max_timeouts=20,", "max_timeouts=20, poll_s=30,"))
    edited, before = load_sweep(path), kept.read_bytes()
    submit.submit(str(path), dry_run=True, executor="folders")
    assert kept.read_bytes() == before and poll_s_of(folder) == sweep.poll_s  # still what the last submit kept
    submit.submit(str(path), executor="folders")
    assert poll_s_of(folder) == poll_s_of(path) == edited.poll_s != sweep.poll_s

    kept.unlink()  # a folder made by a release before sweep.json
    assert poll_s_of(folder) == POLL_S


# ------------------------------------------------------------------------------------------------ the counter
def test_the_counter_reports_a_steady_poll_as_one_call_a_minute(tmp_path):
    """A log as the shims write it: a burst in the first minute, then squeue every 60 s, and a job's own calls."""
    counter = load_tool("count_slurm_calls")
    log = tmp_path / "calls.tsv"
    rows = ["# start 1000.0", "1000.5\t\tsinfo\t-h", *(f"{1001 + i / 10}\t\tsbatch\tjob.sh" for i in range(12)),
            "1002.0\t\tsqueue\t-h", "1012.0\t\tsqueue\t-h", *(f"{1072 + 60 * i}.0\t\tsqueue\t-h" for i in range(4)),
            "1100.0\t35\tscontrol\trequeue\t35", "# end 1270.0"]
    log.write_text("\n".join(rows) + "\n")
    calls, marks = counter.read_log(log)
    assert marks == {"start": 1000.0, "end": 1270.0} and len(calls) == 20
    assert calls[-1] == counter.Call(1100.0, "35", "scontrol", ("requeue", "35"))
    window = {"start": 1000.0, "end": 1270.0, "skip_s": 60}
    assert counter.most_in_a_minute(calls, **window)["squeue"] == 1  # 1072, 1132, 1192, 1252
    assert counter.mean_gap(calls, **window)["squeue"] == 60.0
    assert counter.per_minute(calls, **window)["squeue"] == pytest.approx(4 / 3.5)  # the window's edges count
    assert counter.per_minute(calls, **window)["scontrol"] == 0  # a job's own call is counted apart
    table = counter.report(log, skip_s=60).splitlines()
    assert table[2].split() == ["squeue", "6", "2", "1.14", "1", "60.0", "0"]
    assert table[6].split() == ["scontrol", "0", "0", "0.00", "0", "-", "1"]


# ------------------------------------------------------------------------------------------------ real SLURM
@pytest.mark.slurm
def test_real_slurm_status_and_cancel_counted_by_the_shims(tmp_path, slurm_cluster):
    """Eight real jobs (six held, two that ran `true`) behind eight run folders: one status is one squeue and
    one sacct, which never names the job whose end is recorded; one cancel of the six held jobs is one scancel."""
    counter = load_tool("count_slurm_calls")
    _, env = slurm_cluster
    log = tmp_path / "calls.tsv"
    shims = counter.make_shims(tmp_path / "shims", log)
    env = {**env, "PATH": f"{shims}{os.pathsep}{env['PATH']}"}
    folder, ids = tmp_path / "jobs" / "real", {}
    try:
        for i in range(8):
            name = f"s{i}-bp"
            out = subprocess.run(["sbatch", "--parsable", "-J", f"real/{name}", "-o", "/dev/null",
                                  *(["--hold", "--wrap", "sleep 600"] if i < 6 else ["--wrap", "true"])],
                                 env=env, capture_output=True, text=True, timeout=60, check=True)
            ids[name] = out.stdout.strip().split(";")[0]
            write_run(folder, name, ids[name], submitted_at=time.time() - 5, started=i >= 6,
                      ends=("completed",) if i == 7 else ())
        (folder / "s7-bp" / "COMPLETE").write_text("")
        wait_until(lambda: subprocess.run(["squeue", "-h", "-t", "all", "-j", ids["s6-bp"], "-o", "%T"], env=env,
                                          capture_output=True, text=True).stdout.strip() == "COMPLETED",
                   "the job running `true` to complete", 120, every=1)
        log.write_text("")
        out = subprocess.run([sys.executable, "-m", "zbpscale.cli", "status", str(folder), "--json"], env=env,
                             capture_output=True, text=True, timeout=120)
        assert out.returncode in (1, 3), out.stdout + out.stderr
        made, _ = counter.read_log(log)
        assert [c.name for c in made if c.name == "squeue"] == ["squeue"]
        asked = [c for c in made if c.name == "sacct"]
        assert len(asked) <= 1 and all(ids["s7-bp"] not in c.args[c.args.index("-j") + 1].split(",") for c in asked)
        log.write_text("")
        out = subprocess.run([sys.executable, "-m", "zbpscale.cli", "cancel", str(folder)], env=env,
                             capture_output=True, text=True, timeout=300)
        assert out.returncode == 0 and "stopped:" in out.stdout, out.stdout + out.stderr
        made, _ = counter.read_log(log)
        (scancel,) = [c for c in made if c.name == "scancel"]
        assert sorted(scancel.args) == sorted(ids[f"s{i}-bp"] for i in range(6))
        assert sum(c.name == "squeue" for c in made) <= 2 and sum(c.name == "sacct" for c in made) <= 2
    finally:
        subprocess.run(["scancel", *ids.values()], env=env, capture_output=True, timeout=60)
