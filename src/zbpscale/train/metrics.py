"""The trainer's records: metrics.jsonl (append-only, one JSON object per line) and heartbeat.json. Torch-free.

Every line of metrics.jsonl is one of the record types below, `kind` first (`tail_records` relies on it) and
`time` (Unix seconds) second; `MetricsLog.write` refuses a field its type does not have, and status, collect
and plot read the fields the types name. `step` in train/eval/diag records is the 0-based step just taken; a
run of S steps logs steps 0..S-1. A new diagnostic is a field of `DiagRecord` (or a row type) here, written by
train/diagnostics.py and drawn by results/plot.py. `diverged` says whether a run's val loss went above the loss it
started from (status and collect flag it); `glance` is status's one read of the file.
"""

from __future__ import annotations

import json
import math
import os
import socket
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator, Literal, TypedDict, Union

from zbpscale.files import atomic_write, check_fields, json_lines, open_append
from zbpscale.proc import process_start_time, process_started_at
from zbpscale.run.fold import Fold
from zbpscale.run.folder import RunFolder
from zbpscale.run.history import Why

STEP_KINDS = ("train", "eval", "diag")
TRAINER_BEAT_S = 5.0
"""How often the trainer rewrites heartbeat.json while it steps (MetricsLog's default)."""



class StartRecord(TypedDict, total=False):
    """An attempt of the trainer began (after the estimator's warm-up)."""

    kind: Literal["start"]
    time: float
    attempt: int
    step: int  # where this attempt starts
    world_size: int
    config: dict  # the resolved TrainConfig (TrainConfig.to_dict)
    derived: dict  # schema.derived_numbers: params, params_non_embedding, total_steps, total_tokens, ...
    numerics: dict  # numerics.fingerprint: torch, cpu, cpu_capability, threads, gpu
    impl_used: dict[str, str]  # {core: closed | fused | plain}: what each ZBP core runs; {} for bp
    git: str
    versions: dict[str, str]
    host: str
    setup_s: dict[str, float]  # seconds of this attempt's start-up by phase (SETUP_PHASES), up to this record


SETUP_PHASES = ("launch", "model", "restore", "warm_up", "data", "total")
"""StartRecord.setup_s, in order: launch (the process's start -> train() called: interpreter, imports; absent where
/proc does not say; a process that trains several runs, as tests do, counts its whole life before), model (built
and initialised), restore (the checkpoint loaded), warm_up (the estimator compiled), data (loader and validation
batches), total (train() called -> this record, when the first step begins)."""


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


class SaveRow(TypedDict, total=False):
    """One checkpoint save of an attempt. A periodic save is written in the background (train/checkpoint.py): the
    trainer is blocked only while it waits for the write before it and copies the state; the write lands later."""

    step: int
    blocked_s: float  # seconds the trainer was blocked (goodput's saves bucket counts these alone)
    landed_s: float  # background: seconds from the state's copy to its file under its name (absent: synchronous)
    overlap_steps: int  # background: steps the trainer did while it was written
    slowdown: float  # their median step time over the median of the steps before with no write in flight
    error: str  # background: why it was not written (a full disk), in one line; training went on


class CheckpointTally(TypedDict, total=False):
    """This attempt's checkpoint saves so far, as the heartbeat carries them (the last words of a killed attempt)."""

    step: int  # the latest save's step
    time: float  # when it ended (Unix seconds)
    s: float  # seconds the trainer was blocked in all of this attempt's saves (every rank waits for rank 0)
    n: int  # saves
    each: list[SaveRow]  # the latest 100 saves, each as it ended (a background one once its write has landed)


class Before(TypedDict, total=False):
    """The attempt before a resume, as its records and its last heartbeat left it (ResumeRecord.before)."""

    time: float  # its last sign of life: its latest record or heartbeat
    step: int  # the steps it had done
    ckpt_s: float  # its CheckpointTally's s and n (absent: it saved nothing, or an older release)
    ckpts: int


