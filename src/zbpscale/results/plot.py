"""`zbpscale plot results/<tag>`: the per-run table and the figures of a collected bundle (`zbpscale collect`).

    zbpscale plot results/smoke        # -> results/smoke/table.md, results/smoke/figures/*.png and *.pdf

  table.md        one row per run (the summary), with the gap to BP, links to the figures, and notes;
  loss_curves     validation loss against tokens, one panel per size, one line per arm;
  gap_vs_scale    val loss ZBP - BP for each ZBP arm against parameters (log x), with the power law
                  gap = a * N^b fitted by least squares in log-log space and its 1-s.e. band (>= 3 sizes);
  nsr_c           the NSR constant c = NSR * n / d per core (attn, ffn) against parameters;
  rho_k           forward and backward branch gains per layer for each size, from the latest diag record.
Gaps compare equal tokens: two complete runs by their final val losses; otherwise at the largest token count
at which both have an eval record, marked "at s/T" (step s of T) in the table and drawn hollow in the figure,
where only full-budget points are fitted; "n/c" (not comparable) when they share no eval point. Runs that
are not complete are drawn hollow and dashed, labelled with their state; runs with no validation loss yet
stay in the table and are left out of the figures with a note. Each figure function returns what
it drew, so tests (and notebooks) can check the numbers behind the picture.
"""

from __future__ import annotations

import argparse
import math
import textwrap
from dataclasses import dataclass
from pathlib import Path

from zbpscale.results.bundle import Bundle
from zbpscale.results.gaps import Curves, Gap, GapPoint, PowerLaw, equal_tokens_gap, fit_gaps, gap_points, val_curves
from zbpscale.results.summary import RunSummary, arm_order, sort_key
from zbpscale.train.metrics import BlockRow, by_kind, read_records


@dataclass(frozen=True, kw_only=True)
class Figures:
    """What `plot` wrote and drew."""

    files: tuple[Path, ...]
    """The PNG, PDF and markdown files written."""
    gap_points: tuple[GapPoint, ...]
    """Points of the gap figure."""
    fits: dict[str, PowerLaw]
    """Power-law fit of the gap per ZBP arm (arms with >= 3 sizes at the full budget and positive gaps)."""
    no_fit: dict[str, str]
    """Why a ZBP arm of the gap figure has no fit, as written on the figure."""
    curves: dict[str, list[str]]
    """Labels of the loss curves per size (a run not complete carries its state: 'zbp_n16 (running)')."""
    notes: tuple[str, ...]
    """What was left out of the figures, and why."""


PARAMS = {"non-embedding": ("params_non_embedding", "non-embedding parameters N", "non-embedding params"),
          "total": ("params", "parameters N (embeddings included)", "params")}
"""What N is on the scale axes: (summary field, axis label, word after a count). Non-embedding by default, as
scaling-law fits take it (Kaplan et al. 2020): at these sizes the 50k-token embedding tables dominate the total."""


# ------------------------------------------------------------------------------------------------ helpers
def _colors(arms) -> dict[str, str]:
    palette = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf"]
    zbp = sorted((a for a in set(arms) if a != "bp"), key=arm_order)
    return {"bp": "black", **{a: palette[i % len(palette)] for i, a in enumerate(zbp)}}


def fmt_count(n: float | None) -> str:
    if n is None:
        return "?"
    for div, unit in ((1e9, "B"), (1e6, "M"), (1e3, "K")):
        if abs(n) >= div:
            return f"{n / div:.3g}{unit}"
    return f"{n:g}"


def _fmt_seconds(s: float) -> str:
    return f"{s:.0f} s" if s < 120 else f"{s / 60:.1f} min" if s < 7200 else f"{s / 3600:.1f} h"


def _label(row: RunSummary, text: str) -> str:
    return text if row.state == "complete" else f"{text} ({row.state})"


