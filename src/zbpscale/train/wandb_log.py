"""W&B's offline run files read back: which steps an attempt's W&B folder holds (for the trainer, which sends a
later attempt only the steps none of them holds). Torch-free; wandb only to parse.

An offline W&B run is a folder `<run>/wandb/offline-run-<date>_<time>-<id>/` with one `run-<id>.wandb` file: a
LevelDB-style log. A 7-byte header (`:W&B`, a version), then blocks of 32 KiB; each chunk in a block has a 7-byte
header (CRC-32 of its type byte and data, little-endian; data length, 2 bytes; type: 1 full, 2 first, 3 middle,
4 last) and holds a serialized `wandb_internal_pb2.Record` or a piece of one; a block's tail too short for a chunk
header is padding. W&B writes a `history` record once a step is whole (when the next step is logged, or the run
finishes), so a step is in the file with all its scalars or not at all. A writer killed mid-record leaves a torn
tail: a chunk that runs past the end of the file, or whose CRC does not match, ends the reading there.
"""

from __future__ import annotations

import struct
import zlib
from pathlib import Path
from typing import Iterator

HEADER = 7
BLOCK = 32768
CHUNK = 7  # crc (4), length (2), type (1)
FULL, FIRST, MIDDLE, LAST = 1, 2, 3, 4


def records(path: Path) -> Iterator:
    """The whole records of one run file, in order (wandb_internal_pb2.Record), up to a torn tail."""
    from wandb.proto import wandb_internal_pb2 as pb

    data, pos, part = Path(path).read_bytes(), HEADER, b""
    while pos + CHUNK <= len(data):
        if BLOCK - pos % BLOCK < CHUNK:
            pos += BLOCK - pos % BLOCK
            continue
        crc, length, kind = struct.unpack("<IHB", data[pos:pos + CHUNK])
        chunk = data[pos + CHUNK:pos + CHUNK + length]
        if len(chunk) < length or zlib.crc32(chunk, zlib.crc32(bytes([kind]))) != crc or not FULL <= kind <= LAST:
            return  # torn: the writer died here
        pos += CHUNK + length
        part = chunk if kind in (FULL, FIRST) else part + chunk
        if kind in (FULL, LAST):
            record = pb.Record()
            record.ParseFromString(part)
            yield record


def folders(run_dir: Path, run_id: str) -> list[Path]:
    """The offline W&B folders of the run `run_id` under `<run_dir>/wandb` (W&B names a folder by its start second
    and the id, adding `-1`, `-2` when the name is taken), by name."""
    from zbpscale.run.folder import RunFolder

    found = RunFolder(run_dir).wandb.glob(f"offline-run-*-{run_id}*")
    return sorted(f for f in found if f.name.endswith(f"-{run_id}") or f.name.rsplit("-", 1)[0].endswith(run_id))


def written(folder: Path) -> tuple[int, bool]:
    """(the last step whose history the offline folder holds, -1 for none; whether its run file is whole: its
    `exit` record is in it), from one read of the file: a file whole in that read holds every step before its exit."""
    last, whole = -1, False
    for f in folder.glob("run-*.wandb"):
        for r in records(f):
            kind = r.WhichOneof("record_type")
            if kind == "history":
                last = max(last, r.history.step.num)
            whole |= kind == "exit"
    return last, whole


def last_step(folder: Path) -> int:
    """The last step whose history the offline folder holds; -1 for none."""
    return written(folder)[0]
