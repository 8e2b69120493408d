"""argparse types for the numbers the commands take: a value out of range is argparse's one-line usage error naming
the option (`zbpscale submit: error: argument --max-parallel: an integer >= 1, got '-1'`), before anything runs or is
kept. Torch-free."""

from __future__ import annotations

import argparse
import math
import os
from typing import Callable


def at_least(low: float, kind: type = int, *, most: float = math.inf) -> Callable[[str], float]:
    """The type of an option whose value is an int (or, `kind` float, a finite number) of at least `low` (and at
    most `most`)."""
    words = f"{'an integer' if kind is int else 'a number'} >= {low:g}" + (f" and <= {most:g}" if most < math.inf
                                                                            else "")

    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{words}, got {text!r}") from None
        if not (math.isfinite(value) and low <= value <= most):
            raise argparse.ArgumentTypeError(f"{words}, got {text!r}")
        return value

    parse.__name__ = f"{kind.__name__} >= {low:g}"
    return parse


def value_or_positional(args: argparse.Namespace, positional: str, option: str, const: str, *, needs: str) -> None:
    """An option whose value is optional (nargs="?", `const` when bare) takes the word after it, so that
    `zbpscale collect --with-ckpt sweeps/x.py` gave argparse's "the following arguments are required": when the
    positional is missing and the option's value names a file or folder that exists, that is the positional and the
    option was given bare. A positional still missing is a ConfigError saying what the command `needs`."""
    from zbpscale.errors import ConfigError

    value = getattr(args, option)
    if getattr(args, positional) is None and value not in (None, const) and os.path.exists(value):
        setattr(args, positional, value)
        setattr(args, option, const)
    if getattr(args, positional) is None:
        raise ConfigError(f"no {positional} given", hint=needs)


def folder_path(text: str) -> str:
    """A folder's path, not '' (which wrote a prep's shards, or a run, into the current folder)."""
    if not text.strip():
        raise argparse.ArgumentTypeError("a folder's path, got ''")
    return text
