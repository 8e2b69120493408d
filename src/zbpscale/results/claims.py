"""The fits and tests of a bundle in words and tables: table.md's "Fits and tests" section and claims.md, the
paragraph a README quotes. Both are written by `zbpscale plot` from the same `Study`, so a number in the prose is
the number in the table. Torch-free.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from zbpscale.results.fit import LEVELS, RESAMPLES, LossLaw, PowerLaw
from zbpscale.results.gaps import Curves, GapPoint
from zbpscale.results.laws import HeldOut, Multiplier, Rise, hold_out_largest, loss_laws, multipliers, rises
from zbpscale.results.seeds import Spread
from zbpscale.results.summary import RunSummary, arm_order, ladder_count
from zbpscale.tables import plural


@dataclass(frozen=True, kw_only=True)
class Study:
    """Everything a bundle's fits and tests say."""

    points: tuple[GapPoint, ...]
    fits: dict[str, PowerLaw]
    """The gap law per ZBP arm."""
    no_fit: dict[str, str]
    laws: dict[str, LossLaw]
    """The loss law per arm (>= 4 sizes)."""
    no_law: dict[str, str]
    held_out: dict[str, HeldOut]
    no_held_out: dict[str, str]
    multipliers: tuple[Multiplier, ...]
    rises: tuple[Rise, ...]
    diverged: tuple[str, ...]
    """Runs flagged as diverged, in words."""


def study(points: list[GapPoint], fits: dict[str, PowerLaw], no_fit: dict[str, str], rows: list[RunSummary],
          curves: Curves, field: str) -> Study:
    laws, no_law = loss_laws(rows, field)
    held, no_held = hold_out_largest(points)
    diverged = tuple(f"{r.run}: {r.diverged}" for r in rows if getattr(r, "diverged", None))
    return Study(points=tuple(points), fits=fits, no_fit=no_fit, laws=laws, no_law=no_law, held_out=held,
                 no_held_out=no_held, multipliers=tuple(multipliers(points, rows, curves)),
                 rises=tuple(rises(points)), diverged=diverged)


def _range(low: float, high: float, fmt: str = "{:.2f}") -> str:
    return f"[{fmt.format(low)}, {fmt.format(high)}]"


def _b_intervals(fit: PowerLaw) -> list[str]:
    return [_range(fit.b - fit.half_width(lv), fit.b + fit.half_width(lv)) if fit.dof else "" for lv in LEVELS]


def _multiplier_cell(m: Multiplier) -> str:
    """The geometric mean; for censored values a bound they all share ('> 16.0', '< 1'), else 'censored'."""
    if not m.censored:
        return f"{m.geomean:.2f}"
    if all(v == math.inf for v in m.values):
        return f"> {m.above:.1f}"
    return "< 1" if all(v == 0 for v in m.values) else "censored"


def per_seed(m: Multiplier) -> str:
    """Each seed's multiplier: '1.70', '< 1' (BP never got down to ZBP's loss), '> 6.0' (before BP's first eval)."""
    return ", ".join(f"{v:.2f}" if 0 < v < math.inf else ("< 1" if v == 0 else f"> {m.above:.1f}")
                     for v in m.values)


METHOD = (f"Fits: Huber loss on log values through every (seed, size) point; intervals: the bootstrap over seeds "
          f"({RESAMPLES:,} resamples of whole seeds, a seed's sizes kept together), its standard error corrected by "
          "sqrt(S/(S-1)) with Student's t at S - 1 d.o.f. (results/fit.py: the percentile interval of 3 seeds "
          "covers 51-53 % for a nominal 68 %; this one covers at its level on synthetic ladders, tests/test_fit.py).")


def _block(title: str, head: list[str], rows: list[list[str]], remarks) -> str:
    """A titled markdown table (when it has rows), then the remarks as a list; '' when both are empty."""
    parts = []
    if rows:
        table = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        parts.append(f"{title}\n\n" + "\n".join(table + ["| " + " | ".join(r) + " |" for r in rows]))
    if remarks:
        parts.append("\n".join(f"- {w}" for w in remarks))
    return "\n\n".join(parts)


