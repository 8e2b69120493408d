"""`zbpscale status` on synthetic sweep folders: every state and failure reason, against what the folder says.

The folders are written the way the trainer, the jobs and the local queue write them; SLURM's answers come
from a stand-in `sacct` on PATH that prints fixed rows (the real SLURM is joined in tests/test_submit_slurm.py,
real local-queue folders in tests/test_local.py). Compared: each run's state and reason with the story its
folder tells, the exit status with the states, the rows read from the tails with the last records written, and
a run flagged as diverged with the val losses written above its start (and a run that fell, not).
"""

import json
import math
import os
import re
import shutil
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import config_json, losses, unwrapped
from zbpscale.jobs.status import collect_rows, exit_code
from zbpscale.run.divergence import diverged
from zbpscale.run.folder import RunFolder
from zbpscale.run.records import tail_records


def make_run(folder: Path, name: str, *, steps=100, done=0, job=None, executor="slurm", ends=(), complete=False,
             beat_age=5.0, log_text=None, plan=None) -> Path:
    now = time.time()  # ages are relative to when the folder is written
    run = folder / name
    run.mkdir(parents=True)
    (run / "config.json").write_text(config_json(steps=steps, global_batch=8))
    (run / "plan.json").write_text(json.dumps(plan or {"params": 1000 + len(name), "gpus": 8, "gpu_hours": 16.0}))
    records = [{"kind": "start", "time": now - 3600, "derived": {"params": 1000 + len(name), "tokens_per_step": 1024,
                                                                  "total_steps": steps}}]
    for step in range(done):
        records.append({"kind": "train", "time": now - 3600 + step, "step": step, "loss": 5.0 - step / 100,
                        "step_time": 2.0, "tokens_per_s": 512.0})
        if step % 10 == 9:
            records.append({"kind": "eval", "time": now - 3600 + step, "step": step, "val_loss": 4.9 - step / 100})
    if job or done:  # a run never started has no metrics yet
        (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    if done:
        (run / "heartbeat.json").write_text(json.dumps({"step": done, "time": now - beat_age}))
    attempts = []
    if job:
        attempts.append({"event": "submitted", "time": now - 3700, "job_id": job, "executor": executor,
                         "logs": str(run / "logs")})
        attempts.append({"event": "start", "time": now - 3600, "job_id": job, "executor": executor})
    for why, reason in ends:
        attempts.append({"event": "end", "time": now - 60, "job_id": job, "why": why, "reason": reason,
                         **({"log": str(run / "logs" / f"{job}_0.log")} if executor == "local" else {})})
    (run / "attempts.jsonl").write_text("".join(json.dumps(a) + "\n" for a in attempts))
    if log_text is not None:
        (run / "logs").mkdir()
        name = f"{job}_0.log" if executor == "local" else f"{job}_0_log.out"
        (run / "logs" / name).write_text(log_text)
    if complete:
        (run / "COMPLETE").write_text("{}\n")
    return run


@pytest.fixture
def fake_sacct(tmp_path, monkeypatch):
    """A stand-in `sacct` on PATH answering `JobID|State` rows for the given states, and a stand-in `squeue`
    that lists the live ones (the controller has forgotten the long-ended jobs)."""
    from zbpscale.jobs.executors.base import ALIVE

    def install(states: dict[str, str]):
        bin_dir = tmp_path / "bin"
        bin_dir.mkdir(exist_ok=True)
        rows = "\\n".join(f"{j}|{s}" for j, s in states.items())
        live = "\\n".join(f"{j}|{s}|None||" for j, s in states.items() if s in ALIVE)
        for name, rows in (("sacct", rows), ("squeue", live)):
            script = bin_dir / name
            script.write_text(f"#!/bin/sh\nprintf '{rows}\\n'\n")
            script.chmod(script.stat().st_mode | stat.S_IEXEC)
        monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    return install


def by_run(rows):
    return {r["run"]: r for r in rows}


def test_every_state_and_failure_reason(tmp_path, fake_sacct):
    sweep = tmp_path / "jobs" / "ladder"
    traceback = "Traceback (most recent call last):\n  File \"x.py\", line 1\nValueError: bad shard 7\n"
    make_run(sweep, "s60-bp", done=100, job="11", ends=[("completed", "all steps done")], complete=True)
    make_run(sweep, "s60-zbp_n16", done=40, job="12", beat_age=3.0)
    make_run(sweep, "s60-zbp_n64", done=40, job="13", beat_age=3000.0)
    make_run(sweep, "s124-bp", done=0, job="14")
    make_run(sweep, "s124-zbp_n16", done=30, job="15", ends=[("timeout", "checkpointed; requeue 1/1"),
                                                             ("failed", "timeout 2 times, over max_timeouts=1")])
    make_run(sweep, "s124-zbp_n64", done=30, job="16", log_text="step 30\nKilled\n")
    make_run(sweep, "s350-bp", done=20, job="17")
    make_run(sweep, "s350-zbp_n16", done=20, job="18", log_text="x\n" + traceback)
    make_run(sweep, "s350-zbp_n64", done=20, job="local-3", executor="local", log_text=traceback,
             ends=[("failed", "exit status 1: ValueError: bad shard 7")])
    make_run(sweep, "s1b-bp", done=20, job="local-4", executor="local", ends=[("failed", "exit status 1: x")],
             log_text="torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n")
    make_run(sweep, "s1b-zbp_n16", done=5, job="20", ends=[("cancelled", "cancelled; checkpointed")])
    make_run(sweep, "s1b-zbp_n64")
    fake_sacct({"11": "COMPLETED", "12": "RUNNING", "13": "RUNNING", "14": "PENDING", "15": "FAILED",
                "16": "OUT_OF_MEMORY", "17": "NODE_FAIL", "18": "FAILED", "20": "COMPLETED"})
    rows = by_run(collect_rows(sweep, stall_after_s=900))
    states = {name: r["state"] for name, r in rows.items()}
    assert states == {
        "s60-bp": "complete", "s60-zbp_n16": "running", "s60-zbp_n64": "stalled", "s124-bp": "queued",
        "s124-zbp_n16": "failed", "s124-zbp_n64": "failed", "s350-bp": "failed", "s350-zbp_n16": "failed",
        "s350-zbp_n64": "failed", "s1b-bp": "failed", "s1b-zbp_n16": "cancelled", "s1b-zbp_n64": "new"}
    assert rows["s124-zbp_n16"]["reason"] == "timeout 2 times, over max_timeouts=1"
    assert rows["s124-zbp_n16"]["timeouts"] == 1 and rows["s124-zbp_n16"]["failures"] == 1
    assert rows["s124-zbp_n64"]["reason"].startswith("out of memory")
    assert rows["s350-bp"]["reason"] == "node failure"
    assert rows["s350-zbp_n16"]["reason"].startswith("ValueError: bad shard 7")  # no record: the log says why
    assert rows["s350-zbp_n16"]["log"].endswith("18_0_log.out")
    assert rows["s350-zbp_n64"]["reason"] == "exit status 1: ValueError: bad shard 7"
    assert rows["s1b-bp"]["reason"].startswith("out of memory (CUDA)")
    assert rows["s60-zbp_n64"]["reason"] == "no heartbeat for 50m (stalled after 15m)"
    running = rows["s60-zbp_n16"]
    assert (running["step"], running["steps"], running["pct"], running["tokens"]) == (40, 100, 40.0, 40 * 1024)
    assert running["train_loss"] == pytest.approx(5.0 - 39 / 100) and running["val_loss"] == pytest.approx(4.9 - 0.39)
    assert running["eta_s"] == pytest.approx(60 * 2.0)
    assert exit_code(list(rows.values())) == 1


def test_exit_codes_follow_the_states(tmp_path, fake_sacct):
    fake_sacct({"1": "COMPLETED", "2": "RUNNING"})
    done = tmp_path / "done"
    make_run(done, "tiny-bp", done=10, steps=10, job="1", ends=[("completed", "")], complete=True)
    busy = tmp_path / "busy"
    make_run(busy, "tiny-bp", done=10, steps=10, job="1", ends=[("completed", "")], complete=True)
    make_run(busy, "tiny-zbp_n4", done=3, steps=10, job="2")
    for folder, code in ((done, 0), (busy, 3)):
        out = subprocess.run([sys.executable, "-m", "zbpscale.cli", "status", str(folder)], capture_output=True,
                             text=True, timeout=60, env=os.environ)
        assert out.returncode == code, out.stdout + out.stderr
        assert "tiny" in out.stdout
    assert exit_code(collect_rows(done)) == 0 and exit_code(collect_rows(busy)) == 3


def test_json_logs_and_bad_targets(tmp_path, fake_sacct):
    fake_sacct({"7": "FAILED"})
    sweep = tmp_path / "jobs" / "s"
    make_run(sweep, "tiny-bp", done=3, job="7", log_text="".join(f"line {i}\n" for i in range(100)))
    out = subprocess.run([sys.executable, "-m", "zbpscale.cli", "status", str(sweep), "--json"], capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 1
    (row,) = json.loads(out.stdout)["s"]
    assert row["state"] == "failed" and row["job"] == "7"
    out = subprocess.run([sys.executable, "-m", "zbpscale.cli", "status", str(tmp_path / "jobs"), "--logs", "tiny-bp",
                          "--lines", "5"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stdout.splitlines()[1:] == [f"line {i}" for i in range(95, 100)]
    # a study copied elsewhere: its runs' logs are its own, not those at the paths its records name (the old place)
    moved = tmp_path / "copy" / "jobs" / "s"
    shutil.copytree(sweep, moved)
    (moved / "tiny-bp" / "logs" / "7_0_log.out").write_text("the copy's line\n")
    out = subprocess.run([sys.executable, "-m", "zbpscale.cli", "status", str(moved), "--logs", "tiny-bp"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stdout.splitlines()[1:] == ["the copy's line"], out.stdout + out.stderr
    (row,) = collect_rows(moved)
    assert row["state"] == "failed" and Path(row["log"]) == moved / "tiny-bp" / "logs" / "7_0_log.out", row["log"]
    # its latest job cancelled before it started: no log of its own; the earlier job's is shown, and said to be
    with open(moved / "tiny-bp" / "attempts.jsonl", "a") as fh:
        for event in ({"event": "submitted", "time": time.time() - 5, "job_id": "8", "executor": "slurm",
                       "logs": str(moved / "tiny-bp" / "logs")},
                      {"event": "end", "time": time.time() - 4, "job_id": "8", "why": "cancelled",
                       "reason": "cancelled before it started"}):
            fh.write(json.dumps(event) + "\n")
    out = subprocess.run([sys.executable, "-m", "zbpscale.cli", "status", str(moved), "--logs", "tiny-bp"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stdout.splitlines() == [
        f"==> {moved / 'tiny-bp' / 'logs' / '7_0_log.out'} <== (an earlier job's: job 8 has no log)",
        "the copy's line"], out.stdout + out.stderr
    for args, message in (([str(tmp_path / "nope")], "no sweep file or sweep folder at"),
                          ([str(sweep), "--logs", "tiny-zz"], "no run 'tiny-zz' here")):
        out = subprocess.run([sys.executable, "-m", "zbpscale.cli", "status", *args], capture_output=True, text=True,
                             timeout=60)
        assert out.returncode == 2 and message in out.stderr and "Traceback" not in out.stderr
    # a run of the same name in another sweep of the jobs root: --logs without a sweep showed the first sweep's log
    shutil.copytree(sweep, tmp_path / "jobs" / "t")
    attempts = tmp_path / "jobs" / "t" / "tiny-bp" / "attempts.jsonl"
    attempts.write_text(attempts.read_text().replace(str(sweep), str(tmp_path / "jobs" / "t")))  # its own paths
    (tmp_path / "jobs" / "t" / "tiny-bp" / "logs" / "7_0_log.out").write_text("t's line\n")
    out = subprocess.run([sys.executable, "-m", "zbpscale.cli", "status", str(tmp_path / "jobs"), "--logs", "tiny-bp"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and "'tiny-bp' is a run of 2 sweeps (s, t)" in out.stderr, out.stderr
    assert f"zbpscale status {tmp_path / 'jobs' / 't'} --logs tiny-bp" in " ".join(out.stderr.split())
    out = subprocess.run([sys.executable, "-m", "zbpscale.cli", "status", str(tmp_path / "jobs" / "t"), "--logs",
                          "tiny-bp"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stdout.splitlines()[1:] == ["t's line"], out.stdout + out.stderr


@pytest.mark.parametrize("recorded, now", [
    ("/old/jobs/smoke/tiny-bp/logs/a.log", "NEW/jobs/smoke/tiny-bp/logs/a.log"),  # the run's own folder
    ("/old/jobs/smoke/array-logs/tiny/5_0_0_log.out", "NEW/jobs/smoke/array-logs/tiny/5_0_0_log.out"),  # SLURM array
    ("NEW/jobs/smoke/tiny-bp/logs/a.log", "NEW/jobs/smoke/tiny-bp/logs/a.log"),  # not moved: as recorded
    ("/scratch/logs/a.log", "/scratch/logs/a.log"),  # outside the sweep's folder: as recorded
    ("/old/runs/smoke/tiny-bp/logs/a.log", "/old/runs/smoke/tiny-bp/logs/a.log"),  # another jobs root: as recorded
])
def test_a_path_recorded_in_a_moved_study_is_found_where_the_study_is_now(tmp_path, monkeypatch, recorded, now):
    """RunFolder.here, for a run given by a path relative to the working folder (as `status jobs/smoke` gives it):
    absolute, as the records have it."""
    monkeypatch.chdir(tmp_path)
    folder = RunFolder(Path("jobs") / "smoke" / "tiny-bp")
    assert folder.here(recorded.replace("NEW", str(tmp_path))) == Path(now.replace("NEW", str(tmp_path)))


def test_tail_records_reads_only_the_end_and_skips_torn_lines(tmp_path):
    path = tmp_path / "m.jsonl"
    lines = [json.dumps({"kind": "eval", "step": 0, "val_loss": 9.0})]
    lines += [json.dumps({"kind": "train", "step": i, "pad": "x" * 200}) for i in range(3000)]
    path.write_text("\n".join(lines) + "\n" + '{"kind": "train", "step": 99')  # a torn last line
    found = tail_records(path, ("train", "eval"))
    assert found["train"]["step"] == 2999 and found["eval"]["step"] == 0  # grew its window back to the start
    assert tail_records(path, ("train",), max_bytes=1 << 16)["train"]["step"] == 2999
    assert "eval" not in tail_records(path, ("train", "eval"), max_bytes=1 << 16)  # bounded


def test_log_tail_gives_the_last_lines_of_the_logs_end_as_splitting_all_of_it_would(tmp_path):
    """reasons.log_tail splits only its last lines: against str.splitlines of the whole tail it reads, on logs of
    every kind of line break (carriage returns of progress bars, Windows' CRLF, Unicode's separators), multibyte
    characters, a last line with and without its break, and logs longer than the bytes it reads (cut mid-character)."""
    import random

    from zbpscale.jobs.reasons import TAIL_BYTES, log_tail

    rng = random.Random(5)
    pieces = ["x", "step 12 loss 3.1", "é", "日本語", "\U0001f600", " ", "\n", "\r", "\r\n", "\x0c", "\u2028", "\x85",
              ""]
    path = tmp_path / "job.log"
    for case in range(300):
        size = rng.choice((0, 1, 5, 50, 400, 4000, TAIL_BYTES // 3, TAIL_BYTES))
        text = "".join(rng.choice(pieces) for _ in range(size))
        data = text.encode() + (b"\n" if case % 3 == 0 else b"")
        path.write_bytes(data)
        for lines in (1, 2, 40, 60):
            assert log_tail(path, lines) == data[-TAIL_BYTES:].decode(errors="replace").splitlines()[-lines:], case
    assert log_tail(tmp_path / "none.log") == []


def test_glance_reads_what_the_tails_and_the_whole_file_say(tmp_path):
    """metrics.glance, status's one read of metrics.jsonl, against tail_records and read_jsonl: the first record,
    the latest train and eval records, the first train record and the eval with the highest val loss (all that
    `diverged` needs of them), torn lines skipped."""
    from zbpscale.files import read_jsonl
    from zbpscale.run.glance import glance

    path = tmp_path / "m.jsonl"
    lines = [json.dumps({"kind": "start", "time": 1.0, "step": 0})]
    for i in range(300):
        lines.append(json.dumps({"kind": "train", "step": i, "loss": 10.0 - i / 100}))
        if i % 50 == 49:
            lines += [json.dumps({"kind": "eval", "step": i, "val_loss": 9.0 - i / 100}),
                      json.dumps({"kind": "diag", "step": i, "loss": 1.0, "cores": [{"nsr": 1.0}] * 50})]
    lines.insert(120, '{"kind": "eval", "step": 1')  # a line torn by a killed writer, then resumed
    path.write_text("\n".join(lines) + "\n" + '{"kind": "train", "step": 300')  # a torn last line
    seen, whole, tails = glance(path), read_jsonl(path), tail_records(path, ("train", "eval"))
    assert seen.first == whole[0] and (seen.train, seen.eval) == (tails["train"], tails["eval"])
    evals = [r for r in whole if r["kind"] == "eval"]
    assert seen.steps == [whole[1], max(evals, key=lambda r: r["val_loss"])] and len(evals) == 6
    assert diverged(seen.steps, {}) == diverged(whole, {})
    assert glance(tmp_path / "none.jsonl") == glance(tmp_path) == type(seen)()  # no file, a folder: nothing


def test_a_glance_through_the_heartbeat_s_index_is_the_glance_of_the_whole_file(tmp_path):
    """#54 item 2: the glance of a file's first part (at every line boundary) followed by that of the rest is the
    glance of the whole (`then`); through an index of the first part (`glance_index`, what the trainer's heartbeat
    carries), a run's Snapshot reads only the rest and gives the whole file's glance; an index the file no longer
    starts with (a resume rewrote it: the check differs), or none, gives it too, from the whole file."""
    from zbpscale.run.folder import RunFolder
    from zbpscale.run.glance import glance, glance_index, glance_of
    from zbpscale.run.snapshot import Snapshot

    folder = RunFolder(tmp_path / "run")
    folder.path.mkdir()
    path = folder.metrics

    def seen_through(path: Path, index) -> object:  # what status sees: a new look at the folder, with this heartbeat
        folder.heartbeat.write_text(json.dumps({} if index is None else {"glance": index}))
        return Snapshot(folder.path).glance

    lines = [json.dumps({"kind": "start", "time": 1.0, "step": 0})]
    for i in range(60):
        lines.append(json.dumps({"kind": "train", "step": i, "loss": 10.0 - i / 10}))
        if i % 7 == 6:
            lines.append(json.dumps({"kind": "eval", "step": i, "val_loss": [8.0, 9.5, 9.5, float("nan")][i % 4]}))
    lines += [json.dumps({"kind": "end", "step": 59, "why": "completed"}), json.dumps({"kind": "start", "step": 60})]
    data = ("\n".join(lines) + "\n").encode()
    path.write_bytes(data)
    whole = glance(path)
    assert whole.worst["val_loss"] != whole.worst["val_loss"] and whole.end and whole.start["step"] == 60  # a NaN
    bounds = [0] + [i + 1 for i, b in enumerate(data) if b == ord("\n")]
    for at in bounds:
        assert glance_of(data[:at]).then(glance_of(data[at:])) == whole, at
        index = json.loads(json.dumps(glance_index(glance_of(data[:at]), data[:at], at)))  # through JSON
        assert seen_through(path, index) == whole, at
    index = glance_index(glance_of(data[:bounds[60]]), data[:bounds[60]], bounds[60])
    kept = [ln for ln in lines if json.loads(ln).get("step", 0) < 30]  # a resume from step 30 rolled the file back
    redone = [json.dumps({"kind": "train", "step": i, "loss": 5.0 + i / 100}) for i in range(30, 90)]  # and went on
    path.write_text("\n".join(kept + redone) + "\n")
    assert path.stat().st_size > bounds[60] and seen_through(path, index) == glance(path) != whole
    assert seen_through(path, None) == seen_through(path, {"at": "x"}) == glance(path)


def test_the_glance_keeps_of_the_long_records_what_its_readers_read_and_an_older_index_gives_the_same(tmp_path):
    """#54: every status decodes each run's heartbeat index, so the glance keeps of a start record neither its config
    (but the device, which goodput's GPUs held read) nor numerics, versions, git, host and setup times, and of an end
    record not its row for each save; an index of a release that kept the records whole gives the same glance, and
    the run's GPU-hours (8 GPUs from the start record of a cuda run without plan.json) are read from it alike."""
    from zbpscale.run.config import TrainConfig, model_config
    from zbpscale.run.folder import RunFolder
    from zbpscale.run.glance import glance, glance_index
    from zbpscale.run.goodput import run_time
    from zbpscale.run.snapshot import Snapshot

    folder = RunFolder(tmp_path / "run")
    folder.path.mkdir()
    config = TrainConfig(model=model_config("s60"), data_dir="data", steps=10, global_batch=8, device="cuda").to_dict()
    start = {"kind": "start", "time": 1.0, "attempt": 1, "step": 0, "world_size": 8, "config": config,
             "derived": {"params": 6e7, "total_steps": 10, "tokens_per_step": 8192},
             "numerics": {"torch": "2.13.0", "gpu": "H100"}, "impl_used": {"attn": "closed", "ffn": "closed"},
             "git": "0" * 40, "host": "node-1", "versions": {"zbpscale": "0.1.0"}, "setup_s": {"total": 3.0}}
    end = {"kind": "end", "time": 3600.0, "step": 9, "why": "completed", "reason": "all steps done", "ckpt_s": 0.5,
           "ckpts": 2, "ckpt_saves": [{"step": 5, "blocked_s": 0.2}, {"step": 10, "blocked_s": 0.3}]}
    train = [{"kind": "train", "time": 2.0 + i, "step": i, "loss": 10.0 - i, "step_time": 1.0} for i in range(10)]
    data = "".join(json.dumps(r) + "\n" for r in [start, *train, end]).encode()
    folder.metrics.write_bytes(data)
    whole = glance(folder.metrics)
    kept = {"kind", "time", "attempt", "step", "world_size", "derived", "impl_used"}
    assert whole.first == whole.start == {**{k: start[k] for k in kept}, "config": {"device": "cuda"}}
    assert whole.end == {k: v for k, v in end.items() if k != "ckpt_saves"} and whole.train == train[-1]
    index = glance_index(whole, data, len(data))
    assert len(json.dumps(index)) < len(json.dumps(start))  # the whole index: shorter than one start record was

    def seen_through(index: dict) -> Snapshot:  # a new look at the folder, with this heartbeat
        folder.heartbeat.write_text(json.dumps({"time": 3600.0, "glance": index}))
        return Snapshot(folder.path)

    older = {**index, "records": {**index["records"], "first": start, "start": start, "end": end}}
    assert seen_through(older).glance == seen_through(index).glance == whole
    assert run_time(seen_through(older)).gpus == run_time(seen_through(index)).gpus == 8


LN_VOCAB = math.log(50257)  # the loss of a uniform guess over GPT-2's vocabulary: where a fresh model starts
DIVERGED = [  # train loss by step, val loss by step -> (step, val loss, start) of the eval flagged, or None
    ({0: 10.951}, {15: 7.4, 31: 6.9}, None),  # falls: never flagged
    ({0: 10.951}, {15: 10.951}, None),  # at its start, not above it
    ({0: 10.951, 15: 10.2}, {15: 10.996, 31: 7.1}, (15, 10.996, 10.951)),  # the tiny-bp-s2: its first eval
    ({0: 10.951}, {15: 7.4, 31: 11.2, 47: 11.0}, (31, 11.2, 10.951)),  # fell, then climbed back above: the highest
    ({16: 7.5}, {31: 10.9}, (31, 10.9, LN_VOCAB)),  # no record of step 0 (cut): ln(vocab_size) of its config
    ({16: 7.5}, {31: 10.8}, None),  # below ln(50257) = 10.825
    ({0: 9.0}, {}, None),  # no eval yet
    ({0: 10.951}, {15: 7.4, 31: math.nan}, (31, math.nan, 10.951)),  # a NaN is not below its start
]


def test_status_rows_are_the_same_with_and_without_the_heartbeat_s_index(tmp_path, data_dir):
    """#54 item 2: the index is a cache. A run trained in two attempts (stopped at step 8, resumed: the second's
    heartbeat holds the index) gives status the same rows with the index and with it removed from heartbeat.json."""
    from zbpscale.run.config import ModelConfig, TrainConfig
    from zbpscale.train.loop import train

    cfg = TrainConfig(model=ModelConfig(n_layer=1, n_head=2, d_model=32, max_seq_len=32), data_dir=str(data_dir),
                      steps=12, global_batch=4, lr=3e-3, warmup_steps=2, eval_every=3, eval_batches=1,
                      ckpt_every=6, ckpt_every_s=0, device="cpu")
    run = tmp_path / "jobs" / "idx" / "nano-bp"
    run.mkdir(parents=True)
    (run / "config.json").write_text(json.dumps(cfg.to_dict()))
    from zbpscale import signals

    stop_after = lambda: 12 if len(losses(run)) >= 8 else 0  # noqa: E731 - SIGUSR2 once 8 steps are logged
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(signals, "received", stop_after)
        assert train(cfg, run) == "checkpointed"
    assert train(cfg, run) == "completed"  # the second attempt resumed from its stop's checkpoint
    beat = json.loads((run / "heartbeat.json").read_text())
    assert beat["glance"]["at"] <= (run / "metrics.jsonl").stat().st_size and beat["glance"]["records"]["worst"]
    def rows() -> list[dict]:  # but the heartbeat's age, which grows between the two looks
        return [{k: v for k, v in row.items() if k != "heartbeat_age_s"} for row in collect_rows(run.parent)]

    with_index = rows()
    (run / "heartbeat.json").write_text(json.dumps({k: v for k, v in beat.items() if k != "glance"}))
    without = rows()
    assert with_index == without and with_index[0]["val_loss"] is not None and with_index[0]["step"] == 12


@pytest.mark.parametrize("train, evals, flagged", DIVERGED)
def test_a_run_diverged_when_a_val_loss_is_above_its_start(train, evals, flagged):
    from conftest import config_json
    from zbpscale.run.divergence import diverged

    records = sorted([{"kind": "train", "step": s, "tokens": 64 * (s + 1), "loss": v} for s, v in train.items()]
                     + [{"kind": "eval", "step": s, "tokens": 64 * (s + 1), "val_loss": v} for s, v in evals.items()],
                     key=lambda r: (r["step"], r["kind"] == "eval"))
    found = diverged(records, json.loads(config_json("tiny")))
    assert (found and (found.step, found.val_loss, found.start)) == (flagged and pytest.approx(flagged, nan_ok=True))
    if found:
        assert found.tokens == 64 * (found.step + 1)
        assert found.start_from == ("step 0" if 0 in train else "ln(vocab)")
    assert diverged(records[len(train):], None) is None  # no start known: no step 0, no config


def write_losses(run: Path, train: dict[int, float], evals: dict[int, float]) -> None:
    """The run's metrics.jsonl as the trainer's MetricsLog writes it: a start record, then the train and val losses
    of each step (tokens: 1024 a step)."""
    from zbpscale.train.metrics import MetricsLog

    (run / "metrics.jsonl").unlink()
    log = MetricsLog(run)
    log.write("start", attempt=1, step=0, world_size=1, derived={"params": 1000, "tokens_per_step": 1024,
                                                                  "total_steps": 48})
    for step in sorted(set(train) | set(evals)):
        if step in train:
            log.write("train", step=step, tokens=1024 * (step + 1), loss=train[step], step_time=2.0,
                      tokens_per_s=512.0)
        if step in evals:
            log.write("eval", step=step, tokens=1024 * (step + 1), val_loss=evals[step])
    log.close()


def status(capsys, *argv: str) -> int:
    """`zbpscale status ARGV` in this process (stdout is not a terminal: the plain table), its exit status."""
    import argparse

    from zbpscale.jobs import status as command

    parser = argparse.ArgumentParser()
    command.add_arguments(parser)
    capsys.readouterr()
    return command.run(parser.parse_args(argv))


def test_a_diverged_run_is_said_under_the_table_and_in_json(tmp_path, capsys):
    """The issue's mini ladder: of three seeds of tiny-bp, s2's first eval (step 15) is above its loss at step 0
    and its later ones are near its other seeds' (its latest record says nothing); tiny-zbp_n4 fell, then climbed
    back above its start. Status says both, with their numbers, under the table and in --json; the seeds that fell
    are said nothing of."""
    sweep = tmp_path / "jobs" / "mini"
    falling = {0: 10.951, 15: 8.1, 31: 7.2, 47: 6.9}
    losses = {"tiny-bp": (falling, {15: 7.6, 31: 7.0, 47: 6.8}), "tiny-bp-s1": (falling, {15: 7.7, 31: 7.1, 47: 6.9}),
              "tiny-bp-s2": ({**falling, 0: 10.951}, {15: 10.996, 31: 7.3, 47: 7.0}),
              "tiny-zbp_n4": (falling, {15: 8.2, 31: 9.4, 47: 11.3})}
    for name, (train, evals) in losses.items():
        write_losses(make_run(sweep, name, steps=48, done=48, complete=True), train, evals)
    rows = by_run(collect_rows(sweep))
    assert rows["tiny-bp-s2"]["diverged"] == {"step": 15, "tokens": 16 * 1024, "val_loss": 10.996, "start": 10.951,
                                              "start_from": "step 0"}
    assert rows["tiny-bp-s2"]["val_loss"] == 7.0  # its latest eval: below its start
    assert (rows["tiny-zbp_n4"]["diverged"]["step"], rows["tiny-zbp_n4"]["diverged"]["val_loss"]) == (47, 11.3)
    assert rows["tiny-bp"]["diverged"] is None and rows["tiny-bp-s1"]["diverged"] is None

    assert status(capsys, str(sweep)) == 0
    assert [line for line in capsys.readouterr().out.splitlines() if "diverged" in line] == [
        "tiny-bp-s2: diverged: val 10.996 at step 15 is above its start 10.951",
        "tiny-zbp_n4: diverged: val 11.300 at step 47 is above its start 10.951"]
    status(capsys, str(sweep), "--json")
    json_rows = by_run(json.loads(capsys.readouterr().out)["mini"])
    assert {name: r["diverged"] and r["diverged"]["step"] for name, r in json_rows.items()} == \
        {"tiny-bp": None, "tiny-bp-s1": None, "tiny-bp-s2": 15, "tiny-zbp_n4": 47}


def test_a_metrics_file_that_holds_no_record_is_said_under_the_table(tmp_path, capsys):
    """A metrics.jsonl garbled (or another file put in its place) read as no record: the run showed no progress and
    no loss without a word. Status says so under the table, with the file to look at; one that reads is said
    nothing of, and neither is an empty one (a trainer that has not written yet)."""
    sweep = tmp_path / "jobs" / "mini"
    make_run(sweep, "tiny-bp", steps=48, done=20)
    garbled = make_run(sweep, "tiny-bp-s1", steps=48, done=20) / "metrics.jsonl"
    garbled.write_bytes(bytes(range(256)) * 8 + b"\n")
    (make_run(sweep, "tiny-bp-s2", steps=48, done=20) / "metrics.jsonl").write_bytes(b"")
    assert status(capsys, str(sweep)) == 3
    out = capsys.readouterr().out
    assert f"tiny-bp-s1: its metrics.jsonl holds 2,049 bytes but no record zbpscale reads (garbled, or another file " \
           f"in its place): its progress and losses are not shown; look at {garbled}" in " ".join(out.split())
    assert "tiny-bp:" not in out and "tiny-bp-s2:" not in out
    assert [r["metrics_unread"] for r in collect_rows(sweep)] == [0, 2049, 0]


def test_runs_trained_directly_without_a_job(tmp_path):
    sweep = tmp_path / "try"
    make_run(sweep, "tiny-bp", done=5, beat_age=2.0)  # python -m zbpscale.train, beating
    diverged = make_run(sweep, "tiny-zbp_n4", done=5, beat_age=5000.0)
    with open(diverged / "metrics.jsonl", "a") as fh:
        fh.write(json.dumps({"kind": "end", "time": time.time() - 5000, "step": 4, "why": "diverged",
                             "reason": "non-finite loss at step 4"}) + "\n")
    rows = by_run(collect_rows(sweep))
    assert rows["tiny-bp"]["state"] == "running"
    assert rows["tiny-zbp_n4"]["state"] == "failed" and "non-finite loss" in rows["tiny-zbp_n4"]["reason"]


def test_faults_garbled_config_and_a_killed_requeued_attempt(tmp_path, fake_sacct):
    """Faults: garbage in a run's config.json (broken, its file named, exit 1); a SLURM attempt killed with -9
    after a requeue, which leaves no end record of its own (failed with the scheduler's word, not 'stopped'
    with the previous attempt's reason)."""
    sweep = tmp_path / "jobs" / "faults"
    broken = make_run(sweep, "s60-bp", done=10, job="31", ends=[("timeout", "checkpointed; requeue 1/20")])
    (broken / "config.json").write_text("{garbage")
    killed = make_run(sweep, "s60-zbp_n16", done=10, job="32", ends=[("timeout", "checkpointed; requeue 1/20")],
                      log_text="step 10\n")
    with open(killed / "attempts.jsonl", "a") as fh:  # the requeued attempt started, then was killed
        fh.write(json.dumps({"event": "start", "time": time.time() - 30, "job_id": "32", "executor": "slurm"}) + "\n")
    fake_sacct({"31": "PENDING", "32": "FAILED"})
    rows = by_run(collect_rows(sweep))
    assert rows["s60-bp"]["state"] == "broken"  # its job still waits, and would start on a config it refuses
    fake_sacct({"31": "COMPLETED", "32": "FAILED"})
    rows = by_run(collect_rows(sweep))
    assert rows["s60-bp"]["state"] == "broken"
    assert "config.json is not valid JSON" in rows["s60-bp"]["reason"] and str(broken) in rows["s60-bp"]["reason"]
    assert rows["s60-zbp_n16"]["state"] == "failed" and "FAILED" in rows["s60-zbp_n16"]["reason"]
    assert rows["s60-zbp_n16"]["log"].endswith("32_0_log.out")
    assert exit_code(list(rows.values())) == 1


def test_a_queued_run_whose_config_is_garbage_is_broken(tmp_path, fake_sacct):
    """Fault: garbage in the config.json of a run whose job waits: on SLURM (squeue: PENDING) status said
    `queued`, on the local queue (its entry waiting for a driver that is not running) `stopped 0/0`. Both are
    broken, with the trainer's own one-line reason (the file and the JSON error, against RunFolder.read_config's
    error), the job still named, and status exits 1; submit leaves both alone (their jobs are live)."""
    from types import SimpleNamespace

    from zbpscale.errors import BrokenRunFolder
    from zbpscale.jobs.executors import DRIVER_DOWN, JobView, View
    from zbpscale.jobs.executors.local_queue.queue import Entry, LocalQueue
    from zbpscale.jobs.submit import run_action
    from zbpscale.run.folder import RunFolder

    sweep = tmp_path / "jobs" / "garbled"
    (entry,) = LocalQueue(tmp_path / "jobs").add([Entry(job_id="", name="garbled/s60-zbp_n16", run_dir=str(
        sweep / "s60-zbp_n16"), log_dir=str(sweep / "s60-zbp_n16" / "logs"), time_s=60)])  # queued, no driver
    queued = {"s60-bp": ("31", "slurm"), "s60-zbp_n16": (entry.job_id, "local")}
    for name, (job, executor) in queued.items():  # what submit leaves before the job starts, then garbage
        run = sweep / name
        run.mkdir(parents=True)
        (run / "config.json").write_text("{garbage")
        (run / "plan.json").write_text(json.dumps({"params": 1000, "gpus": 0, "gpu_hours": 0.0}))
        (run / "attempts.jsonl").write_text(json.dumps({"event": "submitted", "time": time.time() - 60, "job_id": job,
                                                        "executor": executor, "logs": str(run / "logs")}) + "\n")
    fake_sacct({"31": "PENDING"})
    rows = by_run(collect_rows(sweep))
    for name, (job, _) in queued.items():
        with pytest.raises(BrokenRunFolder) as refused:
            RunFolder(sweep / name).read_config()
        assert str(refused.value).startswith(f"{sweep / name / 'config.json'} is not valid JSON (line 1: ")
        assert (rows[name]["state"], rows[name]["job"]) == ("broken", job), name
        assert rows[name]["reason"].startswith(str(refused.value).split(" (hint:")[0]), name
        view = View({job: JobView("PENDING" if job == "31" else DRIVER_DOWN, source="squeue")})
        assert run_action(SimpleNamespace(run_dir=sweep / name), view) == "leave"
    assert exit_code(list(rows.values())) == 1


def test_fault_a_direct_run_stopped_by_sigterm_is_not_running(tmp_path):
    """Fault: `python -m zbpscale.train` stopped by SIGTERM: its heartbeat is fresh, but its own end record says
    it checkpointed and stopped; status believes the record."""
    sweep = tmp_path / "jobs" / "try"
    run = make_run(sweep, "tiny-bp", done=10, beat_age=2.0)
    assert by_run(collect_rows(sweep))["tiny-bp"]["state"] == "running"  # before the end record: running
    with open(run / "metrics.jsonl", "a") as fh:
        fh.write(json.dumps({"kind": "end", "time": time.time(), "step": 9, "why": "checkpointed",
                             "reason": "signal 15: requeue me"}) + "\n")
    row = by_run(collect_rows(sweep))["tiny-bp"]
    assert row["state"] == "stopped" and "checkpointed: signal 15" in row["reason"]


def test_a_sweep_file_not_yet_submitted_shows_its_planned_runs_as_new(tmp_path):
    """The README's own example before the first submit: the console script, no traceback, exit 3 (unfinished),
    every planned run listed as new with its planned steps (--json), the table said in one line; a mistyped sweep
    file and an --only that matches nothing are one line each, exit 2 (it used to print empty tables and exit 0,
    'all complete')."""
    from zbpscale.jobs.sweep import expand, load_sweep

    repo = Path(__file__).resolve().parents[1]
    (tmp_path / "sweeps").mkdir()
    (tmp_path / "sweeps" / "ladder.py").write_text((repo / "sweeps" / "ladder.py").read_text())
    out = subprocess.run(["zbpscale", "status", "sweeps/ladder.py", "--json"], cwd=tmp_path, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 3, out.stderr
    rows = json.loads(out.stdout)["ladder"]
    planned = {r.name: r.size.steps for r in expand(load_sweep(tmp_path / "sweeps" / "ladder.py"))}
    assert {r["run"]: (r["state"], r["steps"]) for r in rows} == {n: ("new", s) for n, s in planned.items()}
    assert not (tmp_path / "jobs").exists()  # status writes nothing
    shown = subprocess.run(["zbpscale", "status", "sweeps/ladder.py"], cwd=tmp_path, capture_output=True, text=True,
                           timeout=120)  # #60: the table of `new 0/96 0%` rows is one line, with the command
    assert shown.returncode == 3 and unwrapped(shown.stdout).splitlines() == [
        f"sweep ladder: nothing submitted yet ({len(rows)} runs planned); start it with "
        "python -m zbpscale.submit sweeps/ladder.py"], shown.stdout
    for args in (["sweeps/lader.py"], ["sweeps/ladder.py", "--only", "zzz*"]):  # a typo; a pattern matching nothing
        bad = subprocess.run(["zbpscale", "status", *args], cwd=tmp_path, capture_output=True, text=True, timeout=120)
        assert bad.returncode == 2 and "Traceback" not in bad.stderr and len(bad.stderr.strip().splitlines()) == 1


def test_fault_kill_9_on_slurm_is_recorded_from_sacct_once_and_a_plain_submit_resumes(tmp_path, fake_sacct):
    """Fault: the trainer of a SLURM job killed with -9 (sacct: FAILED 9:0, DerivedExitCode 0:9) writes no end
    record. Status shows the end sacct gives it (crashed, signal 9, the log) and writes nothing; submit records
    it (state.record_unheard, under its lock) once however often it looks; status says failed and what a submit
    does (resume), and submit's plan agrees (resume, not 'left alone')."""
    from types import SimpleNamespace

    from zbpscale.jobs.executors import JobView, View
    from zbpscale.jobs.state import record_unheard
    from zbpscale.jobs.submit import run_action
    from zbpscale.run.history import read_attempts

    sweep = tmp_path / "jobs" / "k9"
    run = make_run(sweep, "s60-bp", done=10, job="40", log_text="step 10\n")
    (run / "checkpoints").mkdir()
    (run / "checkpoints" / "ckpt_00000009.pt").write_bytes(b"x")
    fake_sacct({"40": "FAILED|9:0|0:9"})
    before, hours = (run / "attempts.jsonl").read_bytes(), []
    for _ in range(2):
        row = by_run(collect_rows(sweep))["s60-bp"]
        assert (run / "attempts.jsonl").read_bytes() == before  # status only reads
        assert row["state"] == "failed" and "signal 9 (SIGKILL)" in row["reason"] and row["failures"] == 1
        hours.append(row["gpu_hours"])
        time.sleep(0.05)
    assert hours[0] == hours[1]  # the dead attempt's hours stop at its last heartbeat, not at each look
    seen = JobView("FAILED", how="a task was killed by signal 9 (SIGKILL)", source="sacct")
    for _ in range(2):
        record_unheard(run, seen)
        ends = [a for a in read_attempts(run) if a["event"] == "end"]
        assert [(a["why"], a["source"]) for a in ends] == [("crashed", "sacct")]
    assert "signal 9 (SIGKILL)" in ends[0]["reason"] and ends[0]["log"].endswith("40_0_log.out")
    assert row["state"] == "failed" and "signal 9 (SIGKILL)" in row["reason"] and row["next"] == "resume"
    assert row["failures"] == 1 and row["log"] == ends[0]["log"]
    assert run_action(SimpleNamespace(run_dir=run), View({"40": JobView("FAILED", source="sacct")})) == "resume"


def test_one_decision_for_status_and_submit_in_every_state(tmp_path, fake_sacct):
    """The state status shows and the action submit takes come from one decision (jobs.state.decide): a
    run whose local-queue job waits for a dead driver is 'stopped' in status and left alone by submit (the
    driver is started again), a recorded failure is left alone without --retry, a cancelled run resumes, a
    complete one is skipped, a broken one is left alone."""
    from types import SimpleNamespace

    from zbpscale.jobs.executors import DRIVER_DOWN, JobView, View
    from zbpscale.jobs.state import decide
    from zbpscale.jobs.submit import run_action
    from zbpscale.run.history import read_attempts
    from zbpscale.run.snapshot import Snapshot

    sweep = tmp_path / "jobs" / "one"
    cases = {  # run: (folder, scheduler state, status state, submit action, with --retry)
        "a-bp": (make_run(sweep, "a-bp", done=5, job="local-1", executor="local"), DRIVER_DOWN, "stopped",
                 "leave", "leave"),
        "b-bp": (make_run(sweep, "b-bp", done=5, job="2", ends=[("failed", "diverged")]), "COMPLETED", "failed",
                 "leave", "retry"),
        "c-bp": (make_run(sweep, "c-bp", done=5, job="3", ends=[("cancelled", "scancel; checkpointed")]),
                 "CANCELLED", "cancelled", "new", "new"),
        "d-bp": (make_run(sweep, "d-bp", done=5, job="4", complete=True), "COMPLETED", "complete", "leave",
                 "leave"),
        "e-bp": (make_run(sweep, "e-bp", done=5, job="5", ends=[("timeout", "checkpointed; requeue 1/3")]),
                 "COMPLETED", "stopped", "new", "new"),
        "f-bp": (make_run(sweep, "f-bp"), "", "new", "new", "new"),
        "g-bp": (make_run(sweep, "g-bp", done=5, job="7", ends=[("timeout", "checkpointed; requeue 1/3")]),
                 "COMPLETED", "broken", "leave", "leave"),
    }
    (cases["g-bp"][0] / "config.json").write_text("[1]")  # a config that is not an object
    for name, (run, sched, state, action, with_retry) in cases.items():
        seen = JobView(sched, source="sacct") if sched else JobView()
        decided = decide(Snapshot(run), seen)
        fake = SimpleNamespace(run_dir=run)
        job = next((a["job_id"] for a in read_attempts(run) if a["event"] == "submitted"), "")
        got = (decided.state, run_action(fake, View({job: seen})), run_action(fake, View({job: seen}), retry=True))
        assert got == (state, action, with_retry), name


def test_submit_and_wait_describe_a_run_in_status_words(tmp_path):
    """`submit --wait` lines and submit's 'left alone' list use status's words: a queued job is 'queued' (it
    said 'running'), a cancelled run 'cancelled (...)' (it said 'stopped (cancelled: cancelled; ...)')."""
    from types import SimpleNamespace

    from zbpscale.jobs.executors import JobView, View
    from zbpscale.jobs.submit import progress

    sweep = tmp_path / "jobs" / "words"
    queued = make_run(sweep, "a-bp", job="1")
    running = make_run(sweep, "b-bp", done=12, job="2", beat_age=1.0)
    cancelled = make_run(sweep, "c-bp", done=5, job="3", ends=[("cancelled", "zbpscale cancel; checkpointed")])
    jobs = View({"1": JobView("PENDING", source="squeue"), "2": JobView("RUNNING", source="squeue"),
                 "3": JobView("COMPLETED", source="sacct")})
    words = [progress(SimpleNamespace(run_dir=r, steps=100), jobs)
             for r in (queued, running, cancelled)]
    assert words == ["queued", "step 12/100", "cancelled (zbpscale cancel; checkpointed)"]


def test_a_run_trained_by_hand_is_told_how_to_continue_by_hand(tmp_path):
    """A stopped run that no job ran (python -m zbpscale.train, then Ctrl-C) has no sweep to submit: the note
    says to run the trainer again on its folder (#24)."""
    from zbpscale.jobs.status import collect_rows, notes

    run = make_run(tmp_path / "try", "tiny-bp", done=12)
    with open(run / "metrics.jsonl", "a") as fh:  # an end record as releases before 2026-12-02 wrote it
        fh.write(json.dumps({"kind": "end", "time": time.time(), "step": 11, "status": "checkpointed",
                             "reason": "signal 2: requeue me"}) + "\n")
    (run / "attempts.jsonl").unlink()
    (row,) = collect_rows(tmp_path / "try")
    assert (row["state"], row["executor"]) == ("stopped", "")
    (line, _), = notes([row])
    assert line.endswith(f"; continue it with python -m zbpscale.train --run-dir {run}") and "submit" not in line


def test_progress_is_the_last_trained_step_after_a_hard_stop(tmp_path):
    """#33 item 5: the heartbeat is rewritten every few seconds; a trainer killed between two heartbeats has
    train records past the heartbeat's step. The progress column is the later of the two."""
    run = make_run(tmp_path / "jobs" / "sw", "nano-bp", done=40)  # train records of steps 0..39
    (run / "heartbeat.json").write_text(json.dumps({"step": 31, "time": time.time() - 600}))  # 9 steps behind
    (row,) = collect_rows(tmp_path / "jobs" / "sw")
    assert (row["step"], row["tokens"]) == (40, 40 * 1024)
    (run / "heartbeat.json").write_text(json.dumps({"step": 42, "time": time.time() - 600}))  # log_every > 1
    (row,) = collect_rows(tmp_path / "jobs" / "sw")
    assert row["step"] == 42


def test_a_run_folder_as_target_shows_that_run(tmp_path, fake_sacct):
    """#33 item 5: `zbpscale status jobs/<sweep>/<run>` shows that run (it said `no runs under ...`)."""
    fake_sacct({"7": "RUNNING"})
    sweep = tmp_path / "jobs" / "s"
    make_run(sweep, "tiny-bp", done=3, job="7")
    make_run(sweep, "tiny-zbp_n4", done=5)
    out = subprocess.run([sys.executable, "-m", "zbpscale.cli", "status", str(sweep / "tiny-bp"), "--json"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 3, out.stderr
    assert [(r["run"], r["state"], r["step"]) for r in json.loads(out.stdout)["s"]] == [("tiny-bp", "running", 3)]


def test_a_jobs_root_finds_a_sweep_whose_runs_have_no_config_as_its_sweep_folder_finds_them(tmp_path):
    """One rule of what a run folder is (RunFolder.is_run: a config, metrics or attempts file), whether status
    is given the jobs root or the sweep's folder: a sweep whose one run lost its config.json is found from both."""
    from zbpscale.jobs.runs import find_runs

    run = make_run(tmp_path / "jobs" / "s", "tiny-bp", done=3)
    (run / "config.json").unlink()
    (tmp_path / "jobs" / "s" / "notes").mkdir()  # a folder of other things is no run
    by_folder = [(name, [r.name for r in runs]) for name, runs in find_runs(str(tmp_path / "jobs" / "s"))]
    assert by_folder == [("s", ["tiny-bp"])]
    assert [(name, [r.name for r in runs]) for name, runs in find_runs(str(tmp_path / "jobs"))] == by_folder


def test_a_running_job_is_stalled_past_its_own_step_timeout(tmp_path, fake_sacct):
    """#33 item 3: without --stall-after, a running job is stalled once its heartbeat is older than the run's
    step_timeout_s (past which its watchdog or the sentinel ends it), not after a fixed 900 s; with no bound
    (step_timeout_s 0), after 900 s; set-up (no step of this attempt yet) is no step: 900 s too."""
    sweep = tmp_path / "jobs" / "s"
    for job, name, timeout, beat_age in (("41", "nano-bp", 20, 30.0), ("42", "nano-bp-s1", 20, 10.0),
                                         ("43", "nano-bp-s2", 0, 800.0), ("44", "nano-bp-s3", 0, 1000.0)):
        run = make_run(sweep, name, done=5, job=job, beat_age=beat_age)
        (run / "config.json").write_text(config_json(steps=100, global_batch=8, step_timeout_s=timeout))
    # a new attempt of a run with a bound, 60 s into its set-up (its heartbeat is the previous attempt's)
    run = make_run(sweep, "nano-bp-s4", done=5, job="45", beat_age=600.0)
    (run / "config.json").write_text(config_json(steps=100, global_batch=8, step_timeout_s=20))
    with open(run / "attempts.jsonl", "a") as fh:
        fh.write(json.dumps({"event": "start", "time": time.time() - 60, "job_id": "45", "executor": "slurm"}) + "\n")
    fake_sacct({job: "RUNNING" for job in ("41", "42", "43", "44", "45")})
    rows = by_run(collect_rows(sweep))
    assert {n: r["state"] for n, r in rows.items()} == {"nano-bp": "stalled", "nano-bp-s1": "running",
                                                        "nano-bp-s2": "running", "nano-bp-s3": "stalled",
                                                        "nano-bp-s4": "running"}
    assert rows["nano-bp"]["reason"] == "no heartbeat for 30s (stalled after 20s)"


def test_with_accounting_silent_a_killed_job_is_named_from_srun_in_its_log(tmp_path, fake_sacct):
    """#33 item 5: accounting that answers nothing and a controller that has forgotten the job: the reason still
    names the signal, from the line srun wrote into the job's log (as sacct would: signal 9, SIGKILL)."""
    fake_sacct({})  # neither squeue nor sacct lists the job
    sweep = tmp_path / "jobs" / "s"
    make_run(sweep, "nano-bp", done=5, job="21", log_text="step 1/40 loss 10.7954 1,072 tok/s\n"
             "srun: error: localhost: task 0: Killed\nsrun: Force Terminated StepId=21.0\n")
    (row,) = collect_rows(sweep)
    assert row["state"] == "failed"
    assert row["reason"] == "a task was killed by signal 9 (SIGKILL) on localhost (job ended (state unknown) " \
                            "without a record)"


def test_a_sweep_of_several_seeds_counts_them_and_shows_each_run_s_seed(tmp_path):
    """#35: runs named `{size}-{arm}-s{seed}` are told apart by a seed column and counted in the title; a sweep
    of one seed keeps the table it had (no seed column) and says 'one seed'."""
    from zbpscale.jobs.status import plain_table

    sweep = tmp_path / "seeds"
    for name in ("tiny-bp", "tiny-bp-s1", "tiny-bp-s2", "tiny-zbp_n4", "tiny-zbp_n4-s2"):
        make_run(sweep, name, done=10, complete=True)
    rows = collect_rows(sweep)
    assert sorted((r["run"], r["seed"]) for r in rows) == [("tiny-bp", 0), ("tiny-bp-s1", 1), ("tiny-bp-s2", 2),
                                                           ("tiny-zbp_n4", 0), ("tiny-zbp_n4-s2", 2)]
    title, head, *lines = plain_table("seeds", rows)
    assert title == "sweep seeds: 5 runs, 3 seeds" and head.split()[:4] == ["size", "arm", "seed", "state"]
    assert sorted(tuple(line.split()[:3]) for line in lines) == [("tiny", "bp", "0"), ("tiny", "bp", "1"),
                                                                 ("tiny", "bp", "2"), ("tiny", "zbp_n4", "0"),
                                                                 ("tiny", "zbp_n4", "2")]
    title, head, *_ = plain_table("seeds", [r for r in rows if r["seed"] == 0])
    assert title == "sweep seeds: 2 runs, one seed" and head.split()[:3] == ["size", "arm", "state"]


def test_runs_whose_size_and_arm_do_not_name_them_are_shown_by_their_folder_s_name(tmp_path):
    """A helper's hunt: runs trained by hand into folders of their own names ('kc', 'ref_copy'), or one moved
    aside beside the run it copies ('tiny-bp.old'), were rows the table showed alike (the same size and arm): which
    folder is which could not be read. The table then has a run column; a sweep's own runs keep the table without
    it."""
    from zbpscale.jobs.status import plain_table

    for sweep, names in (("hand", ("kc", "ref_copy")), ("aside", ("tiny-bp", "tiny-bp.old"))):
        for name in names:
            make_run(tmp_path / sweep, name, done=10, complete=True)
        rows = collect_rows(tmp_path / sweep)
        _, head, *lines = plain_table(sweep, rows)
        assert head.split()[:3] == ["run", "size", "arm"] and sorted(line.split()[0] for line in lines) == \
            sorted(names), (head, lines)
        if sweep == "hand":  # the columns beside it do not tell them apart
            assert len({tuple(line.split()[1:3]) for line in lines}) == 1
    # moved aside after its lr changed, as the plan's note suggests: the lrs differ, but a sweep that does not tune
    # shows no lr column, and the rows were alike again
    make_run(tmp_path / "lr", "tiny-bp", done=10, complete=True)
    old = make_run(tmp_path / "lr", "tiny-bp.old", done=10, complete=True)
    (old / "config.json").write_text(config_json("tiny", steps=100, global_batch=8, lr=1e-2))  # tiny, as named
    rows = collect_rows(tmp_path / "lr")
    assert len({r["lr"] for r in rows}) == 2 and not any(r["role"] for r in rows)
    _, head, *lines = plain_table("lr", rows)
    assert head.split()[:3] == ["run", "size", "arm"] and "lr" not in head.split(), head


# ---------------------------------------------------------------------------------------- reads that never write
def test_the_state_decision_reads_each_history_once_and_writes_nothing(tmp_path, fake_sacct, monkeypatch):
    """#36: deciding every run of a sweep (what status's rows, collect's states and submit's plan are made of)
    reads each run's attempts.jsonl once and leaves every byte under the sweep folder as it was; a run killed -9,
    whose end only accounting knows, is decided with that end in memory."""
    from zbpscale.jobs.runs import Run, decided
    from zbpscale.run import history
    from zbpscale.run.folder import RunFolder

    sweep = tmp_path / "jobs" / "once"
    runs = [make_run(sweep, "a-bp", done=10, job="40", log_text="step 10\n"),
            make_run(sweep, "b-bp", done=5, job="41", ends=[("timeout", "checkpointed; requeue 1/3")]),
            make_run(sweep, "c-bp", done=5, job="42", ends=[("completed", "all steps done")], complete=True),
            make_run(sweep, "d-bp")]
    fake_sacct({"40": "FAILED|9:0|0:9", "41": "COMPLETED|0:0|0:0", "42": "COMPLETED|0:0|0:0"})
    reads, real = [], history.read_bytes
    monkeypatch.setattr(history, "read_bytes", lambda path: reads.append(Path(path)) or real(path))
    before = {p: p.read_bytes() for p in sweep.rglob("*") if p.is_file()}
    found, _ = decided([Run.found(r) for r in runs], sweep.parent)
    assert sorted(reads) == sorted(RunFolder(r).attempts for r in runs)
    assert {p: p.read_bytes() for p in sweep.rglob("*") if p.is_file()} == before
    assert [r.state.state for r in found] == ["failed", "stopped", "complete", "new"]
    assert found[0].history.last_end()["source"] == "sacct" and found[0].state.next == "resume"


def test_a_dry_run_leaves_every_byte_of_the_jobs_folder_as_it_was(tmp_path, fake_sacct, data_dir):
    """`submit --dry-run` (its help: 'touch nothing') over a sweep whose runs include one killed -9 (an end only
    accounting knows, which a real submit records) and one never started: the plan is printed and no file under
    the jobs root is written, created or removed."""
    from conftest import write_sweep
    from zbpscale.files import read_jsonl
    from zbpscale.jobs.submit import submit

    path = write_sweep(tmp_path, "dry", data_dir, steps=4, arms=("bp", "zbp_n4"))
    killed = make_run(tmp_path / "jobs" / "dry", "nano-bp", done=2, job="40", log_text="step 2\n")
    fake_sacct({"40": "FAILED|9:0|0:9"})
    snapshot = lambda: {p: p.read_bytes() if p.is_file() else None  # noqa: E731
                        for p in (tmp_path / "jobs").rglob("*")}
    before = snapshot()
    _, runs, _, actions, _ = submit(str(path), dry_run=True, executor="local")
    assert snapshot() == before
    assert actions == {"nano-bp": "new", "nano-zbp_n4": "new"} and len(runs) == 2
    assert [a["event"] for a in read_jsonl(killed / "attempts.jsonl")] == ["submitted", "start"]


OPENED: list[str] | None = None
"""The paths opened while a test listens (an audit hook cannot be removed: it is idle when this is None)."""


def _on_open(event: str, args: tuple) -> None:
    if event == "open" and OPENED is not None and isinstance(args[0], (str, bytes, os.PathLike)):
        OPENED.append(os.fsdecode(args[0]))


sys.addaudithook(_on_open)


def twelve_runs(sweep: Path, fake_sacct) -> list[Path]:
    """A 12-run sweep in every state: running, stalled, queued, failed with a log, stopped, cancelled, complete,
    failed by its record, new, trained directly, broken, lost with its node."""
    runs = [make_run(sweep, "a-bp", done=10, job="50"),
            make_run(sweep, "b-bp", done=10, job="51", beat_age=5000.0),
            make_run(sweep, "c-bp", job="52"),
            make_run(sweep, "d-bp", done=5, job="53", log_text="Traceback (most recent call last):\nValueError: x\n"),
            make_run(sweep, "e-bp", done=5, job="54", ends=[("timeout", "checkpointed; requeue 1/3")]),
            make_run(sweep, "f-bp", done=5, job="55", ends=[("cancelled", "zbpscale cancel; checkpointed")]),
            make_run(sweep, "g-bp", done=10, job="56", ends=[("completed", "all steps done")], complete=True),
            make_run(sweep, "h-bp", done=3, job="57", ends=[("failed", "diverged at step 2")]),
            make_run(sweep, "i-bp"),
            make_run(sweep, "j-bp", done=4),
            make_run(sweep, "k-bp", done=5, job="58", ends=[("timeout", "checkpointed; requeue 1/3")]),
            make_run(sweep, "l-bp", done=2, job="59")]
    (runs[10] / "config.json").write_text("{not json")  # broken
    fake_sacct({"50": "RUNNING", "51": "RUNNING", "52": "PENDING", "53": "FAILED|1:0|0:1", "54": "COMPLETED",
                "55": "CANCELLED", "56": "COMPLETED", "57": "COMPLETED", "58": "COMPLETED", "59": "NODE_FAIL"})
    return runs


TWELVE = {"a-bp": "running", "b-bp": "stalled", "c-bp": "queued", "d-bp": "failed", "e-bp": "stopped",
          "f-bp": "cancelled", "g-bp": "complete", "h-bp": "failed", "i-bp": "new", "j-bp": "running",
          "k-bp": "broken", "l-bp": "failed"}


@pytest.mark.parametrize("watching", [False, True], ids=["status", "status --watch"])
def test_a_status_of_a_12_run_sweep_opens_each_run_file_at_most_once(tmp_path, fake_sacct, watching):
    """#44: one `zbpscale status` of a 12-run sweep in every state (running, stalled, queued, failed with a log,
    broken, cancelled, complete, stopped, new, trained directly) opens each file of each run at most once (counted
    by Python's own audit events for every open, whatever the function), and reads every file its rows come from;
    so does each refresh of --watch (through the Poller, which looks at the folders to decide when to ask)."""
    global OPENED
    from zbpscale.jobs.poller import Poller
    from zbpscale.jobs.runs import find_runs
    from zbpscale.jobs.status import collect_sweeps

    sweep = tmp_path / "jobs" / "twelve"
    runs = twelve_runs(sweep, fake_sacct)
    poller = Poller(tmp_path / "jobs", poll_s=60) if watching else None
    found = find_runs(str(sweep))
    for _ in range(2 if watching else 1):  # a second refresh: the Poller answers from its last ask
        OPENED = []
        try:
            ((_, rows),) = collect_sweeps(found, poller=poller)
        finally:
            opened, OPENED = OPENED, None
        under = [Path(p).resolve() for p in opened if Path(p).resolve().is_relative_to(sweep.resolve())]
        twice = {str(p.relative_to(sweep.resolve())): n for p in set(under) if (n := under.count(p)) > 1}
        assert not twice, f"opened more than once in one look: {twice}"
        for run in runs:  # each file a row is made of was read (an open count of 0 would pass the check above)
            for name in ("attempts.jsonl", "config.json", "plan.json", "metrics.jsonl", "heartbeat.json"):
                if (run / name).exists():
                    assert (run / name).resolve() in under, f"{run.name}/{name} not read"
    states = {r["run"]: r["state"] for r in rows}
    assert states == TWELVE, states


def test_the_t_p_f_column_is_explained_under_the_table_and_in_help(tmp_path, capsys, monkeypatch):
    """#60: the legend of T/P/F is a line under the table (piped: the plain table) and in `status --help`."""
    import argparse

    from zbpscale.jobs import status as command

    make_run(tmp_path / "legend", "tiny-bp", done=10, complete=True)
    monkeypatch.setenv("COLUMNS", "80")
    assert status(capsys, str(tmp_path / "legend")) == 0
    shown = capsys.readouterr().out
    assert max(len(line) for line in shown.splitlines()) <= 80  # the legend folds at the width
    out = unwrapped(shown).splitlines()
    assert "T/P/F" in out[1] and out[4] == command.LEGEND and out[4].startswith("T/P/F: each run's time limits")
    parser = argparse.ArgumentParser()
    command.add_arguments(parser)
    assert command.LEGEND in " ".join(parser.format_help().split())


def test_the_plan_piped_has_no_trailing_spaces_and_gives_both_parameter_counts(tmp_path):
    """#60: the plan printed to a pipe: no line ends in spaces (its title was padded to the table's width), and
    every run shows its total and its non-embedding parameter count (N, what the fits and figures use)."""
    from zbpscale.jobs.sweep import load_sweep

    repo = Path(__file__).resolve().parents[1]
    (tmp_path / "sweeps").mkdir()
    (tmp_path / "sweeps" / "mini_ladder.py").write_text((repo / "sweeps" / "mini_ladder.py").read_text())
    out = subprocess.run([sys.executable, "-m", "zbpscale.submit", "sweeps/mini_ladder.py", "--dry-run", "--executor",
                          "local"], cwd=tmp_path, capture_output=True, text=True, timeout=300,
                         env={**os.environ, "COLUMNS": "200"})
    assert out.returncode == 0, out.stdout + out.stderr
    lines = out.stdout.splitlines()
    assert lines[0].startswith("sweep mini_ladder: ") and not [ln for ln in lines if ln != ln.rstrip()]
    sizes = {s.name: s for s in load_sweep(tmp_path / "sweeps" / "mini_ladder.py").sizes}
    for name, size in sizes.items():
        row = next(ln for ln in lines if f"│ {name}-bp" in ln)
        assert f"{size.params / 1e6:,.1f}M" in row and f"{size.params_non_embedding / 1e6:,.2f}M" in row, row

    # $COLUMNS unset: 80 columns. The notes fold under their first line; what they say is what they said at 200.
    narrow = subprocess.run([sys.executable, "-m", "zbpscale.submit", "sweeps/mini_ladder.py", "--dry-run",
                             "--executor", "local"], cwd=tmp_path, capture_output=True, text=True, timeout=300,
                            env={k: v for k, v in os.environ.items() if k != "COLUMNS"})
    assert narrow.returncode == 0, narrow.stdout + narrow.stderr
    folded = narrow.stdout.splitlines()
    too_wide = [ln for ln in folded if len(ln) > 80 and len(ln.split()) > 2]  # only a word longer than a line may
    assert not too_wide and not [ln for ln in folded if ln != ln.rstrip()], too_wide
    assert any(ln.startswith("      ") for ln in folded)  # a note folded under its text
    notes = [ln for ln in unwrapped(out.stdout).splitlines() if ln.startswith("note: ")]
    assert len(notes) >= 3 and notes == [ln for ln in unwrapped(narrow.stdout).splitlines() if ln.startswith("note: ")]


def test_status_tests_each_entry_of_a_sweep_folder_in_the_process_that_reads_it(tmp_path, monkeypatch):
    """#54: status lists the folders of a sweep's folder without testing each (a cold folder of 10,000 runs took
    0.75 s to test one after another before the rows) and tests each where it reads it, by the stamps its look takes
    (Snapshot.is_run): its rows are those of the runs RunFolder.is_run finds, in one process or spread over several,
    from the sweep's folder or the jobs root, with a look kept or not."""
    from zbpscale import bulk
    from zbpscale.run.snapshot import keep

    sweep = tmp_path / "jobs" / "s"
    make_run(sweep, "tiny-bp", done=3)
    assert keep(make_run(sweep, "tiny-zbp_n4", done=5, job="local-1", executor="local",
                         ends=[("timeout", "checkpointed")]))  # its look kept in the sweep's .looks.jsonl
    lost = make_run(sweep, "micro-bp", done=2)
    (lost / "config.json").unlink()  # still a run's: its metrics and attempts
    make_run(sweep, ".tiny-bp.old", done=1)  # moved aside by hand, hidden: a run still
    for other in ("notes", "array-logs"):  # folders of other things
        (sweep / other).mkdir()
        (sweep / other / "1_0.log").write_text("x\n")
    (sweep / "README").write_text("a file is no run\n")
    runs = [p.name for p in RunFolder.all_in(sweep)]
    assert runs == [".tiny-bp.old", "micro-bp", "tiny-bp", "tiny-zbp_n4"]
    assert sorted(r["run"] for r in collect_rows(sweep)) == runs
    monkeypatch.setattr(bulk, "LEAST", 1)
    monkeypatch.setattr(bulk.threading, "active_count", lambda: 1)  # pytest-xdist's worker thread
    assert sorted(r["run"] for r in collect_rows(sweep)) == runs
    for target in (sweep, tmp_path / "jobs"):
        out = subprocess.run([sys.executable, "-m", "zbpscale.cli", "status", str(target), "--json"],
                             capture_output=True, text=True, timeout=60)
        assert sorted(r["run"] for r in json.loads(out.stdout)["s"]) == runs, out.stderr


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs 2 cores")
def test_rows_spread_over_forked_processes_are_the_rows_read_in_one(tmp_path, fake_sacct, monkeypatch):
    """#54: status of a large sweep reads its runs in forked processes (bulk.spread_asking, from 1,000 runs a
    process), each its runs' attempts for the one view of their jobs (SLURM's, here) and then their rows; the 12-run
    sweep in every state, spread one run a process, gives the rows read in one process, and so does status --watch's
    refresh (each process reads its runs' looks for the Poller)."""
    from zbpscale import bulk
    from zbpscale.jobs.poller import Poller
    from zbpscale.jobs.runs import find_runs
    from zbpscale.jobs.status import collect_sweeps

    sweep = tmp_path / "jobs" / "twelve"
    twelve_runs(sweep, fake_sacct)
    one = collect_rows(sweep)
    monkeypatch.setattr(bulk, "LEAST", 1)
    monkeypatch.setattr(bulk.threading, "active_count", lambda: 1)  # pytest-xdist's worker thread
    monkeypatch.setattr(bulk, "_fork", lambda ask, work, part, siblings, fork=bulk._fork: forked.append(len(part))
                        or fork(ask, work, part, siblings))
    forked: list[int] = []
    spread = collect_rows(sweep)
    assert forked and sum(forked) == 12 - 12 // bulk.processes(12), "no run was read in a child"
    assert {r["run"]: r["state"] for r in spread} == TWELVE

    forked.clear()  # status --watch: each process reads its runs' looks for the Poller, which asks when it is due
    ((_, watched),) = collect_sweeps(find_runs(str(sweep)), poller=Poller(tmp_path / "jobs", poll_s=60))
    assert forked and sum(forked) == 12 - 12 // bulk.processes(12), "no run was read in a child"

    def aged(rows):  # what changes with the clock between the two looks: ages, a running attempt's hours
        return [{k: v for k, v in r.items() if k not in ("heartbeat_age_s", "gpu_hours")} for r in rows]

    assert aged(spread) == aged(one) == aged(watched)
    assert [r["gpu_hours"] for r in spread] == pytest.approx([r["gpu_hours"] for r in one], abs=0.01)
    assert [r["gpu_hours"] for r in watched] == pytest.approx([r["gpu_hours"] for r in one], abs=0.01)


def test_a_note_that_many_runs_share_is_one_line_naming_some(tmp_path):
    """Runs stopped by one preemption, or failed alike: past ALIKE (3) runs that need the same words, one line under
    the table says them, where the first of them stands, naming three and the number of the others, and the first
    one's log (a 10,000-run sweep's status said 9,000 such lines); up to three, a line each with its own log."""
    from zbpscale.jobs.status import notes
    from zbpscale.tables import ALIKE

    sweep = tmp_path / "jobs" / "sw"
    for i in range(5):
        make_run(sweep, f"s{i}-bp", done=12, job=f"local-{i}", executor="local",
                 ends=[("preempted", "checkpointed; requeue")])
    for i in range(5, 9):
        make_run(sweep, f"s{i}-bp", done=12, job=f"local-{i}", executor="local", log_text="Traceback\n",
                 ends=[("failed", "exit status 1: ValueError: bad shard 7")])
    for i in (9, 10):
        make_run(sweep, f"s{i}-bp", done=12, job=f"local-{i}", executor="local", log_text="Traceback\n",
                 ends=[("failed", "exit status 1: OSError: disk full")])
    rows = collect_rows(sweep)
    stopped = [r for r in rows if r["state"] == "stopped"]
    alike = [r for r in rows if r["state"] == "failed" and "bad shard" in r["reason"]]
    few = [r for r in rows if r["state"] == "failed" and "disk full" in r["reason"]]
    assert ALIKE == 3 and (len(stopped), len(alike), len(few)) == (5, 4, 2)
    assert len({r["log"] for r in alike + few}) == 6 and all(Path(r["log"]).is_file() for r in alike + few)
    retry = "; fix the cause, then submit --retry"
    said = {  # the lines said where each run stands
        stopped[0]["run"]: [f"{', '.join(r['run'] for r in stopped[:3])} (+2 more): stopped: {stopped[0]['reason']}"
                            "; submit again to resume"],
        alike[0]["run"]: [f"{', '.join(r['run'] for r in alike[:3])} (+1 more): failed: {alike[0]['reason']}  "
                          f"(log of {alike[0]['run']}: {alike[0]['log']}){retry}"],
        few[0]["run"]: [f"{r['run']}: failed: {r['reason']}  (log: {r['log']}){retry}" for r in few],
    }
    assert [line for line, _ in notes(rows)] == [line for r in rows for line in said.get(r["run"], [])]


def test_status_on_a_terminal_is_the_boxed_table_with_each_state_in_its_color(tmp_path, fake_sacct, monkeypatch,
                                                                               capsys):
    """On a terminal that takes colors (FORCE_COLOR), status prints the boxed table (tables.boxed, checked against
    rich's own in tests/test_cli.py) with each run's state in STYLE's color and each note in its state's; with
    NO_COLOR, the same lines without a code."""
    import re

    from zbpscale.cli import main
    from zbpscale.jobs import status
    from zbpscale.tables import painted

    twelve_runs(tmp_path / "jobs" / "sw", fake_sacct)
    monkeypatch.setenv("COLUMNS", "200")
    monkeypatch.setattr(status, "on_terminal", lambda: True)
    monkeypatch.setenv("FORCE_COLOR", "1")
    main(["status", str(tmp_path / "jobs" / "sw")])
    colored = capsys.readouterr().out.splitlines()
    monkeypatch.setenv("NO_COLOR", "1")
    main(["status", str(tmp_path / "jobs" / "sw")])
    plain = capsys.readouterr().out.splitlines()
    assert [re.sub(r"\x1b\[[0-9;]*m", "", line) for line in colored] == plain and "\x1b" not in "".join(plain)
    assert plain[0] == "sweep sw: 12 runs, one seed" and plain[1].startswith("┏") and plain[3].startswith("┡")
    rows = {line.split("│")[1].strip(): line for line in colored if line.startswith("│")}
    assert set(rows) == {n.split("-")[0] for n in TWELVE}  # the size column: a, b, ... (one arm, bp)
    for name, state in TWELVE.items():
        assert f" {painted(state, status.STYLE[state])} " in rows[name.split("-")[0]], (name, rows)
    notes = colored[colored.index(next(line for line in colored if line.startswith("└"))) + 3:]
    assert notes and all(line.startswith("\x1b[") and line.endswith("\x1b[0m") for line in notes)


def test_runs_go_by_their_non_embedding_count_then_the_total(tmp_path):
    """A deep narrow rung (the larger N, the smaller total) after a shallow wide one, as `zbpscale sizes` orders
    them; a run folder of an older release, whose plan and records say only the total, by the total."""
    sweep = tmp_path / "jobs" / "own"
    for name, n, total in (("deep-bp", 321_000, 6_800_000), ("wide-bp", 214_000, 13_100_000)):
        make_run(sweep, name, plan={"params": total, "params_non_embedding": n, "gpus": 8, "gpu_hours": 1.0})
    make_run(sweep, "old-bp", plan={"params": 250_000, "gpus": 8, "gpu_hours": 1.0})
    assert [r["run"] for r in collect_rows(sweep)] == ["wide-bp", "old-bp", "deep-bp"]


def test_a_grid_run_whose_lr_diverged_is_complete_with_its_answer(tmp_path):
    """A tuning sweep's grid run that its trainer stopped at a non-finite loss has given its grid's answer ('lr too
    high'): complete, said under the table, nothing to retry (it was failed: status exited 1, submit --wait said
    'not complete' and told the user to fix the cause and --retry it); a run of the study that diverges is failed."""
    sweep = tmp_path / "jobs" / "tuned"
    for name, role in (("nano-bp-lr1e30", "tuning"), ("nano-bp", "final")):
        run = make_run(sweep, name, done=2, job=f"local-{len(name)}", executor="local",
                       ends=[("failed", "exit status 3 (diverged)")],
                       plan={"params": 1000, "gpus": 0, "gpu_hours": 0.0, "role": role})
        with (run / "metrics.jsonl").open("a") as fh:
            fh.write(json.dumps({"kind": "end", "time": time.time() - 70, "step": 1, "why": "diverged",
                                 "reason": "non-finite loss nan / grad norm nan"}) + "\n")
    rows = {r["run"]: r for r in collect_rows(sweep)}
    grid, final = rows["nano-bp-lr1e30"], rows["nano-bp"]
    assert (grid["state"], grid["next"]) == ("complete", "leave") and grid["reason"] == (
        "its lr is too high, an answer of its grid (the trainer stopped it at step 1: non-finite loss nan / grad norm "
        "nan)")
    assert final["state"] == "failed" and exit_code([grid]) == 0 and exit_code([grid, final]) == 1


@pytest.mark.parametrize("edit, said", [
    ("metrics", None),  # a loss in words, a val loss in words: skipped where a number is read
    ("attempts", None),  # an event whose time is words: skipped, as a garbled line
    ("heartbeat", None),  # a heartbeat whose time and step are words: left out
    ("train time", "broken"),  # a train record whose time is words: goodput cannot count it
])
def test_a_run_folder_edited_by_hand_into_values_of_another_kind_is_not_a_traceback(tmp_path, fake_sacct, edit,
                                                                                      said):
    """Hand-edited run files (a helper's bug hunt, 2026-12-06): each was a traceback of the whole status. Values
    that only a reader of one field meets are skipped there; any other is that run's `broken` row, saying the error,
    and every other run's row is as it was."""
    sweep = tmp_path / "jobs" / "s"
    run = make_run(sweep, "tiny-bp", steps=40, done=40, job="7", ends=[("completed", "all steps done")],
                   complete=True)
    make_run(sweep, "tiny-bp-s1", steps=40, done=40, job="8", ends=[("completed", "all steps done")], complete=True)
    before = by_run(collect_rows(sweep))
    metrics, attempts, beat = (run / n for n in ("metrics.jsonl", "attempts.jsonl", "heartbeat.json"))
    if edit == "metrics":
        text = metrics.read_text().replace('"loss": 5.0,', '"loss": "abc",', 1)
        metrics.write_text(re.sub(r'"val_loss": [0-9.e-]+', '"val_loss": "x"', text, count=1))
    elif edit == "attempts":
        attempts.write_text(attempts.read_text().replace('"time": ', '"time": "yesterday", "was": ', 1))
    elif edit == "heartbeat":
        beat.write_text(json.dumps({"step": "many", "time": "now"}))
    else:
        metrics.write_text(metrics.read_text().replace('"kind": "train", "time": ', '"kind": "train", "time": "x", '
                                                                                   '"was": ', 1))
    rows = by_run(collect_rows(sweep))
    assert rows["tiny-bp-s1"] == {**before["tiny-bp-s1"], "heartbeat_age_s": rows["tiny-bp-s1"]["heartbeat_age_s"]}
    assert rows["tiny-bp"]["state"] == (said or "complete"), rows["tiny-bp"]
    if said:
        assert "its files hold what zbpscale does not write (TypeError" in rows["tiny-bp"]["reason"]
        assert rows["tiny-bp"]["dir"] == str(run)


@pytest.mark.parametrize("edit", ["latest losses", "attempts folder", "attempts garbled"])
def test_the_latest_losses_in_words_and_an_attempts_record_that_cannot_be_read(tmp_path, fake_sacct, edit):
    """Two more hand edits (2026-12-06): the latest train and eval records' losses in words reached the row and
    failed the table's drawing, a traceback of the whole status; an attempts.jsonl that is a folder was a traceback
    of every command that read the run. Now the row shows the latest records that hold numbers; a run whose attempts
    cannot be read is `broken`, saying why (an empty history would call it new, and a submit would queue a second
    job beside one that may run), and every other row is as it was. So is one that holds bytes but no event (garbage
    written over it: it was read as no event, the run new, and submit queued a second job beside the one queued)."""
    from zbpscale.jobs.status import plain

    sweep = tmp_path / "jobs" / "s"
    run = make_run(sweep, "tiny-bp", steps=40, done=40, job="7", ends=[("completed", "all steps done")],
                   complete=edit == "latest losses")
    make_run(sweep, "tiny-bp-s1", steps=40, done=40, job="8", ends=[("completed", "all steps done")], complete=True)
    before = by_run(collect_rows(sweep))
    if edit == "latest losses":  # the last train record (step 39) and the last eval (step 39)
        metrics = run / "metrics.jsonl"
        *lines, last_train, last_eval = metrics.read_text().splitlines()
        lines += [last_train.replace('"loss": ', '"loss": "abc", "was": '),
                  last_eval.replace('"val_loss": ', '"val_loss": "x", "was": ')]
        metrics.write_text("\n".join(lines) + "\n")
    elif edit == "attempts folder":
        (run / "attempts.jsonl").unlink()
        (run / "attempts.jsonl").mkdir()
    else:
        (run / "attempts.jsonl").write_bytes(b"garbage\x00\xff{{{\nxx\n")
    rows = by_run(collect_rows(sweep))
    assert rows["tiny-bp-s1"] == {**before["tiny-bp-s1"], "heartbeat_age_s": rows["tiny-bp-s1"]["heartbeat_age_s"]}
    mine = rows["tiny-bp"]
    if edit == "latest losses":
        assert (mine["state"], mine["train_loss"], mine["val_loss"]) == ("complete", 5.0 - 38 / 100, 4.9 - 29 / 100)
    else:
        assert (mine["state"], mine["next"]) == ("broken", "leave") and exit_code(list(rows.values())) == 1
        restore = "restore it as the file of the run's attempts, one JSON line each"
        assert mine["reason"] == (f"{run / 'attempts.jsonl'} cannot be read (Is a directory) (hint: {restore})"
                                  if edit == "attempts folder" else
                                  f"{run / 'attempts.jsonl'} holds 16 bytes but no event zbpscale writes (garbled, or "
                                  "another file in its place): a job of the run may still be queued or running (hint: "
                                  f"{restore}, or move it aside once no job of the run is left queued or running)")
        (tmp_path / "s.py").write_text(  # a submit of the sweep leaves the broken run alone, as the complete one
            "from zbpscale.jobs.sweep import Data, Resources, Size, Sweep, arm\n"
            "SWEEP = Sweep(name='s', sizes=(Size(name='tiny', global_batch=8, tokens=8 * 256 * 40, resources="
            "Resources(gpus_per_node=0, tasks_per_node=1, cpus_per_task=1)),), arms=(arm('bp'),), seeds=(0, 1), "
            "data=Data(dir='data', source='embedded'))\n")
        out = subprocess.run([sys.executable, "-m", "zbpscale.submit", "s.py", "--executor", "local"], cwd=tmp_path,
                             capture_output=True, text=True, timeout=120)
        assert out.returncode == 0 and "left alone: tiny-bp (broken), tiny-bp-s1 (complete)" in out.stdout, \
            out.stdout + out.stderr
        assert not (tmp_path / "jobs" / ".localq" / "entries").exists()  # nothing queued
    assert f"tiny  bp      0  {mine['state']}" in plain([("s", list(rows.values()))])  # the table is drawn


def test_lines_of_an_attempts_record_that_are_json_but_no_object_are_skipped_as_torn_lines(tmp_path, fake_sacct):
    """`[1,2]` and `"str"` appended to attempts.jsonl (a hand edit) were events to every reader: status, collect and
    report failed on them with an AttributeError. They are skipped as a torn line is; the row is as it was."""
    sweep = tmp_path / "jobs" / "s"
    run = make_run(sweep, "tiny-bp", steps=40, done=40, job="7", ends=[("completed", "all steps done")], complete=True)
    before = collect_rows(sweep)
    with open(run / "attempts.jsonl", "a") as fh:
        fh.write('[1, 2]\n"str"\n3\n')
    after = collect_rows(sweep)
    assert [{**r, "heartbeat_age_s": 0} for r in after] == [{**r, "heartbeat_age_s": 0} for r in before]


def test_watch_before_the_target_watches_it(tmp_path):
    """`status --watch jobs/x` (argparse gives --watch the target) was a usage error; it watches jobs/x every 10 s.
    `status RUN_FOLDER --only X` left --only out without a word: one line."""
    import argparse

    from zbpscale.errors import ConfigError
    from zbpscale.jobs import status as command

    parser = argparse.ArgumentParser()
    command.add_arguments(parser)
    run = tmp_path / "jobs" / "s" / "tiny-bp"
    run.mkdir(parents=True)
    (run / "config.json").write_text("{}")
    for argv, target, watch, only in ((["--watch", "jobs/x"], "jobs/x", 10.0, None),
                                      (["--watch", "5", "jobs/x"], "jobs/x", 5.0, None),
                                      (["jobs/x", "--watch"], "jobs/x", 10.0, None),
                                      ([str(run)], str(run.parent), None, "tiny-bp")):
        args = parser.parse_args(argv)
        command.targeted(args)
        assert (args.target, args.watch, args.only) == (target, watch, only)
    for argv, words in ((["jobs/y", "--watch", "jobs/x"], "--watch 'jobs/x': expected seconds"),
                        ([str(run), "--only", "x"], "--only x and the run folder")):
        with pytest.raises(ConfigError, match=words):
            command.targeted(parser.parse_args(argv))
    for bad in ("0", "10s"):  # a number out of range, or no number and no path: argparse's error still
        with pytest.raises(SystemExit):
            parser.parse_args(["--watch", bad])


def test_a_sweep_file_not_named_py_is_found_as_submit_takes_it(tmp_path):
    """submit planned and submitted sweeps/smoke.txt; status, cancel and collect of it said "no sweep file or sweep
    folder at smoke.txt". They find the runs the same file named .py plans."""
    from conftest import write_sweep
    from zbpscale.errors import ConfigError
    from zbpscale.jobs.runs import find_runs

    py = write_sweep(tmp_path, "s", tmp_path / "data", steps=3, arms=("bp", "zbp_n4"))
    txt = py.rename(tmp_path / "s.txt")
    found = [(name, [r.name for r in runs]) for name, runs in find_runs(str(txt))]
    txt.rename(py)
    assert found == [(name, [r.name for r in runs]) for name, runs in find_runs(str(py))] == [
        ("s", ["nano-bp", "nano-zbp_n4"])]
    run = make_run(tmp_path / "jobs" / "s", "tiny-bp", done=3)  # a file of a run folder is no sweep file to run
    with pytest.raises(ConfigError, match=f"{run / 'config.json'} is a file of the run folder {run}") as said:
        find_runs(str(run / "config.json"))
    # the hint is right for every command that finds runs so (cancel refused the folder it named: one run's)
    assert f"cancel and sync its sweep's folder, {run.parent}, with --only tiny-bp" in said.value.hint
