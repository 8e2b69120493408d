"""A sweep's runs grouped over seeds: one `SeedGroup` per size x arm, with the mean and spread of its losses.

A run's seed sets its data order and initialisation (TrainConfig.seed; `{size}-{arm}-s{seed}` for seeds other
than 0): the runs of one size and arm that differ only in seed are repeats of one experiment, and the table
gives their mean, sample sd and count. The gap to BP is taken per seed, against the bp run of the same seed
(gaps.py), and summarised here the same way. Torch-free.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from zbpscale.results.summary import RunSummary, arm_order, ladder_count


@dataclass(frozen=True, kw_only=True)
class Spread:
    """Mean and spread of one quantity over seeds."""

    mean: float
    """Mean over the seeds (nan with none)."""
    sd: float
    """Sample standard deviation (n - 1 in the denominator; nan with fewer than 2)."""
    n: int
    """Seeds behind it."""

    @property
    def se(self) -> float:
        """Standard error of the mean: sd / sqrt(n)."""
        return self.sd / math.sqrt(self.n) if self.n > 1 else math.nan

    @classmethod
    def of(cls, values) -> Spread:
        values = [float(v) for v in values]
        n = len(values)
        mean = sum(values) / n if n else math.nan
        sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1)) if n > 1 else math.nan
        return cls(mean=mean, sd=sd, n=n)


@dataclass(frozen=True, kw_only=True)
class SeedGroup:
    """The runs of one size and arm, over their seeds."""

    size: str
    """Model size."""
    arm: str
    """Training arm."""
    runs: tuple[RunSummary, ...]
    """Its runs, by seed."""
    final: Spread
    """Final val loss over the runs that have one."""
    best: Spread
    """Best val loss over the runs that have one."""

    @property
    def seeds(self) -> tuple[int, ...]:
        return tuple(r.seed for r in self.runs)

    @property
    def complete(self) -> int:
        """Runs that are complete."""
        return sum(r.state == "complete" for r in self.runs)


def group_runs(rows: list[RunSummary]) -> list[SeedGroup]:
    """One group per size and arm, in the ladder's order (N, then bp first, then probes)."""
    groups: dict[tuple[str, str], list[RunSummary]] = {}
    for r in rows:
        groups.setdefault((r.size, r.arm), []).append(r)
    out = []
    for (size, arm), runs in groups.items():
        runs.sort(key=lambda r: r.seed)
        out.append(SeedGroup(size=size, arm=arm, runs=tuple(runs),
                             final=Spread.of(r.final_val_loss for r in runs if r.final_val_loss is not None),
                             best=Spread.of(r.best_val_loss for r in runs if r.best_val_loss is not None)))
    return sorted(out, key=lambda g: (min(map(ladder_count, g.runs)), g.size, arm_order(g.arm)))


def seeds_of(rows: list[RunSummary]) -> tuple[int, ...]:
    """The seeds of a sweep's runs, in order."""
    return tuple(sorted({r.seed for r in rows}))