class ResumeRecord(TypedDict, total=False):
    """The attempt continues the run from a checkpoint, or from step 0 when an earlier attempt died before its first
    checkpoint (from_step 0, dropped > 0)."""

    kind: Literal["resume"]
    time: float
    from_step: int
    dropped: int  # records past the checkpoint removed, so that no step appears twice
    kept: dict  # numerics.adopt: what this attempt kept of the checkpoint's numerics
    differs: dict  # and what differs
    world_size: int  # this attempt's number of ranks
    world_size_from: int | None  # that of the attempt whose checkpoint it resumes (None: unknown, or from step 0)
    redo_steps: int  # steps the attempt before had done past from_step, done again now (its lost work)
    redo_s: float  # wall seconds it spent on them: from the end of its save of from_step (or its first step) on
    before: Before


class TrainRecord(TypedDict, total=False):
    kind: Literal["train"]
    time: float
    step: int
    tokens: int
    loss: float
    lr: float
    grad_norm: float
    step_time: float
    tokens_per_s: float


class EvalRecord(TypedDict, total=False):
    kind: Literal["eval"]
    time: float
    step: int
    tokens: int
    val_loss: float


class BlockRow(TypedDict):
    """rho_k: one residual branch's gains (train/diagnostics.py)."""

    layer: int
    branch: str  # attn | mlp
    fwd_gain: float  # |branch output| / |branch input|
    bwd_gain: float  # the same for the gradients going back


class CoreRow(TypedDict):
    """One physical core's estimator statistics (train/diagnostics.core_stats)."""

    layer: int
    core: str  # attn | ffn
    d_mean: float  # mean row width d
    n: int  # probes
    nsr: float  # noise-to-signal ratio of the estimate
    c: float  # nsr * n / d
    c_median: float
    c_mean: float
    floor_frac: float


class DiagRecord(TypedDict, total=False):
    kind: Literal["diag"]
    time: float
    step: int
    loss: float
    blocks: list[BlockRow]
    cores: list[CoreRow]
    grad_cosine: float | None  # ZBP vs BP parameter gradients on the same batch
    impl_used: dict[str, str]  # ZBP runs: as in start, as of this step


class EndRecord(TypedDict, total=False):
    kind: Literal["end"]
    time: float
    step: int
    why: Why  # one of run.history.TRAINER_ENDS; `status` in records before 2026-12-02 (`upgraded`)
    reason: str
    ckpt_s: float  # seconds this attempt was blocked in checkpoint saves (the final one included), and their number
    ckpts: int
    ckpt_saves: list[SaveRow]  # the latest 100 of them, one row each (absent before 2026-12-05: only the two sums)


class Heartbeat(TypedDict, total=False):
    """heartbeat.json, rewritten every few seconds."""

    step: int
    tokens: int
    time: float
    host: str
    pid: int
    pid_start: int | None  # with the pid, names the process (pids are reused)
    impl_used: dict[str, str]
    fallbacks: list[str]
    trackers_off: list[str]  # trackers turned off in this attempt, one line each (train/trackers.py)
    ckpt: CheckpointTally  # this attempt's saves (rewritten at once after each)
    glance: dict  # status's index of metrics.jsonl (glance_index): the glance of its first `at` bytes (a cache)


Record = Union[StartRecord, ResumeRecord, TrainRecord, EvalRecord, DiagRecord, EndRecord]
RECORDS: dict[str, type] = {"start": StartRecord, "resume": ResumeRecord, "train": TrainRecord, "eval": EvalRecord,
                            "diag": DiagRecord, "end": EndRecord}


def read_records(run_dir: Path) -> list[Record]:
    """Every record of the run's metrics.jsonl, in order, as today's types have them (`records_of`)."""
    try:
        return records_of(RunFolder(run_dir).metrics.read_bytes())
    except FileNotFoundError:
        return []


def records_of(data: bytes) -> list[Record]:
    """Every record of a metrics.jsonl's bytes, in order, as today's types have them; torn lines skipped."""
    return [upgraded(r) for r in json_lines(data) if isinstance(r, dict)]


