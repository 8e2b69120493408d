"""`zbpscale submit` when the sweep file changed under a half-done sweep (jobs/sweep_edits.py, #33 item 2).

A sweep of two nano runs: nano-bp trained 4 of 8 steps and stopped at a checkpoint; nano-bp-s1's folder was written
by the first submit but it never started. Then the sweep file's lr and eval_every change. Compared: every byte of
the jobs folder before and after a dry run (a dry run writes nothing); the config each run then trains with (its
start record) with the sweep file's values, the run that never started taking all of them, the one that trained
keeping its own unless --apply-changes gives it the fields safe on resume; and, for those, its per-step losses
with a straight run of its original config in its own process (bitwise: eval and checkpoint cadence change what
is measured, not what is trained). A size removed from the sweep file while its run's job waits: the line that
names it in submit, its dry run and status, against the job its run folder recorded, and the cancel command that
line gives against the job a stand-in `scancel` was asked to drop.
"""

import hashlib
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

from conftest import losses, trainer_env, wait_until
from zbpscale.run.folder import RunFolder
from zbpscale.run.records import read_records

SWEEP = """\
from zbpscale.sweep import Data, Resources, Size, Sweep, arm

CPU = Resources(nodes=1, gpus_per_node=0, tasks_per_node=1, cpus_per_task=1, time_min=30)
SWEEP = Sweep(
    name="edited",
    sizes=(Size(name="nano", global_batch=4, seq_len=32, tokens=4 * 32 * 40, lr={lr}, resources=CPU),),
    arms=(arm("bp"),),
    seeds=(0, 1),
    data=Data(dir={data!r}, source="embedded"),
    train=(("eval_every", {eval_every}), ("eval_batches", 1), ("ckpt_every", 2), ("ckpt_every_s", 0)),
)
"""


def write(sweep: Path, data_dir: Path, *, lr: float, eval_every: int) -> None:
    sweep.write_text(SWEEP.format(lr=lr, data=str(data_dir), eval_every=eval_every))


