"""`zbpscale status [SWEEP or folder]`: every run of a sweep at a glance, from any shell, on any day.

    zbpscale status                         # every sweep under ./jobs
    zbpscale status sweeps/ladder.py        # one sweep (its file or its folder, jobs/ladder)
    zbpscale status jobs/ladder --watch     # refresh in place (a timestamped plain table per refresh when piped)
    zbpscale status jobs/ladder --json      # the same rows for scripts
    zbpscale status jobs/ladder --logs s60-zbp_n16   # the tail of that run's log

A run's state is its folder joined with the executors' view of its latest job (decided in state.run_state,
which submit acts on too): COMPLETE marker, the attempts record and the tail of metrics.jsonl, with SLURM's
squeue and sacct reconciled (executors/slurm.py) or the local queue's entry files. An attempt that died
without writing its end record gets one here, from the scheduler's account (state.reconcile).
States: complete, running, stalled (the job runs but the heartbeat is older than its step_timeout_s or
--stall-after), queued,
unknown (the scheduler does not answer), failed (with a one-line reason and the log to read), broken (the run
folder's config.json is one the trainer would refuse), cancelled, stopped (interrupted, nothing queued), new.
A source that does not answer is said once under the table. Only the tails of the logs are read.
One status asks each back end once, whatever the number of runs and sweeps (SLURM: one squeue, and one sacct
for the jobs squeue no longer lists whose end their folder has not recorded); --watch rereads the folders at
every refresh and asks the scheduler at most once per the sweep's poll_s (jobs/poller.py).
Exit status: 0 all complete, 1 any failed or broken, 3 some still to finish.
"""

from __future__ import annotations

import json
import shutil
import sys
import time
from pathlib import Path

from zbpscale.errors import BrokenRunFolder, ConfigError
from zbpscale.files import read_json
from zbpscale.jobs import executors
from zbpscale.jobs.attempts import last_submitted, requeue_counts
from zbpscale.jobs.executors import JobView
from zbpscale.jobs.layout import RunFolder, parse_run_name
from zbpscale.jobs.poller import Poller, poll_s_of
from zbpscale.jobs.state import STATES, log_tail, reconcile, refined, run_state
from zbpscale.jobs.sweep import find_sweeps
from zbpscale.tables import age, fit_columns, fmt_tokens, plural, seed_count, terminal_width
from zbpscale.text import matches, patterns
from zbpscale.train.metrics import tail_records


# ---------------------------------------------------------------------------------------------- reading
def first_record(path: Path) -> dict:
    try:
        with open(path, "rb") as fh:
            return json.loads(fh.readline())
    except (OSError, json.JSONDecodeError, UnicodeDecodeError):
        return {}


