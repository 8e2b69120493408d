"""Runs that span two nodes, and what only many nodes do: against a real 2-node SLURM (two slurmd on this host,
conftest.two_node_cluster), CPU ranks over gloo, the nano model.

Compared: per-step losses of a 2-node x 1-rank run with a 1-node x 2-rank run of the same config (bitwise: the
same two ranks, the same all-reduce; only the placement differs), and of every interrupted 2-node run with an
uninterrupted 2-node run; the attempts record with what happened (a timeout per attempt, not per node; USR2 to
one rank; a hang; a lost node); the time between the last step and the end of every rank's process with a few
seconds. The hang watchdog is also checked on the local queue (two ranks on this node).
"""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import load_slurm_local, losses, step_floor_env, wait_until, write_sweep
from zbpscale.run.folder import RunFolder
from zbpscale.run.history import read_attempts
from zbpscale.run.records import read_records

pytestmark = [pytest.mark.slurm, pytest.mark.slow]

slurm_local = load_slurm_local()
FINAL = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "OUT_OF_MEMORY", "NODE_FAIL", "BOOT_FAIL", "DEADLINE"}
STEPS = 200
"""~15-25 s of a 2-node job on 2 shared cores: what the faults need after their checkpoint of step 20 (the last
strikes near step 60). The time-limit test's first attempt is made to outlast SLURM's warning by a step floor
(600 steps without one were ~45-50 s; 300 finished before the warning in a clean-clone run)."""


