"""`zbpscale status [SWEEP or folder]`: every run of a sweep at a glance, from any shell, on any day.

    zbpscale status                         # every sweep under ./jobs
    zbpscale status sweeps/ladder.py        # one sweep (its file or its folder, jobs/ladder)
    zbpscale status jobs/ladder --watch     # refresh in place
    zbpscale status jobs/ladder --json      # the same rows for scripts
    zbpscale status jobs/ladder --logs s60-zbp_n16   # the tail of that run's log

A run's state is its folder joined with its scheduler: COMPLETE marker, the attempts record and the tail of
metrics.jsonl, with SLURM's sacct (squeue when accounting does not answer) or the local queue's entry files.
States: complete, running, stalled (the job runs but the heartbeat is older than --stall-after), queued,
failed (with a one-line reason and the log to read), broken (the run folder's config.json cannot be read),
cancelled, stopped (interrupted, nothing queued), new. Only the tails of the logs are read.
Exit status: 0 all complete, 1 any failed or broken, 3 some still to finish.
"""

from __future__ import annotations

import json
import re
import shutil
import sys
import time
from pathlib import Path

from zbpscale import slurm
from zbpscale.errors import BrokenRunFolder, ConfigError
from zbpscale.runfolder import ATTEMPTS, CONFIG, LOGS, PLAN, RunFolder, count_ends, last_submitted, parse_run_name

ORDER = ("running", "stalled", "queued", "stopped", "new", "cancelled", "failed", "broken", "complete")
SLURM_REASONS = {"OUT_OF_MEMORY": "out of memory (the OOM killer)", "NODE_FAIL": "node failure",
                 "CANCELLED": "cancelled in SLURM (scancel or an admin)", "BOOT_FAIL": "node boot failure",
                 "TIMEOUT": "time limit reached without a checkpoint", "DEADLINE": "deadline reached"}


# ---------------------------------------------------------------------------------------------- reading
def tail_records(path: Path, kinds: tuple[str, ...], max_bytes: int = 1 << 20) -> dict[str, dict]:
    """The last record of each kind in a JSONL file, reading backwards from the end in growing blocks."""
    found: dict[str, dict] = {}
    try:
        size = path.stat().st_size
    except OSError:
        return found
    block = 16384
    with open(path, "rb") as fh:
        while True:
            start = max(0, size - block)
            fh.seek(start)
            lines = fh.read(size - start).splitlines()
            if start > 0:
                lines = lines[1:]  # the first line may be cut
            for line in reversed(lines):
                kind = _kind_of(line)
                if kind not in kinds or kind in found:
                    continue  # decode only the lines asked for
                try:
                    found[kind] = json.loads(line)
                except (json.JSONDecodeError, UnicodeDecodeError):
                    continue  # a torn line
            if len(found) == len(kinds) or start == 0 or block >= max_bytes:
                return found
            block *= 4


def _kind_of(line: bytes) -> str | None:
    """The `kind` of a metrics line without decoding it (MetricsLog writes `{"kind": "...", ...` first)."""
    if not line.startswith(b'{"kind": "'):
        return None
    end = line.find(b'"', 10)
    return line[10:end].decode() if end > 0 else None


def first_record(path: Path) -> dict:
    try:
        with open(path, "rb") as fh:
            return json.loads(fh.readline())
    except (OSError, json.JSONDecodeError, UnicodeDecodeError):
        return {}


