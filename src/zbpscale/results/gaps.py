"""The gap analysis: ZBP - BP validation loss at equal tokens per size, seed by seed, and its power law in N.

Each ZBP run is compared with the bp run of the same size and the same seed (the same data order and
initialisation): a point of the gap figure is one ZBP arm at one size, holding each seed's gap. Gaps compare
equal tokens: complete runs by their final val losses; otherwise every seed of the point at the largest token
count at which all of its runs have an eval record (`GapPoint.final` is False, and plot marks it "at s/T").
Only full-budget points are fitted, by fit.py's `fit_gap_law` (>= 3 sizes, every seed at every size, every gap
positive): Huber on log gap through every (seed, size) point, and an interval for the exponent from the bootstrap
over seeds. Torch-free.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from zbpscale.results.bundle import Bundle
from zbpscale.results.fit import PowerLaw, fit_gap_law
from zbpscale.results.seeds import Spread
from zbpscale.results.summary import RunSummary, arm_order
from zbpscale.run.records import EvalRecord, by_kind, numbered, read_records

__all__ = ["Curves", "FullTable", "Gap", "GapPoint", "PowerLaw", "equal_tokens_gap", "fit_gaps", "full_table",
           "gap_points", "unpaired", "val_curves"]

Curves = dict[str, dict[int, tuple[int, float]]]
"""{run: {tokens: (steps done, val loss)}}: each run's validation curve (`val_curves`)."""


@dataclass(frozen=True, kw_only=True)
class GapPoint:
    """One point of the gap figure: a ZBP arm at one size, each of its seeds against bp of the same seed."""

    arm: str
    """The ZBP arm."""
    size: str
    """Model size."""
    params: int
    """Parameters of the size: non-embedding, or total (`plot`'s params)."""
    seeds: tuple[int, ...]
    """The seeds compared: those that both the arm and bp have with a val loss."""
    gaps: tuple[float, ...]
    """Each seed's val loss of the arm minus that of bp of the same seed, at `tokens` (in `seeds` order)."""
    tokens: int
    """Training tokens at which the runs were compared (`equal_tokens_gap`)."""
    final: bool
    """Whether that is the full budget: every run behind the point complete and compared at its final eval.
    Only these points are fitted."""

    @property
    def gap(self) -> float:
        """The mean gap over the seeds."""
        return self.spread.mean

    @property
    def spread(self) -> Spread:
        """Mean, sd and count of the seeds' gaps."""
        return Spread.of(self.gaps)


@dataclass(frozen=True, kw_only=True)
class Gap:
    """Val loss of some runs minus that of their bp runs, at equal tokens."""

    value: float
    """Mean val loss of the runs minus mean val loss of the bp runs."""
    tokens: int
    """Training tokens of the comparison: the largest count at which every run has an eval record."""
    step: int
    """Optimizer steps done at that point (of the first run)."""
    full: bool
    """Whether every run is complete and compared at its final eval."""


def val_curves(bundle: Path, rows: list[RunSummary]) -> Curves:
    """{run: {tokens: (steps done, val loss)}}, from the eval records each run has in the bundle."""
    curves = {}
    for r in rows:
        kept = by_kind(read_records(Bundle(bundle).run(r.run).path)).get("eval", [])
        evals: list[EvalRecord] = numbered(kept, "tokens", "step", "val_loss")
        evals.sort(key=lambda e: e["tokens"])
        curves[r.run] = {e["tokens"]: (e["step"] + 1, e["val_loss"]) for e in evals}
    return curves


def equal_tokens_gap(runs: list[RunSummary], bp: list[RunSummary], curves: Curves) -> Gap | None:
    """Mean val loss of `runs` minus that of `bp`, at the largest token count at which all of them have an eval
    record (for complete runs of one budget: their final evals); None when they share none (not comparable)."""
    common = set.intersection(*(set(curves[r.run]) for r in runs + bp))
    if not common:
        return None
    tokens = max(common)
    mean = lambda rs: sum(curves[r.run][tokens][1] for r in rs) / len(rs)  # noqa: E731
    full = all(r.state == "complete" and tokens == max(curves[r.run]) for r in runs + bp)
    return Gap(value=mean(runs) - mean(bp), tokens=tokens, step=curves[runs[0].run][tokens][0], full=full)


def _by_seed(rows: list[RunSummary], curves: Curves) -> dict[tuple[str, str], dict[int, RunSummary]]:
    """{(size, arm): {seed: run}} of the runs with a val loss."""
    groups: dict[tuple[str, str], dict[int, RunSummary]] = {}
    for r in rows:
        if curves[r.run]:
            groups.setdefault((r.size, r.arm), {})[r.seed] = r
    return groups


