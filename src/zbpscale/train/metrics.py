"""The trainer's writer of its records (run/records.py has their types and readers): metrics.jsonl, appended by
`MetricsLog` on rank 0, and heartbeat.json, rewritten every few seconds with the index run/glance.py reads through.
`SetupTimer` times an attempt's start-up; `redone` says what a resume does again. Torch-free.
"""

from __future__ import annotations

import json
import os
import socket
import time
from pathlib import Path
from typing import Callable

from zbpscale.files import atomic_write, check_fields, open_append
from zbpscale.proc import process_start_time, process_started_at
from zbpscale.run.fold import Fold
from zbpscale.run.folder import RunFolder
from zbpscale.run.glance import CHECK_BYTES, Glance, glance_index, glance_of
from zbpscale.run.records import RECORDS, STEP_KINDS, TRAINER_BEAT_S, Heartbeat, Record, read_records, records_of


class SetupTimer:
    """StartRecord.setup_s: the seconds of each phase of a set-up (SETUP_PHASES), timed as it goes (`done(phase)`
    as each ends); `called`: when train() was called (None: the set-up's own start)."""

    def __init__(self, called: float | None):
        self.last = time.time()
        self.called = called if called is not None else self.last
        self.seconds: dict[str, float] = {}
        launched = process_started_at(os.getpid())
        if launched is not None:
            self.seconds["launch"] = round(max(0.0, self.called - launched), 3)

    def done(self, phase: str) -> None:
        now = time.time()
        self.seconds[phase], self.last = round(now - self.last, 3), now

    def total(self) -> dict[str, float]:
        return {**self.seconds, "total": round(time.time() - self.called, 3)}


def redone(records: list[Record], beat: dict, start: int, ckpt_time: float | None = None) -> dict:
    """What the attempt before a resume at step `start` left and what of it is done again: ResumeRecord's redo_steps,
    redo_s and before, from the run's records before the rollback (`records`), its heartbeat (`beat`, still the
    attempt before's: a heartbeat is written only in the loop) and `ckpt_time`, the mtime of the checkpoint of
    `start` (where the heartbeat does not date its save). {} when no attempt reached its first step.

    The attempt before is the last that wrote a start record (one that died in its set-up logged no step). Its
    lost work runs from the moment it held the state of step `start` (the end of its save of that step, or its
    first step when it began there) to its last sign of life (its latest record or heartbeat): a kill -9's own
    moment is not known, and the time from that last sign to it is the job layer's (goodput's "other")."""
    at = next((i for i in range(len(records) - 1, -1, -1) if records[i].get("kind") == "start"), None)
    if at is None:
        return {}
    first, after = records[at], records[at + 1:]
    beat = beat if beat.get("time", 0) >= first["time"] else {}  # an older attempt's heartbeat says nothing of it
    end = next((r for r in reversed(after) if r.get("kind") == "end"), {})
    reached = max([first.get("step", 0), beat.get("step", 0), end.get("step", -1) + 1]
                  + [r["step"] + 1 for r in after if r.get("kind") in STEP_KINDS])
    last = max([first["time"], beat.get("time", 0)] + [r["time"] for r in after if "time" in r])
    tally = beat.get("ckpt", {})
    before = {"time": last, "step": reached}
    if "ckpt_s" in end or tally:
        before.update(ckpt_s=end.get("ckpt_s", tally.get("s", 0.0)), ckpts=end.get("ckpts", tally.get("n", 0)))
    if reached <= start:
        held_from = last
    elif first.get("step", 0) >= start:
        held_from = first["time"]  # it began at that step: everything it did is redone
    elif tally.get("step") == start:
        held_from = tally["time"]
    else:
        held_from = ckpt_time if ckpt_time is not None else first["time"]
    return {"redo_steps": max(0, reached - start), "redo_s": max(0.0, last - held_from), "before": before}


