"""`zbpscale plot results/<tag>`: the per-run table and the figures of a collected bundle (`zbpscale collect`).

    zbpscale plot results/smoke        # -> results/smoke/table.md, results/smoke/figures/*.png and *.pdf

  table.md        the runs over seeds (mean ± sd per size and arm, when there are several seeds), one row per
                  run (the summary) with the gap to BP of the same seed, notes, the fits and tests
                  (results/claims.py), links to the figures (results/table.py);
  claims.md       the fits and tests in words, the paragraph a README quotes (results/claims.py);
  loss_curves     validation loss against tokens, one panel per size, one legend entry per arm: an arm of several
                  seeds draws each seed thin and light and their mean bold; the y axis is set by the arms' typical
                  curves (`_robust_top`), so one seed's spike shows as a ^ at the top edge, named, and in a note;
  gap_vs_scale    val loss ZBP - BP for each ZBP arm against parameters (log x): each seed's gap (against bp
                  of the same seed) a small dot, their mean ± 1 sd a marker with an error bar, and the power
                  law gap = a * N^b (results/fit.py: Huber on log gap through every seed's points, >= 3 sizes)
                  with its 68% band from the bootstrap over seeds (none for one seed);
  nsr_c           the NSR constant c = NSR * n / d per core (attn, ffn) against parameters, mean ± 1 sd over
                  seeds;
  rho_k           forward and backward branch gains per layer for each size, from the latest diag record, the
                  seeds of an arm light and their mean bold.
Legends sit outside the axes, never over data, and the stamp under each figure (`_save`) fits its width.
Gaps compare equal tokens: two complete runs by their final val losses; otherwise at the largest token count
at which both have an eval record, marked "at s/T" (step s of T) in the table and drawn hollow in the figure,
where only full-budget points are fitted; "n/c" (not comparable) when they share no eval point. Runs that
are not complete are drawn hollow and dashed, labelled with their state; runs with no validation loss yet
stay in the table and are left out of the figures with a note. Each figure function returns what
it drew, so tests (and notebooks) can check the numbers behind the picture.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import statistics
import textwrap
from dataclasses import dataclass
from pathlib import Path

from zbpscale.errors import ConfigError
from zbpscale.files import unwritable
from zbpscale.results.bundle import Bundle
from zbpscale.results.claims import Study, claims_markdown, fits_markdown, study
from zbpscale.results.fit import LEVEL, PowerLaw
from zbpscale.results.gaps import Curves, GapPoint, fit_gaps, gap_points, unpaired, val_curves
from zbpscale.results.lr import Tuning, lr_markdown, tuning_of
from zbpscale.results.seeds import Spread, seeds_of
from zbpscale.results.summary import RunSummary, arm_order, same_run, sort_key
from zbpscale.results.table import fmt_count, table_markdown
from zbpscale.run.folder import parse_run_name
from zbpscale.run.records import BlockRow, by_kind, read_records
from zbpscale.tables import named, plural, seed_count


@dataclass(frozen=True, kw_only=True)
class Clipped:
    """A point of a loss curve above the y axis of its panel (`_robust_top`): drawn as ^ at the top edge."""

    size: str
    """The panel."""
    top: float
    """The panel's upper y limit."""
    run: str
    """The run whose curve it is."""
    tokens: int
    """Training tokens of the eval."""
    step: int
    """Optimizer steps done at the eval."""
    val_loss: float
    """The val loss, above `top`."""


@dataclass(frozen=True, kw_only=True)
class Figures:
    """What `plot` wrote and drew."""

    files: tuple[Path, ...]
    """The PNG, PDF and markdown files written."""
    gap_points: tuple[GapPoint, ...]
    """Points of the gap figure."""
    fits: dict[str, PowerLaw]
    """Power-law fit of the gap per ZBP arm (arms with >= 3 sizes at the full budget and positive gaps), through
    the seeds (gaps.fit_gaps); its band is drawn when it has more than one seed."""
    no_fit: dict[str, str]
    """What the gap figure says of an arm's fit: why it has none, or which seeds it leaves out."""
    curves: dict[str, list[str]]
    """Legend entries of the loss curves per size, one per arm (`_arm_label`: 'bp', 'zbp_n16 (running)',
    'zbp_n16 (3 seeds; 1 running)')."""
    clipped: tuple[Clipped, ...]
    """Points of the loss curves above their panel's y axis, drawn as ^ at its top edge."""
    notes: tuple[str, ...]
    """What was left out of the figures, and why."""
    study: Study | None = None
    """The fits and tests of table.md and claims.md (results/claims.py)."""
    tuning: Tuning | None = None
    """The lr grid's answer per size and arm, when the sweep tunes (results/lr.py)."""
    rows: tuple[RunSummary, ...] = ()
    """The study's runs (the summary's, tuning runs left out)."""
    val: Curves | None = None
    """Each run's validation curve, {tokens: (step, val loss)} (results/gaps.val_curves)."""
    field: str = "params_non_embedding"
    """What N is on the scale axes (PARAMS)."""


PARAMS = {"non-embedding": ("params_non_embedding", "non-embedding parameters N", "non-embedding params"),
          "total": ("params", "parameters N (embeddings included)", "params")}
"""What N is on the scale axes: (summary field, axis label, word after a count). Non-embedding by default, as
scaling-law fits take it (Kaplan et al. 2020): at these sizes the 50k-token embedding tables dominate the total."""


