"""Words for people, once each: choosing runs by name patterns, a did-you-mean for a mistyped name, a path as
one would type it, and every command's --help filled to the width of the terminal.

Torch-free, and imports only zbpscale.errors and zbpscale.tables: every command and the sweep loader use it.
"""

from __future__ import annotations

import argparse
import difflib
import fnmatch
import re
import textwrap
from pathlib import Path
from typing import Callable, Iterable, TypeVar

from zbpscale.errors import ConfigError
from zbpscale.tables import named, terminal_width

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
        raise ConfigError(f"{option} {only!r} matches no run", hint=runs_hint([name(i) for i in items]))
    return chosen


def runs_hint(names: list[str], asked: str | None = None) -> str:
    """A hint that names the runs there are (the first HINTED, then how many more: a sweep may have 10,000), after
    the one closest to a mistyped run name (`asked`)."""
    close = closest(asked, names) if asked is not None else None
    return (f"did you mean {close}? " if close else "") + "runs: " + named(names, shown=HINTED)


HINTED = 20
"""Run names a hint lists before it says how many more there are."""


def closest(word: str, known: Iterable[str]) -> str | None:
    """The known word closest to a mistyped `word`, or None when none is close."""
    close = difflib.get_close_matches(str(word), list(known), n=1)
    return close[0] if close else None


def did_you_mean(word: str, known: Iterable[str], *, say: Callable[[str], str] = lambda w: w) -> str | None:
    """'did you mean X?' for the known word closest to `word` (`say` words it: e.g. `--set X=1`), or None."""
    close = closest(word, known)
    return f"did you mean {say(close)}?" if close else None


def shown_path(path) -> str:
    """A path as the user would type it in a command: relative to the current folder where it lies below it, quoted
    where the shell would split or expand it (a space, a quote, a letter beyond ASCII), so that a line pasted runs."""
    import shlex

    path = Path(path).absolute()
    try:
        return shlex.quote(str(path.relative_to(Path.cwd())))
    except ValueError:
        return shlex.quote(str(path))


# ------------------------------------------------------------------------------------------------ --help
LABEL = re.compile(r"[a-z]+( [a-z]+)?:( |$)")
"""A line that opens a paragraph of its own: a label of one or two words ('examples:', 'exit status: 0 ...')."""


def fill_help(text: str, width: int) -> list[str]:
    """A description or epilog as lines of at most `width` columns. Prose (lines in a row that begin with no
    space; a LABEL line starts a new run) is refilled; an indented line (an example) is kept as written, and
    only a line wider than `width` is folded, under a deeper indent: the examples are written to fit 78 columns
    (an 80-column terminal less argparse's margin), so they stay whole there."""
    lines, prose = [], []

    def flush():
        lines.extend(textwrap.wrap(" ".join(prose), width, break_long_words=False, break_on_hyphens=False))
        prose.clear()

    for line in text.splitlines():
        if not line.strip() or line[0] == " " or LABEL.match(line):
            flush()
        if not line.strip():
            lines.append("")
        elif line[0] == " ":
            indent = line[:len(line) - len(line.lstrip())]
            lines += [line] if len(line) <= width else textwrap.wrap(
                line.strip(), width, initial_indent=indent, subsequent_indent=indent + "    ",
                break_long_words=False, break_on_hyphens=False)
        else:
            prose.append(line.strip())
    flush()
    return lines


class HelpFormatter(argparse.HelpFormatter):
    """argparse's help, as wide as tables.terminal_width less argparse's margin of 2 (the terminal's width, or
    $COLUMNS when piped, else 80), its description and epilog filled by `fill_help`. Every command's parser
    uses it (cli.py, and the trainer's)."""

    def __init__(self, prog: str, **kwargs):
        super().__init__(prog, **{"width": terminal_width() - 2, **kwargs})

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        return "\n".join(indent + line if line else "" for line in fill_help(text, width - len(indent)))
