"""RunSummary: one row per run of a results bundle (summary.csv, summary.json), from the run's own records.

`summarize` reads a run folder (or a run's copy in a bundle: the same layout) through the record types of
run/records.py and its history (run/history.py); collect writes the rows, plot and submit --wait read them.
Torch-free unless a run has not started (its planned numbers come from the model's closed-form parameter count).
"""

from __future__ import annotations

import dataclasses
import math
import re
from dataclasses import dataclass
from pathlib import Path

from zbpscale.jobs.state import IN_PROGRESS, State
from zbpscale.run import goodput
from zbpscale.run.divergence import diverged
from zbpscale.run.records import Record, StartRecord, by_kind, numbered
from zbpscale.run.snapshot import Snapshot


@dataclass(frozen=True, kw_only=True)
class RunSummary:
    """One row of summary.csv / summary.json: a run as its folder shows it."""

    run: str
    """Run name, its folder's: `{size}-{arm}` (plus `-s{seed}`) for a sweep's runs, any name for one trained by
    hand (its size, arm and seed then come from its config: jobs/runs.py's `identity`)."""
    size: str
    """Model size preset."""
    arm: str
    """Training arm: bp, zbp_n16, ... ('' when neither the run's name nor its config says)."""
    seed: int
    """Seed of the run."""
    params: int | None
    """Parameters, embeddings included."""
    params_non_embedding: int | None
    """Parameters without the token/position tables and the LM head."""
    state: State
    """As `zbpscale status` says it (jobs/state.py's STATES): complete, running, stalled, queued, stopped, ..."""
    in_progress: bool
    """Running, stalled or queued: a job holds the run, so its numbers will still change (a stopped, cancelled
    or failed run changes only if submitted again)."""
    reason: str | None
    """Why the run failed, stalled, stopped or was cancelled (`zbpscale status`'s one line)."""
    steps: int
    """Optimizer steps done."""
    steps_total: int | None
    """Optimizer steps of the whole run."""
    tokens: int
    """Training tokens seen so far."""
    tokens_total: int | None
    """Training tokens of the whole run."""
    final_val_loss: float | None
    """Latest validation loss (the final one once the run is complete)."""
    final_val_tokens: int | None
    """Tokens at which final_val_loss was measured."""
    best_val_loss: float | None
    """Lowest validation loss so far."""
    final_train_loss: float | None
    """Latest training loss."""
    wall_time_s: float
    """Wall seconds the run's jobs held (goodput's held: each attempt's start to its end; queueing left out)."""
    gpu_hours: float | None
    """wall_time_s x the GPUs its jobs held, in hours (run/goodput.py's RunTime: plan.json's GPUs, 0 for CPU runs;
    for a run trained by hand its trainer's; None when neither says)."""
    attempts: int
    """Training attempts started (start records)."""
    timeouts: int
    """Attempts that ended at the time limit and were requeued."""
    preemptions: int
    """Attempts that were preempted and requeued."""
    c_attn: float | None
    """NSR constant c = NSR * n / d of the attention core, mean over layers, from the latest diag record."""
    c_ffn: float | None
    """The same for the SwiGLU core."""
    impl_used: str = ""
    """The ZBP estimator's path per core in the latest attempt, e.g. 'attn=closed ffn=closed' (a slower path than
    asked means a fast one failed: the run's log and heartbeat.json say why); '' for bp."""
    diag_step: int | None
    """Step of that diag record."""
    diag_every: int | None
    """Steps between diag records, from the run's config (0: diagnostics off; None: config not known)."""
    updated: float | None
    """Unix time of the run's latest record."""
    goodput: float | None = None
    """Productive training time / wall time held by the run's jobs (run/goodput.py: held is each attempt's start ->
    end, the queue wait left out; `zbpscale status --goodput` shows the split); None before any attempt."""
    diverged: str | None = None
    """Set when a val loss of the run is above the loss it started from (run/divergence.py's `diverged`): the highest,
    in words, 'val 10.996 at step 15 is above its start 10.951'; None otherwise (and in older bundles)."""
    lr: float | None = None
    """The peak learning rate it trains with (its config's; None in older bundles)."""
    role: str = ""
    """In a sweep that tunes its lr (jobs/tuning.py): "tuning" (a run of an lr grid: the sensitivity figure, not
    the gap) or "final" (a run of the study, at its tuned or transferred lr); "" in any other sweep."""
    failures: int | None = None
    """Attempts that crashed, hung or failed (status's F, beside timeouts and preemptions: each counted since the run's
    last `submit --retry`); None in older bundles."""
    stopped_nonfinite: bool | None = None
    """Its trainer stopped it at a non-finite loss (an end record says diverged: for a grid run of a tuning sweep,
    the answer 'lr too high', jobs/tuning.py's `answer`); None in older bundles."""


FIELDS = tuple(f.name for f in dataclasses.fields(RunSummary))


# ------------------------------------------------------------------------------------------------ summary
def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def _impl_used(records: list[Record]) -> dict[str, str]:
    """The ZBP estimator's path per core in the latest attempt: its start record, then its diag records."""
    impl: dict[str, str] = {}
    for r in records:
        if r.get("kind") == "start" or (r.get("kind") == "diag" and "impl_used" in r):
            impl = r.get("impl_used", {})
    return impl


