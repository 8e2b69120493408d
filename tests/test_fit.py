"""results/fit.py: the gap law and the loss law through a ladder with seeds, against references.

Compared: Student's t quantiles and distribution with printed tables and closed forms; `fit_gap_law` on exact
power laws (a and b recovered), in its least-squares limit with the closed form (the mean of the seeds' own
least-squares slopes, whose t interval the bootstrap's corrected s.e. reproduces), its Huber minimum with a
brute-force grid, its pull by a wild point with least squares'; the interval's coverage of the true exponent on
synthetic ladders of known a, b and seed noise, against its nominal 68 % and 95 % (within 3 binomial sds), and
the uncorrected percentile interval's shortfall; `fit_loss_law` recovering a known E, A, alpha from every start.
"""

import math

import numpy as np
import pytest

from zbpscale.results.fit import (
    GAP_DELTA,
    LEVEL,
    fit_gap_law,
    fit_loss_law,
    huber_line,
    huber_objective,
    resample_counts,
    t_cdf,
    t_quantile,
)

PARAMS = np.array([1.1e5, 8.5e5, 3.2e6, 2.1e7])  # a ladder spanning 200x in N
A, B = 40.0, -0.3


@pytest.mark.parametrize("p, dof, table", [
    (0.975, 1, 12.706), (0.975, 2, 4.303), (0.975, 3, 3.182), (0.975, 4, 2.776), (0.975, 10, 2.228),
    (0.975, 30, 2.042), (0.995, 3, 5.841), (0.995, 10, 3.169), (0.5, 4, 0.0),
])
def test_t_quantiles_match_the_printed_table(p, dof, table):
    assert t_quantile(p, dof) == pytest.approx(table, abs=6e-4)


@pytest.mark.parametrize("dof", [3, 5])
@pytest.mark.parametrize("p", [0.84, 0.975])
def test_t_quantiles_invert_the_closed_form_distribution(p, dof):
    """For odd dof the distribution function has a closed form in theta = atan(t / sqrt(dof)):
    F = 1/2 + (theta + sin cos (1 + 2/3 cos^2 [dof 5])) / pi."""
    theta = math.atan(t_quantile(p, dof) / math.sqrt(dof))
    s, c = math.sin(theta), math.cos(theta)
    cdf = 0.5 + (theta + s * c * (1 + (2 / 3 * c * c if dof == 5 else 0))) / math.pi
    assert cdf == pytest.approx(p, abs=1e-9)


def test_t_quantile_tends_to_the_normal():
    assert t_quantile(0.975, 2000) == pytest.approx(1.95996, abs=2e-3)


@pytest.mark.parametrize("dof", [1, 2, 3, 5, 9])
@pytest.mark.parametrize("p", [0.6, 0.84, 0.975])
def test_t_cdf_inverts_t_quantile(p, dof):
    assert t_cdf(t_quantile(p, dof), dof) == pytest.approx(p, abs=1e-8)
    assert t_cdf(-t_quantile(p, dof), dof) == pytest.approx(1 - p, abs=1e-8)


def test_an_exact_power_law_is_recovered_with_no_spread():
    ladder = A * PARAMS ** B
    fit = fit_gap_law(PARAMS, [ladder, ladder, ladder])
    assert (fit.a, fit.b) == (pytest.approx(A, rel=1e-9), pytest.approx(B, abs=1e-12))
    assert (fit.n, fit.seeds, fit.dof, fit.resamples) == (4, 3, 2, 2000) and fit.b_se == pytest.approx(0, abs=1e-12)


NOISE = np.array([[1.05, 0.97, 1.10, 0.98], [0.93, 1.04, 0.99, 1.06], [1.02, 1.01, 0.92, 1.00]])


