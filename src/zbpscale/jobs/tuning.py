"""Learning-rate tuning per size and arm (a sweep's `Tune`): which lr each final run takes, and from where.

    planned(sweep)   every run of the sweep, the final runs of a tuning sweep with their lr when it is known
                     (else `waits_for` the tuning runs it depends on), and a grid step beyond an edge where the best
                     lr lies, while Tune.extend allows: what submit plans and status shows (it reads, never writes)
    best_lr(losses)  the choice at one size and arm from its tuning runs' final validation losses
    fit_lr_law(...)  lr*(N) = a N^b per arm on the tuned sizes (least squares in log-log), b with its interval
    lr_laws(...)     the law of each arm once its tuned sizes have answered: the one rule of planned and the bundle

A tuning run's loss is its last validation loss once it is COMPLETE (all its tuning runs train the same tokens, so
the losses compare at equal tokens); a run that diverged (non-finite loss: the trainer's `end` record says so)
counts as worse than any, so an lr too high for the method is an answer, not a wait. Anything else waits.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Mapping, Sequence

from zbpscale.jobs.sweep import PlannedRun, Sweep, expand, lr_text, round_lr
from zbpscale.run.folder import RunFolder
from zbpscale.run.records import records_of_kind

LEVEL = 0.95
"""The confidence level of the lr law's exponent interval."""


@dataclass(frozen=True)
class Choice:
    """The lr of one size and arm picked from its grid's mean final losses."""

    lr: float
    """The lr of the lowest mean loss (of two within 1e-12 of each other, the smaller lr: the safer one)."""
    loss: float
    edge: str
    """"low" or "high" when the best lr is the grid's smallest or largest (the optimum may lie beyond), else ""."""
    near: tuple[float, float]
    """The smallest and largest lr whose mean loss is within Tune.near of the best (the flat part of the curve)."""
    lrs: int
    """How many lrs the grid held."""

    def words(self) -> str:
        edge = f"; at the {self.edge} edge of the grid" if self.edge else ""
        if math.isinf(self.loss):  # best_lr's pick when every lr diverged: a final run there diverges too
            return f"every one of {self.lrs} tuned lrs diverged, the smallest taken (lower Tune.grid){edge}"
        span = "" if self.near[0] == self.near[1] else \
            f"; near-best {lr_text(self.near[0])}..{lr_text(self.near[1])}"
        return f"best of {self.lrs} tuned lrs (loss {self.loss:.4f}{span}){edge}"


def best_lr(losses: Mapping[float, list[float]], near: float = 3e-3) -> Choice:
    """The best lr of a grid, from each lr's final losses (one per seed; inf for a run that diverged)."""
    means = {lr: sum(v) / len(v) for lr, v in sorted(losses.items())}
    best, grid = min(means.values()), list(means)
    if math.isinf(best):  # every lr diverged: the smallest, at the low edge (the grid grows below it)
        return Choice(lr=grid[0], loss=best, edge="low", near=(grid[0], grid[0]), lrs=len(grid))
    lr = min(lr for lr, m in means.items() if m - best <= 1e-12)
    close = [x for x, m in means.items() if m - best <= near]
    edge = "low" if lr == grid[0] else "high" if lr == grid[-1] else ""
    return Choice(lr=lr, loss=best, edge=edge, near=(min(close), max(close)), lrs=len(grid))


@dataclass(frozen=True)
class LrLaw:
    """lr*(N) = a N^b, fitted on (N, best lr) of the tuned sizes."""

    a: float
    b: float
    b_interval: tuple[float, float] | None
    """The exponent's LEVEL interval (Student's t on the residuals); None with two sizes (the line goes through
    both: no spread to measure)."""
    sizes: int

    def at(self, params: float) -> float:
        return self.a * params ** self.b

    def words(self) -> str:
        spread = f" [{self.b_interval[0]:.2f}, {self.b_interval[1]:.2f}]" if self.b_interval else \
            " (through 2 sizes: no interval)"
        return f"lr law {self.a:.3g} N^{self.b:.3f}{spread}"