# ------------------------------------------------------------------------------------------------ helpers
def _colors(arms) -> dict[str, str]:
    palette = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf"]
    zbp = sorted((a for a in set(arms) if a != "bp"), key=arm_order)
    return {"bp": "black", **{a: palette[i % len(palette)] for i, a in enumerate(zbp)}}


def _label(row: RunSummary) -> str:
    """A run's line in the panel of its size: its arm and seed (`zbp_n16-s1`) when it is named after them
    (`{size}-{arm}[-s{seed}]`), else its folder's name (a run trained by hand into a folder of its own naming);
    with its state when it is not complete."""
    text = row.run[len(row.size) + 1:] if parse_run_name(row.run) == (row.size, row.arm, row.seed) else row.run
    return text if row.state == "complete" else f"{text} ({row.state})"


def _style(row: RunSummary, color: str, *, line: bool = True) -> dict:
    """Solid line and filled marker for a complete run; dashed and hollow otherwise."""
    final = row.state == "complete"
    return dict(color=color, markerfacecolor=color if final else "white", markeredgecolor=color,
                **({"linestyle": "-" if final else "--"} if line else {}))


def _stamp(fig, words: str) -> None:
    """Write `words` under the figure in gray: one line of 6 pt, shrunk down to 4.5 pt and then wrapped onto more
    lines only as far as needed for its rendered width to fit that of what the figure draws (its tight box, the
    box it is saved with), so that the stamp neither widens the saved figure nor runs off it."""
    fig.draw_without_rendering()  # lays the figure out, as saving will
    renderer = fig.canvas.get_renderer()
    box = fig.get_tightbbox(renderer)  # inches
    text = fig.text(box.x0 / fig.get_figwidth(), 0.0, words, color="gray", ha="left", va="top", gid="stamp")
    for lines in range(1, 6):
        for size in (6, 5.5, 5, 4.5):
            text.set_fontsize(size)
            text.set_text(textwrap.fill(words, math.ceil(len(words) / lines)))
            if text.get_window_extent(renderer).width <= box.width * fig.dpi:
                return


SAVED_AS = {"png": {"dpi": 150, "metadata": {"Software": None}}, "pdf": {"metadata": {"CreationDate": None,
                                                                                    "Creator": None}},
            "svg": {"metadata": {"Date": None, "Creator": None}}}
"""The files a figure can be saved as, with the options that keep them reproducible (no date, no software name)."""


FIGURES = ("loss_curves", "gap_vs_scale", "nsr_c", "rho_k", "lr_sensitivity")
"""The figures `draw` makes, by file name (each saved in plot's formats, png and pdf)."""


def _save(fig, folder: Path, name: str, formats: tuple[str, ...] = ("png", "pdf")) -> list[Path]:
    """Write the figure in `formats` (SAVED_AS), stamped with what made it (the sweep, the runs' folder, the
    bundle) in a strip below the figure (`_stamp`), so that the stamp never covers an axis label, and saved with a
    tight box, so that it is never cut."""
    folder.mkdir(parents=True, exist_ok=True)
    made = Bundle(folder.parent).read_manifest() or {}
    if "sweep" in made and "source" in made:  # else not a collected bundle (a notebook's own folder): no stamp
        _stamp(fig, f"sweep {made['sweep']} ({made['source']}), collected {made.get('collected', '?')}; "
                    f"zbpscale plot {folder.parent}")
    paths = [folder / f"{name}.{fmt}" for fmt in formats]
    for path, fmt in zip(paths, formats):
        fig.savefig(path, bbox_inches="tight", **SAVED_AS[fmt])
    import matplotlib.pyplot as plt

    plt.close(fig)
    return paths


def _log_axis(ax, which: str, fmt=lambda v: f"{v:g}") -> None:
    """Log scale with plain labels (3M, 0.5) and, when the data span less than two decades, labelled 2x and 5x."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    axis = ax.xaxis if which == "x" else ax.yaxis
    getattr(ax, f"set_{which}scale")("log")
    low, high = getattr(ax, f"get_{which}lim")()
    axis.set_major_formatter(FuncFormatter(lambda v, _: fmt(v)))
    if high / low < 100:
        axis.set_minor_locator(LogLocator(subs=(2.0, 5.0)))
        axis.set_minor_formatter(FuncFormatter(lambda v, _: fmt(v)))
    else:
        axis.set_minor_formatter(NullFormatter())


def _by_size(rows: list[RunSummary]) -> dict[str, list[RunSummary]]:
    sizes: dict[str, list[RunSummary]] = {}
    for row in sorted(rows, key=sort_key):
        sizes.setdefault(row.size, []).append(row)
    return sizes


def _panels(n: int, *, rows: int = 1, width: float = 4.2, height: float = 3.3):
    """A figure of rows x n panels (rows=0: n panels, three a row, the unused ones hidden)."""
    import matplotlib.pyplot as plt

    shape = (rows, n) if rows else (math.ceil(n / 3), min(n, 3))
    fig, axes = plt.subplots(*shape, figsize=(width * shape[1], height * shape[0]), squeeze=False,
                             constrained_layout=True)
    for ax in axes.flat[n:] if not rows else []:
        ax.set_visible(False)
    return fig, axes


def _span(values, *, pad: float = 1.5, at_least: float = 10.0) -> tuple[float, float]:
    """Log-axis limits around `values`: a factor `pad` of margin, widened to a factor `at_least` in all, so that
    a lone point sits in the middle of labelled ticks."""
    low, high = min(values) / pad, max(values) * pad
    widen = math.sqrt(max(1.0, at_least * low / high))
    return low / widen, high * widen


def _arms(runs: list[RunSummary]) -> dict[str, list[RunSummary]]:
    """A panel's runs by arm, in the order given (`sort_key`: bp first)."""
    arms: dict[str, list[RunSummary]] = {}
    for r in runs:
        arms.setdefault(r.arm, []).append(r)
    return arms


