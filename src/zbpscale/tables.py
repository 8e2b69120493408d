"""Tables for people: one width rule for `zbpscale status`, submit's plan and `zbpscale doctor`.

On a terminal a table is never wider than the terminal: columns of short values are given up, in an order each
table states (least useful first), until the rest fits, and columns of text fold; written to a pipe or a file,
every column is shown in full. `--json` (status) is the form for programs.
"""

from __future__ import annotations

import shutil
import sys


def terminal_width() -> int | None:
    """The terminal's width in columns, or None when stdout is not a terminal (nothing is given up)."""
    return shutil.get_terminal_size().columns if sys.stdout.isatty() else None


def fit_columns(columns: tuple[str, ...], keep: tuple[str, ...], rows: list[dict[str, str]], width: int | None,
                *, at_least: int = 3) -> list[str]:
    """The columns to show, in `columns` order: all of them, or as many as fit `width` characters in a boxed
    table (3 per column and 1 more), given up in `keep`'s order from its end, never fewer than `at_least`."""
    need = {c: max([len(c)] + [len(r[c]) for r in rows]) + 3 for c in columns}
    kept = list(keep)
    while width is not None and len(kept) > at_least and sum(need[c] for c in kept) + 1 > width:
        kept.pop()
    return [c for c in columns if c in kept]


def plural(n: int, word: str) -> str:
    """'1 run', '2 runs'."""
    return f"{n} {word}" + ("" if n == 1 else "s")


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
