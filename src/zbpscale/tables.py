"""Tables for people: one width rule for `zbpscale status`, submit's plan, `zbpscale doctor` and every --help
(text.HelpFormatter fills help to the same width).

A table is never wider than the terminal, or than $COLUMNS when written to a pipe or a file (80 columns when
neither says): columns whose every cell is empty are given up first, then columns of short values in an order
each table states (least useful first), until the rest fits, and columns of text fold. Status's tables are boxed
on a terminal and plain lines elsewhere. `--json` (status) is the form for programs. Prose under a table (notes,
totals, a legend) wraps at the same width (`wrap`), its later lines indented under its first.
"""

from __future__ import annotations

import functools
import shutil
import sys
from itertools import repeat
from operator import itemgetter
from typing import Callable, Container


def terminal_width() -> int:
    """The width output is fitted to, in columns: the terminal's; $COLUMNS when stdout is a pipe or a file (or
    $COLUMNS set on a terminal); 80 when neither says (shutil.get_terminal_size)."""
    return shutil.get_terminal_size().columns


def wrap(text: str, prefix: str = "", *, width: int | None = None) -> str:
    """`prefix` + `text` in lines of at most `width` (terminal_width) characters, each line after the first
    indented under the text (2 spaces without a prefix); a word longer than a line (a path, a command) stays whole.
    The text's own line breaks are kept."""
    width = width or terminal_width()
    if text and len(prefix) + len(text) <= width and text.isprintable() and not text.endswith(" "):
        return prefix + text  # what fill gives a line that fits: 20,000 notes under a large sweep's status
    import textwrap

    indent = " " * (len(prefix) or 2)
    return "\n".join(textwrap.fill(line, width, initial_indent=prefix if i == 0 else indent, subsequent_indent=indent,
                                   break_long_words=False, break_on_hyphens=False)
                     for i, line in enumerate(text.splitlines() or [""]))


def on_terminal() -> bool:
    """Whether stdout is a terminal: tables are boxed there, plain lines elsewhere."""
    return sys.stdout.isatty()


def fit_columns(columns: tuple[str, ...], keep: tuple[str, ...], rows: list[dict[str, str]], width: int, *,
                at_least: int = 3, boxed: bool = True, wide: dict[str, int] | None = None) -> list[str]:
    """The columns to show, in `columns` order: all of them, or as many as fit `width` characters, given up
    first those whose every cell is empty, then in `keep`'s order from its end, never fewer than `at_least`. A
    boxed table takes 3 characters per column and 1 more; plain lines 2 between columns. `wide`: the columns'
    `widths`, where the caller has them (measured once for the fit and the lines: status's 10,000 rows)."""
    pad, edge = (3, 1) if boxed else (2, -2)
    wide = wide or widths(columns, rows)
    need = {c: wide[c] + pad for c in columns}
    filled = {c for c in keep if any(map(itemgetter(c), rows))}
    kept = [c for c in keep if c in filled] + [c for c in keep if c not in filled]
    while len(kept) > at_least and sum(need[c] for c in kept) + edge > width:
        kept.pop()
    return [c for c in columns if c in kept]


def plain_lines(columns: list[str], rows: list[dict[str, str]], left: set[str] | frozenset[str] = frozenset(), *,
                wide: dict[str, int] | None = None) -> list[str]:
    """A table as plain text lines (pipes, files, logs): the header, then each row, columns two spaces apart,
    words (`left`) left-aligned and numbers right-aligned, no line ending in spaces (`wide`: as fit_columns')."""
    wide = wide or widths(columns, rows)
    every = [{c: c for c in columns}, *rows]  # column by column: 10,000 rows of status, 0.12 -> 0.09 s
    cut = [map(str.ljust if c in left else str.rjust, map(itemgetter(c), every), repeat(wide[c])) for c in columns]
    return [line.rstrip() for line in map("  ".join, zip(*cut))] if columns else ["" for _ in every]


def widths(columns: list[str] | tuple[str, ...], rows: list[dict[str, str]]) -> dict[str, int]:
    """Each column's width: its widest cell, or its header."""
    return {c: max(len(c), max(map(len, map(itemgetter(c), rows)), default=0)) for c in columns}


