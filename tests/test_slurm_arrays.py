"""Job arrays and submit limits (#42 items 1-2), against a real SLURM (tools/slurm_local.py, with slurmdbd and
`AccountingStorageEnforce=limits`), training on CPU.

Compared: the sbatch calls a submit makes (counted by tools/count_slurm_calls.py's shims around the real clients)
with the number of sizes; the attempts of every run with what happened to it alone (a requeued element restarts
alone, the others run once); the per-step losses of a requeued element with an uninterrupted run (bitwise); the
array's throttle with the runs' attempt times; the jobs of a sweep submitted under a per-user MaxSubmitJobs of 4
with one job per run and every run complete. Without SLURM: the ladder's sbatch calls through stand-in clients
(the ladder asks for GPUs the test SLURM does not have).
"""

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from conftest import load_tool, losses, wait_until
from zbpscale.jobs import tuning
from zbpscale.jobs.sweep import load_sweep
from zbpscale.run.folder import RunFolder
from zbpscale.run.history import read_attempts

REPO = Path(__file__).resolve().parents[1]
FINAL = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "OUT_OF_MEMORY", "NODE_FAIL", "BOOT_FAIL", "DEADLINE"}
count_calls = load_tool("count_slurm_calls")


def array_sweep(folder: Path, name: str, data_dir: Path, *, steps: dict[str, int], arms=("bp", "zbp_n4"),
                seeds=(0,), array_parallelism: int = 0, ckpt_every: int = 0, tune: str = "None") -> Path:
    """A sweep file of CPU runs: each size of `steps` (a preset: nano, tiny) with that many steps of 4 x 32 tokens,
    x arms x seeds, polling the scheduler every 10 s (the least a sweep may ask); `tune`: its Tune(...), if any."""
    sizes = ", ".join(f"Size(name={s!r}, global_batch=4, seq_len=32, tokens=4 * 32 * {n}, lr=3e-3, resources=CPU)"
                      for s, n in steps.items())
    path = folder / f"{name}.py"
    path.write_text(textwrap.dedent(f"""\
        from zbpscale.sweep import Data, Resources, Size, Sweep, Tune, arm

        CPU = Resources(gpus_per_node=0, tasks_per_node=1, cpus_per_task=1, time_min=30)
        SWEEP = Sweep(
            name={name!r},
            sizes=({sizes},),
            arms=({", ".join(f"arm({a!r})" for a in arms)},),
            seeds={tuple(seeds)!r},
            data=Data(dir={str(data_dir)!r}, source="embedded"),
            train=(("eval_every", 0), ("eval_batches", 1), ("ckpt_every", {ckpt_every}), ("ckpt_every_s", 0)),
            root={str(folder / "jobs")!r},
            signal_delay_s=30,
            array_parallelism={array_parallelism},
            poll_s=10,
            tune={tune},
        )
        """))
    return path


