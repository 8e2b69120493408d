"""Files written so that a reader never sees half of one, and read so that a killed writer's torn line is no error.

The one recipe for every file zbpscale rewrites (config.json, heartbeat.json, a checkpoint, a local-queue entry,
a shard, a results bundle's files): write a temp file in the same folder, fsync it, rename it over the final
name, fsync the folder (a cache its reader checks skips the fsyncs). Temp files are named by `temp_path` alone
(`.<name>.tmp-<pid>`), so `remove_stale_temps` finds every one a killed writer left. Torch-free, and imports nothing
of zbpscale.

Read back with `loads`, the one JSON decoder of the files status reads for every run (json's values, at a third of
its cost).
"""

from __future__ import annotations

import ctypes
import errno
import json
import os
from pathlib import Path
from typing import Any, BinaryIO, Callable, Iterable, Union

try:
    import msgspec
except ImportError:  # a checkout pulled onto an environment installed before it was a dependency: json alone
    msgspec = None

Content = Union[str, bytes, Iterable[bytes], Callable[[BinaryIO], None]]
"""What `atomic_write` writes: text (UTF-8), bytes, chunks of bytes, or a function that writes to the open file."""


def temp_path(path: Path) -> Path:
    """The temp file `atomic_write` writes before renaming it to `path`: hidden, in the same folder, per process."""
    return path.with_name(f".{path.name}.tmp-{os.getpid()}")


def atomic_write(path: Path, data: Content, *, before_rename: Callable[[], None] | None = None,
                 durable: bool = True) -> None:
    """Write `data` so that `path` is either absent, its old content, or the complete new file (temp file, fsync,
    rename, fsync of the folder). On any error the temp file is removed and the error raised: a full disk leaves
    no half-written file behind, and the old file intact. `before_rename()` is called once the data are on disk,
    just before they become `path`: raising there leaves `path` as it was (a writer that may no longer write,
    found out after a long write). `durable=False`: no fsync (a cache its reader checks, which a crash may leave
    empty: a run folder's digest, kept at every event of 10,000 runs' submit)."""
    path = Path(path)
    tmp = temp_path(path)
    try:
        with open(tmp, "wb") as fh:
            if callable(data):
                data(fh)
            elif isinstance(data, (str, bytes, bytearray, memoryview)):
                fh.write(data.encode() if isinstance(data, str) else data)
            else:
                for chunk in data:
                    fh.write(chunk)
            fh.flush()
            if durable:
                os.fsync(fh.fileno())
        if before_rename is not None:
            before_rename()
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    if durable:
        fsync_dir(path.parent)