def upgraded(record: dict) -> Record:
    """A record as today's type has it: the end record of releases before 2026-12-02 said how the attempt ended
    in `status`, now `why` (the word attempts.jsonl uses; same values)."""
    if record.get("kind") == "end" and "status" in record and "why" not in record:
        record = {("why" if k == "status" else k): v for k, v in record.items()}
    return record


def attempts_of(records: list[Record]) -> list[list[Record]]:
    """metrics.jsonl's records split into the trainer's attempts: each from its start record to the record before
    the next one (the records before the first start, an older release's, are no attempt's). The one place that
    splits them (goodput's Fold keeps its own running account of the same attempts)."""
    found: list[list[Record]] = []
    for r in records:
        if r.get("kind") == "start":
            found.append([r])
        elif found:
            found[-1].append(r)
    return found


def by_kind(records: list[Record]) -> dict[str, list[Record]]:
    """The records of each kind, in order."""
    found: dict[str, list[Record]] = {}
    for r in records:
        found.setdefault(r.get("kind"), []).append(r)
    return found


@dataclass(frozen=True)
class Divergence:
    """The eval record of a run furthest above the loss the run started from (`diverged`)."""

    step: int
    """The eval record's step (0-based, as in metrics.jsonl)."""
    tokens: int | None
    """Training tokens at that eval."""
    val_loss: float
    """Its validation loss."""
    start: float
    """The loss the run started from: its train loss at step 0, or ln(vocab_size) when no step 0 is recorded."""
    start_from: Literal["step 0", "ln(vocab)"]
    """Which of the two `start` is."""

    def words(self) -> str:
        """'val 10.996 at step 15 is above its start 10.951' (followed by ' (ln(vocab))' when the start is that)."""
        where = "" if self.start_from == "step 0" else f" ({self.start_from})"
        return f"val {self.val_loss:.3f} at step {self.step:,} is above its start {self.start:.3f}{where}"


def diverged(records: list[Record], config: dict | None = None) -> Divergence | None:
    """Whether a run diverged: the val loss of one of its eval records is above the loss the run started from.

        start = loss of the train record of step 0        (a resumed run keeps the first attempt's)
              | ln(config["model"]["vocab_size"])          (no step 0 recorded: a fresh model's loss, a uniform guess)
        diverged = max(eval val_loss) > start

    Every eval counts, not only the first: a run that fell and later climbed back above its start diverged too; a
    run whose val loss stays below its start never does. Returns the eval record with the highest val loss when it is
    above the start (a NaN counts as the highest), else None (None too when no start is known). `records`: the run's
    records in order, all of them or only its train record of step 0 and its eval records (`glance`'s `steps`).

    Caveats: the step-0 loss is one batch's, so an eval right after the first steps of a run that barely learns
    can sit above it by the batch's noise; a run that starts far above ln(vocab) (a bad init) is measured against
    its own start, and is not flagged for it."""
    train0 = next((r for r in records if r.get("kind") == "train"), None)
    if train0 is not None and train0.get("step") == 0 and "loss" in train0:
        start, start_from = float(train0["loss"]), "step 0"
    elif (vocab := ((config or {}).get("model") or {}).get("vocab_size")):
        start, start_from = math.log(vocab), "ln(vocab)"
    else:
        return None
    evals = [r for r in records if r.get("kind") == "eval" and r.get("val_loss") is not None]
    above = [r for r in evals if not r["val_loss"] <= start]  # a NaN is not below its start either
    if not above:
        return None
    worst = max(above, key=lambda r: math.inf if math.isnan(r["val_loss"]) else r["val_loss"])
    return Divergence(step=worst["step"], tokens=worst.get("tokens"), val_loss=worst["val_loss"], start=start,
                      start_from=start_from)


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


