"""Runs outlive releases: run folders, SLURM jobs and local-queue ranks made by older releases go on under this one.

Compared:
  - runs stopped mid-run (after 6 of 12 steps) by the real code of older releases, one per config format and then
    some (tests/fixtures/upgrade/README.md says how each was made), resumed by today's trainer: their per-step
    losses and validation losses against the same release's straight run of the same config. Bit for bit where the
    checkpoint's numerics fingerprint (torch build, CPU model and ISA; 1 thread) is this machine's and the release
    computed ZBP as today's does; within a relative 1e-4 otherwise (bit for bit across CPU models is not promised:
    docs/reproducibility.md "What bit for bit means"; the ZBP probe bits changed at 6d57bee, after the format-1
    release);
  - the fields of each config format in run/formats.py against the dataclasses (a new field without a migration
    fails here), and each migration against a literal table;
  - SLURM jobs pickled by older releases' code (submitit's own pickles, in the fixtures), unpickled and run by
    today's code, against the same references; what today's jobs pickle against the names zbpscale.entry promises;
  - the local queue's rank commands of today and of older drivers, run on a fixture;
  - status, collect and plot over every release's records, as the release left them and after the resume;
  - a SLURM job submitted by one release and requeued after an upgrade to another (a new TrainConfig field with
    its migration, the job module renamed) against a straight run, bitwise.
"""

from __future__ import annotations

import dataclasses
import json
import os
import pickle
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

import zbpscale
from zbpscale.errors import ConfigError
from zbpscale.run.config import ModelConfig, TrainConfig
from zbpscale.run.folder import RunFolder
from zbpscale.run.formats import FIELDS, FORMAT, MIGRATIONS, format_of, migrate
from zbpscale.run.history import read_attempts
from zbpscale.run.records import read_records
from zbpscale.train import numerics
from zbpscale.zbp.config import ZBPConfig

REPO = Path(__file__).resolve().parents[1]
FIXTURES = Path(__file__).resolve().parent / "fixtures" / "upgrade"
RELEASES = sorted(p.name for p in FIXTURES.glob("f*-*") if p.is_dir())  # f<format>-<commit>
ARMS = ("bp", "zbp_n4")
RTOL = 1e-4
ESTIMATOR_CHANGED = {"f1-b538eea": "its ZBP estimator drew other probe bits (changed at 6d57bee, 2026-11-30)"}
"""Releases whose ZBP arm today's code cannot repeat bit for bit, on any machine."""


def reference(release: str) -> dict:
    return json.loads((FIXTURES / release / "reference.json").read_text())


def train_losses(run: Path) -> tuple[list[int], list[float], list[float]]:
    records = read_records(run)
    train = [r for r in records if r["kind"] == "train"]
    return [r["step"] for r in train], [r["loss"] for r in train], [r["val_loss"] for r in records
                                                                     if r["kind"] == "eval"]


def why_not_bitwise(release: str, arm: str) -> str | None:
    """Why the resumed run cannot equal the old straight run bit for bit here, or None when it must."""
    if arm != "bp" and release in ESTIMATOR_CHANGED:
        return ESTIMATOR_CHANGED[release]
    ckpt = torch.load(RunFolder(FIXTURES / release / arm).list_checkpoints()[-1][1], weights_only=True)
    made = ckpt.get("numerics") or reference(release)["made_on"]  # older checkpoints: the fixture's record
    here = numerics.fingerprint(torch.device("cpu"))
    differs = [f"{k} {made[k]} here {here[k]}" for k in ("torch", "cpu", "cpu_capability") if made[k] != here[k]]
    return f"made on another machine ({', '.join(differs)})" if differs else None


def copy_fixture(release: str, arm: str, dest: Path) -> Path:
    shutil.copytree(FIXTURES / release / arm, dest)
    return dest


def one_thread_env(**extra: str) -> dict:
    return {**os.environ, "OMP_NUM_THREADS": "1", **extra}


# ---------------------------------------------------------------- the formats

def unlisted(train=TrainConfig, model=ModelConfig, zbp=ZBPConfig) -> list[str]:
    """How the dataclasses differ from the newest format's fields, in words ([] when they agree)."""
    found = []
    for part, cls in (("train", train), ("model", model), ("zbp", zbp)):
        have, listed = {f.name for f in dataclasses.fields(cls)}, FIELDS[FORMAT][part]
        found += [f"{cls.__name__}.{name} is not in format {FORMAT}" for name in sorted(have - listed)]
        found += [f"format {FORMAT} lists {cls.__name__}.{name}, which is gone" for name in sorted(listed - have)]
    return found


