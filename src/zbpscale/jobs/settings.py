"""What a sweep's folder keeps of its sweep file, so that a command given the folder (`zbpscale status jobs/ladder
--watch`, `zbpscale cancel jobs/ladder`) behaves as one given the file (sweeps/ladder.py).

    jobs/<sweep>/sweep.json    {"name": "ladder", "sweep_file": "/home/me/proj/sweeps/ladder.py", "poll_s": 10.0}

Written by submit alone (atomically, under the sweep's lock, once per submit; a dry run writes nothing), and read
by status and cancel (poller.poll_s_of): reads never write. A folder without the file (made by a release before it)
reads as None, and its commands take the defaults. The defaults live here too (POLL_S, MIN_POLL_S), below both
sweep.py, which checks Sweep.poll_s against them, and poller.py, which waits by them. Imports nothing of
zbpscale.jobs.
"""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass
from pathlib import Path

from zbpscale.files import atomic_write, read_json

POLL_S = 60.0
"""Seconds between two questions to a rate-limited scheduler (Sweep.poll_s's default)."""
MIN_POLL_S = 10.0
"""The least Sweep.poll_s a sweep may set."""
SETTINGS_FILE = "sweep.json"
"""The settings file's name in a sweep's folder: a file, so that nothing that lists run folders (directories)
takes it for a run."""


@dataclass(frozen=True, kw_only=True)
class SweepSettings:
    """The settings of a sweep file that a command given only its folder needs, as the last submit wrote them."""

    name: str
    """The sweep's name (Sweep.name)."""
    sweep_file: str
    """The sweep file that submit read, absolute: what a folder was planned by."""
    poll_s: float = POLL_S
    """Sweep.poll_s: the seconds between two questions to the scheduler while a command waits."""

    @staticmethod
    def path(folder: str | Path) -> Path:
        """Where a sweep folder (jobs/<sweep>) keeps its settings."""
        return Path(folder) / SETTINGS_FILE

    @classmethod
    def read(cls, folder: str | Path) -> SweepSettings | None:
        """The settings a sweep folder keeps; None when it keeps none (an older release's folder, a jobs root). A
        poll_s that is not a number >= MIN_POLL_S (a hand edit) reads as POLL_S; fields of a newer release are
        ignored."""
        kept = read_json(cls.path(folder))
        if not kept:
            return None
        poll_s = kept.get("poll_s")
        ok = isinstance(poll_s, (int, float)) and not isinstance(poll_s, bool) and math.isfinite(poll_s) \
            and poll_s >= MIN_POLL_S
        return cls(name=str(kept.get("name", "")), sweep_file=str(kept.get("sweep_file", "")),
                   poll_s=float(poll_s) if ok else POLL_S)

    def write(self, folder: str | Path) -> None:
        """Keep these settings in the sweep folder (submit only; atomically: a reader sees the old file or the new)."""
        atomic_write(self.path(folder), json.dumps(dataclasses.asdict(self), indent=1) + "\n")
