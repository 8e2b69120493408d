"""tools/slurm_local.py against itself: the cluster it starts runs jobs that sacct reports COMPLETED.

Starts a throwaway cluster in a fresh folder under /tmp (or reuses the one named by ZBPSCALE_SLURM_DIR,
left running if it was), submits one-line sbatch jobs, and compares sacct's final state and the job's
output with what the job was asked to do. Skipped, with the reason, where available() says no SLURM can
run (not root, packages missing: `python tools/slurm_local.py install`).
"""

import subprocess
import time

import pytest

from conftest import load_slurm_local

slurm_local = load_slurm_local()
pytestmark = pytest.mark.slurm


@pytest.fixture
def cluster(slurm_cluster):
    return slurm_cluster


def _sbatch(env, cwd, *args) -> str:
    out = subprocess.run(["sbatch", "--parsable", *args], env=env, cwd=cwd, capture_output=True, text=True,
                         timeout=30, check=True)
    return out.stdout.strip().split(";")[0]


def _final_state(env, job_id: str, timeout: float = 60) -> str:
    """sacct's state of the job once it has left PENDING/RUNNING (sacct may lag a new job by a second)."""
    t0 = time.monotonic()
    state = ""
    while time.monotonic() - t0 < timeout:
        out = subprocess.run(["sacct", "-n", "-X", "-P", "-j", job_id, "-o", "State"], env=env,
                             capture_output=True, text=True, timeout=30)
        state = out.stdout.strip()
        if state and state not in ("PENDING", "RUNNING", "REQUEUED", "COMPLETING"):
            return state
        time.sleep(0.5)
    raise AssertionError(f"job {job_id} still {state or 'unknown to sacct'} after {timeout:.0f} s")


def test_start_again_finds_the_same_daemons(cluster):
    folder, env = cluster
    before = slurm_local.recorded(folder)
    assert [r["name"] for r in before] == ["munged", "mariadbd", "slurmdbd", "slurmctld", "slurmd"]
    assert all(r["alive"] for r in before)
    assert slurm_local.start(folder) == {"SLURM_CONF": env["SLURM_CONF"]}
    assert slurm_local.recorded(folder) == before, "a second start must not start anything"


def test_one_line_job_completes_in_sacct(cluster, tmp_path):
    _, env = cluster
    job = _sbatch(env, tmp_path, "-o", "out.txt", "--wrap", "echo hello from $SLURM_JOB_ID")
    assert _final_state(env, job) == "COMPLETED"
    assert (tmp_path / "out.txt").read_text().strip() == f"hello from {job}"


def test_two_task_job_gets_two_fake_gpus(cluster, tmp_path):
    _, env = cluster
    job = _sbatch(env, tmp_path, "-n", "2", "--gres=gpu:2", "-o", "out.txt",
                  "--wrap", "srun bash -c 'echo $SLURM_PROCID $CUDA_VISIBLE_DEVICES'")
    assert _final_state(env, job) == "COMPLETED"
    lines = sorted((tmp_path / "out.txt").read_text().split("\n")[:-1])
    assert [line.split()[0] for line in lines] == ["0", "1"]
    assert all(len(line.split()[1].split(",")) == 2 for line in lines), lines
