"""The executors' one view of every job, and the run state decided from it.

Compared: the SLURM view against stand-in `squeue` and `sacct` first on PATH, each answering from a file the
test writes in the real clients' formats (`squeue -o %i|%T|%r|%V|%j`, `sacct -P -o JobID,State,ExitCode,
DerivedExitCode,Submit,JobName`), or failing: a job squeue lists is live whatever accounting says (nothing, an
error, a stale record under a reused id); a job nobody lists yet is queued within its grace window and gone
after it; squeue not answering leaves every run alone. A third back end is one class (`FakeExecutor`). Real
trainer processes: a second trainer on a live run folder refuses to start; a direct run killed with -9 is
failed at once. A config the trainer would refuse is broken, by the trainer's own validation. Two submits on
one sweep queue each run once (the local queue, for real), and a submit after an upgrade keeps anew the looks of
the runs it leaves (the looks the runs' ends kept name another release's code).
"""

import json
import os
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import config_json, wait_until, write_sweep
from zbpscale.jobs import executors
from zbpscale.jobs.executors import Executor, JobView, View
from zbpscale.jobs.status import collect_rows
from zbpscale.jobs.submit import run_action
from zbpscale.run import looks
from zbpscale.run.history import History, read_attempts
from zbpscale.run.snapshot import Snapshot

ISO = "%Y-%m-%dT%H:%M:%S"


def iso(t: float) -> str:
    return time.strftime(ISO, time.localtime(t))