def _arm_label(runs: list[RunSummary]) -> str:
    """An arm's legend entry in the panel of its size: a lone run's `_label` ('bp', 'zbp_n16 (running)', or a folder's
    own name); several runs: the arm, how many, and how many are in each state other than complete
    ('zbp_n16 (3 seeds; 1 running)')."""
    if len(runs) == 1:
        return _label(runs[0])
    behind: dict[str, int] = {}
    for r in runs:
        if r.state != "complete":
            behind[r.state] = behind.get(r.state, 0) + 1
    count = seed_count(r.seed for r in runs) if len({r.seed for r in runs}) == len(runs) else plural(len(runs), "run")
    return f"{runs[0].arm} ({count}{''.join(f'; {n} {state}' for state, n in behind.items())})"


def _seeds_and_mean(ax, lines: list[tuple[RunSummary, dict]], color: str, *, label: str | None, marker: str = "o",
                    linestyle: str | None = None, ends_only: bool = False, band: bool = False) -> None:
    """One arm's curves ({x: y} per run) in a panel: a lone run as a plain line; several as thin light lines with
    their mean, at the x all of them share, bold. `label` goes on the plain or the bold line (its one legend
    entry). A run not complete is hollow-marked, and dashed unless `linestyle` is given; `ends_only`: a marker at
    the last point only. Each line is named by its arm (an SVG's ids: `arm-ARM-run-RUN` a seed's, `arm-ARM-only-RUN`
    a lone run's, `arm-ARM-mean`, `arm-ARM-band`), which the report's toggles and tooltips use."""
    several = len(lines) > 1
    for row, pts in lines:
        x, style = sorted(pts), _style(row, color)
        ax.plot(x, [pts[k] for k in x], marker=marker, markevery=[len(x) - 1] if ends_only and x else None,
                linestyle=linestyle or style["linestyle"], markersize=3 if several else 5,
                gid=f"arm-{row.arm}-{'run' if several else 'only'}-{row.run}",
                **(dict(alpha=0.3, linewidth=0.8) if several else dict(label=label, linewidth=1.5)),
                **{k: v for k, v in style.items() if k != "linestyle"})
    if several:
        shared = sorted(set.intersection(*(set(pts) for _, pts in lines)))
        done = all(r.state == "complete" for r, _ in lines)
        if band and shared:  # the mean ± 1 sample sd over the seeds; none where a seed's loss is not finite
            means = [statistics.fmean(pts[k] for _, pts in lines) for k in shared]
            sds = [statistics.stdev(v) if all(map(math.isfinite, v)) else math.nan
                   for v in ([pts[k] for _, pts in lines] for k in shared)]
            ax.fill_between(shared, [m - d for m, d in zip(means, sds)], [m + d for m, d in zip(means, sds)],
                            color=color, alpha=0.15, linewidth=0, gid=f"arm-{lines[0][0].arm}-band")
        ax.plot(shared, [statistics.fmean(pts[k] for _, pts in lines) for k in shared], marker=marker,
                markevery=[len(shared) - 1] if ends_only and shared else None, markersize=6, linewidth=2.2,
                linestyle=linestyle or ("-" if done else "--"), color=color, markeredgecolor=color,
                markerfacecolor=color if done else "white", label=label, gid=f"arm-{lines[0][0].arm}-mean")


def _robust_top(curves: Curves, arms: dict[str, list[RunSummary]]) -> float:
    """The top of a panel's typical curves: per arm, at each token count its runs share, the median of their val
    losses (a lone run: its curve); the highest of these over arms and tokens. A spike of one seed in three lies
    above the median of its arm, so it cannot set the axis (of two seeds the median is their mean: half a spike);
    the early transient that every seed shares sets it as before. An arm whose runs share no token count
    counts with every point."""
    top = -math.inf
    for runs in arms.values():
        shared = set.intersection(*(set(curves[r.run]) for r in runs))
        if shared:
            at = [[curves[r.run][t][1] for r in runs if math.isfinite(curves[r.run][t][1])] for t in shared]
            top = max([top, *(statistics.median(losses) for losses in at if losses)])
        else:
            top = max([top, *(loss for r in runs for _, loss in curves[r.run].values() if math.isfinite(loss))])
    return top


