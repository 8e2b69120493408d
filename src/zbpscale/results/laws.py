"""What a ladder with seeds says beyond its table: loss laws, a held-out prediction, the compute multiplier and a
paired test of the gap's rise. Each is computed seed by seed (a ZBP run against bp of the same seed) and carries
an interval from the seeds (results/fit.py), or says in words why the data do not support it. Torch-free.

    loss_laws(rows)              L(N) = E + A N^-alpha per arm, from the final val losses (>= 4 sizes)
    hold_out_largest(points)     the gap law fitted without the largest size, its prediction there vs what was seen
    multipliers(points, ...)     how many times BP's tokens ZBP needs for BP's loss, per size (from the curves)
    rises(points)                the gap at the largest size minus at the smallest, per seed: a paired t test
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from zbpscale.results.fit import (
    GAP_DELTA,
    RESAMPLES,
    LossLaw,
    PowerLaw,
    bootstrap_cov,
    fit_gap_law,
    fit_loss_law,
    huber_line,
    resample_counts,
    t_interval,
)
from zbpscale.results.gaps import Curves, GapPoint, full_table
from zbpscale.results.summary import RunSummary, arm_order

MIN_SIZES_LOSS_LAW = 4
"""A loss law has three parameters: fitted from 4 sizes up (with 3 it passes through every point)."""


# ------------------------------------------------------------------------------------------------ loss laws
def loss_laws(rows: list[RunSummary], field: str = "params_non_embedding"
              ) -> tuple[dict[str, LossLaw], dict[str, str]]:
    """(laws, remarks): each arm's loss law from the complete runs' final val losses, through the seeds that
    every size of the arm has; remarks: why an arm has none."""
    laws, remarks = {}, {}
    for arm in sorted({r.arm for r in rows}, key=arm_order):
        done = [r for r in rows if r.arm == arm and r.state == "complete" and r.final_val_loss is not None]
        sizes = sorted({getattr(r, field) for r in done})
        if len(sizes) < MIN_SIZES_LOSS_LAW:
            remarks[arm] = (f"{arm}: no loss law L(N) = E + A N^-alpha, it needs >= {MIN_SIZES_LOSS_LAW} sizes of "
                            f"complete runs (has {len(sizes)})")
            continue
        seeds = sorted(set.intersection(*({r.seed for r in done if getattr(r, field) == n} for n in sizes)))
        if not seeds:
            remarks[arm] = f"{arm}: no loss law, no seed is complete at every size"
            continue
        loss = {(getattr(r, field), r.seed): r.final_val_loss for r in done}
        names = {getattr(r, field): r.size for r in done}
        bad = [(s, n) for s in seeds for n in sizes if not math.isfinite(loss[(n, s)])]
        if bad:  # a diverged run's loss (nan, inf) fitted as a number gave a law of nonsense; every one named
            said = ", ".join(f"seed {s} at {names[n]}: {loss[(n, s)]}" for s, n in bad)
            what = "a final val loss is" if len(bad) == 1 else f"{len(bad)} final val losses are"
            remarks[arm] = f"{arm}: no loss law, {what} not a finite number ({said})"
            continue
        laws[arm] = fit_loss_law(sizes, [[loss[(n, s)] for n in sizes] for s in seeds])
    return laws, remarks


# ------------------------------------------------------------------------------------------------ hold out
@dataclass(frozen=True, kw_only=True)
class HeldOut:
    """The gap law fitted without the largest size, and its prediction at that size against the seeds' gaps."""

    arm: str
    size: str
    """The size held out (the largest)."""
    fit: PowerLaw
    """The law fitted on the other sizes."""
    predicted: float
    """The law's gap at the held-out size."""
    observed: float
    """The geometric mean of the seeds' gaps there (the law is fitted on log gaps)."""
    ratio_se: float
    """Standard error of log(observed / predicted), from the bootstrap over seeds (both sides resampled together)."""
    dof: int
    """Degrees of freedom: seeds - 1."""

    def ratio_interval(self, level: float) -> tuple[float, float]:
        """The `level` interval of observed / predicted."""
        low, high = t_interval(math.log(self.observed / self.predicted), self.ratio_se, self.dof, level)
        return math.exp(low), math.exp(high)

    @property
    def consistent(self) -> bool:
        """Whether 1 (the prediction exact) is inside the 95 % interval of observed / predicted."""
        low, high = self.ratio_interval(0.95)
        return low <= 1 <= high