def test_in_its_least_squares_limit_the_fit_is_the_t_interval_of_the_seeds_own_lines():
    """delta = inf: the line through all points is the mean of each seed's least-squares line (np.polyfit), and
    the bootstrap's s.e., corrected by sqrt(S/(S-1)), is their sd / sqrt(seeds) up to the resampling's own error
    (2000 resamples: ~2 %); the band at N is the seeds' lines there ± t x their sd / sqrt(seeds)."""
    gaps = A * PARAMS ** B * NOISE
    fit = fit_gap_law(PARAMS, gaps, delta=math.inf)
    lines = np.array([np.polyfit(np.log(PARAMS), np.log(g), 1) for g in gaps])  # (seeds, (slope, intercept))
    assert fit.b == pytest.approx(lines[:, 0].mean(), abs=1e-12)
    assert fit.a == pytest.approx(math.exp(lines[:, 1].mean()), rel=1e-12)
    assert fit.b_se == pytest.approx(lines[:, 0].std(ddof=1) / math.sqrt(3), rel=0.06)
    assert fit.half_width() == pytest.approx(t_quantile((1 + LEVEL) / 2, 2) * fit.b_se, rel=1e-12)
    x = 5e5
    at_x = lines[:, 1] + lines[:, 0] * math.log(x)  # each seed's log gap at x
    low, high = fit.band([x])
    spread = t_quantile((1 + LEVEL) / 2, 2) * at_x.std(ddof=1) / math.sqrt(3)
    assert math.log(high[0]) - math.log(low[0]) == pytest.approx(2 * spread, rel=0.06)
    assert (math.log(low[0]) + math.log(high[0])) / 2 == pytest.approx(at_x.mean(), abs=1e-9)


def test_the_huber_line_is_the_minimum_of_its_objective_and_a_wild_point_pulls_it_less():
    """Three seeds' points, one seed's gap x5 at the largest size (a diverged run): the IRLS line's Huber
    objective is the least over a fine grid of (intercept, slope) around it, and the wild point moves its slope
    less than half as far as it moves least squares'."""
    x = np.tile(np.log(PARAMS), 3)
    clean = np.log(A * PARAMS ** B * NOISE).ravel()
    wild = clean + np.array([0] * 11 + [math.log(5)])
    intercept, slope = huber_line(x, wild, np.ones(12))
    best = huber_objective(x, wild, intercept, slope)
    grid = [(i, s) for i in np.linspace(intercept - 0.5, intercept + 0.5, 201)
            for s in np.linspace(slope - 0.05, slope + 0.05, 201)]
    assert best <= min(huber_objective(x, wild, i, s) for i, s in grid) + 1e-12
    ls_pull = np.polyfit(x, wild, 1)[0] - np.polyfit(x, clean, 1)[0]
    huber_pull = slope - huber_line(x, clean, np.ones(12))[1]
    assert 0 < huber_pull < 0.5 * ls_pull


def test_one_seed_has_a_line_and_no_interval():
    fit = fit_gap_law(PARAMS, [A * PARAMS ** B * NOISE[0]])
    assert fit.seeds == 1 and fit.dof == 0 and fit.resamples == 0 and math.isnan(fit.b_se)
    assert math.isnan(fit.half_width())
    assert fit.b == pytest.approx(huber_line(np.log(PARAMS), np.log(A * PARAMS ** B * NOISE[0]), np.ones(4))[1])


def test_resamples_draw_seeds_with_replacement():
    counts = resample_counts(3, 20000)
    assert counts.shape == (20000, 3) and (counts.sum(axis=1) == 3).all()
    # 3 seeds give 10 distinct resamples; all three the same seed has probability 3/27
    assert len({tuple(c) for c in counts}) == 10
    assert np.mean(counts.max(axis=1) == 3) == pytest.approx(3 / 27, abs=0.01)


DRAWS = 1000


@pytest.mark.parametrize("sizes, seeds, sigma, level", [
    (3, 3, [0.05, 0.10, 0.20], 0.68),  # the mini ladder's shape; the noise grows with size, as a small gap's does
    (3, 3, [0.05, 0.10, 0.20], 0.95),
    (4, 3, [0.30, 0.10, 0.05, 0.05], 0.68),  # the GPU ladder's shape; the noise shrinks with size
    (4, 2, [0.10, 0.10, 0.10, 0.10], 0.68),  # two seeds: t with 1 degree of freedom
])
def test_the_interval_covers_the_true_exponent_at_its_nominal_rate(sizes, seeds, sigma, level):
    """Synthetic ladders gap_ij = A N_i^B exp(sigma_i e_ij), e ~ N(0, 1) independent over seeds j and sizes i:
    over 1000 draws the `level` interval of b (bootstrap s.e. over seeds, 400 resamples, corrected, t) covers B
    at `level` within 3 binomial sds (68 %: ± 0.044, 95 %: ± 0.021). Half the draws add a term that each seed
    shares across its sizes (its noise correlated from size to size, as one data order may make it): resampling
    whole seeds keeps it. The uncorrected percentile interval of the same resamples covers less (3 seeds)."""
    rng = np.random.default_rng(20261203)
    params, sigma = PARAMS[:sizes], np.asarray(sigma)
    tolerance = 3 * math.sqrt(level * (1 - level) / DRAWS)
    hits = 0
    for draw in range(DRAWS):
        gaps = A * params ** B * np.exp(sigma * rng.standard_normal((seeds, sizes)))
        if draw % 2:
            gaps = gaps * np.exp(rng.standard_normal((seeds, 1)) * sigma)  # each seed's offset at every size
        fit = fit_gap_law(params, gaps, resamples=400)
        hits += abs(fit.b - B) <= fit.half_width(level)
    assert abs(hits / DRAWS - level) <= tolerance, hits / DRAWS


