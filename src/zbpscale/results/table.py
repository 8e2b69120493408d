"""table.md of a results bundle: the runs over seeds (one row per size and arm), then one row per run.

    | size | non-emb. | arm | seeds | complete | final val | best val | gap vs bp (same seed) |
    | tiny | 854K     | zbp_n16 | 3 | 3/3    | 6.1975 ± 0.0123 | ... | +0.2782 ± 0.0201 |

The first table is there when some size and arm has more than one seed: mean ± sample sd (n - 1 in the
denominator) over the seeds, n in the seeds column, or beside a value when fewer of the seeds have it. The gap
is taken per seed against bp of the same seed and at equal tokens (gaps.py), then averaged. The second table
is the summary, with each ZBP run's own gap to bp of its size and seed. Torch-free.
"""

from __future__ import annotations

from zbpscale.results.gaps import Curves, Gap, GapPoint, equal_tokens_gap
from zbpscale.results.seeds import Spread, group_runs, seeds_of
from zbpscale.results.summary import RunSummary


def fmt_count(n: float | None) -> str:
    if n is None:
        return "?"
    for div, unit in ((1e9, "B"), (1e6, "M"), (1e3, "K")):
        if abs(n) >= div:
            return f"{n / div:.3g}{unit}"
    return f"{n:g}"


def fmt_seconds(s: float) -> str:
    return f"{s:.0f} s" if s < 120 else f"{s / 60:.1f} min" if s < 7200 else f"{s / 3600:.1f} h"


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


def _spread_cell(s: Spread, seeds: int, fmt: str = "{:.4f}") -> str:
    """'6.0399 ± 0.0123'; one value alone; '(n=2)' when fewer than the group's `seeds` have it."""
    if not s.n:
        return ""
    text = fmt.format(s.mean) + (f" ± {s.sd:.4f}" if s.n > 1 else "")
    return text + (f" (n={s.n})" if s.n != seeds else "")


def seeds_markdown(rows: list[RunSummary], curves: Curves, points: list[GapPoint]) -> str:
    """The runs over seeds: one row per size and arm, with the mean ± sd of its final and best val losses and
    of its gap to bp of the same seed (`points`, gaps.gap_points), losses over a run not complete marked ' *' (as
    claims.md's ladder marks them); '' when every size and arm has one seed."""
    groups = group_runs(rows)
    if all(len(g.runs) == 1 for g in groups):
        return ""
    by_run = {(r.size, r.arm, r.seed): r for r in rows}
    gaps = {(p.size, p.arm): p for p in points}
    head = ["size", "non-emb.", "arm", "seeds", "complete", "final val", "best val", "gap vs bp (same seed)"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    cut_any = False
    for g in groups:
        n, gap = len(g.runs), ""
        cut = " *" if any(r.state != "complete" and r.final_val_loss is not None for r in g.runs) else ""
        cut_any |= bool(cut)
        p = gaps.get((g.size, g.arm))
        if p is not None:
            gap = _spread_cell(p.spread, n, "{:+.4f}")
            if not p.final:
                first = by_run[(p.size, p.arm, p.seeds[0])]
                gap += " " + _at(curves[first.run][p.tokens][0], first.steps_total)
        elif g.arm != "bp" and g.final.n:
            gap = "n/c"
        lines.append("| " + " | ".join([
            g.size, fmt_count(g.runs[0].params_non_embedding), g.arm, str(n), f"{g.complete}/{n}",
            _spread_cell(g.final, n) + cut, _spread_cell(g.best, n) + cut, gap]) + " |")
    if cut_any:
        lines += ["", "\\* over a run not complete: its last validation loss (the runs below say where it stands)"]
    return "\n".join(lines) + "\n"


def runs_markdown(rows: list[RunSummary], curves: Curves) -> tuple[str, list[str]]:
    """(the per-run table, its notes): each ZBP run with its gap to bp of the same size and seed (at equal tokens,
    `equal_tokens_gap`); a run whose val loss rose above its start is marked '(diverged)', a note giving the
    numbers."""
    bp = {(r.size, r.seed): r for r in rows if r.arm == "bp"}
    head = ["run", "size", "params", "non-emb.", "arm", "state", "steps", "tokens", "final val", "best val",
            "gap vs bp", "wall", "GPU-h", "goodput", "c attn", "c ffn"]
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
            _state_words(r) + (" (diverged)" if r.diverged else ""),
            f"{r.steps:,}" + (f" / {r.steps_total:,}" if r.steps_total else ""), fmt_count(r.tokens),
            num(r.final_val_loss), num(r.best_val_loss), gap, fmt_seconds(r.wall_time_s),
            "?" if r.gpu_hours is None else f"{r.gpu_hours:.2f}",
            "" if r.goodput is None else f"{100 * r.goodput:.1f}%", num(r.c_attn, "{:.3f}"),
            num(r.c_ffn, "{:.3f}")]) + " |")
    notes = []
    if partial:
        notes.append("a gap 'at s/T' compares the run and bp at step s of T, the latest validation both reached "
                     "(a run is not complete); a gap without it compares the final val losses of two complete runs")
    if apart:
        notes.append("n/c: not comparable, the run and bp have no validation at the same number of tokens")
    if any(r.goodput is not None for r in rows):
        notes.append("goodput: productive training time / wall time held by the run's jobs (queue wait left out; "
                     "`zbpscale status --goodput` splits the rest)")
    notes += [f"{r.run} diverged: {r.diverged} (a run's start: its train loss at step 0, else ln(vocab)); look at its "
              "curve before using its numbers" for r in rows if r.diverged]
    return "\n".join(lines) + "\n", notes


def table_markdown(rows: list[RunSummary], curves: Curves, notes: list[str], figures: list[str],
                   points: list[GapPoint] | None = None, fits: str = "") -> str:
    """table.md's body: the runs over seeds (when some size and arm has several; their gaps are `points`,
    gaps.gap_points), the runs, the notes, the fits and tests (`fits`: claims.fits_markdown), the figures."""
    over_seeds = seeds_markdown(rows, curves, points or [])
    runs, more = runs_markdown(rows, curves)
    text = runs
    if over_seeds:
        seeds = seeds_of(rows)
        text = (f"Over seeds ({len(seeds)}: {', '.join(map(str, seeds))}): mean ± sd (sample sd, n - 1), each gap "
                "taken against bp of the same seed.\n\n" + over_seeds + "\nRuns:\n\n" + runs)
    notes = list(notes) + more
    if notes:
        text += "\nNotes:\n" + "".join(f"- {n}\n" for n in notes)
    if fits:
        text += "\n" + fits
    if figures:
        text += "\n" + "".join(f"![{f}](figures/{f}.png)\n" for f in figures)
    return text