def fits_markdown(s: Study) -> str:
    """table.md's section: the gap law, the loss laws, the held-out check, the compute multiplier, the rise."""
    def m_cells(m: Multiplier) -> list[str]:
        return ["", ""] if m.censored or len(m.values) < 2 else [_range(*m.interval(lv)) for lv in LEVELS]

    blocks = [
        "## Fits and tests", METHOD,
        _block("Gap law, gap = a N^b (N as on the gap figure's axis):",
               ["arm", "a", "b", "b, 68 %", "b, 95 %", "sizes", "seeds"],
               [[arm, f"{f.a:.3g}", f"{f.b:+.3f}", *_b_intervals(f), str(f.n), str(f.seeds)]
                for arm, f in s.fits.items()], s.no_fit.values()),
        _block("Loss law, L(N) = E + A N^-alpha (± one bootstrap s.e.):", ["arm", "E", "A", "alpha", "sizes"],
               [[arm, f"{w.E:.3f} ± {w.se[0]:.3f}", f"{w.A:.3g} ± {w.se[1]:.2g}", f"{w.alpha:.3f} ± {w.se[2]:.3f}",
                 str(w.n)] for arm, w in s.laws.items()], s.no_law.values()),
        _block("Held out: the gap law fitted without the largest size, predicted there:",
               ["arm", "size", "predicted", "observed (geo. mean)", "observed / predicted, 95 %", "consistent"],
               [[h.arm, h.size, f"{h.predicted:+.4f}", f"{h.observed:+.4f}", _range(*h.ratio_interval(0.95)),
                 "yes" if h.consistent else "no"] for h in s.held_out.values()], s.no_held_out.values()),
        _block("Compute multiplier: BP's own val curve (same seed) reaches ZBP's final loss at D/m tokens, so ZBP "
               "needs m times BP's tokens for BP's loss (a lower bound: BP's curve is not annealed at D/m):",
               ["arm", "size", "m (geo. mean)", "68 %", "95 %", "per seed"],
               [[m.arm, m.size, _multiplier_cell(m), *m_cells(m), per_seed(m)] for m in s.multipliers], ()),
        _block("The gap's rise from the smallest to the largest size, seed by seed (paired t test, one-sided):",
               ["arm", "sizes", "mean", "sd", "per seed", "t", "p", "rises in"],
               [[r.arm, f"{r.sizes[0]} → {r.sizes[1]}", f"{r.mean:+.3f}", f"{r.sd:.3f}",
                 ", ".join(f"{v:+.2f}" for v in r.values), f"{r.t:.2f}", f"{r.p_rises:.3f}",
                 f"{sum(v > 0 for v in r.values)} of {len(r.values)}"] for r in s.rises], ()),
        ("Diverged runs (a val loss above the run's start; look at their curves before their numbers):\n\n"
         + "\n".join(f"- {d}" for d in s.diverged)) if s.diverged else "",
    ]
    return "\n\n".join(b for b in blocks if b) + "\n"


def _gaps_words(points: list[GapPoint], each: bool) -> str:
    """Each size's gap, mean ± sample sd over its seeds; `each`: with its seed count (the sizes have different)."""
    def said(p: GapPoint) -> str:
        where = f"{p.size}, {plural(p.spread.n, 'seed')}" if each else p.size
        return f"{p.spread.mean:+.2f} ± {p.spread.sd:.2f} ({where})" if p.spread.n > 1 else \
            f"{p.spread.mean:+.2f} ({where})"
    return ", ".join(said(p) for p in sorted(points, key=lambda p: p.params))


def ladder_markdown(rows: list[RunSummary], points: tuple[GapPoint, ...]) -> str:
    """One row per size: each arm's final val loss and each ZBP arm's gap to bp of the same seed, mean ± sample sd
    over the seeds (the numbers of table.md's table over seeds, three decimals)."""
    arms = sorted({r.arm for r in rows}, key=arm_order)
    zbp = [a for a in arms if a != "bp"]
    sizes = sorted({r.size for r in rows}, key=lambda n: min(ladder_count(r) for r in rows if r.size == n))
    gaps = {(p.size, p.arm): p for p in points}
    cell = lambda p: "" if p is None or not p.spread.n else (  # noqa: E731
        f"{p.spread.mean:+.3f}" if p.spread.n == 1 else f"{p.spread.mean:+.3f} ± {p.spread.sd:.3f}") + (
        "" if p.final else " *")
    partial = False
    head = ["size", "non-emb. / all params"] + [c for a in arms for c in ([a] if a == "bp" else [a, f"gap {a}"])]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for size in sizes:
        mine = [r for r in rows if r.size == size]
        first = mine[0]
        counts = (first.params_non_embedding, first.params)  # None: a bundle of a release that did not keep it
        cells = [size, " / ".join("?" if n is None else f"{n / 1e6:.{d}f}M" for n, d in zip(counts, (2, 1)))]
        for a in arms:
            done = [r for r in mine if r.arm == a and r.final_val_loss is not None]
            final = Spread.of(r.final_val_loss for r in done)
            cut = " *" if any(r.state != "complete" for r in done) else ""
            cells.append("" if not final.n else f"{final.mean:.3f}" + (f" ± {final.sd:.3f}" if final.n > 1 else "")
                         + cut)
            if a in zbp:
                cells.append(cell(gaps.get((size, a))))
                partial |= gaps.get((size, a)) is not None and not gaps[size, a].final
            partial |= bool(cut and final.n)
        lines.append("| " + " | ".join(cells) + " |")
    if partial:
        lines += ["", "\\* over a run not complete: its last validation loss, or the gap at the tokens both have "
                  "(table.md names it)"]
    return "\n".join(lines) + "\n"


