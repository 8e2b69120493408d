"""Work on many runs at once, as status does for a 10,000-run sweep: spread over this machine's cores by fork, with
Python's cycle collector paused. Torch-free.

`spread(work, items)` is `work(items)` for a function from a list to a list of the same length: the items cut in
contiguous slices (PER_CORE a core), each slice done in a forked child (which sees everything the parent had read,
without a copy) and sent back pickled, the parent doing the first slice itself. Only on Linux, in a process with
no other thread (a fork copies one thread, and a lock another held stays held in the child), and only when each
process gets at least `least` items (a fork and its pickling cost a few milliseconds); else, and when a child dies
without its answer, the parent does the work itself. An exception a child raises is raised in the parent.

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
    n = processes(len(items), least)
    if n == 1:
        return work(items)
    bounds = [len(items) * k // n for k in range(n + 1)]
    slices = [items[bounds[k]:bounds[k + 1]] for k in range(n)]
    children: list[tuple[int, int]] = []
    try:
        for part in slices[1:]:
            children.append(_fork(work, part, [read for _, read in children]))
        done = work(slices[0])
        for (pid, read), part in zip(children, slices[1:]):
            with os.fdopen(read, "rb", closefd=False) as fh:
                data = fh.read()
            kind, value = pickle.loads(data) if data else ("lost", None)
            if kind == "error":
                raise value
            done += value if kind == "ok" else work(part)  # a child that died without its answer: do it here
        return done
    finally:  # every child reaped, whatever happened here (a closed pipe ends a child still writing)
        for pid, read in children:
            os.close(read)
            os.waitpid(pid, 0)


def _fork(work: Callable[[list], list], part: list, siblings: list[int]) -> tuple[int, int]:
    """(pid, the read end of its pipe) of a child that sends back ("ok", work(part)) or ("error", the exception);
    `siblings`: the read ends of the children forked before it, which it closes (held open here, they kept a sibling
    that the parent stopped reading, after an error, blocked on a full pipe for ever: the parent waited on it)."""
    read, write = os.pipe()
    pid = os.fork()
    if pid:
        os.close(write)
        return pid, read
    status = 0
    try:  # the child: answer, then leave without running the parent's exit handlers or flushing its buffers
        for fd in (read, *siblings):
            os.close(fd)
        try:
            answer = pickle.dumps(("ok", work(part)), protocol=pickle.HIGHEST_PROTOCOL)
        except BaseException as err:  # noqa: BLE001 - raised again in the parent
            try:
                answer = pickle.dumps(("error", err))
            except Exception:  # noqa: BLE001 - an exception that does not pickle: its words
                answer = pickle.dumps(("error", RuntimeError(f"{type(err).__name__}: {err}")))
        with os.fdopen(write, "wb") as fh:
            fh.write(answer)
    except BaseException:  # noqa: BLE001 - the parent sees no answer and does the work itself
        status = 1
    finally:
        os._exit(status)


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
