"""`zbpscale status [SWEEP or folder]`: every run of a sweep at a glance, from any shell, on any day.

    zbpscale status                         # every sweep under ./jobs
    zbpscale status sweeps/ladder.py        # one sweep (its file or its folder, jobs/ladder)
    zbpscale status jobs/ladder --watch     # refresh in place (a timestamped plain table per refresh when piped)
    zbpscale status jobs/ladder --json      # the same rows for scripts
    zbpscale status jobs/ladder --logs s60-zbp_n16   # the tail of that run's log
    zbpscale status jobs/ladder --goodput   # where each run's held hours went (jobs/goodput_table.py)

A run's state is its folder joined with the executors' view of its latest job (decided in state.decide,
which submit acts on too): COMPLETE marker, the attempts record and the tail of metrics.jsonl, with SLURM's
squeue and sacct reconciled (executors/slurm.py) or the local queue's entry files; an attempt that died
without writing its end record is shown with the end the scheduler's account gives it (state.unheard_end), which
only submit records: status reads, never writes.
States: complete, running, stalled (the job runs but the heartbeat is older than its step_timeout_s or
--stall-after), queued,
unknown (the scheduler does not answer), failed (with a one-line reason and the log to read), broken (the run
folder's config.json is one the trainer would refuse), cancelled, stopped (interrupted, nothing queued), new.
A source that does not answer is said once under the table, and so is a run folder that the sweep file (given as
the target) no longer plans while its job is queued or running, with the command that cancels it (sweep_edits).
A run whose val loss went above the loss it started from is said there too (diverged: run/divergence.py's
`diverged`), from the one read of its metrics.jsonl that its row's numbers come from (run/glance.py).
Only the tails of the logs are read.
One status asks each back end once, whatever the number of runs and sweeps (SLURM: one squeue, and one sacct
for the jobs squeue no longer lists whose end their folder has not recorded); --watch rereads the folders at
every refresh and asks the scheduler at most once per the sweep's poll_s (jobs/poller.py): its file's, or, given
its folder, the one its last submit kept there (jobs/settings.py). A run's GPU-hours used are its held time, the
one account goodput and collect give too (run/goodput.py's run_time). The runs of a large sweep are read in forked
processes, two per core (bulk.spread_asking: from 1,000 runs a process), each reading its runs' attempts for the one
view of the jobs, then, told it, making their rows; a run folder is read through its digest where it holds (its
sweep's looks, read once for all its runs: run/snapshot.py, run/looks.py), as --goodput reads it. The folders of a
sweep's folder are listed without a test each: each process tests its own by the stamps its look takes, in threads
where the disk is slow to answer (the kernel's caches cold).
Exit status: 0 all complete, 1 any failed or broken, 3 some still to finish; --goodput and --logs judge no state
(0 once shown).
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import json
import shlex
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from zbpscale.argtypes import at_least
from zbpscale.bulk import paused_gc, spread_asking
from zbpscale.errors import ConfigError
from zbpscale.jobs import executors, goodput_table
from zbpscale.jobs.executors.base import JobView, View
from zbpscale.jobs.poller import Polled, Poller, poll_s_of, polled
from zbpscale.jobs.reasons import log_tail
from zbpscale.jobs.runs import Run, find_runs, judgement
from zbpscale.jobs.state import STATES, RunState
from zbpscale.jobs.sweep import lr_text
from zbpscale.jobs.sweep_edits import unplanned_note
from zbpscale.run.divergence import Divergence
from zbpscale.run.folder import RunFolder
from zbpscale.run.history import History
from zbpscale.run.snapshot import Snapshot, stamped, through_digests
from zbpscale.tables import (
    ALIKE,
    age,
    boxed,
    color_on,
    fit_columns,
    fmt_tokens,
    named,
    on_terminal,
    painted,
    plain_lines,
    plural,
    seed_count,
    terminal_width,
    widths,
    wrap,
)
from zbpscale.text import runs_hint


# ---------------------------------------------------------------------------------------------- one run
def run_row(run: Run, look: Snapshot, history: History, job: JobView, verdict: RunState, *, now: float) -> dict:
    """Everything status shows about one run (plain JSON types), from its folder and its decision (its history,
    the scheduler's view of its latest job, its state: runs.judgement); a planned run without a folder yet shows
    its sweep file's numbers."""
    shown, planned = look.shown, run.planned  # what its files say (through its digest where it holds)
    steps, step = shown["steps"], max(shown["step"], 0)
    # T/P/F: as its files count them, unless the scheduler's account adds an end they lack (state.heard)
    timeouts, preemptions, failures = shown["requeues"] if history is look.history else history.requeue_counts()
    state, reason, log = verdict.state, verdict.reason, verdict.log
    step_time = shown["step_time"]
    eta = (steps - shown["step"]) * step_time if state == "running" and step_time and steps else None
    lr = shown.get("lr", planned.lr if planned else None)
    row = {
        "run": run.name, "size": run.size, "arm": run.arm, "seed": run.seed, "state": state, "step": step,
        "steps": steps, "tokens": step * shown["tokens_per_step"], "pct": 100.0 * step / steps if steps else 0.0,
        "train_loss": shown["train_loss"], "val_loss": shown["val_loss"], "tokens_per_s": shown["tokens_per_s"],
        "eta_s": eta, "timeouts": timeouts, "preemptions": preemptions, "failures": failures,
        "job": history.job_id, "executor": history.executor,
        "heartbeat_age_s": None if shown["beat_time"] is None else now - shown["beat_time"],
        "gpu_hours": shown["gpu_hours"] or 0.0,  # a run that does not say its GPUs (trained by hand on 'auto'): 0
        "gpu_hours_planned": shown["gpu_hours_planned"], "reason": reason, "log": str(log or ""),
        "next": verdict.next, "params": shown["params"], "params_non_embedding": shown["params_non_embedding"],
        "nodes": history.nodes, "impl_used": shown["impl_used"], "fallbacks": shown["fallbacks"],
        "trackers_off": shown["trackers_off"], "dir": str(run.run_dir),
        "unplanned": run.unplanned, "job_live": job.live, "diverged": shown["diverged"], "lr": lr,
        "role": shown.get("plan_role", planned.role if planned else ""),  # a tuning sweep's: tuning | final
        "lr_from": planned.lr_from if planned and planned.lr_from and planned.lr == shown.get("lr", planned.lr)
        else shown.get("plan_lr_from", ""),  # else the words of the lr it was submitted with
        "lr_planned": planned.lr if planned else None,  # a final run's: its tuning's choice now
        "metrics_unread": look.unread_metrics,  # bytes of a metrics.jsonl that holds no record (0: none such)
    }
    if planned is not None and not shown["config"] and not look.broken:  # planned, not written yet
        hours = run.planned.estimated_hours()
        row.update(steps=run.planned.steps, params=run.planned.size.params,
                   params_non_embedding=run.planned.size.params_non_embedding,
                   gpu_hours_planned=None if hours != hours else hours * run.planned.size.resources.gpus)
    return row


def row_of(run: Run, look: Snapshot, view: View, *, now: float, stall_after_s: float | None = None) -> dict:
    """The run's row (`run_row` of it decided), or, where a file of its folder holds values of a kind no release
    writes (a hand edit: a time that is words, a loss that is not a number), a `broken` row that says which error
    its files gave: one run's folder does not stop the status of the others."""
    try:
        return run_row(run, look, *judgement(run, look, view, now=now, stall_after_s=stall_after_s), now=now)
    except (TypeError, ValueError, KeyError, AttributeError) as err:
        why = f"its files hold what zbpscale does not write ({type(err).__name__}: {err}): look at its " \
              "metrics.jsonl, attempts.jsonl and heartbeat.json"
        return run_row(run, Snapshot(run.run_dir / ".none"), History(), JobView(),  # nothing read
                       RunState("broken", why, next="leave"), now=now)


# -------------------------------------------------------------------------------------------- the sweep
def jobs_root(found: list[tuple[str, list[Run]]]) -> Path:
    """The jobs root the found runs' sweeps lie in (where the executors keep their state)."""
    return next((r.run_dir.parent.parent for _, runs in found for r in runs), Path("jobs"))


def collect_rows(folder: Path, *, only: str | None = None, stall_after_s: float | None = None) -> list[dict]:
    """Every run's row of one sweep folder (or sweep file)."""
    ((_, rows),) = collect_sweeps(find_runs(str(folder), only, checked=False), stall_after_s=stall_after_s)
    return rows


def collect_sweeps(found: list[tuple[str, list[Run]]], *, stall_after_s: float | None = None,
                   poller: Poller | None = None) -> list[tuple[str, list[dict]]]:
    """[(sweep name, its rows)] of the runs found (runs.find_runs, `checked` or not: an entry of a sweep's folder
    that is no run's has no row), from one view of every run's latest job whatever the number of runs and sweeps
    (SLURM: one squeue, at most one sacct); through `poller` (status --watch: it asks when due), else each back end
    asked now."""
    now, root = time.time(), jobs_root(found)
    runs = [r for _, runs in found for r in runs]

    sweeps: dict = {}  # each sweep's looks, read before the processes fork: each looks at its own runs

    def look_of(r: Run) -> Snapshot:
        look = seen.get(r.run_dir)
        if look is None:
            look = seen[r.run_dir] = through_digests([r.run_dir], sweeps)[r.run_dir]
        return look

    def looked(part: list[Run]) -> list[Snapshot | None]:  # each run's look, stamped (in threads where the disk
        looks = [look_of(r) for r in part]  # is cold); None for a folder found unchecked that it says is no run's
        stamped(looks)
        return [look if not r.unchecked or look.is_run else None for r, look in zip(part, looks)]

    def asks_of(part: list[Run]) -> list:  # each run's question of its job (None: no run's folder, or no job)
        return [executors.asked(look.history) if look else None for look in looked(part)]

    def polled_of(part: list[Run]) -> list[Polled | None]:  # what the poller reads of each run's look
        return [polled(look) if look else None for look in looked(part)]

    def rows_of(part: list[Run], view: View) -> list[dict | None]:
        return [row_of(r, look, view, now=now, stall_after_s=stall_after_s) if look else None
                for r, look in zip(part, looked(part))]

    with paused_gc():  # status makes many objects and no cycles: the collector's passes were a fifth of its time
        seen = through_digests((group[0].run_dir for _, group in found if group), sweeps)  # the looks read
        if poller:  # each process reads its runs' looks for the poller, which asks when it is due
            rows, view = spread_asking(polled_of, lambda said: poller.look_at(
                {r.run_dir: p for r, p in zip(runs, said) if p is not None}), rows_of, runs)
        else:  # each process reads the attempts files of its runs for the one view of their jobs
            rows, view = spread_asking(asks_of, lambda asks: executors.view_of(root, asks, now=now), rows_of, runs)
    data, at = [], 0
    for name, runs in found:  # the rows in the runs' order: each sweep's in turn
        mine, at = [row for row in rows[at:at + len(runs)] if row is not None], at + len(runs)
        for row in mine:
            row["scheduler_notes"] = view.notes if row["executor"] else []
        data.append((name, sorted(mine, key=order)))
    return data


def order(row: dict) -> tuple:
    """The ladder's order: by the non-embedding count N (the total for a run that does not say N), then size and
    arm, a tuning sweep's grid (by lr) before its final runs, then seed."""
    return (row["params_non_embedding"] or row["params"] or 0, row["size"], row["arm"], row["role"] != "tuning",
            row["lr"] or 0.0, row["seed"], row["run"])


def exit_code(rows: list[dict]) -> int:
    """0 all complete, 1 any failed or broken, 3 some still to finish; of the runs a sweep file (the target) plans,
    and those it no longer plans whose job is queued or running (a run removed from the file and stopped is left
    out, as submit --wait and collect leave it out)."""
    states = {r["state"] for r in rows if not r["unplanned"] or r["job_live"]}
    if states & {"failed", "broken"}:
        return 1
    return 0 if states <= {"complete"} else 3


# ------------------------------------------------------------------------------------------------ render
STYLE = {"complete": "green", "running": "cyan", "queued": "blue", "stalled": "bold yellow", "failed": "bold red",
         "cancelled": "magenta", "stopped": "yellow", "new": "dim", "broken": "bold red", "unknown": "yellow"}


@dataclass(frozen=True)
class Column:
    """A column of status's table: its header, its cell from a run's row, and its place in the order columns are
    given up on a narrow terminal (`keep`: lower is kept longer; a column empty in every row goes first). A new
    column is one entry in COLUMNS."""

    header: str
    cell: Callable[[dict], str]
    keep: int
    left: bool = False
    """Left-aligned (words); numbers are right-aligned."""
    shown: Callable[[list[dict]], bool] = lambda rows: True
    """Whether the table has the column at all, given its rows."""


def _loss(v: float | None) -> str:
    return "" if v is None else f"{v:.3f}"


def _beat(r: dict) -> str:
    return age(r["heartbeat_age_s"]) if r["state"] in ("running", "stalled") and r["heartbeat_age_s"] is not None \
        else ""


def _tunes(rows: list[dict]) -> bool:
    """Whether the rows are a sweep's that tunes its lr (a grid's runs and final runs): the table has an lr column."""
    return any(r["role"] for r in rows)


def _named_apart(rows: list[dict]) -> bool:
    """Whether a run's folder name says what its size and arm do not: a run trained by hand into a folder of its
    own name ('kc'), or two runs the other columns cannot tell apart ('tiny-bp' and 'tiny-bp.old')."""
    shown = _tunes(rows)  # the lr column, where the sweep tunes its lr: else the lrs tell no row apart
    keys = [(r["size"], r["arm"], r["seed"]) + ((r["lr"], r["role"]) if shown else ()) for r in rows]
    return len(set(keys)) < len(keys) or any(not r["run"].startswith(f"{r['size']}-{r['arm']}") for r in rows)


COLUMNS = (
    Column("run", lambda r: r["run"], keep=0, left=True, shown=_named_apart),
    Column("size", lambda r: r["size"], keep=0, left=True),
    Column("arm", lambda r: r["arm"], keep=1, left=True),
    Column("lr", lambda r: "" if r["lr"] is None else lr_text(r["lr"]) + (" grid" if r["role"] == "tuning" else ""),
           keep=2, left=True, shown=_tunes),
    Column("seed", lambda r: str(r["seed"]), keep=2, shown=lambda rows: len({r["seed"] for r in rows}) > 1),
    Column("state", lambda r: r["state"], keep=3, left=True),
    Column("progress", lambda r: f"{r['step']}/{r['steps']} {r['pct']:.0f}%", keep=4),
    Column("tokens", lambda r: fmt_tokens(r["tokens"]), keep=9),
    Column("train", lambda r: _loss(r["train_loss"]), keep=7),
    Column("val", lambda r: _loss(r["val_loss"]), keep=5),
    Column("tok/s", lambda r: "" if r["tokens_per_s"] is None else f"{r['tokens_per_s']:,.0f}", keep=11),
    Column("ETA", lambda r: "" if r["eta_s"] is None else age(r["eta_s"]), keep=6),
    Column("T/P/F", lambda r: f"{r['timeouts']}/{r['preemptions']}/{r['failures']}", keep=8),
    Column("job", lambda r: r["job"], keep=10, left=True),
    Column("beat", _beat, keep=12),
)
"""The table's columns, in the order shown; the run's folder name only where the size and arm do not name it
(`_named_apart`), the lr column only for a sweep that tunes its lr (a grid's runs say `grid`), the seed column only
for a sweep of several seeds."""


def shown_columns(rows: list[dict]) -> tuple[Column, ...]:
    return tuple(c for c in COLUMNS if c.shown(rows))


def title(name: str, rows: list[dict]) -> str:
    """'sweep ladder: 36 runs, 3 seeds'."""
    return f"sweep {name}: {plural(len(rows), 'run')}" + (f", {seed_count(r['seed'] for r in rows)}" if rows else "")


def cells(rows: list[dict], columns: tuple[Column, ...]) -> list[dict[str, str]]:
    """Each run's row as the table shows it: {header: text}."""
    return [{c.header: c.cell(r) for c in columns} for r in rows]


def fitted(rows: list[dict], width: int, *, boxed: bool
           ) -> tuple[list[dict[str, str]], list[str], set[str], dict[str, int]]:
    """(each row's cells, the headers of the columns that fit `width`, the left-aligned headers, each column's
    width: measured once for the fit and the lines)."""
    available = shown_columns(rows)
    shown = cells(rows, available)
    wide = widths([c.header for c in available], shown)
    columns = fit_columns(tuple(c.header for c in available),
                          tuple(c.header for c in sorted(available, key=lambda c: c.keep)), shown, width, boxed=boxed,
                          wide=wide)
    return shown, columns, {c.header for c in available if c.left}, wide


def plain_table(name: str, rows: list[dict], width: int | None = None, *, box: bool = False, color: bool = False
                ) -> list[str]:
    """The table's lines, its title first: plain (for files, pipes and logs) or boxed for a terminal (`box`, each
    state in its color where `color`); the columns that fit `width` (default: tables.terminal_width)."""
    width = width or terminal_width()
    shown, columns, left, wide = fitted(rows, width, boxed=box)
    if not box:
        return [title(name, rows), *plain_lines(columns, shown, left, wide=wide)]
    state = lambda i, c: STYLE[rows[i]["state"]]  # noqa: E731 - each state in its color
    return [wrap(title(name, rows), width=width), *boxed(columns, shown, left, style=state, styled=("state",),
                                                         color=color, width=width, wide=wide)]


LEGEND = "T/P/F: each run's time limits / preemptions / failures so far (its requeues and restarts)"
"""The line under a table that shows the T/P/F column (and in `status --help`)."""


def unsubmitted(rows: list[dict]) -> bool:
    """A sweep none of whose runs was submitted or trained yet: every row new, without a job or a folder."""
    return bool(rows) and all(r["state"] == "new" and not r["job"] and not Path(r["dir"]).exists() for r in rows)


def footer(rows: list[dict]) -> str:
    """The count per state, and GPU-hours used / planned where any run asks for GPUs ('+?': a run without a
    plan, e.g. one trained by hand)."""
    counts = collections.Counter(r["state"] for r in rows)
    states = "  ".join(f"{s} {counts[s]}" for s in STATES if counts[s])
    used = sum(r["gpu_hours"] for r in rows)
    planned = [r["gpu_hours_planned"] for r in rows]
    if not used and not any(planned):  # CPU runs, or none planned: no GPU-hours to speak of
        return states
    plan = f"{sum(p for p in planned if p):,.1f}" + ("" if all(p is not None for p in planned) else "+?")
    return states + f"   GPU-hours used {used:,.1f} / planned {plan}"


NEXT = {("failed", "resume"): "; submit again to resume", ("failed", "retry"): "; fix the cause, then submit --retry",
        ("stopped", "resume"): "; submit again to resume"}


def notes(rows: list[dict]) -> list[tuple[str, str]]:
    """(line, state) under the table for each run that needs a word: failed, broken, stalled, stopped, diverged (a
    val loss above its start: run/divergence.py's `diverged`), a ZBP estimator that fell back to a slower path, a
    tracker turned off, a job that trains on for a run the sweep file no longer plans, a tuned lr at its grid's edge,
    a metrics.jsonl that holds no record.
    A state's note that more than ALIKE runs share word for word but their logs (8,000 runs stopped by one
    preemption, a thousand failed alike) is one line, where the first of them stands, naming ALIKE of them and the
    first one's log."""
    found: list = [(note, "unknown") for note in dict.fromkeys(n for r in rows for n in r.get("scheduler_notes", []))]
    shared: dict[tuple[str, str, str], _Shared] = {}  # a state's note, by its words, and the runs it is said of
    edges: set[tuple[str, str]] = set()
    for r in rows:
        if r.get("unplanned") and r.get("job_live"):  # its size, arm or seed removed from the sweep file
            found.append((unplanned_note(r["run"], r["job"], r["state"], Path(r["dir"]).parent), "stalled"))
        if r.get("role") == "final" and r.get("lr_planned") is not None and r["lr"] is not None and \
                r["lr"] != r["lr_planned"] and r["step"] > 0:  # it trained, and its grid's answer moved since
            found.append((f"{r['run']}: trained at lr {lr_text(r['lr'])} ({r['lr_from'] or 'as submitted'}); its "
                          f"tuning's choice is now {lr_text(r['lr_planned'])}: its numbers are at the old lr (a new "
                          "seed trains at the new one)", "stopped"))
        if "edge of the grid" in r.get("lr_from", "") and (r["size"], r["arm"]) not in edges:  # never silent
            edges.add((r["size"], r["arm"]))  # said once for the seeds of a size and arm
            found.append((f"{r['size']}-{r['arm']}: lr {lr_text(r['lr'])}, {r['lr_from']}: the optimum may lie "
                          "beyond it (Tune.extend, Tune.grid)", "stopped"))
        elif "at a grid's edge" in r.get("lr_from", "") and (r["size"], r["arm"]) not in edges:  # a law through one
            edges.add((r["size"], r["arm"]))
            found.append((f"{r['size']}-{r['arm']}: lr {lr_text(r['lr'])}, {r['lr_from']}: a best beyond that "
                          "grid would move the law (Tune.extend, Tune.grid)", "stopped"))
        if r["state"] == "unknown" and r.get("scheduler_notes"):  # the outage, said once above
            continue
        if r["state"] in ("failed", "broken", "stalled", "stopped", "unknown", "queued", "new", "complete") \
                and r["reason"]:  # complete with a reason: a grid run whose lr diverged (state.answered_too_high)
            where = f" on {r['nodes']}" if r.get("nodes") and r["state"] == "failed" else ""
            then = NEXT.get((r["state"], r["next"]), "")
            if then and not r["executor"]:  # trained by hand, without a sweep to submit
                then = f"; continue it with python -m zbpscale.train --run-dir {r['dir']}"
            said = (r["state"], f"{r['reason']}{where}", then)
            if said not in shared:
                shared[said] = _Shared(*said)
                found.append(shared[said])
            shared[said].runs[r["run"]] = r["log"]
        if r.get("diverged"):  # before anyone reads its numbers or a figure whose axis it stretches
            found.append((f"{r['run']}: diverged: {Divergence(**r['diverged']).words()}", "stalled"))
        if r.get("metrics_unread"):  # its steps, losses and tokens read as none: say why they are blank
            found.append((f"{r['run']}: its metrics.jsonl holds {r['metrics_unread']:,} bytes but no record zbpscale "
                          f"reads (garbled, or another file in its place): its progress and losses are not shown; "
                          f"look at {RunFolder(r['dir']).metrics}", "stalled"))
        if r.get("fallbacks"):  # a fast estimator failed: explains a slow run
            cores = ", ".join(f"{core} {path}" for core, path in r["impl_used"].items())
            found.append((f"{r['run']}: ZBP estimator fell back ({cores}): {'; '.join(r['fallbacks'])}", "stopped"))
        if r.get("trackers_off"):  # training went on; the tracker misses the rest of that attempt
            found.append((f"{r['run']}: trackers off in its latest attempt (metrics.jsonl is complete): "
                          f"{'; '.join(r['trackers_off'])}", "stopped"))
    return [said for n in found for said in ([(line, n.state) for line in n.lines()] if isinstance(n, _Shared)
                                             else [n])]


@dataclass
class _Shared:
    """A state's note and the runs it is said of ({run: its log}): a line each, or, for more than ALIKE runs, one
    line naming ALIKE of them and the log of the first that has one."""

    state: str
    words: str
    then: str
    runs: dict[str, str] = dataclasses.field(default_factory=dict)

    def lines(self) -> list[str]:
        if len(self.runs) <= ALIKE:
            return [f"{run}: {self.state}: {self.words}{f'  (log: {log})' if log else ''}{self.then}"
                    for run, log in self.runs.items()]
        first, log = next(((run, log) for run, log in self.runs.items() if log), ("", ""))
        return [f"{named(list(self.runs))}: {self.state}: {self.words}{f'  (log of {first}: {log})' if log else ''}"
                f"{self.then}"]


def text(sweeps: list[tuple[str, list[dict]]], width: int | None = None, *, box: bool = False, color: bool = False
         ) -> str:
    """Each sweep's table (`plain_table`), its footer, the legend of its columns and its notes (each in its state's
    color where `color`), at most `width` (tables.terminal_width) wide."""
    lines, width = [], width or terminal_width()
    for name, rows in sweeps:
        title_line, *table = plain_table(name, rows, width, box=box, color=color)
        lines += [title_line, *table, wrap(footer(rows), width=width)]
        lines += [wrap(LEGEND, width=width)] if "T/P/F" in table[1 if box else 0] else []  # in its header
        lines += [painted(wrap(line, width=width), STYLE[state]) if color else wrap(line, width=width)
                  for line, state in notes(rows)]
    return "\n".join(lines)


def plain(sweeps: list[tuple[str, list[dict]]]) -> str:
    """For files, pipes and logs."""
    return text(sweeps)


def render(sweeps: list[tuple[str, list[dict]]], width: int):
    """For a terminal: boxed tables, states and notes in color, as a rich Text (status --watch's Live)."""
    from rich.text import Text

    return Text.from_ansi(text(sweeps, width, box=True, color=True))


def show(data: list[tuple[str, list[dict]]]) -> None:
    """The tables: boxed on a terminal (in color where it takes colors), plain lines when stdout is not one; as wide
    as tables.terminal_width."""
    if data:
        print(text(data, box=on_terminal(), color=on_terminal() and color_on()), flush=True)


def watch(gather, data: list[tuple[str, list[dict]]], every_s: float) -> list[tuple[str, list[dict]]]:
    """Refresh until Ctrl-C: in place on a terminal; elsewhere a timestamped block, flushed, each time the
    table changes (a running run's heartbeat age changes it at every refresh) and at least every 10 refreshes,
    so a log file follows the sweep."""
    if not on_terminal():
        shown, quiet = "", 0
        try:
            while True:
                text = plain(data)
                if text != shown or quiet >= 10:
                    print(f"[{time.strftime('%Y-%m-%d %H:%M:%S')}]\n{text}\n", flush=True)
                    shown, quiet = text, 0
                else:
                    quiet += 1
                time.sleep(every_s)
                data = gather()
        except KeyboardInterrupt:
            return data
    from rich.console import Console
    from rich.live import Live

    width = terminal_width()
    console = Console(width=width)
    with Live(render(data, width), console=console, auto_refresh=False) as live:
        try:
            while True:
                time.sleep(every_s)
                data = gather()
                live.update(render(data, terminal_width()), refresh=True)
        except KeyboardInterrupt:
            pass
    return data


WATCH_S = 10.0
"""--watch's refresh without a value."""


def _seconds_or_target(text: str) -> float | str:
    """--watch's value: seconds, or, where it is no number but a path (`status --watch jobs/x`, which argparse hands
    to --watch), the target, for `targeted` to take as such; else (`--watch 10s`) the error of seconds."""
    try:
        float(text)
    except ValueError:
        if "/" in text or Path(text).exists():
            return text
    return at_least(0.1, float, most=86400)(text)


def add_arguments(p) -> None:
    p.add_argument("target", nargs="?", help="a sweep file, a sweep folder (jobs/<sweep>), a jobs root "
                                             "(default: ./jobs) or one run's folder (jobs/<sweep>/<run>)")
    p.add_argument("--only", metavar="PATTERNS", help="comma-separated run-name patterns, e.g. 's60-*,*-bp'")
    p.add_argument("--watch", nargs="?", const=WATCH_S, type=_seconds_or_target, metavar="SECONDS",
                   help="refresh every 10 s (or as given) until Ctrl-C, asking the scheduler at most once per the "
                        "sweep's poll_s (60 s by default; a sweep folder: as its last submit kept it); plain lines "
                        "when not on a terminal")
    p.add_argument("--json", action="store_true", help="print the rows as JSON instead of a table")
    p.add_argument("--logs", metavar="RUN", help="print the tail of that run's latest log")
    p.add_argument("--lines", type=at_least(1), default=40, help="lines of --logs (default 40)")
    p.add_argument("--goodput", action="store_true",
                   help="instead of the states: each run's held hours, goodput (training / held) and the split into "
                        "start-up, checkpoint saves, lost work and other, the queue wait beside, and a sweep total "
                        "(from the run folders alone)")
    p.epilog = f"{p.epilog}\n\n{LEGEND}." if p.epilog else f"{LEGEND}."
    p.add_argument("--stall-after", type=at_least(1, float), default=None, metavar="SECONDS",
                   help="a running job silent this long is stalled (default: the run's step_timeout_s, or 900 "
                        "when it has none)")


def run(args) -> int:
    """`zbpscale status`. Once (not --watch) it runs with the cycle collector held off from its first read to its
    last line (bulk.paused_gc): the collector's passes over a large sweep's rows while they were sorted, rendered
    and printed were a sixth of the command (10,000 runs: 2.34 -> 2.0 s, tools/bench_status.py, 2026-12-05)."""
    with contextlib.nullcontext() if args.watch else paused_gc():
        return _run(args)


def targeted(args) -> None:
    """The target and --only as the command line means them: `--watch TARGET` (argparse hands the target to
    --watch) is the target watched every WATCH_S; one run's folder is that run of its sweep."""
    if isinstance(args.watch, str):
        if args.target is not None:
            raise ConfigError(f"--watch {args.watch!r}: expected seconds", hint=f"e.g. --watch 60 {args.target}")
        args.target, args.watch = args.watch, WATCH_S
    if args.target and RunFolder(Path(args.target)).config.exists():
        if args.only:  # it was left out without a word
            raise ConfigError(f"--only {args.only} and the run folder {args.target} both choose the runs",
                              hint="give one of them")
        args.target, args.only = str(Path(args.target).parent), Path(args.target).name


def _run(args) -> int:
    targeted(args)
    for mode in ("json", "logs", "goodput"):
        if args.watch and getattr(args, mode):
            raise ConfigError(f"--{mode} does not --watch", hint="run it again when you want a newer one")
    if args.json and args.logs:
        raise ConfigError("--logs prints a log, not JSON", hint="leave out --json")
    found = find_runs(args.target, args.only, checked=bool(args.logs or args.goodput))  # rows test their own
    if args.logs:
        return print_logs(found, args.logs, args.lines)
    if args.goodput:
        accounted = [(name, goodput_table.rows(runs)) for name, runs in found]
        if args.json:
            print(json.dumps(dict(accounted), indent=1))
        else:
            goodput_table.show(accounted)
        return 0
    poller = Poller(jobs_root(found), poll_s=poll_s_of(args.target)) if args.watch else None
    gather = lambda: collect_sweeps(find_runs(args.target, args.only, checked=False),  # noqa: E731
                                    stall_after_s=args.stall_after, poller=poller)
    data = collect_sweeps(found, stall_after_s=args.stall_after, poller=poller)
    if args.json:
        print(json.dumps({n: rows for n, rows in data}, indent=1))
        return exit_code([r for _, rows in data for r in rows])
    if args.watch:
        data = watch(gather, data, args.watch)
    else:
        waiting = {name for name, rows in data if unsubmitted(rows)}  # one line each, not a table of `new 0/96 0%`
        for name, rows in data:
            if name in waiting:
                sweep_file = args.target if args.target and args.target.endswith(".py") else "<its sweep file>"
                print(wrap(f"sweep {name}: nothing submitted yet ({plural(len(rows), 'run')} planned); start it "
                           f"with python -m zbpscale.submit {sweep_file}"), flush=True)
        show([(name, rows) for name, rows in data if name not in waiting])
    return exit_code([r for _, rows in data for r in rows])


def print_logs(found: list[tuple[str, list[Run]]], name: str, lines: int) -> int:
    matches = [r for _, runs in found for r in runs if r.name == name and r.folder.config.exists()]
    if len(matches) > 1:  # runs of the same name in several sweeps (every sweep under ./jobs): which one is meant
        sweeps = [r.run_dir.parent for r in matches]
        raise ConfigError(f"{name!r} is a run of {len(matches)} sweeps ({named([s.name for s in sweeps])})",
                          hint="name its sweep: " + "; ".join(f"zbpscale status {shlex.quote(str(s))} --logs {name}"
                                                               for s in sweeps[:3]))
    for run in matches:
        history = History.read(run.run_dir)
        end = history.last_end()
        log = run.folder.here(end["log"]) if end.get("log") else run.folder.log_path(history.submitted, history.job_id)
        said = ""
        if not log.is_file():  # its latest job has not started, or was cancelled before it did: an earlier one's
            earlier = [run.folder.here(e["log"]) for e in reversed(history.ends_since(None, 0)) if e.get("log")]
            earlier += [run.folder.log_path(history.submitted, s["job_id"]) for s in reversed(history.starts())
                        if s.get("job_id") not in (None, history.job_id)]  # SLURM's ends name no log
            older = next((path for path in earlier if path.is_file()), None)
            if older is None:
                raise ConfigError(f"{name}: no log yet at {log}", hint="the run has not started")
            log, said = older, f" (an earlier job's: job {history.job_id} has no log)"
        print(f"==> {log} <=={said}")
        print("\n".join(log_tail(log, lines)))
        return 0
    names = sorted(r.name for _, runs in found for r in runs if r.folder.config.exists())
    raise ConfigError(f"no run {name!r} here", hint=runs_hint(names, name))