# ---------------------------------------------------------------------------------------------- one run
def run_row(run_dir: Path, seen: JobView, attempts: list[dict], *, now: float, stall_after_s: float | None) -> dict:
    """Everything status shows about one run (plain JSON types), from its folder and the scheduler's view of
    its latest job (`seen`). An attempt that died without a record gets one first (state.reconcile)."""
    sub = last_submitted(attempts)
    job = sub.get("job_id", "")
    attempts = reconcile(run_dir, attempts, seen)
    decided = refined(run_state(run_dir, attempts, seen, now=now, stall_after_s=stall_after_s))
    try:
        config = RunFolder(run_dir).read_config() or {}
    except BrokenRunFolder:
        config = {}
    start = first_record(RunFolder(run_dir).metrics)
    tail = tail_records(RunFolder(run_dir).metrics, ("train", "eval"))
    beat = read_json(RunFolder(run_dir).heartbeat)
    plan = read_json(RunFolder(run_dir).plan)
    size, arm, seed = parse_run_name(run_dir.name) or (run_dir.name, "", 0)
    derived = start.get("derived", {})
    steps = config.get("steps") or derived.get("total_steps") or 0
    tokens_per_step = derived.get("tokens_per_step") or config.get("global_batch", 0) * config.get("seq_len", 0)
    # steps done: the heartbeat is rewritten every few seconds, the train record every log_every steps; after a
    # hard stop either may be the later one
    step = max(beat.get("step", 0), tail.get("train", {}).get("step", -1) + 1)
    timeouts, preemptions, failures = requeue_counts(attempts)
    starts = [a for a in attempts if a.get("event") == "start"]
    used_h = sum(_attempt_hours(a, attempts, now) for a in starts) * plan.get("gpus", 0)
    beat_age = now - beat["time"] if "time" in beat else None
    state, reason, log = decided.state, decided.reason, decided.log
    step_time = tail.get("train", {}).get("step_time")
    eta = (steps - step) * step_time if state == "running" and step_time and steps else None
    return {
        "run": run_dir.name, "size": size, "arm": arm, "seed": seed, "state": state, "step": max(step, 0),
        "steps": steps,
        "tokens": max(step, 0) * tokens_per_step, "pct": 100.0 * max(step, 0) / steps if steps else 0.0,
        "train_loss": tail.get("train", {}).get("loss"), "val_loss": tail.get("eval", {}).get("val_loss"),
        "tokens_per_s": tail.get("train", {}).get("tokens_per_s"), "eta_s": eta,
        "timeouts": timeouts, "preemptions": preemptions, "failures": failures,
        "job": job, "executor": sub.get("executor", ""), "heartbeat_age_s": beat_age,
        "gpu_hours": used_h, "gpu_hours_planned": plan.get("gpu_hours"), "reason": reason, "log": str(log or ""),
        "next": decided.next, "params": derived.get("params") or plan.get("params"),
        "nodes": starts[-1].get("nodes", "") if starts else "",
        "impl_used": beat.get("impl_used", start.get("impl_used", {})), "fallbacks": beat.get("fallbacks", []),
        "trackers_off": beat.get("trackers_off", []), "dir": str(run_dir),
    }


def _attempt_hours(start: dict, attempts: list[dict], now: float) -> float:
    later = [a for a in attempts if a.get("event") == "end" and a.get("job_id") == start.get("job_id")
             and a.get("time", 0) >= start["time"]]
    return ((later[0]["time"] if later else now) - start["time"]) / 3600


# -------------------------------------------------------------------------------------------- the sweep
def planned_runs(target: str | None) -> dict[str, dict]:
    """{run name: planned steps, params, GPU-hours} of a sweep file (nothing for a folder target): the runs
    without a folder yet are shown as new, with these numbers."""
    path = Path(target or "jobs")
    if not (path.is_file() and path.suffix == ".py"):
        return {}
    from zbpscale.jobs.sweep import expand, load_sweep

    planned = {}
    for run in expand(load_sweep(path)):
        hours = run.estimated_hours()
        planned[run.name] = {"steps": run.size.steps, "params": run.size.params,
                             "gpu_hours_planned": None if hours != hours else hours * run.size.resources.gpus}
    return planned


def run_dirs(folder: Path, *, only: str | None = None, planned: dict[str, dict] | None = None) -> list[Path]:
    """The run folders found under `folder`, and those of the `planned` runs without one yet, selected by `only`."""
    found = {p.name for p in folder.iterdir() if RunFolder(p).config.exists()} if folder.is_dir() else set()
    dirs = sorted(folder / name for name in found | set(planned or {}))
    return [p for p in dirs if matches(p.name, patterns(only))] if only else dirs


def collect_rows(folder: Path, *, only: str | None = None, stall_after_s: float | None = None,
                 planned: dict[str, dict] | None = None) -> list[dict]:
    """Every run's row: the run folders found under `folder`, and the `planned` runs without one yet (new)."""
    ((_, rows),) = collect_sweeps([(folder.name, folder)], only=only, stall_after_s=stall_after_s, planned=planned)
    return rows