def tail_records(path: Path, kinds: tuple[str, ...], max_bytes: int = 1 << 20) -> dict[str, Record]:
    """The last record of each kind in a JSONL file, reading backwards from the end in growing blocks."""
    found: dict[str, dict] = {}
    try:
        size = Path(path).stat().st_size
    except OSError:
        return found
    block = 16384
    with open(path, "rb") as fh:
        while True:
            start = max(0, size - block)
            fh.seek(start)
            lines = fh.read(size - start).splitlines()
            if start > 0:
                lines = lines[1:]  # the first line may be cut
            for line in reversed(lines):
                kind = _kind_of(line)
                if kind not in kinds or kind in found:
                    continue  # decode only the lines asked for
                try:
                    found[kind] = upgraded(json.loads(line))
                except (json.JSONDecodeError, UnicodeDecodeError):
                    continue  # a torn line
            if len(found) == len(kinds) or start == 0 or block >= max_bytes:
                return found
            block *= 4


def _kind_of(line: bytes) -> str | None:
    """The `kind` of a metrics line without decoding it (MetricsLog writes `{"kind": "...", ...` first)."""
    if not line.startswith(b'{"kind": "'):
        return None
    end = line.find(b'"', 10)
    return line[10:end].decode() if end > 0 else None


@dataclass(frozen=True)
class Glance:
    """What `zbpscale status` shows of a run's metrics.jsonl (`glance`); {} where the file has no such record. Two
    glances of consecutive parts of a file merge into the glance of both (`then`): the trainer keeps the glance of
    what it has written in its heartbeat (`glance_index`), and status reads only the bytes after it."""

    first: Record = field(default_factory=dict)
    """Its first record: the first attempt's start record."""
    train0: TrainRecord = field(default_factory=dict)
    """The first train record."""
    train: TrainRecord = field(default_factory=dict)
    """The latest train record."""
    eval: EvalRecord = field(default_factory=dict)
    """The latest eval record."""
    worst: EvalRecord = field(default_factory=dict)
    """The first eval record with the highest val loss (a NaN the highest): all that `diverged` needs of the evals."""
    start: StartRecord = field(default_factory=dict)
    """The latest start record (the latest attempt's)."""
    end: EndRecord = field(default_factory=dict)
    """The latest end record."""

    @property
    def steps(self) -> list[Record]:
        """The first train record and the worst eval record, in order: what `diverged` reads."""
        return [r for r in (self.train0, self.worst) if r]

    def then(self, later: Glance) -> Glance:
        """The glance of this part of a file and the part after it, whose glance is `later`."""
        worst = later.worst if later.worst and (not self.worst or _badness(later.worst) > _badness(self.worst)) \
            else self.worst
        return Glance(first=self.first or later.first, train0=self.train0 or later.train0,
                      train=later.train or self.train, eval=later.eval or self.eval, worst=worst,
                      start=later.start or self.start, end=later.end or self.end)


def _badness(record: EvalRecord) -> float:
    loss = record["val_loss"]
    return math.inf if math.isnan(loss) else loss


def glance(path: Path) -> Glance:
    """`glance_of` a metrics.jsonl, read once."""
    try:
        return glance_of(Path(path).read_bytes())
    except OSError:
        return Glance()


def glance_of(data: bytes, *, known: Glance | None = None) -> Glance:
    """The records status shows of a metrics.jsonl's bytes. Only the lines returned are decoded, found by the
    `{"kind": "...` that MetricsLog writes first: a long run's many train and diag lines cost their bytes, not
    their parsing. Torn lines (a writer killed mid-line) are skipped. `known`: the glance of the bytes before
    these, whose first and first train records stand (they are not looked for here)."""
    evals = [r for r in _records_of(data, "eval") if r.get("val_loss") is not None]
    worst = max(evals, key=_badness) if evals else {}
    latest = next(_records_of(data, "eval", backwards=True), {})
    first = known.first if known and known.first else _decoded(data, 0) or {}
    train0 = known.train0 if known and known.train0 else next(_records_of(data, "train"), {})
    return Glance(first=first, train0=train0,
                  train=next(_records_of(data, "train", backwards=True), {}), eval=latest, worst=worst,
                  start=next(_records_of(data, "start", backwards=True), {}),
                  end=next(_records_of(data, "end", backwards=True), {}))


