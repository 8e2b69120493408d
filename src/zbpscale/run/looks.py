"""The looks a sweep's folder keeps of its runs: one file, `<sweep folder>/.looks.jsonl`. Torch-free.

Each writer of a run's attempts record keeps a look at the run's folder (run/snapshot.py's `keep`) by appending one
line to its sweep folder's file, `<run name>\\t<CRC-32 of the look, 8 hex digits>\\t<the look as JSON>\\n`, in one
write to a file opened for appending, with a line break before it (so that a line after a torn one is whole):
submit, the local driver and every SLURM job of the sweep append to it, on any node. A run's latest line is its
look; a reader reads the file once for the whole sweep (status of 10,000 runs: one read of the disk for all their
looks, where a look in each run's folder cost a read each, a third of a cold status's reads). It is a cache: a look
whose line is torn or garbled (its CRC differs: two nodes' appends crossed on a file system that does not keep
appends whole, NFS) is not read, and a look is taken only while every file it names is as it names it
(run/snapshot.py); without the file, a reader reads the run folders.

The file grows by a line an event. The writer whose line takes it past twice its size when it was last compacted
(and SLACK more) compacts it, one writer at a time (a lock beside it, lease.py's): the latest line of each run
where it is whole (an older one is older than the event of the torn one: it would not be taken), written under a
temporary name and renamed over it, headed by `\\tcompacted\\t<size of the lines>\\n`, then what others appended to
the old file meanwhile. A line appended to the old file after that is lost with it: that run's look is read from its
folder until its next event.
"""

from __future__ import annotations

import os
import zlib
from pathlib import Path

from zbpscale.files import atomic_write, read_bytes
from zbpscale.lease import try_lock
from zbpscale.run.folder import LOOKS, RunFolder

SLACK = 1 << 20
"""Bytes the file may grow past twice its compacted size before it is compacted again (a sweep of a few hundred
events is never compacted)."""

COMPACT_STALE_S = 600.0
"""A compaction lock's lease not renewed for this long is its holder's, gone (lease.py): a compaction takes
seconds."""

_HEADER = b"\tcompacted\t"


class Looks:
    """A sweep folder's kept looks, read once (`read`): each run's latest line, checked when asked for (`get`)."""

    def __init__(self, data: bytes = b""):
        self._data = data
        self._at: dict[bytes, tuple[int, int]] = {}  # run name -> where its latest line's CRC and look lie
        pos, size = 0, len(data)
        while pos < size:
            end = data.find(b"\n", pos)
            end = size if end < 0 else end  # a torn last line: its CRC tells
            tab = data.find(b"\t", pos, end)
            if tab > pos:  # the header's name is empty
                self._at[data[pos:tab]] = (tab + 1, end)
            pos = end + 1

    def __len__(self) -> int:
        return len(self._at)

    def get(self, name: str) -> bytes | None:
        """The run's latest kept look (its JSON bytes), None where it has none or its line is not whole."""
        at = self._at.get(os.fsencode(name))
        return None if at is None else _checked(self._data[at[0]:at[1]])


def read(folder: Path | str) -> Looks:
    """The looks the sweep folder `folder` keeps (none where it keeps no file, or it cannot be read)."""
    try:
        return Looks(read_bytes(os.path.join(folder, LOOKS)))
    except OSError:
        return Looks()


def append(run_dir: Path, look: bytes) -> None:
    """Keep `look` as the latest of the run folder `run_dir` in its sweep folder's file, compacting the file when it
    has grown (see the module docstring); OSError where it cannot be written (a full disk, a folder not writable).
    A folder whose name holds a tab or a line break (made by hand) keeps none."""
    folder = RunFolder(Path(run_dir).absolute())
    name = os.fsencode(folder.name)
    if not name or any(c in name for c in b"\t\n\r"):
        return
    path = folder.looks
    fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        # one write, the line whole or torn; on a line of its own even after a torn one (an empty line between)
        os.write(fd, b"\n%s\t%08x\t%s\n" % (name, zlib.crc32(look), look))
        size, head = os.fstat(fd).st_size, os.pread(fd, 64, 0)
    finally:
        os.close(fd)
    if _grown(size, head):
        lock, _ = try_lock(path.with_suffix(".lock"), stale_after_s=COMPACT_STALE_S)
        if lock is not None:  # else another writer compacts it now
            try:
                with open(path, "rb") as fh:
                    if _grown(os.fstat(fh.fileno()).st_size, fh.read(64)):  # not compacted since it looked
                        compact(path)
            finally:
                lock.release()


def compact(path: Path) -> None:
    """Rewrite a sweep folder's file with the latest line of each run, where it is whole (the module docstring);
    what others appended to the old file while it was rewritten is appended to the new one after. Called under the
    file's compaction lock (`append`)."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        looks = Looks(_read_all(fd, 0))
        lines = [b"%s\t%s\n" % (name, looks._data[start:end]) for name, (start, end) in looks._at.items()
                 if _checked(looks._data[start:end]) is not None]
        body = b"".join(lines)
        atomic_write(path, _HEADER + b"%d\n" % len(body) + body, durable=False)
        late = _read_all(fd, len(looks._data))  # appended to the old file meanwhile
    finally:
        os.close(fd)
    if late:
        with open(path, "ab") as fh:
            fh.write(b"\n" + late)


def _read_all(fd: int, offset: int) -> bytes:
    data = b""
    while more := os.pread(fd, 1 << 24, offset + len(data)):
        data += more
    return data


def _grown(size: int, head: bytes) -> bool:
    """Whether the file, of `size` bytes, has grown past twice the size of its lines when it was last compacted
    (its first bytes, `head`, say; 0 where it never was) and SLACK more."""
    compacted = 0
    if head.startswith(_HEADER):
        try:
            compacted = int(head[len(_HEADER):head.index(b"\n")])
        except ValueError:
            pass
    return size > 2 * compacted + SLACK


def _checked(entry: bytes) -> bytes | None:
    """The look of a line's `<CRC>\\t<look>`, None where the CRC does not match (torn, or two appends crossed)."""
    crc, tab, look = entry.partition(b"\t")
    return look if tab and crc == b"%08x" % zlib.crc32(look) else None

