"""Shared file I/O (src/zbpscale/files.py): appends after a writer killed mid-line.

Compared: the records read back after a real child process wrote a record, then half of the next one, and was
killed with SIGKILL, then a new writer appended: every whole record that was written, in order, and nothing of
the fragment (#33 item 4: the next append used to be glued onto the fragment and lost with it).
"""

import subprocess
import sys
import textwrap

import pytest

from zbpscale.run.history import read_attempts, record
from zbpscale.train.metrics import MetricsLog, read_records

KILLED_MID_LINE = textwrap.dedent("""\
    import os, signal, sys
    from zbpscale.run.history import record
    from zbpscale.train.metrics import MetricsLog
    run, which = sys.argv[1], sys.argv[2]
    if which == "attempts":
        record(run, "start", job_id="7", executor="local")
        path = os.path.join(run, "attempts.jsonl")
    else:
        log = MetricsLog(run)
        log.write("train", step=3, loss=5.0)
        log.close()
        path = os.path.join(run, "metrics.jsonl")
    with open(path, "a") as fh:  # what a writer killed inside write() leaves: half a line, no newline
        fh.write('{"kind": "train", "step": 4, "lo')
        fh.flush()
    os.kill(os.getpid(), signal.SIGKILL)
    """)


def killed_mid_line(run, which: str) -> None:
    child = subprocess.run([sys.executable, "-c", KILLED_MID_LINE, str(run), which], capture_output=True, text=True,
                           timeout=120)
    assert child.returncode == -9, child.stderr


@pytest.mark.parametrize("writes_twice", [False, True])
def test_an_attempts_event_after_a_torn_line_is_read_whole(tmp_path, writes_twice):
    killed_mid_line(tmp_path, "attempts")
    record(tmp_path, "end", job_id="7", executor="local", why="completed")
    if writes_twice:
        record(tmp_path, "submitted", job_id="8", executor="local")
    events = [(a["event"], a["job_id"]) for a in read_attempts(tmp_path)]
    assert events == [("start", "7"), ("end", "7")] + ([("submitted", "8")] if writes_twice else [])


def test_a_metrics_record_after_a_torn_line_is_read_whole(tmp_path):
    killed_mid_line(tmp_path, "metrics")
    log = MetricsLog(tmp_path)
    log.write("train", step=4, loss=4.5)
    log.write("train", step=5, loss=4.25)
    log.close()
    assert [(r["step"], r["loss"]) for r in read_records(tmp_path)] == [(3, 5.0), (4, 4.5), (5, 4.25)]
    assert (tmp_path / "metrics.jsonl").read_text().endswith('"loss": 4.25}\n')