def _style(row: RunSummary, color: str, *, line: bool = True) -> dict:
    """Solid line and filled marker for a complete run; dashed and hollow otherwise."""
    final = row.state == "complete"
    return dict(color=color, markerfacecolor=color if final else "white", markeredgecolor=color,
                **({"linestyle": "-" if final else "--"} if line else {}))


def _save(fig, folder: Path, name: str) -> list[Path]:
    """Write the figure as PNG and PDF, stamped with what made it (the sweep, the runs' folder, the bundle) in a
    strip below the figure, so that the stamp never covers an axis label, and saved with a tight box, so that it
    is never cut."""
    folder.mkdir(parents=True, exist_ok=True)
    made = Bundle(folder.parent).read_manifest() or {}
    if "sweep" in made and "source" in made:  # else not a collected bundle (a notebook's own folder): no stamp
        words = (f"sweep {made['sweep']} ({made['source']}), collected {made.get('collected', '?')}; "
                 f"zbpscale plot {folder.parent}")
        width = max(40, int(fig.get_figwidth() * 72 / (6 * 0.6)))  # characters of 6 pt that fit the width
        fig.text(0.005, 0.0, textwrap.fill(words, width), fontsize=6, color="gray", ha="left", va="top",
                 gid="stamp")
    paths = [folder / f"{name}.png", folder / f"{name}.pdf"]
    fig.savefig(paths[0], dpi=150, metadata={"Software": None}, bbox_inches="tight")
    fig.savefig(paths[1], metadata={"CreationDate": None, "Creator": None}, bbox_inches="tight")
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


# ------------------------------------------------------------------------------------------------ figures
def plot_loss_curves(curves: Curves, rows: list[RunSummary], out: Path, field: str = "params_non_embedding"
                     ) -> tuple[list[Path], dict[str, list[str]]]:
    """Val loss vs tokens per size; returns (files, {size: [line labels]})."""
    from matplotlib.ticker import FuncFormatter

    sizes = _by_size([r for r in rows if curves[r.run]])
    if not sizes:
        return [], {}
    colors, drawn = _colors(r.arm for r in rows), {}
    fig, axes = _panels(len(sizes), rows=0)
    for ax, (size, runs) in zip(axes.flat, sizes.items()):
        for row in runs:
            x, y = list(curves[row.run]), [loss for _, loss in curves[row.run].values()]
            style = _style(row, colors[row.arm])
            label = _label(row, row.run.split("-", 1)[1])
            ax.plot(x, y, label=label, color=style["color"], linestyle=style["linestyle"])
            ax.plot(x[-1:], y[-1:], marker="o", linestyle="none", **_style(row, style["color"], line=False))
            drawn.setdefault(size, []).append(label)
        ax.set_title(f"{size} ({fmt_count(getattr(runs[0], field))} {_measure(field)[2]})")
        ax.set_xlabel("training tokens")
        ax.set_ylabel("validation loss")
        ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: fmt_count(v)))
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    return _save(fig, out, "loss_curves"), drawn


