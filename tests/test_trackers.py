"""Experiment trackers against the run's own records.

Compared: TensorBoard's event files (read by tensorboard's own EventAccumulator, which applies purge_step) and W&B's
offline run files (read as the log W&B writes, its records parsed with wandb's own protobufs) with metrics.jsonl of
the same run, a real trainer process stopped by SIGUSR2 (as a preemption does), then killed by SIGKILL after a
checkpoint, then resumed to the end: every step once, values equal; one W&B run id across the attempts; the config
and the code version in it; the API key (in the environment) in no file of the run. A tracker that raises, at its
start or mid-run, leaves training bitwise equal to a run without trackers, metrics.jsonl complete and a note in
status. A tracker is one class: a stand-in defined here is accepted by TrainConfig and gets every record.
"""

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from conftest import (
    tensorboard_scalars,
    tensorboard_texts,
    trainer_env,
    wait_until,
    wandb_history,
    wandb_records,
    wandb_runs,
)
from zbpscale.errors import ConfigError
from zbpscale.run.config import ModelConfig, TrainConfig
from zbpscale.run.folder import RunFolder
from zbpscale.run.records import read_records
from zbpscale.train import checkpoint
from zbpscale.train.loop import train
from zbpscale.train.trackers import Tracker

NANO = ModelConfig(n_layer=2, n_head=2, d_model=32, max_seq_len=32)
KEY = "zbp-test-key-0123456789abcdef0123456789abcdef"  # a fake W&B key: must appear in no file


def config(data_dir, **fields) -> TrainConfig:
    base = dict(model=NANO, data_dir=str(data_dir), steps=40, global_batch=8, lr=3e-3, warmup_steps=2, eval_every=5,
                eval_batches=1, ckpt_every=5, ckpt_every_s=0, diag_every=10, device="cpu")
    return TrainConfig(**{**base, **fields})


def by_step(run_dir: Path, kind: str, field: str) -> list[tuple[int, float]]:
    return [(r["step"], r[field]) for r in read_records(run_dir) if r["kind"] == kind]


# ---------------------------------------------------------------- a run stopped, killed and resumed

def launch(run_dir: Path, env: dict) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "zbpscale.train", "--run-dir", str(run_dir)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


SITE = """\
import os
if os.environ.get("ZBPSCALE_TEST_WANDB_FLUSH_S"):  # how often W&B is finished and resumed (WandB.FLUSH_S)
    from zbpscale.train.trackers import WandB
    WandB.FLUSH_S = float(os.environ["ZBPSCALE_TEST_WANDB_FLUSH_S"])
if os.environ.get("ZBPSCALE_TEST_STEP_SLEEP_S"):  # a slower trainer: W&B's writer keeps up however busy the machine
    import time
    from zbpscale.train.trackers import WandB
    _log = WandB.log
    def _slow_log(self, step, scalars, _wait=float(os.environ["ZBPSCALE_TEST_STEP_SLEEP_S"])):
        if step != self.row_step:
            time.sleep(_wait)
        _log(self, step, scalars)
    WandB.log = _slow_log
"""


def wandb_steps(folder: Path) -> list[int]:
    """The steps whose train loss an offline W&B folder holds (conftest's reader, not the trainer's)."""
    return [r.history.step.num for f in folder.glob("run-*.wandb") for r in wandb_records(f)
            if r.WhichOneof("record_type") == "history"
            and any((i.key or "/".join(i.nested_key)) == "train/loss" for i in r.history.item)]


