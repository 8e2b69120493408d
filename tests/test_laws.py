"""results/laws.py: the held-out prediction, the compute multiplier and the paired test of the gap's rise, against
closed forms.

Compared: `bp_tokens_for` with hand-interpolated crossings (a literal table); the multiplier of a ZBP curve that is
BP's curve shifted by a known factor in tokens (m = that factor, its interval the t interval of the seeds' log m);
the rise's paired t test with Student's t at 2 d.o.f. in closed form; the held-out check on exact power laws
(prediction = observation, consistent) and on a largest size three times off (not consistent); the remarks of a
ladder too short for a check or a loss law.
"""

import math
from types import SimpleNamespace

import numpy as np
import pytest

from zbpscale.results.fit import t_quantile
from zbpscale.results.gaps import GapPoint
from zbpscale.results.laws import bp_tokens_for, hold_out_largest, loss_laws, multipliers, rises

CURVE = [(1000, 8.0), (2000, 7.0), (4000, 6.0)]


@pytest.mark.parametrize("loss, tokens", [
    (7.0, 2000.0),                  # on an eval: its tokens
    (6.5, math.sqrt(2000 * 4000)),  # half way in loss: the geometric mean of the tokens
    (7.75, 2 ** 0.25 * 1000),       # a quarter of the way from 8.0 to 7.0
    (8.0, 0.0),                     # the first eval already there: before the curve begins
    (5.9, math.inf),                # never reached
])
def test_bp_tokens_for_a_loss_is_read_off_the_curve_in_log_tokens(loss, tokens):
    assert bp_tokens_for(loss, CURVE) == pytest.approx(tokens)


def test_an_eval_that_is_not_a_number_is_no_point_of_the_curve():
    """A helper's hunt: a nan eval of BP's before its last made the multiplier 'nan [nan, nan]'."""
    # three quarters of the way from 8.0 at 1000 tokens to 6.0 at 4000, in log tokens
    assert bp_tokens_for(6.5, [(1000, 8.0), (2000, math.nan), (4000, 6.0)]) == pytest.approx(1000 * 4 ** 0.75)
    assert bp_tokens_for(6.5, [(1000, math.nan), (2000, math.nan)]) == math.inf


def test_a_curve_that_spikes_counts_its_first_crossing():
    assert bp_tokens_for(6.5, [(1000, 11.0), (2000, 7.0), (4000, 6.0), (8000, 6.8)]) == pytest.approx(2828.4, rel=1e-4)


def points_and_curves(shifts: dict[int, float]):
    """bp's curve L(D) = 10 - log2(D / 1000) at D = 1000 ... 16000; zbp's final loss is bp's at D / shift (seed
    by seed): its multiplier is the shift."""
    tokens = [1000 * 2 ** k for k in range(5)]
    bp = lambda d: 10 - math.log2(d / 1000)  # noqa: E731 - linear in log tokens, as the interpolation assumes
    rows, curves = [], {}
    for seed, shift in shifts.items():
        for arm in ("bp", "zbp_n16"):
            run = f"mini-{arm}-s{seed}"
            rows.append(SimpleNamespace(run=run, size="mini", arm=arm, seed=seed))
            curves[run] = {t: (i + 1, bp(t) if arm == "bp" else bp(t / shift)) for i, t in enumerate(tokens)}
    final = tokens[-1]
    gaps = tuple(curves[f"mini-zbp_n16-s{s}"][final][1] - curves[f"mini-bp-s{s}"][final][1] for s in shifts)
    point = GapPoint(arm="zbp_n16", size="mini", params=3_000_000, seeds=tuple(shifts), gaps=gaps, tokens=final,
                     final=True)
    return [point], rows, curves


def test_the_multiplier_of_a_curve_shifted_in_tokens_is_the_shift():
    points, rows, curves = points_and_curves({0: 2.0, 1: 2.5, 2: 1.6})
    (m,) = multipliers(points, rows, curves)
    assert m.values == (pytest.approx(2.0), pytest.approx(2.5), pytest.approx(1.6))
    logs = np.log([2.0, 2.5, 1.6])
    assert m.geomean == pytest.approx(math.exp(logs.mean()))
    half = t_quantile(0.975, 2) * logs.std(ddof=1) / math.sqrt(3)
    low, high = m.interval(0.95)
    assert (low, high) == (pytest.approx(math.exp(logs.mean() - half)), pytest.approx(math.exp(logs.mean() + half)))
    assert m.above == pytest.approx(16.0) and not m.censored