CHECK_BYTES = 64
"""A glance index names the file's bytes it covers by their length and the CRC-32 of their last CHECK_BYTES."""


def glance_index(glanced: Glance, data_end: bytes, size: int, fold: dict | None = None) -> dict:
    """The heartbeat's `glance` field (Heartbeat.glance): `glanced`, the glance of a metrics.jsonl's first `size`
    bytes, whose last bytes are `data_end` (at least the last CHECK_BYTES of them), and `fold`, the state of
    goodput's Fold over the same bytes' records (run/goodput.py)."""
    import zlib

    return {"at": size, "check": zlib.crc32(data_end[-CHECK_BYTES:]) if size else 0,
            "records": {k: v for k, v in glanced.__dict__.items() if v}, **({"fold": fold} if fold else {})}


def indexed_tail(path: Path, index: dict | None) -> bytes | None:
    """The bytes of a metrics.jsonl after those its heartbeat's index covers, or None when the index is missing (an
    older release, or a run that has not stepped yet) or no longer covers the file's start (a resume rewrote it: the
    check differs). OSError when the file cannot be read."""
    import zlib

    try:
        at, check = int(index["at"]), index["check"]
    except (TypeError, KeyError, ValueError):
        return None
    with open(path, "rb") as fh:
        fh.seek(max(0, at - CHECK_BYTES))
        data = fh.read()
    head = min(at, CHECK_BYTES)
    if len(data) < head or (zlib.crc32(data[:head]) if at else 0) != check:
        return None
    return data[head:]


def glance_from(path: Path, index: dict | None) -> Glance:
    """`glance(path)` read through the heartbeat's index: the index's glance of the bytes it covers, then the glance
    of the bytes after them, read alone; the whole file where the index does not serve (`indexed_tail`)."""
    try:
        tail = indexed_tail(path, index)
        return glance(path) if tail is None else glance_after(index, tail)
    except (TypeError, KeyError, ValueError, AttributeError):
        return glance(path)
    except OSError:
        return Glance()


def glance_after(index: dict, tail: bytes) -> Glance:
    """The glance of a metrics.jsonl from its heartbeat's index and the bytes after those it covers
    (`indexed_tail`); TypeError, KeyError, ValueError or AttributeError for an index this release did not write."""
    known = Glance(**{k: upgraded(v) for k, v in index["records"].items() if k in Glance.__dataclass_fields__})
    return known.then(glance_of(tail, known=known))


def _records_of(data: bytes, kind: str, *, backwards: bool = False) -> Iterator[Record]:
    """The records of `kind` in a JSONL file's bytes, in order (or from the end), each decoded when it is reached."""
    return (r for at in _line_starts(data, b'{"kind": "' + kind.encode() + b'"', backwards)
            if (r := _decoded(data, at)) is not None)


def _line_starts(data: bytes, mark: bytes, backwards: bool) -> Iterator[int]:
    """Where each line that begins with `mark` begins, in order (or from the end)."""
    head = [0] if data.startswith(mark) else []
    if not backwards:
        yield from head
    at = data.rfind(b"\n" + mark) if backwards else data.find(b"\n" + mark)
    while at >= 0:
        yield at + 1
        at = data.rfind(b"\n" + mark, 0, at) if backwards else data.find(b"\n" + mark, at + 1)
    if backwards:
        yield from head


def _decoded(data: bytes, start: int) -> dict | None:
    """The record on the line beginning at `start`; None when it is torn or not JSON."""
    end = data.find(b"\n", start)
    try:
        record = json.loads(data[start:end if end >= 0 else len(data)].decode())
    except (json.JSONDecodeError, UnicodeDecodeError):
        return None
    return upgraded(record) if isinstance(record, dict) else None
