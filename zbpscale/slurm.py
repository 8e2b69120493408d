"""Questions to SLURM's command-line tools, each with a timeout and a quiet answer when SLURM is not there.

Light on purpose (no torch): `zbpscale status` and the job layer both use it.
"""

from __future__ import annotations

import shutil
import signal
import subprocess

ALIVE = {"PENDING", "RUNNING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "CONFIGURING", "COMPLETING",
         "SUSPENDED", "RESIZING", "SIGNALING", "STAGE_OUT", "PREEMPTED"}
"""Job states in which a job still holds or waits for resources (squeue/sacct spelling)."""


def _run(cmd: list[str], timeout: float) -> subprocess.CompletedProcess | None:
    if shutil.which(cmd[0]) is None:
        return None
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired):
        return None


def answers() -> bool:
    """Whether a SLURM controller answers here (sinfo within a few seconds)."""
    out = _run(["sinfo", "-h", "-o", "%P"], timeout=10)
    return out is not None and out.returncode == 0


def squeue_states(job_ids: list[str]) -> dict[str, str]:
    """{job id: state} of jobs still known to squeue (finished jobs are simply absent)."""
    out = _run(["squeue", "-h", "-o", "%i %T", "-j", ",".join(job_ids)], timeout=30) if job_ids else None
    if out is None:
        return {}
    return dict(line.split()[:2] for line in out.stdout.splitlines() if len(line.split()) >= 2)


def job_states(job_ids: list[str]) -> dict[str, str]:
    """{job id: state} from sacct, finished jobs included (`CANCELLED by 0` -> CANCELLED); squeue's view of the
    live ones when accounting does not answer."""
    return {job: state for job, (state, _) in job_outcomes(job_ids).items()}


def job_outcomes(job_ids: list[str]) -> dict[str, tuple[str, str]]:
    """{job id: (state, how it ended)}: sacct's state and, for a job that ended badly, its exit in words
    ("a task was killed by signal 9 (SIGKILL)", "exit code 1"; "" when clean or unknown). sacct's ExitCode is
    the batch script's `code:signal`; DerivedExitCode carries the highest signal of its steps, which is where a
    task killed by the OOM killer or `kill -9` shows (srun itself then exits 9, `FAILED 9:0`)."""
    out = _run(["sacct", "-n", "-X", "-P", "-j", ",".join(job_ids), "-o", "JobIDRaw,State,ExitCode,DerivedExitCode"],
               timeout=20) if job_ids else None
    if out is None or out.returncode != 0:
        return {job: (state, "") for job, state in squeue_states(job_ids).items()}
    found = {}
    for line in out.stdout.splitlines():
        job, state, *codes = line.split("|") + ["", ""]
        if state.strip():
            found[job] = (state.split()[0], exit_words(codes[0], codes[1]))
    return found


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


def seconds_left(job_id: str) -> float | None:
    """Time left before the job's limit, from squeue; None if squeue cannot tell."""
    out = _run(["squeue", "-h", "-j", job_id, "-o", "%L"], timeout=30)
    if out is None or not out.stdout.strip():
        return None
    return parse_duration(out.stdout.splitlines()[0])
