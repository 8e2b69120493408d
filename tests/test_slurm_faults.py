"""What the scheduler says, when its accounting lags, fails or lies: against the real SLURM of
tools/slurm_local.py, training the nano model on CPU.

Compared: the number of jobs each run got (its `submitted` events, and the jobs squeue listed under its name)
with one; `submit --wait`'s exit status and status's states with the truth of the run folders; the end records
with what happened. The accounting faults are a stand-in `sacct` first on PATH that wraps the real one:
lagging (answers nothing for its first calls), down (exits 1), stale (adds an old COMPLETED record under every
id asked about, as a cluster whose job ids restarted would); and the real slurmdbd stopped by the PID
tools/slurm_local.py recorded, then started again.
"""

import json
import os
import shutil
import signal
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import load_slurm_local, losses, step_floor_env, wait_until, write_sweep
from zbpscale.run.folder import RunFolder
from zbpscale.run.history import read_attempts
from zbpscale.run.records import read_records

pytestmark = [pytest.mark.slurm]

slurm_local = load_slurm_local()
FINAL = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "OUT_OF_MEMORY", "NODE_FAIL", "BOOT_FAIL", "DEADLINE"}

SACCT = '''#!{python}
"""A stand-in sacct ({kind}) around the real one."""
import pathlib, subprocess, sys
kind, count = {kind!r}, pathlib.Path({count!r})
calls = int(count.read_text()) if count.exists() else 0
count.write_text(str(calls + 1))
if kind == "down":
    sys.exit("sacct: error: Problem talking to the database: Connection refused")
if kind == "lagging" and calls < 8:
    sys.exit(0)
real = subprocess.run([{real!r}, *sys.argv[1:]], capture_output=True, text=True)
args = sys.argv[1:]
if kind == "stale" and "-j" in args and "Submit" in args[args.index("-o") + 1]:
    for job in args[args.index("-j") + 1].split(","):
        print(f"{{job}}|COMPLETED|0:0|0:0|2020-01-01T00:00:00|an/old-job")
sys.stdout.write(real.stdout)
sys.stderr.write(real.stderr)
sys.exit(real.returncode)
'''


@pytest.fixture
def slurm(slurm_cluster):
    return slurm_cluster


def with_sacct(env: dict, folder: Path, kind: str) -> dict:
    """`env` with a stand-in sacct of this kind first on PATH (the jobs inherit it too)."""
    bin_dir = folder / f"bin-{kind}"
    bin_dir.mkdir()
    script = bin_dir / "sacct"
    real = shutil.which("sacct", path=env["PATH"])
    script.write_text(SACCT.format(python=sys.executable, kind=kind, count=str(bin_dir / "calls"), real=real))
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return {**env, "PATH": f"{bin_dir}{os.pathsep}{env['PATH']}"}


def submit(sweep: Path, env: dict, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "zbpscale.submit", str(sweep), "--executor", "slurm", *args],
                          cwd=sweep.parent, env=env, capture_output=True, text=True, timeout=timeout)


def job_ids(run_dir: Path) -> list[str]:
    return [a["job_id"] for a in read_attempts(run_dir) if a["event"] == "submitted"]


def final_state(env: dict, job: str, timeout: float = 600) -> str:
    seen = {}

    def final() -> bool:
        out = subprocess.run(["sacct", "-n", "-X", "-P", "-j", job, "-o", "State"], env=env, capture_output=True,
                             text=True, timeout=30)
        seen["state"] = out.stdout.strip().split(" ")[0]
        return seen["state"] in FINAL

    wait_until(final, f"job {job} to finish", timeout, every=1)
    return seen["state"]


def status(folder: Path, env: dict) -> tuple[int, list[dict]]:
    out = subprocess.run([sys.executable, "-m", "zbpscale.cli", "status", str(folder), "--json"], env=env,
                         capture_output=True, text=True, timeout=120)
    return out.returncode, json.loads(out.stdout)[folder.name]


def queued_names(env: dict) -> list[str]:
    """The name of every queued job, an array's elements one by one (`-r`)."""
    out = subprocess.run(["squeue", "-h", "-r", "-o", "%j"], env=env, capture_output=True, text=True, timeout=30)
    return out.stdout.split()



