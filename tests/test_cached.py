"""zbpscale.cached: what functools.cached_property does (the reference, side by side), less its lock."""

from __future__ import annotations

import dataclasses
import functools
import threading

import pytest

from zbpscale.cached import cached


def make(kind):
    @dataclasses.dataclass(frozen=True)
    class Box:
        x: int
        calls: list = dataclasses.field(default_factory=list, compare=False)

        @kind
        def double(self) -> int:
            """Twice x."""
            self.calls.append(self.x)
            if self.x < 0:
                raise ValueError("negative")
            return 2 * self.x

        shifted = kind(lambda self: self.x + 1)

    return Box


@pytest.mark.parametrize("kind", [cached, functools.cached_property], ids=["cached", "cached_property"])
def test_computed_once_per_instance_on_a_frozen_dataclass(kind):
    Box = make(kind)
    a, b = Box(3), Box(5)
    assert (a.double, a.double, b.double, a.shifted) == (6, 6, 10, 4)
    assert a.calls == [3] and b.calls == [5]  # once each, kept in the instance
    assert a.__dict__["double"] == 6 and "double" not in Box(7).__dict__
    assert Box.double.__doc__ == "Twice x." and isinstance(Box.double, kind)
    bad = Box(-1)
    for _ in range(2):  # an exception is not kept: the next read computes again
        with pytest.raises(ValueError):
            bad.double
    assert bad.calls == [-1, -1]


def test_it_takes_no_lock():
    """functools.cached_property of Python 3.10 and 3.11 takes an RLock on every first read (status: 14 a run)."""
    Box = make(cached)
    assert not any(isinstance(v, type(threading.RLock())) for v in vars(Box.__dict__["double"]).values())
    assert Box(1).double == 2