def test_the_uncorrected_percentile_interval_of_three_seeds_covers_less_than_it_says():
    """Why the interval is not the bootstrap's percentile interval: with 3 seeds the 68 % percentile interval of
    the resampled exponents covers well under 68 % (the reason given in results/fit.py)."""
    rng = np.random.default_rng(7)
    params, sigma, hits = PARAMS[:3], np.array([0.05, 0.10, 0.20]), 0
    x = np.tile(np.log(params), 3)
    counts = np.repeat(resample_counts(3, 400), 3, axis=1)
    for _ in range(400):
        y = np.log(A * params ** B * np.exp(sigma * rng.standard_normal((3, 3)))).ravel()
        slopes = huber_line(x, y, counts, GAP_DELTA)[1]
        low, high = np.quantile(slopes, [0.16, 0.84])
        hits += low <= B <= high
    assert hits / 400 < 0.62


def test_the_loss_law_s_standard_errors_are_those_of_refits_to_convergence():
    """Each resample of the seeds refitted by another optimiser (Nelder-Mead, to 1e-10 in the parameters) from the
    same optimum gives the standard errors the fit says, to 1e-5 (the fit's own refits had stopped at their start:
    L-BFGS-B's default tolerance is relative to max(|f|, 1), and the objective is ~1e-5; they came out 2x too small
    here, up to 500x with 2 seeds); and its optimum is the other optimiser's."""
    from scipy.optimize import minimize

    from zbpscale.results.fit import LOSS_DELTA, _loss_objective, bootstrap_cov, resample_counts

    params = np.array([1e5, 1e6, 1e7, 1e8, 1e9])
    noisy = (1.8 + 400 * params ** -0.34) * np.exp(0.01 * np.random.default_rng(3).standard_normal((3, 5)))
    fit = fit_loss_law(params, noisy, resamples=60)
    y, x = np.log(noisy).ravel(), np.tile(np.log(params), 3)

    def refit(weights):
        res = minimize(lambda th: _loss_objective(th, x, y, weights, LOSS_DELTA)[0],
                       (math.log(fit.E), math.log(fit.A), fit.alpha), method="Nelder-Mead",
                       options={"xatol": 1e-10, "fatol": 1e-18, "maxiter": 20000})
        return math.exp(res.x[0]), math.exp(res.x[1]), res.x[2]

    assert refit(np.ones(15)) == pytest.approx((fit.E, fit.A, fit.alpha), rel=1e-6)
    draws = [refit(np.repeat(c, 5).astype(float)) for c in resample_counts(3, 60)]
    assert tuple(np.sqrt(np.diag(bootstrap_cov(draws, 3)))) == pytest.approx(fit.se, rel=1e-5)


def test_the_loss_law_is_recovered_from_the_grid_of_starts():
    """L = E + A N^-alpha exact at 5 sizes (one seed: no interval): E, A, alpha recovered; 3 seeds with noise of
    1 %: the true values lie within 3 s.e. of the fit."""
    params = np.array([1e5, 1e6, 1e7, 1e8, 1e9])
    law = 1.8 + 400 * params ** -0.34
    fit = fit_loss_law(params, [law])
    assert (fit.E, fit.A, fit.alpha) == (pytest.approx(1.8, rel=1e-3), pytest.approx(400, rel=2e-2),
                                         pytest.approx(0.34, rel=3e-3))
    assert fit.dof == 0 and all(math.isnan(s) for s in fit.se)
    rng = np.random.default_rng(3)
    noisy = law * np.exp(0.01 * rng.standard_normal((3, 5)))
    fit = fit_loss_law(params, noisy, resamples=100)
    assert (fit.n, fit.seeds, fit.dof) == (5, 3, 2)
    assert abs(fit.alpha - 0.34) < 3 * fit.se[2] and abs(fit.E - 1.8) < 3 * fit.se[0]