def collect_sweeps(sweeps: list[tuple[str, Path]], *, only: str | None = None, stall_after_s: float | None = None,
                   planned: dict[str, dict] | None = None, look=None) -> list[tuple[str, list[dict]]]:
    """[(sweep name, its rows)], from one view of every run's latest job whatever the number of runs and sweeps
    (SLURM: one squeue, at most one sacct); `look`: a Poller's (status --watch), else each back end asked now."""
    from zbpscale.files import read_jsonl

    planned = planned or {}
    dirs = {folder: run_dirs(folder, only=only, planned=planned) for _, folder in sweeps}
    attempts = {p: read_jsonl(RunFolder(p).attempts) for found in dirs.values() for p in found}
    now = time.time()
    view = look(attempts) if look else executors.view_all(sweeps[0][1].parent, attempts, now=now)
    data = []
    for name, folder in sweeps:
        rows = [run_row(p, view.of(last_submitted(attempts[p]).get("job_id")), attempts[p], now=now,
                        stall_after_s=stall_after_s) for p in dirs[folder]]
        for row in rows:
            row["scheduler_notes"] = view.notes if row["executor"] else []
            if not RunFolder(row["dir"]).config.exists():  # planned, not written yet
                row.update(planned.get(row["run"], {}))
        data.append((name, sorted(rows, key=lambda r: (r["params"] or 0, r["run"]))))  # the ladder's order
    return data


def exit_code(rows: list[dict]) -> int:
    states = {r["state"] for r in rows}
    if states & {"failed", "broken"}:
        return 1
    return 0 if states <= {"complete"} else 3


# ------------------------------------------------------------------------------------------------ render
STYLE = {"complete": "green", "running": "cyan", "queued": "blue", "stalled": "bold yellow", "failed": "bold red",
         "cancelled": "magenta", "stopped": "yellow", "new": "dim", "broken": "bold red", "unknown": "yellow"}


COLUMNS = ("size", "arm", "seed", "state", "progress", "tokens", "train", "val", "tok/s", "ETA", "T/P/F", "job",
           "beat")
KEEP = ("size", "arm", "seed", "state", "progress", "val", "ETA", "train", "T/P/F", "tokens", "job", "tok/s", "beat")
"""The columns in the order they are given up when the terminal is narrow (the last first); the seed column
only for a sweep of several seeds (`shown_columns`)."""
LEFT = ("size", "arm", "state", "job")


def shown_columns(rows: list[dict], columns: tuple[str, ...]) -> tuple[str, ...]:
    """`columns`, without the seed column when the runs have one seed."""
    return tuple(c for c in columns if c != "seed" or len({r["seed"] for r in rows}) > 1)


def title(name: str, rows: list[dict]) -> str:
    """'sweep ladder: 36 runs, 3 seeds'."""
    return f"sweep {name}: {plural(len(rows), 'run')}" + (f", {seed_count(r['seed'] for r in rows)}" if rows else "")


def cells(r: dict) -> dict[str, str]:
    """One run's row as the table shows it."""
    loss = lambda v: "" if v is None else f"{v:.3f}"  # noqa: E731
    beat = r["heartbeat_age_s"] if r["state"] in ("running", "stalled") else None
    return {"size": r["size"], "arm": r["arm"], "seed": str(r["seed"]), "state": r["state"],
            "progress": f"{r['step']}/{r['steps']} {r['pct']:.0f}%", "tokens": fmt_tokens(r["tokens"]),
            "train": loss(r["train_loss"]), "val": loss(r["val_loss"]),
            "tok/s": "" if r["tokens_per_s"] is None else f"{r['tokens_per_s']:,.0f}",
            "ETA": "" if r["eta_s"] is None else age(r["eta_s"]),
            "T/P/F": f"{r['timeouts']}/{r['preemptions']}/{r['failures']}", "job": r["job"],
            "beat": "" if beat is None else age(beat)}


def table(name: str, rows: list[dict], width: int | None):
    from rich.table import Table

    shown = [cells(r) for r in rows]
    columns = fit_columns(shown_columns(rows, COLUMNS), shown_columns(rows, KEEP), shown, width)
    t = Table(title=title(name, rows), title_justify="left")
    for col in columns:
        t.add_column(col, justify="left" if col in LEFT else "right", no_wrap=True)
    for r, c in zip(rows, shown):
        t.add_row(*(f"[{STYLE[r['state']]}]{c[col]}[/]" if col == "state" else c[col] for col in columns))
    return t