def _clip(ax, size: str, curves: Curves, arms: dict[str, list[RunSummary]], colors: dict[str, str]) -> list[Clipped]:
    """Set the panel's y axis from the bulk of its data: from the lowest point to `_robust_top`, each with a
    margin of 5% of the span; mark each point above it as a ^ in its run's color at the top edge, the highest of
    each run annotated with its run, value and tokens. Returns those points. A loss that is not finite (a diverged
    run's nan) is not drawn and sets nothing; a panel without a finite one keeps matplotlib's axis."""
    runs = [r for rs in arms.values() for r in rs]
    finite = [loss for r in runs for _, loss in curves[r.run].values() if math.isfinite(loss)]
    if not finite:
        return []
    low, top = min(finite), _robust_top(curves, arms)
    top = max(top, low + 1e-3)
    pad = 0.05 * (top - low)
    low, top = low - pad, top + pad
    ax.set_ylim(low, top)
    over = [Clipped(size=size, top=top, run=r.run, tokens=t, step=step, val_loss=loss)
            for r in runs for t, (step, loss) in curves[r.run].items() if loss > top]
    edge = ax.get_xaxis_transform()  # x in data, y in axes fraction
    x_low, x_high = min(t for r in runs for t in curves[r.run]), max(t for r in runs for t in curves[r.run])
    color = {r.run: colors[r.arm] for r in runs}
    for c in over:
        ax.plot([c.tokens], [0.97], marker="^", markersize=8, linestyle="none", color=color[c.run], transform=edge,
                clip_on=False, gid="clipped")
    highest = {c.run: c for c in sorted(over, key=lambda c: c.val_loss)}
    for i, c in enumerate(highest.values()):
        left = c.tokens - x_low <= (x_high - x_low) / 2
        ax.annotate(f"{c.run}: {c.val_loss:.2f} at {fmt_count(c.tokens)} tok ↑", (c.tokens, 0.97), xycoords=edge,
                    xytext=(8 if left else -8, -4 - 10 * i), textcoords="offset points", fontsize=7,
                    ha="left" if left else "right", va="top", color=color[c.run], gid="clipped")
    return over


def _clip_note(over: list[Clipped]) -> str:
    """The note of a panel's clipped points: the limit, and each run's highest point above it."""
    highest = {c.run: c for c in sorted(over, key=lambda c: c.val_loss)}
    runs = ", ".join(f"{c.run} ({c.val_loss:.2f} after {c.step:,} steps)" for c in highest.values())  # steps done
    return f"loss_curves: the y axis of {over[0].size} is clipped at {over[0].top:.2f}; above it: {runs}"


# ------------------------------------------------------------------------------------------------ figures
def plot_loss_curves(curves: Curves, rows: list[RunSummary], out: Path, field: str = "params_non_embedding", *,
                     log_x: bool = False, band: bool = False, name: str = "loss_curves",
                     formats: tuple[str, ...] = ("png", "pdf")
                     ) -> tuple[list[Path], dict[str, list[str]], list[Clipped]]:
    """Val loss vs tokens per size, one legend entry per arm (`_seeds_and_mean`), the y axis from the bulk of the
    data (`_clip`); returns (files, {size: [legend entries]}, the points above the y axes). `log_x`: tokens on a
    log axis; `band`: the mean's ± 1 sd over the seeds shaded."""
    from matplotlib.ticker import FuncFormatter

    sizes = _by_size([r for r in rows if curves[r.run]])
    if not sizes:
        return [], {}, []
    colors, drawn, clipped = _colors(r.arm for r in rows), {}, []
    fig, axes = _panels(len(sizes), rows=0, width=6.0)
    for ax, (size, runs) in zip(axes.flat, sizes.items()):
        arms = _arms(runs)
        for arm, mine in arms.items():
            drawn.setdefault(size, []).append(_arm_label(mine))
            lines = [(r, {t: loss for t, (_, loss) in curves[r.run].items()}) for r in mine]
            _seeds_and_mean(ax, lines, colors[arm], label=drawn[size][-1], ends_only=True, band=band)
        clipped += _clip(ax, size, curves, arms, colors)
        ax.set_title(f"{size} ({fmt_count(getattr(runs[0], field))} {_measure(field)[2]})")
        ax.set_xlabel("training tokens" + (" (log)" if log_x else ""))
        ax.set_ylabel("validation loss")
        if log_x:
            _log_axis(ax, "x", fmt=fmt_count)
        else:
            ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: fmt_count(v)))
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0, frameon=False)
    if any(len(rs) > 1 for runs in sizes.values() for rs in _arms(runs).values()):
        fig.suptitle("thin lines: each seed; bold: the mean over an arm's seeds, at the evals they share"
                     + ("; shaded: ± 1 sd" if band else ""), fontsize=9)
    return _save(fig, out, name, formats), drawn, clipped


def _seed_dots(ax, x: float, values: list[float], color: str, *, filled: bool) -> None:
    """Each seed's value as a small dot, the dots spread a little along the log x axis so that equal ones show."""
    k = len(values)
    ax.plot([x * 1.04 ** (i - (k - 1) / 2) for i in range(k)], values, marker="o", markersize=3, linestyle="none",
            alpha=0.6, markeredgecolor=color, markerfacecolor=color if filled else "white")


def _mean_bar(ax, x: float, s: Spread, color: str, *, filled: bool) -> None:
    """The mean over the seeds, with ± 1 sd as its error bar (none for one seed)."""
    ax.errorbar([x], [s.mean], yerr=[[s.sd], [s.sd]] if s.n > 1 else None, marker="o", markersize=7,
                linestyle="none", color=color, markeredgecolor=color, markerfacecolor=color if filled else "white",
                capsize=3, elinewidth=1)