def test_a_run_stopped_and_killed_at_every_point_shows_each_step_once_in_both_trackers(tmp_path, data_dir):
    """One run, five attempts: killed -9 at its first step (before W&B wrote a row), stopped by SIGUSR2 (a
    preemption), killed -9 between W&B's flushes once W&B's folder (in the node's temp dir until it is finished)
    holds steps past the checkpoint the next attempt resumes from (they must never reach the run folder, and be
    sent once by the next attempt), killed -9 right after a W&B flush (finished, moved into the run and resumed at a
    checkpoint), then run to the end. Compared with metrics.jsonl: every step once in TensorBoard and once over
    all the offline W&B folders that `zbpscale sync` would upload, with the JSONL's values; one W&B run id; no
    killed attempt's W&B folder left in the node's temp dir, and wandb's own scratch folders left only by the
    attempts killed -9."""
    from zbpscale.results.sync import pending

    run = tmp_path / "jobs" / "study" / "nano-bp"
    run.mkdir(parents=True)
    # 80 steps: the third attempt runs until W&B has written a 32 KiB block (to step ~50), and the fourth must
    # still reach a checkpoint after its start (every 5 steps) before the run is done
    steps_total = 80
    cfg = config(data_dir, steps=steps_total, trackers=("tensorboard", "wandb"))
    RunFolder(run).config.write_text(json.dumps(cfg.to_dict()))
    (tmp_path / "site").mkdir()
    (tmp_path / "site" / "sitecustomize.py").write_text(SITE)
    node_tmp = tmp_path / "node-tmp"  # the node's temp dir, where W&B's folder of an open W&B run is
    node_tmp.mkdir()
    env = trainer_env(1, WANDB_API_KEY=KEY, WANDB_MODE="offline", WANDB_SILENT="true", TMPDIR=str(node_tmp),
                      PYTHONPATH=os.pathsep.join(filter(None, [str(tmp_path / "site"), os.environ.get("PYTHONPATH")])))
    steps = lambda: len(by_step(run, "train", "loss"))  # noqa: E731
    ckpts = lambda: [s for s, _ in RunFolder(run).list_checkpoints()]  # noqa: E731
    folders = lambda: sorted(RunFolder(run).wandb.glob("offline-run-*"))  # noqa: E731
    staged = lambda: sorted(node_tmp.glob("zbpscale-wandb-*/wandb/offline-run-*"))  # noqa: E731
    killed_held, killed_landed = [], []  # what each killed attempt's W&B folder held; what it moved into the run

    def kill_when(predicate, flush_s: float = 600.0, step_sleep_s: float = 0.0) -> None:
        before = set(folders())
        proc = launch(run, {**env, "ZBPSCALE_TEST_WANDB_FLUSH_S": str(flush_s),
                            "ZBPSCALE_TEST_STEP_SLEEP_S": str(step_sleep_s or "")})
        wait_until(predicate, "the moment to kill the trainer", 180, proc=proc, every=0.05)
        proc.kill()
        proc.communicate(timeout=60)
        killed_held.append([wandb_steps(f) for f in staged()])
        killed_landed.append([f for f in folders() if f not in before])

    kill_when(lambda: steps() >= 1)  # 1: at its first step
    second = launch(run, env)  # 2: a preemption's signal
    wait_until(lambda: steps() >= 12, "step 12 of the second attempt", 180, proc=second, every=0.05)
    second.send_signal(signal.SIGUSR2)
    out, _ = second.communicate(timeout=120)
    assert second.returncode == 75, out
    # 3: between flushes, once W&B holds steps past the newest checkpoint: none of it reaches the run folder. W&B's
    # writer puts its file on disk a 32 KiB block (~50 steps) at a time, and a fast trainer can pass the next
    # checkpoint before the block lands (on a loaded machine it did, for every block, to the run's end): 0.2 s a
    # step leaves a second between checkpoints
    kill_when(lambda: ckpts() and any(s >= ckpts()[-1] for f in staged() for s in wandb_steps(f)), step_sleep_s=0.2)
    assert any(s >= max(ckpts()) for f in killed_held[-1] for s in f), killed_held
    assert killed_landed[-1] == [], killed_landed
    # 4: right after a W&B flush (finished and resumed at every checkpoint) at a checkpoint of its own: `through`
    # alone is no sign, since opening W&B raises it to what the third attempt's file already held
    through = lambda: json.loads(RunFolder(run).trackers.read_text())["wandb"]["through"]  # noqa: E731
    resumed_from = max(ckpts())
    kill_when(lambda: max(ckpts()) > resumed_from and through() >= max(ckpts()) - 1, flush_s=0.0)
    assert not RunFolder(run).complete.exists(), "the fourth attempt finished the run before its kill: make it longer"
    assert killed_landed[-1], "the fourth attempt's flush moved no W&B folder into the run"
    fifth = launch(run, env)  # 5: to the end
    out, _ = fifth.communicate(timeout=300)
    assert fifth.returncode == 0, out
    assert [r["kind"] for r in read_records(run)].count("start") == 5
    assert list(node_tmp.glob("zbpscale-wandb-*")) == []  # the killed attempts' W&B folders, removed
    # wandb's own scratch folders, made at its import: two for each attempt killed -9 (nothing of it ran after),
    # none for the two that closed their trackers (left by os._exit, they were two an attempt)
    scratch = [p.name for p in node_tmp.iterdir() if p.name.endswith(("wandb-media", "wandb-artifacts"))]
    assert len(scratch) == 2 * 3, scratch

    losses, vals = by_step(run, "train", "loss"), by_step(run, "eval", "val_loss")
    assert [s for s, _ in losses] == list(range(steps_total))
    float32 = lambda rows: [(s, float(torch.tensor(v, dtype=torch.float32))) for s, v in rows]  # noqa: E731
    # TensorBoard keeps float32: every step once, equal to the JSONL's value rounded to float32
    assert tensorboard_scalars(run, "train/loss") == float32(losses)
    assert tensorboard_scalars(run, "val/loss") == float32(vals)
    assert [s for s, _ in tensorboard_scalars(run, "rho_fwd/L0.attn")] == list(range(9, steps_total, 10))
    # how each attempt ended, killed ones too (said by the attempt after, at its first step), as far as the later
    # attempts' restarts leave them shown: the three killed, then the last one's own end
    begins = {r["attempt"]: r["step"] for r in read_records(run) if r["kind"] == "start"}
    ends = tensorboard_texts(run, "attempt_end")
    killed = [step for step, text in ends if "killed before it wrote an end record" in text]
    assert killed == [begins[2], begins[4], begins[5]], (ends, begins)
    assert ends[-1] == (steps_total - 1, "completed: all steps done"), ends
    # W&B: every step once over the folders `zbpscale sync` uploads, with the JSONL's values; one run
    upload, _ = pending(run)
    assert sorted(s for f in upload for s in wandb_steps(f)) == list(range(steps_total))
    assert wandb_history(run, "train/loss") == losses
    assert wandb_history(run, "val/loss") == vals
    run_id = json.loads(RunFolder(run).trackers.read_text())["wandb"]["id"]
    named = wandb_runs(run)
    starts = [r.run for _, records in named for r in records if r.WhichOneof("record_type") == "run"]
    assert {s.run_id for s in starts} == {run_id} and {s.display_name for s in starts} == {"nano-bp"}
    assert {s.project for s in starts} == {"study"} and {s.run_group for s in starts} == {"study"}
    config_seen = {i.key or "/".join(i.nested_key): json.loads(i.value_json) for i in starts[-1].config.update}
    assert config_seen["steps"] == steps_total and config_seen["trackers"] == ["tensorboard", "wandb"]
    assert set(config_seen["code"]) == {"zbpscale", "git"}
    # the key W&B was given in the environment is in no file of the run
    leaked = [p for p in run.rglob("*") if p.is_file() and KEY.encode() in p.read_bytes()]
    assert leaked == []
    # `zbpscale sync`: the folders with data wait, the empty ones are named; without a key, one line
    sync = [sys.executable, "-m", "zbpscale.cli", "sync", str(run.parent)]
    no_key = {k: v for k, v in env.items() if k != "WANDB_API_KEY"} | {"HOME": str(tmp_path)}  # no ~/.netrc either
    dry = subprocess.run(sync + ["--dry-run"], env=no_key, capture_output=True, text=True, timeout=60)
    assert dry.returncode == 0 and f"nano-bp: {len(upload)} W&B folder(s) to upload" in dry.stdout, dry
    refused = subprocess.run(sync, env=no_key, capture_output=True, text=True, timeout=60)
    assert refused.returncode == 2 and "no W&B key here" in refused.stderr and "Traceback" not in refused.stderr


