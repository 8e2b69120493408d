"""The job side's pure pieces against hand-computed values: SLURM durations, timeout vs preemption, bounds."""

import pytest

from zbpscale.job import classify_interruption, count_ends, read_attempts, record
from zbpscale.slurm import parse_duration


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