def test_a_multiplier_beyond_the_curve_is_censored_not_averaged():
    points, rows, curves = points_and_curves({0: 2.0, 1: 40.0})  # 40x: before BP's first eval (16x at most)
    (m,) = multipliers(points, rows, curves)
    assert m.censored and m.values[1] == math.inf and math.isnan(m.geomean)


def test_the_rise_is_a_paired_t_test_over_the_seeds():
    """The issue's numbers: per seed +0.36, +0.12, +0.40 from micro to mini; with 2 d.o.f. the t distribution's
    closed form gives the one-sided p."""
    first = GapPoint(arm="zbp_n16", size="micro", params=1e5, seeds=(0, 1, 2), gaps=(0.10, 0.20, 0.05), tokens=1,
                     final=True)
    last = GapPoint(arm="zbp_n16", size="mini", params=3e6, seeds=(0, 1, 2), gaps=(0.46, 0.32, 0.45), tokens=1,
                    final=True)
    (rise,) = rises([first, last])
    assert rise.values == (pytest.approx(0.36), pytest.approx(0.12), pytest.approx(0.40))
    d = np.array([0.36, 0.12, 0.40])
    t = d.mean() / (d.std(ddof=1) / math.sqrt(3))
    assert rise.t == pytest.approx(t) and rise.sd == pytest.approx(d.std(ddof=1))
    assert rise.p_rises == pytest.approx(0.5 - t / (2 * math.sqrt(2 + t * t)))  # 1 - F_2(t)
    assert rise.p_rises == pytest.approx(0.039, abs=1e-3)


def test_no_rise_is_measured_between_sizes_that_share_no_seed():
    """The smallest size's seeds and the largest's have none in common (a helper's bundle: tiny s1 only, mini s0):
    the rise was made of no value, and plot and report ended in a ZeroDivisionError. No rise is measured; one
    shared seed gives its one value."""
    first = GapPoint(arm="zbp_n4", size="tiny", params=1e5, seeds=(1,), gaps=(0.1,), tokens=1, final=True)
    last = GapPoint(arm="zbp_n4", size="mini", params=3e6, seeds=(0,), gaps=(0.3,), tokens=1, final=True)
    assert rises([first, last]) == []
    (rise,) = rises([first, GapPoint(arm="zbp_n4", size="mini", params=3e6, seeds=(0, 1), gaps=(0.3, 0.4), tokens=1,
                                     final=True)])
    assert rise.seeds == (1,) and rise.values == (pytest.approx(0.3),) and math.isnan(rise.sd)


def ladder(gaps_by_seed, params=(1e5, 1e6, 1e7, 1e8, 1e9)) -> list[GapPoint]:
    seeds = tuple(range(len(gaps_by_seed)))
    return [GapPoint(arm="zbp_n16", size=f"s{i}", params=int(n), seeds=seeds, tokens=1, final=True,
                     gaps=tuple(g[i] for g in gaps_by_seed)) for i, n in enumerate(params)]


def test_a_held_out_size_on_the_law_is_predicted_and_one_far_off_is_not():
    params = np.array([1e5, 1e6, 1e7, 1e8, 1e9])
    noise = np.array([[1.05, 0.97, 1.02, 0.98, 1.01], [0.96, 1.03, 0.99, 1.02, 0.98], [1.0, 1.0, 0.98, 1.01, 1.02]])
    gaps = 0.02 * params ** 0.15 * noise
    checks, remarks = hold_out_largest(ladder(gaps.tolist()))
    held = checks["zbp_n16"]
    assert held.size == "s4" and remarks == {} and held.consistent
    assert held.predicted == pytest.approx(0.02 * 1e9 ** 0.15, rel=0.05)
    assert held.observed == pytest.approx(math.exp(np.log(gaps[:, -1]).mean()))
    off = gaps.copy()
    off[:, -1] *= 3
    assert not hold_out_largest(ladder(off.tolist()))[0]["zbp_n16"].consistent


