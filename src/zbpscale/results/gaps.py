"""The gap analysis: ZBP - BP validation loss at equal tokens per size, and its power law in N.

Gaps compare equal tokens: two complete runs by their final val losses; otherwise at the largest token count at
which both have an eval record (`Gap.full` is False, and plot marks it "at s/T"). Only full-budget points are
fitted: gap = a * N^b by least squares in log-log space, with its 1-s.e. band (>= 3 sizes, all gaps positive).
Torch-free; numpy only inside the fit.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from zbpscale.results.bundle import Bundle
from zbpscale.results.summary import RunSummary, arm_order
from zbpscale.train.metrics import EvalRecord, by_kind, read_records

Curves = dict[str, dict[int, tuple[int, float]]]
"""{run: {tokens: (steps done, val loss)}}: each run's validation curve (`val_curves`)."""


@dataclass(frozen=True, kw_only=True)
class PowerLaw:
    """gap = a * N^b, fitted by ordinary least squares on (log N, log gap)."""

    a: float
    """Prefactor."""
    b: float
    """Exponent."""
    b_se: float
    """Standard error of b (nan with only two points)."""
    cov: tuple[tuple[float, float], tuple[float, float]]
    """Covariance of (log a, b)."""
    n: int
    """Points fitted."""

    def band(self, params):
        """(low, high): the fit's 1-s.e. band at `params` (an array)."""
        import numpy as np

        x = np.log(np.asarray(params, dtype=float))
        (caa, cab), (_, cbb) = self.cov
        center, spread = math.log(self.a) + self.b * x, np.sqrt(np.maximum(caa + 2 * cab * x + cbb * x * x, 0))
        return np.exp(center - spread), np.exp(center + spread)


@dataclass(frozen=True, kw_only=True)
class GapPoint:
    """One point of the gap figure: a ZBP arm at one size, mean over the seeds that have a val loss."""

    arm: str
    """The ZBP arm."""
    size: str
    """Model size."""
    params: int
    """Parameters of the size: non-embedding, or total (`plot`'s params)."""
    gap: float
    """Val loss of the arm minus that of bp, at `tokens`."""
    tokens: int
    """Training tokens at which the two were compared (`equal_tokens_gap`)."""
    final: bool
    """Whether that is the full budget: every run behind the point complete and compared at its final eval.
    Only these points are fitted."""


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


def fit_power_law(params, gaps) -> PowerLaw:
    """Least squares of log gap = log a + b log N; needs >= 2 points with positive gaps."""
    import numpy as np

    x, y = np.log(np.asarray(params, dtype=float)), np.log(np.asarray(gaps, dtype=float))
    design = np.column_stack([np.ones_like(x), x])
    coef, *_ = np.linalg.lstsq(design, y, rcond=None)
    dof = len(x) - 2
    s2 = float(np.sum((y - design @ coef) ** 2) / dof) if dof > 0 else math.nan
    cov = s2 * np.linalg.inv(design.T @ design)
    return PowerLaw(a=float(np.exp(coef[0])), b=float(coef[1]), b_se=math.sqrt(cov[1, 1]) if dof > 0 else math.nan,
                    cov=((float(cov[0, 0]), float(cov[0, 1])), (float(cov[1, 0]), float(cov[1, 1]))), n=len(x))


def val_curves(bundle: Path, rows: list[RunSummary]) -> Curves:
    """{run: {tokens: (steps done, val loss)}}, from the eval records each run has in the bundle."""
    curves = {}
    for r in rows:
        evals: list[EvalRecord] = by_kind(read_records(Bundle(bundle).run(r.run).path)).get("eval", [])
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


def gap_points(rows: list[RunSummary], curves: Curves, field: str = "params_non_embedding"
               ) -> tuple[list[GapPoint], list[str]]:
    """(points, left out): ZBP - BP val loss per ZBP arm and size (seeds averaged) at equal tokens, where both
    have an eval record; and the '{arm} at {size}' pairs left out because they share no eval point with bp."""
    groups: dict[tuple[str, str], list[RunSummary]] = {}
    for r in rows:
        if curves[r.run]:
            groups.setdefault((r.size, r.arm), []).append(r)
    points, apart = [], []
    for (size, arm), runs in groups.items():
        bp = groups.get((size, "bp"))
        if arm == "bp" or not bp:
            continue
        gap = equal_tokens_gap(runs, bp, curves)
        if gap is None:
            apart.append(f"{arm} at {size}")
            continue
        points.append(GapPoint(arm=arm, size=size, params=getattr(runs[0], field), gap=gap.value, tokens=gap.tokens,
                               final=gap.full))
    return sorted(points, key=lambda p: (arm_order(p.arm), p.params)), apart


def fit_gaps(points: list[GapPoint]) -> tuple[dict[str, PowerLaw], dict[str, str]]:
    """(fits, why not): the power law of each ZBP arm, fitted on its full-budget points when there are >= 3
    sizes of them, all positive; else why not, in words."""
    fits, why_not = {}, {}
    for arm in sorted({p.arm for p in points}, key=arm_order):
        mine = [p for p in points if p.arm == arm]
        full = [p for p in mine if p.final]
        if len({p.params for p in full}) < 3:
            why_not[arm] = (f"{arm}: no power-law fit, it needs >= 3 sizes at the full budget "
                            f"(has {len(mine)} size{'s' if len(mine) > 1 else ''}, {len(full)} at the full budget)")
        elif any(p.gap <= 0 for p in full):
            why_not[arm] = f"{arm}: no power-law fit, a gap is not positive (the fit is in log-log space)"
        else:
            fits[arm] = fit_power_law([p.params for p in full], [p.gap for p in full])
    return fits, why_not