def test_every_config_field_belongs_to_the_newest_format():
    """A field added to TrainConfig, ModelConfig or ZBPConfig is a new config format: add it to formats.FIELDS as
    format N+1 with a migration in formats.MIGRATIONS that gives older run folders the value that reproduces their
    release, or every run of an older release would stop resuming."""
    assert unlisted() == [], "\n".join(unlisted()) + "\n(add a format and its migration: run/formats.py)"


def test_the_field_check_fails_on_a_field_without_a_format():
    @dataclasses.dataclass(frozen=True, kw_only=True)
    class Planted(TrainConfig):
        new_knob: float = 1.0

    assert unlisted(train=Planted) == [f"Planted.new_knob is not in format {FORMAT}"]


def test_each_migration_turns_its_format_into_the_next():
    """MIGRATIONS covers every step, and a config of format N with exactly N's fields comes out with N+1's."""
    assert sorted(MIGRATIONS) == list(range(1, FORMAT)) and sorted(FIELDS) == list(range(1, FORMAT + 1))
    for version in range(1, FORMAT):
        fields = FIELDS[version]
        config = {**{k: 0 for k in fields["train"]}, "model": {**{k: 0 for k in fields["model"]},
                                                               "zbp": {k: 0 for k in fields["zbp"]}}}
        MIGRATIONS[version](config)
        after = FIELDS[version + 1]
        assert set(config) == after["train"] and set(config["model"]) == after["model"], version
        assert set(config["model"]["zbp"]) == after["zbp"], version


ZBP_1 = {"n": 4, "probe": "rademacher", "scheme": "central", "eps": 1e-3, "chunk": 16, "cores": "both", "seed": 0}


@pytest.mark.parametrize("saved, expected", [
    # format 1 (no impl, no step_timeout_s): the reference estimator, no watchdog, no trackers, probes keyed by the
    # micro-batch and hashed by hash 1, as that release ran
    ({"steps": 5, "model": {"zbp": ZBP_1}},
     {"format": 5, "steps": 5, "step_timeout_s": 0.0, "trackers": [],
      "model": {"zbp": {**ZBP_1, "impl": "plain", "seeding": "micro", "probe_hash": 1}}}),
    # format 1 or 2 of the bp arm: the watchdog and the trackers are new
    ({"steps": 5, "model": {"zbp": None}},
     {"format": 5, "steps": 5, "step_timeout_s": 0.0, "trackers": [], "model": {"zbp": None}}),
    # format 2: impl kept as written
    ({"model": {"zbp": {**ZBP_1, "impl": "auto"}}},
     {"format": 5, "step_timeout_s": 0.0, "trackers": [],
      "model": {"zbp": {**ZBP_1, "impl": "auto", "seeding": "micro", "probe_hash": 1}}}),
    # format 3 of a zbp arm: the micro-batch's probes
    ({"format": 3, "step_timeout_s": 0.0, "model": {"zbp": {**ZBP_1, "impl": "closed"}}},
     {"format": 5, "step_timeout_s": 0.0, "trackers": [],
      "model": {"zbp": {**ZBP_1, "impl": "closed", "seeding": "micro", "probe_hash": 1}}}),
    # format 3 without the key (12e27ef .. a175505): step_timeout_s kept, no trackers
    ({"step_timeout_s": 60.0, "model": {"zbp": None}},
     {"format": 5, "step_timeout_s": 60.0, "trackers": [], "model": {"zbp": None}}),
    # format 3 with the key
    ({"format": 3, "step_timeout_s": 60.0}, {"format": 5, "step_timeout_s": 60.0, "trackers": []}),
    # format 4: the probes of hash 1 (two calls could share them)
    ({"format": 4, "trackers": ["wandb"]}, {"format": 5, "trackers": ["wandb"]}),
    ({"format": 4, "model": {"zbp": {**ZBP_1, "impl": "auto", "seeding": "global"}}},
     {"format": 5, "model": {"zbp": {**ZBP_1, "impl": "auto", "seeding": "global", "probe_hash": 1}}}),
    # format 5: unchanged
    ({"format": 5, "model": {"zbp": {**ZBP_1, "impl": "auto", "seeding": "global", "probe_hash": 2}}},
     {"format": 5, "model": {"zbp": {**ZBP_1, "impl": "auto", "seeding": "global", "probe_hash": 2}}}),
])
def test_migrations(saved, expected):
    assert migrate(saved) == expected
    assert "trackers" not in saved or saved["trackers"] == ["wandb"]  # the caller's dict is left as it was


