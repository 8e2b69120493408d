"""The trainer's records, their format and their readers: metrics.jsonl (append-only, one JSON object per line) and
heartbeat.json. Torch-free; train/metrics.py writes them.

Every line of metrics.jsonl is one of the record types below, `kind` first (`tail_records` and run/glance.py rely
on it) and `time` (Unix seconds) second; the writer refuses a field its type does not have, and status, collect
and plot read the fields the types name. `step` in train/eval/diag records is the 0-based step just taken; a run
of S steps logs steps 0..S-1. A new diagnostic is a field of `DiagRecord` (or a row type) here, written by
train/diagnostics.py and drawn by results/plot.py. Readers: `read_records` / `records_of` (the whole file, as
today's types have it), `attempts_of` (split into the trainer's attempts), `tail_records` (the last of some kinds).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Iterator, Literal, TypedDict, Union

from zbpscale.files import json_lines, loads
from zbpscale.run.folder import RunFolder
from zbpscale.run.history import Why

STEP_KINDS = ("train", "eval", "diag")
TRAINER_BEAT_S = 5.0
"""How often the trainer rewrites heartbeat.json while it steps (train/metrics.py's MetricsLog)."""


class StartRecord(TypedDict, total=False):
    """An attempt of the trainer began (after the estimator's warm-up)."""

    kind: Literal["start"]
    time: float
    attempt: int
    step: int  # where this attempt starts
    world_size: int
    config: dict  # the resolved TrainConfig (TrainConfig.to_dict)
    derived: dict  # run/config.py's derived_numbers: params, params_non_embedding, total_steps, total_tokens, ...
    data_id: str  # the shards it trains on (data/loader.py's data_identity; absent before 2026-12-06)
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
    last: SaveRow  # the latest save's row as it ended (a background one once its write has landed); the end record
    # has a row for each of the latest 100 (EndRecord.ckpt_saves; older heartbeats had all of them, as `each`)


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


def numbered(records: list[Record], *keys: str) -> list[Record]:
    """The records whose `keys` all hold numbers (a NaN or an infinity too: a diverged run's loss); one edited to hold
    words or nothing there is skipped, as a torn line is, so that a reader of its numbers does not fail on it."""
    return [r for r in records if all(isinstance(r.get(k), (int, float)) and not isinstance(r.get(k), bool)
                                      for k in keys)]


def by_kind(records: list[Record]) -> dict[str, list[Record]]:
    """The records of each kind, in order."""
    found: dict[str, list[Record]] = {}
    for r in records:
        found.setdefault(r.get("kind"), []).append(r)
    return found



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
                    found[kind] = upgraded(loads(line))
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


def records_of_kind(data: bytes, kind: str, *, backwards: bool = False) -> Iterator[Record]:
    """The records of `kind` in a metrics.jsonl's bytes, in order (or from the end), each decoded when it is reached:
    the lines are found by the `{"kind": "...` the writer puts first, so the others cost their bytes, not their
    parsing (a tuning run's last eval of a file of 20,000 records: 1 ms, against 33 ms decoding every line)."""
    return (r for at in _line_starts(data, b'{"kind": "' + kind.encode() + b'"', backwards)
            if (r := decoded_line(data, at)) is not None)


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


def decoded_line(data: bytes, start: int) -> dict | None:
    """The record on the line beginning at `start`; None when it is torn or not JSON."""
    end = data.find(b"\n", start)
    try:
        record = loads(data[start:end if end >= 0 else len(data)].decode())
    except (json.JSONDecodeError, UnicodeDecodeError):
        return None
    return upgraded(record) if isinstance(record, dict) else None
