"""`zbpscale status --goodput`: where the wall time held by each run's jobs went, and the sweep's total.

    zbpscale status jobs/ladder --goodput           one row per run and a sweep total row
    zbpscale status jobs/ladder --goodput --json    the same rows in seconds, for scripts

From the run folders alone (run/goodput.py; the scheduler is not asked): held time, goodput (training / held) and
the split of held time into start-up, checkpoint saves, lost work (steps redone) and other, in % of held; the queue
wait and the median restart (an interruption -> the next attempt's first step) as durations beside it. The line
under each table gives the sweep's time in each part.
"""

from __future__ import annotations

import statistics
from pathlib import Path

from zbpscale.jobs.runs import Run
from zbpscale.run.goodput import BUCKETS, Goodput, read
from zbpscale.run.snapshot import through_digests
from zbpscale.tables import age, boxed, color_on, fit_columns, on_terminal, plain_lines, terminal_width, wrap

WORDS = {"training": "training", "startup": "start-up", "saves": "saves", "lost": "lost", "other": "other"}
"""How the tables name each part of held time (run/goodput.py's BUCKETS)."""
TOTAL = "all"
"""The name of a sweep's total row."""


def rows(runs: list[Run]) -> list[dict]:
    """One row per run with a folder, then the sweep's total: plain JSON types, seconds."""
    looks = through_digests(r.run_dir for r in runs if Path(r.run_dir).is_dir())
    found = [(r.name, read(looks.pop(r.run_dir))) for r in runs if r.run_dir in looks]  # each look let go once read
    total = Goodput.total([g for _, g in found])
    return [_row(name, g) for name, g in found] + ([_row(TOTAL, total)] if found else [])


def _row(name: str, g: Goodput) -> dict:
    return {"run": name, "attempts": g.attempts, "held_s": g.held, "goodput": g.fraction,
            **{f"{b}_s": getattr(g, b) for b in BUCKETS}, "queue_s": g.queue, "restarts": len(g.restarts),
            "restart_median_s": statistics.median(g.restarts) if g.restarts else None}


def _pct(row: dict, part: str) -> str:
    return f"{100 * row[part] / row['held_s']:.1f}%" if row["held_s"] > 0 else ""


COLUMNS = (  # (header, cell, keep: lower is kept longer on a narrow terminal)
    ("run", lambda r: r["run"], 0),
    ("held", lambda r: age(r["held_s"]), 2),
    ("goodput", lambda r: "" if r["goodput"] is None else f"{100 * r['goodput']:.1f}%", 1),
    ("start-up", lambda r: _pct(r, "startup_s"), 3),
    ("saves", lambda r: _pct(r, "saves_s"), 4),
    ("lost", lambda r: _pct(r, "lost_s"), 5),
    ("other", lambda r: _pct(r, "other_s"), 6),
    ("queue", lambda r: age(r["queue_s"]), 7),
    ("attempts", lambda r: str(r["attempts"]), 9),
    ("restart", lambda r: "" if r["restart_median_s"] is None else age(r["restart_median_s"]), 8),
)
LEFT = {"run"}


def title(name: str) -> str:
    return (f"goodput of sweep {name}: training / held; held: each attempt's start -> end (the queue wait is beside, "
            "not held); start-up to other: % of held")


def footer(rows: list[dict]) -> str:
    """The sweep's time in each part of held time (seconds, minutes or hours: tables.age)."""
    total = rows[-1]
    parts = ", ".join(f"{WORDS[b]} {age(total[f'{b}_s'])}" for b in BUCKETS)
    return f"{TOTAL}: held {age(total['held_s'])} = {parts}; queue {age(total['queue_s'])} beside"


def _cells(rows: list[dict]) -> list[dict[str, str]]:
    return [{h: cell(r) for h, cell, _ in COLUMNS} for r in rows]


def _fit(shown: list[dict[str, str]], width: int, *, boxed: bool) -> list[str]:
    """The headers of the columns that fit `width` (given up in COLUMNS' keep order)."""
    headers = tuple(h for h, _, _ in COLUMNS)
    return fit_columns(headers, tuple(h for h, _, _ in sorted(COLUMNS, key=lambda c: c[2])), shown, width, boxed=boxed)


def text(sweeps: list[tuple[str, list[dict]]], *, box: bool = False, color: bool = False) -> str:
    """Each sweep's table, the columns that fit tables.terminal_width: plain lines (pipes, files, logs) or boxed for
    a terminal (`box`; the total's row in bold where `color`), its title and footer wrapped to the same width."""
    width, lines = terminal_width(), []
    for name, found in sweeps:
        lines.append(wrap(title(name), width=width))
        if not found:
            lines.append("no run has started")
            continue
        shown = _cells(found)
        columns = _fit(shown, width, boxed=box)
        lines += boxed(columns, shown, LEFT, color=color, width=width, style=lambda i, c, found=found: "bold"
                       if found[i]["run"] == TOTAL else None) if box else plain_lines(columns, shown, LEFT)
        lines.append(wrap(footer(found), width=width))
    return "\n".join(lines)


def show(sweeps: list[tuple[str, list[dict]]]) -> None:
    """Boxed on a terminal (in color where it takes colors), plain lines when stdout is not one."""
    print(text(sweeps, box=on_terminal(), color=on_terminal() and color_on()), flush=True)