@pytest.mark.parametrize("saved, words", [
    ({"format": FORMAT + 1}, f"written in config format {FORMAT + 1}; this zbpscale reads formats 1 to {FORMAT}"),
    ({"format": "three"}, "written in config format 'three'"),
])
def test_a_format_this_release_does_not_know_is_refused_in_one_line(saved, words):
    with pytest.raises(ConfigError, match=words) as caught:
        TrainConfig.from_dict(saved, source="run/config.json")
    assert str(caught.value).startswith("run/config.json: ")


@pytest.mark.parametrize("release", RELEASES)
def test_each_fixture_is_in_the_format_its_name_says(release):
    ref = reference(release)
    for arm in ARMS:
        saved = RunFolder(FIXTURES / release / arm).read_config()
        assert "format" not in saved  # written before config.json said its format
        assert format_of(saved) == ref["format"] or (arm == "bp" and ref["format"] == 2 and format_of(saved) == 1)
        assert json.loads(json.dumps(TrainConfig.from_dict(saved).to_dict())) == migrate(saved)


# ---------------------------------------------------------------- resumed by today's trainer

RESUME = """
import json, sys
from zbpscale.train.cli import main
print(json.dumps({d: main(["--run-dir", d]) for d in sys.argv[1:]}))
"""


@pytest.fixture(scope="module")
def resumed(tmp_path_factory) -> tuple[Path, dict]:
    """Every fixture run copied and resumed by today's trainer (one process, 1 thread, as they were made), from a
    folder that also holds their data/: (that folder, {run folder name: exit status})."""
    base = tmp_path_factory.mktemp("upgrade")
    shutil.copytree(FIXTURES / "data", base / "data")
    names = []
    for release in RELEASES:
        for arm in ARMS:
            names.append(copy_fixture(release, arm, base / f"{release}-{arm}").name)
    out = subprocess.run([sys.executable, "-c", RESUME, *names], cwd=base, capture_output=True, text=True,
                         timeout=600, env=one_thread_env())
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    return base, json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("arm", ARMS)
@pytest.mark.parametrize("release", RELEASES)
def test_a_run_stopped_by_an_older_release_finishes_here(resumed, release, arm):
    """It completes, its records say which release did what, and its losses are the old straight run's within
    RTOL (a relative 1e-4: another CPU model or the changed ZBP probe bits; bit for bit is the next test's)."""
    base, codes = resumed
    run = base / f"{release}-{arm}"
    assert codes[run.name] == 0 and RunFolder(run).complete.exists()
    steps, losses, val = train_losses(run)
    ref = reference(release)["runs"][arm]
    assert steps == list(range(12))
    assert losses == pytest.approx(ref["loss"], rel=RTOL) and val == pytest.approx(ref["val_loss"], rel=RTOL)
    assert losses[:6] == ref["loss"][:6]  # the old release's own records, kept
    records = read_records(run)
    resume = [r for r in records if r["kind"] == "resume"]
    start = [r for r in records if r["kind"] == "start"][-1]
    assert [r["from_step"] for r in resume] == [6] and start["step"] == 6 and start["attempt"] == 2
    assert start["versions"]["zbpscale"] == zbpscale.__version__
    assert json.loads(RunFolder(run).config.read_text()) == migrate(RunFolder(FIXTURES / release / arm).read_config())
    assert start["config"]["format"] == FORMAT


@pytest.mark.parametrize("arm", ARMS)
@pytest.mark.parametrize("release", RELEASES)
def test_a_run_stopped_by_an_older_release_finishes_bit_for_bit(resumed, release, arm):
    """Where the checkpoint was made on a machine like this one (torch, CPU model, ISA; 1 thread) by a release
    whose numerics today's code keeps, the resumed run is the old straight run bit for bit: every step's loss and
    every validation loss. Skipped, saying why, elsewhere (bit for bit across CPU models is not promised)."""
    why = why_not_bitwise(release, arm)
    if why:
        pytest.skip(f"not bit for bit: {why}; compared within a relative {RTOL} instead")
    base, _ = resumed
    _, losses, val = train_losses(base / f"{release}-{arm}")
    ref = reference(release)["runs"][arm]
    assert losses == ref["loss"] and val == ref["val_loss"]
    assert [r["differs"] for r in read_records(base / f"{release}-{arm}") if r["kind"] == "resume"] == [[]]


# ---------------------------------------------------------------- their records, read by today's commands