def boxed(columns: list[str], rows: list[dict[str, str]], left: set[str] | frozenset[str] = frozenset(), *,
          style: Callable[[int, str], str | None] = lambda row_index, column: None, color: bool = False,
          width: int | None = None, wide: dict[str, int] | None = None, styled: Container[str] | None = None
          ) -> list[str]:
    """The same table boxed for a terminal, as lines: a heavy rule under the bold header, a cell's text a space
    from its bars; `style(i, column)` a Rich style name for a cell of row i (None: as it is), drawn as ANSI codes
    where `color` (`color_on`), asked of the `styled` columns alone where they are given (status: its states'). At
    most `width` wide: where the columns fit_columns keeps do not fit, the widest is narrowed, its longer cells cut
    with an ellipsis (`wide`: as fit_columns'). Written as text, not as a rich Table, which took 6.3 s for the
    10,000 rows of a large sweep's status; drawn column by column, as plain_lines."""
    given = wide or widths(columns, rows)
    wide = {c: given[c] for c in columns}  # narrowed here
    while width and sum(wide.values()) + 3 * len(columns) + 1 > width and max(wide.values()) > 1:
        wide[max(wide, key=wide.get)] -= 1

    def cell(text: str, c: str, how: str | None) -> str:
        text = text if len(text) <= wide[c] else text[:wide[c] - 1] + "…"
        pad = " " * (wide[c] - len(text))
        text = painted(text, how) if how and color else text
        return f" {text}{pad} " if c in left else f" {pad}{text} "

    def column(c: str) -> list[str]:  # each row's cell of column c
        w, cells = wide[c], map(itemgetter(c), rows)
        hows = [style(i, c) for i in range(len(rows))] if color and (styled is None or c in styled) else []
        if any(hows):
            return [cell(text, c, how) for text, how in zip(cells, hows)]
        cut = [text if len(text) <= w else text[:w - 1] + "…" for text in cells]
        return [f" {text} " for text in map(str.ljust if c in left else str.rjust, cut, repeat(w))]

    def rule(first: str, line: str, between: str, last: str) -> str:
        return first + between.join(line * (wide[c] + 2) for c in columns) + last

    body = zip(*map(column, columns)) if columns else repeat((), len(rows))  # each row's cells
    return [rule("┏", "━", "┳", "┓"), "┃" + "┃".join(cell(c, c, "bold") for c in columns) + "┃",
            rule("┡", "━", "╇", "┩"), *("│" + "│".join(line) + "│" for line in body), rule("└", "─", "┴", "┘")]


def color_on() -> bool:
    """Whether to draw in color: Rich's answer for this terminal (none with NO_COLOR set, TERM=dumb, or no terminal;
    FORCE_COLOR set, yes)."""
    from rich.console import Console

    console = Console()
    return console.color_system is not None and not console.no_color


@functools.lru_cache(maxsize=None)
def _codes(how: str) -> tuple[str, str]:
    from rich.style import Style

    start, _, end = Style.parse(how).render("\0").partition("\0")
    return start, end


def painted(text: str, how: str) -> str:
    """`text` in a Rich style (`bold yellow`) as ANSI codes, line by line."""
    start, end = _codes(how)
    return "\n".join(start + line + end for line in text.split("\n"))


def plural(n: int, word: str) -> str:
    """'1 run', '2 runs'."""
    return f"{n} {word}" + ("" if n == 1 else "s")


ALIKE = 3
"""Runs that need the same words are named one by one up to this many; past it, in one line that names this many
(`named`): a large sweep's status, submit and cancel say a thing of 10,000 runs in a line."""


def named(names: list[str], shown: int = ALIKE) -> str:
    """Some names in a line: 'a, b, c (+9,997 more)'."""
    more = len(names) - shown
    return ", ".join(names[:shown]) + (f" (+{more:,} more)" if more > 0 else "")


def seed_count(seeds) -> str:
    """How many seeds a study, a plan or a figure has, in words: 'one seed', '3 seeds'."""
    n = len(set(seeds))
    return "one seed" if n == 1 else f"{n} seeds"


def fmt_tokens(n: float) -> str:
    """A token count in a table cell: 20k, 1.2M, 3.05B."""
    return f"{n / 1e9:.2f}B" if n >= 1e9 else f"{n / 1e6:.1f}M" if n >= 1e6 else f"{n / 1e3:.0f}k"


def age(seconds: float) -> str:
    """A duration in a table cell or a message: 45s, 12m, 3.5h."""
    if seconds < 120:
        return f"{seconds:.0f}s"
    return f"{seconds / 60:.0f}m" if seconds < 7200 else f"{seconds / 3600:.1f}h"
