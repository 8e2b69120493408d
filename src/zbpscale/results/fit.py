"""The power law of the gap in N, gap = a * N^b, and an interval for b that carries the seed-to-seed spread.

    fit_power_law(params, gaps)          least squares of log gap on log N through one gap per size; its s.e.
                                         from the residuals (the closed form of simple regression)
    fit_seeds(params, gaps_by_seed)      the fit of a study with seeds: one least-squares line per seed, the
                                         exponent their mean, its s.e. their sd / sqrt(seeds), its interval from
                                         Student's t with seeds - 1 degrees of freedom

Why one line per seed. A seed is a whole ladder: the same data order and initialisation scheme at every size,
so a seed's gaps may move together across sizes, and the spread between seeds differs from size to size. The
least-squares slope is linear in the log gaps, so the mean of the seeds' slopes is the slope through the
per-size means of log gap, and the seeds' slopes are independent draws of one estimator: their sample sd
measures its spread with no assumption about how the noise varies with size or how the sizes of a seed
correlate. Under normal noise in log gap the interval b ± t(seeds-1) s.e. covers the true b at exactly its
level (tests/test_fit.py checks it on synthetic ladders). The alternatives cover less than they say with 3
seeds (measured on 2000 synthetic ladders each, 3 seeds at 3 or 4 sizes, noise 5-30% per size, nominal 68%;
these lines: 68-69%): a bootstrap over seeds per size 53-55% (the sd of a resampled mean of 3 is sqrt(2/3) of
the true one, and the resamples take 10 values), weighted least squares with the per-size s.e. 48-54% (weights
from 3 values each), least squares through the means with its residual s.e. 33-48% (one degree of freedom with
3 sizes, and blind to the seeds).

Caveats: every seed must be at every fitted size (a seed missing at one size is left out of the fit), and
every gap of the fit positive (log space). The band covers seed noise only: a ladder whose gaps bend away from
a power law gets a band about the best power law through the seeds, not a warning.
Torch-free; numpy inside the functions.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

LEVEL = 0.68
"""The level of the intervals drawn and quoted: a 68% interval (± 1 s.e. for many seeds)."""


@dataclass(frozen=True, kw_only=True)
class PowerLaw:
    """gap = a * N^b, fitted in log-log space."""

    a: float
    """Prefactor."""
    b: float
    """Exponent."""
    b_se: float
    """Standard error of b (nan when unmeasured: one seed's ladder through two sizes, or `fit_seeds` with one
    seed)."""
    cov: tuple[tuple[float, float], tuple[float, float]]
    """Covariance of (log a, b)."""
    n: int
    """Sizes fitted."""
    seeds: int = 1
    """Seeds behind each size (`fit_seeds`); 1 for `fit_power_law`."""
    dof: int = 0
    """Degrees of freedom of the s.e.: sizes - 2 (`fit_power_law`), seeds - 1 (`fit_seeds`); 0: no interval."""

    def half_width(self, level: float = LEVEL) -> float:
        """Half the width of the `level` interval of b: t(dof) x s.e. (nan without one)."""
        return t_quantile((1 + level) / 2, self.dof) * self.b_se if self.dof > 0 else math.nan

    def band(self, params, level: float = LEVEL):
        """(low, high): the `level` interval of the fitted gap at `params` (an array)."""
        import numpy as np

        x = np.log(np.asarray(params, dtype=float))
        (caa, cab), (_, cbb) = self.cov
        t = t_quantile((1 + level) / 2, self.dof) if self.dof > 0 else math.nan
        center, spread = math.log(self.a) + self.b * x, t * np.sqrt(np.maximum(caa + 2 * cab * x + cbb * x * x, 0))
        return np.exp(center - spread), np.exp(center + spread)


def _design(params):
    import numpy as np

    x = np.log(np.asarray(params, dtype=float))
    return np.column_stack([np.ones_like(x), x])


def _pair(cov) -> tuple[tuple[float, float], tuple[float, float]]:
    return (float(cov[0, 0]), float(cov[0, 1])), (float(cov[1, 0]), float(cov[1, 1]))


def fit_power_law(params, gaps) -> PowerLaw:
    """Least squares of log gap = log a + b log N; needs >= 2 points with positive gaps."""
    import numpy as np

    design, y = _design(params), np.log(np.asarray(gaps, dtype=float))
    coef, *_ = np.linalg.lstsq(design, y, rcond=None)
    dof = len(y) - 2
    s2 = float(np.sum((y - design @ coef) ** 2) / dof) if dof > 0 else math.nan
    cov = s2 * np.linalg.inv(design.T @ design)
    return PowerLaw(a=float(np.exp(coef[0])), b=float(coef[1]), b_se=math.sqrt(cov[1, 1]) if dof > 0 else math.nan,
                    cov=_pair(cov), n=len(y), dof=max(dof, 0))


def fit_seeds(params, gaps_by_seed) -> PowerLaw:
    """The power law of a ladder with seeds: `gaps_by_seed[j][i]` is seed j's gap at size `params[i]` (all
    positive, every seed at every size). One least-squares line per seed; (log a, b) the mean of the seeds'
    lines, their covariance the seeds' sample covariance / seeds (nan with one seed), dof = seeds - 1."""
    import numpy as np

    design, y = _design(params), np.log(np.asarray(gaps_by_seed, dtype=float))  # y: (seeds, sizes)
    coefs = np.linalg.lstsq(design, y.T, rcond=None)[0].T  # (seeds, 2): each seed's (log a, b)
    seeds = len(coefs)
    mean = coefs.mean(axis=0)
    cov = np.cov(coefs, rowvar=False) / seeds if seeds > 1 else np.full((2, 2), math.nan)
    return PowerLaw(a=float(np.exp(mean[0])), b=float(mean[1]), b_se=math.sqrt(cov[1, 1]), cov=_pair(cov),
                    n=design.shape[0], seeds=seeds, dof=seeds - 1)


def t_quantile(p: float, dof: int) -> float:
    """The p-quantile of Student's t with `dof` degrees of freedom (p in [0.5, 1)): closed form for 1 and 2,
    else bisection on the distribution function, integrated by Simpson's rule (1e-9 absolute)."""
    if dof == 1:
        return math.tan(math.pi * (p - 0.5))
    if dof == 2:
        return (2 * p - 1) / math.sqrt(2 * p * (1 - p))
    import numpy as np

    norm = math.exp(math.lgamma((dof + 1) / 2) - math.lgamma(dof / 2)) / math.sqrt(dof * math.pi)

    def cdf(t: float) -> float:
        x = np.linspace(0.0, t, 2001)
        f = norm * (1 + x * x / dof) ** (-(dof + 1) / 2)
        return 0.5 + (x[1] - x[0]) / 3 * (f[0] + f[-1] + 4 * f[1:-1:2].sum() + 2 * f[2:-1:2].sum())

    low, high = 0.0, 1.0
    while cdf(high) < p:
        low, high = high, 2 * high
    while high - low > 1e-10:
        mid = (low + high) / 2
        low, high = (mid, high) if cdf(mid) < p else (low, mid)
    return (low + high) / 2
