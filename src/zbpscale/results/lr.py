"""A tuning sweep's learning rates in the bundle: the choice per size and arm from its grid runs, the lr law per
arm, how the law did at the checked sizes, what tuning changed in the gap, and the sensitivity figure's data. The
choice and the law are jobs/tuning.py's (the same rule that gave the final runs their lr: `best_lr`, `lr_laws`),
applied to the bundle's rows, the law fitted on the sizes the sweep tuned (summary.json's `tune`, which collect
keeps), never on a checked one.

Grid runs (RunSummary.role "tuning") answer as they answer the planner (jobs/tuning.py's `answer`): their final
validation loss once complete, inf (an lr too high, worse than any) where the trainer stopped them at a non-finite
loss; others have not answered, and a size and arm with such a run has no choice yet, as the planner's final runs
wait for it. A bundle of a release before 2026-12-06 does not say how a run stopped: a failed grid run without a
finite loss reads as diverged there, as that release read it.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from zbpscale.results.summary import RunSummary, arm_order


def grid_answers(rows: list[RunSummary]) -> tuple[dict[tuple[str, str], dict[float, list[float]]],
                                                  dict[tuple[str, str], tuple[str, ...]]]:
    """({(size, arm): {lr: [final val loss per seed]}} of the grid runs that answered, {(size, arm): the grid runs
    that have not answered} where there are some: no choice there yet)."""
    losses: dict[tuple[str, str], dict[float, list[float]]] = {}
    waiting: dict[tuple[str, str], tuple[str, ...]] = {}
    for r in (r for r in rows if r.role == "tuning" and r.lr is not None):
        value = grid_answer(r)
        if value is None:
            waiting[r.size, r.arm] = waiting.get((r.size, r.arm), ()) + (r.run,)
        else:
            losses.setdefault((r.size, r.arm), {}).setdefault(r.lr, []).append(value)
    return losses, waiting


def grid_answer(r: RunSummary) -> float | None:
    """A grid run's answer from its summary row (jobs/tuning.py's `answer`); None: it has not answered."""
    from zbpscale.jobs.tuning import answer

    loss = r.final_val_loss
    stopped = r.stopped_nonfinite if r.stopped_nonfinite is not None else (  # an older bundle: as it was read
        r.state == "failed" and (loss is None or not math.isfinite(loss) or bool(r.diverged)))
    return answer(complete=r.state == "complete", diverged=stopped, loss=loss)


@dataclass(frozen=True)
class Tuning:
    """What the grid runs of a bundle say: the choice per (size, arm), the law per arm, and the gap at BP's best
    lr next to the gap at each arm's own (at the sizes where the arm's grid holds BP's best lr)."""

    choices: dict
    laws: dict
    params: dict[str, int]
    gaps: list[tuple[str, str, float, float]]
    """(size, arm, gap at its own best lr, gap at BP's best lr): ZBP's mean final loss minus BP's best; nan, nan
    where BP diverged at every lr of its grid."""
    law_sizes: tuple[str, ...] = ()
    """The sizes the laws are fitted on: the sweep's tuned sizes, or, in a bundle that does not name them
    (`named` False: collected before 2026-12-05), every size with a grid."""
    named: bool = True
    checks: tuple[tuple[str, str, float, float], ...] = ()
    """(checked size, arm, the law's lr there, the best lr of its grid): how the law transferred."""
    waiting: dict[tuple[str, str], tuple[str, ...]] = dataclasses.field(default_factory=dict)
    """(size, arm) -> its grid runs that have not answered: no choice there yet (grid_answers)."""
    losses: dict[tuple[str, str], dict[float, list[float]]] = dataclasses.field(default_factory=dict)
    """(size, arm) -> {lr: each seed's answer} of the grid runs that answered (grid_answers): the lr figure's."""
    near: float = 3e-3
    """Tune.near: a loss within this of the best is near-best."""