def test_status_collect_and_plot_read_every_release_s_records(resumed, tmp_path):
    """Each release's run folders, as it left them (stopped after 6 steps) and as today's trainer finished them,
    are one sweep to status and collect: rows with the right state and step, summaries with the last validation
    loss; plot draws the oldest release's (its diag rows lack fields that came later), before and after."""
    from zbpscale.jobs.status import collect_rows
    from zbpscale.results.collect import collect
    from zbpscale.results.plot import plot

    base, _ = resumed
    for release in RELEASES:
        for when, source in (("old", FIXTURES / release), ("resumed", base)):
            sweep = tmp_path / when / release
            for arm in ARMS:
                src = source / arm if when == "old" else source / f"{release}-{arm}"
                shutil.copytree(src, sweep / f"nano-{arm}")
            rows = {r["run"]: r for r in collect_rows(sweep)}
            done = when == "resumed"
            assert {name: (r["state"], r["step"], r["steps"]) for name, r in rows.items()} == {
                f"nano-{arm}": ("complete" if done else "stopped", 12 if done else 6, 12) for arm in ARMS}, release
            summary = {r.run: r for r in collect(sweep, tmp_path / "bundles" / f"{when}-{release}", log=lambda _: None)}
            for arm in ARMS:
                expected = reference(release)["runs"][arm]["val_loss"][-1 if done else 0]
                assert summary[f"nano-{arm}"].final_val_loss == pytest.approx(expected, rel=RTOL), (release, when)
            if release == RELEASES[0]:  # ~2 s a bundle; the others' records hold every field of the oldest's
                assert plot(tmp_path / "bundles" / f"{when}-{release}", log=lambda _: None).files


def killed_mid_run(release: str, dest: Path, **beat) -> Path:
    """A fixture run folder of `release` as its trainer, run directly, leaves it when killed -9 mid-run: its records
    without their end record (a killed trainer writes none), its heartbeat.json with the fixture's own fields and
    `beat`'s values (this host, a pid, a time)."""
    run = copy_fixture(release, "bp", dest)
    folder = RunFolder(run)
    lines = folder.metrics.read_text().splitlines(keepends=True)
    folder.metrics.write_text("".join(line for line in lines if json.loads(line)["kind"] != "end"))
    old = json.loads(folder.heartbeat.read_text())
    assert set(beat) <= set(old) | {"pid_start"}  # only fields the release's own heartbeat has (or today's)
    folder.heartbeat.write_text(json.dumps({**old, **beat}))
    return run


def test_a_direct_run_of_a_release_before_pid_start_killed_9_is_failed_at_once(tmp_path):
    """A run trained directly (`python -m zbpscale.train`, no job) by 360975a, whose heartbeat.json names the host
    and pid but not the process's start time (pid_start came with 6b60db0), killed -9 on this host: its pid dead,
    status said `running` until the heartbeat aged past 15 minutes. Compared with a run of 45c20c8 (pid_start in
    its heartbeat) killed the same way: both failed at once, with the same reason; while a process has the pid and
    started before the heartbeat, the old run is running; a process that started after it (a reused pid) is not
    its trainer."""
    from zbpscale.jobs.status import collect_rows
    from zbpscale.proc import process_start_time, process_started_at

    host, sweep = socket.gethostname(), tmp_path / "try"
    victim = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    victim_start = process_start_time(victim.pid)
    victim.kill()  # kill -9
    victim.wait()
    alive = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    try:
        now, born = time.time(), process_started_at(alive.pid)
        killed_mid_run("f2-360975a", sweep / "old-killed", host=host, pid=victim.pid, time=now)
        killed_mid_run("f3-45c20c8", sweep / "today-killed", host=host, pid=victim.pid, pid_start=victim_start,
                       time=now)
        killed_mid_run("f2-360975a", sweep / "old-alive", host=host, pid=alive.pid, time=now)
        killed_mid_run("f2-360975a", sweep / "old-reused", host=host, pid=alive.pid, time=born - 60)
        rows = {r["run"]: r for r in collect_rows(sweep)}
    finally:
        alive.kill()
        alive.wait()
    gone = f"the trainer (pid {victim.pid}) is gone without an end record (run directly, no job)"
    assert {name: (r["state"], r["reason"]) for name, r in rows.items()} == {
        "old-killed": ("failed", gone), "today-killed": ("failed", gone), "old-alive": ("running", ""),
        "old-reused": ("failed", f"the trainer (pid {alive.pid}) is gone without an end record (run directly, no "
                                 "job)")}
    assert rows["old-reused"]["heartbeat_age_s"] < 120  # fresh: only the pid's own start time tells