def submit(sweep: Path, env: dict, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    out = subprocess.run([sys.executable, "-m", "zbpscale.submit", str(sweep), "--executor", "slurm", *args],
                         cwd=sweep.parent, env=env, capture_output=True, text=True, timeout=timeout)
    assert out.returncode == 0, out.stdout + out.stderr
    return out


def counted(env: dict, folder: Path) -> tuple[dict, Path]:
    """`env` with counting shims first on PATH, and the log they write."""
    log = folder / "calls.tsv"
    shims = count_calls.make_shims(folder / "shims", log)
    return {**env, "PATH": f"{shims}{os.pathsep}{env['PATH']}"}, log


def sbatch_calls(log: Path) -> int:
    """The sbatch calls the submit itself made (a job's own calls are apart)."""
    calls, _ = count_calls.read_log(log) if log.exists() else ([], {})
    return sum(c.name == "sbatch" and not c.job for c in calls)


def job_ids(run_dir: Path) -> list[str]:
    return [a["job_id"] for a in read_attempts(run_dir) if a["event"] == "submitted"]


def sacct_state(env: dict, job: str) -> str:
    out = subprocess.run(["sacct", "-n", "-X", "-P", "-j", job, "-o", "State"], env=env, capture_output=True,
                         text=True, timeout=30)
    return out.stdout.strip().split(" ")[0] if out.stdout.strip() else ""


def wait_final(env: dict, job: str, timeout: float = 600) -> str:
    seen = {}

    def final() -> bool:
        seen["state"] = sacct_state(env, job)
        return seen["state"] in FINAL

    wait_until(final, f"job {job} to finish", timeout, every=1)
    return seen["state"]



def attempts(run_dir: Path) -> list[tuple[float, float]]:
    """(start, end) of each attempt of a run."""
    events = read_attempts(run_dir)
    starts = [a["time"] for a in events if a["event"] == "start"]
    ends = [a["time"] for a in events if a["event"] == "end"]
    return list(zip(starts, ends))


def squeue_reason(env: dict, job: str) -> str:
    out = subprocess.run(["squeue", "-h", "-r", "-j", job, "-o", "%T|%r"], env=env, capture_output=True, text=True,
                         timeout=30)
    return out.stdout.strip()


@pytest.mark.slurm
@pytest.mark.slow
def test_a_size_s_runs_go_as_one_throttled_array_and_a_requeued_element_restarts_alone(tmp_path, slurm_cluster,
                                                                                       data_dir, straight_run):
    """Two sizes x two arms: two sbatch calls (one array per size, `%1`), job ids `A_i`. The running element of
    nano is interrupted (USR2: checkpoint, `scontrol requeue A_i`): it alone restarts, under the same id, and ends
    with the losses of an uninterrupted run; every other run has one attempt. The throttle holds: no two runs of a
    size ever train at once. status and the run folders name the elements' logs."""
    env, log = counted(slurm_cluster[1], tmp_path)
    sweep = array_sweep(tmp_path, "arr", data_dir, steps={"nano": 120, "tiny": 6}, array_parallelism=1,
                        ckpt_every=10)
    out = submit(sweep, env)
    runs = {n: tmp_path / "jobs" / "arr" / n for n in ("nano-bp", "nano-zbp_n4", "tiny-bp", "tiny-zbp_n4")}
    ids = {n: job_ids(r) for n, r in runs.items()}
    assert all(len(j) == 1 for j in ids.values()), ids
    arrays = {n: j[0].split("_")[0] for n, j in ids.items()}
    assert sbatch_calls(log) == 2 and len(set(arrays.values())) == 2, out.stdout  # one sbatch per size
    assert arrays["nano-bp"] == arrays["nano-zbp_n4"] and arrays["tiny-bp"] == arrays["tiny-zbp_n4"]
    assert {j[0].split("_")[1] for j in ids.values()} == {"0", "1"}
    victim, job = runs["nano-bp"], ids["nano-bp"][0]
    wait_until(lambda: RunFolder(victim).list_checkpoints() and len(losses(victim)) >= 15, "nano-bp to checkpoint",
               every=0.3)
    assert squeue_reason(env, ids["nano-zbp_n4"][0]) == "PENDING|JobArrayTaskLimit"  # %1: the other waits
    subprocess.run(["scancel", "--signal=USR2", job], env=env, check=True, timeout=30)
    wait_until(lambda: sum(a["event"] == "start" for a in read_attempts(victim)) >= 2, "nano-bp to restart", every=0.3)
    for name, run in runs.items():
        assert wait_final(env, ids[name][0]) == "COMPLETED", name
        assert RunFolder(run).complete.exists()
    ends = {n: [a["why"] for a in read_attempts(r) if a["event"] == "end"] for n, r in runs.items()}
    assert ends == {"nano-bp": [ends["nano-bp"][0], "completed"], "nano-zbp_n4": ["completed"],
                    "tiny-bp": ["completed"], "tiny-zbp_n4": ["completed"]}, ends
    assert ends["nano-bp"][0] in ("preempted", "timeout")
    assert all(len(job_ids(r)) == 1 for r in runs.values())  # requeued in place: no new submission
    assert losses(victim) == losses(straight_run(victim))
    for size in ("nano", "tiny"):  # the throttle: attempts of one size never overlap
        spans = sorted(s for n, r in runs.items() if n.startswith(size) for s in attempts(r))
        assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:])), spans
    log_file = RunFolder(victim).log_path(read_attempts(victim)[0], job)
    assert log_file.is_file() and log_file.name == f"{job}_0_log.out"
    assert sbatch_calls(log) == 2  # nothing submitted by the requeue