def plot_gap(points: list[GapPoint], fits: dict[str, PowerLaw], why_not: dict[str, str], out: Path,
             colors: dict[str, str], field: str = "params_non_embedding") -> list[Path]:
    """The gap figure: full-budget points filled (and fitted), the others hollow; why an arm has no fit is
    written on the figure."""
    import numpy as np

    if not points:
        return []
    fig, axes = _panels(1, width=9.0, height=4.0)
    ax, ys = axes[0][0], [p.gap for p in points]
    for arm in sorted({p.arm for p in points}, key=arm_order):
        pts = [p for p in points if p.arm == arm]
        color = colors[arm]
        ax.plot([p.params for p in pts], [p.gap for p in pts], color=color, alpha=0.35, linewidth=1)
        for p in pts:
            ax.plot([p.params], [p.gap], marker="o", markersize=7, linestyle="none", markeredgecolor=color,
                    markerfacecolor=color if p.final else "white")
        label = arm
        if arm in fits:
            fit, full = fits[arm], [p.params for p in pts if p.final]
            grid = np.geomspace(min(full) / 1.5, max(full) * 1.5, 100)
            low, high = fit.band(grid)
            ax.plot(grid, fit.a * grid ** fit.b, color=color, linestyle=":")
            ax.fill_between(grid, low, high, color=color, alpha=0.15, linewidth=0)
            ys += [low.min(), high.max()]
            label = f"{arm}: gap = {fit.a:.3g} N^({fit.b:.3f} ± {fit.b_se:.3f})"
        ax.plot([], [], marker="o", color=color, label=label)
    if fits:
        ax.fill_between([], [], [], color="gray", alpha=0.15, label="fit ± 1 s.e. (least squares on log N, log gap)")
    if any(not p.final for p in points):
        ax.plot([], [], marker="o", linestyle="none", markerfacecolor="white", markeredgecolor="gray",
                label="open: a run is not complete; compared at\nthe latest eval both reached, not fitted")
    if why_not:  # under the legend
        ax.text(1.03, 0.0, "\n".join(textwrap.fill(w, 52) for w in why_not.values()), transform=ax.transAxes,
                fontsize=8, va="bottom", color="dimgray")
    ax.set_xlim(*_span([p.params for p in points]))
    _log_axis(ax, "x", fmt_count)
    if all(p.gap > 0 for p in points):
        ax.set_ylim(*_span(ys, pad=1.3))
        _log_axis(ax, "y")
    else:
        ax.axhline(0, color="gray", linewidth=0.8)
    ax.set_xlabel(_measure(field)[1])
    ax.set_ylabel("val loss gap (ZBP − BP) at equal tokens")
    ax.set_title("Gap to backprop against scale")
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.02, 1.0), frameon=False)
    return _save(fig, out, "gap_vs_scale")


def plot_nsr_c(rows: list[RunSummary], out: Path, colors: dict[str, str], field: str = "params_non_embedding"
               ) -> tuple[list[Path], list[tuple]]:
    """c per core against parameters; returns (files, [(core, run, params, c)])."""
    drawn = [(core, r.run, getattr(r, field), getattr(r, f"c_{core}")) for core in ("attn", "ffn") for r in rows
             if getattr(r, f"c_{core}") is not None]
    if not drawn:
        return [], []
    fig, axes = _panels(2)
    for ax, core in zip(axes[0], ("attn", "ffn")):
        runs = [r for r in rows if getattr(r, f"c_{core}") is not None]
        for arm in sorted({r.arm for r in runs}, key=arm_order):
            mine = sorted((r for r in runs if r.arm == arm), key=lambda r: getattr(r, field))
            ax.plot([getattr(r, field) for r in mine], [getattr(r, f"c_{core}") for r in mine], color=colors[arm],
                    alpha=0.4)
            for r in mine:
                ax.plot([getattr(r, field)], [getattr(r, f"c_{core}")], marker="o", linestyle="none",
                        **_style(r, colors[arm], line=False))
            ax.plot([], [], marker="o", color=colors[arm], label=arm)
        ax.axhline(1.0, color="gray", linestyle=":", label="theory, d ≫ 1: c ≈ 1")
        _log_axis(ax, "x", fmt_count)
        ax.set_xlabel(_measure(field)[1])
        ax.set_ylabel("c = NSR · n / d")
        ax.set_title({"attn": "attention core (score softmax)", "ffn": "SwiGLU core"}[core])
        ax.grid(alpha=0.3, which="both")
        ax.legend(fontsize=8)
    return _save(fig, out, "nsr_c"), drawn