OLD_ATTEMPTS = {  # attempts.jsonl as the first job layers wrote it (their record() calls, with their fields)
    "local": [  # 0a27749 (the local queue's first driver): `end` events named the log
        {"event": "submitted", "job_id": "local-1", "executor": "local", "logs": "logs", "retry": False,
         "name": "old/nano-bp"},
        {"event": "start", "job_id": "local-1", "executor": "local", "host": "h", "ranks": 1, "pid": 1, "gpus": [],
         "logs": "logs"},
        {"event": "end", "job_id": "local-1", "executor": "local", "why": "timeout", "reason": "time limit",
         "log": "logs/local-1_0.log"}],
    "slurm": [  # 0cd2c13 (the first SLURM job): no job name, grace, nodes; a requeue then a failure
        {"event": "submitted", "job_id": "7", "executor": "slurm", "logs": "logs"},
        {"event": "start", "job_id": "7", "executor": "slurm", "host": "h", "ranks": 1, "pid": 1},
        {"event": "end", "job_id": "7", "why": "preempted", "reason": "checkpointed; requeue 1/100"},
        {"event": "start", "job_id": "7", "executor": "slurm", "host": "h", "ranks": 1, "pid": 2},
        {"event": "end", "job_id": "7", "why": "failed", "reason": "RuntimeError: boom"}],
}


def test_attempts_of_the_first_job_layers_read_as_today_s(tmp_path):
    """Today's readers of attempts.jsonl over the events of the first releases that wrote it: the counts status
    shows, the retry rule, and status's row of a run whose old local job ended at its time limit."""
    from zbpscale.jobs.status import collect_rows
    from zbpscale.run.history import History

    slurm = History(tuple({**e, "time": 1000.0 + i} for i, e in enumerate(OLD_ATTEMPTS["slurm"])))
    assert slurm.job_id == "7" and slurm.requeue_counts() == (0, 1, 1)
    assert slurm.retry("preempted", {"preempted": 1}).ok is False
    run = copy_fixture("f2-360975a", "bp", tmp_path / "old" / "nano-bp")
    now = time.time()
    RunFolder(run).attempts.write_text("".join(json.dumps({**e, "time": now - 60 + i}) + "\n"
                                               for i, e in enumerate(OLD_ATTEMPTS["local"])))
    (row,) = collect_rows(tmp_path / "old")
    assert (row["state"], row["step"], row["timeouts"], row["executor"]) == ("stopped", 6, 1, "local")


# ---------------------------------------------------------------- jobs pickled by older releases

RUN_PICKLE = """
import sys
from submitit.core.utils import DelayedSubmission
for path in sys.argv[1:]:
    job = DelayedSubmission.load(path)
    print("ran", type(job.function).__module__, type(job.function).__name__, job.result())
"""

FAKE_SLURM = {"SUBMITIT_EXECUTOR": "slurm", "SLURM_JOB_ID": "4242", "SLURM_PROCID": "0", "SLURM_NTASKS": "1",
              "SLURM_LOCALID": "0", "SLURM_NODEID": "0", "SLURM_JOB_NUM_NODES": "1", "SLURM_JOB_NODELIST": "localhost"}
"""What a SLURM task's environment says to submitit (one task on one node); no scheduler is asked on the way to a
completed run."""