def fsync_dir(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def remove_stale_temps(folder: Path) -> None:
    """Delete the temp files (`temp_path`) a killed writer left in `folder`; they never carry a final name."""
    for tmp in Path(folder).glob(".*.tmp-*"):
        tmp.unlink(missing_ok=True)


def read_bytes(path: Path | str, offset: int = 0) -> bytes:
    """A file's bytes from `offset` on (Path.read_bytes, at a third of its cost for a small file: no buffered reader
    is built; status reads five files of each of 10,000 runs); OSError as open() raises it. A file that grows while it
    is read (metrics.jsonl of a live trainer) gives at least the bytes it had when opened."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        data = os.pread(fd, max(0, os.fstat(fd).st_size - offset), offset)
        while more := os.pread(fd, 1 << 16, offset + len(data)):
            data += more
        return data
    finally:
        os.close(fd)


_DECODE = msgspec.json.Decoder().decode if msgspec else json.loads
_REFUSED = (msgspec.MsgspecError, ValueError) if msgspec else ()


def loads(data: bytes | str) -> Any:
    """The value json.loads gives a JSON text, and its error where it gives none: decoded by msgspec (a third of
    json's time: status decodes five files of each of 10,000 runs), and by json where msgspec refuses a text (NaN
    and Infinity, which a diverged run's records hold; a number beyond a float's range; a lone surrogate; a byte
    order mark; UTF-16 or UTF-32: json reads them) or where msgspec is not installed. Where both read a text they
    give the same value (tests/test_files.py compares them on a fuzzed corpus)."""
    try:
        return _DECODE(data)
    except _REFUSED:
        return json.loads(data)


def as_json(value: Any) -> Any:
    """`value` as it reads back once written as JSON (tuples as lists, keys as strings): what a config written to
    disk compares equal to."""
    return json.loads(json.dumps(value))


def read_json(path: Path) -> dict:
    """A JSON object from `path`; {} when it is missing, unreadable, not JSON or not an object."""
    try:
        value = loads(read_bytes(path))
    except (OSError, ValueError):
        return {}
    return value if isinstance(value, dict) else {}


def read_jsonl(path: Path) -> list[dict]:
    """The objects of a JSONL file, in order; a torn line (a killed writer) is skipped; no file: []."""
    try:
        return json_lines(read_bytes(path))
    except FileNotFoundError:
        return []


def json_lines(data: bytes) -> list:
    """The value of each line of a JSONL file's bytes that is JSON, in order (a torn or garbled line skipped): one
    decode for the whole file where every line is one object (all but a torn or garbled file), else line by line."""
    lines = data.splitlines()
    try:
        values = loads(b"[" + b",".join(lines) + b"]")
        if len(values) == len(lines) and all(isinstance(v, dict) for v in values):
            return values
    except ValueError:  # not JSON, or not UTF-8
        pass
    found = []
    for line in lines:
        try:
            found.append(loads(line))
        except ValueError:
            continue
    return found


def open_append(path: Path):
    """`path` opened for appending lines (text), after ending a torn last line: a writer killed mid-line leaves
    a fragment without its newline, and the next record must start a line of its own, or it is glued onto the
    fragment and lost with it (readers skip only the fragment)."""
    fh = open(path, "a")
    if fh.tell() > 0:  # append mode: at the end
        with open(path, "rb") as end:
            end.seek(-1, os.SEEK_END)
            if end.read(1) != b"\n":
                fh.write("\n")
    return fh


def append_jsonl(path: Path, record: dict) -> None:
    """Append one object as a line of a JSONL file (made with its folder if missing), fsynced."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open_append(path) as fh:
        fh.write(json.dumps(record) + "\n")
        fh.flush()
        os.fsync(fh.fileno())


def check_fields(kind: type, fields: dict) -> None:
    """A TypeError naming the fields that the record type `kind` (a TypedDict) does not have: writing one is a bug,
    since every reader knows a record's fields from its type."""
    unknown = set(fields) - set(kind.__annotations__)
    if unknown:
        raise TypeError(f"{kind.__name__} has no field {', '.join(sorted(unknown))}")


KERNEL_FILESYSTEMS = {"proc", "sysfs", "cgroup", "cgroup2", "debugfs", "tracefs", "securityfs", "configfs",
                      "pstore", "bpf", "devpts", "mqueue", "hugetlbfs", "fusectl", "efivarfs"}
"""Filesystems of the kernel's own objects: no folder of runs can be made there."""


def unwritable(folder: Path) -> str | None:
    """Why files cannot be made in `folder` (made with its parents where missing), in a few words, or None when
    they can. Asked without writing (a dry run says it too): the nearest part of the path that exists must be a
    folder, on a filesystem that holds files, that this process may write into (access(2): permissions, an
    immutable folder, a read-only mount)."""
    existing = Path(folder).absolute()
    while not os.path.lexists(existing):
        existing = existing.parent
    if not existing.is_dir():
        return f"{existing} is not a folder"
    kind = _filesystem(existing)
    if kind in KERNEL_FILESYSTEMS:
        return f"{existing} is on {kind}, a filesystem of the kernel's own objects"
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.access(os.fsencode(existing), os.W_OK | os.X_OK) != 0:
        code = ctypes.get_errno()
        return f"{existing}: {os.strerror(code)} ({errno.errorcode.get(code, code)})"
    return None


def _filesystem(path: Path) -> str:
    """The type of the filesystem that holds `path` (its mount in /proc/self/mountinfo); '' when unknown."""
    try:
        mounts = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return ""
    best, kind = "", ""
    for line in mounts:
        fields, _, rest = line.partition(" - ")
        point = fields.split()[4].replace("\\040", " ")
        inside = str(path) == point or str(path).startswith(point.rstrip("/") + "/")
        if inside and len(point) >= len(best):
            best, kind = point, rest.split()[0]
    return kind