def test_trackers_that_fail_mid_run_say_one_line_each_and_get_what_they_missed_in_the_next_attempt(tmp_path, data_dir):
    """W&B's folder on a disk that fills up (a small tmpfs, filled mid-run) and TensorBoard's events file made
    immutable: each tracker is turned off with one line in the log (no logging traceback, no thread traceback),
    training goes on; after a preemption and with the disk freed and the file writable again, the next attempt
    hands each tracker the steps it missed: every step once in TensorBoard and once over W&B's folders."""
    from zbpscale.results.sync import pending

    run = tmp_path / "jobs" / "study" / "nano-bp"
    RunFolder(run).wandb.mkdir(parents=True)
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(RunFolder(run).wandb)],
                      capture_output=True).returncode != 0:
        pytest.skip("cannot mount a tmpfs here (not root)")
    events = []
    try:
        cfg = config(data_dir, steps=50, trackers=("tensorboard", "wandb"))
        RunFolder(run).config.write_text(json.dumps(cfg.to_dict()))
        env = {k: v for k, v in trainer_env(1).items() if not k.startswith("WANDB_")} | {"WANDB_MODE": "offline"}
        first = launch(run, env)
        wait_until(lambda: len(by_step(run, "train", "loss")) >= 8, "8 steps", 180, proc=first, every=0.05)
        with open(RunFolder(run).wandb / "filler", "wb") as fh:  # the disk is full from here on
            with contextlib.suppress(OSError):
                while True:
                    fh.write(b"\0" * 65536)
                    fh.flush()
        events = [str(p) for p in RunFolder(run).tensorboard.iterdir()] + [str(RunFolder(run).tensorboard)]
        subprocess.run(["chattr", "+i", *events], check=True)
        wait_until(lambda: len(by_step(run, "train", "loss")) >= 20, "20 steps on a full disk", 180, proc=first,
                   every=0.05)
        first.send_signal(signal.SIGUSR2)
        out, _ = first.communicate(timeout=120)
        assert first.returncode == 75, out
        said = [line for line in out.splitlines() if not line.startswith(("step ", "run ", "W&B: run", "checkpointed"))]
        assert len(said) == 2 and all("is off for the rest of this attempt" in line for line in said), out[-3000:]
        assert "tracker tensorboard is off" in said[0] + said[1] and "tracker wandb is off" in said[0] + said[1]
        subprocess.run(["chattr", "-i", *events], check=True)
        events = []
        (RunFolder(run).wandb / "filler").unlink()
        second = launch(run, env)
        out, _ = second.communicate(timeout=300)
        assert second.returncode == 0 and "is off" not in out, out
        losses = by_step(run, "train", "loss")
        assert [s for s, _ in losses] == list(range(50))
        assert tensorboard_scalars(run, "train/loss") == [(s, float(torch.tensor(v, dtype=torch.float32)))
                                                          for s, v in losses]
        upload, _ = pending(run)
        assert sorted(s for f in upload for s in wandb_steps(f)) == list(range(50))
        assert wandb_history(run, "train/loss") == losses
    finally:
        if events:
            subprocess.run(["chattr", "-i", *events])
        subprocess.run(["umount", "-l", str(RunFolder(run).wandb)])