def plain_table(name: str, rows: list[dict]) -> list[str]:
    """The same table as plain text lines, every column (for files, pipes and logs)."""
    shown, columns = [cells(r) for r in rows], shown_columns(rows, COLUMNS)
    width = {c: max([len(c)] + [len(r[c]) for r in shown]) for c in columns}
    line = lambda d: "  ".join(d[c].ljust(width[c]) if c in LEFT else d[c].rjust(width[c])  # noqa: E731
                               for c in columns).rstrip()
    return [title(name, rows), line({c: c for c in columns}), *(line(d) for d in shown)]


def footer(rows: list[dict]) -> str:
    """The count per state, and GPU-hours used / planned where any run asks for GPUs ('+?': a run without a
    plan, e.g. one trained by hand)."""
    counts = {s: sum(r["state"] == s for r in rows) for s in STATES}
    states = "  ".join(f"{s} {n}" for s, n in counts.items() if n)
    used = sum(r["gpu_hours"] for r in rows)
    planned = [r["gpu_hours_planned"] for r in rows]
    if not used and not any(planned):  # CPU runs, or none planned: no GPU-hours to speak of
        return states
    plan = f"{sum(p for p in planned if p):,.1f}" + ("" if all(p is not None for p in planned) else "+?")
    return states + f"   GPU-hours used {used:,.1f} / planned {plan}"


NEXT = {("failed", "resume"): "; submit again to resume it", ("failed", "retry"): "; fix it, then submit --retry",
        ("stopped", "resume"): "; submit again to resume it"}


def notes(rows: list[dict]) -> list[tuple[str, str]]:
    """(line, state) under the table for each run that needs a word: failed, broken, stalled, stopped, a ZBP
    estimator that fell back to a slower path, a tracker turned off."""
    found = [(note, "unknown") for note in dict.fromkeys(n for r in rows for n in r.get("scheduler_notes", []))]
    for r in rows:
        if r["state"] in ("failed", "broken", "stalled", "stopped", "unknown", "queued") and r["reason"]:
            where = (f" on {r['nodes']}" if r.get("nodes") and r["state"] == "failed" else "") + (
                f"  (log: {r['log']})" if r["log"] else "")
            then = NEXT.get((r["state"], r["next"]), "")
            if then and not r["executor"]:  # trained by hand, without a sweep to submit
                then = f"; continue it with python -m zbpscale.train --run-dir {r['dir']}"
            found.append((f"{r['run']}: {r['state']}: {r['reason']}{where}{then}", r["state"]))
        if r.get("fallbacks"):  # a fast estimator failed: explains a slow run
            cores = ", ".join(f"{core} {path}" for core, path in r["impl_used"].items())
            found.append((f"{r['run']}: ZBP estimator fell back ({cores}): {'; '.join(r['fallbacks'])}", "stopped"))
        if r.get("trackers_off"):  # training went on; the tracker misses the rest of that attempt
            found.append((f"{r['run']}: trackers off in its latest attempt (metrics.jsonl is complete): "
                          f"{'; '.join(r['trackers_off'])}", "stopped"))
    return found


def render(sweeps: list[tuple[str, list[dict]]], width: int | None):
    from rich.console import Group
    from rich.text import Text

    parts = []
    for name, rows in sweeps:
        parts += [table(name, rows, width), Text(footer(rows))]
        parts += [Text(line, style=STYLE[state]) for line, state in notes(rows)]
    return Group(*parts)


def plain(sweeps: list[tuple[str, list[dict]]]) -> str:
    lines = []
    for name, rows in sweeps:
        lines += plain_table(name, rows) + [footer(rows)] + [line for line, _ in notes(rows)]
    return "\n".join(lines)


def show(data: list[tuple[str, list[dict]]]) -> None:
    """The tables: fitted to the terminal, or plain lines when stdout is not one."""
    width = terminal_width()
    if width is None:
        print(plain(data), flush=True)
        return
    from rich.console import Console

    Console(width=width).print(render(data, width))


