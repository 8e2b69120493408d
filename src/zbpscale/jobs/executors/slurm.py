"""SLURM through submitit: one job per run (requeued in place after a time limit or preemption), the data-prep
job they wait for (afterok), and one reconciled view of the jobs.

The view. squeue (the controller) is the truth for live jobs and knows ended ones for a few minutes; sacct
(accounting) for jobs that ended, and it may lag squeue by seconds (a job not listed yet, or an old state), be
switched off, or hold an older job under a reused id. So:
  - a job squeue lists as live is live, whatever accounting says;
  - an ended job's state comes from sacct, and only from a record submitted no earlier than our own `submitted`
    event (minus SUBMIT_SLACK_S for clocks): an id reused by another job is not ours; else from squeue's;
  - a job that neither lists within its grace window (`submitted.grace_s`) is queued, "submitted, not yet visible
    to the scheduler"; past it, it has ended without an account; an array element that neither lists while
    squeue lists its array (and accounting answers) is gone at once: cancelled before it started (`scancel A_i`
    of a waiting element leaves no accounting record at all);
  - squeue not answering makes every job UNKNOWN (left alone); accounting not answering is one note;
  - one squeue asks about every job, one sacct about the jobs squeue no longer lists, and never about a job whose
    run folder recorded its end (ENDED): a recorded end is final, and accounting is the costlier question.
"""

from __future__ import annotations

import contextlib
import io
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from zbpscale.errors import ZbpError
from zbpscale.jobs.executors import slurm_commands as slurm
from zbpscale.jobs.executors.base import ALIVE, NEVER_REASON, UNKNOWN, UNSEEN_JOB_GRACE_S, Executor, JobView, View
from zbpscale.run.folder import RunFolder, job_log
from zbpscale.run.snapshot import record
from zbpscale.tables import plural

if TYPE_CHECKING:
    from zbpscale.jobs.sweep import PlannedRun, Sweep

SUBMIT_SLACK_S = 120.0  # the controller's and this host's clocks may differ a little
REASONS = {"OUT_OF_MEMORY": "out of memory (the OOM killer)", "NODE_FAIL": "node failure",
           "CANCELLED": "cancelled in SLURM (scancel or an admin)", "BOOT_FAIL": "node boot failure",
           "TIMEOUT": "time limit reached without a checkpoint", "DEADLINE": "deadline reached"}
"""SLURM's end states that say more than the trainer could, in words."""
ENDED = ("completed", "failed", "cancelled", "crashed")
"""Ends (`why`) after which a SLURM job does not run again (TrainJob requeues only after a timeout, a preemption
or a hang; an end written from the scheduler's account is a crash or a cancel): accounting is not asked again."""


def ours(rows: list[dict], submitted: dict) -> dict | None:
    """The newest row that is our job: submitted (or requeued) no earlier than our `submitted` event, under our
    job name when both are known; a row without a submit time (a minimal sacct) is taken as ours."""
    since = submitted.get("time", 0) - SUBMIT_SLACK_S
    name = submitted.get("name")
    mine = [r for r in rows if (r["submit"] is None or r["submit"] >= since)
            and not (name and r["name"] and r["name"] != name)]
    return max(mine, key=lambda r: r["submit"] or 0, default=None)