def ends(run: Path) -> list[str]:
    """How each attempt ended; every end record names its executor (#55), whoever wrote it."""
    found = [a for a in read_attempts(run) if a["event"] == "end"]
    assert all(a.get("executor") == "slurm" for a in found), found
    return [a["why"] for a in found]


@pytest.mark.parametrize("kind", ["lagging", "down", "stale"])
def test_two_submits_and_a_wait_give_each_run_one_job_whatever_accounting_says(tmp_path, slurm, data_dir, kind):
    """The measured case: two plain submits at once on a fresh sweep, then `submit --wait`, with accounting
    lagging, down, or answering an old job under a reused id. One job per run, exit 0, never 'failed'."""
    _, real_env = slurm
    env = with_sacct(real_env, tmp_path, kind)
    sweep = write_sweep(tmp_path, f"acct{kind}", data_dir, steps=6, arms=("bp", "zbp_n4"))
    both = [subprocess.Popen([sys.executable, "-m", "zbpscale.submit", str(sweep), "--executor", "slurm"],
                             cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            for _ in range(2)]
    outs = [p.communicate(timeout=120)[0] for p in both]
    assert all(p.returncode == 0 for p in both), outs
    runs = [tmp_path / "jobs" / f"acct{kind}" / n for n in ("nano-bp", "nano-zbp_n4")]
    assert queued_names(real_env).count(f"acct{kind}/nano") <= len(runs)  # the size's array: a job per run
    waited = submit(sweep, env, "--wait", timeout=600)
    assert waited.returncode == 0 and "all 2 runs complete" in waited.stdout, waited.stdout + waited.stderr
    assert "failed" not in waited.stdout and "left alone" in waited.stdout, waited.stdout
    for run in runs:
        (job,) = job_ids(run)  # one job each, over three submits
        assert final_state(real_env, job) == "COMPLETED" and ends(run) == ["completed"]
        assert [r["step"] for r in read_records(run) if r["kind"] == "train"] == list(range(6))
    code, rows = status(runs[0].parent, env)
    assert code == 0 and [r["state"] for r in rows] == ["complete", "complete"]


def test_accounting_stopped_mid_sweep_and_started_again(tmp_path, slurm, data_dir):
    """slurmdbd stopped (by its recorded PID) while the jobs are queued and running: status never calls a live
    run failed; once they finish, status says complete (and that accounting is not answering); slurmdbd
    started again, accounting catches up with the truth."""
    folder, env = slurm
    sweep = write_sweep(tmp_path, "nodbd", data_dir, steps=60, arms=("bp", "zbp_n4"))
    first = submit(sweep, env)
    assert first.returncode == 0, first.stdout + first.stderr
    runs = [tmp_path / "jobs" / "nodbd" / n for n in ("nano-bp", "nano-zbp_n4")]
    slurm_local.stop_daemon(folder, "slurmdbd")
    try:
        seen = set()

        def finished() -> bool:  # status, between looks, never calls a live run failed
            if all(RunFolder(r).complete.exists() for r in runs):
                return True
            code, rows = status(runs[0].parent, env)
            seen.update(r["state"] for r in rows)
            assert {r["state"] for r in rows} <= {"queued", "running", "complete"}, rows
            return False

        wait_until(finished, "the runs to finish with accounting down", 600, every=1)
        again = submit(sweep, env)  # accounting down: nothing is submitted again
        assert again.returncode == 0 and "-> job" not in again.stdout, again.stdout + again.stderr
        assert "running" in seen
    finally:
        slurm_local.restart_daemon(folder, "slurmdbd")
    for run in runs:
        (job,) = job_ids(run)
        assert final_state(env, job) == "COMPLETED" and ends(run) == ["completed"]
    code, rows = status(runs[0].parent, env)
    assert code == 0 and [r["state"] for r in rows] == ["complete", "complete"]


def test_scancel_with_accounting_down_is_a_cancel_not_a_preemption_and_resubmit_resumes(tmp_path, slurm, data_dir,
                                                                                       straight_run):
    """Fault: `scancel <job>` on a running job whose accounting does not answer (inside the job too). SLURM sends
    SIGTERM, which is also what a preemption sends where preempt_send_user_signal is off; the controller calls the
    job CANCELLED at once, so the run checkpoints and ends cancelled, not requeued as a preemption. Status says
    cancelled; the next submit resumes it, bit for bit."""
    _, real_env = slurm
    env = with_sacct(real_env, tmp_path, "down")
    sweep = write_sweep(tmp_path, "cancelled", data_dir, steps=200)
    assert submit(sweep, env).returncode == 0
    run = tmp_path / "jobs" / "cancelled" / "nano-bp"
    (job,) = job_ids(run)
    wait_until(lambda: sum(r["kind"] == "train" for r in read_records(run)) >= 5, "the run to train 5 steps", 300,
               every=0.3)
    subprocess.run(["scancel", job], env=real_env, check=True, timeout=30)
    assert final_state(real_env, job) == "CANCELLED"
    wait_until(lambda: not subprocess.run(["squeue", "-h", "-j", job, "-t", "PD,R,CG"], env=real_env,
                                          capture_output=True, text=True, timeout=30).stdout.strip(),
               "the cancelled job to leave the queue", 120, every=0.5)
    assert [(a["why"], a["reason"]) for a in read_attempts(run) if a["event"] == "end"] == [
        ("cancelled", "scancel; checkpointed")]
    assert sum(a["event"] == "start" for a in read_attempts(run)) == 1 and not RunFolder(run).complete.exists()
    code, (row,) = status(run.parent, env)
    assert code == 3 and row["state"] == "cancelled" and row["preemptions"] == 0
    out = submit(sweep, env)
    assert "nano-bp: resume -> job" in out.stdout, out.stdout + out.stderr
    assert final_state(real_env, job_ids(run)[-1]) == "COMPLETED"
    assert losses(run) == losses(straight_run(run))


@pytest.mark.slow
def test_cancel_with_the_controller_down_stops_the_run_through_its_folder(tmp_path, slurm, data_dir, straight_run):
    """#59 item 2: slurmctld stopped (by its recorded PID) while a run trains. `zbpscale cancel` said `nothing to
    cancel` and exited 0, and the run trained on. Now it asks through the run folder's CANCEL stamp, which the
    trainer honours at its next step: the attempt checkpoints and ends cancelled, the command says so and exits 0,
    and no step follows. With the controller back, a submit resumes the run, bit for bit."""
    folder, env = slurm
    sweep = write_sweep(tmp_path, "ctlddown", data_dir, steps=150, ckpt_every=10)  # test_submit_slurm's reference
    # the first attempt trains >= 30 s (a step floor), ten times what the stop and the cancel take; the resume
    # submitted below, without the floor, trains at full speed
    assert submit(sweep, step_floor_env(tmp_path / "site", 0.2, env, first_attempt=True)).returncode == 0
    run = tmp_path / "jobs" / "ctlddown" / "nano-bp"
    wait_until(lambda: len(losses(run)) >= 5, "the run to train 5 steps", 300, every=0.3)
    slurm_local.stop_daemon(folder, "slurmctld")
    try:
        out = subprocess.run([sys.executable, "-m", "zbpscale.cli", "cancel", str(sweep), "--timeout", "300"],
                             env=env, capture_output=True, text=True, timeout=600)
        assert out.returncode == 0, out.stdout + out.stderr
        assert "asked through its run folder (CANCEL)" in out.stdout and "stopped: nano-bp" in out.stdout, out.stdout
        assert [(a["why"], a["reason"]) for a in read_attempts(run) if a["event"] == "end"] == [
            ("cancelled", "zbpscale cancel; checkpointed")]
        trained = len(losses(run))
        assert trained < 150 and read_records(run)[-1]["kind"] == "end", read_records(run)[-1]
        assert "CANCEL stamp" in read_records(run)[-1]["reason"]
    finally:
        slurm_local.restart_daemon(folder, "slurmctld")
    (job,) = job_ids(run)
    wait_until(lambda: not subprocess.run(["squeue", "-h", "-j", job, "-t", "PD,R,CG"], env=env,
                                          capture_output=True, text=True, timeout=30).stdout.strip(),
               "the job's end to reach the controller once it is back", 300, every=0.5)
    assert len(losses(run)) == trained  # nothing trained after the stop
    out = submit(sweep, env)
    assert "nano-bp: resume -> job" in out.stdout, out.stdout + out.stderr
    assert final_state(env, job_ids(run)[-1]) == "COMPLETED"
    assert losses(run) == losses(straight_run(run))


@pytest.mark.slow
def test_auto_with_a_silent_controller_waits_then_refuses_rather_than_train_here(tmp_path, slurm, data_dir):
    """#59 item 3: SLURM configured (SLURM_CONF), slurmctld stopped. `--executor auto` took the local queue and
    trained the sweep on the submitting machine, without a word; now it waits (ZBPSCALE_SLURM_WAIT_S, 60 s by
    default) and refuses in one line naming `--executor local`: nothing submitted, no local queue started. With the
    controller back, the same command submits to SLURM."""
    folder, env = slurm
    sweep = write_sweep(tmp_path, "silent", data_dir, steps=5)
    slurm_local.stop_daemon(folder, "slurmctld")
    try:
        out = subprocess.run([sys.executable, "-m", "zbpscale.submit", str(sweep)], cwd=tmp_path, capture_output=True,
                             text=True, timeout=120, env={**env, "ZBPSCALE_SLURM_WAIT_S": "3"})
    finally:
        slurm_local.restart_daemon(folder, "slurmctld")
    assert out.returncode == 2, out.stdout + out.stderr
    (line,) = out.stderr.strip().splitlines()
    assert "SLURM is configured here (SLURM_CONF=" in line and "within 3 s; nothing submitted" in line, line
    assert "--executor local" in line and "Traceback" not in out.stderr
    run = tmp_path / "jobs" / "silent" / "nano-bp"
    assert not read_attempts(run) and not (tmp_path / "jobs" / ".localq").exists()  # no local queue either
    again = subprocess.run([sys.executable, "-m", "zbpscale.submit", str(sweep)], cwd=tmp_path, capture_output=True,
                           text=True, timeout=120, env=env)
    assert again.returncode == 0 and "nano-bp: new -> job" in again.stdout, again.stdout + again.stderr
    assert read_attempts(run)[0]["executor"] == "slurm"
    assert final_state(env, job_ids(run)[0]) == "COMPLETED"


@pytest.mark.slow
def test_with_the_controller_down_a_failed_run_stays_failed_and_the_outage_is_one_line(tmp_path, slurm, data_dir):
    """#59 item 9: a run failed (its trainer killed -9, no crash restart allowed) beside one that trains; slurmctld
    stopped. The failed run read `unknown` and status's exit status went 1 -> 3, with a line per run for the
    outage; a decided run keeps its state and the exit status, and the outage is one line."""
    folder, env = slurm
    sweep = write_sweep(tmp_path, "outage", data_dir, steps=600, arms=("bp", "zbp_n4"), max_crashes=0)
    assert submit(sweep, env).returncode == 0
    victim, other = (tmp_path / "jobs" / "outage" / n for n in ("nano-bp", "nano-zbp_n4"))
    wait_until(lambda: len(losses(victim)) >= 3 and len(losses(other)) >= 1, "both runs to train", 300, every=0.3)
    os.kill(json.loads((victim / ".ranks" / "0.json").read_text())["pid"], signal.SIGKILL)
    wait_until(lambda: ends(victim) == ["failed"], "the killed run's end", 120, every=0.3)
    code, rows = status(victim.parent, env)
    assert code == 1 and {r["run"]: r["state"] for r in rows} == {"nano-bp": "failed", "nano-zbp_n4": "running"}
    slurm_local.stop_daemon(folder, "slurmctld")
    try:
        code, rows = status(victim.parent, env)
        plain = subprocess.run([sys.executable, "-m", "zbpscale.cli", "status", str(victim.parent)], env=env,
                               capture_output=True, text=True, timeout=120)
    finally:
        slurm_local.restart_daemon(folder, "slurmctld")
    assert code == 1 and {r["run"]: r["state"] for r in rows} == {"nano-bp": "failed", "nano-zbp_n4": "unknown"}
    lines = (plain.stdout + plain.stderr).splitlines()
    assert plain.returncode == 1 and sum("not answering" in ln for ln in lines) == 1, lines
    assert not [ln for ln in lines if ln.startswith("nano-zbp_n4: unknown")], lines
    subprocess.run([sys.executable, "-m", "zbpscale.cli", "cancel", str(sweep)], env=env, capture_output=True,
                   text=True, timeout=300)


def test_a_run_waiting_for_a_drained_node_says_so(tmp_path, slurm, data_dir):
    """#59 item 5: a job waiting for a node that is down or drained showed `queued` and nothing more; now status
    carries squeue's reason (a turn in line, Priority or Resources, is still not news)."""
    folder, env = slurm
    sweep = write_sweep(tmp_path, "drained", data_dir, steps=5)
    node = subprocess.run(["sinfo", "-h", "-N", "-o", "%N"], env=env, capture_output=True, text=True,
                          timeout=30).stdout.split()[0]
    subprocess.run(["scontrol", "update", f"nodename={node}", "state=drain", "reason=zbpscale-test"], env=env,
                   check=True, timeout=30)
    try:
        out = submit(sweep, env)
        assert out.returncode == 0, out.stdout + out.stderr
        run = tmp_path / "jobs" / "drained" / "nano-bp"

        def reason() -> str:
            code, rows = status(run.parent, env)
            return rows[0]["reason"] if rows[0]["state"] == "queued" else ""

        wait_until(lambda: "Nodes required for job are DOWN, DRAINED" in reason() or "ReqNodeNotAvail" in reason(),
                   "status to say why the job waits", 60, every=1)
    finally:
        subprocess.run(["scontrol", "update", f"nodename={node}", "state=resume"], env=env, timeout=30)
        subprocess.run([sys.executable, "-m", "zbpscale.cli", "cancel", str(sweep)], env=env, capture_output=True,
                       text=True, timeout=300)
        wait_until(lambda: "drain" not in subprocess.run(  # the next test on this cluster needs its node back
            ["sinfo", "-h", "-N", "-n", node, "-o", "%T"], env=env, capture_output=True, text=True,
            timeout=30).stdout.lower(), f"{node} to leave the drained state", 60, every=0.5)


PREPFAIL = """from zbpscale.sweep import Data, Resources, Size, Sweep, arm
CPU = Resources(gpus_per_node=0, tasks_per_node=1, cpus_per_task=1, time_min=30)
SWEEP = Sweep(name="prepfail", sizes=(Size(name="nano", global_batch=4, seq_len=32, tokens=4 * 32 * 3,
                                           resources=CPU),),
              arms=(arm("bp"),), data=Data(dir={data!r}, source={source!r}, workers=1),
              train=(("eval_every", 0), ("eval_batches", 1)), root={root!r})
"""


def test_a_failed_prep_job_fails_its_runs_and_a_submit_after_the_fix_replaces_them(tmp_path, slurm):
    """WikiText-103 offline: the prep job fails and SLURM holds the training job for ever
    (DependencyNeverSatisfied). `submit --wait` ends (exit 1) instead of waiting for ever, status says failed
    and names the prep log; with the sweep fixed, a plain submit cancels the held job and replaces it."""
    _, env = slurm
    env = {**env, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
    sweep = tmp_path / "prepfail.py"
    fields = {"data": str(tmp_path / "data"), "root": str(tmp_path / "jobs")}
    sweep.write_text(PREPFAIL.format(source="wikitext-103", **fields))
    waited = submit(sweep, env, "--wait", timeout=600)
    assert waited.returncode == 1 and "not complete: nano-bp" in waited.stdout, waited.stdout + waited.stderr
    run = tmp_path / "jobs" / "prepfail" / "nano-bp"
    (held,) = job_ids(run)
    code, (row,) = status(run.parent, env)
    assert code == 1 and row["state"] == "failed" and "data-prep job failed" in row["reason"]
    assert "prep-data-logs" in row["log"] and Path(row["log"]).is_file()
    sweep.write_text(PREPFAIL.format(source="embedded", **fields))  # the fix
    out = submit(sweep, env)
    assert out.returncode == 0 and f"job {held} cancelled" in out.stdout and "prep job" in out.stdout, out.stdout
    assert final_state(env, held) == "CANCELLED"
    new = job_ids(run)[-1]
    assert new != held and final_state(env, new) == "COMPLETED" and RunFolder(run).complete.exists()