def submit(sweep: Path, env: dict, *args: str, executor: str = "slurm") -> subprocess.CompletedProcess:
    out = subprocess.run([sys.executable, "-m", "zbpscale.submit", str(sweep), "--executor", executor, *args],
                         cwd=sweep.parent, env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    return out


def job_ids(run: Path) -> list[str]:
    return [a["job_id"] for a in read_attempts(run) if a["event"] == "submitted"]


def sacct(env: dict, job: str, field: str) -> str:
    out = subprocess.run(["sacct", "-n", "-X", "-P", "-j", job, "-o", field], env=env, capture_output=True,
                         text=True, timeout=30)
    return out.stdout.strip().splitlines()[-1] if out.stdout.strip() else ""


def final_state(env: dict, job: str, timeout: float = 900) -> str:
    seen = {}

    def final() -> bool:
        seen["state"] = sacct(env, job, "State").split(" ")[0]
        return seen["state"] in FINAL

    wait_until(final, f"job {job} to finish", timeout, every=1)
    return seen["state"]



def rank_pid(run: Path, rank: int) -> int:
    """The pid of a rank's trainer, from its watchdog's stamp (every rank writes one)."""
    return json.loads((run / ".ranks" / f"{rank}.json").read_text())["pid"]


def ends(run: Path) -> list[tuple[str, str]]:
    """(why, reason) of each attempt's end; every end record names its executor (#55), whoever wrote it."""
    found = [a for a in read_attempts(run) if a["event"] == "end"]
    assert all(a.get("executor") in ("slurm", "local") for a in found), found
    return [(a["why"], a["reason"]) for a in found]


@pytest.fixture(scope="module")
def straight(two_node_cluster, data_dir, tmp_path_factory):
    """The references, trained at once: a 2-node x 1-rank run of STEPS steps never interrupted, and the same
    config on 1 node x 2 ranks. Returns their run folders."""
    _, env = two_node_cluster
    folder = tmp_path_factory.mktemp("straight")
    sweeps = [write_sweep(folder, "straight", data_dir, steps=STEPS, nodes=2),
              write_sweep(folder, "onenode", data_dir, steps=STEPS, tasks=2)]
    for sweep in sweeps:
        submit(sweep, env)
    runs = [folder / "jobs" / name / "nano-bp" for name in ("straight", "onenode")]
    for run in runs:
        (job,) = job_ids(run)
        assert final_state(env, job) == "COMPLETED"
    return runs


def test_two_nodes_equal_one_node_with_two_ranks_and_every_rank_ends_with_the_job(two_node_cluster, straight):
    _, env = two_node_cluster
    run, other = straight
    (job,), (other_job,) = job_ids(run), job_ids(other)
    start = next(a for a in read_attempts(run) if a["event"] == "start")
    assert start["ranks"] == 2 and start["nodes"] == "node[1-2]"
    assert next(r for r in read_records(run) if r["kind"] == "start")["world_size"] == 2
    assert sacct(env, other_job, "NNodes") == "1" and sacct(env, job, "NNodes") == "2"
    assert losses(run) == losses(other) and len(losses(run)) == STEPS  # bitwise
    # The job ends with its last step: no rank waits for the time limit.
    last_step = read_records(run)[-1]["time"]
    ended = time.mktime(time.strptime(sacct(env, job, "End"), "%Y-%m-%dT%H:%M:%S"))
    assert ended - last_step < 10, ended - last_step


def test_time_limit_requeues_a_two_node_job_counted_once_per_attempt(two_node_cluster, straight, tmp_path,
                                                                     data_dir):
    _, env = two_node_cluster
    # With --time=1 slurmctld sends the warning at its first periodic check (every 30 s) once the job is within
    # signal_delay_s + 30 s of its end: at 30 s or more, the check right after the start (in a clean-clone run
    # ~9 s in, every attempt: still starting, no step made, 14 requeues in a row); at 15, the check ~30 s later.
    sweep = write_sweep(tmp_path, "limit", data_dir, steps=STEPS, nodes=2, time_min=1, signal_delay_s=15)
    # the first attempt outlasts the warning on any machine (200 x 0.25 s = 50 s of sleep, the warning at 45 s at
    # the latest); a requeued attempt trains at full speed
    submit(sweep, step_floor_env(tmp_path / "site", 0.25, env, first_attempt=True))
    run = tmp_path / "jobs" / "limit" / "nano-bp"
    (job,) = job_ids(run)
    assert final_state(env, job) == "COMPLETED"
    whys = [why for why, _ in ends(run)]
    starts = sum(a["event"] == "start" for a in read_attempts(run))
    assert whys[-1] == "completed" and whys.count("timeout") == starts - 1 >= 1, whys
    assert losses(run) == losses(straight[0])


def checkpointed_2_node_run(tmp_path: Path, name: str, data_dir: Path, env: dict, **sweep) -> tuple[Path, str]:
    """A 2-node run of STEPS steps submitted and trained past its checkpoint of step 20: (its folder, its job)."""
    submit(write_sweep(tmp_path, name, data_dir, steps=STEPS, nodes=2, ckpt_every=10, **sweep), env)
    run = tmp_path / "jobs" / name / "nano-bp"
    (job,) = job_ids(run)
    wait_until(lambda: (run / "checkpoints" / "ckpt_00000020.pt").exists(), "a checkpoint at step 20", run=run)
    return run, job


def test_a_rank_killed_on_another_node_is_recorded_as_that_rank_and_the_run_goes_on_bitwise(
        two_node_cluster, straight, tmp_path, data_dir):
    """#59 item 5: kill -9 of rank 1 on node2. Rank 0 then fails in the all-reduce (gloo: connection reset by
    peer), but the attempt's end names the rank that died first, its node and its signal, as srun saw them; the
    attempt starts again as a new job step of the same allocation, and the run ends bitwise like the straight one."""
    _, env = two_node_cluster
    run, job = checkpointed_2_node_run(tmp_path, "lost", data_dir, env)
    subprocess.run(["kill", "-9", str(rank_pid(run, 1))], check=True)
    assert final_state(env, job) == "COMPLETED"
    (why, reason), *_ = ends(run)
    assert why == "crashed" and reason.startswith("rank 1 on node2 was killed by signal 9 (SIGKILL)"), reason
    assert "restart 1/" in reason and "gloo" not in reason, reason
    assert sum(a["event"] == "start" for a in read_attempts(run)) == 2 and job_ids(run) == [job]  # one allocation
    assert losses(run) == losses(straight[0])


def test_a_node_lost_with_its_rank_is_recorded_as_a_node_failure_and_the_run_resumes_bitwise(
        two_node_cluster, straight, tmp_path, data_dir):
    """#59 item 5: node2 lost for real (its slurmd, the step's slurmstepd there and rank 1 killed at once): srun
    hears nothing of rank 1, rank 0 ends first (its peer lost), and SLURM calls node2 failed after SlurmdTimeout:
    the job ends NODE_FAIL and SLURM requeues it. The attempt's end names the node failure (srun's word, or
    accounting's NODE_FAIL when the job's next start writes it), not rank 0's error; once node2 is back the job runs
    again under its id and the run ends bitwise like the straight one."""
    folder, env = two_node_cluster
    run, job = checkpointed_2_node_run(tmp_path, "nodefail", data_dir, env)
    rank1 = rank_pid(run, 1)
    stepd = int(Path(f"/proc/{rank1}/stat").read_text().rsplit(")", 1)[1].split()[1])  # its slurmstepd
    slurm_local.stop_daemon(folder, "slurmd-node2")
    try:
        subprocess.run(["kill", "-9", str(stepd), str(rank1)], check=True)
        wait_until(lambda: "NODE_FAIL" in subprocess.run(
            ["sacct", "-n", "-X", "-D", "-P", "-j", job, "-o", "State"], env=env, capture_output=True,
            text=True).stdout, "SLURM to call node2 failed (NODE_FAIL)", timeout=180)
        wait_until(lambda: sacct(env, job, "State").split(" ")[0] not in ("NODE_FAIL", ""),
                   "SLURM to requeue the job", timeout=60)
    finally:
        slurm_local.restart_daemon(folder, "slurmd-node2")
    assert final_state(env, job) == "COMPLETED" and job_ids(run) == [job]  # requeued by SLURM, under its id
    (why, reason), *_ = ends(run)
    assert why == "crashed" and "node failure" in reason.lower() and "gloo" not in reason, ends(run)
    assert losses(run) == losses(straight[0])


def test_three_faults_of_many_nodes_each_end_in_a_true_state_and_the_run_resumes_bitwise(
        two_node_cluster, straight, tmp_path, data_dir):
    """One 2-node run, three faults, each after a checkpoint. (1) USR2 to the rank on node2 only: the ranks vote
    to stop, every rank stops at the same step, the job requeues (`preempted`). (2) The rank on node2 is stopped
    (SIGSTOP): rank 0 blocks in the all-reduce, its watchdog writes the stacks, records `hung` naming rank 1 and
    leaves; the step ends (the stopped rank killed with it) and the attempt starts again as a new step of the job
    (a crash). (3) node2's slurmd and its rank are killed: rank 0 loses its peer, the attempt is
    `crashed` naming rank 1 on node2 and its signal (no decision), status says failed, why, and names the nodes;
    once node2 is back a plain submit resumes
    the run, which ends bit for bit like the run never interrupted."""
    folder, env = two_node_cluster
    sweep = write_sweep(tmp_path, "faults", data_dir, steps=STEPS, nodes=2, ckpt_every=10, step_timeout_s=8)
    submit(sweep, env)
    run = tmp_path / "jobs" / "faults" / "nano-bp"
    (job,) = job_ids(run)
    starts = lambda: sum(a["event"] == "start" for a in read_attempts(run))  # noqa: E731

    wait_until(lambda: (run / "checkpoints" / "ckpt_00000020.pt").exists(), "a checkpoint at step 20", run=run)
    subprocess.run(["kill", "-USR2", str(rank_pid(run, 1))], check=True)
    wait_until(lambda: starts() == 2, "the requeue after USR2 to rank 1", run=run)
    (why, _), = ends(run)
    end = [r for r in read_records(run) if r["kind"] == "end"][-1]
    assert why == "preempted" and end["why"] == "checkpointed"
    assert (run / "checkpoints" / f"ckpt_{end['step'] + 1:08d}.pt").exists()  # the step every rank stopped at
    log = "".join(p.read_text(errors="replace") for p in (run / "logs").glob("*_log.out"))
    assert f"checkpointed at step {end['step'] + 1} on a stop signal to 1 other rank(s)" in log  # not a CANCEL

    wait_until(lambda: starts() == 2 and len(losses(run)) >= end["step"] + 15, "the second attempt to train", run=run)
    stopped = rank_pid(run, 1)
    subprocess.run(["kill", "-STOP", str(stopped)], check=True)
    wait_until(lambda: starts() == 3, "the restart after the hang", run=run)
    why, reason = ends(run)[-1]
    assert why == "hung" and f"rank 1 (pid {stopped}" in reason and "restart 1/3" in reason, reason
    new, old = [a for a in read_attempts(run) if a["event"] == "start"][-1:-3:-1]
    assert new["restarts"] == old["restarts"] and int(new["step"]) > int(old["step"])  # a new step, no requeue
    log = "".join(p.read_text(errors="replace") for p in (run / "logs").glob("*_log.out"))
    assert "every thread's stack" in log and "File " in log  # faulthandler's dump

    resumed = [r for r in read_records(run) if r["kind"] == "resume"][-1]["from_step"]
    wait_until(lambda: rank_pid(run, 1) != stopped and len(losses(run)) >= resumed + 15, "the third attempt", run=run)
    slurm_local.stop_daemon(folder, "slurmd-node2")
    try:
        subprocess.run(["kill", "-9", str(rank_pid(run, 1))], check=True)
        assert final_state(env, job) in ("FAILED", "NODE_FAIL")
        assert [w for w, _ in ends(run)] == ["preempted", "hung", "crashed"], ends(run)
        assert ends(run)[-1][1].startswith("rank 1 on node2 was killed by signal 9 (SIGKILL)"), ends(run)
        wait_until(lambda: not subprocess.run(["squeue", "-h", "-j", job, "-t", "PD,R,CG"], env=env,
                                              capture_output=True, text=True).stdout.strip(),
                   "the job to leave the queue (node2 called down)", timeout=120)
        out = subprocess.run([sys.executable, "-m", "zbpscale.cli", "status", str(run.parent), "--json"], env=env,
                             capture_output=True, text=True, timeout=60)
        (row,) = json.loads(out.stdout)["faults"]
        assert out.returncode == 1 and row["state"] == "failed" and row["next"] == "resume", row
        assert "rank 1 on node2 was killed by signal 9" in row["reason"], row  # not the survivor's gloo error
        assert row["nodes"] == "node[1-2]" and (row["preemptions"], row["failures"]) == (1, 2)
    finally:
        slurm_local.restart_daemon(folder, "slurmd-node2")
    wait_until(lambda: subprocess.run(["sinfo", "-h", "-n", "node2", "-o", "%T"], env=env, capture_output=True,
                                      text=True).stdout.strip() in ("idle", "mixed"), "node2 back", timeout=120)
    assert "nano-bp: resume -> job" in submit(sweep, env).stdout
    assert final_state(env, job_ids(run)[-1]) == "COMPLETED"
    assert losses(run) == losses(straight[0])


def test_the_watchdog_on_the_local_queue(tmp_path, data_dir):
    """The same hang on the local queue (two ranks on this node): `hung`, requeued, finished."""
    sweep = write_sweep(tmp_path, "lhung", data_dir, steps=40, tasks=2, ckpt_every=10, step_timeout_s=5)
    submit(sweep, dict(os.environ), executor="local")
    run = tmp_path / "jobs" / "lhung" / "nano-bp"
    wait_until(lambda: (run / "checkpoints" / "ckpt_00000010.pt").exists(), "a checkpoint at step 10", run=run)
    subprocess.run(["kill", "-STOP", str(rank_pid(run, 1))], check=True)
    wait_until(lambda: ends(run) and ends(run)[-1][0] == "completed", "the run to finish after the hang", run=run)
    assert [w for w, _ in ends(run)] == ["hung", "completed"], ends(run)
    assert RunFolder(run).complete.exists() and [s for s, _ in losses(run)] == list(range(40))