def tuning_of(rows: list[RunSummary], field: str = "params_non_embedding", tune: dict | None = None
              ) -> Tuning | None:
    """The bundle's tuning (None when it has no grid run that answered); `tune`: the sweep's tuned and checked
    sizes and its near-best margin ({"sizes": [...], "check": [...], "near": 3e-3}, summary.json's `tune`), None in
    a bundle that does not name them. A size and arm whose grid has a run that has not answered has no choice. Where
    `tune` names the grid runs the sweep file plans (its `grid`, since 2026-12-06), the others (a grid narrowed after
    they ran) are left out, as the planner leaves them: the bundle's choices and law are the final runs'."""
    from zbpscale.jobs.sweep import round_lr
    from zbpscale.jobs.tuning import best_lr, lr_laws

    if tune is not None and isinstance(tune.get("grid"), list):
        planned = set(tune["grid"])
        rows = [r for r in rows if r.role != "tuning" or r.run in planned]
    losses, waiting = grid_answers(rows)
    if not losses:
        return None
    near = (tune or {}).get("near", 3e-3)
    params = {r.size: getattr(r, field) for r in rows if getattr(r, field) is not None}
    choices = {key: best_lr(by_lr, near) for key, by_lr in losses.items() if key not in waiting}
    if tune is not None:
        sizes, checked = tuple(tune.get("sizes", ())), tuple(tune.get("check", ()))
    else:  # every size with a grid, smallest first: what a bundle that does not say could fit
        sizes, checked = tuple(sorted({s for s, _ in choices if s in params}, key=params.get)), ()
    laws = lr_laws(choices, params, sizes)
    checks = tuple((size, arm, round_lr(laws[arm].at(params[size])), choices[size, arm].lr)
                   for size in checked for arm in sorted(laws, key=arm_order)
                   if (size, arm) in choices and size in params)
    gaps = []
    for (size, arm), choice in sorted(choices.items(), key=lambda kv: (params.get(kv[0][0], 0), arm_order(kv[0][1]))):
        bp = choices.get((size, "bp"))
        if arm == "bp" or bp is None or bp.lr not in losses[size, arm]:
            continue
        if not math.isfinite(bp.loss):  # BP diverged at every lr of its grid: no loss to measure a gap from
            gaps.append((size, arm, math.nan, math.nan))
            continue
        at_bp = sum(losses[size, arm][bp.lr]) / len(losses[size, arm][bp.lr])
        gaps.append((size, arm, choice.loss - bp.loss, at_bp - bp.loss))
    return Tuning(choices, laws, params, gaps, law_sizes=sizes, named=tune is not None, checks=checks,
                  waiting=waiting, losses=losses, near=near)


def lr_markdown(t: Tuning, finals: list[RunSummary]) -> str:
    """table.md's section on the learning rates: per size and arm the grid, its best, the near-best range, an edge,
    the final runs' lr; the law per arm; the gap at each arm's best lr and at BP's."""
    from zbpscale.jobs.sweep import lr_text

    final_lr = {(r.size, r.arm): r.lr for r in finals if r.lr is not None}
    lines = ["## Learning rates", "",
             "Each size and arm's grid runs, by final validation loss at equal tokens (seeds averaged); an lr "
             f"whose loss is within {t.near:g} of the best's is near-best; a best at the grid's edge may not be the "
             "optimum.", "",
             "| size | arm | grid | best lr | loss | near-best | edge | final runs' lr |", "|---" * 8 + "|"]
    for (size, arm), c in sorted(t.choices.items(), key=lambda kv: (t.params.get(kv[0][0], 0),
                                                                     arm_order(kv[0][1]))):
        near = lr_text(c.near[0]) if c.near[0] == c.near[1] else f"{lr_text(c.near[0])}..{lr_text(c.near[1])}"
        final = final_lr.get((size, arm))
        lines.append(f"| {size} | {arm} | {c.lrs} lrs | {lr_text(c.lr)} | {c.loss:.4f} | {near} | "
                     f"{c.edge or ''} | {'' if final is None else lr_text(final)} |")
    for (size, arm), names in sorted(t.waiting.items(), key=lambda kv: (t.params.get(kv[0][0], 0),
                                                                       arm_order(kv[0][1]))):
        lines.append(f"| {size} | {arm} | waits for {len(names)} run{'s' if len(names) > 1 else ''} | | | | | "
                     f"{lr_text(final_lr[size, arm]) if (size, arm) in final_lr else ''} |")
    untuned = sorted({(r.size, r.arm) for r in finals if (r.size, r.arm) not in t.choices and r.lr is not None
                      and (r.size, r.arm) not in t.waiting},
                     key=lambda k: (t.params.get(k[0], 0), arm_order(k[1])))
    for size, arm in untuned:
        lines.append(f"| {size} | {arm} | (lr law) | | | | | {lr_text(final_lr[size, arm])} |")
    if t.laws:
        through = f"the tuned sizes ({', '.join(t.law_sizes)}), as the sweep fitted it" if t.named else \
            f"every size with a grid ({', '.join(t.law_sizes)}; this bundle does not name the sweep's tuned sizes: " \
            "collect it again)"
        lines += ["", f"lr law per arm, lr*(N) = a N^b through the best lr of {through} (95 % interval of b): "
                  + "; ".join(f"{arm} {law.words().removeprefix('lr law ')}"
                              for arm, law in sorted(t.laws.items(), key=lambda kv: arm_order(kv[0]))) + "."]
    if t.checks:
        lines += ["", "The law checked at sizes it was not fitted on (its lr there, the best of a grid around it): "
                  + "; ".join(f"{arm} at {size}: {lr_text(law_lr)}, best {lr_text(best)} (x{best / law_lr:.2g})"
                              for size, arm, law_lr, best in t.checks) + "."]
    if t.gaps:
        lines += ["", "What tuning changed in the gap (ZBP's loss minus BP's at BP's best lr): "
                  + "; ".join(f"{arm} at {size}: " + (f"{own:+.4f} at its own best lr, {shared:+.4f} at BP's"
                                                       if not math.isnan(own) else
                                                       "none, BP diverged at every lr of its grid")
                              for size, arm, own, shared in t.gaps) + "."]
    return "\n".join(lines) + "\n"
