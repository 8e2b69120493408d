"""Words for people, once each: choosing runs by name patterns, a did-you-mean for a mistyped name, and a path as
one would type it.

Torch-free, and imports only zbpscale.errors: every command and the sweep loader use it.
"""

from __future__ import annotations

import difflib
import fnmatch
from pathlib import Path
from typing import Callable, Iterable, TypeVar

from zbpscale.errors import ConfigError

T = TypeVar("T")


def patterns(text: str | None) -> list[str]:
    """The comma-separated shell patterns of an option such as --only or --with-ckpt ('s1b-*, *-bp')."""
    return [p.strip() for p in (text or "").split(",") if p.strip()]


def matches(name: str, pats: Iterable[str]) -> bool:
    """Whether `name` matches one of the shell patterns (case-sensitive, as run names are)."""
    return any(fnmatch.fnmatchcase(name, p) for p in pats)


def select(items: list[T], only: str | None, *, name: Callable[[T], str] = lambda item: item.name,
           option: str = "--only") -> list[T]:
    """The items whose name matches one of the comma-separated patterns of `only` (all of them when it is empty);
    a ConfigError, listing the names, when it matches none."""
    pats = patterns(only)
    if not pats:
        return items
    chosen = [item for item in items if matches(name(item), pats)]
    if not chosen:
        raise ConfigError(f"{option} {only!r} matches no run", hint="runs: " + ", ".join(name(i) for i in items))
    return chosen


def closest(word: str, known: Iterable[str]) -> str | None:
    """The known word closest to a mistyped `word`, or None when none is close."""
    close = difflib.get_close_matches(str(word), list(known), n=1)
    return close[0] if close else None


def did_you_mean(word: str, known: Iterable[str], *, say: Callable[[str], str] = lambda w: w) -> str | None:
    """'did you mean X?' for the known word closest to `word` (`say` words it: e.g. `--set X=1`), or None."""
    close = closest(word, known)
    return f"did you mean {say(close)}?" if close else None


def shown_path(path) -> str:
    """A path as the user would type it in a command: relative to the current folder where it lies below it."""
    path = Path(path).absolute()
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)
