"""Scaling laws through a ladder with seeds, fitted robustly, with intervals from a paired bootstrap over seeds.

    fit_gap_law(params, gaps_by_seed)      gap = a N^b: Huber loss on log gap through every (seed, size) point
    fit_loss_law(params, losses_by_seed)   L = E + A N^-alpha: Huber loss on log L, L-BFGS-B from a grid of starts
    bootstrap(...)                         the paired bootstrap over seeds behind both intervals
    t_quantile, t_cdf                      Student's t (scipy.stats)

The fits. Both are made on log values with the Huber loss (quadratic within `delta` of the curve, linear
beyond: one wild point pulls the fit by a bounded amount), as Hoffmann et al. (2022) fit their loss law and
Besiroglu et al. (2024) re-fit it. The gap law is a line in log-log space, so its Huber objective is convex: the
iteratively reweighted least squares of `huber_line` reaches its one minimum from the least-squares start
(tests/test_fit.py checks it against a grid). The loss law is not convex in (E, A, alpha): it is minimised by
L-BFGS-B from every start of a grid (Hoffmann et al.'s), the best kept.

The intervals. A seed is a whole ladder (one data order and initialisation at every size), so the bootstrap
resamples seeds, keeping each seed's sizes together (`RESAMPLES` draws of the seeds with replacement), and refits.
With the 3 seeds of a small study the percentile interval of the resampled fits covers far less than it says
(the spread of a resampled mean of S values is sqrt((S-1)/S) of the true one, and 3 seeds give 10 distinct
resamples: 51-53 % for a nominal 68 % on synthetic ladders). The interval used is therefore the bootstrap's
standard error, corrected by sqrt(S/(S-1)), times Student's t at S - 1 degrees of freedom: for a statistic
linear in the seeds (least squares) it is exactly the t interval of the seeds' own fits, which covers at its
level under normal noise; for the Huber fits, the multiplier and the prediction it carries the same calibration.
tests/test_fit.py measures its coverage on synthetic ladders against the nominal 68 % and 95 %.
Caveats: every seed must be at every fitted size; an interval covers seed noise only, not a ladder that bends
away from the law. Torch-free; numpy inside the functions, scipy for the loss law and Student's t.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

LEVEL = 0.68
"""The level of the bands drawn: a 68 % interval (± 1 s.e. for many seeds)."""
LEVELS = (0.68, 0.95)
"""The levels quoted in tables."""
RESAMPLES = 2000
"""Bootstrap resamples of the seeds (>= 1,000 for a standard error good to ~2 %)."""
GAP_DELTA = 0.5
"""Huber's delta on log gap: a point more than 65 % off the line counts linearly. A gap's seed noise is 5-30 %, so
the ordinary scatter is fitted by least squares, and the interval keeps its level (at delta 0.1 the 68 % interval
covered 74-77 % of synthetic ladders, at 0.3 up to 74 %), while a wild point (a diverged seed's gap, x5) pulls the
line less than half as far as it pulls least squares."""
LOSS_DELTA = 1e-3
"""Huber's delta on log loss (Hoffmann et al. 2022)."""


def t_interval(center: float, se: float, dof: int, level: float) -> tuple[float, float]:
    """center ± t(dof) x se at `level` (nan without degrees of freedom)."""
    half = t_quantile((1 + level) / 2, dof) * se if dof > 0 else math.nan
    return center - half, center + half


# ------------------------------------------------------------------------------------------------ bootstrap
def resample_counts(seeds: int, resamples: int = RESAMPLES, rng_seed: int = 0):
    """(resamples, seeds): how many times each seed is drawn in each resample of the seeds with replacement."""
    import numpy as np

    rng = np.random.default_rng(rng_seed)
    return rng.multinomial(seeds, [1 / seeds] * seeds, size=resamples)


def bootstrap_cov(draws, seeds: int):
    """The covariance of a statistic from its resampled values `draws` (resamples, k), corrected by S/(S-1)
    (module docstring)."""
    import numpy as np

    draws = np.asarray(draws, dtype=float).reshape(len(draws), -1)
    return np.cov(draws, rowvar=False).reshape(draws.shape[1], draws.shape[1]) * seeds / max(seeds - 1, 1)


# ------------------------------------------------------------------------------------------------ the gap law
def huber_line(x, y, weights, delta: float = GAP_DELTA, iterations: int = 200):
    """(intercept, slope) minimising sum_i weights_i huber_delta(y_i - intercept - slope x_i), for every row of
    `weights` (..., points) at once, by iteratively reweighted least squares from least squares: Huber's weight
    is 1 within delta and delta/|r| beyond. delta=inf is least squares."""
    import numpy as np

    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    c = np.asarray(weights, dtype=float)
    w = c.copy()
    for _ in range(iterations):
        s0, s1, s2 = w.sum(-1), (w * x).sum(-1), (w * x * x).sum(-1)
        t0, t1 = (w * y).sum(-1), (w * x * y).sum(-1)
        slope = (s0 * t1 - s1 * t0) / (s0 * s2 - s1 * s1)
        intercept = (t0 - slope * s1) / s0
        r = np.abs(y - intercept[..., None] - slope[..., None] * x)
        w_new = c * np.where(r <= delta, 1.0, delta / np.maximum(r, 1e-300))
        if np.allclose(w_new, w, rtol=0, atol=1e-13):
            break
        w = w_new
    return intercept, slope


def huber_objective(x, y, intercept: float, slope: float, delta: float = GAP_DELTA) -> float:
    """sum_i huber_delta(y_i - intercept - slope x_i): 1/2 r^2 within delta, delta (|r| - delta/2) beyond."""
    import numpy as np

    r = np.abs(np.asarray(y, float) - intercept - slope * np.asarray(x, float))
    return float(np.where(r <= delta, 0.5 * r * r, delta * (r - 0.5 * delta)).sum())


@dataclass(frozen=True, kw_only=True)
class PowerLaw:
    """gap = a * N^b, fitted on log values, with the covariance of (log a, b) from the bootstrap over seeds."""

    a: float
    """Prefactor."""
    b: float
    """Exponent."""
    b_se: float
    """Standard error of b (nan with one seed: unmeasured)."""
    cov: tuple[tuple[float, float], tuple[float, float]]
    """Covariance of (log a, b)."""
    n: int
    """Sizes fitted."""
    seeds: int = 1
    """Seeds behind each size."""
    dof: int = 0
    """Degrees of freedom of the intervals: seeds - 1 (0: no interval)."""
    resamples: int = 0
    """Bootstrap resamples behind `cov` (0: none, one seed)."""

    def half_width(self, level: float = LEVEL) -> float:
        """Half the width of the `level` interval of b: t(dof) x s.e. (nan without one)."""
        return t_quantile((1 + level) / 2, self.dof) * self.b_se if self.dof > 0 else math.nan

    def at(self, params):
        """The fitted gap at `params`."""
        import numpy as np

        return self.a * np.asarray(params, dtype=float) ** self.b

    def log_se(self, params):
        """Standard error of log gap on the line at `params` (from the covariance of log a and b)."""
        import numpy as np

        x = np.log(np.asarray(params, dtype=float))
        (caa, cab), (_, cbb) = self.cov
        return np.sqrt(np.maximum(caa + 2 * cab * x + cbb * x * x, 0))

    def band(self, params, level: float = LEVEL):
        """(low, high): the `level` interval of the fitted gap at `params` (an array)."""
        import numpy as np

        t = t_quantile((1 + level) / 2, self.dof) if self.dof > 0 else math.nan
        center, spread = np.log(self.at(params)), t * self.log_se(params)
        return np.exp(center - spread), np.exp(center + spread)


def fit_gap_law(params, gaps_by_seed, *, delta: float = GAP_DELTA, resamples: int = RESAMPLES) -> PowerLaw:
    """The gap law of a ladder with seeds: `gaps_by_seed[j][i]` is seed j's gap at size `params[i]` (all positive,
    every seed at every size). Huber on log gap through all the (seed, size) points; the covariance of
    (log a, b) from `resamples` resamples of the seeds (none with one seed)."""
    import numpy as np

    y = np.log(np.asarray(gaps_by_seed, dtype=float))  # (seeds, sizes)
    seeds, sizes = y.shape
    x = np.tile(np.log(np.asarray(params, dtype=float)), seeds)
    log_a, b = huber_line(x, y.ravel(), np.ones(seeds * sizes), delta)
    cov, draws = np.full((2, 2), math.nan), 0
    if seeds > 1:
        counts = np.repeat(resample_counts(seeds, resamples), sizes, axis=1)  # (resamples, points)
        cov, draws = bootstrap_cov(np.column_stack(huber_line(x, y.ravel(), counts, delta)), seeds), resamples
    pair = ((float(cov[0, 0]), float(cov[0, 1])), (float(cov[1, 0]), float(cov[1, 1])))
    return PowerLaw(a=float(np.exp(log_a)), b=float(b), b_se=math.sqrt(cov[1, 1]), cov=pair, n=sizes, seeds=seeds,
                    dof=seeds - 1, resamples=draws)


# ------------------------------------------------------------------------------------------------ the loss law
@dataclass(frozen=True, kw_only=True)
class LossLaw:
    """L(N) = E + A N^-alpha for one arm, fitted on log L, with standard errors from the bootstrap over seeds."""

    E: float
    """The loss at infinite size."""
    A: float
    """Scale of the reducible part."""
    alpha: float
    """Exponent of the reducible part."""
    se: tuple[float, float, float]
    """Standard errors of (E, A, alpha) (nan with one seed)."""
    n: int
    """Sizes fitted."""
    seeds: int
    """Seeds behind each size."""
    dof: int
    """Degrees of freedom of the intervals: seeds - 1."""

    def at(self, params):
        import numpy as np

        return self.E + self.A * np.asarray(params, dtype=float) ** -self.alpha


def _loss_objective(theta, x, y, weights, delta):
    """Huber on log L - log(exp(e) + exp(a - alpha x)) and its gradient in theta = (e, a, alpha)."""
    import numpy as np

    e, a, alpha = theta
    u, v = np.full_like(x, e), a - alpha * x
    top = np.maximum(u, v)
    log_pred = top + np.log(np.exp(u - top) + np.exp(v - top))
    r = log_pred - y
    big = np.abs(r) > delta
    loss = np.where(big, delta * (np.abs(r) - 0.5 * delta), 0.5 * r * r)
    dr = weights * np.where(big, delta * np.sign(r), r)  # d loss / d r
    pu = np.exp(u - log_pred)  # d log_pred / d e; 1 - pu is d log_pred / d a
    grad = np.array([(dr * pu).sum(), (dr * (1 - pu)).sum(), -(dr * (1 - pu) * x).sum()])
    return float((weights * loss).sum()), grad


LBFGS_OPTIONS = {"ftol": 1e-15, "gtol": 1e-12, "maxiter": 10_000}
"""To convergence: L-BFGS-B's default stop is a fall of the objective under 2.2e-9 of max(|f|, 1), and this Huber
objective on log losses is about 1e-5 at its optimum: by default each fit stopped about where it started, and the
bootstrap's refits, started from the optimum, barely moved (standard errors 2-6x too small)."""


def _minimize(starts, x, y, weights, delta):
    from scipy.optimize import minimize

    best = None
    for start in starts:
        res = minimize(_loss_objective, start, args=(x, y, weights, delta), jac=True, method="L-BFGS-B",
                       options=LBFGS_OPTIONS)
        if best is None or res.fun < best.fun:
            best = res
    return best.x


LOSS_STARTS = tuple((e, a, alpha) for e in (-1.0, 0.0, 1.0, 2.0) for a in (0.0, 5.0, 10.0, 15.0)
                    for alpha in (0.25, 0.75, 1.5))
"""Starts of the loss law's minimiser in (log E, log A, alpha): a coarse form of Hoffmann et al.'s grid (48
starts; E up to e^2 = 7.4, the loss of a model that has learnt little more than unigram frequencies)."""


def fit_loss_law(params, losses_by_seed, *, delta: float = LOSS_DELTA, resamples: int = RESAMPLES
                 ) -> LossLaw:
    """One arm's loss law: `losses_by_seed[j][i]` is seed j's final val loss at size `params[i]`. The best of
    L-BFGS-B from every start of LOSS_STARTS on all the (seed, size) points, to convergence (LBFGS_OPTIONS); each
    resample of the seeds is refitted from that optimum."""
    import numpy as np

    y = np.log(np.asarray(losses_by_seed, dtype=float))
    seeds, sizes = y.shape
    x = np.tile(np.log(np.asarray(params, dtype=float)), seeds)
    theta = _minimize(LOSS_STARTS, x, y.ravel(), np.ones(seeds * sizes), delta)
    se = (math.nan,) * 3
    if seeds > 1:
        fits: dict[tuple, tuple[float, float, float]] = {}  # a resample drawn again is the same fit: 3 seeds
        draws = []                                              # have 10 distinct resamples, 5 seeds 126
        for c in resample_counts(seeds, resamples):
            if (key := tuple(c)) not in fits:
                e, a, alpha = _minimize([theta], x, y.ravel(), np.repeat(c, sizes).astype(float), delta)
                fits[key] = (math.exp(e), math.exp(a), alpha)
            draws.append(fits[key])
        se = tuple(float(s) for s in np.sqrt(np.diag(bootstrap_cov(draws, seeds))))
    return LossLaw(E=float(math.exp(theta[0])), A=float(math.exp(theta[1])), alpha=float(theta[2]), se=se, n=sizes,
                   seeds=seeds, dof=seeds - 1)


# ------------------------------------------------------------------------------------------------ Student's t
def t_cdf(t: float, dof: int) -> float:
    """P(T <= t) for Student's t with `dof` degrees of freedom (scipy.stats)."""
    from scipy import stats

    return float(stats.t.cdf(t, dof))


def t_quantile(p: float, dof: int) -> float:
    """The p-quantile of Student's t with `dof` degrees of freedom (scipy.stats)."""
    from scipy import stats

    return float(stats.t.ppf(p, dof))
