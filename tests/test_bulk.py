"""bulk.spread and spread_asking against doing the work in one process: the same list whatever the slicing, one
answer from every ask in order, each slice worked where it asked, a child's exception raised in the parent, a child
that dies replaced by the parent's own work, every child reaped; paused_gc."""

from __future__ import annotations

import gc
import os

import pytest

from zbpscale import bulk

CORES = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 1
forks = pytest.mark.skipif(CORES < 2 or not hasattr(os, "fork"), reason="needs fork and 2 cores")


FORKED: list[int] = []
"""The children spread forked in the test running (`forking`)."""


@pytest.fixture
def forking(monkeypatch):
    """spread forks here even under pytest-xdist, whose workers run a thread of their own (spread's guard); the
    children it forks are noted in FORKED."""
    def fork(*args, real=bulk._fork):
        child = real(*args)
        FORKED.append(child.pid)
        return child

    FORKED.clear()
    monkeypatch.setattr(bulk.threading, "active_count", lambda: 1)
    monkeypatch.setattr(bulk, "_fork", fork)


def no_children_left() -> bool:
    """Every child spread forked has been reaped (the test process's other children, a SLURM's daemons, aside)."""
    for pid in FORKED:
        try:
            os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            continue
        return False
    return True


def squares_and_pids(part: list[int]) -> list[tuple[int, int]]:
    return [(x * x, os.getpid()) for x in part]


@forks
@pytest.mark.parametrize("count", [0, 1, 2, 7, 1001])
def test_spread_is_the_work_done_in_one_process(forking, count):
    items = list(range(count))
    done = bulk.spread(squares_and_pids, items, least=1)
    assert [v for v, _ in done] == [x * x for x in items]
    pids = {pid for _, pid in done}
    assert len(pids) == min(count, CORES * bulk.PER_CORE, bulk.MAX_PROCESSES) or count == 0  # a process a slice
    assert len(FORKED) == max(0, len(pids) - 1)
    assert os.getpid() in pids or count == 0  # the parent did the first slice itself
    assert no_children_left()


def test_spread_does_not_fork_beside_another_thread_or_for_few_items(monkeypatch):
    monkeypatch.setattr(bulk.threading, "active_count", lambda: 2)
    assert bulk.processes(10**6, least=1) == 1
    monkeypatch.setattr(bulk.threading, "active_count", lambda: 1)
    assert bulk.processes(bulk.LEAST - 1) == 1
    assert {pid for _, pid in bulk.spread(squares_and_pids, list(range(50)))} == {os.getpid()}


@forks
def test_a_child_s_exception_is_raised_in_the_parent_and_every_child_reaped(forking):
    def work(part):
        if os.getpid() != parent:
            raise ValueError(f"bad item {part[0]}")
        return part

    parent = os.getpid()
    with pytest.raises(ValueError, match="bad item"):
        bulk.spread(work, list(range(10)), least=1)
    assert FORKED and no_children_left()


@forks
def test_a_child_that_dies_has_its_slice_done_by_the_parent(forking):
    def work(part):
        if os.getpid() != parent:
            os._exit(9)  # killed before it answers
        return [x + 1 for x in part]

    parent = os.getpid()
    assert bulk.spread(work, list(range(10)), least=1) == list(range(1, 11))
    assert no_children_left()


@forks
def test_the_parent_s_own_exception_leaves_no_child_behind(forking):
    """Every child blocked on an answer the parent will not read ends once the parent closes its pipe: with two
    children or more (PER_CORE per core), each inherited its elder siblings' pipes, held them open, and the parent
    waited on a child blocked for ever."""
    assert bulk.processes(10, least=1) >= 3

    def work(part):
        if os.getpid() == parent:
            raise KeyError("parent")
        return list(range(100_000))  # more than a pipe holds: a child blocked writing until its pipe is closed

    parent = os.getpid()
    with pytest.raises(KeyError):
        bulk.spread(work, list(range(10)), least=1)
    assert no_children_left()


READ: dict[int, int] = {}
"""What `ask_pids` read of each item, kept in the memory of the process that asked (as status's snapshots are)."""


def ask_pids(part: list[int]) -> list[tuple[int, int]]:
    READ.update({x: x * x for x in part})
    return [(x, os.getpid()) for x in part]


def work_with(part: list[int], told: dict) -> list[tuple]:
    """Each item's square as its asking process read it (a KeyError in another process), the answer's word for it,
    and this process."""
    return [(READ[x], told["pid of"][x], os.getpid()) for x in part]


@forks
@pytest.mark.parametrize("count", [1, 7, 1001])
def test_spread_asking_asks_once_in_item_order_and_works_where_it_asked(forking, count):
    """Against doing it in one process: the answer made once, in the parent, from every slice's asks in the items'
    order; each slice's work in the process that asked for it (what it read there is there) and told the answer."""
    items, answers = list(range(count)), []

    def answer(asked):
        answers.append(os.getpid())
        assert [x for x, _ in asked] == items
        return {"pid of": dict(asked)}

    done, told = bulk.spread_asking(ask_pids, answer, work_with, items, least=1)
    assert answers == [os.getpid()] and told["pid of"].keys() == set(items)
    assert [square for square, _, _ in done] == [x * x for x in items]
    assert all(asked_in == worked_in for _, asked_in, worked_in in done)
    assert len({pid for _, _, pid in done}) == min(count, CORES * bulk.PER_CORE, bulk.MAX_PROCESSES)
    assert no_children_left()


@forks
@pytest.mark.parametrize("dies", ["before it asks", "after it asked"])
def test_spread_asking_does_the_slice_of_a_child_that_dies_in_the_parent(forking, dies):
    parent = os.getpid()

    def ask(part):
        if os.getpid() != parent and dies == "before it asks":
            os._exit(9)
        return ask_pids(part)

    def work(part, told):
        if os.getpid() != parent:
            os._exit(9)
        return [(x, told) for x in part]

    done, told = bulk.spread_asking(ask, lambda asked: len(asked), work, list(range(10)), least=1)
    assert done == [(x, 10) for x in range(10)] and told == 10
    assert FORKED and no_children_left()


@forks
@pytest.mark.parametrize("where", ["a child's ask", "the parent's answer", "a child's work"])
def test_spread_asking_raises_an_exception_in_the_parent_and_leaves_no_child(forking, where):
    """A child's exception, asking or working, is raised in the parent; the parent's own (its answer) too, while
    every child waits to be told: each ends once the parent closes its pipes, and is reaped."""
    parent = os.getpid()

    def ask(part):
        if os.getpid() != parent and where == "a child's ask":
            raise ValueError(f"bad ask {part[0]}")
        return [0] * 100_000  # more than a pipe holds

    def answer(asked):
        if where == "the parent's answer":
            raise KeyError("answer")
        return len(asked)

    def work(part, told):
        if os.getpid() != parent and where == "a child's work":
            raise ValueError(f"bad work {part[0]}")
        return part

    with pytest.raises(KeyError if where == "the parent's answer" else ValueError):
        bulk.spread_asking(ask, answer, work, list(range(10)), least=1)
    assert len(FORKED) >= 2 and no_children_left()


def test_paused_gc_restores_the_collector_as_it_was():
    assert gc.isenabled()
    with bulk.paused_gc():
        assert not gc.isenabled()
    assert gc.isenabled()
    gc.disable()
    try:
        with bulk.paused_gc():
            assert not gc.isenabled()
        assert not gc.isenabled()
    finally:
        gc.enable()