@pytest.fixture
def clients(tmp_path, monkeypatch):
    """Stand-in squeue and sacct: `answer(squeue=rows or None, sacct=rows or None)`; None makes the client fail
    as a dead daemon does (exit 1, an error on stderr)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name in ("squeue", "sacct"):
        script = bin_dir / name
        script.write_text(f"#!/bin/sh\nif [ -e {bin_dir}/{name}.down ]; then echo 'slurm_load_jobs error: Unable to "
                          f"contact slurm controller' >&2; exit 1; fi\ncat {bin_dir}/{name}.txt\n")
        script.chmod(script.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")

    def answer(*, squeue: list[str] | None, sacct: list[str] | None):
        for name, rows in (("squeue", squeue), ("sacct", sacct)):
            (bin_dir / f"{name}.down").unlink(missing_ok=True)
            if rows is None:
                (bin_dir / f"{name}.down").write_text("")
            (bin_dir / f"{name}.txt").write_text("".join(r + "\n" for r in rows or []))
    return answer


def submitted_run(folder: Path, name: str = "nano-bp", *, job: str = "7", age_s: float = 30.0,
                  executor: str = "slurm", extra: dict | None = None, started: bool = False) -> Path:
    run = folder / name
    run.mkdir(parents=True)
    (run / "config.json").write_text(config_json(steps=50, global_batch=4))
    now = time.time()
    events = [{"event": "submitted", "time": now - age_s, "job_id": job, "executor": executor,
               "logs": str(run / "logs"), "name": f"{folder.name}/{name}", **(extra or {})}]
    if started:
        events.append({"event": "start", "time": now - age_s / 2, "job_id": job, "executor": executor})
    (run / "attempts.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    return run


def state_of(folder: Path, name: str = "nano-bp") -> dict:
    (row,) = [r for r in collect_rows(folder) if r["run"] == name]
    return row


def action(run: Path) -> str:
    from types import SimpleNamespace

    view = executors.view_all(run.parent.parent, {run: History.read(run)})
    return run_action(SimpleNamespace(run_dir=run), view)


def test_a_job_squeue_lists_is_live_whatever_accounting_says(tmp_path, clients):
    sweep = tmp_path / "jobs" / "sw"
    run = submitted_run(sweep, started=True)
    live = [f"7|RUNNING|None|{iso(time.time() - 30)}|sw/nano-bp"]
    stale = [f"7|COMPLETED|0:0|0:0|{iso(time.time() - 86400)}|sw/nano-bp"]  # an older job under the same id
    for sacct in (None, [], stale):  # accounting down, lagging (not listed yet), a reused id's old record
        clients(squeue=live, sacct=sacct)
        row = state_of(sweep)
        assert (row["state"], row["next"]) == ("running", "leave"), sacct
        assert action(run) == "leave"
        assert row["scheduler_notes"] == []  # accounting is not asked about a job squeue calls live
    assert not [a for a in read_attempts(run) if a["event"] == "end"]  # nothing was reconciled into an end


def test_a_job_nobody_lists_yet_is_queued_within_its_grace_window_then_gone(tmp_path, clients):
    sweep = tmp_path / "jobs" / "sw"
    fresh = submitted_run(sweep, "nano-bp", job="7", age_s=5)
    old = submitted_run(sweep, "nano-zbp_n4", job="8", age_s=1000)
    clients(squeue=[], sacct=[])
    row = state_of(sweep, "nano-bp")
    assert (row["state"], row["reason"]) == ("queued", "submitted, not yet visible to the scheduler")
    assert action(fresh) == "leave"
    row = state_of(sweep, "nano-zbp_n4")
    assert (row["state"], row["next"]) == ("failed", "resume") and "without a record" in row["reason"]
    assert action(old) == "new"
    clients(squeue=[], sacct=None)  # accounting down: the fresh job is still only not visible yet
    row = state_of(sweep, "nano-bp")
    assert row["state"] == "queued" and row["scheduler_notes"] == ["accounting not answering: states from squeue only"]


def test_an_ended_job_is_judged_by_its_own_accounting_record_not_a_reused_ids(tmp_path, clients):
    sweep = tmp_path / "jobs" / "sw"
    run = submitted_run(sweep, age_s=600, started=True)
    now = time.time()
    clients(squeue=[], sacct=[f"7|COMPLETED|0:0|0:0|{iso(now - 86400)}|sw/nano-bp",
                              f"7|OUT_OF_MEMORY|0:9|0:0|{iso(now - 590)}|sw/nano-bp"])
    row = state_of(sweep)
    assert row["state"] == "failed"
    assert row["reason"] == "out of memory (the OOM killer), a task was killed by signal 9 (SIGKILL)"
    assert row["failures"] == 1  # the end accounting gives it, shown; submit records it, status writes nothing
    assert not [a for a in read_attempts(run) if a["event"] == "end"]
    other = submitted_run(tmp_path / "jobs" / "sw", "nano-zbp_n4", job="9", age_s=10)
    clients(squeue=[], sacct=[f"9|COMPLETED|0:0|0:0|{iso(now - 86400)}|sw/nano-zbp_n4"])  # only the old job
    assert state_of(sweep, "nano-zbp_n4")["state"] == "queued" and action(other) == "leave"


def test_squeue_not_answering_leaves_every_run_alone(tmp_path, clients):
    sweep = tmp_path / "jobs" / "sw"
    run = submitted_run(sweep, age_s=3000, started=True)
    clients(squeue=None, sacct=None)
    row = state_of(sweep)
    assert (row["state"], row["next"]) == ("unknown", "leave") and action(run) == "leave"
    assert "squeue not answering: runs with a job are left alone until it does" in row["scheduler_notes"]
    assert not [a for a in read_attempts(run) if a["event"] == "end"]


def test_a_job_whose_prep_failed_is_failed_with_the_prep_log_and_replaced_by_submit(tmp_path, clients):
    sweep = tmp_path / "jobs" / "sw"
    prep_log = tmp_path / "jobs" / "sw" / "prep-data-logs" / "6_0_log.out"
    run = submitted_run(sweep, extra={"prep_job": "6", "prep_log": str(prep_log)})
    clients(squeue=[f"7|PENDING|DependencyNeverSatisfied|{iso(time.time() - 30)}|sw/nano-bp"], sacct=[])
    row = state_of(sweep)
    assert row["state"] == "failed" and "data-prep job failed" in row["reason"] and row["log"] == str(prep_log)
    assert action(run) == "new"  # submit cancels the stuck job and queues a new one (real SLURM: test_slurm_faults)


def test_a_third_back_end_is_one_class(tmp_path, monkeypatch):
    class FakeExecutor(Executor):
        """Every job it is asked about runs."""

        name = label = "fake"

        def view(self, submitted, *, now):
            return View({s["job_id"]: JobView("RUNNING", source="fake") for s in submitted})

        def submit(self, sweep, todo, *, prep, max_parallel=0):
            raise NotImplementedError

        def cancel(self, run_dir, job, seen):
            raise NotImplementedError

    monkeypatch.setitem(executors.KINDS, "fake", FakeExecutor)
    sweep = tmp_path / "jobs" / "sw"
    run = submitted_run(sweep, job="f-1", executor="fake", started=True)
    assert isinstance(executors.choose("fake", tmp_path / "jobs"), FakeExecutor)
    assert state_of(sweep)["state"] == "running" and action(run) == "leave"


def test_a_config_the_trainer_would_refuse_is_broken(tmp_path, clients):
    sweep = tmp_path / "jobs" / "sw"
    run = submitted_run(sweep, age_s=3000)
    config = json.loads((run / "config.json").read_text())
    (run / "config.json").write_text(json.dumps({**config, "global_batch": -4}))
    clients(squeue=[], sacct=[])
    row = state_of(sweep)
    assert row["state"] == "broken" and "global_batch" in row["reason"] and action(run) == "leave"


def trainer(run_dir: Path, data_dir: Path, *extra: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "zbpscale.train", "--run-dir", str(run_dir), "--size", "nano",
                             "--data", str(data_dir), "--steps", "100000", "--set", "eval_every=0", *extra],
                            env={**os.environ, "OMP_NUM_THREADS": "1"}, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def test_one_trainer_per_run_folder_and_a_killed_direct_run_is_failed_at_once(tmp_path, data_dir):
    run = tmp_path / "jobs" / "direct" / "nano-bp"
    first = trainer(run, data_dir)
    try:
        wait_until(lambda: (run / "heartbeat.json").exists(), "the first trainer's heartbeat", 120, proc=first)
        assert state_of(run.parent)["state"] == "running"
        second = subprocess.run([sys.executable, "-m", "zbpscale.train", "--run-dir", str(run)], capture_output=True,
                                text=True, timeout=120, env={**os.environ, "OMP_NUM_THREADS": "1"})
        assert second.returncode == 2 and "Traceback" not in second.stderr, second.stderr
        (line,) = second.stderr.strip().splitlines()
        assert f"is being trained by another trainer (pid {first.pid} on {os.uname().nodename})" in line
        assert first.poll() is None  # the first goes on
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait()
    row = state_of(run.parent)
    assert (row["state"], row["next"]) == ("failed", "resume"), row
    assert row["reason"].startswith(f"the trainer (pid {first.pid}) is gone without an end record")


def test_two_submits_of_one_sweep_queue_each_run_once(tmp_path, data_dir):
    sweep = write_sweep(tmp_path, "twice", data_dir, steps=3, arms=("bp", "zbp_n4"))
    command = [sys.executable, "-m", "zbpscale.submit", str(sweep), "--executor", "local"]
    both = [subprocess.Popen(command, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            for _ in range(2)]
    outs = [p.communicate(timeout=120)[0] for p in both]
    assert all(p.returncode == 0 for p in both), outs
    runs = [tmp_path / "jobs" / "twice" / n for n in ("nano-bp", "nano-zbp_n4")]
    assert [sum(a["event"] == "submitted" for a in read_attempts(r)) for r in runs] == [1, 1], outs
    entries = list((tmp_path / "jobs" / ".localq" / "entries").glob("*.json"))
    assert len(entries) == 2 and not any("started it again" in o for o in outs), outs
    again = subprocess.run(command + ["--wait"], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0 and "all 2 runs complete" in again.stdout, again.stdout + again.stderr
    assert [sum(a["event"] == "submitted" for a in read_attempts(r)) for r in runs] == [1, 1]
    for run in runs:  # an upgrade: the looks their ends kept name another release's code, and are not read
        kept = json.loads(looks.read(run.parent).get(run.name))
        looks.append(run, json.dumps({**kept, "code": "0" * 16}).encode())
    assert not any(Snapshot(r, kept=True).from_digest for r in runs)
    left = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert left.returncode == 0 and all(Snapshot(r, kept=True).from_digest for r in runs), left.stdout + left.stderr


def test_the_plan_says_a_queued_run_is_left_alone_queued(tmp_path, clients, data_dir):
    """The plan's action column called a queued run 'running' while the line under it said queued (#24): it
    says what submit does (leave it alone) and the run's state, in status's words."""
    sweep = write_sweep(tmp_path, "sw", data_dir, steps=10, arms=("bp", "zbp_n4"))
    submitted_run(tmp_path / "jobs" / "sw", "nano-bp", job="9", age_s=10)
    clients(squeue=["9|PENDING|Priority|N/A|sw/nano-bp"], sacct=[])
    out = subprocess.run([sys.executable, "-m", "zbpscale.submit", str(sweep), "--dry-run", "--executor", "local"],
                         capture_output=True, text=True, timeout=120)
    rows = {name: line for line in out.stdout.splitlines() for name in ("nano-bp", "nano-zbp_n4")
            if f" {name} " in line}
    assert "nano-bp" in rows and rows["nano-bp"].rstrip(" │").endswith("leave (queued)"), out.stdout + out.stderr
    assert rows["nano-zbp_n4"].rstrip(" │").endswith("new") and "running" not in out.stdout