def summarize(run: Path | Snapshot, *, name: str, size: str, arm: str, seed: int, state: tuple[State, str | None],
              config: dict | None = None, role: str = "") -> RunSummary:
    """The summary row of one run folder (or the look at it its state was decided on); `state`: (state, reason) as
    `zbpscale status` says them; `config`: the planned config, for runs that have not written theirs; `role`: what
    the sweep file plans it as (else its plan.json says)."""
    look = run if isinstance(run, Snapshot) else Snapshot(run)
    records, history = look.records, look.history
    kinds = by_kind(records)
    starts: list[StartRecord] = kinds.get("start", [])
    trains, evals = numbered(kinds.get("train", []), "step", "tokens", "loss"), \
        numbered(kinds.get("eval", []), "tokens", "val_loss")
    diags = numbered(kinds.get("diag", []), "step")
    if starts and "config" in starts[-1]:  # the config the run trained with
        config = starts[-1]["config"]
    elif look.config is not None:
        config = look.config
    derived = starts[-1].get("derived", {}) if starts else {}
    if not derived and config:
        derived = _planned_numbers(config)
    cores = diags[-1].get("cores", []) if diags else []
    spent = goodput.run_time(look)
    return RunSummary(
        run=name, size=size, arm=arm, seed=seed, params=derived.get("params"),
        params_non_embedding=derived.get("params_non_embedding"), state=state[0], in_progress=state[0] in IN_PROGRESS,
        reason=state[1], steps=trains[-1]["step"] + 1 if trains else 0, steps_total=derived.get("total_steps"),
        tokens=trains[-1]["tokens"] if trains else 0, tokens_total=derived.get("total_tokens"),
        final_val_loss=evals[-1]["val_loss"] if evals else None,
        final_val_tokens=evals[-1]["tokens"] if evals else None,
        best_val_loss=min((e["val_loss"] for e in evals if not math.isnan(e["val_loss"])), default=math.nan)
        if evals else None,  # the lowest number (min with a nan first gave nan); nan where every one is
        final_train_loss=trains[-1]["loss"] if trains else None, wall_time_s=round(spent.held_s, 3),
        gpu_hours=None if spent.gpu_hours is None else round(spent.gpu_hours, 6), attempts=len(starts),
        timeouts=history.count_ends("timeout"),
        impl_used=" ".join(f"{c}={p}" for c, p in _impl_used(records).items()),
        preemptions=history.count_ends("preempted"),
        c_attn=_mean([c["c"] for c in cores if c.get("core") == "attn"]),
        c_ffn=_mean([c["c"] for c in cores if c.get("core") == "ffn"]),
        diag_step=diags[-1]["step"] if diags else None, diag_every=(config or {}).get("diag_every"),
        updated=records[-1].get("time") if records else None,
        goodput=None if (g := spent.goodput.fraction) is None else round(g, 4),
        diverged=None if (d := diverged(records, config)) is None else d.words(),
        lr=(config or {}).get("lr"), role=role or look.plan.get("role", ""), failures=history.requeue_counts()[2],
        stopped_nonfinite=any(r.get("why") == "diverged" for r in kinds.get("end", [])),
    )


def _planned_numbers(config: dict) -> dict:
    """Parameters, steps and tokens of a run that has not started (imports torch, through the model)."""
    from zbpscale.errors import ConfigError
    from zbpscale.run.config import TrainConfig, n_params

    try:
        cfg = TrainConfig.from_dict(config)
    except ConfigError:  # one the trainer refuses (a hand edit; a seed of 2**32, refused since): no numbers
        return {}
    return {"params": n_params(cfg.model), "params_non_embedding": n_params(cfg.model, embeddings=False),
            "total_steps": cfg.steps, "total_tokens": cfg.steps * cfg.global_batch * cfg.seq_len}


def arm_order(arm: str) -> tuple:
    """bp first, then the ZBP arms by probe count: bp, zbp_n4, zbp_n16, zbp_n16_fwd, zbp_n64."""
    m = re.match(r"zbp_n(\d+)", arm)
    return (0, 0, arm) if arm == "bp" else (1, int(m[1]) if m else 0, arm)


def same_run(rows) -> str | None:
    """Words for the runs of the study (not an lr grid's) that are one size, arm and seed twice (a run trained by
    hand into the sweep's folder beside the sweep's own): the gap, the table and claims each took one of them or
    both, silently; None when there are none."""
    by: dict[tuple, list[str]] = {}
    for r in rows:
        if r.role != "tuning":
            by.setdefault((r.size, r.arm, r.seed), []).append(r.run)
    twins = [(key, names) for key, names in by.items() if len(names) > 1]
    if not twins:
        return None
    (size, arm, seed), names = twins[0]
    more = f" (and {len(twins) - 1} more such)" if len(twins) > 1 else ""
    return f"runs {', '.join(names)} are each size {size}, arm {arm}, seed {seed}: the study compares one{more}"


def ladder_count(row: RunSummary) -> float:
    """What the ladder orders its sizes by: the non-embedding count N (the scaling axis; a deep narrow rung of your
    own may have the larger N and the smaller total), the total where a bundle of an older release has no N, inf
    for a run without either (not started, its config unknown)."""
    n = row.params_non_embedding if row.params_non_embedding is not None else row.params
    return math.inf if n is None else n


def sort_key(row: RunSummary) -> tuple:
    """Summary rows in the ladder's order: by N (`ladder_count`), then arm (bp first), an lr grid (by lr) before
    the final runs, then seed."""
    return (ladder_count(row), row.size, arm_order(row.arm), row.role != "tuning",
            row.lr or 0.0 if row.role == "tuning" else 0.0, row.seed)