def watch(gather, data: list[tuple[str, list[dict]]], every_s: float) -> list[tuple[str, list[dict]]]:
    """Refresh until Ctrl-C: in place on a terminal; elsewhere a timestamped block, flushed, each time the
    table changes (a running run's heartbeat age changes it at every refresh) and at least every 10 refreshes,
    so a log file follows the sweep."""
    if not sys.stdout.isatty():
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

    width = shutil.get_terminal_size().columns
    console = Console(width=width)
    with Live(render(data, width), console=console, auto_refresh=False) as live:
        try:
            while True:
                time.sleep(every_s)
                data = gather()
                live.update(render(data, shutil.get_terminal_size().columns), refresh=True)
        except KeyboardInterrupt:
            pass
    return data


def add_arguments(p) -> None:
    p.add_argument("target", nargs="?", help="a sweep file, a sweep folder (jobs/<sweep>), a jobs root "
                                             "(default: ./jobs) or one run's folder (jobs/<sweep>/<run>)")
    p.add_argument("--only", metavar="PATTERNS", help="comma-separated run-name patterns, e.g. 's60-*,*-bp'")
    p.add_argument("--watch", nargs="?", const=10.0, type=float, metavar="SECONDS",
                   help="refresh every 10 s (or as given) until Ctrl-C, asking the scheduler at most once per the "
                        "sweep's poll_s (60 s by default); plain lines when not on a terminal")
    p.add_argument("--json", action="store_true", help="print the rows as JSON instead of a table")
    p.add_argument("--logs", metavar="RUN", help="print the tail of that run's latest log")
    p.add_argument("--lines", type=int, default=40, help="lines of --logs (default 40)")
    p.add_argument("--stall-after", type=float, default=None, metavar="SECONDS",
                   help="a running job silent this long is stalled (default: the run's step_timeout_s, or 900 "
                        "when it has none)")


def run(args) -> int:
    if args.target and RunFolder(Path(args.target)).config.exists():  # one run's folder: that run of its sweep
        args.target, args.only = str(Path(args.target).parent), Path(args.target).name
    sweeps, planned = find_sweeps(args.target), planned_runs(args.target)
    if args.logs:
        return print_logs(sweeps, args.logs, args.lines)
    poller = Poller(sweeps[0][1].parent, poll_s=poll_s_of(args.target)) if args.watch else None
    gather = lambda: collect_sweeps(sweeps, only=args.only, stall_after_s=args.stall_after,  # noqa: E731
                                    planned=planned, look=poller.look if poller else None)
    data = gather()
    if args.only and not any(rows for _, rows in data):
        names = sorted(p.name for _, f in sweeps for p in run_dirs(f, planned=planned))
        raise ConfigError(f"no run matches --only {args.only!r}", hint="runs: " + ", ".join(names))
    if args.json:
        print(json.dumps({n: rows for n, rows in data}, indent=1))
        return exit_code([r for _, rows in data for r in rows])
    if args.watch:
        data = watch(gather, data, args.watch)
    else:
        show(data)
    return exit_code([r for _, rows in data for r in rows])


def print_logs(sweeps: list[tuple[str, Path]], run: str, lines: int) -> int:
    for _, folder in sweeps:
        run_dir = folder / run
        if RunFolder(run_dir).config.exists():
            from zbpscale.files import read_jsonl

            attempts = read_jsonl(RunFolder(run_dir).attempts)
            sub = last_submitted(attempts)
            ends = [a for a in attempts if a.get("event") == "end" and a.get("job_id") == sub.get("job_id")]
            log = Path(ends[-1]["log"]) if ends and ends[-1].get("log") else \
                RunFolder(run_dir).log_path(sub, sub.get("job_id", ""))
            if not log.is_file():
                raise ConfigError(f"{run}: no log yet at {log}", hint="the run has not started")
            print(f"==> {log} <==")
            print("\n".join(log_tail(log, lines)))
            return 0
    names = sorted(p.name for _, f in sweeps for p in f.iterdir() if RunFolder(p).config.exists())
    raise ConfigError(f"no run {run!r} here", hint="runs: " + ", ".join(names))
