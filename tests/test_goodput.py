"""Goodput accounting (run/goodput.py) and the trainer's records it reads, against references.

Compared: a real CPU run killed (-9) after a periodic checkpoint and resumed, whose lost steps are those between
its newest checkpoint and its last step on disk at the kill (closed form), whose lost time lies between the step
times of those steps and the span from the last step kept to the last step killed, and whose held time is the
sum of the attempts' start -> end events the test wrote; a hand-built run folder of three attempts (a time limit,
a kill -9 that submit recorded from sacct, a completion) with literal timestamps, against a hand-computed table of
queue, start-up, training, saves, lost and other; the same folder in an older release's format (no save or lost
fields) and a real older release's fixture, whose time falls in "other", read without a byte written; status
--goodput and collect's summary against the same table.
"""

import hashlib
import json
import math
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import trainer_env, wait_until
from zbpscale.cli import main
from zbpscale.files import read_json
from zbpscale.run import goodput
from zbpscale.run.config import ModelConfig, TrainConfig
from zbpscale.run.fold import Fold
from zbpscale.run.folder import RunFolder
from zbpscale.run.glance import indexed_tail
from zbpscale.run.history import record
from zbpscale.run.records import SETUP_PHASES, read_records
from zbpscale.run.snapshot import Snapshot

REPO = Path(__file__).resolve().parents[1]
SMALL = ModelConfig(n_layer=2, n_head=2, d_model=32, max_seq_len=32)


# ------------------------------------------------------------------------ a real run, killed and resumed
def trainer(run_dir: Path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "zbpscale.train", "--run-dir", str(run_dir)],
                            env=trainer_env(1), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def train_records(run_dir: Path) -> list[dict]:
    return [r for r in read_records(run_dir) if r["kind"] == "train"]