class SlurmExecutor(Executor):
    name = "slurm"
    label = "SLURM"
    rate_limited = True
    held_before = False  # a submit limit held runs back before, in this process (said in full once)

    # ------------------------------------------------------------------------------------------------ view
    def view(self, submitted: list[dict], *, now: float) -> View:
        ids, errors = [s["job_id"] for s in submitted], []
        arrays = sorted({job.split("_")[0] for job in ids if "_" in job})  # every element of each array, listed
        queued = slurm.squeue_rows(ids + arrays, errors)
        view = View()
        if queued is None:
            view.notes.append("squeue not answering: runs with a job are left alone until it does")
        seen = {s["job_id"]: ours([queued[s["job_id"]]] if queued and s["job_id"] in queued else [], s)
                for s in submitted}
        unlisted = [s for s in submitted if not (seen[s["job_id"]] and seen[s["job_id"]]["state"] in ALIVE)
                    and s.get("ended") not in ENDED]
        accounted = slurm.sacct_rows([s["job_id"] for s in unlisted], errors) if unlisted else {}
        if accounted is None:
            view.notes.append("accounting not answering: states from squeue only")
        view.failed = "; ".join(errors)
        for sub in submitted:
            job, row = sub["job_id"], seen[sub["job_id"]]
            if row and row["state"] in ALIVE:
                view.jobs[job] = JobView(row["state"], source="squeue", reason=row["reason"],
                                         log=sub.get("prep_log", "") if row["reason"] == NEVER_REASON else "")
                continue
            acct = ours((accounted or {}).get(job, []), sub)
            if acct and acct["state"] not in ALIVE:
                view.jobs[job] = JobView(acct["state"], how=acct["how"], words=REASONS.get(acct["state"], ""),
                                         source="sacct")
            elif row:
                view.jobs[job] = JobView(row["state"], words=REASONS.get(row["state"], ""), source="squeue")
            elif queued is None and sub.get("ended") not in ENDED:  # a recorded final end needs no scheduler
                view.jobs[job] = JobView(UNKNOWN, reason="squeue is not answering")
            elif not sub.get("ended") and accounted is not None and _array_listed(job, queued):
                view.jobs[job] = JobView("CANCELLED", words="cancelled before it started (squeue lists its array, "
                                         "not it, and accounting has no record of it)", source="squeue")
            elif not sub.get("ended") and now - sub.get("time", 0) < sub.get("grace_s", UNSEEN_JOB_GRACE_S):
                view.jobs[job] = JobView("PENDING", source="submit",
                                         reason="submitted, not yet visible to the scheduler")
            # else: gone from squeue, and accounting has no (current) word on it
        return view

    # ---------------------------------------------------------------------------------------------- submit
    def submit(self, sweep: Sweep, todo: dict[PlannedRun, str], *, prep: bool, max_parallel: int = 0
               ) -> list[PlannedRun]:
        """The runs of one size as one job array (Sweep.arrays), else a job per run. An array refused for a submit
        limit (or MaxArraySize) is tried again at half its length; the first that fits after a refusal ends the
        submission (the limit is near: the sbatch calls stay few). The runs not submitted are returned, still new
        (nothing recorded of them), with one line."""
        waiting = [list(group) for group in groups(sweep, list(todo))]
        limit = None
        try:
            prep_job, prep_log = (live_prep(sweep) or submit_prep(sweep)) if prep else ("", "")
            while waiting and limit is None:
                group = waiting[0]
                chunk = list(group)
                while True:
                    try:
                        jobs = submit_runs(chunk, todo, depends_on=prep_job, prep_log=prep_log)
                        break
                    except Refused as err:
                        if len(chunk) == 1 or not (err.limited or err.too_long):
                            raise
                        limit = err if err.limited else limit
                        chunk = chunk[:len(chunk) // 2]  # a shorter array may fit under the limit (or MaxArraySize)
                for run, job in zip(chunk, jobs):
                    print(f"{run.name}: {todo[run]} -> job {job} (logs in {shown_logs(run, job)})")
                del group[:len(chunk)]
                if not group:
                    waiting.pop(0)
        except Refused as err:
            if not err.limited:
                raise ZbpError(f"sbatch refused: {err}", hint="fix the size's resources in the sweep file, then "
                               "submit again (the runs submitted so far keep their jobs)") from None
            limit = err
        held = [run for group in waiting for run in group]
        if held:
            said = "held by the submit limit" if self.held_before else f"held by a submit limit ({limit})"
            print(f"{plural(len(held), 'run')} not submitted, {said}: they stay new; submit --wait submits them as "
                  "jobs end, or submit again later", flush=True)
            self.held_before = True
        return held

    def cancel(self, run_dir: Path, job: str, seen: JobView) -> str:
        return self.cancel_all([(run_dir, job, seen)]).get(job, "")

    def cancel_all(self, jobs: list[tuple[Path, str, JobView]]) -> dict[str, str]:
        """Waiting jobs are dropped (scancel; their end recorded here), then running ones are sent USR2 (the
        trainer checkpoints, TrainJob stops), an array element through its steps: `scancel --signal=USR2 A_i` (or
        the element's own job id) signals A_i again and again for ~50 s and then fails, exit 229, while array A
        still has a waiting element (SLURM 22.05: ../shared/SLURM.md); `A_i.0` is signalled once, at once. One call
        for each kind, one per job if that call fails, so one failure stops nothing else. A running job's run folder
        gets the CANCEL stamp first, which its trainer honours at its next step too: a signal that fails is said
        in a line, not a failure. Returns {job: why} of the waiting jobs that could not be dropped."""
        running = [(run_dir, job) for run_dir, job, seen in jobs if seen.state == "RUNNING"]
        waiting = [(run_dir, job, seen) for run_dir, job, seen in jobs if seen.state != "RUNNING"]
        failed = _scancel([job for _, job, _ in waiting])
        for run_dir, job, seen in waiting:
            if job not in failed:
                record(run_dir, "end", job_id=job, executor=self.name, why="cancelled",
                       reason=f"cancelled while {seen.state.lower()}" + (f" ({seen.reason})" if seen.reason else ""))
        for run_dir, _ in running:
            RunFolder(run_dir).cancel.write_text("cancel\n")
        steps = slurm.job_steps([job for _, job in running if "_" in job])
        targets = {job: steps.get(job) or [job] for _, job in running}  # no step yet: the job itself
        signalled = _scancel([t for each in targets.values() for t in each], "--signal=USR2")
        for job, why in {job: signalled[t] for job, each in targets.items() for t in each if t in signalled}.items():
            print(f"job {job}: {why}; its trainer stops at its next step on the run folder's CANCEL stamp",
                  file=sys.stderr, flush=True)
        return failed


def _array_listed(job: str, queued: dict | None) -> bool:
    """Whether squeue lists another element of the array `job` (`1234_5`) is an element of."""
    array, _, index = job.partition("_")
    return bool(index) and any(other.partition("_")[0] == array and other != job for other in queued or {})


GONE = ("already completing or completed", "Invalid job id")
"""What scancel says of a job that ended meanwhile: nothing left to cancel, not an error."""


def _scancel(job_ids: list[str], *options: str) -> dict[str, str]:
    """scancel with `options` of every job in `job_ids`: one call, or one per job when that one fails (a job that
    ended meanwhile is no failure); {job: why} of those that failed, in one line each."""
    if not job_ids:
        return {}
    why = _scancel_once(options, job_ids)
    if not why:
        return {}
    if len(job_ids) == 1:
        return {job_ids[0]: why}
    alone = {job: _scancel_once(options, [job]) for job in job_ids}
    return {job: said for job, said in alone.items() if said}


def _scancel_once(options: tuple[str, ...], job_ids: list[str]) -> str:
    """Why `scancel OPTIONS JOBS` failed, or '' (also when every line it said is a job already gone)."""
    command = ["scancel", *options, *job_ids]
    try:
        out = subprocess.run(command, capture_output=True, text=True, timeout=90)
    except (OSError, subprocess.SubprocessError) as err:
        return f"{' '.join(command)} failed: {err} (hint: is SLURM reachable here (squeue)?)"
    said = [ln for ln in out.stderr.splitlines() if ln.strip()]
    if out.returncode == 0 or (said and all(any(g in ln for g in GONE) for ln in said)):
        return ""
    return (f"{' '.join(command)} failed: {said[0] if said else f'exit status {out.returncode}'} "
            "(hint: is SLURM reachable here (squeue)?)")


# ------------------------------------------------------------------------------------------------ submitit
def sbatch_parameters(run: PlannedRun) -> dict:
    """submitit SlurmExecutor parameters of a run (golden-tested against the generated sbatch script)."""
    res = run.size.resources
    params: dict = {
        "job_name": job_name(run),
        "nodes": res.nodes,
        "ntasks_per_node": res.ranks_per_node,
        "cpus_per_task": res.cpus_per_task,
        "time": res.time_min,
        "signal_delay_s": run.sweep.signal_delay_s,
        "stderr_to_stdout": True,
        "additional_parameters": {"requeue": True, **{k: v for k, v in res.extra_sbatch}},
        # a rank that ends with a non-zero status ends its step: its peers, blocked on it in a collective or
        # stopped, would otherwise hold the step (and the allocation) until the time limit
        "srun_args": ["--kill-on-bad-exit=1"],
    }
    if res.gpus_per_node:
        params["gpus_per_node"] = res.gpus_per_node
    if res.mem_gb:
        params["mem"] = f"{res.mem_gb}GB"
    for name in ("partition", "account", "qos", "constraint"):
        if getattr(res, name):
            params[name] = getattr(res, name)
    return params


def job_name(run: PlannedRun) -> str:
    return f"{run.sweep.name}/{run.name}"


def _executor(folder: Path, params: dict, max_num_timeout: int = 0, python: list[str] | None = None):
    import submitit

    executor = submitit.SlurmExecutor(folder=str(folder), max_num_timeout=max_num_timeout,
                                      python=shlex.join(python or [sys.executable]))
    executor.update_parameters(**params)
    return executor


class Refused(ZbpError):
    """sbatch refused a submission: `limited` when a submit limit did (the job is fine; it fits later)."""

    @property
    def limited(self) -> bool:
        return any(words in str(self) for words in LIMITED)

    @property
    def too_long(self) -> bool:
        """An array longer than the site's MaxArraySize."""
        return "Invalid job array specification" in str(self)


LIMITED = ("AssocMaxSubmitJobLimit", "QOSMaxSubmitJobPerUserLimit", "MaxSubmitJobs", "job submit limit",
           "Job violates accounting/QOS policy")
"""What sbatch says when a limit on what one user, account or QOS may have queued refuses a job."""


@contextlib.contextmanager
def _sbatch(folder: Path):
    """Around one submitit submission: sbatch's refusal as a `Refused` (its own line), and the files submitit left
    for a submission that did not happen removed (its pickles, its script); nothing printed by submitit."""
    from submitit.core.utils import FailedJobError

    before = set(folder.iterdir()) if folder.is_dir() else set()
    try:
        with contextlib.redirect_stderr(io.StringIO()):  # submitit prints sbatch's stderr; Refused says it once
            yield
    except FailedJobError as err:
        for path in set(folder.iterdir()) - before:  # a job's files are <job id>_...; submitit's own, <uuid hex>.pkl
            if path.suffix in (".pkl", ".sh") and not re.match(r"\d+_", path.name):
                path.unlink(missing_ok=True)
        said = [ln.split("error:", 1)[-1].strip() for ln in str(err).splitlines() if "error:" in ln]
        raise Refused("sbatch: " + ("; ".join(said) if said else str(err).strip() or "refused")) from None


def groups(sweep: Sweep, runs: list[PlannedRun]) -> list[list[PlannedRun]]:
    """The runs that go as one job array: those of one size (their sbatch parameters are the same), in order;
    each run on its own when the sweep says no arrays."""
    if not sweep.arrays:
        return [[run] for run in runs]
    by_size: dict[str, list[PlannedRun]] = {}
    for run in runs:
        by_size.setdefault(run.size.name, []).append(run)
    return list(by_size.values())


def array_logs(run: PlannedRun) -> Path:
    """The log folder of the job arrays of the run's size: submitit names each element's log `<array>_<i>_0_log.out`
    (a folder per size: the runs' own logs/ hold their jobs' logs when they go one by one)."""
    return (run.sweep.jobs_dir / "array-logs" / run.size.name).absolute()


def shown_logs(run: PlannedRun, job: str) -> Path:
    return job_log(array_logs(run), job, submitit=True) if "_" in job else RunFolder(run.run_dir.absolute()).logs


def prep_logs(sweep: Sweep) -> Path:
    """The log folder of the sweep's data-prep jobs (submitit's files: `<job>_submitted.pkl`, `<job>_0_log.out`)."""
    return (sweep.jobs_dir / "prep-data-logs").absolute()


def live_prep(sweep: Sweep) -> tuple[str, str] | None:
    """The sweep's newest data-prep job when it is still queued or running (runs submitted later wait for it, not
    for a second one); None otherwise. Its id comes from submitit's files in the prep log folder."""
    folder = prep_logs(sweep)
    found = sorted(folder.glob("*_submitted.pkl"), key=lambda p: p.stat().st_mtime) if folder.is_dir() else []
    if not found:
        return None
    job = found[-1].name.split("_")[0]
    row = (slurm.squeue_rows([job]) or {}).get(job)
    if row is None or row["state"] not in ALIVE or row["reason"] == NEVER_REASON:
        return None
    print(f"data not prepared yet: the runs wait for prep job {job} (logs in {folder})")
    return job, str(job_log(folder, job, submitit=True))


def submit_prep(sweep: Sweep) -> tuple[str, str]:
    """Submit the data-prep job on a training node; returns its job id and log."""
    from zbpscale.entry import PrepJob
    from zbpscale.jobs.sweep import prep_config

    res = sweep.sizes[0].resources
    cfg = prep_config(sweep)
    params = {"job_name": f"{sweep.name}/prep-data", "nodes": 1, "ntasks_per_node": 1,
              "cpus_per_task": cfg.workers, "time": 24 * 60, "stderr_to_stdout": True}
    for name in ("partition", "account", "qos"):
        if getattr(res, name):
            params[name] = getattr(res, name)
    folder = prep_logs(sweep)
    with _sbatch(folder):
        job = _executor(folder, params).submit(PrepJob(cfg))
    print(f"data not prepared at {cfg.out}: prep job {job.job_id} (logs in {folder})")
    return str(job.job_id), str(job_log(folder, job.job_id, submitit=True))


def step_restarts(folder: Path) -> dict:
    """The batch script's loop around submitit's srun line (its `setup` and `teardown` lines): an attempt that
    crashed or hung (recorded so by the job, or a step that died without a word) starts again as a new job step
    in the same allocation, within the sweep's max_crashes, without going back to the queue; a time limit or a
    preemption still requeues. `python -m zbpscale.entry slurm-step-ended` decides from the run folder (exit 0:
    start the step again; never for a step whose trainer did not start); then a step of `true` on every node
    must succeed (a node lost with the crash cannot take the new step: the job ends, and a submit resumes it once
    the node is back, instead of spending max_crashes on it). Otherwise the script exits with the step's status.
    A hung attempt ends its whole step (slurm_job.kill_step: a frozen rank would keep it alive). The steps append
    to the job's logs (sbatch's open mode, which srun inherits), so a crash's traceback stays; each step's part of
    the batch log begins with slurm_commands.STEP_MARK and its start time (srun's word on its tasks follows)."""
    decide = shlex.join([sys.executable, "-m", "zbpscale.entry", "slurm-step-ended", str(folder)])
    return {"setup": ["export ZBPSCALE_STEP_RESTARTS=1  # the job restarts crashed attempts as new steps",
                      "while true; do", "began=$(date +%s)", f'echo "{slurm.STEP_MARK}$began" >&2'],
            "teardown": ["step=$?", f'{decide} "$step" "$began" || exit "$step"',
                         'srun --ntasks-per-node=1 --kill-on-bad-exit=1 true || exit "$step"  # every node answers',
                         "done"]}


def submit_runs(runs: list[PlannedRun], actions: dict[PlannedRun, str], *, depends_on: str = "",
                prep_log: str = "") -> list[str]:
    """Write the runs' resolved configs and submit their jobs: one job array for several runs (of one size), a job
    for one; record a `submitted` event in each run folder; returns the job ids (`1234_5` for an array's)."""
    from zbpscale import signals
    from zbpscale.entry import TrainJob

    sweep, array = runs[0].sweep, len(runs) > 1
    run_dirs = [run.write_folder() for run in runs]
    params = sbatch_parameters(runs[0])
    if array:
        params["job_name"] = f"{sweep.name}/{runs[0].size.name}"
        params["array_parallelism"] = sweep.array_parallelism or len(runs)
    if depends_on:
        params["additional_parameters"]["dependency"] = f"afterok:{depends_on}"
    folder = array_logs(runs[0]) if array else RunFolder(run_dirs[0]).logs
    params.update(step_restarts(folder))
    # BLOCKED_TASK_PYTHON: a stop signal that comes during start-up waits for the job's handler instead of killing
    # it, and a task that did its work ends without the interpreter's teardown (entry.submitit_task)
    executor = _executor(folder, params, max_num_timeout=sweep.max_timeouts, python=signals.BLOCKED_TASK_PYTHON)
    with _sbatch(folder), executor.batch():
        jobs = [executor.submit(TrainJob(str(run_dir), max_timeouts=sweep.max_timeouts,
                                         max_preemptions=sweep.max_preemptions, signal_delay_s=sweep.signal_delay_s,
                                         max_crashes=sweep.max_crashes)) for run_dir in run_dirs]
    extra = {"prep_job": depends_on, "prep_log": prep_log} if depends_on else {}
    for run, run_dir, job in zip(runs, run_dirs, jobs):
        record(run_dir, "submitted", job_id=str(job.job_id), executor="slurm", logs=str(folder),
               retry=actions[run] == "retry", name=params["job_name"], grace_s=sweep.visible_within_s,
               settings=run.job_settings(), **extra)
    return [str(job.job_id) for job in jobs]
