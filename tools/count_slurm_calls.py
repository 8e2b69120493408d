"""Count the SLURM commands a command runs (and the jobs it submits): how hard it asks the controller.

Puts counting shims for squeue, sacct, scancel, sbatch, scontrol and sinfo first on PATH: each writes a line
per call to a log (time, the job it ran in if any, the command and its arguments), then runs the real binary.
The report gives calls per command, in all and per minute, over a window (the steady state: `--skip 60` leaves
out the first minute). Calls made inside jobs (SLURM_JOB_ID set: a job's own squeue or scontrol) are counted
apart from the command's own. Jobs inherit PATH, so the shims stay in `<log>.shims/` after the run.

    python tools/count_slurm_calls.py run --log calls.tsv --for 240 -- zbpscale submit sweep.py --wait
    python tools/count_slurm_calls.py report calls.tsv --skip 60
    python tools/count_slurm_calls.py shim DIR --log calls.tsv     # shims in DIR; prints the PATH to use

`run` stops the command with SIGINT (as Ctrl-C would) after --for seconds, then reports.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

COMMANDS = ("squeue", "sacct", "scancel", "sbatch", "scontrol", "sinfo")

SHIM = """#!/bin/sh
# counting shim for {name} (tools/count_slurm_calls.py): log the call, then run the real one
line="$(date +%s.%N)	${{SLURM_JOB_ID:-}}	{name}"
for a in "$@"; do line="$line	$a"; done
printf '%s\\n' "$line" >> '{log}'
exec '{real}' "$@"
"""


@dataclass(frozen=True)
class Call:
    time: float
    job: str  # the SLURM job it ran in ("" : not inside a job)
    name: str
    args: tuple[str, ...]


def make_shims(folder: Path, log: Path) -> Path:
    """Counting shims for every COMMANDS found on PATH (outside `folder`), in `folder`; returns it."""
    folder, log = Path(folder).absolute(), Path(log).absolute()
    folder.mkdir(parents=True, exist_ok=True)
    search = os.pathsep.join(p for p in os.environ.get("PATH", "").split(os.pathsep)
                             if p and Path(p).absolute() != folder)
    for name in COMMANDS:
        real = shutil.which(name, path=search)
        if real:
            shim = folder / name
            shim.write_text(SHIM.format(name=name, log=log, real=real))
            shim.chmod(0o755)
    return folder


def read_log(path: Path) -> tuple[list[Call], dict[str, float]]:
    """The calls of a log, and its `# start`/`# end` marks (written by `run`)."""
    calls, marks = [], {}
    for line in Path(path).read_text().splitlines():
        if line.startswith("# "):
            key, _, value = line[2:].partition(" ")
            marks[key] = float(value)
        elif line.strip():
            stamp, job, name, *args = line.split("\t")
            calls.append(Call(float(stamp), job, name, tuple(args)))
    return calls, marks


def per_minute(calls: list[Call], *, start: float, end: float, skip_s: float = 0.0) -> dict[str, float]:
    """Calls a minute per command (and 'all') made by the command itself (not inside a job) in
    [start + skip_s, end]: the calls in that window over its length."""
    lo = start + skip_s
    minutes = max(end - lo, 1e-9) / 60
    mine = [c for c in calls if not c.job and lo <= c.time <= end]
    rates = {name: sum(c.name == name for c in mine) / minutes for name in COMMANDS}
    rates["all"] = len(mine) / minutes
    return rates


def mean_gap(calls: list[Call], *, start: float, end: float, skip_s: float = 0.0) -> dict[str, float | None]:
    """Mean seconds between two consecutive calls per command (and 'all') made by the command itself in
    [start + skip_s, end] (None: fewer than two): the period of a steady poll, whatever the window's edges."""
    lo = start + skip_s
    mine = [c for c in calls if not c.job and lo <= c.time <= end]
    gaps = {}
    for name in (*COMMANDS, "all"):
        times = sorted(c.time for c in mine if name == "all" or c.name == name)
        gaps[name] = (times[-1] - times[0]) / (len(times) - 1) if len(times) > 1 else None
    return gaps


