"""The account of a run's attempts (run/goodput.py's module docstring says what each part is): its attempts record,
its trainer's records (their fold) and its heartbeat, made into one `Attempt` each. Torch-free; a pure function of a
look at the folder, which keeps it (run/snapshot.py's `Snapshot.attempts`, kept in the folder's digest)."""

from __future__ import annotations

from dataclasses import dataclass

from zbpscale.run.fold import Fold, Trained
from zbpscale.run.history import History


@dataclass(frozen=True)
class Attempt:
    """One attempt's seconds (Unix times for start, end, first_step)."""

    start: float
    end: float
    ended: str
    """How its end is known: 'end event', 'last record' (no end event: killed, or running) or 'by hand' (no job)."""
    first_step: float | None
    """When its trainer's first step began (its start record), None if it never reached one."""
    queue: float
    startup: float
    training: float
    saves: float
    lost: float
    other: float
    restart: float | None = None
    """The end of the attempt before -> first_step (None for the first attempt, or one without a step)."""

    @property
    def held(self) -> float:
        return self.end - self.start


def account(history: History, fold: Fold, beat: dict) -> list[Attempt]:
    """The attempts of a run, each split into goodput's BUCKETS with its queue wait and restart time, from its attempts
    (`history`), its trainer's records (their `fold`) and its heartbeat (see the module's docstring)."""
    jobs = history.attempts()
    mine: dict[int, list[Trained]] = {}
    alone = []
    for t in fold.trained(beat):
        j = max((i for i, (s, _) in enumerate(jobs) if s["time"] <= t.first), default=None)
        if j is None or (jobs[j][1] is not None and jobs[j][1]["time"] < t.first):
            alone.append(t)  # trained by hand, outside any job
        else:
            mine.setdefault(j, []).append(t)
    spans = []  # (start, end, how the end is known, trained, queue wait), then each made an Attempt with its restart
    for j, (s, end) in enumerate(jobs):
        ts = mine.get(j, [])
        stop = max([end["time"] if end else s["time"]] + [t.last for t in ts])
        spans.append((s["time"], stop, "end event" if end else "last record", ts, history.waited(s)))
    spans += [(t.first - t.setup, t.last, "by hand", [t], 0.0) for t in alone]
    spans.sort(key=lambda span: span[0])
    attempts: list[Attempt] = []
    for span in spans:
        attempts.append(_split(*span, before=attempts[-1].end if attempts else None))
    return attempts


def _split(start: float, end: float, ended: str, trained: list[Trained], queue: float, *, before: float | None
           ) -> Attempt:
    """One attempt's Attempt; `before`: the end of the attempt before it (None for the first), its restart's start."""
    held = max(0.0, end - start)
    if not trained:
        return Attempt(start=start, end=start + held, ended=ended, first_step=None, queue=queue, startup=held,
                       training=0.0, saves=0.0, lost=0.0, other=0.0)
    first = min(t.first for t in trained)
    parts = {"startup": min(held, max(0.0, first - start)), "training": sum(t.training for t in trained),
             "saves": sum(t.saves for t in trained), "lost": sum(t.lost for t in trained)}
    return Attempt(start=start, end=start + held, ended=ended, first_step=first, queue=queue,
                   other=max(0.0, held - sum(parts.values())), restart=None if before is None else first - before,
                   **parts)


def gpus_held(plan: dict, start: dict) -> int | None:
    """The GPUs a run's attempts held (run/goodput.py's RunTime.gpus): from its plan.json, else from its trainer's
    start record (StartRecord)."""
    if isinstance(plan.get("gpus"), int):
        return plan["gpus"]
    device = start.get("config", {}).get("device")
    return start.get("world_size", 1) if device == "cuda" else 0 if device == "cpu" else None


def gpu_hours(held_s: float, gpus: int | None) -> float | None:
    """Held seconds x GPUs, in hours (None when the GPUs are not known)."""
    return None if gpus is None else held_s * gpus / 3600
