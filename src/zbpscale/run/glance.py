"""Status's one read of metrics.jsonl: its `Glance` (the first and latest records of each kind status shows, and
the worst evaluation), and the index of it the trainer keeps in its heartbeat, so that a reader decodes only the
bytes written after it. Torch-free; the record types are run/records.py's.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

from zbpscale.files import read_bytes
from zbpscale.run.records import (
    EndRecord,
    EvalRecord,
    Record,
    StartRecord,
    TrainRecord,
    decoded_line,
    numbered,
    records_of_kind,
    upgraded,
)


@dataclass(frozen=True)
class Glance:
    """What `zbpscale status` shows of a run's metrics.jsonl (`glance`); {} where the file has no such record; a
    start or end record as `shown` keeps it (the fields its readers read). Two glances of consecutive parts of a file
    merge into the glance of both (`then`): the trainer keeps the glance of what it has written in its heartbeat
    (`glance_index`), and status reads only the bytes after it."""

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


UNSHOWN = {"start": ("config", "numerics", "git", "host", "versions", "setup_s"), "end": ("ckpt_saves",)}
"""What a Glance leaves out of the start and end records it keeps: the long fields no reader of a glance reads (a
start record's config, but its device, which account.py's gpus_held asks; an end record's row for each save), so that
the heartbeat's index, decoded for every run by every status, stays short (a heartbeat of tools/bench_status.py's
runs, with the save tally's change: 8.9 -> 2.5 KB)."""


def shown(record: Record) -> Record:
    """What a Glance keeps of a record (UNSHOWN)."""
    left = UNSHOWN.get(record.get("kind"), ())
    if not any(k in record for k in left):
        return record
    kept = {k: v for k, v in record.items() if k not in left}
    if "config" in record:
        kept["config"] = {"device": record["config"].get("device")} if isinstance(record["config"], dict) else {}
    return kept


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
    their parsing. Torn lines (a writer killed mid-line) are skipped, and so are a train or eval record whose loss
    is not a number (a hand edit: run/records.py's `numbered`). `known`: the glance of the bytes before
    these, whose first and first train records stand (they are not looked for here)."""
    evals = numbered(list(records_of_kind(data, "eval")), "val_loss")
    worst = max(evals, key=_badness) if evals else {}
    first = known.first if known and known.first else shown(decoded_line(data, 0) or {})
    train0 = known.train0 if known and known.train0 else next(records_of_kind(data, "train"), {})
    latest = next((r for r in records_of_kind(data, "train", backwards=True) if numbered([r], "step", "loss")), {})
    return Glance(first=first, train0=train0, train=latest, eval=evals[-1] if evals else {}, worst=worst,
                  start=shown(next(records_of_kind(data, "start", backwards=True), {})),
                  end=shown(next(records_of_kind(data, "end", backwards=True), {})))


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
    data = read_bytes(path, max(0, at - CHECK_BYTES))
    head = min(at, CHECK_BYTES)
    if len(data) < head or (zlib.crc32(data[:head]) if at else 0) != check:
        return None
    return data[head:]


def glance_after(index: dict, tail: bytes) -> Glance:
    """The glance of a metrics.jsonl from its heartbeat's index and the bytes after those it covers
    (`indexed_tail`); TypeError, KeyError, ValueError or AttributeError for an index this release did not write."""
    known = Glance(**{k: shown(upgraded(v)) for k, v in index["records"].items() if k in Glance.__dataclass_fields__})
    return known.then(glance_of(tail, known=known))