def test_a_ladder_too_short_names_why_it_has_no_check_and_no_loss_law():
    checks, remarks = hold_out_largest(ladder([[0.1, 0.2, 0.4]] * 3, params=(1e5, 1e6, 1e7)))
    assert checks == {}
    assert remarks["zbp_n16"] == "zbp_n16: no held-out check, it needs >= 3 sizes besides the largest at the full " \
                                 "budget (has 2)"
    _, remarks = hold_out_largest(ladder([[0.1]] * 3, params=(1e5,)))  # it said full_table's '>= 3 sizes'
    assert remarks["zbp_n16"] == "zbp_n16: no held-out check, it needs >= 3 sizes besides the largest at the full " \
                                 "budget (has 0)"
    rows = [SimpleNamespace(run=f"{s}-bp", size=s, arm="bp", seed=0, state="complete", final_val_loss=5.0,
                            params_non_embedding=n) for s, n in (("a", 1), ("b", 2), ("c", 3))]
    laws, why = loss_laws(rows)
    assert laws == {} and why["bp"] == ("bp: no loss law L(N) = E + A N^-alpha, it needs >= 4 sizes of complete "
                                        "runs (has 3)")


def test_a_final_loss_that_is_not_a_number_is_no_loss_law_and_named():
    """A ladder on L(N) = 2 + 50 N^-0.3, two seeds, five sizes: the law comes back; with one seed's run diverged (its
    final val loss nan) the fit took it as a number and gave a law of nonsense (E 0.37, alpha 0.25: a helper's
    bundle, 2026-12-06). Now that arm has no law, and its remark names the run; the other arm keeps its own."""
    sizes = [("a1", 1e6), ("a2", 1e7), ("a3", 1e8), ("a4", 1e9), ("a5", 1e10)]
    rows = [SimpleNamespace(run=f"{s}-{arm}-s{seed}", size=s, arm=arm, seed=seed, state="complete",
                            final_val_loss=(2.0 + 50 * n ** -0.3) * (1.01 if arm == "zbp_n16" else 1.0) + 0.001 * seed,
                            params_non_embedding=n)
            for s, n in sizes for arm in ("bp", "zbp_n16") for seed in (0, 1)]
    laws, why = loss_laws(rows)
    assert why == {} and laws["bp"].alpha == pytest.approx(0.3, rel=0.02)
    assert laws["bp"].E == pytest.approx(2.0, abs=0.01)
    next(r for r in rows if r.run == "a3-bp-s1").final_val_loss = math.nan
    laws, why = loss_laws(rows)
    assert "bp" not in laws
    assert why["bp"] == "bp: no loss law, a final val loss is not a finite number (seed 1 at a3: nan)"
    assert laws["zbp_n16"].alpha == pytest.approx(0.3, rel=0.02)


def test_claims_say_why_a_fit_was_not_made_once_only_when_every_arm_has_that_reason():
    """claims.md said the first arm's reason as every arm's: bp fitted on 4 sizes, zbp_n4 and zbp_n16 on 3 read "Not
    fitted: no loss law ..., it needs >= 4 sizes of complete runs (has 3)", as if bp had none. Said once when every
    arm tried has it; else each reason names its arms."""
    from zbpscale.results.claims import _said_once

    short = "no loss law L(N) = E + A N^-alpha, it needs >= 4 sizes of complete runs (has 3)"
    remarks = {arm: f"{arm}: {short}" for arm in ("zbp_n4", "zbp_n16")}
    assert _said_once(remarks, ["zbp_n4", "zbp_n16"]) == [short]
    assert _said_once(remarks, ["bp", "zbp_n4", "zbp_n16"]) == [f"zbp_n4, zbp_n16: {short}"]
    nan = "no loss law, its final val loss is not a finite number (tiny-bp)"
    assert _said_once({**remarks, "bp": f"bp: {nan}"}, ["bp", "zbp_n4", "zbp_n16"]) == \
        [f"zbp_n4, zbp_n16: {short}", f"bp: {nan}"]
    assert _said_once({}, ["bp"]) == []


def test_the_claims_table_says_a_parameter_count_it_does_not_know_as_unknown_not_zero():
    """A bundle of a release that kept no non-embedding count: claims.md said '0.00M / 3.3M' (table.md says '?')."""
    from zbpscale.results.bundle import summary_row
    from zbpscale.results.claims import ladder_markdown

    def row(**fields):
        return summary_row(dict(run="nano-bp", size="nano", arm="bp", seed=0, state="complete", in_progress=False,
                                steps=8, tokens=512, wall_time_s=1.0, attempts=1, timeouts=0, preemptions=0,
                                final_val_loss=5.0, **fields))

    assert "| nano | ? / 3.3M | 5.000 |" in ladder_markdown([row(params=3_253_536)], ())
    assert "| nano | 0.03M / 3.3M | 5.000 |" in ladder_markdown([row(params=3_253_536, params_non_embedding=33_056)],
                                                                ())