class MetricsLog:
    """Appends records to metrics.jsonl (rank 0 only) and rewrites heartbeat.json every few seconds; `trackers`
    (train/trackers.Trackers, set by the trainer once the attempt's start is known) get each record after the file
    has it. `guard()`, asked before every write (records, heartbeat, the trackers' flush and close), raises
    errors.LeaseLost once the run folder is no longer this trainer's (the trainer's lease, train/loop.py)."""

    def __init__(self, run_dir: Path, *, enabled: bool = True, heartbeat_s: float = TRAINER_BEAT_S,
                 guard: Callable[[], None] = lambda: None):
        self.run_dir, self.enabled, self.heartbeat_s, self.guard = Path(run_dir), enabled, heartbeat_s, guard
        self._pid_start = process_start_time(os.getpid())  # with the pid, names this process (pids are reused)
        self.folder = RunFolder(run_dir)
        self.path = self.folder.metrics
        self._last_beat = 0.0
        self._fh = None
        self._glanced: tuple[Glance, bytes, int] | None = None  # the glance of the file so far, its end, its size
        self._fold: Fold | None = None  # goodput's fold over the file's records so far
        self.trackers = None
        if enabled:
            self.run_dir.mkdir(parents=True, exist_ok=True)

    def rollback_to(self, step: int) -> int:
        """Drop step records at or past `step` (work after the checkpoint, about to be redone)."""
        if not self.enabled or not self.path.exists():
            return 0
        self.guard()
        records = read_records(self.run_dir)
        kept = [r for r in records if not (r.get("kind") in STEP_KINDS and r.get("step", -1) >= step)]
        dropped = len(records) - len(kept)
        if dropped or len(self.path.read_text().splitlines()) != len(records):
            atomic_write(self.path, "".join(json.dumps(r) + "\n" for r in kept), before_rename=self.guard)
        return dropped

    def write(self, kind: str, **fields) -> None:
        """Append one record of `kind`; a field its record type (RECORDS) does not have is a bug (TypeError)."""
        check_fields(RECORDS[kind], fields)
        if not self.enabled:
            return
        self.guard()
        if self._fh is None:
            self._fh = open_append(self.path)
            self._fh.flush()
            with open(self.path, "rb") as fh:  # what the file holds before this attempt's first record
                data = fh.read(self._fh.tell())
            self._glanced = (glance_of(data), data[-CHECK_BYTES:], len(data))
            self._fold = Fold.of(records_of(data))
        record = {"kind": kind, "time": time.time(), **fields}
        line = json.dumps(record) + "\n"  # ASCII: as many bytes as chars
        self._fh.write(line)
        self._fh.flush()
        line = line.encode()
        glanced, end, size = self._glanced
        self._glanced = (glanced.then(glance_of(line)), (end + line)[-CHECK_BYTES:], size + len(line))
        self._fold.feed(record)  # plain JSON types: what a reader decodes from the line
        if self.trackers is not None:
            self.trackers.record(kind, fields)

    def checkpointed(self) -> None:
        """A checkpoint was written: the trackers make durable what they hold (the records are already)."""
        if self.trackers is not None:
            self.guard()
            self.trackers.flush()

    def heartbeat(self, step: int, tokens: int, *, force: bool = False, **extra) -> None:
        """Rewrite heartbeat.json (at most every heartbeat_s unless forced); `extra`: more fields, e.g. the
        estimator's impl_used and fallbacks (train.estimator_state)."""
        now = time.time()
        if not self.enabled or (not force and now - self._last_beat < self.heartbeat_s):
            return
        self._last_beat = now
        self.guard()
        if self.trackers is not None and self.trackers.off:
            extra = {**extra, "trackers_off": self.trackers.off}
        check_fields(Heartbeat, extra)
        beat = {"step": step, "tokens": tokens, "time": now, "host": socket.gethostname(), "pid": os.getpid(),
                "pid_start": self._pid_start, **extra}
        if self._glanced is not None:
            beat["glance"] = glance_index(*self._glanced, fold=self._fold.state)
        atomic_write(self.folder.heartbeat, json.dumps(beat) + "\n", before_rename=self.guard)

    def close(self) -> None:
        if self._fh is not None:
            os.fsync(self._fh.fileno())
            self._fh.close()
            self._fh = None
        if self.trackers is not None:
            self.guard()
            self.trackers.close()
