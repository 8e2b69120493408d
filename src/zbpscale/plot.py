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
are not complete are drawn hollow and dashed, labelled with their status; runs with no validation loss yet
stay in the table and are left out of the figures with a note. Each figure function returns what
it drew, so tests (and notebooks) can check the numbers behind the picture.
"""

from __future__ import annotations

import argparse
import json
import math
import textwrap
import sys
from dataclasses import dataclass
from pathlib import Path

from zbpscale.collect import arm_order, read_summary, sort_key
from zbpscale.metrics import METRICS, read_jsonl

FIGURES = ("loss_curves", "gap_vs_scale", "nsr_c", "rho_k")


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
    """Labels of the loss curves per size (a run not complete carries its status: 'zbp_n16 (running)')."""
    notes: tuple[str, ...]
    """What was left out of the figures, and why."""


PARAMS = {"non-embedding": ("params_non_embedding", "non-embedding parameters N", "non-embedding params"),
          "total": ("params", "parameters N (embeddings included)", "params")}
"""What N is on the scale axes: (summary field, axis label, word after a count). Non-embedding by default, as
scaling-law fits take it (Kaplan et al. 2020): at these sizes the 50k-token embedding tables dominate the total."""


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


def _label(row: dict, text: str) -> str:
    return text if row["status"] == "complete" else f"{text} ({row['status']})"


def _style(row: dict, color: str, *, line: bool = True) -> dict:
    """Solid line and filled marker for a complete run; dashed and hollow otherwise."""
    final = row["status"] == "complete"
    return dict(color=color, markerfacecolor=color if final else "white", markeredgecolor=color,
                **({"linestyle": "-" if final else "--"} if line else {}))


def _save(fig, folder: Path, name: str) -> list[Path]:
    """Write the figure as PNG and PDF, stamped with what made it (the sweep, the runs' folder, the bundle) in a
    strip below the figure, so that the stamp never covers an axis label, and saved with a tight box, so that it
    is never cut."""
    folder.mkdir(parents=True, exist_ok=True)
    try:
        made = json.loads((folder.parent / "manifest.json").read_text())
        words = (f"sweep {made['sweep']} ({made['source']}), collected {made.get('collected', '?')}; "
                 f"zbpscale plot {folder.parent}")
        width = max(40, int(fig.get_figwidth() * 72 / (6 * 0.6)))  # characters of 6 pt that fit the width
        fig.text(0.005, 0.0, textwrap.fill(words, width), fontsize=6, color="gray", ha="left", va="top",
                 gid="stamp")
    except (OSError, ValueError, KeyError):
        pass  # not a collected bundle (a notebook's own folder): no stamp
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


def _by_size(rows: list[dict]) -> dict[str, list[dict]]:
    sizes: dict[str, list[dict]] = {}
    for row in sorted(rows, key=sort_key):
        sizes.setdefault(row["size"], []).append(row)
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


# ------------------------------------------------------------------------------------------------ gaps
def val_curves(bundle: Path, rows: list[dict]) -> dict[str, dict[int, tuple[int, float]]]:
    """{run: {tokens: (steps done, val loss)}}, from the eval records each run has in the bundle."""
    curves = {}
    for r in rows:
        evals = [e for e in read_jsonl(bundle / "runs" / r["run"] / METRICS) if e.get("kind") == "eval"]
        evals.sort(key=lambda e: e["tokens"])
        curves[r["run"]] = {e["tokens"]: (e["step"] + 1, e["val_loss"]) for e in evals}
    return curves


def equal_tokens_gap(runs: list[dict], bp: list[dict], curves: dict) -> Gap | None:
    """Mean val loss of `runs` minus that of `bp`, at the largest token count at which all of them have an eval
    record (for complete runs of one budget: their final evals); None when they share none (not comparable)."""
    common = set.intersection(*(set(curves[r["run"]]) for r in runs + bp))
    if not common:
        return None
    tokens = max(common)
    mean = lambda rs: sum(curves[r["run"]][tokens][1] for r in rs) / len(rs)  # noqa: E731
    full = all(r["status"] == "complete" and tokens == max(curves[r["run"]]) for r in runs + bp)
    return Gap(value=mean(runs) - mean(bp), tokens=tokens, step=curves[runs[0]["run"]][tokens][0], full=full)


def gap_points(rows: list[dict], curves: dict, field: str = "params_non_embedding"
               ) -> tuple[list[GapPoint], list[str]]:
    """(points, left out): ZBP - BP val loss per ZBP arm and size (seeds averaged) at equal tokens, where both
    have an eval record; and the '{arm} at {size}' pairs left out because they share no eval point with bp."""
    groups: dict[tuple[str, str], list[dict]] = {}
    for r in rows:
        if curves[r["run"]]:
            groups.setdefault((r["size"], r["arm"]), []).append(r)
    points, apart = [], []
    for (size, arm), runs in groups.items():
        bp = groups.get((size, "bp"))
        if arm == "bp" or not bp:
            continue
        gap = equal_tokens_gap(runs, bp, curves)
        if gap is None:
            apart.append(f"{arm} at {size}")
            continue
        points.append(GapPoint(arm=arm, size=size, params=runs[0][field], gap=gap.value, tokens=gap.tokens,
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


# ------------------------------------------------------------------------------------------------ figures
def plot_loss_curves(curves: dict, rows: list[dict], out: Path, field: str = "params_non_embedding"
                     ) -> tuple[list[Path], dict[str, list[str]]]:
    """Val loss vs tokens per size; returns (files, {size: [line labels]})."""
    from matplotlib.ticker import FuncFormatter

    sizes = _by_size([r for r in rows if curves[r["run"]]])
    if not sizes:
        return [], {}
    colors, drawn = _colors(r["arm"] for r in rows), {}
    fig, axes = _panels(len(sizes), rows=0)
    for ax, (size, runs) in zip(axes.flat, sizes.items()):
        for row in runs:
            x, y = list(curves[row["run"]]), [loss for _, loss in curves[row["run"]].values()]
            style = _style(row, colors[row["arm"]])
            label = _label(row, row["run"].split("-", 1)[1])
            ax.plot(x, y, label=label, color=style["color"], linestyle=style["linestyle"])
            ax.plot(x[-1:], y[-1:], marker="o", linestyle="none", **_style(row, style["color"], line=False))
            drawn.setdefault(size, []).append(label)
        ax.set_title(f"{size} ({fmt_count(runs[0][field])} {_measure(field)[2]})")
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


def plot_nsr_c(rows: list[dict], out: Path, colors: dict[str, str], field: str = "params_non_embedding"
               ) -> tuple[list[Path], list[tuple]]:
    """c per core against parameters; returns (files, [(core, run, params, c)])."""
    drawn = [(core, r["run"], r[field], r[f"c_{core}"]) for core in ("attn", "ffn") for r in rows
             if r[f"c_{core}"] is not None]
    if not drawn:
        return [], []
    fig, axes = _panels(2)
    for ax, core in zip(axes[0], ("attn", "ffn")):
        runs = [r for r in rows if r[f"c_{core}"] is not None]
        for arm in sorted({r["arm"] for r in runs}, key=arm_order):
            mine = sorted((r for r in runs if r["arm"] == arm), key=lambda r: r[field])
            ax.plot([r[field] for r in mine], [r[f"c_{core}"] for r in mine], color=colors[arm], alpha=0.4)
            for r in mine:
                ax.plot([r[field]], [r[f"c_{core}"]], marker="o", linestyle="none",
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


def plot_rho_k(bundle: Path, rows: list[dict], out: Path, colors: dict[str, str]) -> tuple[list[Path], list[str]]:
    """Forward / backward branch gains per layer for each size; returns (files, runs drawn)."""
    blocks = {}
    for r in rows:
        diags = [d for d in read_jsonl(bundle / "runs" / r["run"] / METRICS) if d.get("kind") == "diag"]
        if diags and diags[-1].get("blocks"):
            blocks[r["run"]] = diags[-1]["blocks"]
    sizes = _by_size([r for r in rows if r["run"] in blocks])
    if not sizes:
        return [], []
    fig, axes = _panels(len(sizes), rows=2)
    for col, (size, runs) in enumerate(sizes.items()):
        for row_i, key in enumerate(("fwd_gain", "bwd_gain")):
            ax = axes[row_i][col]
            for r in runs:
                for branch, marker in (("attn", "o"), ("mlp", "s")):
                    pts = sorted((b["layer"], b[key]) for b in blocks[r["run"]] if b["branch"] == branch)
                    style = _style(r, colors[r["arm"]])
                    ax.plot([p[0] for p in pts], [p[1] for p in pts], marker=marker, markersize=4,
                            linestyle=style["linestyle"] if branch == "attn" else ":", color=style["color"],
                            markerfacecolor=style["markerfacecolor"], markeredgecolor=style["color"])
                ax.plot([], [], color=colors[r["arm"]], label=_label(r, r["run"].split("-", 1)[1]))
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


def _status_words(r: dict) -> str:
    """The status as `zbpscale status` says it, and where a run that is not complete stands: 'cancelled at 9/12'."""
    if r["status"] in ("complete", "new") or not r["steps"]:
        return r["status"]
    return f"{r['status']} {_at(r['steps'], r['steps_total'])}"


def _gap_cell(gap: Gap | None, r: dict) -> str:
    if gap is None:
        return "n/c"
    return f"{gap.value:+.4f}" if gap.full else f"{gap.value:+.4f} {_at(gap.step, r['steps_total'])}"


def table_markdown(rows: list[dict], curves: dict, notes: list[str], figures: list[str]) -> str:
    """The per-run table as markdown, with the gap of each ZBP run to bp of the same size and seed (at equal
    tokens, `equal_tokens_gap`)."""
    bp = {(r["size"], r["seed"]): r for r in rows if r["arm"] == "bp"}
    head = ["run", "size", "params", "non-emb.", "arm", "status", "steps", "tokens", "final val", "best val",
            "gap vs bp", "wall", "GPU-h", "c attn", "c ffn"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    num = lambda v, f="{:.4f}": "" if v is None else f.format(v)  # noqa: E731
    partial = apart = False
    for r in rows:
        ref, gap = bp.get((r["size"], r["seed"])), ""
        if r["arm"] != "bp" and ref and curves[r["run"]] and curves[ref["run"]]:
            compared = equal_tokens_gap([r], [ref], curves)
            gap = _gap_cell(compared, r)
            partial |= compared is not None and not compared.full
            apart |= compared is None
        lines.append("| " + " | ".join([
            r["run"], r["size"], fmt_count(r["params"]), fmt_count(r.get("params_non_embedding")), r["arm"],
            _status_words(r),
            f"{r['steps']:,}" + (f" / {r['steps_total']:,}" if r["steps_total"] else ""), fmt_count(r["tokens"]),
            num(r["final_val_loss"]), num(r["best_val_loss"]), gap, _fmt_seconds(r["wall_time_s"]),
            "?" if r["gpu_hours"] is None else f"{r['gpu_hours']:.2f}", num(r["c_attn"], "{:.3f}"),
            num(r["c_ffn"], "{:.3f}")]) + " |")
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


def _diag_hint(runs: list[dict]) -> str:
    """Why `runs` have no diag record, when their configs say: diagnostics off, or not reached yet."""
    every = {r.get("diag_every") for r in runs}
    if every == {0}:
        return " (diag_every is 0, diagnostics are off: set diag_every)"
    on = [r for r in runs if r.get("diag_every")]
    if on:
        return (f" (diag_every = {min(r['diag_every'] for r in on):,}; the furthest run is at step "
                f"{max(r['steps'] for r in on):,})")
    return ""


def _nothing_drawn(rows: list[dict]) -> str:
    """Why a bundle has no figure at all, in words."""
    if not rows:
        return "the bundle lists no runs"
    counts: dict[str, int] = {}
    for r in rows:
        counts[r["status"]] = counts.get(r["status"], 0) + 1
    states = ", ".join(f"{n} {s}" for s, n in counts.items())
    off = " (diag_every is 0: the NSR and rho_k figures need it set)" if {r.get("diag_every") for r in rows} == {0} \
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
    rows = read_summary(bundle)
    out, notes = bundle / "figures", []
    field = PARAMS[params][0]
    if any(r.get(field) is None for r in rows):  # a bundle collected before the field existed
        field = "params"
        notes.append("N is the total parameter count: this bundle's summary has no non-embedding count")
    colors = _colors(r["arm"] for r in rows)
    curves = val_curves(bundle, rows)
    skipped = [r for r in rows if not curves[r["run"]]]
    if skipped:
        notes.append("no validation loss yet, so not in the figures: "
                     + ", ".join(f"{r['run']} ({r['status']})" for r in skipped))
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
        zbp = [r for r in rows if r["arm"] != "bp"]
        notes.append("no NSR figure: no ZBP run has a diag record yet" + _diag_hint(zbp))
    if not rho_files:
        notes.append("no rho_k figure: no run has a diag record yet" + _diag_hint(rows))
    files = curve_files + gap_files + c_files + rho_files
    names = [f.stem for f in files if f.suffix == ".png"]
    table, manifest = bundle / "table.md", bundle / "manifest.json"
    m = json.loads(manifest.read_text()) if manifest.is_file() else {}
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


def main(argv: list[str] | None = None) -> int:
    """`python -m zbpscale.plot ...`, the same as `zbpscale plot ...`."""
    from zbpscale.cli import module_main

    return module_main("plot", argv)


if __name__ == "__main__":
    sys.exit(main())
