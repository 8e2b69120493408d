"""`cached`: functools.cached_property without its lock. Torch-free.

A value computed on its first read and kept in the instance's __dict__, where later reads find it without a call:
what functools.cached_property does, less the lock Python 3.10 and 3.11 take on every first read (3.12 dropped
it). Status makes some 14 of them for each of 10,000 runs, one thread each process: the lock was a tenth of its
rows' time (tools/bench_status.py). Like cached_property, it works on frozen dataclasses (it writes __dict__, not
the attribute) and not on classes with __slots__.
"""

from __future__ import annotations

from typing import Any, Callable


class cached:  # noqa: N801 - named as the decorator it stands for
    """A property computed once per instance (see the module docstring)."""

    def __init__(self, func: Callable[[Any], Any]):
        self.func = func
        self.name = func.__name__
        self.__doc__ = func.__doc__

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __get__(self, obj: Any, owner: type | None = None) -> Any:
        if obj is None:
            return self
        value = obj.__dict__[self.name] = self.func(obj)
        return value
