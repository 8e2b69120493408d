"""Questions to SLURM's command-line tools, each with a timeout and a quiet answer when SLURM is not there.

Light on purpose (no torch): `zbpscale status` and the job layer both use it.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time

STEP_MARK = "zbpscale: a job step starts at "
"""The batch script's line before each job step, with the step's Unix start second (slurm_job.first_to_end)."""
QUICK_S = 1.0
"""A controller's client that has not answered in this long may be retrying a controller that is down: ask
`refused` then (never before: a connection that sends nothing is an error line in slurmctld's log)."""


def _run(cmd: list[str], timeout: float) -> subprocess.CompletedProcess | None:
    """`cmd` run to its end within `timeout`, or None (not installed, or no answer in time). A controller's client
    (sinfo, squeue) still silent after QUICK_S is given up at once, with `refused`'s reason on its stderr, when
    every controller refuses connections: it would retry for ~9 s before saying so itself."""
    if shutil.which(cmd[0]) is None:
        return None
    try:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    except OSError:
        return None
    try:
        try:
            out, err = proc.communicate(timeout=min(QUICK_S, timeout))
        except subprocess.TimeoutExpired:
            down = refused() if cmd[0] in ("sinfo", "squeue") else ""
            if down:
                proc.kill()
                proc.communicate()
                return subprocess.CompletedProcess(cmd, 1, "", f"{cmd[0]}: {down}\n")
            out, err = proc.communicate(timeout=max(0.0, timeout - QUICK_S))
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        return None
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


def answers() -> bool:
    """Whether a SLURM controller answers here (sinfo within a few seconds)."""
    out = _run(["sinfo", "-h", "-o", "%P"], timeout=10)
    return out is not None and out.returncode == 0


def refused(timeout: float = 2.0) -> str:
    """Why no controller can answer, when every controller that slurm.conf names refuses a connection (its host up,
    no slurmctld on its port: `Connection refused` comes at once, where squeue and sinfo retry for ~9 s before
    they give up); "" when one accepts, when one does not answer within `timeout`, or when the config cannot be
    read here (a configless cluster): then only the clients can tell."""
    path = os.environ.get("SLURM_CONF") or config_file()
    try:
        text = open(path).read() if path else ""
    except OSError:
        return ""
    keys = [line.split("#")[0].strip().split("=", 1) for line in text.splitlines()]
    conf = [(k.strip().lower(), v.strip()) for k, v in (pair for pair in keys if len(pair) == 2)]
    hosts = [v for k, v in conf if k in ("slurmctldhost", "controlmachine", "backupcontroller")]
    port = int(next((v for k, v in conf if k == "slurmctldport"), "6817").split("-")[0] or 6817)
    if not hosts:
        return ""
    for host in hosts:  # name(address) or name
        address = host.split("(", 1)[1].rstrip(")") if "(" in host else host
        try:
            socket.create_connection((address, port), timeout=timeout).close()
            return ""
        except ConnectionRefusedError:
            continue
        except OSError:  # a host that does not answer, or a name that does not resolve here: the clients decide
            return ""
    return f"slurmctld refuses connections ({', '.join(hosts)}, port {port})"


CONFIGS = ("/etc/slurm/slurm.conf", "/etc/slurm-llnl/slurm.conf", "/usr/local/etc/slurm.conf",
           "/run/slurm/conf/slurm.conf")
"""Where SLURM's clients find their config when SLURM_CONF is unset: the packages' and a source build's default,
and the copy slurmd keeps on a configless cluster."""


def config_file() -> str:
    """The slurm.conf a client finds where SLURM_CONF is unset (the first of CONFIGS that exists), or ""."""
    return next((path for path in CONFIGS if os.path.isfile(path)), "")


def configured() -> str:
    """Where this machine is set up to use SLURM ("SLURM_CONF=<file>", or sbatch with <file>), or "" when it is not:
    a machine with SLURM configured is a login or compute node, where a sweep belongs to SLURM even while its
    controller does not answer."""
    if os.environ.get("SLURM_CONF"):
        return f"SLURM_CONF={os.environ['SLURM_CONF']}"
    if shutil.which("sbatch"):
        found = config_file()
        return f"sbatch with {found}" if found else ""
    return ""


def parse_time(text: str) -> float | None:
    """Unix seconds of a SLURM timestamp (`2026-12-01T19:35:28`, the client's local time); None if not one."""
    try:
        return time.mktime(time.strptime(text.strip(), "%Y-%m-%dT%H:%M:%S"))
    except ValueError:
        return None


def no_answer(name: str, out: subprocess.CompletedProcess | None, timeout: float) -> str:
    """Why a client did not answer, in one line: its first line on stderr (`slurm_load_jobs error: Socket timed
    out on send/recv operation`, `... Resource temporarily unavailable`), or that it was silent or missing."""
    if out is None:
        return f"{name}: not installed here, or no answer within {timeout:g} s"
    said = next((ln.strip() for ln in out.stderr.splitlines() if ln.strip()), "")
    if not said:
        return f"{name}: exit status {out.returncode}"
    return said if said.startswith(f"{name}:") else f"{name}: {said}"


def squeue_rows(job_ids: list[str], errors: list[str] | None = None) -> dict[str, dict] | None:
    """{job id: {state, reason, submit, name}} of the jobs the controller still knows (live ones, and ended ones
    for its MinJobAge); None when squeue does not answer (why, in one line, appended to `errors` when given).
    The controller's word: no accounting lag. One call for all the ids; an array's elements are asked for and
    listed one by one (`1234_5`: `-r`, else squeue folds the waiting ones into one `1234_[5-7%2]` row)."""
    if not job_ids:
        return {}
    out = _run(["squeue", "-h", "-r", "-t", "all", "-j", ",".join(job_ids), "-o", "%i|%T|%r|%V|%j"], timeout=30)
    if out is None or (out.returncode != 0 and "Invalid job id" not in out.stderr):
        if errors is not None:
            errors.append(no_answer("squeue", out, 30))
        return None
    if out.returncode != 0:  # a single id the controller no longer knows is an error; more than one is not
        return {}
    rows = {}
    for line in out.stdout.splitlines():
        job, state, reason, submit, name = (line.split("|", 4) + [""] * 5)[:5]
        if state:
            rows[job.strip()] = {"state": state, "reason": reason, "submit": parse_time(submit), "name": name}
    return rows


def job_steps(job_ids: list[str]) -> dict[str, list[str]]:
    """{job id: its running steps (`1234_5.0`, `1234_5.1`: srun's, not the batch script's)} of the jobs that have
    one; {} when squeue does not answer."""
    if not job_ids:
        return {}
    out = _run(["squeue", "-h", "-s", "-j", ",".join(job_ids), "-o", "%i"], timeout=30)
    steps: dict[str, list[str]] = {}
    for step in (out.stdout.split() if out is not None and out.returncode == 0 else []):
        job, _, number = step.rpartition(".")
        if number.isdigit():
            steps.setdefault(job, []).append(step)
    return steps


def sacct_rows(job_ids: list[str], errors: list[str] | None = None) -> dict[str, list[dict]] | None:
    """{job id: [{state, how, submit, name}, ...]} from accounting, every job that ever had the id (a cluster
    whose ids restarted reuses them); None when sacct does not answer (why, appended to `errors` when given).
    One call for all the ids, keyed as asked: an array's element by `1234_5` (JobID; an element that has not
    started yet is not listed, squeue is asked about those). sacct's ExitCode is the batch script's
    `code:signal`; DerivedExitCode carries the highest signal of its steps, which is where a task killed by the
    OOM killer or `kill -9` shows (srun itself then exits 9, `FAILED 9:0`)."""
    if not job_ids:
        return {}
    out = _run(["sacct", "-n", "-X", "-P", "-j", ",".join(job_ids), "-o",
                "JobID,State,ExitCode,DerivedExitCode,Submit,JobName"], timeout=20)
    if out is None or out.returncode != 0:
        if errors is not None:
            errors.append(no_answer("sacct", out, 20))
        return None
    rows: dict[str, list[dict]] = {}
    for line in out.stdout.splitlines():
        job, state, code, derived, submit, name = (line.split("|", 5) + [""] * 6)[:6]
        if state.strip():  # `CANCELLED by 0` -> CANCELLED
            rows.setdefault(job.strip(), []).append({"state": state.split()[0], "how": exit_words(code, derived),
                                                     "submit": parse_time(submit), "name": name})
    return rows


def controller_state(job_id: str) -> str | None:
    """The job's state from the controller (squeue), at once after an scancel; None if it cannot tell."""
    rows = squeue_rows([job_id])
    return rows.get(job_id, {}).get("state") if rows else None


def exit_words(exit_code: str, derived: str) -> str:
    """sacct's `code:signal` pair (and the derived one of its steps) in words; "" for a clean or unknown end."""
    def pair(text: str) -> tuple[int, int]:
        code, _, sig = text.strip().partition(":")
        return (int(code), int(sig)) if code.isdigit() and sig.isdigit() else (0, 0)

    (code, sig), (_, step_sig) = pair(exit_code), pair(derived)
    sig = sig or step_sig
    if sig:
        name = signal.Signals(sig).name if sig in signal.Signals._value2member_map_ else "?"
        return f"a task was killed by signal {sig} ({name})"
    return f"exit code {code}" if code else ""


def parse_duration(text: str) -> float | None:
    """Seconds in a SLURM duration ('MM:SS', 'HH:MM:SS', 'D-HH:MM:SS'); None for UNLIMITED/INVALID."""
    text = text.strip()
    if not text or not text[0].isdigit():
        return None
    days, _, rest = text.rpartition("-")
    parts = [int(p) for p in rest.split(":")]
    while len(parts) < 3:
        parts.insert(0, 0)
    h, m, s = parts
    return (int(days) if days else 0) * 86400 + h * 3600 + m * 60 + s


def earlier_ends(job_id: str) -> list[str]:
    """The states accounting gave the earlier runs of a job that SLURM started again under its id (`sacct -D`:
    NODE_FAIL for a node lost, REQUEUED, PREEMPTED, ...), oldest first; [] when sacct does not answer or knows none."""
    out = _run(["sacct", "-n", "-X", "-D", "-P", "-j", job_id, "-o", "State"], timeout=20)
    if out is None or out.returncode != 0:
        return []
    states = [line.split()[0] for line in out.stdout.splitlines() if line.strip()]
    return [s for s in states if s not in ("PENDING", "RUNNING", "REQUEUED")]


def seconds_left(job_id: str) -> float | None:
    """Time left before the job's limit, from squeue; None if squeue cannot tell."""
    out = _run(["squeue", "-h", "-j", job_id, "-o", "%L"], timeout=30)
    if out is None or not out.stdout.strip():
        return None
    return parse_duration(out.stdout.splitlines()[0])