def gap_points(rows: list[RunSummary], curves: Curves, field: str = "params_non_embedding"
               ) -> tuple[list[GapPoint], list[str]]:
    """(points, left out): ZBP - BP val loss per ZBP arm and size, seed by seed against bp of the same seed (the
    seeds both have with a val loss; `unpaired` names the others), at equal tokens; and the '{arm} at {size}'
    pairs left out because their runs share no eval point with bp."""
    groups = _by_seed(rows, curves)
    points, apart = [], []
    for (size, arm), runs in groups.items():
        bp = groups.get((size, "bp"), {})
        seeds = sorted(set(runs) & set(bp))
        if arm == "bp" or not seeds:
            continue
        mine, refs = [runs[s] for s in seeds], [bp[s] for s in seeds]
        gap = equal_tokens_gap(mine, refs, curves)
        if gap is None:
            apart.append(f"{arm} at {size}")
            continue
        gaps = tuple(curves[r.run][gap.tokens][1] - curves[b.run][gap.tokens][1] for r, b in zip(mine, refs))
        points.append(GapPoint(arm=arm, size=size, params=getattr(mine[0], field), seeds=tuple(seeds), gaps=gaps,
                               tokens=gap.tokens, final=gap.full))
    return sorted(points, key=lambda p: (arm_order(p.arm), p.params)), apart


def unpaired(rows: list[RunSummary], curves: Curves) -> list[str]:
    """The ZBP runs with a val loss without a bp run of their size and seed with one: not in the gap figure
    ('zbp_n16 at mini, seed 2'; 'zbp_n16 at s1b (no bp run at that size)' where no bp run of the size has one)."""
    groups = _by_seed(rows, curves)
    lone = []
    for (size, arm), runs in groups.items():
        if arm != "bp":
            bp = groups.get((size, "bp"))
            lone += [f"{arm} at {size} (no bp run at that size)"] if bp is None else \
                [f"{arm} at {size}, seed {s}" for s in sorted(set(runs) - set(bp))]
    return lone


@dataclass(frozen=True, kw_only=True)
class FullTable:
    """One ZBP arm's full-budget gaps as a fit takes them: every seed at every size."""

    params: tuple[int, ...]
    """The sizes' parameters, ascending."""
    sizes: tuple[str, ...]
    """Their names."""
    seeds: tuple[int, ...]
    """The seeds at every size."""
    gaps: tuple[tuple[float, ...], ...]
    """gaps[j][i]: seed j's gap at size i (all positive)."""
    dropped: tuple[int, ...]
    """Seeds left out, not at every size."""


def full_table(points: list[GapPoint]) -> tuple[FullTable | None, str | None]:
    """(table, None) of one arm's full-budget points with >= 3 sizes, through the seeds that every one of them
    has, all gaps positive; else (None, why not, in words)."""
    full = sorted((p for p in points if p.final), key=lambda p: p.params)
    if len({p.params for p in full}) < 3:
        return None, (f"it needs >= 3 sizes at the full budget (has {len(points)} size{'s' if len(points) > 1 else ''}"
                      f", {len(full)} at the full budget)")
    seeds = sorted(set.intersection(*(set(p.seeds) for p in full)))
    if not seeds:
        return None, "no seed is at every size at the full budget"
    table = [[p.gaps[p.seeds.index(s)] for p in full] for s in seeds]  # (seeds, sizes)
    bad = [(s, p, g) for s, gs in zip(seeds, table) for p, g in zip(full, gs) if not 0 < g < math.inf]
    if bad:  # every one named: a reader checks them against the table (a diverged run's gap is nan or inf)
        said = ", ".join(f"seed {s} at {p.size}: {g:+.4f}" for s, p, g in bad)
        what = "not positive" if all(g <= 0 for _, _, g in bad) else "not a finite positive number"
        return None, (f"{'a gap is' if len(bad) == 1 else f'{len(bad)} gaps are'} {what} ({said}); the fit is "
                      "in log-log space")
    dropped = sorted(set().union(*(p.seeds for p in full)) - set(seeds))
    return FullTable(params=tuple(p.params for p in full), sizes=tuple(p.size for p in full), seeds=tuple(seeds),
                     gaps=tuple(tuple(g) for g in table), dropped=tuple(dropped)), None


def fit_gaps(points: list[GapPoint]) -> tuple[dict[str, PowerLaw], dict[str, str]]:
    """(fits, remarks): the gap law of each ZBP arm (fit.py's `fit_gap_law`: Huber on log gaps, the bootstrap
    over seeds), fitted on its `full_table`; remarks: why an arm has no fit, or which seeds its fit leaves out."""
    fits, remarks = {}, {}
    for arm in sorted({p.arm for p in points}, key=arm_order):
        table, why = full_table([p for p in points if p.arm == arm])
        if why:
            remarks[arm] = f"{arm}: no power-law fit, {why}"
            continue
        fits[arm] = fit_gap_law(table.params, table.gaps)
        if table.dropped:
            remarks[arm] = (f"{arm}: the fit leaves out seed{'s' if len(table.dropped) > 1 else ''} "
                            f"{', '.join(map(str, table.dropped))}, not at every size at the full budget")
    return fits, remarks
