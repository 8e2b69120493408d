"""The job side's pure pieces against hand-computed values: SLURM durations, timeout vs preemption, bounds, when
SLURM's word frees another job's lease; and a stop signal that comes before the job's handler exists, with and
without the blocking launcher."""

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from zbpscale import lease
from zbpscale.jobs.executors import slurm_job
from zbpscale.jobs.executors.slurm_commands import parse_duration
from zbpscale.jobs.executors.slurm_job import classify_interruption
from zbpscale.lease import Holder
from zbpscale.run.history import History, read_attempts, record
from zbpscale.signals import BLOCKED_PYTHON, BLOCKED_TASK_PYTHON

# A job's start-up: it says it runs, and waits for a line while the test signals it; only then does it install
# the stop flag (as TrainJob and the local rank do after importing) and print what the flag holds.
EARLY_SIGNAL_CHILD = """
import sys
print("started", flush=True)
sys.stdin.readline()
from zbpscale import signals
signals.install()
print(signals.received(), flush=True)
"""


@pytest.mark.parametrize("text, seconds", [
    ("0:45", 45),              # MM:SS
    ("12:05", 725),
    ("1:00:00", 3600),         # HH:MM:SS
    ("1-02:03:04", 93784),     # D-HH:MM:SS
    ("UNLIMITED", None),
    ("INVALID", None),
    ("", None),
])
def test_slurm_durations(text, seconds):
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("left, expected", [
    (20, "timeout"),           # the time-limit warning: little time left
    (180 + 120, "timeout"),    # signal delay + margin, inclusive
    (180 + 121, "preempted"),  # plenty of time left: someone else's signal
    (None, "preempted"),       # squeue could not tell: never count it against max_timeouts
])
def test_timeout_or_preemption(left, expected):
    assert classify_interruption(left, signal_delay_s=180) == expected


def test_attempts_record_round_trip_and_counts(tmp_path):
    record(tmp_path, "submitted", job_id="7")
    for why in ("timeout", "preempted", "timeout"):
        record(tmp_path, "start", job_id="7")
        record(tmp_path, "end", job_id="7", why=why)
    with open(tmp_path / "attempts.jsonl", "a") as fh:
        fh.write('{"event": "start", "job_')  # a torn line from a killed writer
    attempts = read_attempts(tmp_path)
    assert len(attempts) == 7
    history = History.read(tmp_path)
    assert history.events == tuple(attempts)
    assert history.count_ends("timeout") == 2 and history.count_ends("preempted") == 1


@pytest.mark.parametrize("launcher, survives", [(BLOCKED_PYTHON, True), ([sys.executable], False)])
def test_a_stop_signal_during_start_up_waits_for_the_handler(launcher, survives):
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1] / "src")}
    child = subprocess.Popen([*launcher, "-c", EARLY_SIGNAL_CHILD], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             text=True, env=env)
    assert child.stdout.readline().strip() == "started"
    os.kill(child.pid, signal.SIGUSR2)
    out, _ = child.communicate("go\n", timeout=60)
    if survives:  # held back across exec, then delivered to the flag by install()
        assert child.returncode == 0 and out.split() == [str(int(signal.SIGUSR2))]
    else:  # the control: a plain interpreter dies of it, as a job did in CI
        assert child.returncode == -signal.SIGUSR2


@pytest.mark.parametrize("job, restarts, squeue, sacct, gone", [
    ("50", 0, None, None, True),           # an earlier run of this job (now its restart 1): SLURM ended it
    ("50", 1, None, None, False),          # this very run of it (another process of it): not gone
    ("61", 0, "RUNNING", None, False),     # another job the controller runs
    ("61", 0, "COMPLETING", None, False),  # its processes may still run
    ("61", 0, "FAILED", None, True),       # the controller says it ended
    ("61", 0, None, ["COMPLETED"], True),  # past the controller's memory: accounting says it ended
    ("61", 0, None, ["COMPLETED", "RUNNING"], False),  # a reused id, one of them alive
    ("61", 0, None, [], False),            # no one knows it: unknown is not gone
    ("local-3", 0, None, None, False),     # another executor's job
    ("", 0, None, None, False),            # no job at all
])
def test_when_slurm_says_a_leases_holder_is_gone(monkeypatch, job, restarts, squeue, sacct, gone):
    monkeypatch.setenv("SLURM_JOB_ID", "50")
    monkeypatch.setenv("SLURM_RESTART_COUNT", "1")
    monkeypatch.setattr(slurm_job.slurm, "controller_state", lambda job_id: squeue)
    monkeypatch.setattr(slurm_job.slurm, "sacct_rows",
                        lambda ids: {job: [{"state": s} for s in sacct]} if sacct is not None else None)
    holder = Holder(host="node-b", pid=7, start=1, machine="elsewhere", job=job, restarts=restarts)
    assert slurm_job.holder_gone(holder) is gone


