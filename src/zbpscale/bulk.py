"""Work on many runs at once, as status does for a 10,000-run sweep: spread over this machine's cores by fork, with
Python's cycle collector paused. Torch-free.

`spread(work, items)` is `work(items)` for a function from a list to a list of the same length: the items cut in
contiguous slices (PER_CORE a core), each slice done in a forked child (which sees everything the parent had read,
without a copy) and sent back pickled, the parent doing the first slice itself. Only on Linux, in a process with
no other thread (a fork copies one thread, and a lock another held stays held in the child), and only when each
process gets at least `least` items (a fork and its pickling cost a few milliseconds); else, and when a child dies
without its answer, the parent does the work itself. An exception a child raises is raised in the parent.

`spread_asking(ask, answer, work, items)` is the same with one question on the way: each process first reads what
the parent must know of its slice (`ask(part)`, a list), the parent makes one `answer` of them all, in the items'
order, and each process then works with it (`work(part, answer)`), what `ask` read still in its memory. Status
asks this way for the one view of the runs' jobs: the attempts files it is made of are read in every process, not
one after another in the parent.

`paused_gc()`: a block that makes many objects and no reference cycles (reading thousands of small JSON files) runs
without the cycle collector, whose passes over every live object grow with the objects made; it resumes after.
"""

from __future__ import annotations

import gc
import os
import pickle
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

LEAST = 1000
"""Items per process below which a fork does not pay (status: about 0.1 ms a run against ~10 ms a child)."""

MAX_PROCESSES = 8

PER_CORE = 2
"""Processes per core: reading many small files, a process waits on the disk when the kernel's caches are cold, and
a second one on the core decodes meanwhile (status of 10,000 runs, caches dropped: rows 2.18 -> 1.79 s on 2 cores;
warm, the same; tools/bench_status.py, 2026-12-05)."""


def processes(count: int, least: int | None = None) -> int:
    """How many processes `spread` uses for `count` items (`least`: LEAST): 1 where it would not fork."""
    if sys.platform != "linux" or threading.active_count() > 1:
        return 1
    cores = len(os.sched_getaffinity(0))
    return max(1, min(cores * PER_CORE, MAX_PROCESSES, count // max(1, least or LEAST)))


def spread(work: Callable[[list], list], items: list, *, least: int | None = None) -> list:
    """`work(items)`, the items' slices done in forked processes (see the module docstring)."""
    return spread_asking(lambda part: [], lambda asked: None, lambda part, _: work(part), items, least=least)[0]


def spread_asking(ask: Callable[[list], list], answer: Callable[[list], Any], work: Callable[[list, Any], list],
                  items: list, *, least: int | None = None) -> tuple[list, Any]:
    """(`work(items, told)`, told) where told = `answer(ask(items))`, each slice's ask and work done in the same
    forked process (see the module docstring)."""
    n = processes(len(items), least)
    if n == 1:
        told = answer(ask(items))
        return work(items, told), told
    bounds = [len(items) * k // n for k in range(n + 1)]
    slices = [items[bounds[k]:bounds[k + 1]] for k in range(n)]
    children: list[_Child] = []
    try:
        for part in slices[1:]:
            children.append(_fork(ask, work, part, [fd for c in children for fd in (c.up, c.down)]))
        asked = list(ask(slices[0]))
        for child, part in zip(children, slices[1:]):
            got = _received(child.up)
            if got is None:  # it died before it asked: asked here, and its work done here
                child.lost = True
                asked += ask(part)
            elif got[0] == "error":
                raise got[1]
            else:
                asked += got[1]
        told = answer(asked)
        message = pickle.dumps(("ok", told), protocol=pickle.HIGHEST_PROTOCOL)
        for child in children:
            if not child.lost:
                try:
                    _send(child.down, message)
                except OSError:  # it died since it asked
                    child.lost = True
            os.close(child.down)
            child.down = -1
        done = work(slices[0], told)
        for child, part in zip(children, slices[1:]):
            got = None if child.lost else _received(child.up)
            if got is not None and got[0] == "error":
                raise got[1]
            done += work(part, told) if got is None else got[1]  # a child that died without its answer: done here
        return done, told
    finally:  # every child reaped, whatever happened here (a closed pipe ends a child still writing or waiting)
        for child in children:
            for fd in (child.up, child.down):
                if fd >= 0:
                    os.close(fd)
            os.waitpid(child.pid, 0)


@dataclass
class _Child:
    pid: int
    up: int
    """The read end of the pipe it answers on."""
    down: int
    """The write end of the pipe it is told on (-1 once closed)."""
    lost: bool = False
    """It died before it answered: its slice is done in the parent."""


def _fork(ask: Callable[[list], list], work: Callable[[list, Any], list], part: list, siblings: list[int]) -> _Child:
    """A child for `part`: it sends ("ok", ask(part)), waits to be told the answer, then sends ("ok", work(part,
    answer)); ("error", the exception) instead of either where it raised. `siblings`: the parent's ends of the pipes
    of the children forked before it, which it closes (held open here, they kept a sibling that the parent stopped
    reading, after an error, blocked on a full pipe for ever, or waiting to be told: the parent waited on it)."""
    up_read, up_write = os.pipe()
    down_read, down_write = os.pipe()
    pid = os.fork()
    if pid:
        os.close(up_write)
        os.close(down_read)
        return _Child(pid, up_read, down_write)
    status = 0
    try:  # the child: answer, then leave without running the parent's exit handlers or flushing its buffers
        for fd in (up_read, down_write, *siblings):
            os.close(fd)
        asked = _outcome(ask, part)
        _send(up_write, _pickled(asked))
        told = _received(down_read) if asked[0] == "ok" else None
        if told is not None:
            _send(up_write, _pickled(_outcome(work, part, told[1])))
    except BaseException:  # noqa: BLE001 - the parent sees no answer and does the work itself
        status = 1
    finally:
        os._exit(status)


def _outcome(function: Callable, *args) -> tuple[str, Any]:
    try:
        return "ok", function(*args)
    except BaseException as err:  # noqa: BLE001 - raised again in the parent
        return "error", err


def _pickled(outcome: tuple[str, Any]) -> bytes:
    try:
        return pickle.dumps(outcome, protocol=pickle.HIGHEST_PROTOCOL)
    except Exception:  # noqa: BLE001 - an exception that does not pickle: its words
        if outcome[0] != "error":
            raise
        err = outcome[1]
        return pickle.dumps(("error", RuntimeError(f"{type(err).__name__}: {err}")))


def _send(fd: int, data: bytes) -> None:
    """One message on a pipe: its length, then its bytes."""
    view = memoryview(len(data).to_bytes(8, "little") + data)
    while view:
        view = view[os.write(fd, view):]


def _received(fd: int) -> tuple[str, Any] | None:
    """The next message on a pipe, unpickled; None when the pipe ends first (its writer died or closed it)."""
    head = _read(fd, 8)
    data = None if head is None else _read(fd, int.from_bytes(head, "little"))
    return None if data is None else pickle.loads(data)


def _read(fd: int, size: int) -> bytes | None:
    chunks = []
    while size:
        chunk = os.read(fd, min(size, 1 << 20))
        if not chunk:
            return None
        chunks.append(chunk)
        size -= len(chunk)
    return b"".join(chunks)


@contextmanager
def paused_gc() -> Iterator[None]:
    """The block run with the cycle collector off (as it was before, after); see the module docstring."""
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()