def test_a_kill_9_past_a_checkpoint_is_lost_work_of_the_steps_past_it(tmp_path, data_dir):
    cfg = TrainConfig(model=SMALL, data_dir=str(data_dir), steps=60, global_batch=8, lr=3e-3, warmup_steps=2,
                      eval_every=0, eval_batches=1, ckpt_every=4, ckpt_every_s=0, device="cpu")
    run = tmp_path / "run"
    run.mkdir()
    RunFolder(run).config.write_text(json.dumps(cfg.to_dict()))
    folder = RunFolder(run)
    record(run, "submitted", job_id="1", executor="local")
    record(run, "start", job_id="1", executor="local")
    proc = trainer(run)
    wait_until(lambda: folder.list_checkpoints() and len(train_records(run)) >= folder.list_checkpoints()[-1][0] + 3,
               "three steps past a checkpoint", 120, proc=proc, every=0.02)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    record(run, "end", job_id="1", executor="local", why="crashed", reason="killed by SIGKILL")
    # the reference, from what is on disk at the kill
    saved = folder.list_checkpoints()[-1][0]
    logged = train_records(run)
    beat = read_json(folder.heartbeat)
    reached = max(logged[-1]["step"] + 1, beat.get("step", 0))
    past = [r for r in logged if r["step"] >= saved]
    kept = [r for r in logged if r["step"] < saved]
    time.sleep(0.3)  # a queue wait the job layer's events date
    record(run, "start", job_id="1", executor="local")
    out, _ = trainer(run).communicate(timeout=300)  # ~17 s in the suite on 2 cores
    assert folder.complete.exists(), out
    record(run, "end", job_id="1", executor="local", why="completed", reason="all steps done")

    (resume,) = [r for r in read_records(run) if r["kind"] == "resume"]
    assert resume["from_step"] == saved and resume["redo_steps"] == reached - saved >= 3
    last_seen = max(past[-1]["time"], beat["time"])
    assert sum(r["step_time"] for r in past) <= resume["redo_s"] <= last_seen - kept[-1]["time"]
    starts = [r for r in read_records(run) if r["kind"] == "start"]
    assert all(list(s["setup_s"]) == [p for p in SETUP_PHASES if p in s["setup_s"]] for s in starts)
    ends = [r for r in read_records(run) if r["kind"] == "end"]
    assert [e["ckpts"] for e in ends] == [60 // 4 - saved // 4]  # the second attempt's saves, the final one too

    events = [json.loads(line) for line in folder.attempts.read_text().splitlines()]
    held = (events[2]["time"] - events[1]["time"]) + (events[4]["time"] - events[3]["time"])
    first, second = goodput.read_attempts(run)
    g = goodput.read(run)
    assert g.held == pytest.approx(held, abs=1e-9) and g.attempts == 2
    assert sum(getattr(g, b) for b in goodput.BUCKETS) == pytest.approx(held, rel=1e-9)
    assert first.lost == resume["redo_s"] and second.lost == 0.0
    assert second.queue == pytest.approx(events[3]["time"] - events[2]["time"], abs=1e-9) and second.queue >= 0.3
    assert first.startup == pytest.approx(starts[0]["time"] - events[1]["time"], abs=1e-9)
    assert second.restart == pytest.approx(starts[1]["time"] - events[2]["time"], abs=1e-9)
    assert g.training == pytest.approx(sum(r["step_time"] for r in train_records(run)), rel=1e-12)  # log_every 1
    assert second.saves == ends[0]["ckpt_s"] > 0 and first.saves == resume["before"]["ckpt_s"] > 0

    # #54 item 2: the heartbeat's index is a cache. Read through it (the fold of what it covers, then the records
    # after it), the attempts are those of every record read; without it, the same.
    index = beat_now = read_json(folder.heartbeat)["glance"]
    assert index["fold"] and indexed_tail(folder.metrics, index) is not None  # the index serves: not the whole file
    assert Snapshot(run).fold.state == Fold.of(read_records(run)).state
    folder.heartbeat.write_text(json.dumps({**read_json(folder.heartbeat), "glance": {
        k: v for k, v in beat_now.items() if k != "fold"}}))
    assert goodput.read_attempts(run) == [first, second]
    folder.heartbeat.write_text(json.dumps({**read_json(folder.heartbeat), "glance": {
        **beat_now, "fold": {"attempts": [{"first": "garbled"}]}}}))  # not this release's: the file is read whole
    assert goodput.read_attempts(run) == [first, second]


def test_a_fold_through_json_goes_on_as_the_fold_of_the_whole_file():
    """The fold of a metrics file's first records, written as JSON (the heartbeat's index) and fed the rest, is the
    fold of every record, at every record boundary: two attempts, a resume, an end with and one without ckpt_s."""
    records = [{"kind": "resume", "time": 0.5, "redo_s": 9.0, "before": {"time": 0.4, "ckpt_s": 0.25, "x": 1}},
               {"kind": "start", "time": 1.0, "step": 0, "setup_s": {"total": 0.7}}]
    records += [{"kind": "train", "time": 2.0 + i, "step": 2 * i + 1, "step_time": 0.5} for i in range(5)]
    records += [{"kind": "end", "time": 7.5, "step": 9, "why": "checkpointed", "ckpt_s": 0.3},
                {"kind": "resume", "time": 8.0, "redo_s": 1.5, "before": {"time": 7.4}},
                {"kind": "start", "time": 9.0, "step": 6}]
    records += [{"kind": "train", "time": 10.0 + i, "step": 6 + i, "step_time": 0.25} for i in range(4)]
    records += [{"kind": "eval", "time": 14.5, "step": 9, "val_loss": 3.0}, {"kind": "end", "time": 15.0}]
    whole = Fold.of(records)
    beat = {"time": 16.0, "ckpt": {"s": 0.1}}
    assert [round(t.training, 9) for t in whole.trained(beat)] == [0.5 * (2 + 2 + 2 + 2 + 2), 0.25 * 4]
    for at in range(len(records) + 1):
        fold = Fold(json.loads(json.dumps(Fold.of(records[:at]).state)))
        for r in records[at:]:
            fold.feed(r)
        assert fold.state == whole.state and fold.trained(beat) == whole.trained(beat), at
    for wrong in ({"attempts": [{"first": 1.0}]}, {"attempts": [dict(whole.attempts[0], resume=None)]}):
        with pytest.raises(ValueError):  # a state this release did not write: Snapshot.fold reads the file instead
            Fold(wrong)


# ------------------------------------------------------------------------ a hand-built run folder
SUBMITTED, START, END, TRAIN = "submitted", "start", "end", "train"

EVENTS = [  # attempts.jsonl: (event, time, fields)
    (SUBMITTED, 0.0, {"job_id": "1"}),
    (START, 10.0, {"job_id": "1"}),
    (END, 28.0, {"job_id": "1", "why": "timeout"}),  # the time limit: requeued under the same job id
    (START, 40.0, {"job_id": "1"}),
    (END, 50.5, {"job_id": "1", "why": "crashed", "source": "sacct"}),  # killed -9; dated at its heartbeat
    (SUBMITTED, 60.0, {"job_id": "2"}),
    (START, 70.0, {"job_id": "2"}),
    (END, 85.0, {"job_id": "2", "why": "completed"}),
]


def steps(first: int, last: int, t0: float) -> list[dict]:
    """Train records of steps first..last, one second each, the first ending at t0 + 1."""
    return [{"kind": TRAIN, "time": t0 + 1 + i, "step": s, "tokens": 128 * (s + 1), "loss": 5.0, "step_time": 1.0}
            for i, s in enumerate(range(first, last))]


RECORDS = [  # metrics.jsonl as the trainer leaves it: attempt 2's steps 12..14 were dropped by attempt 3's resume
    {"kind": START, "time": 15.0, "step": 0, "setup_s": {"total": 4.0}},
    *steps(0, 10, 15.0),
    {"kind": END, "time": 27.0, "step": 9, "why": "checkpointed", "ckpt_s": 1.5, "ckpts": 2},
    {"kind": "resume", "time": 44.0, "from_step": 10, "dropped": 0, "redo_steps": 0, "redo_s": 0.0,
     "before": {"time": 27.0, "step": 10, "ckpt_s": 1.5, "ckpts": 2}},
    {"kind": START, "time": 45.0, "step": 10},
    *steps(10, 12, 45.0),
    {"kind": "resume", "time": 74.0, "from_step": 12, "dropped": 3, "redo_steps": 3, "redo_s": 2.3,
     "before": {"time": 50.5, "step": 15, "ckpt_s": 0.7, "ckpts": 1}},
    {"kind": START, "time": 75.0, "step": 12},
    *steps(12, 20, 75.0),
    {"kind": END, "time": 84.5, "step": 19, "why": "completed", "ckpt_s": 0.5, "ckpts": 1},
]
HEARTBEAT = {"step": 20, "time": 84.6, "ckpt": {"step": 20, "time": 84.4, "s": 0.5, "n": 1}}

EXPECTED = [  # (held, queue, start-up, training, saves, lost, other, restart), seconds
    (18.0, 10.0, 5.0, 10.0, 1.5, 0.0, 1.5, None),  # 10 -> 28; other: 18 - 5 - 10 - 1.5
    (10.5, 12.0, 5.0, 2.0, 0.7, 2.3, 0.5, 17.0),  # 40 -> 50.5, queued since the end at 28; saves from its
    #                                                heartbeat via the resume's `before`, lost its redo_s; 45 - 28
    (15.0, 10.0, 5.0, 8.0, 0.5, 0.0, 1.5, 24.5),  # 70 -> 85, queued since the submission at 60; 75 - 50.5
]


def write_run(run_dir: Path, records=RECORDS, heartbeat=HEARTBEAT) -> Path:
    run_dir.mkdir(parents=True)
    folder = RunFolder(run_dir)
    folder.config.write_text((REPO / "tests" / "fixtures" / "upgrade" / "f1-b538eea" / "bp" / "config.json")
                             .read_text())
    folder.attempts.write_text("".join(json.dumps({"event": e, "time": t, **f}) + "\n" for e, t, f in EVENTS))
    folder.metrics.write_text("".join(json.dumps(r) + "\n" for r in records))
    folder.heartbeat.write_text(json.dumps(heartbeat))
    return run_dir


def split(a: goodput.Attempt) -> tuple:
    return (a.held, a.queue, a.startup, a.training, a.saves, a.lost, a.other, a.restart)


def test_a_hand_built_run_splits_as_computed_by_hand(tmp_path):
    run = write_run(tmp_path / "hand" / "nano-bp")
    attempts = goodput.read_attempts(run)
    for got, want in zip(attempts, EXPECTED):
        assert split(got) == pytest.approx(want, abs=1e-9)
    assert [a.ended for a in attempts] == ["end event"] * 3
    g = goodput.read(run)
    assert g.held == pytest.approx(43.5) and g.fraction == pytest.approx(20.0 / 43.5)
    assert g.queue == pytest.approx(32.0) and g.restarts == pytest.approx((17.0, 24.5))


def test_an_attempt_killed_without_an_end_event_ends_at_its_last_sign_of_life(tmp_path):
    """Before submit records the kill's end from sacct: the second attempt ends at its last sign of life (the
    next attempt's `before`, 50.5), and the third's queue wait starts at the submission (60)."""
    run = tmp_path / "nano-bp"
    write_run(run)
    events = [json.loads(line) for line in RunFolder(run).attempts.read_text().splitlines()]
    RunFolder(run).attempts.write_text("".join(json.dumps(e) + "\n" for e in events if e.get("source") != "sacct"))
    attempts = goodput.read_attempts(run)
    assert [a.ended for a in attempts] == ["end event", "last record", "end event"]
    for got, want in zip(attempts, EXPECTED):
        assert split(got) == pytest.approx(want, abs=1e-9)


def test_a_run_folder_of_an_older_release_puts_what_it_does_not_say_in_other(tmp_path):
    """Without the save and lost fields (records before this accounting), the same held time; the saves and lost
    work of each attempt fall in its "other", never in training; nothing is written."""
    old = [{k: v for k, v in r.items() if k not in ("ckpt_s", "ckpts", "redo_steps", "redo_s", "before", "setup_s")}
           for r in RECORDS]
    run = write_run(tmp_path / "nano-bp", records=old, heartbeat={"step": 20, "time": 84.6})
    before = {p: p.read_bytes() for p in run.iterdir()}
    attempts = goodput.read_attempts(run)
    for got, (held, queue, startup, training, saves, lost, other, restart) in zip(attempts, EXPECTED):
        assert split(got) == pytest.approx((held, queue, startup, training, 0.0, 0.0, other + saves + lost, restart))
    assert {p: p.read_bytes() for p in run.iterdir()} == before


def digest(folder: Path) -> str:
    return hashlib.sha256(b"".join(p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file())).hexdigest()


def test_a_real_run_folder_of_an_older_release_is_read_without_a_write():
    """The upgrade fixture (a release of 2026-11, trained by hand: no attempts.jsonl): one attempt from its start
    record to its last sign of life (its last record or heartbeat), its step times as training, the rest "other"."""
    run = REPO / "tests" / "fixtures" / "upgrade" / "f1-b538eea" / "bp"
    was = digest(run)
    records = read_records(run)
    (attempt,) = goodput.read_attempts(run)
    assert attempt.ended == "by hand" and attempt.queue == 0.0 and attempt.startup == 0.0
    last = max(records[-1]["time"], read_json(RunFolder(run).heartbeat)["time"])
    assert attempt.held == pytest.approx(last - records[0]["time"])
    assert attempt.training == pytest.approx(sum(r["step_time"] for r in records if r["kind"] == "train"))
    assert attempt.saves == attempt.lost == 0.0
    assert attempt.other == pytest.approx(attempt.held - attempt.training)
    assert digest(run) == was


# ------------------------------------------------------------------------ status --goodput and collect
def test_status_goodput_shows_each_run_and_the_sweep_total(tmp_path, capsys, monkeypatch):
    sweep = tmp_path / "jobs" / "hand"
    write_run(sweep / "nano-bp")
    write_run(sweep / "nano-zbp_n4", records=RECORDS[:12], heartbeat={})  # only its first attempt's records
    assert main(["status", str(sweep), "--goodput", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)["hand"]
    assert [r["run"] for r in rows] == ["nano-bp", "nano-zbp_n4", "all"]
    bp, n4, total = rows
    assert bp["held_s"] == pytest.approx(43.5) and bp["goodput"] == pytest.approx(20.0 / 43.5)
    # nano-zbp_n4: the same events, but only attempt 1 trained: attempts 2 and 3 never reached a step (start-up)
    assert n4["training_s"] == pytest.approx(10.0) and n4["startup_s"] == pytest.approx(5.0 + 10.5 + 15.0)
    for key in ("held_s", "training_s", "startup_s", "saves_s", "lost_s", "other_s", "queue_s"):
        assert total[key] == pytest.approx(bp[key] + n4[key])
    assert total["goodput"] == pytest.approx(total["training_s"] / total["held_s"])

    monkeypatch.setenv("COLUMNS", "200")  # piped, the table is as wide as COLUMNS (80 would give up a column)
    assert main(["status", str(sweep), "--goodput"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[1].split() == ["run", "held", "goodput", "start-up", "saves", "lost", "other", "queue", "attempts",
                                "restart"]
    assert lines[2].split()[:3] == ["nano-bp", "44s", "46.0%"] and lines[4].split()[0] == "all"
    # by hand: held 43.5 + 43.5; training 20 + 10; start-up 15 + 30.5; saves 2.7 + 1.5; lost 2.3; other 3.5 + 1.5
    assert lines[5] == "all: held 87s = training 30s, start-up 46s, saves 4s, lost 2s, other 5s; queue 64s beside"


def test_collect_summary_and_table_carry_the_goodput(tmp_path):
    from zbpscale.results.summary import summarize
    from zbpscale.results.table import runs_markdown

    run = write_run(tmp_path / "hand" / "nano-bp")
    row = summarize(run, name="nano-bp", size="nano", arm="bp", seed=0, state=("complete", None))
    assert row.goodput == round(20.0 / 43.5, 4)
    table, _ = runs_markdown([row], {"nano-bp": {}})
    head, _, cells = table.splitlines()[:3]
    assert dict(zip(head.split(" | "), cells.split(" | ")))["goodput"] == "46.0%"
    assert math.isclose(row.goodput, goodput.read(run).fraction, abs_tol=1e-4)


def test_status_collect_and_goodput_count_the_same_hours(tmp_path):
    """#55 item 2: one account of a run's time (goodput.run_time). The hand-built three-attempt folder, its jobs
    asking for 8 GPUs (plan.json): held 18 + 10.5 + 15 = 43.5 s, 43.5 x 8 / 3600 GPU-hours, in status's row,
    collect's summary and goodput alike; trained by hand (no plan), the GPUs its trainer's start record names."""
    from zbpscale.jobs.status import collect_rows
    from zbpscale.results.summary import summarize

    held, gpus = 18.0 + 10.5 + 15.0, 8
    sweep = tmp_path / "jobs" / "hand"
    run = write_run(sweep / "nano-bp")
    RunFolder(run).plan.write_text(json.dumps({"params": 1000, "gpus": gpus, "gpu_hours": 1.0}))
    (row,) = collect_rows(sweep)
    summary = summarize(run, name="nano-bp", size="nano", arm="bp", seed=0, state=("complete", None))
    spent = goodput.run_time(run)
    assert goodput.read(run).held == spent.held_s == pytest.approx(held) == summary.wall_time_s
    assert row["gpu_hours"] == spent.gpu_hours == pytest.approx(held * gpus / 3600)
    assert summary.gpu_hours == round(spent.gpu_hours, 6)  # a bundle keeps 6 decimals

    trained = {"config": {"device": "cuda"}, "world_size": 2, "derived": {"params": 1000}}  # what collect reads
    by_hand = [dict(r, **trained) if r["kind"] == START else r for r in RECORDS]
    run = write_run(tmp_path / "jobs" / "alone" / "nano-bp", records=by_hand)
    (row,) = collect_rows(run.parent)
    summary = summarize(run, name="nano-bp", size="nano", arm="bp", seed=0, state=("complete", None))
    assert row["gpu_hours"] == pytest.approx(held * 2 / 3600) and summary.gpu_hours == round(row["gpu_hours"], 6)
    on_cpu = write_run(tmp_path / "cpu" / "nano-bp", records=[dict(r, **{**trained, "config": {"device": "cpu"}})
                                                              if r["kind"] == START else r for r in RECORDS])
    assert goodput.run_time(on_cpu).gpu_hours == 0.0 and goodput.run_time(on_cpu).held_s == pytest.approx(held)
    assert goodput.run_time(write_run(tmp_path / "auto" / "nano-bp")).gpu_hours is None  # nothing says its GPUs


def test_a_total_is_the_parts_added_one_by_one_to_the_last_bit():
    """Goodput.total (one pass: the restarts' tuple was copied again for each of 10,000 runs' parts) is what adding
    the parts one by one gives, every second and restart as it was, in order."""
    import random

    from zbpscale.run.goodput import BUCKETS, Goodput

    rng = random.Random(54)
    parts = [Goodput(held=rng.uniform(0, 1e5), queue=rng.uniform(0, 1e3), attempts=rng.randrange(5),
                     restarts=tuple(rng.uniform(0, 600) for _ in range(rng.randrange(4))),
                     **{b: rng.uniform(0, 2e4) for b in BUCKETS}) for _ in range(500)]
    assert Goodput.total(parts) == sum(parts, Goodput()) and Goodput.total([]) == Goodput()