def most_in_a_minute(calls: list[Call], *, start: float, end: float, skip_s: float = 0.0) -> dict[str, int]:
    """The most calls per command (and 'all') made by the command itself in any 60 s within
    [start + skip_s, end]."""
    lo = start + skip_s
    mine = [c for c in calls if not c.job and lo <= c.time <= end]
    most = {}
    for name in (*COMMANDS, "all"):
        times = sorted(c.time for c in mine if name == "all" or c.name == name)
        most[name] = max((sum(t <= u < t + 60 for u in times) for t in times), default=0)
    return most


def report(path: Path, *, skip_s: float = 0.0) -> str:
    calls, marks = read_log(path)
    if not calls and not marks:
        return f"{path}: no calls"
    start = marks.get("start", min(c.time for c in calls))
    end = marks.get("end", max([c.time for c in calls] + [start]))
    lines = [f"{path}: {end - start:.0f} s; calls by the command itself (inside jobs apart); after the first "
             f"{skip_s:g} s: calls a minute, the most in any 60 s, and the mean gap between two calls",
             f"{'command':<10}{'calls':>7}{'first ' + str(int(skip_s)) + ' s':>12}{'after, /min':>13}"
             f"{'most/60s':>10}{'gap, s':>9}{'in jobs':>9}"]
    after = per_minute(calls, start=start, end=end, skip_s=skip_s)
    gaps = mean_gap(calls, start=start, end=end, skip_s=skip_s)
    most = most_in_a_minute(calls, start=start, end=end, skip_s=skip_s)
    for name in (*COMMANDS, "all"):
        mine = [c for c in calls if not c.job and (name == "all" or c.name == name)]
        early = sum(c.time < start + skip_s for c in mine)
        jobs = sum(1 for c in calls if c.job and (name == "all" or c.name == name))
        gap = "-" if gaps[name] is None else f"{gaps[name]:.1f}"
        lines.append(f"{name:<10}{len(mine):>7}{early:>12}{after[name]:>13.2f}{most[name]:>10}{gap:>9}{jobs:>9}")
    return "\n".join(lines)


def run(log: Path, seconds: float, command: list[str], *, skip_s: float) -> int:
    log = Path(log).absolute()
    shims = make_shims(Path(f"{log}.shims"), log)
    env = {**os.environ, "PATH": f"{shims}{os.pathsep}{os.environ.get('PATH', '')}"}
    log.write_text(f"# start {time.time()}\n")
    proc = subprocess.Popen(command, env=env)
    try:
        code = proc.wait(timeout=seconds)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGINT)
        code = proc.wait(timeout=120)
    with open(log, "a") as fh:
        fh.write(f"# end {time.time()}\n")
    print(report(log, skip_s=skip_s), flush=True)
    return code


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="what", required=True)
    r = sub.add_parser("run", help="run a command with the shims on PATH, stop it after --for s, report")
    r.add_argument("--log", type=Path, required=True)
    r.add_argument("--for", dest="seconds", type=float, default=240.0, metavar="SECONDS")
    r.add_argument("--skip", type=float, default=60.0, metavar="SECONDS", help="leave out the first seconds")
    r.add_argument("command", nargs=argparse.REMAINDER)
    q = sub.add_parser("report", help="report a log")
    q.add_argument("log", type=Path)
    q.add_argument("--skip", type=float, default=0.0, metavar="SECONDS")
    s = sub.add_parser("shim", help="write the shims into a folder and print the PATH that uses them")
    s.add_argument("folder", type=Path)
    s.add_argument("--log", type=Path, required=True)
    args = p.parse_args(argv)
    if args.what == "run":
        command = args.command[1:] if args.command[:1] == ["--"] else args.command
        if not command:
            p.error("run: give the command after --")
        return run(args.log, args.seconds, command, skip_s=args.skip)
    if args.what == "report":
        print(report(args.log, skip_s=args.skip))
        return 0
    folder = make_shims(args.folder, args.log)
    print(f"PATH={folder}{os.pathsep}{os.environ.get('PATH', '')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