def zbpscale(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    out = subprocess.run([sys.executable, "-m", "zbpscale.submit", *args, "--executor", "local"], cwd=cwd,
                         capture_output=True, text=True, timeout=600, env=trainer_env(1))
    assert out.returncode == 0, out.stdout + out.stderr
    return out


def trained_config(run: Path) -> dict:
    return [r for r in read_records(run) if r["kind"] == "start"][-1]["config"]



def half_done(tmp_path: Path, data_dir: Path) -> tuple[Path, Path, Path]:
    """The sweep file (40 steps, lr 3e-3, eval_every 3), nano-bp stopped by SIGUSR2 (as a time limit does) once it
    has a checkpoint, nano-bp-s1 written but never started; then the sweep file edited (lr 1e-3, eval_every 2)."""
    (tmp_path / "sweeps").mkdir()
    sweep = tmp_path / "sweeps" / "edited.py"
    write(sweep, data_dir, lr=3e-3, eval_every=3)
    from zbpscale.jobs.sweep import expand, load_sweep

    for run in expand(load_sweep(sweep)):
        run.write_folder()  # what the first submit leaves
    trained, fresh = tmp_path / "jobs" / "edited" / "nano-bp", tmp_path / "jobs" / "edited" / "nano-bp-s1"
    proc = subprocess.Popen([sys.executable, "-m", "zbpscale.train", "--run-dir", str(trained)], env=trainer_env(1),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    wait_until(lambda: RunFolder(trained).list_checkpoints(), "a first checkpoint", 240, proc=proc, every=0.02)
    proc.send_signal(signal.SIGUSR2)
    proc.communicate(timeout=120)
    assert proc.returncode == 75 and not read_records(fresh)  # checkpointed and stopped (EXIT_REQUEUE)
    write(sweep, data_dir, lr=1e-3, eval_every=2)
    return sweep, trained, fresh


def evals(run: Path) -> list[int]:
    return [r["step"] for r in read_records(run) if r["kind"] == "eval"]


def folder_bytes(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def test_an_edited_sweep_file_rewrites_a_run_not_started_and_names_what_a_trained_run_keeps(tmp_path, data_dir):
    sweep, trained, fresh = half_done(tmp_path, data_dir)
    before = folder_bytes(tmp_path / "jobs")
    plan = zbpscale(str(sweep), "--dry-run", cwd=tmp_path).stdout.replace("\n", " ")
    assert folder_bytes(tmp_path / "jobs") == before  # a dry run writes nothing
    assert ("nano-bp-s1: config.json will be rewritten from the sweep file, which changed since it was written (it "
            "has not trained yet): eval_every 3 -> 2, lr 0.003 -> 0.001") in " ".join(plan.split())
    said = " ".join(plan.split())
    assert ("nano-bp: the sweep file changed since it trained (eval_every 3 -> 2, lr 0.003 -> 0.001); it goes on as "
            "it was trained: --apply-changes applies eval_every (safe on resume); for lr, train a new run") in said

    out = zbpscale(str(sweep), "--wait", cwd=tmp_path)
    assert "nano-bp-s1: config.json rewritten from the sweep file" in " ".join(out.stdout.split())
    assert (trained_config(fresh)["lr"], trained_config(fresh)["eval_every"]) == (1e-3, 2)  # what the file says now
    assert (trained_config(trained)["lr"], trained_config(trained)["eval_every"]) == (3e-3, 3)  # as it was trained
    assert evals(fresh) == [d - 1 for d in range(1, 41) if d % 2 == 0]
    assert evals(trained) == [d - 1 for d in range(1, 41) if d % 3 == 0 or d == 40]


def test_apply_changes_gives_a_trained_run_the_fields_safe_on_resume_and_it_trains_bit_for_bit(tmp_path, data_dir):
    sweep, trained, fresh = half_done(tmp_path, data_dir)
    original = RunFolder(trained).config.read_text()
    reference = tmp_path / "reference"
    reference.mkdir()
    RunFolder(reference).config.write_text(original)
    straight = subprocess.run([sys.executable, "-m", "zbpscale.train", "--run-dir", str(reference)],
                              env=trainer_env(1), capture_output=True, text=True, timeout=300)
    assert straight.returncode == 0, straight.stdout + straight.stderr

    stopped = RunFolder(trained).list_checkpoints()[-1][0]
    out = zbpscale(str(sweep), "--wait", "--apply-changes", cwd=tmp_path).stdout
    said = " ".join(out.split())
    assert "nano-bp: --apply-changes applied eval_every 3 -> 2 (safe on resume; it takes them as it resumes)" in said
    assert "nano-bp: the sweep file changed since it trained (lr 0.003 -> 0.001)" in said
    resumed = trained_config(trained)
    assert (resumed["lr"], resumed["eval_every"]) == (3e-3, 2)
    assert evals(trained) == [d - 1 for d in range(1, 41)  # every 3 steps until the stop, then every 2
                              if (d % 3 == 0 if d <= stopped else d % 2 == 0) or d == 40]
    assert losses(trained) == losses(reference)  # the cadence changed, the training did not
    assert json.loads(RunFolder(trained).config.read_text())["eval_every"] == 2 != json.loads(original)["eval_every"]


TWO_SIZES = """\
from zbpscale.sweep import Data, Resources, Size, Sweep, arm

CPU = Resources(nodes=1, gpus_per_node=0, tasks_per_node=1, cpus_per_task=1, time_min=30)
SWEEP = Sweep(
    name="shrunk",
    sizes=tuple(Size(name=s, global_batch=4, seq_len=32, tokens=4 * 32 * 40, lr=3e-3, resources=CPU) for s in {sizes}),
    arms=(arm("bp"),),
    data=Data(dir={data!r}, source="embedded"),
)
"""


def fake_slurm(bin_dir: Path, pending: list[str], monkeypatch) -> Path:
    """Stand-ins on PATH: `squeue` listing the `pending` jobs as PENDING, `sacct` knowing nothing more, and
    `scancel` writing the job ids it was given to the file it returns."""
    bin_dir.mkdir()
    asked = bin_dir / "scancel.log"
    rows = "\\n".join(f"{job}|PENDING|None||" for job in pending)
    for name, body in (("squeue", f"printf '{rows}\\n'"), ("sacct", "true"), ("scancel", f'echo "$@" >> {asked}')):
        (bin_dir / name).write_text(f"#!/bin/sh\n{body}\n")
        (bin_dir / name).chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    return asked


def test_a_size_removed_while_its_job_is_queued_is_named_with_how_to_cancel_it(tmp_path, data_dir, monkeypatch):
    """Both runs of a sweep (nano, micro) submitted to SLURM and waiting (PENDING); then micro is removed from the
    sweep file. submit, its dry run and status named nothing about micro-bp, whose job would still train. Each now
    says it in one line with the job its folder recorded and the command to cancel it; that command drops exactly
    that job; a dry run and status write nothing."""
    from zbpscale.jobs.sweep import expand, load_sweep
    from zbpscale.run.history import History, record

    (tmp_path / "sweeps").mkdir()
    sweep = tmp_path / "sweeps" / "shrunk.py"
    sweep.write_text(TWO_SIZES.format(sizes=("nano", "micro"), data=str(data_dir)))
    jobs = {}
    for n, run in enumerate(expand(load_sweep(sweep))):  # what a SLURM submit leaves (executors/slurm.py)
        run_dir, jobs[run.name] = run.write_folder(), str(76 + n)
        record(run_dir, "submitted", job_id=jobs[run.name], executor="slurm", logs=str(RunFolder(run_dir).logs),
               retry=False, name=f"shrunk/{run.name}", grace_s=180.0)
    assert sorted(jobs) == ["micro-bp", "nano-bp"]
    asked = fake_slurm(tmp_path / "bin", list(jobs.values()), monkeypatch)
    sweep.write_text(TWO_SIZES.format(sizes=("nano",), data=str(data_dir)))  # micro removed

    said = (f"micro-bp: no longer in the sweep file, but its job {jobs['micro-bp']} is queued: it trains on unless "
            "cancelled (zbpscale cancel jobs/shrunk --only micro-bp)")
    before = folder_bytes(tmp_path / "jobs")
    plan = zbpscale(str(sweep), "--dry-run", cwd=tmp_path).stdout
    status = subprocess.run([sys.executable, "-m", "zbpscale.status", "sweeps/shrunk.py"], cwd=tmp_path,
                            capture_output=True, text=True, timeout=120, env=trainer_env(1))
    assert folder_bytes(tmp_path / "jobs") == before  # reads never write
    assert status.returncode == 3, status.stdout + status.stderr  # unfinished
    for out in (plan, status.stdout):
        assert said in " ".join(out.split()) and "nano-bp: no longer" not in out
    submitted = zbpscale(str(sweep), cwd=tmp_path).stdout
    assert said in " ".join(submitted.split()) and "left alone: nano-bp (queued)" in submitted

    cancel = subprocess.run(["zbpscale", "cancel", "jobs/shrunk", "--only", "micro-bp", "--no-wait"], cwd=tmp_path,
                            capture_output=True, text=True, timeout=120)
    assert cancel.returncode == 0, cancel.stdout + cancel.stderr
    assert asked.read_text().split() == [jobs["micro-bp"]]  # that job, and only it
    ends = {name: History.read(tmp_path / "jobs" / "shrunk" / name).last_end() for name in jobs}
    assert ends["micro-bp"]["why"] == "cancelled" and ends["micro-bp"]["job_id"] == jobs["micro-bp"]
    assert ends["nano-bp"] == {}


def test_status_of_a_sweep_file_judges_the_runs_it_plans_not_one_removed_and_stopped(tmp_path, data_dir):
    """micro-bp cancelled, then micro removed from the sweep file; nano-bp complete: `status SWEEP_FILE` shows
    micro-bp's folder and exits 0 with its sweep done, as submit --wait and collect judge it (it exited 3 for
    ever: a script's `status && collect` never went on; a removed run that had failed, 1)."""
    from zbpscale.jobs.sweep import expand, load_sweep
    from zbpscale.run.history import record

    (tmp_path / "sweeps").mkdir()
    sweep = tmp_path / "sweeps" / "shrunk.py"
    sweep.write_text(TWO_SIZES.format(sizes=("nano", "micro"), data=str(data_dir)))
    for n, run in enumerate(expand(load_sweep(sweep))):
        run_dir = run.write_folder()
        record(run_dir, "submitted", job_id=f"local-{n}", executor="local")
        record(run_dir, "start", job_id=f"local-{n}")
        why = "completed" if run.size.name == "nano" else "cancelled"
        record(run_dir, "end", job_id=f"local-{n}", executor="local", why=why, reason=why)
        if why == "completed":
            RunFolder(run_dir).complete.write_text("{}\n")
    sweep.write_text(TWO_SIZES.format(sizes=("nano",), data=str(data_dir)))  # micro removed

    def status() -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "zbpscale.status", "sweeps/shrunk.py"], cwd=tmp_path,
                              capture_output=True, text=True, timeout=120, env=trainer_env(1))

    shown = status()
    assert shown.returncode == 0 and "micro" in shown.stdout and "cancelled" in shown.stdout, shown.stdout
    sweep.write_text(TWO_SIZES.format(sizes=("nano", "micro"), data=str(data_dir)))  # planned again: to finish
    assert status().returncode == 3


def test_the_cancel_a_settings_note_gives_selects_exactly_the_runs_it_names():
    """Past three runs, the note's cancel read `--only <their names>`, which cannot be pasted. It names each size
    whose live runs all changed (`tiny-*`), else every run; whatever it gives selects those runs and no other live
    one, as cancel selects (text.matches)."""
    from zbpscale.jobs.sweep import Data, Size, Sweep, arm, expand
    from zbpscale.jobs.sweep_edits import only_of
    from zbpscale.text import matches, patterns

    sweep = Sweep(name="x", sizes=(Size(name="tiny", global_batch=8, tokens=8192),
                                   Size(name="mini", global_batch=8, tokens=8192)),
                  arms=(arm("bp"), arm("zbp_n4")), seeds=(0, 1, 2), data=Data(dir="d"))
    live = expand(sweep)
    tiny = [r for r in live if r.size.name == "tiny"]

    def chosen(only: str) -> list[str]:
        return [r.name for r in live if matches(r.name, patterns(only))]

    for alike, only in ((tiny, "tiny-*"), (live, "tiny-*,mini-*"), (tiny[:4], ",".join(r.name for r in tiny[:4])),
                        (tiny[:2], "tiny-bp,tiny-bp-s1")):
        assert only_of(alike, live) == only
        assert chosen(only) == [r.name for r in alike]