@pytest.mark.parametrize("job, restarts, squeue, gone", [
    ("50_3", 0, None, True),        # an earlier run of this very element (requeued alone, now its restart 1)
    ("50_3", 1, None, False),       # this run of it
    ("50_4", 0, "RUNNING", False),  # a sibling element, which the controller runs
    ("50_4", 0, "FAILED", True),    # a sibling element the controller says ended
    ("57", 0, "RUNNING", False),    # this element under its own number (SLURM_JOB_ID): not how a lease names it
])
def test_a_job_array_element_names_itself_as_submit_recorded_it(monkeypatch, job, restarts, squeue, gone):
    """In an array's element SLURM_JOB_ID is a number of its own; the lease, and the rule that an earlier run of
    this job is gone, use the element's id `array_task` (the id submit recorded, requeue and squeue take)."""
    monkeypatch.setenv("SLURM_JOB_ID", "57")
    monkeypatch.setenv("SLURM_ARRAY_JOB_ID", "50")
    monkeypatch.setenv("SLURM_ARRAY_TASK_ID", "3")
    monkeypatch.setenv("SLURM_RESTART_COUNT", "1")
    assert lease.me().job == "50_3"
    monkeypatch.setattr(slurm_job.slurm, "controller_state", lambda job_id: squeue)
    monkeypatch.setattr(slurm_job.slurm, "sacct_rows", lambda ids: None)
    holder = Holder(host="node-b", pid=7, start=1, machine="elsewhere", job=job, restarts=restarts)
    assert slurm_job.holder_gone(holder) is gone


KILLED_ON_NODE2 = """zbpscale: a job step starts at 1700000000
srun: error: node2: task 1: Killed
srun: launch/slurm: _step_signal: Terminating StepId=100002.0
slurmstepd-node1: error: *** STEP 100002.0 ON node1 CANCELLED AT 2026-12-05T02:37:03 ***
srun: error: node1: task 0: Terminated
srun: Force Terminated StepId=100002.0
"""
"""The batch log of a 2-node step whose rank 1 was killed (kill -9) on node2: srun's lines, as SLURM 22.05 wrote
them, then srun killing the rest of the step."""


@pytest.mark.parametrize("batch_log, rank1_log, words", [
    (KILLED_ON_NODE2, "", "rank 1 on node2 was killed by signal 9 (SIGKILL)"),
    # the survivor's own error comes first in the log, srun's word on the rank that died after it
    ("zbpscale: a job step starts at 1700000000\nTraceback (most recent call last):\n  File ...\nRuntimeError: "
     "[gloo/transport/tcp/pair.cc:537] Read error: Connection reset by peer\nsrun: error: node2: task 1: Exited "
     "with exit code 1\nsrun: error: node1: task 0: Exited with exit code 1\n",
     "Traceback (most recent call last):\n  File \"x.py\", line 1\nValueError: boom\n",
     "rank 1 on node2 ended with exit code 1 (ValueError: boom)"),
    ("srun: error: node2: tasks 2-3: Segmentation fault (core dumped)\n", "", ""),  # no mark: an older job's script
    (KILLED_ON_NODE2.replace("1700000000", "1699999000") + "zbpscale: a job step starts at 1700000000\n"
     "srun: error: node1: tasks 0-1: Segmentation fault (core dumped)\n", "",
     "ranks 0-1 on node1 were killed by signal 11 (SIGSEGV)"),  # only this step's lines, after its own mark
    ("zbpscale: a job step starts at 1700000000\n", "", ""),  # srun named no task
    # a node lost with its rank: srun hears nothing of that rank, the survivor ends first, then SLURM calls the node
    # failed (SlurmdTimeout later): the node failure is the cause
    ("zbpscale: a job step starts at 1700000000\nsrun: error: node1: task 0: Exited with exit code 1\nsrun: error: "
     "Node failure on node2\nsrun: Job step aborted: Waiting up to 7 seconds for job step to finish.\n", "",
     "node2 failed (srun: Node failure on node2; SLURM ends the job NODE_FAIL and requeues it)"),
])
def test_the_rank_that_ended_first_from_srun_s_lines_after_the_step_s_mark(tmp_path, batch_log, rank1_log, words):
    """#59 item 5: a rank lost on another node is named by srun's first line on a task of this step (its rank,
    node and signal), not by the survivor's error; an exit status carries the rank's own last error line."""
    from submitit.core.utils import JobPaths

    JobPaths(tmp_path, job_id="50_3", task_id=0).stdout.write_text(batch_log)  # stderr goes there in our jobs
    JobPaths(tmp_path, job_id="50_3", task_id=1).stdout.write_text(rank1_log)
    assert slurm_job.first_to_end(str(tmp_path), "50_3", "1700000000") == words