def _seeds_words(several: bool, seeds: str, what: str) -> str:
    """What the markers are: the mean ± 1 sd over the seeds with each seed a small dot, or one seed."""
    if several:
        return f"mean of {seeds} ± 1 sd (sample sd);\nsmall dots: each seed's {what}"
    return "one seed: no error bars\n(the seed-to-seed spread is unmeasured)"


def plot_gap(points: list[GapPoint], fits: dict[str, PowerLaw], remarks: dict[str, str], out: Path,
             colors: dict[str, str], field: str = "params_non_embedding", *,
             formats: tuple[str, ...] = ("png", "pdf")) -> list[Path]:
    """The gap figure: per point each seed's gap (a small dot) and their mean ± 1 sd, full-budget points filled
    (and fitted), the others hollow; each fit with its LEVEL band from the spread of the seeds' fits (none for
    one seed); `remarks` (why an arm has no fit, what its fit leaves out) written on the figure."""
    import numpy as np

    if not points:
        return []
    fig, axes = _panels(1, width=9.0, height=4.0)
    ax, several = axes[0][0], any(len(p.gaps) > 1 for p in points)
    ys = [g for p in points for g in p.gaps] + [p.gap + k * p.spread.sd for p in points if len(p.gaps) > 1
                                                 for k in (-1, 1)]
    for arm in sorted({p.arm for p in points}, key=arm_order):
        pts = [p for p in points if p.arm == arm]
        color = colors[arm]
        ax.plot([p.params for p in pts], [p.gap for p in pts], color=color, alpha=0.35, linewidth=1)
        for p in pts:
            if len(p.gaps) > 1:
                _seed_dots(ax, p.params, list(p.gaps), color, filled=p.final)
            _mean_bar(ax, p.params, p.spread, color, filled=p.final)
        label = arm
        if arm in fits:
            fit, full = fits[arm], [p.params for p in pts if p.final]
            grid = np.geomspace(min(full) / 1.5, max(full) * 1.5, 100)
            ax.plot(grid, fit.a * grid ** fit.b, color=color, linestyle=":")
            if fit.dof > 0:
                low, high = fit.band(grid)
                ax.fill_between(grid, low, high, color=color, alpha=0.15, linewidth=0)
                ys += [low.min(), high.max()]
                label = rf"{arm}: gap = {fit.a:.3g} $N^{{{fit.b:.3f} \pm {fit.half_width():.3f}}}$"
            else:
                label = rf"{arm}: gap = {fit.a:.3g} $N^{{{fit.b:.3f}}}$ (one seed: no band)"
        ax.plot([], [], marker="o", color=color, label=label)
    seeds = seed_count(set().union(*(p.seeds for p in points)))
    words = _seeds_words(several, seeds, "gap to bp of the same seed")
    if several:
        ax.errorbar([math.nan], [math.nan], yerr=[[1], [1]], marker="o", linestyle="none", color="gray", capsize=3,
                    label=words)
    else:
        ax.plot([], [], linestyle="none", label=words)
    banded = [f for f in fits.values() if f.dof > 0]
    if banded:
        dof = ", ".join(sorted({str(f.dof) for f in banded}))
        label = (f"band, and ± on the exponent: {LEVEL:.0%} interval, Huber fit;\n"
                 f"bootstrap over seeds (s.e. x t, {dof} d.o.f.)")
        ax.fill_between([], [], [], color="gray", alpha=0.15, label=label)
    if any(not p.final for p in points):
        ax.plot([], [], marker="o", linestyle="none", markerfacecolor="white", markeredgecolor="gray",
                label="open: a run is not complete; compared at\nthe latest eval all reached, not fitted")
    if remarks:  # under the legend
        ax.text(1.03, 0.0, "\n".join(textwrap.fill(w, 52) for w in remarks.values()), transform=ax.transAxes,
                fontsize=8, va="bottom", color="dimgray")
    ax.set_xlim(*_span([p.params for p in points]))
    _log_axis(ax, "x", fmt_count)
    if all(y > 0 for y in ys):
        ax.set_ylim(*_span(ys, pad=1.3))
        _log_axis(ax, "y")
    else:
        ax.axhline(0, color="gray", linewidth=0.8)
    ax.set_xlabel(_measure(field)[1])
    ax.set_ylabel("val loss gap (ZBP − BP) at equal tokens")
    ax.set_title(f"Gap to backprop against scale ({seeds})")
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.02, 1.0), frameon=False)
    return _save(fig, out, "gap_vs_scale", formats)