def _read_json(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return {}


# -------------------------------------------------------------------------------------------- schedulers
def scheduler_view(root: Path, attempts_by_run: dict[str, list[dict]]) -> dict[str, str]:
    """{job id: squeue-style state} for the runs' last jobs, from the local queue and SLURM."""
    from zbpscale.local.queue import SCHEDULER_STATE, LocalQueue

    states = {}
    queue = LocalQueue(root)
    if queue.entries_dir.is_dir():
        alive = queue.driver_alive()
        for e in queue.entries():
            states[e.job_id] = SCHEDULER_STATE.get(e.state, e.state.upper())
            if e.state in ("queued", "running") and not alive:
                states[e.job_id] = "DRIVER_DOWN"
    submitted = [last_submitted(a) for a in attempts_by_run.values()]
    states.update(slurm.job_states([s["job_id"] for s in submitted if s.get("executor") == "slurm"]))
    return states


# ---------------------------------------------------------------------------------------------- one run
def run_row(run_dir: Path, sched: dict[str, str], attempts: list[dict], *, now: float, stall_after_s: float) -> dict:
    """Everything status shows about one run (plain JSON types)."""
    from zbpscale.runfolder import COMPLETE, HEARTBEAT, METRICS

    try:
        config, broken = RunFolder(run_dir).read_config() or {}, ""
    except BrokenRunFolder as err:
        config, broken = {}, str(err)
    start = first_record(run_dir / METRICS)
    tail = tail_records(run_dir / METRICS, ("train", "eval"))
    beat = _read_json(run_dir / HEARTBEAT)
    plan = _read_json(run_dir / PLAN)
    size, arm, _ = parse_run_name(run_dir.name) or (run_dir.name, "", 0)
    derived = start.get("derived", {})
    steps = config.get("steps") or derived.get("total_steps") or 0
    tokens_per_step = derived.get("tokens_per_step") or config.get("global_batch", 0) * config.get("seq_len", 0)
    step = beat.get("step", (tail.get("train", {}).get("step", -1) + 1))
    sub = last_submitted(attempts)
    job = sub.get("job_id", "")
    job_state = sched.get(job, "")
    ends = [a for a in attempts if a.get("event") == "end"]
    # The end of the job's latest attempt: a requeued SLURM job keeps its id, so an end before that attempt's
    # start belongs to an earlier attempt (a killed attempt leaves no end record of its own).
    job_starts = [a["time"] for a in attempts if a.get("event") == "start" and a.get("job_id") == job]
    since = job_starts[-1] if job_starts else 0
    last_end = next((a for a in reversed(ends) if a.get("job_id") == job and a.get("time", 0) >= since), {})
    counts = {k: count_ends(attempts, k) for k in ("timeout", "preempted", "crashed", "failed")}
    starts = [a for a in attempts if a.get("event") == "start"]
    gpus = plan.get("gpus", 0)
    used_h = sum(_attempt_hours(a, attempts, now) for a in starts) * gpus
    beat_age = now - beat["time"] if "time" in beat else None

    reason, log = "", ""
    slurm_says = SLURM_REASONS.get(job_state) if sub.get("executor") == "slurm" else None
    if (run_dir / COMPLETE).exists():
        state = "complete"
    elif broken and job_state not in slurm.ALIVE:
        state, reason = "broken", broken
    elif job_state == "RUNNING":
        # Silent since the heartbeat, or since the attempt started if it has not beaten yet (start-up counts).
        started = starts[-1]["time"] if starts and starts[-1].get("job_id") == job else now
        last_sign = beat["time"] if beat_age is not None and beat["time"] >= started else started
        state = "stalled" if now - last_sign > stall_after_s else "running"
        if state == "stalled":
            reason = f"no heartbeat for {_age(now - last_sign)}"
    elif job_state in slurm.ALIVE:
        state = "queued"
    elif job_state == "DRIVER_DOWN":
        state, reason = "stopped", "the local queue's driver is not running: submit again to go on"
    elif last_end.get("why") in ("failed", "cancelled") and not slurm_says:
        state, reason = last_end["why"], last_end.get("reason", "")
    elif job and (not last_end or slurm_says):
        # The job is gone without a record of why (killed, node lost): the scheduler says, then the log.
        state = "cancelled" if job_state == "CANCELLED" else "failed"
        reason = slurm_says or f"job ended ({job_state or 'state unknown'}) without a record"
    elif job:
        state, reason = "stopped", f"{last_end.get('why')}: {last_end.get('reason', '')}; nothing queued"
    elif not start:
        state = "new"
    else:  # trained directly (python -m zbpscale.train), not through a job: the run's own records say
        last = tail_records(run_dir / METRICS, ("start", "end"))
        end = last.get("end", {})
        ended = bool(end) and end.get("time", 0) >= last.get("start", {}).get("time", 0)
        if not ended and beat_age is not None and beat_age <= stall_after_s:
            state = "running"
        else:
            state = "failed" if end.get("status") == "diverged" else "stopped"
            reason = f"{end.get('status', 'no end record')}: {end.get('reason', '')} (run directly, no job)"
    if state == "failed":
        log = last_end.get("log") or _log_path(run_dir, sub, job)
        reason = _refine(reason, log)
    step_time = tail.get("train", {}).get("step_time")
    eta = (steps - step) * step_time if state == "running" and step_time and steps else None
    return {
        "run": run_dir.name, "size": size, "arm": arm, "state": state, "step": max(step, 0), "steps": steps,
        "tokens": max(step, 0) * tokens_per_step, "pct": 100.0 * max(step, 0) / steps if steps else 0.0,
        "train_loss": tail.get("train", {}).get("loss"), "val_loss": tail.get("eval", {}).get("val_loss"),
        "tokens_per_s": tail.get("train", {}).get("tokens_per_s"), "eta_s": eta,
        "timeouts": counts["timeout"], "preemptions": counts["preempted"],
        "failures": counts["crashed"] + counts["failed"],
        "job": job, "executor": sub.get("executor", ""), "heartbeat_age_s": beat_age,
        "gpu_hours": used_h, "gpu_hours_planned": plan.get("gpu_hours"), "reason": reason, "log": str(log or ""),
        "params": derived.get("params") or plan.get("params"),
    }


def _attempt_hours(start: dict, attempts: list[dict], now: float) -> float:
    later = [a for a in attempts if a.get("event") == "end" and a.get("job_id") == start.get("job_id")
             and a.get("time", 0) >= start["time"]]
    return ((later[0]["time"] if later else now) - start["time"]) / 3600


def _log_path(run_dir: Path, submitted: dict, job: str) -> Path:
    logs = Path(submitted.get("logs") or run_dir / LOGS)
    for name in (f"{job}_0.log", f"{job}_0_log.out", f"{job}_0_log.err"):
        if (logs / name).exists():
            return logs / name
    found = sorted(logs.glob(f"{job}_*"), key=lambda p: p.stat().st_mtime) if logs.is_dir() else []
    return found[-1] if found else logs


def log_tail(path: Path, lines: int = 40) -> list[str]:
    try:
        with open(path, "rb") as fh:
            fh.seek(0, 2)
            size = fh.tell()
            fh.seek(max(0, size - 65536))
            return fh.read().decode(errors="replace").splitlines()[-lines:]
    except OSError:
        return []


def _refine(reason: str, log) -> str:
    """Sharpen a vague reason from the log's tail: an OOM, or the last line of a Python traceback."""
    tail = log_tail(Path(log), 60) if log else []
    text = "\n".join(tail)
    if "CUDA out of memory" in text or "OutOfMemoryError" in text:
        return "out of memory (CUDA)" + (f"; {reason}" if reason else "")
    if reason and not (reason.startswith(("job ended", "killed by")) or re.fullmatch(r"exit status \d+", reason)):
        return reason  # already says why
    if "Traceback (most recent call last)" in text:
        last = next((ln for ln in reversed(tail) if ln.strip() and not ln.startswith(" ")), "")
        return f"{last.strip()}" + (f" ({reason})" if reason else "")
    return reason or "ended without a reason on record"


# -------------------------------------------------------------------------------------------- the sweep
def find_sweeps(target: str | None) -> list[tuple[str, Path]]:
    """[(sweep name, sweep folder)] for a sweep file, a sweep folder, a jobs root, or nothing (./jobs)."""
    path = Path(target or "jobs")
    if path.is_file() and path.suffix == ".py":
        from zbpscale.sweep import load_sweep

        sweep = load_sweep(path)
        return [(sweep.name, Path(sweep.root) / sweep.name)]
    if path.suffix == ".py":
        raise ConfigError(f"sweep file {path} does not exist",
                          hint="sweeps live in sweeps/, e.g. sweeps/smoke.py or sweeps/ladder.py")
    if not path.is_dir():
        raise ConfigError(f"{path} is neither a sweep file nor a folder",
                          hint="give a sweep file (sweeps/ladder.py) or its folder (jobs/ladder)")
    if any(p.joinpath(CONFIG).exists() for p in path.iterdir() if p.is_dir()):
        return [(path.name, path)]
    sweeps = [(p.name, p) for p in sorted(path.iterdir()) if p.is_dir() and not p.name.startswith(".")
              and any(q.joinpath(CONFIG).exists() for q in p.iterdir() if q.is_dir())]
    if not sweeps:
        raise ConfigError(f"no runs under {path}", hint="submit a sweep first: python -m zbpscale.submit SWEEP")
    return sweeps


def planned_runs(target: str | None) -> dict[str, dict]:
    """{run name: planned steps, params, GPU-hours} of a sweep file (nothing for a folder target): the runs
    without a folder yet are shown as new, with these numbers."""
    path = Path(target or "jobs")
    if not (path.is_file() and path.suffix == ".py"):
        return {}
    from zbpscale.sweep import expand, load_sweep

    planned = {}
    for run in expand(load_sweep(path)):
        hours = run.estimated_hours()
        planned[run.name] = {"steps": run.size.steps, "params": run.size.params,
                             "gpu_hours_planned": None if hours != hours else hours * run.size.resources.gpus}
    return planned


def collect_rows(folder: Path, *, only: str | None = None, stall_after_s: float = 900.0,
                 planned: dict[str, dict] | None = None) -> list[dict]:
    """Every run's row: the run folders found under `folder`, and the `planned` runs without one yet (new)."""
    from zbpscale.metrics import read_jsonl

    planned = planned or {}
    found = {p.name for p in folder.iterdir() if (p / CONFIG).exists()} if folder.is_dir() else set()
    run_dirs = sorted(folder / name for name in found | set(planned))
    if only:
        import fnmatch

        patterns = [p.strip() for p in only.split(",") if p.strip()]
        run_dirs = [p for p in run_dirs if any(fnmatch.fnmatchcase(p.name, pat) for pat in patterns)]
    attempts = {p.name: read_jsonl(p / ATTEMPTS) for p in run_dirs}
    sched = scheduler_view(folder.parent, attempts)
    now = time.time()
    rows = [run_row(p, sched, attempts[p.name], now=now, stall_after_s=stall_after_s) for p in run_dirs]
    for row in rows:
        if row["run"] not in found:  # planned, not written yet
            row.update(planned[row["run"]])
    return sorted(rows, key=lambda r: (r["params"] or 0, r["run"]))  # the ladder's order: smallest first


def _age(seconds: float) -> str:
    return f"{seconds:.0f}s" if seconds < 120 else f"{seconds / 60:.0f}m" if seconds < 7200 else f"{seconds / 3600:.1f}h"


def exit_code(rows: list[dict]) -> int:
    states = {r["state"] for r in rows}
    if states & {"failed", "broken"}:
        return 1
    return 0 if states <= {"complete"} else 3


# ------------------------------------------------------------------------------------------------ render
STYLE = {"complete": "green", "running": "cyan", "queued": "blue", "stalled": "bold yellow", "failed": "bold red",
         "cancelled": "magenta", "stopped": "yellow", "new": "dim", "broken": "bold red"}


def _fmt_tokens(n: float) -> str:
    return f"{n / 1e9:.2f}B" if n >= 1e9 else f"{n / 1e6:.1f}M" if n >= 1e6 else f"{n / 1e3:.0f}k"


def _fmt_eta(seconds: float | None) -> str:
    if seconds is None:
        return ""
    return f"{seconds / 60:.0f}m" if seconds < 5400 else f"{seconds / 3600:.1f}h"


def table(name: str, rows: list[dict]):
    from rich.table import Table

    t = Table(title=f"sweep {name}: {len(rows)} runs", title_justify="left")
    for col in ("size", "arm", "state", "progress", "tokens", "train", "val", "tok/s", "ETA", "T/P/F", "job", "beat"):
        t.add_column(col, justify="left" if col in ("size", "arm", "state", "job") else "right")
    for r in rows:
        loss = lambda v: "" if v is None else f"{v:.3f}"  # noqa: E731
        t.add_row(r["size"], r["arm"], f"[{STYLE[r['state']]}]{r['state']}[/]",
                  f"{r['step']}/{r['steps']} {r['pct']:.0f}%", _fmt_tokens(r["tokens"]), loss(r["train_loss"]),
                  loss(r["val_loss"]), "" if r["tokens_per_s"] is None else f"{r['tokens_per_s']:,.0f}",
                  _fmt_eta(r["eta_s"]), f"{r['timeouts']}/{r['preemptions']}/{r['failures']}", r["job"],
                  _age(r["heartbeat_age_s"]) if r["state"] in ("running", "stalled") and r["heartbeat_age_s"] is not None
                  else "")
    return t


def footer(rows: list[dict]) -> str:
    counts = {s: sum(r["state"] == s for r in rows) for s in ORDER}
    used = sum(r["gpu_hours"] for r in rows)
    planned = [r["gpu_hours_planned"] for r in rows]
    plan = f"{sum(p for p in planned if p):,.1f}" + ("" if all(p is not None for p in planned) else "+?")
    return "  ".join(f"{s} {n}" for s, n in counts.items() if n) + f"   GPU-hours used {used:,.1f} / planned {plan}"


def render(sweeps: list[tuple[str, list[dict]]]):
    from rich.console import Group
    from rich.text import Text

    parts = []
    for name, rows in sweeps:
        parts += [table(name, rows), Text(footer(rows))]
        for r in rows:
            if r["state"] in ("failed", "broken", "stalled", "stopped") and r["reason"]:
                where = f"  (log: {r['log']})" if r["log"] else ""
                parts.append(Text(f"{r['run']}: {r['state']}: {r['reason']}{where}", style=STYLE[r["state"]]))
    return Group(*parts)


def main(argv: list[str] | None = None) -> int:
    import argparse

    p = argparse.ArgumentParser(prog="zbpscale status", description=__doc__.splitlines()[0])
    p.add_argument("target", nargs="?", help="a sweep file, a sweep folder (jobs/<sweep>) or a jobs root "
                                             "(default: ./jobs)")
    p.add_argument("--only", help="comma-separated run-name patterns, e.g. 's60-*,*-bp'")
    p.add_argument("--watch", nargs="?", const=10.0, type=float, metavar="SECONDS",
                   help="refresh in place (every 10 s, or as given) until Ctrl-C")
    p.add_argument("--json", action="store_true", help="print the rows as JSON instead of a table")
    p.add_argument("--logs", metavar="RUN", help="print the tail of that run's latest log")
    p.add_argument("--lines", type=int, default=40, help="lines of --logs (default 40)")
    p.add_argument("--stall-after", type=float, default=900.0, metavar="SECONDS",
                   help="a running job silent this long is stalled (default 900)")
    args = p.parse_args(argv)
    try:
        sweeps, planned = find_sweeps(args.target), planned_runs(args.target)
        if args.logs:
            return print_logs(sweeps, args.logs, args.lines)
        gather = lambda: [(n, collect_rows(f, only=args.only, stall_after_s=args.stall_after,  # noqa: E731
                                           planned=planned)) for n, f in sweeps]
        data = gather()
        if args.only and not any(rows for _, rows in data):
            names = sorted(r["run"] for _, f in sweeps for r in collect_rows(f, planned=planned))
            raise ConfigError(f"no run matches --only {args.only!r}", hint="runs: " + ", ".join(names))
        if args.json:
            print(json.dumps({n: rows for n, rows in data}, indent=1))
            return exit_code([r for _, rows in data for r in rows])
        from rich.console import Console

        console = Console(width=max(140, shutil.get_terminal_size().columns))
        if not args.watch:
            console.print(render(data))
            return exit_code([r for _, rows in data for r in rows])
        from rich.live import Live

        with Live(render(data), console=console, auto_refresh=False) as live:
            try:
                while True:
                    time.sleep(args.watch)
                    live.update(render(gather()), refresh=True)
            except KeyboardInterrupt:
                pass
        return exit_code([r for _, rows in gather() for r in rows])
    except ConfigError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2


def print_logs(sweeps: list[tuple[str, Path]], run: str, lines: int) -> int:
    for _, folder in sweeps:
        run_dir = folder / run
        if (run_dir / CONFIG).exists():
            from zbpscale.metrics import read_jsonl

            attempts = read_jsonl(run_dir / ATTEMPTS)
            sub = last_submitted(attempts)
            ends = [a for a in attempts if a.get("event") == "end" and a.get("job_id") == sub.get("job_id")]
            log = Path(ends[-1]["log"]) if ends and ends[-1].get("log") else _log_path(run_dir, sub, sub.get("job_id", ""))
            if not log.is_file():
                raise ConfigError(f"{run}: no log yet at {log}", hint="the run has not started")
            print(f"==> {log} <==")
            print("\n".join(log_tail(log, lines)))
            return 0
    names = sorted(p.name for _, f in sweeps for p in f.iterdir() if (p / CONFIG).exists())
    raise ConfigError(f"no run {run!r} here", hint="runs: " + ", ".join(names))