FAKE_SLURM_TASK = {"SUBMITIT_EXECUTOR": "slurm", "SLURM_JOB_ID": "4242", "SLURM_PROCID": "0", "SLURM_NTASKS": "1",
                   "SLURM_LOCALID": "0", "SLURM_NODEID": "0", "SLURM_JOB_NUM_NODES": "1",
                   "SLURM_JOB_NODELIST": "localhost"}
"""What a SLURM task's environment says to submitit (one task on one node): the job runs without a scheduler."""


def test_an_attempt_that_died_without_a_word_gets_its_end_from_the_job_s_next_start(tmp_path, data_dir):
    """#33 item 5: SLURM starts a job again under the same id after a node failure (it requeues NODE_FAIL itself):
    the lost attempt wrote no end record, so status's T/P/F did not count it. The job's next start writes it
    (crashed, source restart), then trains the run to the end."""
    from conftest import config_json, trainer_env
    from zbpscale.run.history import History

    run = tmp_path / "run"
    run.mkdir()
    (run / "config.json").write_text(config_json(data_dir=str(data_dir), steps=2, global_batch=4, eval_every=0,
                                                 eval_batches=1, device="cpu"))
    record(run, "submitted", job_id="4242", executor="slurm")
    record(run, "start", job_id="4242", executor="slurm", host="node9", nodes="node9")  # then node9 was lost
    code = f"from zbpscale.entry import TrainJob; print(TrainJob({str(run)!r}, max_timeouts=1, max_preemptions=1, " \
           "signal_delay_s=30)())"
    env = {k: v for k, v in trainer_env(1, **FAKE_SLURM_TASK).items() if k not in ("RANK", "WORLD_SIZE")}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 and out.stdout.splitlines()[-1] == "completed", out.stdout[-2000:] + out.stderr[-2000:]
    events = read_attempts(run)
    assert [(a["event"], a.get("why"), a.get("source")) for a in events] == [
        ("submitted", None, None), ("start", None, None), ("end", "crashed", "restart"), ("start", None, None),
        ("end", "completed", None)]
    assert "SLURM started the job again" in events[2]["reason"] and "node9" in events[2]["reason"]
    assert History(tuple(events)).requeue_counts() == (0, 0, 1)


TASKS = '''
import atexit, pathlib, sys

def mark_at_exit(folder):
    atexit.register(lambda: (pathlib.Path(folder) / "teardown-ran").write_text("yes"))

def done(folder):
    mark_at_exit(folder)
    return "completed"

def usage(folder):
    mark_at_exit(folder)
    raise SystemExit(2)

def broken(folder):
    mark_at_exit(folder)
    raise ValueError("boom")
'''


@pytest.mark.parametrize("function, code, result", [("done", 0, "success"), ("usage", 2, None),
                                                    ("broken", 1, "error")])
def test_a_slurm_task_ends_with_submitit_s_status_and_without_the_interpreter_s_teardown(tmp_path, function, code,
                                                                                        result):
    """A SLURM job's task (`python -m zbpscale.entry slurm-task FOLDER`, what the job's srun line runs) unpickles
    and calls the job as submitit does, pickles its result or error, and exits with submitit's status without the
    interpreter's teardown (tearing torch's gloo threads down aborted rank 1 of a 2-node job after its last step:
    SIGABRT, the job FAILED): an atexit hook of the job never runs; an exit status (the trainer's SystemExit)
    and an error pass through."""
    import pickle

    from submitit.core.utils import DelayedSubmission, JobPaths

    (tmp_path / "tasks.py").write_text(TASKS)
    sys.path.insert(0, str(tmp_path))
    try:
        import tasks
        DelayedSubmission(getattr(tasks, function), str(tmp_path)).dump(
            JobPaths(tmp_path, job_id="4242").submitted_pickle)
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("tasks", None)
    env = {**os.environ, **FAKE_SLURM_TASK, "PYTHONPATH": str(tmp_path)}
    out = subprocess.run([*BLOCKED_TASK_PYTHON, "-u", "-m", "submitit.core._submit", str(tmp_path)], env=env,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == code, out.stdout + out.stderr
    assert not (tmp_path / "teardown-ran").exists()  # skipped: os._exit after submitit's last word
    pickled = JobPaths(tmp_path, job_id="4242", task_id=0).result_pickle
    if result is None:  # SystemExit is no Exception: submitit pickles nothing, the status says it
        assert not pickled.exists()
    else:
        assert pickle.loads(pickled.read_bytes())[0] == result
    assert ("ValueError: boom" in out.stderr) == (function == "broken")