@pytest.mark.slurm
@pytest.mark.slow
def test_cancel_and_status_understand_array_elements(tmp_path, slurm_cluster, data_dir):
    """An array of two with `%1`: status calls the waiting element queued and the running one running; cancelling
    the waiting element drops it alone (gone from the queue, its end recorded), the running one goes on; cancelling that
    one checkpoints it; a submit resumes both, as a new array."""
    env = slurm_cluster[1]
    sweep = array_sweep(tmp_path, "arrc", data_dir, steps={"nano": 400}, array_parallelism=1, ckpt_every=10)
    submit(sweep, env)
    runs = {n: tmp_path / "jobs" / "arrc" / n for n in ("nano-bp", "nano-zbp_n4")}
    (first,), (second,) = (job_ids(r) for r in runs.values())
    wait_until(lambda: len(losses(runs["nano-bp"])) >= 3, "nano-bp to train", every=0.3)
    rows = status_rows(tmp_path / "jobs" / "arrc", env)
    assert (rows["nano-bp"]["state"], rows["nano-zbp_n4"]["state"]) == ("running", "queued"), rows
    cancel = [sys.executable, "-m", "zbpscale.cli", "cancel", str(sweep)]
    out = subprocess.run([*cancel, "--only", "nano-zbp_n4"], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    # the controller's word, not sacct's: a waiting element cancelled before its array's record reached slurmdbd is
    # never in accounting (seen in CI: sacct knew nothing of it 600 s on)
    wait_until(lambda: not squeue_reason(env, second), f"{second} to leave the queue", timeout=120, every=0.3)
    assert squeue_reason(env, first).startswith("RUNNING|"), squeue_reason(env, first)
    assert [a["why"] for a in read_attempts(runs["nano-zbp_n4"]) if a["event"] == "end"] == ["cancelled"]
    out = subprocess.run(cancel, env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 and "stopped: nano-bp" in out.stdout, out.stdout + out.stderr
    rows = status_rows(tmp_path / "jobs" / "arrc", env)
    assert {r["state"] for r in rows.values()} == {"cancelled"}, rows
    again = submit(sweep, env)
    assert "nano-bp: resume -> job" in again.stdout and "nano-zbp_n4: new -> job" in again.stdout, again.stdout
    assert job_ids(runs["nano-bp"])[-1].split("_")[0] == job_ids(runs["nano-zbp_n4"])[-1].split("_")[0]
    subprocess.run(cancel, env=env, capture_output=True, text=True, timeout=300)  # stopped: no job left queued


@pytest.mark.slurm
@pytest.mark.slow
def test_cancel_stops_a_running_element_while_its_array_has_waiting_ones(tmp_path, slurm_cluster, data_dir,
                                                                         straight_run):
    """#59 item 1: an array of three runs with `%1`. Cancelling the running element while the two others wait
    (`scancel --signal=USR2 A_0` then signals it again and again for ~50 s and exits 229: the cancel failed and the
    waiting elements ran to the end) stops it, checkpointed, and leaves them waiting; the next one starts, and a
    cancel of the whole sweep stops it and drops the last: exit 0 each time, every run's end recorded as cancelled,
    nothing of the array left in the queue to start later. A submit resumes the first; it ends as a straight run,
    step for step."""
    env = slurm_cluster[1]
    sweep = array_sweep(tmp_path, "arrw", data_dir, steps={"nano": 300}, arms=("bp",), seeds=(0, 1, 2),
                        array_parallelism=1, ckpt_every=10)
    submit(sweep, env)
    runs = {n: tmp_path / "jobs" / "arrw" / n for n in ("nano-bp", "nano-bp-s1", "nano-bp-s2")}
    jobs = {n: job_ids(r)[0] for n, r in runs.items()}
    assert len({j.split("_")[0] for j in jobs.values()}) == 1, jobs  # one array
    first = next(n for n, j in jobs.items() if j.endswith("_0"))
    wait_until(lambda: len(losses(runs[first])) >= 3, f"{first} to train", every=0.3)
    cancel = [sys.executable, "-m", "zbpscale.cli", "cancel", str(sweep)]
    out = subprocess.run([*cancel, "--only", first], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 and f"stopped: {first}" in out.stdout, out.stdout + out.stderr
    assert [a["why"] for a in read_attempts(runs[first]) if a["event"] == "end"] == ["cancelled"]
    others = [n for n in runs if n != first]
    assert all(squeue_reason(env, jobs[n]) for n in others), {n: squeue_reason(env, jobs[n]) for n in others}
    wait_until(lambda: any(losses(runs[n]) for n in others), "the next element to train", every=0.3)
    out = subprocess.run(cancel, env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 and "could not be stopped" not in out.stderr, out.stdout + out.stderr
    assert not any(squeue_reason(env, j) for j in jobs.values()), {j: squeue_reason(env, j) for j in jobs.values()}
    ends = {n: [a["why"] for a in read_attempts(r) if a["event"] == "end"] for n, r in runs.items()}
    assert all(e == ["cancelled"] for e in ends.values()), ends
    again = submit(sweep, env, "--only", first, "--wait", timeout=900)
    assert f"{first}: resume -> job" in again.stdout, again.stdout + again.stderr
    assert losses(runs[first]) == losses(straight_run(runs[first]))



@pytest.mark.slurm
def test_an_element_cancelled_by_hand_while_waiting_is_cancelled_at_once(tmp_path, slurm_cluster, data_dir):
    """#59 item 6: `scancel A_2` of a waiting element (SLURM keeps no accounting record of it). Status said `queued:
    submitted, not yet visible to the scheduler` for 180 s, then `failed ... (log: .../A_2_submitted.pkl)`; with
    its array listed, the element is gone at once: cancelled before it started, no log pointer."""
    env = slurm_cluster[1]
    sweep = array_sweep(tmp_path, "byhand", data_dir, steps={"nano": 300}, arms=("bp",), seeds=(0, 1, 2),
                        array_parallelism=1)
    submit(sweep, env)
    runs = {n: tmp_path / "jobs" / "byhand" / n for n in ("nano-bp", "nano-bp-s1", "nano-bp-s2")}
    jobs = {n: job_ids(r)[0] for n, r in runs.items()}
    last = next(n for n, j in jobs.items() if j.endswith("_2"))
    wait_until(lambda: squeue_reason(env, jobs[last]).startswith("PENDING"), f"{jobs[last]} to be listed", 60)
    subprocess.run(["scancel", jobs[last]], env=env, check=True, timeout=30)
    wait_until(lambda: not squeue_reason(env, jobs[last]), f"{jobs[last]} to leave the queue", 60)
    rows = status_rows(tmp_path / "jobs" / "byhand", env)
    assert rows[last]["state"] == "cancelled" and "cancelled before it started" in rows[last]["reason"], rows[last]
    assert not rows[last].get("log"), rows[last]
    assert {rows[n]["state"] for n in runs if n != last} <= {"running", "queued"}, rows
    subprocess.run([sys.executable, "-m", "zbpscale.cli", "cancel", str(sweep)], env=env, capture_output=True,
                   text=True, timeout=300)

def status_rows(folder: Path, env: dict) -> dict[str, dict]:
    import json

    out = subprocess.run([sys.executable, "-m", "zbpscale.cli", "status", str(folder), "--json"], env=env,
                         capture_output=True, text=True, timeout=120)
    return {r["run"]: r for r in json.loads(out.stdout)[folder.name]}


def quiet_and_limiting(env: dict) -> None:
    """Skips where this SLURM does not enforce limits; waits for the jobs of earlier tests to leave the queue."""
    config = subprocess.run(["scontrol", "show", "config"], env=env, capture_output=True, text=True).stdout
    if "limits" not in next((ln for ln in config.splitlines() if ln.startswith("AccountingStorageEnforce")), ""):
        pytest.skip("this SLURM does not enforce limits (start it with tools/slurm_local.py of this release)")
    user = subprocess.run(["id", "-un"], capture_output=True, text=True).stdout.strip()
    wait_until(lambda: not subprocess.run(["squeue", "-h", "-r", "-u", user], env=env, capture_output=True,
                                          text=True).stdout.strip(),
               "the jobs of earlier tests to leave the queue (they count against the limit)", timeout=300, every=0.3)


def set_max_submit(env: dict, n: int) -> None:
    """MaxSubmitJobs of this user's association (-1: none), applied once the controller has it."""
    user = subprocess.run(["id", "-un"], capture_output=True, text=True).stdout.strip()
    subprocess.run(["sacctmgr", "-i", "modify", "user", user, "set", f"MaxSubmitJobs={n}"], env=env, check=True,
                   capture_output=True, text=True, timeout=30)
    def applied() -> bool:
        shown = subprocess.run(["scontrol", "show", "assoc_mgr", f"users={user}", "flags=assoc"], env=env,
                               capture_output=True, text=True, timeout=30).stdout
        return re.findall(r"MaxSubmitJobs=(\d*)", shown)[-1:] == [str(n) if n >= 0 else ""]

    wait_until(applied, f"the controller to apply MaxSubmitJobs={n}", timeout=60, every=0.3)


@pytest.mark.slurm
@pytest.mark.slow
def test_a_sweep_over_a_submit_limit_submits_what_fits_then_the_rest_as_jobs_end(tmp_path, slurm_cluster, data_dir):
    """MaxSubmitJobs=4 for this user (slurmdbd, AccountingStorageEnforce=limits), 8 runs of one size: a plain submit
    submits 4 (a shorter array after the refused one), says in one line that 4 wait, records nothing of them and
    exits 0; `submit --wait` submits the rest as jobs end: every run submitted once, all complete."""
    folder, env = slurm_cluster
    sweep = array_sweep(tmp_path, "capped", data_dir, steps={"nano": 6}, seeds=(0, 1, 2, 3))
    quiet_and_limiting(env)
    set_max_submit(env, 4)
    try:
        first = submit(sweep, env)
        held = [ln for ln in first.stdout.splitlines() if "held by a submit limit" in ln]
        assert len(held) == 1 and held[0].startswith("4 runs not submitted") and "AssocMaxSubmitJobLimit" in held[0]
        assert "Traceback" not in first.stderr and "sbatch: error" not in first.stderr, first.stderr
        runs = sorted(p for p in (tmp_path / "jobs" / "capped").iterdir() if p.name.startswith("nano-"))
        assert len(runs) == 8 and sum(bool(job_ids(r)) for r in runs) == 4
        # #59 item 10: a refused sbatch leaves none of submitit's pickles (<uuid hex>.pkl) behind, only the jobs'
        left = [p.name for p in (tmp_path / "jobs" / "capped").rglob("*.pkl") if not re.match(r"\d+_", p.name)]
        assert left == [], left
        waited = submit(sweep, env, "--wait", timeout=900)
        assert "all 8 runs complete" in waited.stdout, waited.stdout + waited.stderr
    finally:
        set_max_submit(env, -1)
    for run in runs:
        assert len(job_ids(run)) == 1 and RunFolder(run).complete.exists(), run.name
        assert [a["why"] for a in read_attempts(run) if a["event"] == "end"] == ["completed"]


@pytest.mark.slurm
@pytest.mark.slow
def test_tuning_runs_held_by_a_submit_limit_go_as_jobs_end_then_the_final_runs(tmp_path, slurm_cluster, data_dir):
    """#53 under MaxSubmitJobs=2: a grid of 3 lrs (bp at nano) and 2 final runs (seeds 0, 1) waiting for it. A plain
    submit sends the grid as an array of 3, refused, then of 1 (half), holds the other 2 in one line and says the
    final runs wait for tuning; `submit --wait` sends those 2 as jobs end, then the final runs at the grid's best lr:
    every run submitted once, complete."""
    folder, env = slurm_cluster
    sweep = array_sweep(tmp_path, "tuned_capped", data_dir, steps={"nano": 6}, arms=("bp",), seeds=(0, 1),
                        tune="Tune(sizes=('nano',), grid=(0.5, 1.0, 2.0), extend=0)")
    quiet_and_limiting(env)
    set_max_submit(env, 2)
    try:
        first = submit(sweep, env)
        held = [ln for ln in first.stdout.splitlines() if "held by a submit limit" in ln]
        assert len(held) == 1 and held[0].startswith("2 runs not submitted"), first.stdout
        assert first.stdout.count("wait (tuning)") == 2, first.stdout
        root = tmp_path / "jobs" / "tuned_capped"
        grid = sorted(p for p in root.iterdir() if "-lr" in p.name)
        assert [p.name for p in grid] == ["nano-bp-lr1.5e-3", "nano-bp-lr3e-3", "nano-bp-lr6e-3"]
        assert sum(bool(job_ids(r)) for r in grid) == 1
        waited = submit(sweep, env, "--wait", timeout=900)
        assert "all 5 runs complete" in waited.stdout, waited.stdout + waited.stderr
    finally:
        set_max_submit(env, -1)
    runs, tuned = tuning.planned(load_sweep(sweep))
    assert len(runs) == 5
    for run in runs:
        assert len(job_ids(run.run_dir)) == 1 and RunFolder(run.run_dir).complete.exists(), run.name
    losses = {r.lr: tuning.final_loss(r) for r in runs if r.role == "tuning"}
    best = min(losses, key=lambda lr: (losses[lr], lr))
    assert [r.lr for r in runs if r.role == "final"] == [best, best] and tuned.choices["nano", "bp"].lr == best


def test_the_ladder_is_one_sbatch_per_size_and_one_per_run_without_arrays(tmp_path):
    """sweeps/ladder.py (4 sizes x 3 arms x 3 seeds, data not prepared) through stand-in SLURM clients that
    accept every job: its final runs without lr tuning, 1 prep + 4 arrays; with `arrays=False`, 1 prep + 36 jobs;
    as shipped (#53), its tuning first: 1 prep + an array of 15 grid runs at s60 and at s124, the final runs
    waiting."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "sbatch").write_text(f"""#!/bin/sh
n=$(($(cat {bin_dir}/n 2>/dev/null || echo 100) + 1)); echo $n > {bin_dir}/n
echo "$(grep -ho 'job-name=.*' "$1") $(grep -ho 'array=.*' "$1")" >> {bin_dir}/calls
echo "Submitted batch job $n"
""")
    for name in ("squeue", "sacct", "sinfo"):
        (bin_dir / name).write_text("#!/bin/sh\nexit 0\n")
    for script in bin_dir.iterdir():
        script.chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}
    for arrays, tuned, calls in ((True, False, 1 + 4), (False, False, 1 + 36), (True, True, 1 + 2)):
        home = tmp_path / f"arrays-{arrays}-{tuned}"
        (home / "sweeps").mkdir(parents=True)
        text = (REPO / "sweeps" / "ladder.py").read_text()
        if not tuned:
            text, n = re.subn(r"\n    tune=Tune\(.*\),\n", "\n", text)
            assert n == 1
        if not arrays:
            text = text.replace("    seeds=(0, 1, 2),", "    seeds=(0, 1, 2),\n    arrays=False,")
        (home / "sweeps" / "ladder.py").write_text(text)
        (bin_dir / "calls").unlink(missing_ok=True)
        out = subprocess.run([sys.executable, "-m", "zbpscale.submit", "sweeps/ladder.py", "--executor", "slurm"],
                             cwd=home, env=env, capture_output=True, text=True, timeout=300)
        assert out.returncode == 0, out.stdout + out.stderr
        made = sorted((bin_dir / "calls").read_text().splitlines())
        assert len(made) == calls, made
        if tuned:  # a size's grid (3 arms x 5 lrs) in one array; the final runs wait for it
            assert made == ["job-name=ladder/prep-data "] + [f"job-name=ladder/{s} array=0-14%15"
                                                              for s in ("s124", "s60")], made
            assert out.stdout.count("-> job") == 30 and out.stdout.count("wait (tuning)") == 36
            continue
        if arrays:  # each size's 9 runs in one array, no throttle of our own
            assert made == ["job-name=ladder/prep-data "] + [f"job-name=ladder/{s} array=0-8%9"
                                                              for s in sorted(("s60", "s124", "s350", "s1b"))], made
        assert out.stdout.count("-> job") == 36