def plot_rho_k(bundle: Path, rows: list[RunSummary], out: Path, colors: dict[str, str]) -> tuple[list[Path], list[str]]:
    """Forward / backward branch gains per layer for each size; returns (files, runs drawn)."""
    blocks: dict[str, list[BlockRow]] = {}
    for r in rows:
        diags = by_kind(read_records(Bundle(bundle).run(r.run).path)).get("diag", [])
        if diags and diags[-1].get("blocks"):
            blocks[r.run] = diags[-1]["blocks"]
    sizes = _by_size([r for r in rows if r.run in blocks])
    if not sizes:
        return [], []
    fig, axes = _panels(len(sizes), rows=2)
    for col, (size, runs) in enumerate(sizes.items()):
        for row_i, key in enumerate(("fwd_gain", "bwd_gain")):
            ax = axes[row_i][col]
            for r in runs:
                for branch, marker in (("attn", "o"), ("mlp", "s")):
                    pts = sorted((b["layer"], b[key]) for b in blocks[r.run] if b["branch"] == branch)
                    style = _style(r, colors[r.arm])
                    ax.plot([p[0] for p in pts], [p[1] for p in pts], marker=marker, markersize=4,
                            linestyle=style["linestyle"] if branch == "attn" else ":", color=style["color"],
                            markerfacecolor=style["markerfacecolor"], markeredgecolor=style["color"])
                ax.plot([], [], color=colors[r.arm], label=_label(r, r.run.split("-", 1)[1]))
            ax.plot([], [], marker="o", color="gray", label="attn branch")
            ax.plot([], [], marker="s", linestyle=":", color="gray", label="mlp branch")
            _log_axis(ax, "y")
            ax.set_xlabel("layer k")
            ax.set_ylabel({"fwd_gain": "forward gain ‖F_k(h)‖/‖h‖", "bwd_gain": "backward gain ‖J_k^T g‖/‖g‖"}[key])
            ax.set_title(f"{size}: {'forward' if key == 'fwd_gain' else 'backward'} ρ_k")
            ax.xaxis.get_major_locator().set_params(integer=True)
            ax.grid(alpha=0.3, which="both")
            ax.legend(fontsize=7)
    return _save(fig, out, "rho_k"), sorted(blocks)


# ------------------------------------------------------------------------------------------------ table
def _at(step: int, total: int | None) -> str:
    return f"at {step:,}/{total:,}" if total else f"at step {step:,}"


def _state_words(r: RunSummary) -> str:
    """The state as `zbpscale status` says it, and where a run that is not complete stands: 'cancelled at 9/12'."""
    if r.state in ("complete", "new") or not r.steps:
        return r.state
    return f"{r.state} {_at(r.steps, r.steps_total)}"


def _gap_cell(gap: Gap | None, r: RunSummary) -> str:
    if gap is None:
        return "n/c"
    return f"{gap.value:+.4f}" if gap.full else f"{gap.value:+.4f} {_at(gap.step, r.steps_total)}"