def plot_nsr_c(rows: list[RunSummary], out: Path, colors: dict[str, str], field: str = "params_non_embedding", *,
               formats: tuple[str, ...] = ("png", "pdf")) -> tuple[list[Path], list[tuple]]:
    """c per core against parameters: per size and arm each seed's c (a small dot) and their mean ± 1 sd;
    returns (files, [(core, run, params, c)])."""
    drawn = [(core, r.run, getattr(r, field), getattr(r, f"c_{core}")) for core in ("attn", "ffn") for r in rows
             if getattr(r, f"c_{core}") is not None]
    if not drawn:
        return [], []
    fig, axes = _panels(2)
    several = False
    for ax, core in zip(axes[0], ("attn", "ffn")):
        runs = [r for r in rows if getattr(r, f"c_{core}") is not None]
        for arm in sorted({r.arm for r in runs}, key=arm_order):
            by_size: dict[int, list[RunSummary]] = {}
            for r in sorted((r for r in runs if r.arm == arm), key=lambda r: (getattr(r, field), r.seed)):
                by_size.setdefault(getattr(r, field), []).append(r)
            means = []
            for x, mine in by_size.items():
                values, filled = [getattr(r, f"c_{core}") for r in mine], all(r.state == "complete" for r in mine)
                if len(values) > 1:
                    _seed_dots(ax, x, values, colors[arm], filled=filled)
                    several = True
                means.append(Spread.of(values))
                _mean_bar(ax, x, means[-1], colors[arm], filled=filled)
            ax.plot(list(by_size), [m.mean for m in means], color=colors[arm], alpha=0.4)
            ax.plot([], [], marker="o", color=colors[arm], label=arm)
        ax.axhline(1.0, color="gray", linestyle=":", label="theory, d ≫ 1: c ≈ 1")
        _log_axis(ax, "x", fmt_count)
        ax.set_xlabel(_measure(field)[1])
        ax.set_ylabel("c = NSR · n / d (method.md)")  # attention's d: its energy-weighted effective dimension
        ax.set_title({"attn": "attention core (score softmax)", "ffn": "SwiGLU core"}[core])
        ax.grid(alpha=0.3, which="both")
    entries = {}  # one entry per label over both panels
    for ax in axes[0]:
        handles, labels = ax.get_legend_handles_labels()
        entries.update(zip(labels, handles))
    fig.legend(list(entries.values()), list(entries), fontsize=8, loc="outside right upper", frameon=False)
    fig.suptitle(_seeds_words(several, seed_count(seeds_of(rows)), "c").replace(";\n", "; "), fontsize=9)
    return _save(fig, out, "nsr_c", formats), drawn


def plot_lr_sensitivity(t: Tuning, out: Path, *, formats: tuple[str, ...] = ("png", "pdf")) -> list[Path]:
    """Final validation loss against lr, one panel per arm, a line per size: each seed a dot, the mean a line, the
    best a star (hollow when it lies at the grid's edge), a diverged lr a cross at the panel's top. Returns the
    files written. The grid's answers are `t`'s (lr.grid_answers)."""
    import matplotlib

    losses = t.losses
    arms = sorted({arm for _, arm in losses}, key=arm_order)
    sizes = sorted({size for size, _ in losses}, key=lambda s: t.params.get(s, 0))
    cmap = matplotlib.colormaps["viridis"]
    color = {s: cmap(i / max(1, len(sizes) - 1) * 0.85) for i, s in enumerate(sizes)}
    finite = [v for by_lr in losses.values() for vs in by_lr.values() for v in vs if math.isfinite(v)]
    top = max(finite) if finite else 1.0
    fig, axes = _panels(len(arms))
    for ax, arm in zip(axes[0], arms):
        for size in sizes:
            by_lr = losses.get((size, arm))
            if not by_lr:
                continue
            lrs = sorted(by_lr)
            means = [sum(by_lr[lr]) / len(by_lr[lr]) for lr in lrs]
            for lr in lrs:
                for v in by_lr[lr]:
                    ax.plot(lr, v if math.isfinite(v) else top, "x" if not math.isfinite(v) else "o",
                            color=color[size], alpha=0.45, markersize=4)
            shown = [(lr, m) for lr, m in zip(lrs, means) if math.isfinite(m)]
            ax.plot([lr for lr, _ in shown], [m for _, m in shown], color=color[size], label=size)
            c = t.choices.get((size, arm))
            if c is not None:  # none while a run of its grid has not answered
                ax.plot(c.lr, c.loss, "*", markersize=13, color=color[size],
                        markerfacecolor="white" if c.edge else color[size], markeredgecolor=color[size])
        _log_axis(ax, "x", lambda v: f"{v:.0e}".replace("e-0", "e-"))
        ax.set_xlabel("peak learning rate")
        ax.set_ylabel("final validation loss")
        ax.set_title(arm)
        ax.grid(alpha=0.3, which="both")
        ax.legend(fontsize=7, title="size (star: best; hollow: at the grid's edge)", title_fontsize=7)
    return _save(fig, out, "lr_sensitivity", formats)


GAINS = {"fwd_gain": ("forward", r"forward gain $\|F_k(h)\| / \|h\|$"),
         "bwd_gain": ("backward", r"backward gain $\|J_k^\top g\| / \|g\|$")}
"""rho_k's two rows: the diag record's key -> (the word in the title, the y label, in mathtext)."""


