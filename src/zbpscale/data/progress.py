"""Progress of a prep: a rich bar on a terminal, plain periodic lines when stdout is a log file.

Both show training tokens written, tokens/s and, when a budget is set, the share done and the ETA.
"""

from __future__ import annotations

import sys
import time


def _eta(done: int, total: int | None, rate: float) -> str:
    if not total or rate <= 0:
        return "?"
    seconds = max(total - done, 0) / rate
    return time.strftime("%H:%M:%S", time.gmtime(seconds)) if seconds < 86400 else f"{seconds / 3600:.0f} h"


class PlainProgress:
    """One line every `every` seconds (and one at the end), for logs of jobs."""

    def __init__(self, *, total: int | None, start: int = 0, every: float = 10.0, stream=None):
        self.total, self.every, self.stream = total, every, stream or sys.stdout
        self.t0 = self.last = time.monotonic()
        self.start = self.done = start

    def update(self, done: int) -> None:
        self.done = done
        if time.monotonic() - self.last >= self.every:
            self._line()

    def _line(self) -> None:
        self.last = time.monotonic()
        rate = (self.done - self.start) / max(self.last - self.t0, 1e-9)
        share = f" / {self.total:,} ({100 * self.done / self.total:.1f}%)" if self.total else ""
        eta = _eta(self.done, self.total, rate)
        print(f"prep: {self.done:,}{share} train tokens, {rate / 1e6:.2f}M tok/s, ETA {eta}", file=self.stream,
              flush=True)

    def close(self) -> None:
        self._line()


class RichProgress:
    """A rich progress bar: tokens, tokens/s, ETA against the budget."""

    def __init__(self, *, total: int | None, start: int = 0):
        from rich.progress import BarColumn, Progress, ProgressColumn, TextColumn, TimeElapsedColumn
        from rich.text import Text

        class Rate(ProgressColumn):
            def render(self, task):
                return Text(f"{(task.speed or 0) / 1e6:.2f}M tok/s")

        class Eta(ProgressColumn):
            def render(self, task):
                return Text(f"ETA {_eta(int(task.completed), task.total and int(task.total), task.speed or 0)}")

        self._progress = Progress(TextColumn("prep"), BarColumn(), TextColumn("{task.completed:,.0f}"
                                  + (f" / {total:,}" if total else "") + " train tokens"), Rate(), Eta(),
                                  TimeElapsedColumn(), transient=False)
        self._task = self._progress.add_task("prep", total=total, completed=start)
        self._progress.start()

    def update(self, done: int) -> None:
        self._progress.update(self._task, completed=done)

    def close(self) -> None:
        self._progress.stop()


def make_progress(*, total: int | None, start: int = 0, every: float = 10.0):
    """A rich bar when stdout is a terminal, plain lines every `every` seconds otherwise."""
    if sys.stdout.isatty():
        return RichProgress(total=total, start=start)
    return PlainProgress(total=total, start=start, every=every)