def fit_lr_law(params: list[float], lrs: list[float]) -> LrLaw:
    """Least squares of log lr on log N over the tuned sizes (two at least)."""
    import numpy as np
    from scipy import stats

    x, y = np.log(np.asarray(params, float)), np.log(np.asarray(lrs, float))
    if len(x) < 2 or np.ptp(x) == 0:
        raise ValueError("the lr law needs two sizes of different parameter counts")
    b, log_a = np.polyfit(x, y, 1)
    interval = None
    if len(x) > 2:
        residual = y - (log_a + b * x)
        se = math.sqrt(float(residual @ residual) / (len(x) - 2) / float(((x - x.mean()) ** 2).sum()))
        half = float(stats.t.ppf(0.5 + LEVEL / 2, len(x) - 2)) * se
        interval = (float(b) - half, float(b) + half)
    return LrLaw(a=float(math.exp(log_a)), b=float(b), b_interval=interval, sizes=len(x))


def lr_laws(choices: Mapping[tuple[str, str], Choice], params: Mapping[str, float], sizes: Sequence[str]
            ) -> dict[str, LrLaw]:
    """The lr law of each arm, fitted on the best lr (`choices`, by (size, arm)) of each of `sizes`, the tuned sizes
    (Tune.sizes: never a checked one, which tests the law), at their non-embedding parameter counts (`params`); an
    arm has one once every one of its tuned sizes has its choice and they span two counts. The one rule of the final
    runs' lrs (`planned`) and of the bundle's table (results/lr.py)."""
    laws = {}
    for arm in dict.fromkeys(a for _, a in choices):
        tuned = [(params[s], choices[s, arm].lr) for s in sizes if (s, arm) in choices and s in params]
        if len(tuned) == len(sizes) and len({n for n, _ in tuned}) >= 2:  # a sweep tuning one size has none
            laws[arm] = fit_lr_law(*zip(*tuned))
    return laws


def law_sizes(sweep: Sweep) -> list[str]:
    """The sizes the lr law is fitted on (Tune.sizes), in the sweep's order (the bundle keeps them: collect)."""
    return [s.name for s in sweep.sizes if sweep.tune is not None and s.name in sweep.tune.sizes]


def answer(*, complete: bool, diverged: bool, loss: float | None) -> float | None:
    """A tuning run's answer, the one rule of the planner (`final_loss`, from its folder) and of the bundle
    (results/lr.py, from its summary row): inf for an lr too high (its trainer stopped it at a non-finite loss, or
    it completed with a last validation loss that is not finite), else its last validation loss once complete, else
    None: it has not answered (queued, running, stopped, cancelled, or failed for another cause, which a retry
    resumes)."""
    if diverged or (complete and loss is not None and not math.isfinite(loss)):
        return math.inf
    return loss if complete else None


def final_loss(run: PlannedRun) -> float | None:
    """A tuning run's `answer` from its folder: an end record of any of its attempts that says diverged, its
    COMPLETE stamp, its last validation loss. Only its end records and its last eval are decoded (status, submit
    and collect ask it of every grid run of a tuning sweep)."""
    folder = RunFolder(run.run_dir)
    try:
        data = folder.metrics.read_bytes()
    except FileNotFoundError:
        data = b""
    last = next((r for r in records_of_kind(data, "eval", backwards=True) if r.get("val_loss") is not None), None)
    return answer(complete=folder.complete.exists(), loss=None if last is None else float(last["val_loss"]),
                  diverged=any(r.get("why") == "diverged" for r in records_of_kind(data, "end")))


@dataclass(frozen=True)
class Tuned:
    """What tuning says of the sweep so far: the choice per tuned (size, arm), the law per arm."""

    choices: dict[tuple[str, str], Choice]
    laws: dict[str, LrLaw]
    waiting: dict[tuple[str, str], tuple[str, ...]]
    """(size, arm) -> the tuning runs its choice waits for."""
    centers: dict[tuple[str, str], float] = dataclasses.field(default_factory=dict)
    """(checked size, arm) -> the lr law's lr there, the center of its check grid."""


