"""Shared file I/O (src/zbpscale/files.py): appends after a writer killed mid-line; JSONL read whole; JSON decoded
as json decodes it; wrapped notes.

Compared: the records read back after a real child process wrote a record, then half of the next one, and was
killed with SIGKILL, then a new writer appended: every whole record that was written, in order, and nothing of
the fragment (#33 item 4: the next append used to be glued onto the fragment and lost with it).
"""

import subprocess
import sys
import textwrap

import pytest

from conftest import config_json
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


REFUSED_BY_MSGSPEC = [b"NaN", b'{"val_loss": NaN}', b"[Infinity, -Infinity]", b"1e400", b'"\\ud800"',
                      b"\xef\xbb\xbf{}", '{"a": 1}'.encode("utf-16"), b'{"a": "\xff"}', b"", b"{} x", b"[1,]"]
"""Texts json and msgspec read differently: json reads the first seven (a diverged run's records hold NaN), neither
the last four."""


def _json_texts(seed: int, count: int) -> list[bytes]:
    """Random JSON-like texts: numbers of every shape (integers beyond 64 bits, exponents past a float's range),
    strings with escapes (lone surrogates among them), NaN and Infinity, nested; and real run files, a byte changed."""
    import random

    rng = random.Random(seed)

    def number() -> str:
        text = rng.choice(["", "-"]) + rng.choice(["0", str(rng.randint(1, 10 ** rng.randint(1, 30)))])
        text += f".{rng.randint(0, 10 ** rng.randint(1, 25))}" if rng.random() < 0.5 else ""
        return text + (f"{rng.choice('eE')}{rng.choice(['', '+', '-'])}{rng.randint(0, 400)}" if rng.random() < 0.4
                       else "")

    def string() -> str:
        parts = [rng.choice(["\\n", '\\"', "\\u00e9", "\\ud83d\\ude00", "\\u0000", "\\ud800", "abc",
                             chr(rng.randint(0xA0, 0x2FFF))]) for _ in range(rng.randint(0, 5))]
        return '"' + "".join(parts) + '"'

    def value(depth: int = 0) -> str:
        pick = rng.random()
        if depth > 3 or pick < 0.4:
            return rng.choice([number, number, string, lambda: "true", lambda: "null", lambda: "NaN",
                               lambda: "-Infinity"])()
        if pick < 0.7:
            return "[" + ",".join(value(depth + 1) for _ in range(rng.randint(0, 4))) + "]"
        return "{" + ",".join(f"{string()}: {value(depth + 1)}" for _ in range(rng.randint(0, 4))) + "}"

    real = [config_json().encode(), b'{"step": 12, "time": 1796409315.4067228, "glance": {"at": 189836}}']
    texts = []
    for _ in range(count):
        if rng.random() < 0.3:
            text = bytearray(rng.choice(real))
            text[rng.randrange(len(text))] = rng.choice(b'0123456789.eE-+"{}[],: \\u') if rng.random() < 0.5 \
                else rng.randrange(256)
            texts.append(bytes(text))
        else:
            texts.append(value().encode("utf-8", "surrogatepass"))
    return texts


def test_loads_gives_json_s_value_and_json_s_error(tmp_path):
    """files.loads (msgspec, json where msgspec refuses a text) against json.loads itself: the same value (floats
    to the bit, -0.0 and NaN included; integers beyond 64 bits exact; keys in order, the last of a repeated one)
    and the same error type, on edge cases and 20,000 fuzzed texts, as bytes and as str; and the readers built on
    it read NaN back."""
    import json
    import math
    import struct

    from zbpscale.files import loads, read_json

    def same(a, b) -> bool:
        if type(a) is not type(b):
            return False
        if isinstance(a, float):
            return struct.pack("<d", a) == struct.pack("<d", b) or (math.isnan(a) and math.isnan(b))
        if isinstance(a, dict):
            return list(a) == list(b) and all(same(a[k], b[k]) for k in a)
        if isinstance(a, list):
            return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
        return a == b

    def outcome(decode, text):
        try:
            return "value", decode(text)
        except (ValueError, RecursionError) as err:
            return "error", type(err)

    import msgspec

    for text in REFUSED_BY_MSGSPEC:  # the fallback is what reads these
        with pytest.raises(msgspec.MsgspecError):
            msgspec.json.decode(text)
    assert [outcome(json.loads, t)[0] for t in REFUSED_BY_MSGSPEC] == ["value"] * 7 + ["error"] * 4
    texts = REFUSED_BY_MSGSPEC + [b'{"a": 1, "a": 2}', b"-0.0", str(2 ** 70).encode(), b"5e-324", b" [] "]
    texts += _json_texts(seed=0, count=20_000)
    compared = 0
    for text in texts:
        try:  # as str too, lone surrogates and all
            given_str = [text.decode("utf-8", "surrogatepass")]
        except UnicodeDecodeError:
            given_str = []
        for given in (text, *given_str):
            want, got = outcome(json.loads, given), outcome(loads, given)
            assert want[0] == got[0] and (same(want[1], got[1]) if want[0] == "value" else want[1] is got[1]), given
            compared += want[0] == "value"
    assert compared > 8_000  # a fuzz that mostly made errors would compare nothing
    assert loads('["\ud800"]') == json.loads('["\ud800"]')  # a lone surrogate in a str (msgspec: UnicodeEncodeError)
    (tmp_path / "heartbeat.json").write_text(json.dumps({"worst": {"val_loss": float("nan")}, "step": 2 ** 70}))
    beat = read_json(tmp_path / "heartbeat.json")
    assert math.isnan(beat["worst"]["val_loss"]) and beat["step"] == 2 ** 70


def test_without_msgspec_loads_is_json():
    """A checkout pulled onto an environment installed before msgspec was a dependency (a requeued job's): files,
    status and the trainer's modules import, and `loads` is json.loads."""
    script = textwrap.dedent("""\
        import json, sys
        sys.modules["msgspec"] = None  # import msgspec: ImportError
        from zbpscale.files import loads
        import zbpscale.jobs.status, zbpscale.train.metrics
        for text in (b'{"a": 1, "b": [2.5, null]}', b'{"val_loss": NaN}', '"x"'):
            assert repr(loads(text)) == repr(json.loads(text)), text
        try:
            loads(b"{")
        except json.JSONDecodeError:
            print("json")
        """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout == "json\n", out.stderr


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


def test_a_cache_is_written_whole_without_fsync(tmp_path, monkeypatch):
    """atomic_write(durable=False), a run folder's digest: the same whole file under its name, no fsync (one less
    wait at each event of a 10,000-run submit); every other file zbpscale rewrites is fsynced with its folder."""
    from zbpscale import files

    synced = []
    monkeypatch.setattr(files.os, "fsync", lambda fd: synced.append(fd))
    files.atomic_write(tmp_path / "cache.json", b'{"a": 1}', durable=False)
    assert (tmp_path / "cache.json").read_bytes() == b'{"a": 1}' and synced == []
    assert not list(tmp_path.glob(".cache.json.tmp-*"))
    files.atomic_write(tmp_path / "record.json", b'{"a": 2}')
    assert (tmp_path / "record.json").read_bytes() == b'{"a": 2}' and len(synced) == 2  # the file and its folder
