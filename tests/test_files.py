"""Shared file I/O (src/zbpscale/files.py): appends after a writer killed mid-line; JSONL read whole; wrapped notes.

Compared: the records read back after a real child process wrote a record, then half of the next one, and was
killed with SIGKILL, then a new writer appended: every whole record that was written, in order, and nothing of
the fragment (#33 item 4: the next append used to be glued onto the fragment and lost with it).
"""

import subprocess
import sys
import textwrap

import pytest

from zbpscale.run.history import read_attempts, record
from zbpscale.run.records import read_records
from zbpscale.train.metrics import MetricsLog

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


GARBLED = {
    "whole": '{"a": 1}\n{"b": 2}\n',
    "torn last line": '{"a": 1}\n{"b": 2}\n{"c": ',
    "torn line then more": '{"a": 1}\n{"b": \n{"c": 3}\n',
    "blank line": '{"a": 1}\n\n{"c": 3}\n',
    "not objects": '[1, 2]\n{"a": 1}\n7\n',
    "two values on a line": '{"a": 1}, {"b": 2}\n{"c": 3}\n',
    "an array split over lines": '[{"a": 1}\n{"b": 2}]\n',
    "empty": "",
}


@pytest.mark.parametrize("text", GARBLED.values(), ids=GARBLED.keys())
def test_read_jsonl_gives_each_line_that_is_json_in_order(tmp_path, text):
    """read_jsonl and records_of decode a whole file at once (status reads 10,000 attempts files and the metrics
    written after each heartbeat): what they give is, whatever the file holds, each line decoded alone where that
    line is JSON, in order."""
    import json

    from zbpscale.files import read_jsonl

    path = tmp_path / "attempts.jsonl"
    path.write_text(text)
    alone = []
    for line in text.splitlines():
        try:
            alone.append(json.loads(line))
        except json.JSONDecodeError:
            pass
    assert read_jsonl(path) == alone
    assert read_jsonl(tmp_path / "none.jsonl") == []
    from zbpscale.run.records import records_of  # metrics.jsonl's reader, likewise (its objects only)

    assert records_of(text.encode()) == [r for r in alone if isinstance(r, dict)]


@pytest.mark.parametrize("text", ["a b", "a  b", "  lead", "x" * 78, "x" * 79, "tail ", "", "a\tb", "ünï cödé",
                                  "one\ntwo", "word " * 30, "/a/path/" + "p" * 90 + " then"])
@pytest.mark.parametrize("prefix", ["", "note: "])
def test_wrap_is_textwrap_s_fill_of_each_line(text, prefix):
    """tables.wrap returns a line that fits as it is (20,000 notes under a large sweep's status): what textwrap
    gives for it, as for every other line."""
    from zbpscale.tables import wrap

    indent = " " * (len(prefix) or 2)
    fill = "\n".join(textwrap.fill(line, 80, initial_indent=prefix if i == 0 else indent, subsequent_indent=indent,
                                   break_long_words=False, break_on_hyphens=False)
                     for i, line in enumerate(text.splitlines() or [""]))
    assert wrap(text, prefix, width=80) == fill
