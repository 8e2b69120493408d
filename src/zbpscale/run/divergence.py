"""Whether a run diverged: a validation loss above the loss the run started from (status and collect flag it).
Torch-free; reads run/records.py's records, or only those a Glance keeps (`Glance.steps`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from zbpscale.run.records import Record


@dataclass(frozen=True)
class Divergence:
    """The eval record of a run furthest above the loss the run started from (`diverged`)."""

    step: int
    """The eval record's step (0-based, as in metrics.jsonl)."""
    tokens: int | None
    """Training tokens at that eval."""
    val_loss: float
    """Its validation loss."""
    start: float
    """The loss the run started from: its train loss at step 0, or ln(vocab_size) when no step 0 is recorded."""
    start_from: Literal["step 0", "ln(vocab)"]
    """Which of the two `start` is."""

    def words(self) -> str:
        """'val 10.996 at step 15 is above its start 10.951' (followed by ' (ln(vocab))' when the start is that)."""
        where = "" if self.start_from == "step 0" else f" ({self.start_from})"
        return f"val {self.val_loss:.3f} at step {self.step:,} is above its start {self.start:.3f}{where}"


def diverged(records: list[Record], config: dict | None = None) -> Divergence | None:
    """Whether a run diverged: the val loss of one of its eval records is above the loss the run started from.

        start = loss of the train record of step 0        (a resumed run keeps the first attempt's)
              | ln(config["model"]["vocab_size"])          (no step 0 recorded: a fresh model's loss, a uniform guess)
        diverged = max(eval val_loss) > start

    Every eval counts, not only the first: a run that fell and later climbed back above its start diverged too; a
    run whose val loss stays below its start never does. Returns the eval record with the highest val loss when it is
    above the start (a NaN counts as the highest), else None (None too when no start is known). `records`: the run's
    records in order, all of them or only its train record of step 0 and its eval records (`glance`'s `steps`).

    Caveats: the step-0 loss is one batch's, so an eval right after the first steps of a run that barely learns
    can sit above it by the batch's noise; a run that starts far above ln(vocab) (a bad init) is measured against
    its own start, and is not flagged for it."""
    train0 = next((r for r in records if r.get("kind") == "train"), None)
    if train0 is not None and train0.get("step") == 0 and isinstance(train0.get("loss"), (int, float)):
        start, start_from = float(train0["loss"]), "step 0"
    elif (vocab := ((config or {}).get("model") or {}).get("vocab_size")):
        start, start_from = math.log(vocab), "ln(vocab)"
    else:
        return None
    evals = [r for r in records if r.get("kind") == "eval" and isinstance(r.get("val_loss"), (int, float))]
    above = [r for r in evals if not r["val_loss"] <= start]  # a NaN is not below its start either
    if not above:
        return None
    worst = max(above, key=lambda r: math.inf if math.isnan(r["val_loss"]) else r["val_loss"])
    return Divergence(step=worst["step"], tokens=worst.get("tokens"), val_loss=worst["val_loss"], start=start,
                      start_from=start_from)
