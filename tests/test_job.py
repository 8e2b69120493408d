"""The job side's pure pieces against hand-computed values: SLURM durations, timeout vs preemption, bounds;
and a stop signal that comes before the job's handler exists, with and without the blocking launcher."""

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from zbpscale.jobs.attempts import count_ends, read_attempts, record
from zbpscale.jobs.executors.slurm_commands import parse_duration
from zbpscale.jobs.executors.slurm_job import classify_interruption
from zbpscale.signals import BLOCKED_PYTHON

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
    assert count_ends(attempts, "timeout") == 2 and count_ends(attempts, "preempted") == 1


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
