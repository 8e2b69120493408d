"""Goodput's reading of metrics.jsonl: the trainer's attempts, folded over the file's records in order (`Fold`), so
that a reader can go on from the fold of the records a heartbeat's index covers (train/metrics.py writes it) instead
of reading the whole file. What the attempts' seconds mean is run/goodput.py's. Torch-free; plain JSON in and out.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Trained:
    """One attempt of the trainer, as its records say it."""

    first: float  # its start record: the first step begins
    setup: float  # setup_s' total (0: not recorded)
    last: float  # its last sign of life
    training: float
    saves: float
    lost: float


class Fold:
    """The trainer's attempts, folded over metrics.jsonl's records in file order (`feed`): each start record opens
    one, with the resume record before it (what the attempt before lost, redo_s, and saved, before.ckpt_s); the
    records after it give its last sign of life, its latest end record and its training time. Its `state` is plain
    JSON: the trainer keeps the fold of what it has written in its heartbeat's index (train/metrics.py), and a
    reader goes on from it over the records written after (`Fold(state)`), instead of reading the whole file."""

    NUMBERS = ("first", "setup", "seen", "training", "done")
    """What each attempt of a state holds as a number (and its `resume`, a dict)."""

    def __init__(self, state: dict | None = None):
        """The fold of no record, or the one whose `state` this is; a ValueError for a state it did not write."""
        state = state or {}
        self.attempts: list[dict] = [dict(a) for a in state.get("attempts", [])]
        self.pending: dict = dict(state.get("pending", {}))  # a resume record waiting for its start record
        if not all(isinstance(a.get(k), (int, float)) for a in self.attempts for k in self.NUMBERS) or \
                not all(isinstance(a.get("resume"), dict) for a in self.attempts):
            raise ValueError("not a fold's state")

    @classmethod
    def of(cls, records: list[dict]) -> Fold:
        fold = cls()
        for r in records:
            fold.feed(r)
        return fold

    @property
    def state(self) -> dict:
        return {"attempts": self.attempts, "pending": self.pending}

    def feed(self, r: dict) -> None:
        kind = r.get("kind")
        if kind == "start" and "time" in r:
            self.attempts.append({"first": r["time"], "setup": r.get("setup_s", {}).get("total", 0.0),
                                  "resume": self.pending, "seen": r["time"], "training": 0.0,
                                  "done": r.get("step", 0)})
            self.pending = {}
        elif kind == "resume":
            before = r.get("before", {})
            self.pending = {"redo_s": r.get("redo_s", 0.0),
                            "before": {k: before[k] for k in ("time", "ckpt_s") if k in before}}
        elif self.attempts:
            a = self.attempts[-1]
            if "time" in r:
                a["seen"] = max(a["seen"], r["time"])
            if kind == "end":
                a["end_ckpt_s"] = r.get("ckpt_s")  # None: an end record that does not say (an older release)
            elif kind == "train" and "step_time" in r:
                a["training"] += r["step_time"] * max(1, r["step"] + 1 - a["done"])
                a["done"] = r["step"] + 1

    def trained(self, beat: dict) -> list[Trained]:
        """The attempts, with the heartbeat (`beat`) as the last one's latest sign of life."""
        found = []
        for i, a in enumerate(self.attempts):
            after = self.attempts[i + 1]["resume"] if i + 1 < len(self.attempts) else {}
            before = after.get("before", {})
            live = beat if i == len(self.attempts) - 1 and beat.get("time", 0) >= a["first"] else {}
            last = max(a["seen"], live.get("time", 0.0), before.get("time", 0.0))
            if a.get("end_ckpt_s") is not None:
                saves = a["end_ckpt_s"]
            else:
                saves = before.get("ckpt_s", live.get("ckpt", {}).get("s", 0.0))
            found.append(Trained(first=a["first"], setup=a["setup"], last=last, training=a["training"],
                                  saves=saves, lost=after.get("redo_s", 0.0)))
        return found