def plot_rho_k(bundle: Path, rows: list[RunSummary], out: Path, colors: dict[str, str], *,
               formats: tuple[str, ...] = ("png", "pdf")) -> tuple[list[Path], list[str]]:
    """Forward / backward branch gains per layer for each size, one legend entry per arm (its seeds light, their
    mean bold: `_seeds_and_mean`) and one per branch style; returns (files, runs drawn)."""
    blocks: dict[str, list[BlockRow]] = {}
    for r in rows:
        diags = by_kind(read_records(Bundle(bundle).run(r.run).path)).get("diag", [])
        if diags and diags[-1].get("blocks"):
            blocks[r.run] = diags[-1]["blocks"]
    sizes = _by_size([r for r in rows if r.run in blocks])
    if not sizes:
        return [], []
    fig, axes = _panels(len(sizes), rows=2, width=5.4)
    for col, (size, runs) in enumerate(sizes.items()):
        for row_i, (key, (word, ylabel)) in enumerate(GAINS.items()):
            ax = axes[row_i][col]
            for arm, mine in _arms(runs).items():
                for branch, marker, line in (("attn", "o", "-"), ("mlp", "s", ":")):
                    gains = [(r, {b["layer"]: b[key] for b in blocks[r.run] if b["branch"] == branch}) for r in mine]
                    _seeds_and_mean(ax, gains, colors[arm], label=None, marker=marker, linestyle=line)
                ax.plot([], [], color=colors[arm], linewidth=2, label=_arm_label(mine))
            ax.plot([], [], marker="o", color="gray", label="attn branch")
            ax.plot([], [], marker="s", linestyle=":", color="gray", label="mlp branch")
            _log_axis(ax, "y")
            ax.set_xlabel("layer $k$")
            ax.set_ylabel(ylabel)
            ax.set_title(f"{size}: {word} $\\rho_k$")
            ax.xaxis.get_major_locator().set_params(integer=True)
            ax.grid(alpha=0.3, which="both")
        axes[0][col].legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0, frameon=False)
    if any(len(rs) > 1 for runs in sizes.values() for rs in _arms(runs).values()):
        fig.suptitle("thin lines: each seed; bold: the mean over an arm's seeds", fontsize=9)
    return _save(fig, out, "rho_k", formats), sorted(blocks)


def _diag_hint(runs: list[RunSummary]) -> str:
    """Why `runs` have no diag record, when their configs say: diagnostics off, or not reached yet."""
    every = {r.diag_every for r in runs}
    if every == {0}:
        return " (diag_every is 0, diagnostics are off: set diag_every)"
    on = [r for r in runs if r.diag_every]
    if on:
        return (f" (diag_every = {min(r.diag_every for r in on):,}; the furthest run is at step "
                f"{max(r.steps for r in on):,})")
    return ""


def _nothing_drawn(rows: list[RunSummary]) -> str:
    """Why a bundle has no figure at all, in words."""
    if not rows:
        return "the bundle lists no runs"
    counts: dict[str, int] = {}
    for r in rows:
        counts[r.state] = counts.get(r.state, 0) + 1
    states = ", ".join(f"{n} {s}" for s, n in counts.items())
    off = " (diag_every is 0: the NSR and rho_k figures need it set)" if {r.diag_every for r in rows} == {0} \
        else ""
    return f"no run has an eval or diag record yet ({plural(len(rows), 'run')}: {states}){off}"


def _measure(field: str) -> tuple[str, str, str]:
    return next(v for v in PARAMS.values() if v[0] == field)


def plot(bundle: str | Path, *, params: str = "non-embedding", log=print) -> Figures:
    """Write table.md, claims.md and the figures of `bundle`; returns what was drawn. params: what N is on the
    scale axes and in the fit, 'non-embedding' or 'total' (`PARAMS`)."""
    bundle = Path(bundle)
    Bundle(bundle).require(Bundle(bundle).summary_json)
    for folder in (bundle, Bundle(bundle).figures):  # a colleague's bundle, a read-only mount: one line
        if (why := unwritable(folder)) is not None:
            raise ConfigError(f"cannot write table.md and the figures into {bundle}: {why}",
                              hint="copy the bundle to a folder you can write (cp -r), and plot the copy")
    drawn = draw(bundle, Bundle(bundle).figures, params=params)
    files, notes, rows, tuned, found = list(drawn.files), drawn.notes, list(drawn.rows), drawn.tuning, drawn.study
    for name in FIGURES:  # a figure an earlier plot drew and this one does not (its runs left the bundle): removed,
        for old in (Bundle(bundle).figures / f"{name}.{fmt}" for fmt in ("png", "pdf")):  # not shown nor uploaded
            if old.is_file() and old not in files:
                old.unlink()
                log(f"removed {old}: this bundle no longer draws it")
    names = [f.stem for f in files if f.suffix == ".png"]
    table, m = Bundle(bundle).table, Bundle(bundle).read_manifest() or {}
    origin = f"Sweep `{m['sweep']}`, collected {m.get('collected', '?')} from `{m['source']}`.\n\n" if m else ""
    lrs = lr_markdown(tuned, rows) if tuned else ""
    table.write_text(f"# {bundle.resolve().name}\n\n{origin}"  # `zbpscale plot .`: the folder's own name
                     + table_markdown(rows, drawn.val, list(notes), names, list(drawn.gap_points),
                                      fits_markdown(found) + ("\n" + lrs if lrs else "")))  # a blank line: a heading
    Bundle(bundle).claims.write_text(claims_markdown(found, rows) + ("\n" + lrs if lrs else ""))
    if files:
        for note in notes:
            log(f"note: {note}")
        log(f"wrote {table}, {Bundle(bundle).claims.name} and {len(files)} figure files in {Bundle(bundle).figures}")
    else:
        log(f"wrote {table} and {Bundle(bundle).claims.name}; no figures: {_nothing_drawn(rows)}")
    return dataclasses.replace(drawn, files=tuple(files) + (table,))