def hold_out_largest(points: list[GapPoint]) -> tuple[dict[str, HeldOut], dict[str, str]]:
    """(checks, remarks) per ZBP arm: the gap law through the full-budget points but the largest size, predicted
    at the largest; remarks: why an arm has no check (it needs >= 3 sizes besides the largest, every gap
    positive)."""
    import numpy as np

    checks, remarks = {}, {}
    for arm in sorted({p.arm for p in points}, key=arm_order):
        mine = [p for p in points if p.arm == arm]
        full = len({p.params for p in mine if p.final})
        table, why = full_table(mine)
        if full < 4:  # what the check needs first (full_table says '>= 3 sizes', or why its gap law has no fit)
            why = f"it needs >= 3 sizes besides the largest at the full budget (has {max(0, full - 1)})"
        if why:
            remarks[arm] = f"{arm}: no held-out check, {why}"
            continue
        y = np.log(np.asarray(table.gaps))  # (seeds, sizes)
        seeds, sizes = y.shape
        fit = fit_gap_law(table.params[:-1], [g[:-1] for g in table.gaps])
        x = np.log(np.asarray(table.params, dtype=float))
        counts = resample_counts(seeds, RESAMPLES)
        log_a, b = huber_line(np.tile(x[:-1], seeds), y[:, :-1].ravel(), np.repeat(counts, sizes - 1, axis=1),
                              GAP_DELTA)
        draws = counts @ y[:, -1] / seeds - (log_a + b * x[-1])  # resampled: mean log gap seen - predicted
        se = math.sqrt(float(bootstrap_cov(draws[:, None], seeds)[0, 0])) if seeds > 1 else math.nan
        checks[arm] = HeldOut(arm=arm, size=table.sizes[-1], fit=fit, predicted=float(fit.at(table.params[-1])),
                              observed=float(np.exp(y[:, -1].mean())), ratio_se=se, dof=seeds - 1)
    return checks, remarks


# ------------------------------------------------------------------------------------------------ multiplier
@dataclass(frozen=True, kw_only=True)
class Multiplier:
    """How many times its tokens BP would need to reach a ZBP run's final val loss is D / D_bp: ZBP at D tokens
    is where BP's own curve was at D_bp. Read the other way, ZBP needs that many times BP's tokens for BP's loss,
    if the ratio holds beyond these budgets. BP's curve is one run under its cosine schedule, not a run of budget
    D_bp (which would anneal and do better by D_bp), so the multiplier is a lower bound of the one between
    budget-matched runs."""

    arm: str
    size: str
    params: int
    seeds: tuple[int, ...]
    values: tuple[float, ...]
    """Each seed's D / D_bp (`inf` when BP's first eval was already below ZBP's final loss: > `above`; 0 when BP's
    final loss is above it: ZBP needed no more tokens, < 1)."""
    above: float
    """D / (tokens of BP's first eval): the largest multiplier the curve can show."""

    @property
    def censored(self) -> bool:
        return any(v == math.inf or v == 0 for v in self.values)

    @property
    def geomean(self) -> float:
        return math.exp(sum(math.log(v) for v in self.values) / len(self.values)) if not self.censored else math.nan

    @property
    def log_se(self) -> float:
        """s.e. of the mean log multiplier over the seeds (what the bootstrap over seeds gives for a mean, with its
        S/(S-1) correction: exactly sd / sqrt(S))."""
        n = len(self.values)
        if self.censored or n < 2:
            return math.nan
        logs = [math.log(v) for v in self.values]
        mean = sum(logs) / n
        return math.sqrt(sum((v - mean) ** 2 for v in logs) / (n - 1) / n)

    def interval(self, level: float) -> tuple[float, float]:
        low, high = t_interval(math.log(self.geomean), self.log_se, len(self.values) - 1, level)
        return math.exp(low), math.exp(high)