def _said_once(remarks: dict[str, str], arms: list[str]) -> list[str]:
    """Why a fit was not made (`remarks`: '<arm>: <why>' by arm), of the `arms` it was tried for: once when every one
    of them has the same reason (the ladder's sizes), else each reason with the arms it is said of (one arm fitted,
    another not: the first arm's reason was said as if it were every arm's)."""
    by_reason: dict[str, list[str]] = {}
    for arm, remark in remarks.items():
        by_reason.setdefault(remark.split(": ", 1)[1], []).append(arm)
    if len(by_reason) == 1 and len(remarks) == len(set(arms)):
        return list(by_reason)
    return [f"{', '.join(names)}: {why}" for why, names in by_reason.items()]


def claims_markdown(s: Study, rows: list[RunSummary]) -> str:
    """claims.md: the ladder's table (final val loss and gap per size, over seeds), then one paragraph per ZBP arm
    saying the fits' and tests' numbers in words."""
    seeds = len({r.seed for r in rows})
    counts = {p.spread.n for p in s.points if p.final}
    each = bool(counts) and counts != {seeds}  # a size with fewer seeds than the study's: said per size
    out = [ladder_markdown(rows, s.points).rstrip("\n")]
    for arm in sorted({p.arm for p in s.points}, key=arm_order):
        pts = [p for p in s.points if p.arm == arm and p.final]
        if not pts:
            continue
        over = "its seeds" if each else plural(seeds, "seed")
        words = [f"**{arm}.** Gap to BP of the same seed at equal tokens, mean ± sample sd over {over}: "
                 f"{_gaps_words(pts, each)}."]
        rise = next((r for r in s.rises if r.arm == arm), None)
        if rise is not None and len(rise.values) > 1:
            ups = sum(v > 0 for v in rise.values)
            words.append(f"From {rise.sizes[0]} to {rise.sizes[1]} it changes by {rise.mean:+.2f} (per seed "
                         f"{', '.join(f'{v:+.2f}' for v in rise.values)}; sd {rise.sd:.2f}); it rises in {ups} of "
                         f"{len(rise.values)} seeds; paired t test of a rise: t = {rise.t:.2f}, one-sided "
                         f"p = {rise.p_rises:.3f} ({len(rise.values) - 1} d.o.f.).")
        fit = s.fits.get(arm)
        if fit is not None and fit.dof:
            low68, high68 = fit.b - fit.half_width(0.68), fit.b + fit.half_width(0.68)
            low95, high95 = fit.b - fit.half_width(0.95), fit.b + fit.half_width(0.95)
            words.append(f"Gap law gap = a N^b: b = {fit.b:+.2f}, 68 % interval {_range(low68, high68)}, 95 % "
                         f"{_range(low95, high95)}" + (" (includes 0)." if low95 <= 0 <= high95 else "."))
        elif arm in s.no_fit:
            why = s.no_fit[arm].split(": ", 1)[1]
            words.append(why[0].upper() + why[1:] + ".")
        mults = [m for m in s.multipliers if m.arm == arm]
        if mults:
            cells = []
            for m in sorted(mults, key=lambda m: m.params):
                if m.censored or len(m.values) < 2:
                    cells.append(f"{_multiplier_cell(m)} ({m.size}: per seed {per_seed(m)})")
                else:
                    cells.append(f"{m.geomean:.2f} {_range(*m.interval(0.95))} ({m.size})")
            words.append("Compute multiplier (ZBP's tokens for BP's loss, read off BP's curve; a lower bound), with "
                         "95 % intervals: " + ", ".join(cells) + ".")
        out.append(" ".join(words))
    extra = _said_once(s.no_law, [*s.laws, *s.no_law]) + _said_once(s.no_held_out, [*s.held_out, *s.no_held_out])
    if extra:
        out.append("Not fitted: " + "; ".join(extra) + ".")
    if s.diverged:
        out.append("Diverged: " + "; ".join(s.diverged) + ".")
    if seeds > 1:
        out.append(f"What the ± and intervals are: ± after a mean is the sample sd over the seeds; the intervals come "
                   f"from the bootstrap over seeds ({RESAMPLES:,} resamples of whole seeds), its s.e. corrected by "
                   f"sqrt(S/(S-1)) with Student's t at "
                   f"{'S - 1 d.o.f., S the seeds it is over' if each else f'{seeds - 1} d.o.f.'} "
                   "(for a mean of the seeds' log multipliers "
                   "that is the t interval itself); the multiplier's is on its log scale.")
    return "\n\n".join(out) + "\n"


__all__ = ["Study", "claims_markdown", "fits_markdown", "ladder_markdown", "study"]