def draw(bundle: Path, out: Path, *, params: str = "non-embedding", formats: tuple[str, ...] = ("png", "pdf"),
         band: bool = False) -> Figures:
    """Draw the figures of `bundle` into `out` as `formats` and find the fits and tests (results/claims.py);
    returns what was drawn, the notes on what was left out, and what the table and claims are written from.
    `band`: the loss curves' mean ± 1 sd over the seeds shaded."""
    import matplotlib

    matplotlib.use("Agg")
    rows = Bundle(bundle).read_summary()
    if twins := same_run(rows):  # a bundle of an older release, or edited by hand
        raise ConfigError(f"{bundle}: {twins}", hint="collect the sweep again with one run per size, arm and seed")
    grid, rows = [r for r in rows if r.role == "tuning"], [r for r in rows if r.role != "tuning"]  # the lr grid's
    notes: list[str] = []  # runs are in the lr figure and table, not in the study's
    field = PARAMS[params][0]
    if any(getattr(r, field) is None and r.params is not None for r in rows):  # collected before the field existed
        field = "params"
        notes.append("N is the total parameter count: this bundle's summary has no non-embedding count")
    colors = _colors(r.arm for r in rows)
    curves = val_curves(bundle, rows)
    lost = [r.run for r in rows if r.final_val_loss is not None and not Bundle(bundle).run(r.run).metrics.exists()]
    if lost:  # deleted from the bundle by hand: its gaps and fits change, and the notes below would not say why
        notes.append(f"{named(lost)}: {'its copy is' if len(lost) == 1 else 'their copies are'} missing from "
                     f"{Bundle(bundle).runs} though the summary has a val loss: not in the curves, gaps or fits; "
                     "collect the sweep again to restore them")
    garbled = [r.run for r in rows if r.final_val_loss is not None and not curves[r.run] and r.run not in lost]
    if garbled:  # its copy's records unreadable (edited, cut): the same, and it is not a run without an eval
        notes.append(f"{named(garbled)}: {'its copy' if len(garbled) == 1 else 'their copies'} in "
                     f"{Bundle(bundle).runs} {'holds' if len(garbled) == 1 else 'hold'} no validation record "
                     "though the summary has a val loss: not in the curves, gaps or fits; collect the sweep again to "
                     "restore them")
    unread = {(r.size, r.seed) for r in rows if r.arm == "bp" and r.run in {*lost, *garbled}}  # said above
    skipped = [r for r in rows if not curves[r.run] and r.run not in lost and r.run not in garbled]
    if skipped:
        notes.append("no validation loss yet, so not in the figures: "
                     + ", ".join(f"{r.run} ({r.state})" for r in skipped))
    curve_files, labels, clipped = plot_loss_curves(curves, rows, out, field, band=band, formats=formats)
    for size in dict.fromkeys(c.size for c in clipped):
        notes.append(_clip_note([c for c in clipped if c.size == size]))
    points, apart = gap_points(rows, curves, field)
    fits, remarks = fit_gaps(points)
    gap_files = plot_gap(points, fits, remarks, out, colors, field, formats=formats)
    notes += list(remarks.values())
    if apart:
        notes.append("not in the gap figure, no validation at the same number of tokens as bp: " + ", ".join(apart))
    lone = unpaired([r for r in rows if r.arm == "bp" or (r.size, r.seed) not in unread], curves)
    if lone:
        notes.append("not in the gap figure, no bp run of the same seed with a validation loss: " + ", ".join(lone))
    if len(seeds_of(rows)) == 1 and points:
        notes.append("one seed per size and arm: no error bars, and fits without a band (the seed-to-seed spread "
                     "is unmeasured)")
    if not points:
        notes.append("no gap figure: no size has both bp and a ZBP arm with a validation loss")
    c_files, _ = plot_nsr_c(rows, out, colors, field, formats=formats)
    rho_files, _ = plot_rho_k(bundle, rows, out, colors, formats=formats)
    if not c_files:
        zbp = [r for r in rows if r.arm != "bp"]
        notes.append("no NSR figure: no ZBP run has a diag record yet" + _diag_hint(zbp))
    if not rho_files:
        notes.append("no rho_k figure: no run has a diag record yet" + _diag_hint(rows))
    law_field = "params_non_embedding" if all(r.params_non_embedding is not None for r in grid + rows) else field
    tune = Bundle(bundle).read_tune()
    tuned = tuning_of(grid + rows, law_field, tune=tune)  # N as the sweep fitted its law
    planned = (tune or {}).get("grid")  # the grid runs the sweep file planned when collected (a list), else None
    if unplanned := [r.run for r in grid if isinstance(planned, list) and r.run not in planned]:
        notes.append(f"grid runs the sweep file no longer plans, left out of the lr choices and law as the planner "
                     f"leaves them: {named(unplanned)}")
    lr_files = plot_lr_sensitivity(tuned, out, formats=formats) if tuned else []
    if grid and not tuned:
        notes.append("no lr figure: no grid run has answered yet")
    files = curve_files + gap_files + c_files + rho_files + lr_files
    return Figures(files=tuple(files), gap_points=tuple(points), fits=fits, no_fit=remarks, curves=labels,
                   clipped=tuple(clipped), notes=tuple(notes), study=study(points, fits, remarks, rows, curves, field),
                   tuning=tuned, rows=tuple(rows), val=curves, field=field)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("bundle", help="a collected results folder, e.g. results/smoke")
    p.add_argument("--params", choices=tuple(PARAMS), default="non-embedding",
                   help="N on the scale axes and in the gap fit: non-embedding parameters (default, as scaling-law "
                        "fits take it) or the total with the embedding tables")


def run(args: argparse.Namespace) -> None:
    plot(args.bundle, params=args.params)