def bp_tokens_for(loss: float, curve: list[tuple[int, float]]) -> float:
    """The tokens at which a BP curve [(tokens, val loss)] first comes down to `loss`, interpolated linearly in
    log tokens between its evals; 0 when its first eval is already at or below it (and for a loss that is not a
    number, a diverged run's: as high as can be), inf when it never gets there. An eval that is not a number is no
    point of the curve (it made the multiplier nan)."""
    curve = [(t, v) for t, v in curve if not math.isnan(v)]
    if math.isnan(loss) or (curve and curve[0][1] <= loss):
        return 0.0
    for (t0, l0), (t1, l1) in zip(curve, curve[1:]):
        if l1 <= loss:
            f = (l0 - loss) / (l0 - l1)
            return math.exp(math.log(t0) + f * (math.log(t1) - math.log(t0)))
    return math.inf


def multipliers(points: list[GapPoint], rows: list[RunSummary], curves: Curves) -> list[Multiplier]:
    """One Multiplier per full-budget gap point: each seed's ZBP final loss read off BP's curve of the same seed."""
    runs = {(r.size, r.arm, r.seed): r.run for r in rows}
    out = []
    for p in points:
        if not p.final:
            continue
        values, firsts = [], []
        for s in p.seeds:
            zbp, bp = curves[runs[(p.size, p.arm, s)]], sorted(curves[runs[(p.size, "bp", s)]].items())
            bp_curve = [(t, loss) for t, (_, loss) in bp]
            d_bp = bp_tokens_for(zbp[p.tokens][1], bp_curve)
            values.append(math.inf if d_bp == 0 else p.tokens / d_bp)
            firsts.append(bp_curve[0][0])
        out.append(Multiplier(arm=p.arm, size=p.size, params=p.params, seeds=p.seeds, values=tuple(values),
                              above=p.tokens / max(firsts)))
    return out


# ------------------------------------------------------------------------------------------------ the rise
@dataclass(frozen=True, kw_only=True)
class Rise:
    """The gap at the largest size minus the gap at the smallest, seed by seed, and a paired t test of its mean."""

    arm: str
    sizes: tuple[str, str]
    """(smallest, largest)."""
    seeds: tuple[int, ...]
    values: tuple[float, ...]
    """Each seed's rise."""

    @property
    def mean(self) -> float:
        return sum(self.values) / len(self.values)

    @property
    def sd(self) -> float:
        n = len(self.values)
        return math.sqrt(sum((v - self.mean) ** 2 for v in self.values) / (n - 1)) if n > 1 else math.nan

    @property
    def t(self) -> float:
        return self.mean / (self.sd / math.sqrt(len(self.values))) if len(self.values) > 1 and self.sd > 0 \
            else math.nan

    @property
    def p_rises(self) -> float:
        """One-sided p of the paired t test against 'the gap does not rise' (scipy's ttest_1samp, greater)."""
        from scipy import stats

        if math.isnan(self.t):  # one seed, or seeds that all agree: no spread to test against
            return math.nan
        return float(stats.ttest_1samp(self.values, 0.0, alternative="greater").pvalue)

    def interval(self, level: float) -> tuple[float, float]:
        return t_interval(self.mean, self.sd / math.sqrt(len(self.values)), len(self.values) - 1, level)


def rises(points: list[GapPoint]) -> list[Rise]:
    """Per ZBP arm with >= 2 full-budget sizes: the rise from the smallest to the largest, over the seeds both
    have (none where they share no seed)."""
    out = []
    for arm in sorted({p.arm for p in points}, key=arm_order):
        full = sorted((p for p in points if p.arm == arm and p.final), key=lambda p: p.params)
        if len(full) < 2:
            continue
        first, last = full[0], full[-1]
        seeds = tuple(s for s in first.seeds if s in last.seeds)
        if not seeds:  # no seed has both: no rise is measured (its mean divided by no value)
            continue
        values = tuple(last.gaps[last.seeds.index(s)] - first.gaps[first.seeds.index(s)] for s in seeds)
        out.append(Rise(arm=arm, sizes=(first.size, last.size), seeds=seeds, values=values))
    return out


__all__ = ["HeldOut", "Multiplier", "Rise", "bp_tokens_for", "hold_out_largest", "loss_laws",
           "multipliers", "rises"]
