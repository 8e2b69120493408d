"""results/fit.py: the power law of the gap through a ladder with seeds, against references.

Compared: Student's t quantiles with printed tables; `fit_seeds` on exact power laws (a and b recovered) and
with the closed form (the mean of the seeds' own least-squares slopes, their sd / sqrt(seeds)); the interval's
coverage of the true exponent on synthetic ladders of known a, b and seed noise, against its nominal level.
"""

import math

import numpy as np
import pytest

from zbpscale.results.fit import LEVEL, fit_power_law, fit_seeds, t_quantile

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


def test_an_exact_power_law_is_recovered_with_no_spread():
    ladder = A * PARAMS ** B
    fit = fit_seeds(PARAMS, [ladder, ladder, ladder])
    assert (fit.a, fit.b) == (pytest.approx(A, rel=1e-9), pytest.approx(B, abs=1e-12))
    assert (fit.n, fit.seeds, fit.dof) == (4, 3, 2) and fit.b_se == pytest.approx(0, abs=1e-12)


def test_the_fit_is_the_mean_of_the_seeds_own_lines():
    """Closed form: b = mean of each seed's least-squares slope (np.polyfit), s.e. = their sd / sqrt(seeds); the
    same line as least squares through the mean log gap per size; the band at N is the mean of the seeds'
    lines there ± t x their sd / sqrt(seeds)."""
    noise = np.array([[1.05, 0.97, 1.10, 0.98], [0.93, 1.04, 0.99, 1.06], [1.02, 1.01, 0.92, 1.00]])
    gaps = A * PARAMS ** B * noise
    fit = fit_seeds(PARAMS, gaps)
    lines = np.array([np.polyfit(np.log(PARAMS), np.log(g), 1) for g in gaps])  # (seeds, (slope, intercept))
    assert fit.b == pytest.approx(lines[:, 0].mean(), abs=1e-12)
    assert fit.a == pytest.approx(math.exp(lines[:, 1].mean()), rel=1e-12)
    assert fit.b_se == pytest.approx(lines[:, 0].std(ddof=1) / math.sqrt(3), rel=1e-9)
    assert fit.half_width() == pytest.approx(t_quantile((1 + LEVEL) / 2, 2) * fit.b_se, rel=1e-12)
    through_means = fit_power_law(PARAMS, np.exp(np.log(gaps).mean(axis=0)))
    assert (fit.a, fit.b) == (pytest.approx(through_means.a, rel=1e-12), pytest.approx(through_means.b, abs=1e-12))
    x = 5e5
    at_x = lines[:, 1] + lines[:, 0] * math.log(x)  # each seed's log gap at x
    low, high = fit.band([x])
    spread = t_quantile((1 + LEVEL) / 2, 2) * at_x.std(ddof=1) / math.sqrt(3)
    assert (math.log(low[0]), math.log(high[0])) == (pytest.approx(at_x.mean() - spread, abs=1e-9),
                                                     pytest.approx(at_x.mean() + spread, abs=1e-9))


def test_one_seed_has_a_line_and_no_interval():
    fit = fit_seeds(PARAMS, [A * PARAMS ** B * np.array([1.05, 0.97, 1.02, 0.98])])
    assert fit.seeds == 1 and fit.dof == 0 and math.isnan(fit.b_se) and math.isnan(fit.half_width())
    assert fit.b == pytest.approx(fit_power_law(PARAMS, A * PARAMS ** B * np.array([1.05, 0.97, 1.02, 0.98])).b)


DRAWS = 2000


@pytest.mark.parametrize("sizes, seeds, sigma, level", [
    (3, 3, [0.05, 0.10, 0.20], 0.68),  # the mini ladder's shape; the noise grows with size, as a small gap's does
    (3, 3, [0.05, 0.10, 0.20], 0.95),
    (4, 3, [0.30, 0.10, 0.05, 0.05], 0.68),  # the GPU ladder's shape; the noise shrinks with size
    (4, 2, [0.10, 0.10, 0.10, 0.10], 0.68),  # two seeds: t with 1 degree of freedom
])
def test_the_interval_covers_the_true_exponent_at_its_nominal_rate(sizes, seeds, sigma, level):
    """Synthetic ladders gap_ij = A N_i^B exp(sigma_i e_ij), e ~ N(0, 1) independent over seeds j and sizes i:
    over 2000 draws the `level` interval of b covers B at `level` within 3 binomial sds (68%: ± 0.031,
    95%: ± 0.015). Then the same draws with a second term that each seed shares across its sizes (its noise
    correlated from size to size, as one data order may make it): the same coverage, one line per seed."""
    rng = np.random.default_rng(20261203)
    params, sigma = PARAMS[:sizes], np.asarray(sigma)
    tolerance = 3 * math.sqrt(level * (1 - level) / DRAWS)
    hits = correlated = 0
    for _ in range(DRAWS):
        gaps = A * params ** B * np.exp(sigma * rng.standard_normal((seeds, sizes)))
        fit = fit_seeds(params, gaps)
        hits += abs(fit.b - B) <= fit.half_width(level)
        shared = rng.standard_normal((seeds, 1)) * sigma  # each seed's offset, the same at every size
        fit = fit_seeds(params, gaps * np.exp(shared))
        correlated += abs(fit.b - B) <= fit.half_width(level)
    assert abs(hits / DRAWS - level) <= tolerance, hits / DRAWS
    assert abs(correlated / DRAWS - level) <= tolerance, correlated / DRAWS