def _settle(sweep: Sweep, grid: list[PlannedRun], losses) -> tuple[list[PlannedRun], Choice | None, tuple[str, ...]]:
    """One (size, arm)'s grid, its choice once every run of it answered (None before), and the runs it waits for;
    a best at an edge grows the grid by one step on that side, up to Tune.extend steps beyond the first grid."""
    first, tune = {r.lr for r in grid}, sweep.tune
    while True:
        answers = {r: losses(r) for r in grid}
        pending = tuple(r.name for r, loss in answers.items() if loss is None)
        if pending:
            return grid, None, pending
        by_lr: dict[float, list[float]] = {}
        for r, loss in answers.items():
            by_lr.setdefault(r.lr, []).append(loss)
        choice, lrs = best_lr(by_lr, tune.near), sorted(by_lr)
        if not choice.edge or len(set(lrs) - first) >= tune.extend:
            return grid, choice, ()
        step = lrs[1] / lrs[0] if choice.edge == "low" else lrs[-1] / lrs[-2]
        lr = round_lr(lrs[0] / step if choice.edge == "low" else lrs[-1] * step)
        grid = grid + [dataclasses.replace(grid[0], seed=seed, lr=lr) for seed in tune.seeds]


def planned(sweep: Sweep, losses=final_loss) -> tuple[list[PlannedRun], Tuned]:
    """Every run of the sweep with each final run's lr and where it came from, or what it waits for: at a tuned
    size its grid's best, at a checked size the best of a grid around the lr law's lr (planned once the law is
    known), elsewhere the law's; a grid whose best lr lies at an edge grown by a step on that side (`_settle`).
    `losses`: a tuning run's answer (final_loss; tests give their own). Reads only."""
    runs = expand(sweep)
    tune = sweep.tune
    if tune is None:
        return runs, Tuned({}, {}, {})
    grids, choices, waiting = [], {}, {}

    def take(grid: list[PlannedRun]) -> None:  # one (size, arm)'s grid settled: its choice, or what it waits for
        grid, choice, pending = _settle(sweep, grid, losses)
        grids.extend(grid)
        key = (grid[0].size.name, grid[0].arm.name)
        if choice:
            choices[key] = choice
        else:
            waiting[key] = pending

    for size in sweep.sizes:
        for arm in sweep.arms:
            grid = [r for r in runs if r.role == "tuning" and r.size == size and r.arm == arm]
            if grid:
                take(grid)
    laws = lr_laws(choices, {s.name: s.params_non_embedding for s in sweep.sizes}, law_sizes(sweep))
    centers = {}
    for size in (s for s in sweep.sizes if s.name in tune.check):
        for arm in (a for a in sweep.arms if a.name in laws):
            center = centers[size.name, arm.name] = round_lr(laws[arm.name].at(size.params_non_embedding))
            take([PlannedRun(sweep, size, arm, seed, lr=round_lr(center * m), role="tuning")
                  for m in tune.check_grid for seed in tune.seeds])
    finals = []
    for r in (r for r in runs if r.role == "final"):
        key, n = (r.size.name, r.arm.name), r.size.params_non_embedding
        law = laws.get(r.arm.name)
        if key in choices:
            c = choices[key]
            where = f"checked at {r.size.name} around the lr law's {lr_text(centers[key])}" if key in centers \
                else f"tuned at {r.size.name}"
            finals.append(dataclasses.replace(r, lr=c.lr, lr_from=f"{where}: {c.words()}"))
        elif key in waiting:
            finals.append(dataclasses.replace(r, waits_for=waiting[key]))
        elif law is not None:
            edges = [s for s in law_sizes(sweep) if choices[s, r.arm.name].edge]  # the optimum may lie beyond them
            through = f"; through the best lr at a grid's edge at {', '.join(edges)}" if edges else ""
            finals.append(dataclasses.replace(r, lr=round_lr(law.at(n)), lr_from=f"{law.words()} at N={n:,}{through}"))
        else:  # the law waits for the tuned sizes
            finals.append(dataclasses.replace(r, waits_for=tuple(
                name for s in tune.sizes for name in waiting.get((s, r.arm.name), ()))))
    order = {(r.size.name, r.arm.name): i for i, r in enumerate(runs)}
    everything = sorted(grids + finals, key=lambda r: (order[r.size.name, r.arm.name], r.role != "tuning",
                                                       r.lr if r.role == "tuning" else 0.0, r.seed))
    return everything, Tuned(choices, laws, waiting, centers)