@pytest.mark.parametrize("release, commit", [("f2-360975a", "360975a"), ("f3-45c20c8", "45c20c8")])
def test_a_slurm_job_pickled_by_an_older_release_runs_here(tmp_path, release, commit):
    """The job callables that release's submit pickled (zbpscale.job.TrainJob before the regrouping,
    zbpscale.jobs.executors.slurm_job.TrainJob after it), loaded as submitit's job does by today's code: the train
    job finishes that release's stopped run like the straight run, the prep job prepares its data."""
    shutil.copytree(FIXTURES / "data", tmp_path / "data")
    run = copy_fixture(release, "bp", tmp_path / "run")  # the train job's run folder, relative to its cwd
    pickles = [str(FIXTURES / "jobs" / f"{commit}_{kind}.pkl") for kind in ("train", "prep")]
    env = {k: v for k, v in one_thread_env(**FAKE_SLURM).items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
    out = subprocess.run([sys.executable, "-c", RUN_PICKLE, *pickles], cwd=tmp_path, capture_output=True, text=True,
                         timeout=300, env={**env, "HF_HUB_OFFLINE": "1"})
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    ran = [line for line in out.stdout.splitlines() if line.startswith("ran ")]
    assert ran == ["ran zbpscale.entry TrainJob completed", "ran zbpscale.entry PrepJob prepared"]
    assert [(a["event"], a.get("why")) for a in read_attempts(run)] == [("start", None), ("end", "completed")]
    _, losses, _ = train_losses(run)
    ref = reference(release)["runs"]["bp"]["loss"]
    assert losses == (ref if why_not_bitwise(release, "bp") is None else pytest.approx(ref, rel=RTOL))
    assert (tmp_path / "prepared" / "manifest.json").is_file()


def test_today_s_jobs_pickle_the_promised_names():
    """What submit_runs and submit_prep hand submitit names zbpscale.entry's classes and holds plain data, so that a
    later release unpickles it whatever moved behind the entry module."""
    import cloudpickle
    from submitit.core.utils import DelayedSubmission

    from zbpscale.data.prepare import PrepConfig
    from zbpscale.entry import PrepJob, TrainJob

    train = TrainJob("/runs/nano-bp", max_timeouts=2, max_preemptions=3, signal_delay_s=30, max_crashes=4)
    prep = PrepJob(PrepConfig(source="embedded", out=Path("/data/x")))
    for job in (train, prep):
        blob = cloudpickle.dumps(DelayedSubmission(job))
        assert b"zbpscale.entry" in blob and b"zbpscale.jobs" not in blob and b"zbpscale.data" not in blob
        assert type(pickle.loads(blob).function) is type(job)
    assert vars(train) == {"run_dir": "/runs/nano-bp", "max_timeouts": 2, "max_preemptions": 3, "max_crashes": 4,
                           "signal_delay_s": 30}
    assert prep.prep_config["source"] == "embedded" and prep.prep_config["out"] == Path("/data/x")


def test_pickled_state_survives_attributes_added_and_removed():
    """A job pickled before an attribute existed takes its class-level default; one pickled with an attribute the
    class no longer has loses it (state as an older and a newer release would pickle it)."""
    from zbpscale.entry import TrainJob

    job = TrainJob.__new__(TrainJob)
    job.__setstate__({"run_dir": "r", "max_timeouts": 1, "max_preemptions": 2, "signal_delay_s": 3, "gone": 1})
    assert (job.run_dir, job.max_timeouts, job.max_crashes) == ("r", 1, TrainJob.max_crashes)
    assert not hasattr(job, "gone")


def test_the_submit_path_pickles_the_entry_classes():
    """slurm.py's submit_runs and submit_prep construct zbpscale.entry's classes (read from their source: a real
    submission is the SLURM tests')."""
    import inspect

    from zbpscale.jobs.executors import slurm

    for function in (slurm.submit_runs, slurm.submit_prep):
        source = inspect.getsource(function)
        assert "from zbpscale.entry import" in source and "slurm_job" not in source


# ---------------------------------------------------------------- the local queue's rank commands

@pytest.mark.parametrize("command", [
    ["-m", "zbpscale.entry", "local-rank"],                   # today's driver (the promised name)
    ["-m", "zbpscale.jobs.executors.local_queue.rank"],       # drivers of 8006dfa .. this release
    ["-m", "zbpscale.local.rank"],                            # drivers before the regrouping (up to 0730d3f)
])
def test_each_release_s_rank_command_trains_here(tmp_path, command):
    """A local-queue driver started by an older release and still running after an upgrade starts its ranks by its
    own command line: each one resumes a stopped run and exits as the trainer does (0: completed)."""
    shutil.copytree(FIXTURES / "data", tmp_path / "data")
    run = copy_fixture("f3-45c20c8", "bp", tmp_path / "run")
    out = subprocess.run([sys.executable, *command, "run"], cwd=tmp_path, capture_output=True, text=True, timeout=300,
                         env=one_thread_env())
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    assert train_losses(run)[1] == pytest.approx(reference("f3-45c20c8")["runs"]["bp"]["loss"], rel=RTOL)


def test_the_entry_command_says_its_usage():
    out = subprocess.run([sys.executable, "-m", "zbpscale.entry", "rank"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and "usage: python -m zbpscale.entry {local-rank RUN_DIR, local-driver JOBS_ROOT " \
        "[--cancels-only], slurm-step-ended FOLDER CODE BEGAN, slurm-task FOLDER}" in out.stderr
    flagged = subprocess.run([sys.executable, "-m", "zbpscale.entry", "local-rank", "r", "--cancels-only"],
                             capture_output=True, text=True, timeout=60)  # the driver's flag alone
    assert flagged.returncode == 2 and "usage:" in flagged.stderr


def test_the_driver_imports_the_same_package_from_its_own_folder(tmp_path):
    """The driver runs in the queue's folder: its PYTHONPATH leads with the folder that holds this zbpscale (from a
    source folder or PYTHONPATH), so it imports the code that started it; a site directory is not added."""
    from zbpscale.jobs.executors.local_queue.queue import driver_pythonpath

    path = driver_pythonpath().split(os.pathsep)
    here = str(Path(zbpscale.__file__).resolve().parents[1])
    code = "import zbpscale; print(zbpscale.__file__)"
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=60,
                         env={**os.environ, "PYTHONPATH": os.pathsep.join(path)})
    assert out.stdout.strip() == zbpscale.__file__
    import site

    assert path[0] == here or here in site.getsitepackages()


# ---------------------------------------------------------------- the start record's release

def test_git_revision_reads_the_checkout_s_files(tmp_path):
    """Detached HEAD, a loose branch, a packed branch, a worktree (gitdir file + commondir), none, garbage; and a
    package that is not the clone's own (a wheel installed in a venv inside some other checkout): None."""
    from zbpscale.version import git_revision

    sha = "0123456789abcdef0123456789abcdef01234567"
    repo = tmp_path / "repo"
    (repo / ".git" / "refs" / "heads").mkdir(parents=True)
    (repo / "src" / "zbpscale").mkdir(parents=True)
    (repo / "pyproject.toml").write_text('[project]\nname = "zbpscale"\n')
    package = repo / "src" / "zbpscale"
    (repo / ".git" / "HEAD").write_text(f"{sha}\n")
    assert git_revision(package) == sha
    (repo / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    (repo / ".git" / "refs" / "heads" / "main").write_text(sha[::-1] + "\n")
    assert git_revision(package) == sha[::-1]
    (repo / ".git" / "refs" / "heads" / "main").unlink()
    (repo / ".git" / "packed-refs").write_text(f"# pack-refs with: peeled\n{sha} refs/heads/main\n")
    assert git_revision(package) == sha
    tree = tmp_path / "tree"
    (repo / ".git" / "worktrees" / "tree").mkdir(parents=True)
    (repo / ".git" / "worktrees" / "tree" / "HEAD").write_text("ref: refs/heads/main\n")
    (repo / ".git" / "worktrees" / "tree" / "commondir").write_text("../..\n")
    (tree / "src" / "zbpscale").mkdir(parents=True)
    (tree / "pyproject.toml").write_text((repo / "pyproject.toml").read_text())
    (tree / ".git").write_text(f"gitdir: {repo / '.git' / 'worktrees' / 'tree'}\n")
    assert git_revision(tree / "src" / "zbpscale") == sha
    assert git_revision(tmp_path / "nowhere" / "src" / "zbpscale") is None
    wheel = repo / ".venv" / "lib" / "python3.11" / "site-packages" / "zbpscale"
    wheel.mkdir(parents=True)
    assert git_revision(wheel) is None  # inside a checkout, but not its clone
    (repo / "pyproject.toml").write_text('[project]\nname = "someone-else"\n')
    assert git_revision(package) is None  # a src/zbpscale folder of another project
    (repo / "pyproject.toml").write_text('[project]\nname = "zbpscale"\n')
    (repo / ".git" / "HEAD").write_bytes(b"\xff\xfe")
    assert git_revision(package) is None


def test_the_start_record_names_the_release(resumed):
    """versions.zbpscale is the package's version; git is the checkout's commit (git rev-parse) when the tests run
    from one."""
    base, _ = resumed
    start = [r for r in read_records(base / f"{RELEASES[-1]}-bp") if r["kind"] == "start"][-1]
    assert start["versions"]["zbpscale"] == zbpscale.__version__
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=Path(zbpscale.__file__).parent, capture_output=True,
                              text=True, timeout=30)
    except OSError:
        pytest.skip("no git here to compare with")
    assert start["git"] == (head.stdout.strip() if head.returncode == 0 else None)


# ---------------------------------------------------------------- a SLURM job across an upgrade

RELEASE_B_FIELD = '''
    release_b_knob: float = 1.0
    """A field release B added (1.0 from B on; runs of older formats keep 0.0, what they did)."""
'''
RELEASE_B_FORMAT = '''

FIELDS[FORMAT + 1] = {**FIELDS[FORMAT], "train": FIELDS[FORMAT]["train"] | {"release_b_knob"}}
MIGRATIONS[FORMAT] = lambda config: config.setdefault("release_b_knob", 0.0)
FORMAT += 1
'''


def make_release_b(src: Path, dest: Path) -> None:
    """Release B: this tree's src/ with what a release does: a TrainConfig field and its config format (a migration
    that gives older runs the old value), the SLURM job's implementation module renamed, a new version."""
    shutil.copytree(src, dest, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    pkg = dest / "zbpscale"
    for path in pkg.rglob("*.py"):
        path.write_text(path.read_text().replace("slurm_job", "slurm_task"))
    (pkg / "jobs" / "executors" / "slurm_job.py").rename(pkg / "jobs" / "executors" / "slurm_task.py")
    schema = pkg / "run" / "config.py"
    anchor = '    diag_every: int = 0\n'
    assert schema.read_text().count(anchor) == 1
    schema.write_text(schema.read_text().replace(anchor, RELEASE_B_FIELD.lstrip("\n") + anchor))
    formats = pkg / "run" / "formats.py"
    formats.write_text(formats.read_text() + RELEASE_B_FORMAT)
    init = pkg / "__init__.py"
    init.write_text(init.read_text().replace(f'__version__ = "{zbpscale.__version__}"',
                                             f'__version__ = "{zbpscale.__version__}+b"'))


@pytest.mark.slurm
@pytest.mark.slow
def test_a_slurm_job_requeued_after_an_upgrade_resumes_bitwise(tmp_path, slurm_cluster, data_dir):
    """Release A (a copy of this tree on the job's PYTHONPATH) submits a nano run; while it trains, A's files are
    replaced by release B's (make_release_b), as `pip install -U` would; a USR2 (as a preemption sends) makes the
    attempt checkpoint and requeue; the requeued job unpickles zbpscale.entry.TrainJob from B, which migrates the
    run's config and finishes it: attempts by A then B, and the losses of a straight run bit for bit."""
    from conftest import wait_until, write_sweep

    _, slurm_env = slurm_cluster
    release = tmp_path / "release" / "src"
    shutil.copytree(REPO / "src", release, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    make_release_b(REPO / "src", tmp_path / "release_b" / "src")
    env = {**slurm_env, "PYTHONPATH": str(release), "OMP_NUM_THREADS": "1"}
    sweep = write_sweep(tmp_path, "upgrade", data_dir, steps=60, signal_delay_s=30)
    out = subprocess.run([sys.executable, "-m", "zbpscale.submit", str(sweep), "--executor", "slurm"], cwd=tmp_path,
                         env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    run = tmp_path / "jobs" / "upgrade" / "nano-bp"
    (job,) = [a["job_id"] for a in read_attempts(run) if a["event"] == "submitted"]
    wait_until(lambda: len(train_losses(run)[0]) >= 10, "release A's attempt to train 10 steps", timeout=120,
               every=0.3)
    config_a = RunFolder(run).config.read_text()
    shutil.rmtree(release / "zbpscale")  # the upgrade: A's files go, B's come, under the same path
    shutil.copytree(tmp_path / "release_b" / "src" / "zbpscale", release / "zbpscale")
    subprocess.run(["scancel", "--signal=USR2", job], env=slurm_env, check=True, timeout=30)
    # the end follows COMPLETE
    wait_until(lambda: RunFolder(run).complete.exists() and read_attempts(run)[-1]["event"] == "end",
               "the requeued job (release B) to finish and record its end", timeout=240, every=0.3)

    attempts = read_attempts(run)
    assert [(a["event"], a.get("why")) for a in attempts if a["event"] != "submitted"] == [
        ("start", None), ("end", "preempted"), ("start", None), ("end", "completed")]
    starts = [r for r in read_records(run) if r["kind"] == "start"]
    assert [s["versions"]["zbpscale"] for s in starts] == [zbpscale.__version__, zbpscale.__version__ + "+b"]
    saved = json.loads(RunFolder(run).config.read_text())
    assert json.loads(config_a)["format"] == FORMAT and saved["format"] == FORMAT + 1 and saved["release_b_knob"] == 0.0
    straight = tmp_path / "straight"
    straight.mkdir()
    RunFolder(straight).config.write_text(config_a)
    done = subprocess.run([sys.executable, "-m", "zbpscale.train", "--run-dir", str(straight)], capture_output=True,
                          text=True, timeout=300, env=one_thread_env())
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert train_losses(run)[:2] == train_losses(straight)[:2]