def table_markdown(rows: list[RunSummary], curves: Curves, notes: list[str], figures: list[str]) -> str:
    """The per-run table as markdown, with the gap of each ZBP run to bp of the same size and seed (at equal
    tokens, `equal_tokens_gap`)."""
    bp = {(r.size, r.seed): r for r in rows if r.arm == "bp"}
    head = ["run", "size", "params", "non-emb.", "arm", "state", "steps", "tokens", "final val", "best val",
            "gap vs bp", "wall", "GPU-h", "c attn", "c ffn"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    num = lambda v, f="{:.4f}": "" if v is None else f.format(v)  # noqa: E731
    partial = apart = False
    for r in rows:
        ref, gap = bp.get((r.size, r.seed)), ""
        if r.arm != "bp" and ref and curves[r.run] and curves[ref.run]:
            compared = equal_tokens_gap([r], [ref], curves)
            gap = _gap_cell(compared, r)
            partial |= compared is not None and not compared.full
            apart |= compared is None
        lines.append("| " + " | ".join([
            r.run, r.size, fmt_count(r.params), fmt_count(r.params_non_embedding), r.arm,
            _state_words(r),
            f"{r.steps:,}" + (f" / {r.steps_total:,}" if r.steps_total else ""), fmt_count(r.tokens),
            num(r.final_val_loss), num(r.best_val_loss), gap, _fmt_seconds(r.wall_time_s),
            "?" if r.gpu_hours is None else f"{r.gpu_hours:.2f}", num(r.c_attn, "{:.3f}"),
            num(r.c_ffn, "{:.3f}")]) + " |")
    text = "\n".join(lines) + "\n"
    notes = list(notes)
    if partial:
        notes.append("a gap 'at s/T' compares the run and bp at step s of T, the latest validation both reached "
                     "(a run is not complete); a gap without it compares the final val losses of two complete runs")
    if apart:
        notes.append("n/c: not comparable, the run and bp have no validation at the same number of tokens")
    if notes:
        text += "\nNotes:\n" + "".join(f"- {n}\n" for n in notes)
    if figures:
        text += "\n" + "".join(f"![{f}](figures/{f}.png)\n" for f in figures)
    return text


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
    return f"no run has an eval or diag record yet ({len(rows)} runs: {states}){off}"


def _measure(field: str) -> tuple[str, str, str]:
    return next(v for v in PARAMS.values() if v[0] == field)


def plot(bundle: str | Path, *, params: str = "non-embedding", log=print) -> Figures:
    """Write table.md and the figures of `bundle`; returns what was drawn. params: what N is on the scale axes
    and in the fit, 'non-embedding' or 'total' (`PARAMS`)."""
    import matplotlib

    matplotlib.use("Agg")
    bundle = Path(bundle)
    rows = Bundle(bundle).read_summary()
    out, notes = Bundle(bundle).figures, []
    field = PARAMS[params][0]
    if any(getattr(r, field) is None for r in rows):  # a bundle collected before the field existed
        field = "params"
        notes.append("N is the total parameter count: this bundle's summary has no non-embedding count")
    colors = _colors(r.arm for r in rows)
    curves = val_curves(bundle, rows)
    skipped = [r for r in rows if not curves[r.run]]
    if skipped:
        notes.append("no validation loss yet, so not in the figures: "
                     + ", ".join(f"{r.run} ({r.state})" for r in skipped))
    curve_files, labels = plot_loss_curves(curves, rows, out, field)
    points, apart = gap_points(rows, curves, field)
    fits, why_not = fit_gaps(points)
    gap_files = plot_gap(points, fits, why_not, out, colors, field)
    notes += list(why_not.values())
    if apart:
        notes.append("not in the gap figure, no validation at the same number of tokens as bp: " + ", ".join(apart))
    if not points:
        notes.append("no gap figure: no size has both bp and a ZBP arm with a validation loss")
    c_files, _ = plot_nsr_c(rows, out, colors, field)
    rho_files, _ = plot_rho_k(bundle, rows, out, colors)
    if not c_files:
        zbp = [r for r in rows if r.arm != "bp"]
        notes.append("no NSR figure: no ZBP run has a diag record yet" + _diag_hint(zbp))
    if not rho_files:
        notes.append("no rho_k figure: no run has a diag record yet" + _diag_hint(rows))
    files = curve_files + gap_files + c_files + rho_files
    names = [f.stem for f in files if f.suffix == ".png"]
    table, m = Bundle(bundle).table, Bundle(bundle).read_manifest() or {}
    origin = f"Sweep `{m['sweep']}`, collected {m.get('collected', '?')} from `{m['source']}`.\n\n" if m else ""
    table.write_text(f"# {bundle.name}\n\n{origin}" + table_markdown(rows, curves, notes, names))
    if files:
        for note in notes:
            log(f"note: {note}")
        log(f"wrote {table} and {len(files)} figure files in {out}")
    else:
        log(f"wrote {table}; no figures: {_nothing_drawn(rows)}")
    return Figures(files=tuple(files) + (table,), gap_points=tuple(points), fits=fits, no_fit=why_not,
                   curves=labels, notes=tuple(notes))


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("bundle", help="a collected results folder, e.g. results/smoke")
    p.add_argument("--params", choices=tuple(PARAMS), default="non-embedding",
                   help="N on the scale axes and in the gap fit: non-embedding parameters (default, as scaling-law "
                        "fits take it) or the total with the embedding tables")


def run(args: argparse.Namespace) -> None:
    plot(args.bundle, params=args.params)

