"""`python -m zbpscale.submit` against a real SLURM (started by tools/slurm_local.py), training on CPU.

Compared: sacct's final state and the run folders with what the sweep asked for; the per-step losses of runs
that were preempted, requeued or killed with those of an uninterrupted run (bitwise; a real time-limit
requeue is checked on two nodes, tests/test_many_nodes.py); the attempts record
with the interruptions the scheduler caused (timeout / preempted); a second submit with the first.
Skipped, with the reason, where no SLURM can run (`python tools/slurm_local.py install` as root).
"""

import contextlib
import importlib.metadata
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import FAKE_WANDB_KEY, check_trackers, load_slurm_local, losses, wait_until, wheel_env, write_sweep
from zbpscale.run.folder import RunFolder
from zbpscale.run.history import read_attempts
from zbpscale.run.records import read_records
from zbpscale.run.snapshot import Snapshot

pytestmark = [pytest.mark.slurm, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[1]
slurm_local = load_slurm_local()
FINAL = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "OUT_OF_MEMORY", "NODE_FAIL", "BOOT_FAIL", "DEADLINE"}


@pytest.fixture
def slurm_env(slurm_cluster):
    return slurm_cluster[1]


def submit(sweep: Path, env: dict, *args: str) -> subprocess.CompletedProcess:
    cwd = sweep.parent.parent if sweep.parent.name == "sweeps" else sweep.parent
    out = subprocess.run([sys.executable, "-m", "zbpscale.submit", str(sweep), "--executor", "slurm", *args],
                         cwd=cwd, env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    return out


def job_ids(run_dir: Path) -> list[str]:
    return [a["job_id"] for a in read_attempts(run_dir) if a["event"] == "submitted"]


def wait_final(env: dict, job_id: str, timeout: float = 600) -> str:
    seen = {}

    def final() -> bool:
        out = subprocess.run(["sacct", "-n", "-X", "-P", "-j", job_id, "-o", "State"], env=env,
                             capture_output=True, text=True, timeout=30)
        seen["state"] = out.stdout.strip().split(" ")[0]
        return seen["state"] in FINAL

    wait_until(final, f"job {job_id} to finish", timeout, every=1)
    return seen["state"]


def status(folder: Path, env: dict, code: int | None) -> list[dict]:
    out = subprocess.run([sys.executable, "-m", "zbpscale.cli", "status", str(folder), "--json"], env=env,
                         capture_output=True, text=True, timeout=120)
    assert code is None or out.returncode == code, out.stdout + out.stderr
    return json.loads(out.stdout)[folder.name]



def test_smoke_sweep_prepares_its_data_completes_and_resubmit_submits_nothing(tmp_path, slurm_env):
    """The README's main job, sweeps/smoke.py as shipped, from a folder without data: prep job first."""
    shutil.copytree(REPO / "sweeps", tmp_path / "sweeps")
    sweep = tmp_path / "sweeps" / "smoke.py"
    out = submit(sweep, slurm_env)
    assert "data not prepared" in out.stdout
    runs = [tmp_path / "jobs" / "smoke" / name for name in ("tiny-bp", "tiny-zbp_n4")]
    for run in runs:
        (job,) = job_ids(run)
        assert wait_final(slurm_env, job, timeout=900) == "COMPLETED", list((run / "logs").iterdir())
        assert RunFolder(run).complete.exists()
        assert [s for s, _ in losses(run)] == list(range(20))
        assert [a["why"] for a in read_attempts(run) if a["event"] == "end"] == ["completed"]
        assert Snapshot(run, kept=True).from_digest  # the job's record of its end kept the folder's digest
    assert (tmp_path / "data" / "embedded" / "manifest.json").exists()
    again = submit(sweep, slurm_env)
    assert "data not prepared" not in again.stdout and "left alone: tiny-bp (complete)" in again.stdout
    assert all(len(job_ids(run)) == 1 for run in runs)
    rows = status(tmp_path / "jobs" / "smoke", slurm_env, code=0)
    assert [(r["run"], r["state"], r["executor"]) for r in rows] == [("tiny-bp", "complete", "slurm"),
                                                                     ("tiny-zbp_n4", "complete", "slurm")]


def test_two_tasks_train_with_world_size_two(tmp_path, slurm_env, data_dir):
    sweep = write_sweep(tmp_path, "multi", data_dir, steps=4, tasks=2)
    submit(sweep, slurm_env)
    run = tmp_path / "jobs" / "multi" / "nano-bp"
    (job,) = job_ids(run)
    assert wait_final(slurm_env, job) == "COMPLETED"
    start = next(r for r in read_records(run) if r["kind"] == "start")
    assert start["world_size"] == 2 and start["derived"]["micro_batch"] == 2
    settings = next(a for a in read_attempts(run) if a["event"] == "submitted")["settings"]  # submit's settings_notes
    assert (settings["tasks_per_node"], settings["time_min"], settings["max_timeouts"]) == (2, 30, 20), settings
    assert [s for s, _ in losses(run)] == list(range(4))


def test_a_job_submitted_from_a_wheel_install_runs_the_installed_package(tmp_path, slurm_env, data_dir,
                                                                       wheel_python, straight_run):
    """`pip install .` (non-editable, its source deleted), submit from another folder: the job's interpreter is
    the venv's and imports the installed copy; its losses equal the source tree's trainer on the same config."""
    sweep = write_sweep(tmp_path, "wheel", data_dir, steps=6)
    env = {**wheel_env(), **{k: v for k, v in slurm_env.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}}
    out = subprocess.run([str(wheel_python), "-m", "zbpscale.submit", str(sweep), "--executor", "slurm"],
                         cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    run = tmp_path / "jobs" / "wheel" / "nano-bp"
    (job,) = job_ids(run)
    assert wait_final(slurm_env, job) == "COMPLETED", [p.read_text()[-2000:] for p in (run / "logs").glob("*.out")]
    assert losses(run) == losses(straight_run(run))
    start = next(r for r in read_records(run) if r["kind"] == "start")
    assert start["versions"]["zbpscale"] == importlib.metadata.version("zbpscale")  # the installed package's


def test_timeouts_past_the_bound_mark_the_run_failed(tmp_path, slurm_env, data_dir):
    """Two real time limits; the run's experiment trackers go on across the requeue (one W&B run, every step once;
    the W&B key of the job's environment in no file of the jobs, logs included)."""
    sweep = write_sweep(tmp_path, "bound", data_dir, steps=5000, time_min=1, max_timeouts=1,
                        trackers=("tensorboard", "wandb"))
    submit(sweep, {**slurm_env, "WANDB_API_KEY": FAKE_WANDB_KEY, "WANDB_MODE": "offline"})
    run = tmp_path / "jobs" / "bound" / "nano-bp"
    (job,) = job_ids(run)
    assert wait_final(slurm_env, job, timeout=600) == "FAILED"
    ends = [a for a in read_attempts(run) if a["event"] == "end"]
    assert [a["why"] for a in ends] == ["timeout", "failed"]
    assert "over max_timeouts=1" in ends[-1]["reason"]
    assert "failed" in submit(sweep, slurm_env, "--dry-run").stdout
    check_trackers(run, tmp_path / "jobs")


def test_preemption_checkpoints_requeues_and_says_preempted(tmp_path, slurm_env, data_dir, straight_run):
    """A job on the high partition that needs the whole node preempts the run (USR2 at the grace time)."""
    sweep = write_sweep(tmp_path, "preempt", data_dir, steps=150)
    submit(sweep, slurm_env)
    run = tmp_path / "jobs" / "preempt" / "nano-bp"
    (job,) = job_ids(run)
    wait_until(lambda: len(losses(run)) >= 5, "the run to train 5 steps", every=0.3)
    high = subprocess.run(["sbatch", "--parsable", "-p", slurm_local.HIGH_PARTITION, "-c", str(slurm_local.CPUS),
                           "-o", str(tmp_path / "high.out"), "--wrap", "sleep 5"], env=slurm_env,
                          capture_output=True, text=True, timeout=30, check=True).stdout.strip()
    assert wait_final(slurm_env, high) == "COMPLETED"
    assert wait_final(slurm_env, job, timeout=600) == "COMPLETED"
    ends = [a["why"] for a in read_attempts(run) if a["event"] == "end"]
    assert ends[-1] == "completed" and "preempted" in ends and "timeout" not in ends, ends
    assert losses(run) == losses(straight_run(run))


def wait_for_checkpoint_and_progress(run: Path, extra_steps: int = 3, timeout: float = 300) -> int:
    from zbpscale.run.folder import RunFolder

    seen = {}

    def progressed() -> bool:
        found = RunFolder(run).list_checkpoints()
        seen["step"] = found[-1][0] if found else None
        return bool(found) and len(losses(run)) >= found[-1][0] + extra_steps

    wait_until(progressed, "a checkpoint followed by progress", timeout, every=0.3)
    return seen["step"]


def test_scontrol_requeue_resumes_from_the_run_folder(tmp_path, slurm_env, data_dir, straight_run):
    sweep = write_sweep(tmp_path, "requeue", data_dir, steps=150, ckpt_every=10)
    submit(sweep, slurm_env)
    run = tmp_path / "jobs" / "requeue" / "nano-bp"
    (job,) = job_ids(run)
    wait_for_checkpoint_and_progress(run)
    subprocess.run(["scontrol", "requeue", job], env=slurm_env, check=True, timeout=30)
    assert wait_final(slurm_env, job, timeout=600) == "COMPLETED"
    assert sum(a["event"] == "start" for a in read_attempts(run)) >= 2
    assert losses(run) == losses(straight_run(run))
    # #59 item 5: the scheduler's word (sacct REQUEUED), not a cancel: it was `cancelled, scancel; checkpointed`
    ends = [(a["why"], a["reason"]) for a in read_attempts(run) if a["event"] == "end"]
    assert ends[0][0] == "preempted" and "requeued by SLURM (sacct: REQUEUED); checkpointed" in ends[0][1], ends
    assert ends[-1] == ("completed", "all steps done"), ends
    (row,) = status(run.parent, slurm_env, code=0)
    assert row["state"] == "complete" and row["preemptions"] == 1, row


def test_a_killed_batch_script_is_recorded_as_such_and_resubmit_resumes(tmp_path, slurm_env, data_dir, straight_run):
    """#59 item 5: kill -9 of a job's batch script alone; SLURM ends the job (FAILED 0:9) and the trainer gets
    SIGTERM: it checkpoints. Recorded `cancelled, scancel; checkpointed` before, though nobody cancelled; now
    crashed, with the scheduler's word, and a submit resumes it, bit for bit."""
    sweep = write_sweep(tmp_path, "batch", data_dir, steps=400, ckpt_every=10)
    submit(sweep, slurm_env)
    run = tmp_path / "jobs" / "batch" / "nano-bp"
    (job,) = job_ids(run)
    wait_for_checkpoint_and_progress(run)
    rows = subprocess.run(["scontrol", "listpids", job], env=slurm_env, capture_output=True, text=True, timeout=30)
    (batch,) = [int(row.split()[0]) for row in rows.stdout.splitlines()[1:] if row.split()[2:3] == ["batch"]][:1]
    os.kill(batch, signal.SIGKILL)
    assert wait_final(slurm_env, job) == "FAILED"
    wait_until(lambda: [a["why"] for a in read_attempts(run) if a["event"] == "end"], "the attempt's end", 120,
               every=0.3)
    (end,) = [a for a in read_attempts(run) if a["event"] == "end"]
    assert (end["why"], end["reason"]) == ("crashed", "the job's batch script was killed (SLURM: FAILED, "
                                                      "JobLaunchFailure); checkpointed"), end
    wait_until(lambda: not subprocess.run(["squeue", "-h", "-j", job, "-t", "PD,R,CG"], env=slurm_env,
                                          capture_output=True, text=True, timeout=30).stdout.strip(),
               "the killed job to leave the controller's live states (COMPLETING: its processes reaped)", every=0.3)
    again = submit(sweep, slurm_env)
    assert "nano-bp: resume -> job" in again.stdout, again.stdout
    assert wait_final(slurm_env, job_ids(run)[-1]) == "COMPLETED"
    assert losses(run) == losses(straight_run(run))


def kill_every_process(job: str, env: dict) -> None:
    """kill -9 of every process of a running job on this host, its batch script first, as an OOM killer would
    (`scancel --signal=KILL --full` would make the job CANCELLED instead)."""
    raw = subprocess.run(["squeue", "-h", "-j", job, "-o", "%A"], env=env, capture_output=True, text=True,
                         timeout=30).stdout.strip()  # an array element's own job number
    rows = subprocess.run(["scontrol", "listpids", raw], env=env, capture_output=True, text=True, timeout=30)
    pids = [(row.split()[2] != "batch", int(row.split()[0])) for row in rows.stdout.splitlines()[1:] if row.strip()]
    assert pids, rows.stdout + rows.stderr
    for _, pid in sorted(pids):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def test_fault_kill_9_of_a_requeued_attempt_is_recorded_from_sacct_and_resubmit_resumes_only_that_run(
        tmp_path, slurm_env, data_dir, straight_run):
    """Fault: kill -9 of every process of a requeued job, its batch script too (the OOM killer of a node, a node
    reboot: nothing of the job is left to restart the attempt in its allocation). The killed attempt writes no
    end record, and the one before it says 'preempted': status must join attempts.jsonl with sacct (failed,
    signal 9, the log to read), not report the earlier attempt's reason, and write nothing; the next submit
    records that end from sacct and resumes that run only."""
    sweep = write_sweep(tmp_path, "killed", data_dir, steps=120, arms=("bp", "zbp_n4"), ckpt_every=10)
    submit(sweep, slurm_env)
    runs = {name: tmp_path / "jobs" / "killed" / name for name in ("nano-bp", "nano-zbp_n4")}
    victim = runs["nano-bp"]
    wait_for_checkpoint_and_progress(victim)
    subprocess.run(["scancel", "--signal=USR2", job_ids(victim)[0]], env=slurm_env, check=True, timeout=30)
    wait_until(lambda: sum(a["event"] == "start" for a in read_attempts(victim)) >= 2, "the run to be requeued",
               every=0.3)
    saved = wait_for_checkpoint_and_progress(victim)
    assert not RunFolder(victim).complete.exists(), "the run finished before the kill: make it longer"
    kill_every_process(job_ids(victim)[0], slurm_env)
    assert wait_final(slurm_env, job_ids(victim)[0]) == "FAILED"
    wait_until(lambda: not subprocess.run(["squeue", "-h", "-r", "-j", job_ids(victim)[0], "-t", "PD,R,CG"],
                                          env=slurm_env, capture_output=True, text=True).stdout.strip(),
               "the killed job to leave the controller's live states (COMPLETING: its processes reaped)", every=0.3)
    assert [a["why"] for a in read_attempts(victim) if a["event"] == "end"] == ["preempted"]
    row = next(r for r in status(victim.parent, slurm_env, code=None) if r["run"] == "nano-bp")
    # sacct's word (FAILED 9:0, a step killed by signal 9), the log to read, and what a submit does next
    assert row["state"] == "failed" and "signal 9 (SIGKILL)" in row["reason"] and row["next"] == "resume", row
    assert Path(row["log"]).is_file() and row["failures"] == 1
    assert [a["why"] for a in read_attempts(victim) if a["event"] == "end"] == ["preempted"]  # status only reads
    assert wait_final(slurm_env, job_ids(runs["nano-zbp_n4"])[0], timeout=600) == "COMPLETED"
    again = submit(sweep, slurm_env)
    assert "nano-bp: resume -> job" in again.stdout and len(job_ids(runs["nano-zbp_n4"])) == 1
    ends = [a for a in read_attempts(victim) if a["event"] == "end"]  # submit recorded the end the kill prevented
    assert [(a["why"], a.get("source")) for a in ends][:2] == [("preempted", None), ("crashed", "sacct")]
    assert wait_final(slurm_env, job_ids(victim)[-1], timeout=600) == "COMPLETED"
    resume = [r for r in read_records(victim) if r["kind"] == "resume"][-1]  # after the kill (one came before)
    assert resume["from_step"] >= saved
    assert losses(victim) == losses(straight_run(victim))


def step_records(run_dir: Path) -> list[tuple[str, int]]:
    return [(r["kind"], r["step"]) for r in read_records(run_dir) if r["kind"] in ("train", "eval", "diag")]


def train_times(run_dir: Path) -> list[tuple[int, float]]:
    return [(r["step"], r["time"]) for r in read_records(run_dir) if r["kind"] == "train"]


def test_kill_9_before_the_first_checkpoint_restarts_inside_the_allocation_and_leaves_each_step_once(
        tmp_path, slurm_env, data_dir, straight_run):
    """#33 item 1 and #42 item 3 on SLURM: the trainer killed (-9) at step >= 5 with no checkpoint yet. The job
    step dies without a word; the batch script records the crash (source "step") and starts the attempt again as
    a new step of the same job, not through the queue: the new attempt starts at step 0 and drops what the dead
    one logged: every step once, equal to a straight run, one job."""
    sweep = write_sweep(tmp_path, "early", data_dir, steps=40)  # no periodic checkpoint
    submit(sweep, slurm_env)
    run = tmp_path / "jobs" / "early" / "nano-bp"
    wait_until(lambda: len(losses(run)) >= 6, "step 5", every=0.3)
    assert not RunFolder(run).list_checkpoints()
    os.kill([a["pid"] for a in read_attempts(run) if a["event"] == "start"][-1], 9)
    killed = time.time()
    (job,) = job_ids(run)
    assert wait_final(slurm_env, job) == "COMPLETED"
    starts = [a for a in read_attempts(run) if a["event"] == "start"]
    ends = [a for a in read_attempts(run) if a["event"] == "end"]
    assert [(a["why"], a.get("source")) for a in ends] == [("crashed", "step"), ("completed", None)], ends
    assert ends[0]["reason"].endswith("restart 1/3")
    assert [(a["job_id"], a["restarts"], a["step"]) for a in starts] == [(job, 0, "0"), (job, 0, "2")]  # no requeue
    # (step 1: the batch script's check that every node answers)
    assert losses(run) == losses(straight_run(run))
    assert step_records(run) == step_records(straight_run(run))
    resume = [r for r in read_records(run) if r["kind"] == "resume"][-1]
    assert resume["from_step"] == 0 and resume["dropped"] >= 6
    first_new = min(t for step, t in train_times(run) if t > killed)
    print(f"kill -9 -> first step of the new job step: {first_new - killed:.1f} s")


def children(pid: int) -> list[int]:
    """Every child process of `pid`, of any of its threads, a dead one not yet reaped (a zombie) too."""
    found = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(OSError):  # a thread that ended meanwhile
            found += [int(child) for child in (task / "children").read_text().split()]
    return found


def sentinels(pid: int) -> list[int]:
    """The sentinel processes a job's rank 0 (`pid`) has started: its children running slurm_sentinel."""
    found = []
    for child in children(pid):
        with contextlib.suppress(OSError):  # one that ended meanwhile
            if b"slurm_sentinel" in Path(f"/proc/{child}/cmdline").read_bytes():
                found.append(child)
    return found


@pytest.mark.parametrize("sentinel_killed", [False, True], ids=["sentinel", "sentinel-killed-first"])
def test_a_frozen_trainer_is_caught_by_its_sentinel_restarted_in_its_allocation_and_finishes_bitwise(
        tmp_path, slurm_env, data_dir, straight_run, sentinel_killed):
    """#33 item 3 and #42 item 3 on SLURM: the trainer stopped with SIGSTOP (its own watchdog is frozen with it),
    nobody sends SIGCONT. The job's sentinel sees no step for step_timeout_s (+ its grace), records the hang with
    what it saw (a stopped process) and kills it; the attempt starts again as a new step of the same job (no
    requeue) and finishes from its last checkpoint, bitwise equal to a run never stopped. #59 item 7: the same when
    the sentinel was killed -9 first (nothing acted while the trainer stayed frozen): it is started again."""
    sweep = write_sweep(tmp_path, "frozen", data_dir, steps=80, ckpt_every=5, step_timeout_s=5)
    submit(sweep, slurm_env)
    run = tmp_path / "jobs" / "frozen" / "nano-bp"
    wait_until(lambda: RunFolder(run).list_checkpoints() and len(losses(run)) >= 12, "step 12", every=0.3)
    pid = [a["pid"] for a in read_attempts(run) if a["event"] == "start"][-1]
    if sentinel_killed:
        (first,) = sentinels(pid)
        os.kill(first, signal.SIGKILL)
        # the killed one reaped by rank 0's supervisor, which then starts another: frozen before that (within
        # Supervised.SUPERVISE_S), nothing would watch it (the guarantee's one gap, its docstring says)
        wait_until(lambda: first not in children(pid) and sentinels(pid), "a new sentinel", 60, every=0.1)
    os.kill(pid, signal.SIGSTOP)
    (job,) = job_ids(run)
    assert wait_final(slurm_env, job, timeout=600) == "COMPLETED"
    ends = [a for a in read_attempts(run) if a["event"] == "end"]
    assert [a["why"] for a in ends] == ["hung", "completed"], ends
    assert f"rank 0 (pid {pid}" in ends[0]["reason"] and "stopped (SIGSTOP or a debugger)" in ends[0]["reason"]
    assert ends[0]["reason"].count("no step for") == 1 and ends[0]["reason"].endswith("; restart 1/3")
    starts = [a for a in read_attempts(run) if a["event"] == "start"]
    assert [(a["restarts"], a["step"]) for a in starts] == [(0, "0"), (0, "2")]  # a new step, not a requeue
    assert [r["why"] for r in read_records(run) if r["kind"] == "end"] == ["hung", "completed"]
    assert losses(run) == losses(straight_run(run))
    assert step_records(run) == step_records(straight_run(run))
    first_new = min(t for step, t in train_times(run) if t > ends[0]["time"])
    print(f"hang recorded -> first step of the new job step: {first_new - ends[0]['time']:.1f} s")
    node_left_usable(slurm_env, job)


def node_left_usable(env: dict, job: str) -> None:
    """After a frozen step was killed: once the step's slurmstepd has gone, the node is put back in service if SLURM
    drained it. Seen in CI (2026-12-05, the sentinel-killed-first case): the killed step's slurmstepd outlived its
    processes, ended 'DUE TO JOB NOT ENDING WITH SIGNALS' after UnkillableStepTimeout, and SLURM drained the node,
    so the worker's next test waited 300 s for a job that could not start. Said in the test's output when it
    happens (an open finding: which process SLURM waited for is not known yet)."""
    mark = f"slurmstepd: [{job}.0]".encode()

    def stepd_alive() -> bool:
        for proc in Path("/proc").iterdir():
            with contextlib.suppress(OSError):
                if proc.name.isdigit() and (proc / "cmdline").read_bytes().startswith(mark):
                    return True
        return False

    wait_until(lambda: not stepd_alive(), f"the killed step {job}.0 to be gone", 180, every=1)
    nodes = subprocess.run(["sinfo", "-h", "-N", "-o", "%N %T"], env=env, capture_output=True, text=True,
                           timeout=30).stdout.split("\n")
    for name, state in (line.split() for line in nodes if line.strip()):
        if state.startswith("drain"):
            print(f"node {name} was {state} after the killed step: resumed")
            subprocess.run(["scontrol", "update", f"NodeName={name}", "State=RESUME"], env=env, check=True,
                           capture_output=True, text=True, timeout=30)


def test_cancel_checkpoints_the_running_job_and_leaves_the_run_to_resume(tmp_path, slurm_env, data_dir):
    sweep = write_sweep(tmp_path, "cancel", data_dir, steps=400)
    submit(sweep, slurm_env)
    run = tmp_path / "jobs" / "cancel" / "nano-bp"
    (job,) = job_ids(run)
    wait_until(lambda: len(losses(run)) >= 3, "the run to train 3 steps", every=0.3)
    out = subprocess.run([sys.executable, "-m", "zbpscale.cli", "cancel", str(sweep)], env=slurm_env, cwd=tmp_path,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 and "stopped: nano-bp" in out.stdout, out.stdout + out.stderr
    assert wait_final(slurm_env, job) == "COMPLETED"  # it ended itself after the checkpoint, not requeued
    assert [a["why"] for a in read_attempts(run) if a["event"] == "end"] == ["cancelled"]
    assert not RunFolder(run).complete.exists() and 3 <= len(losses(run)) < 400
    assert "resume" in submit(sweep, slurm_env, "--dry-run").stdout  # a later submit continues it