def test_sync_says_a_run_is_uploaded_only_once_wandb_marked_it(tmp_path):
    """`wandb sync` exits 0 where the server refuses every upload (wandb 0.31, a key it does not take): `zbpscale
    sync` said "uploaded the W&B runs of 1 run(s)" and left the folder unmarked, so a dry run listed it again. With
    a W&B host on loopback that answers 401 to everything: the run is said not uploaded, with W&B's own words
    shown, and the command fails; the folder still waits. A results folder given is named as one (it said "nothing
    to upload": its copies of the runs hold no W&B folder)."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    import wandb

    from zbpscale.results.sync import pending

    run_dir = tmp_path / "jobs" / "study" / "nano-bp"
    run_dir.mkdir(parents=True)
    RunFolder(run_dir).config.write_text("{}\n")
    run = wandb.init(id="refused0", mode="offline", dir=str(run_dir), project="p", settings=wandb.Settings(
        console="off", silent=True))
    for step in range(5):
        run.log({"loss": 1.0 / (step + 1)}, step=step)
    run.finish()
    (made,) = RunFolder(run_dir).wandb.glob("offline-run-*/run-refused0.wandb")
    wait_until(lambda: any(r.WhichOneof("record_type") == "exit" for r in wandb_records(made)), "W&B's exit record",
               60, every=0.05)

    class Refusing(BaseHTTPRequestHandler):
        def refuse(self):
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            body = b'{"errors": [{"message": "user is not logged in"}]}'
            self.send_response(401)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        do_GET = do_POST = do_PUT = refuse

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Refusing)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    env = {k: v for k, v in os.environ.items() if k != "WANDB_MODE"} | {
        "WANDB_BASE_URL": f"http://127.0.0.1:{server.server_port}", "WANDB_API_KEY": "a" * 40, "HOME": str(tmp_path)}
    try:
        out = subprocess.run([sys.executable, "-m", "zbpscale.cli", "sync", str(run_dir.parent)], env=env,
                             capture_output=True, text=True, timeout=120, cwd=tmp_path)  # W&B's logs go to ./wandb
    finally:
        server.shutdown()
        server.server_close()
    assert out.returncode == 2 and "uploaded the W&B runs" not in out.stdout, out.stdout + out.stderr
    assert "nano-bp: 1 of 1 folder(s) not uploaded" in out.stderr and "1 of 1 run(s) not uploaded" in out.stderr
    assert pending(run_dir)[0] == [made.parent]
    bundle = tmp_path / "results" / "study"  # collect's copy of the runs: no W&B folder there, and it said so
    bundle.mkdir(parents=True)
    (bundle / "summary.json").write_text("{}\n")
    shutil.copytree(run_dir, bundle / "runs" / "nano-bp", ignore=shutil.ignore_patterns("wandb"))
    said = subprocess.run([sys.executable, "-m", "zbpscale.cli", "sync", str(bundle)], env=env, capture_output=True,
                          text=True, timeout=60, cwd=tmp_path)
    assert said.returncode == 2 and "is a results folder" in said.stderr and "nothing to upload" not in said.stdout


def test_sync_finds_the_key_wandb_login_wrote_for_a_host_of_ones_own(tmp_path, monkeypatch):
    """`wandb login` to a W&B host with a port writes `machine host:port` to the netrc file; sync looked the host up
    without its port and said "no W&B key here". The file is written by W&B's own writer."""
    from wandb.sdk.lib.wbauth.wbnetrc import write_netrc_auth

    from zbpscale.results.sync import has_key

    for name in ("WANDB_API_KEY", "NETRC"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("WANDB_BASE_URL", "http://127.0.0.1:18401")
    assert not has_key()
    write_netrc_auth(host="http://127.0.0.1:18401", api_key="b" * 40)
    assert has_key()
    monkeypatch.setenv("WANDB_BASE_URL", "http://127.0.0.1:18402")  # another host's key is no key for this one
    assert not has_key()
    (tmp_path / ".netrc").rename(tmp_path / "elsewhere")  # where W&B reads it when told so
    monkeypatch.setenv("NETRC", str(tmp_path / "elsewhere"))
    monkeypatch.setenv("WANDB_BASE_URL", "http://127.0.0.1:18401")
    assert has_key()


def test_a_wandb_file_written_whole_after_finish_returned_is_waited_for_and_a_torn_one_is_named(tmp_path):
    """W&B's writer flushes its file's last, partial 32 KiB block when it closes it, which on a loaded machine comes
    after `finish()` returned (CI read steps up to 41 of 49): the check waits for the run's `exit` record, then
    compares; a file that never gets whole (a full disk) is named after WRITTEN_S."""
    import threading
    import types

    import wandb

    from zbpscale.train.trackers import WandB

    run = wandb.init(id="whole0", mode="offline", dir=str(tmp_path), project="p", settings=wandb.Settings(
        console="off", silent=True))
    for step in range(400):
        run.log({"loss": 1.0 / (step + 1), "lr": 0.001}, step=step)
    run.finish()
    (made,) = (tmp_path / "wandb").glob("offline-run-*/run-whole0.wandb")
    # the race itself: the file is whole once its exit record is in
    wait_until(lambda: any(r.WhichOneof("record_type") == "exit" for r in wandb_records(made)),
               "W&B's exit record", 60, every=0.05)
    data = made.read_bytes()
    assert len(data) > 32768, "the test needs a file of more than one block"
    folder = tmp_path / "later"
    folder.mkdir()
    (folder / made.name).write_bytes(data[:32768])  # what a reader sees before the writer closed the file
    tracker = types.SimpleNamespace(offline=True, sent=399, folder=folder, WRITTEN_S=30.0)
    threading.Timer(0.5, lambda: (folder / made.name).write_bytes(data)).start()
    began = time.monotonic()
    WandB._check_written(tracker)  # waits for the whole file: no error
    assert 0.4 < time.monotonic() - began < 10
    tracker.WRITTEN_S = 0.5
    (folder / made.name).write_bytes(data[:32768])  # never whole
    with pytest.raises(OSError, match=r"W&B wrote steps up to \d+ of the 399 sent"):
        WandB._check_written(tracker)


# ---------------------------------------------------------------- failures never stop training

@pytest.fixture
def standins():
    """Trackers defined here, each one class; known to TrainConfig while the test runs, forgotten after."""

    class Standin(Tracker):
        """Keeps what it is given."""

        name = "standin"
        seen: list = []

        def log(self, step, scalars):
            Standin.seen.append((step, dict(scalars)))

    class BrokenAtStart(Tracker):
        name = "broken_at_start"

        def __init__(self, run, first_step, kept):
            raise ImportError("No module named 'mlflow'")

    class FullDisk(Tracker):
        name = "full_disk"

        def log(self, step, scalars):
            if step >= 3:
                raise OSError(28, "No space left on device")

    yield Standin
    for cls in (Standin, BrokenAtStart, FullDisk):
        del Tracker.known[cls.name]


def test_a_tracker_is_one_class_and_gets_every_step(tmp_path, data_dir, standins):
    Standin = standins
    cfg = config(data_dir, steps=6, eval_every=3, diag_every=0, trackers=("standin",))
    train(cfg, tmp_path / "run")
    train_steps = [s for s, values in Standin.seen if "train/loss" in values]
    assert train_steps == list(range(6))
    assert [v["train/loss"] for s, v in Standin.seen if "train/loss" in v] == \
        [loss for _, loss in by_step(tmp_path / "run", "train", "loss")]
    with pytest.raises(ConfigError, match="TrainConfig.trackers .*hint: trackers: .*standin.*tensorboard.*wandb"):
        config(data_dir, trackers=("mlflow",))


def test_raising_trackers_leave_training_bitwise_and_say_so_in_status(tmp_path, data_dir, capsys, standins):
    from zbpscale.jobs.status import collect_rows, notes

    plain, broken = tmp_path / "plain", tmp_path / "broken"
    train(config(data_dir, steps=8), plain)
    train(config(data_dir, steps=8, trackers=("broken_at_start", "full_disk")), broken)
    err = capsys.readouterr().err
    assert "tracker broken_at_start is off for the rest of this attempt" in err
    assert "pip install 'zbpscale[trackers]'" in err and "No space left on device" in err
    assert by_step(broken, "train", "loss") == by_step(plain, "train", "loss")  # bitwise, every step
    assert by_step(broken, "eval", "val_loss") == by_step(plain, "eval", "val_loss")
    a, b = checkpoint.load_latest(plain)["model"], checkpoint.load_latest(broken)["model"]
    assert all(torch.equal(a[k], b[k]) for k in a)
    off = json.loads(RunFolder(broken).heartbeat.read_text())["trackers_off"]
    assert [line.split(":")[0] for line in off] == ["broken_at_start", "full_disk"]
    lines = [line for line, _ in notes(collect_rows(tmp_path, only="broken"))]
    assert any("trackers off" in line and "full_disk" in line for line in lines), lines


def test_a_config_is_checked_against_the_trackers_alike_with_or_without_their_classes_loaded():
    """run/config.py checks a config's trackers without importing train/trackers.py (status and submit load no
    tracker class): the built-in names it knows are exactly the classes that module defines, one registry."""
    code = ("import sys\n"
            "from zbpscale.errors import ConfigError\n"
            "from zbpscale.run.config import TRACKERS, tracker_error\n"
            "before = sorted(TRACKERS)\n"
            "assert tracker_error(('tensorboard', 'wandb'), 'x') is None\n"
            "assert 'wandb' in str(tracker_error(('wandbb',), 'x').hint)\n"
            "assert 'zbpscale.train.trackers' not in sys.modules\n"
            "from zbpscale.train.trackers import Tracker\n"
            "assert Tracker.known is TRACKERS\n"
            "assert sorted(TRACKERS) == before, (before, sorted(TRACKERS))\n"
            "assert all(isinstance(c, type) and issubclass(c, Tracker) for c in TRACKERS.values()), TRACKERS\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
