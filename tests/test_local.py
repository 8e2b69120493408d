"""The local executor (jobs/executors/local_queue/): scheduling, the detached driver, and sweeps run through it on CPU.

Compared: the GPU slots a scheduler hands out with the inventory (never twice, every run starts, the 8-GPU run
within one time limit of heading the queue, where a greedy scheduler starves it); the CUDA_VISIBLE_DEVICES each
rank of the real driver sees with the GPU it was given; run folders with what the sweep asked for; the losses of
runs interrupted by a time limit, a killed driver or a cancel with those of an uninterrupted in-process run
(bitwise); the queue entries of a second submit with those of the first; the steps a fault's record names (a hang's,
a rank killed with its driver) with those metrics.jsonl and the checkpoints on disk hold.
"""

import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import FAKE_WANDB_KEY, check_trackers, losses, step_floor_env, wait_until, wheel_env, write_sweep
from zbpscale.files import read_json
from zbpscale.jobs.executors.local_queue.driver import Driver
from zbpscale.jobs.executors.local_queue.queue import LIVE, Entry, LocalQueue
from zbpscale.jobs.executors.local_queue.slots import Held, Want, gpu_driver_present, rank_env, schedule
from zbpscale.run.folder import RunFolder
from zbpscale.run.history import read_attempts, record
from zbpscale.run.records import read_records
from zbpscale.run.snapshot import Snapshot

REPO = Path(__file__).resolve().parents[1]


# ------------------------------------------------------------------------------------------ scheduling
def simulate(jobs, n_gpus=8, scheduler=schedule, horizon=1e4):
    """Run (arrival, key, gpus, duration, limit) jobs through a scheduler; returns {key: (start, gpus)}.

    Checks at every decision that no GPU is held twice and each start gets exactly the GPUs it asked for."""
    inventory = [str(i) for i in range(n_gpus)]
    pending = sorted(jobs)
    queued, running, started, t = [], {}, {}, 0.0
    while (pending or queued or running) and t < horizon:
        for key in [k for k, (_, end, _) in running.items() if end <= t]:
            del running[key]
        while pending and pending[0][0] <= t:
            queued.append(pending.pop(0))
        held = [Held(gpus=gpus, ends_by=ends_by) for gpus, _, ends_by in running.values()]
        wants = [Want(key=k, gpus=g, time_s=lim) for _, k, g, _, lim in queued]
        for key, gpus in scheduler(wants, held, inventory, now=t):
            job = next(j for j in queued if j[1] == key)
            queued.remove(job)
            assert len(gpus) == job[2] and set(gpus) <= set(inventory)
            busy = [g for held_gpus, _, _ in running.values() for g in held_gpus]
            assert not set(gpus) & set(busy), f"GPU given twice at t={t}: {gpus} vs {busy}"
            running[key] = (gpus, t + job[3], t + job[4])  # (GPUs, actual end, end by the time limit)
            started[key] = (t, gpus)
        events = [end for _, end, _ in running.values()] + [p[0] for p in pending[:1]]
        t = min(events) if events else t + 1
    return started


def greedy(wants, held, inventory, *, now):
    """First fit in queue order, skipping what does not fit: the scheduler that starves big runs."""
    free = [g for g in inventory if g not in {g for h in held for g in h.gpus}]
    out = []
    for w in wants:
        if w.gpus <= len(free):
            out.append((w.key, tuple(free[:w.gpus])))
            free = free[w.gpus:]
    return out


def test_packing_mixed_sizes_never_gives_a_gpu_twice_and_starts_every_run():
    rng = random.Random(0)
    jobs = []
    for i in range(200):
        limit = rng.choice([4.0, 8.0])
        jobs.append((rng.uniform(0, 200), f"j{i}", rng.choice([1, 1, 1, 2, 2, 4, 8]), rng.uniform(0.5, limit), limit))
    started = simulate(jobs)
    assert set(started) == {j[1] for j in jobs}
    # Small runs are packed: at some moment two or more runs start together.
    assert max(sum(1 for s, _ in started.values() if s == t) for t, _ in started.values()) >= 2


def test_the_eight_gpu_run_is_not_starved_by_a_stream_of_small_runs():
    # One-GPU runs (duration 3, limit 4) arrive every 0.25: the node is never empty. The 8-GPU run comes at t=1.
    small = [(0.25 * i, f"s{i:03d}", 1, 3.0, 4.0) for i in range(400)]
    big = (1.0, "big", 8, 2.0, 4.0)
    started = simulate(small + [big])
    assert started["big"][0] <= 1.0 + 4.0  # within one time limit of heading the queue
    assert started["big"][1] == tuple(str(i) for i in range(8))
    starved = simulate(small + [big], scheduler=greedy, horizon=100)
    assert "big" not in starved or starved["big"][0] > 90  # the check above can fail: greedy starves it


def test_backfill_uses_gpus_the_reserved_run_does_not_need():
    # 6 of 8 GPUs busy until t=10; the head wants 4 (reserved for t=10, 4 spare then); a long 1-GPU run may go.
    held = [Held(gpus=tuple(str(i) for i in range(6)), ends_by=10.0)]
    wants = [Want(key="big", gpus=4, time_s=5), Want(key="long", gpus=1, time_s=50),
             Want(key="long2", gpus=1, time_s=50)]
    starts = schedule(wants, held, [str(i) for i in range(8)], now=0.0)
    assert starts == [("long", ("6",)), ("long2", ("7",))]
    # The head wants 5: 4 GPUs come back at t=10, +2 free = 6, 1 spare: one long run may take it, not two.
    held = [Held(gpus=("0", "1", "2", "3"), ends_by=10.0), Held(gpus=("4", "5"), ends_by=20.0)]
    wants = [Want(key="big", gpus=5, time_s=5)] + wants[1:]
    assert schedule(wants, held, [str(i) for i in range(8)], now=0.0) == [("long", ("6",))]
    # A short run (ends before t=10) may use free GPUs even with no spare left.
    wants.append(Want(key="short", gpus=1, time_s=9))
    assert schedule(wants, held, [str(i) for i in range(8)], now=0.0) == [("long", ("6",)), ("short", ("7",))]


def test_rank_environment_names_exactly_its_own_gpu():
    envs = [rank_env(rank=r, world_size=2, gpu=g, port=29123) for r, g in enumerate(("3", "5"))]
    assert [e["CUDA_VISIBLE_DEVICES"] for e in envs] == ["3", "5"]
    assert [(e["RANK"], e["LOCAL_RANK"], e["WORLD_SIZE"]) for e in envs] == [("0", "0", "2"), ("1", "1", "2")]
    assert rank_env(rank=0, world_size=1, gpu=None, port=1)["CUDA_VISIBLE_DEVICES"] == ""


def test_a_node_without_a_gpu_driver_has_no_gpus_and_its_inventory_never_imports_torch(tmp_path):
    """A CPU node (no nvidia-smi, no driver device files): the inventory is empty and torch stays unimported (~2 s of
    every local submit and driver start); a node with a driver's device files but no nvidia-smi asks torch."""
    assert not gpu_driver_present(str(tmp_path))
    for fake in ("dev/nvidia0", "proc/driver/nvidia/gpus/0000:1b:00.0", "dev/kfd"):
        root = tmp_path / fake.replace("/", "_")
        (root / fake).parent.mkdir(parents=True)
        (root / fake).touch()
        assert gpu_driver_present(str(root)), fake
    if gpu_driver_present() or shutil.which("nvidia-smi"):
        pytest.skip("this node has a GPU driver")
    code = ("import sys; from zbpscale.jobs.executors.local_queue.slots import gpu_inventory; "
            "print(gpu_inventory(), 'torch' in sys.modules)")
    env = {k: v for k, v in os.environ.items() if k != "CUDA_VISIBLE_DEVICES"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert out.stdout.split() == ["[]", "False"], out.stdout + out.stderr


def drive_on_eight_gpus(queue: LocalQueue) -> None:
    """The real driver, with a fake inventory of 8 GPUs, ticking between looks as its own loop does, until every job
    of the queue has ended."""
    driver = Driver(queue)
    driver.inventory = [str(i) for i in range(8)]

    def drained() -> bool:
        if any(e.state in ("queued", "running") for e in queue.entries()):
            driver.tick()
            return False
        return True

    wait_until(drained, "every job to end", 120, every=0.05)


def test_driver_pins_each_rank_of_packed_jobs_to_its_own_gpu(tmp_path):
    """The real driver, a fake inventory of 8 GPUs, jobs of 1, 2, 4 and 8 ranks that report what they see."""
    queue = LocalQueue(tmp_path)
    probe = "import os, time; print('SEEN', os.environ['CUDA_VISIBLE_DEVICES'], os.environ['RANK'], time.time()); " \
            "time.sleep(1.0); print('DONE', time.time())"
    specs = [Entry(job_id="", name=f"t/g{n}", kind="command", command=[sys.executable, "-c", probe],
                   log_dir=str(tmp_path / "logs"), gpus=n, ranks=n, time_s=60,
                   signal_delay_s=10) for n in (1, 2, 4, 8, 1)]
    added = queue.add(specs)
    drive_on_eight_gpus(queue)
    assert [e.state for e in queue.entries()] == ["completed"] * 5
    spans = []  # (gpu, start, end) of every rank
    for e in added:
        seen = []
        for rank in range(e.ranks):
            lines = (tmp_path / "logs" / f"{e.job_id}_{rank}.log").read_text().split()
            gpu, r, t0 = lines[lines.index("SEEN") + 1:lines.index("SEEN") + 4]
            assert int(r) == rank
            seen.append(gpu)
            spans.append((gpu, float(t0), float(lines[lines.index("DONE") + 1])))
        assert len(set(seen)) == e.ranks and all(len(g.split(",")) == 1 for g in seen)
    for i, (g, a0, a1) in enumerate(spans):  # no two ranks on one GPU at the same time
        assert not any(g == h and a0 < b1 and b0 < a1 for j, (h, b0, b1) in enumerate(spans) if j != i)
    first_two = [e.job_id for e in added[:2]]  # 1 and 2 GPUs: packed side by side, at once
    starts = {e.job_id: e.started for e in queue.entries()}
    assert abs(starts[first_two[0]] - starts[first_two[1]]) < 0.5


def test_two_jobs_that_make_one_file_never_run_at_once(tmp_path):
    """Two sweeps' preps of one data folder (Entry.makes: its manifest): the second starts after the first ended,
    while a job that makes nothing runs beside the first (the fake 8-GPU node runs CPU jobs side by side)."""
    queue = LocalQueue(tmp_path)
    probe = "import time; print('START', time.time()); time.sleep(1.0); print('END', time.time())"
    made = str(tmp_path / "data" / "manifest.json")
    added = queue.add([Entry(job_id="", name=f"{s}/prep-data", kind="command", command=[sys.executable, "-c", probe],
                             log_dir=str(tmp_path / "logs"), time_s=60, signal_delay_s=10, makes=makes)
                       for s, makes in (("a", made), ("b", made), ("c", ""))])
    drive_on_eight_gpus(queue)
    assert [e.state for e in queue.entries()] == ["completed"] * 3
    span = {}
    for e in added:
        words = (tmp_path / "logs" / f"{e.job_id}_0.log").read_text().split()
        span[e.name[0]] = (float(words[words.index("START") + 1]), float(words[words.index("END") + 1]))
    assert span["b"][0] >= span["a"][1], span  # after the first one ended
    assert span["c"][0] < span["a"][1] and span["a"][0] < span["c"][1], span  # beside it


def test_an_adopted_prep_is_done_when_its_manifest_is_there(tmp_path, monkeypatch):
    """A driver killed while the data prep ran (the prep lives on, and writes its manifest): the next driver
    adopts the entry and, the prep's exit status gone with the dead driver, settles it by the file it makes;
    without the file it failed, as a prep that died before finishing."""
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    queue = LocalQueue(tmp_path)
    made = tmp_path / "data" / "manifest.json"
    entries = queue.add([Entry(job_id="", name=f"{s}/prep-data", kind="command", command=["true"],
                               log_dir=str(tmp_path / "logs"), makes=str(made)) for s in "ab"])
    for e in entries:  # running under a driver now dead, its process gone
        e.state, e.started, e.pids = "running", time.time() - 5, [[dead_pid(), 0]]
        queue.write(e)
    made.parent.mkdir()
    made.write_text("{}\n")
    driver = Driver(queue)
    driver.watch(queue.entries()[0], time.time())
    made.unlink()
    driver.watch(queue.entries()[1], time.time())
    assert [(e.state, e.reason.split(" (")[0]) for e in queue.entries()] == [
        ("completed", f"{made} is there"), ("failed", "exit status unknown")]


def test_an_end_recorded_before_its_entry_was_written_is_not_recorded_twice(tmp_path, monkeypatch):
    """A driver that recorded an attempt's end and could not write its entry after (killed in between, a full disk):
    the driver that adopts the entry, still 'running', follows that end: one end, the same count, queued again."""
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    queue, run = LocalQueue(tmp_path), tmp_path / "s" / "nano-bp"
    run.mkdir(parents=True)
    (e,) = queue.add([Entry(job_id="", name="s/nano-bp", run_dir=str(run), log_dir=str(run / "logs"))])
    record(run, "end", job_id=e.job_id, executor="local", why="timeout", reason="checkpointed; requeue 1/20",
           time=time.time() - 10)  # the job's attempt before: not this one's end
    e.state, e.started, e.pids = "running", time.time() - 5, [[dead_pid(), 0]]
    queue.write(e)
    first = Driver(queue)

    def full(entry):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(first.q, "write", full)
    with pytest.raises(OSError):
        first.settle(queue.entries()[0], [1])  # a crash: recorded, requeue 1/3; the entry not written
    assert queue.entries()[0].state == "running"
    Driver(LocalQueue(tmp_path)).watch(queue.entries()[0], time.time())  # adopted
    assert [(a["why"], a["reason"][-11:]) for a in read_attempts(run) if a["event"] == "end"] == [
        ("timeout", "equeue 1/20"), ("crashed", "requeue 1/3")]
    assert queue.entries()[0].state == "queued"


def test_job_ids_are_never_given_twice_when_the_queue_s_counter_is_gone_or_garbled(tmp_path):
    """.localq deleted (or its next_id garbled) while run folders under the jobs root still name their jobs: the ids
    started again at local-1 (a garbled counter was a ValueError traceback of submit, after it had written the run
    folders), and status, cancel and submit took another run's job for its own. The next id is one past every id an
    entry or a run folder's attempts record holds."""
    from zbpscale.run.history import record

    run = tmp_path / "s" / "nano-bp"
    record(run, "submitted", job_id="local-7", executor="local")
    record(tmp_path / "s" / "nano-bp-s1", "submitted", job_id="12345", executor="slurm")  # another executor's id
    (tmp_path / "t" / "tiny-bp").mkdir(parents=True)
    (tmp_path / "t" / "tiny-bp" / "attempts.jsonl").write_bytes(b"garbage\n")  # broken: its ids are not known
    queue = LocalQueue(tmp_path)
    (e,) = queue.add([Entry(job_id="", name="s/nano-bp", run_dir=str(run))])
    assert e.job_id == "local-8"
    for garbled in ("x", "", "-3"):
        (queue.dir / "next_id").write_text(garbled)
        (e,) = queue.add([Entry(job_id="", name="s/nano-bp", run_dir=str(run))])
        assert e.job_id == "local-9", garbled  # one past the entry written above
        (queue.dir / "entries" / "local-9.json").unlink()
    (queue.dir / "next_id").write_text("20")
    assert [e.job_id for e in queue.add([Entry(job_id="", name="s/a"), Entry(job_id="", name="s/b")])] == \
        ["local-20", "local-21"]


def test_a_tick_that_fails_on_a_file_is_said_and_the_driver_goes_on(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    queue = LocalQueue(tmp_path)
    driver, ticks = Driver(queue), []
    real = driver.tick

    def tick():
        ticks.append(1)
        if len(ticks) <= 3:
            raise OSError(28, "No space left on device")
        real()

    monkeypatch.setattr(driver, "tick", tick)
    assert driver.run(queue.try_driver_lock()) == 0
    out = capsys.readouterr().out
    assert len(ticks) == 4 and out.count("cannot go on with this tick (OSError: [Errno 28] No space left") == 1, out
    assert "queue empty: driver exits" in out


def dead_pid() -> int:
    """The pid of a process that has ended."""
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


# ------------------------------------------------------------------------------------- sweeps on CPU
def submit(sweep: Path, *args: str, check: bool = True, timeout: float = 60, env=None) -> subprocess.CompletedProcess:
    out = subprocess.run([sys.executable, "-m", "zbpscale.submit", str(sweep), "--executor", "local", *args],
                         cwd=sweep.parent, capture_output=True, text=True, timeout=timeout, env=env)
    assert not check or out.returncode == 0, out.stdout + out.stderr
    if "--wait" in args:  # --wait ends once every run is COMPLETE; the driver records each end as it reaps the rank
        wait_driver_gone(LocalQueue(sweep.parent / "jobs"))
    return out



def ends(run_dir: Path) -> list[str]:
    return [a["why"] for a in read_attempts(run_dir) if a["event"] == "end"]


def wait_driver_gone(queue: LocalQueue, timeout: float = 60) -> None:
    wait_until(lambda: not queue.driver_alive(), "the driver to exit", timeout)


@pytest.mark.slow
def test_smoke_sweep_runs_through_the_local_queue_with_wait(tmp_path, wheel_python):
    """The README's main job, sweeps/smoke.py as shipped, from a folder without data, on 2 cores, by a
    non-editable install (`pip install .`, its source deleted): the driver and every rank import the installed
    package. The editable install runs the local queue in every other test here. The folder is a study outside
    the clone, made by `zbpscale init` from the installed package's examples: the clone's sweep files."""
    init = subprocess.run([str(wheel_python), "-m", "zbpscale.cli", "init"], cwd=tmp_path, capture_output=True,
                          text=True, timeout=120, env=wheel_env())
    assert init.returncode == 0, init.stdout + init.stderr
    for name in ("smoke", "mini_ladder", "ladder"):
        assert (tmp_path / "sweeps" / f"{name}.py").read_bytes() == (REPO / "sweeps" / f"{name}.py").read_bytes()
    out = subprocess.run([str(wheel_python), "-m", "zbpscale.submit", "sweeps/smoke.py", "--executor", "local",
                          "--wait"], cwd=tmp_path, capture_output=True, text=True, timeout=900, env=wheel_env())
    assert out.returncode == 0, out.stdout + out.stderr
    assert "data not prepared" in out.stdout and "all 2 runs complete" in out.stdout
    # --wait ends once every run is COMPLETE; the driver records each attempt's end as it reaps the rank, then exits
    wait_driver_gone(LocalQueue(tmp_path / "jobs"))
    for name in ("tiny-bp", "tiny-zbp_n4"):
        run = tmp_path / "jobs" / "smoke" / name
        assert RunFolder(run).complete.exists()
        assert [s for s, _ in losses(run)] == list(range(20))
        assert ends(run) == ["completed"]
        assert {a["executor"] for a in read_attempts(run)} == {"local"}
        assert Snapshot(run, kept=True).from_digest  # the driver's record of its end kept the folder's digest
    status = subprocess.run([str(wheel_python), "-m", "zbpscale.cli", "status", "sweeps/smoke.py", "--json"],
                            cwd=tmp_path, capture_output=True, text=True, timeout=120, env=wheel_env())
    assert status.returncode == 0, status.stdout + status.stderr
    rows = json.loads(status.stdout)["smoke"]
    assert [(r["run"], r["state"], r["step"], r["executor"]) for r in rows] == [
        ("tiny-bp", "complete", 20, "local"), ("tiny-zbp_n4", "complete", 20, "local")]
    assert all(r["val_loss"] == [x for x in read_records(tmp_path / "jobs" / "smoke" / r["run"])
                                 if x["kind"] == "eval"][-1]["val_loss"] for r in rows)
    # it ends with what the runs reached, from their records, and the next commands (#24; #56: the report)
    tail = out.stdout.splitlines()[-6:]
    assert tail[0].split() == ["run", "val", "loss", "tokens", "wall", "time"]
    for line, r in zip(tail[1:3], rows):
        name, val, tokens, wall = line.split()
        records = read_records(tmp_path / "jobs" / "smoke" / name)
        assert name == r["run"] and val == f"{r['val_loss']:.3f}" and tokens == "20k"  # 20 steps x 8 x 128
        # the wall time its job held (#55: goodput's held): its start event to its end event, or, when the table
        # was made before the driver recorded the end, to the trainer's last record
        attempts = read_attempts(tmp_path / "jobs" / "smoke" / name)
        (start,), (end,) = ([a for a in attempts if a["event"] == kind] for kind in ("start", "end"))
        held = float(wall[:-1]) * (60 if wall.endswith("m") else 1)
        slack = 60 if wall.endswith("m") else 1  # the table rounds to whole seconds, or minutes past 2
        assert records[-1]["time"] - start["time"] - slack <= held <= end["time"] - start["time"] + slack, wall
    assert tail[3].split() == ["next:", "zbpscale", "collect", "sweeps/smoke.py", "#", "results", "bundle", "in",
                               "results/smoke"]
    assert tail[4].split()[:3] == ["zbpscale", "plot", "results/smoke"] and tail[3].index("#") == tail[4].index("#")
    assert tail[5].split()[:3] == ["zbpscale", "report", "results/smoke"] and tail[5].index("#") == tail[3].index("#")


def test_queue_survives_the_death_of_the_submitting_terminal(tmp_path, data_dir):
    sweep = write_sweep(tmp_path, "orphan", data_dir, steps=30)
    run = tmp_path / "jobs" / "orphan" / "nano-bp"
    shell = subprocess.Popen(["bash", "-c", f"{sys.executable} -m zbpscale.submit {sweep} --executor local --wait"],
                             cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    wait_until(lambda: "start" in [a["event"] for a in read_attempts(run)], "the run to start", 60)
    os.killpg(shell.pid, signal.SIGHUP)  # the terminal closes...
    os.killpg(shell.pid, signal.SIGKILL)  # ...and whatever ignored that is killed
    shell.wait(timeout=10)
    wait_until(lambda: "completed" in ends(run), "the run to finish without its terminal", 180)
    assert ends(run) == ["completed"] and [s for s, _ in losses(run)] == list(range(30))
    wait_driver_gone(LocalQueue(tmp_path / "jobs"))


@pytest.mark.slow
def test_time_limit_checkpoints_requeues_and_matches_an_uninterrupted_run(tmp_path, data_dir, straight_run):
    """time_min=1 with the warning 50 s before the limit: SIGUSR2 10 s into each attempt. Each step takes at least
    0.1 s (step_floor_env): 150 steps outlast an attempt on any machine (on a fast one they took under 10 s and the
    run ended without a time limit, in a clean-clone run of the suite)."""
    sweep = write_sweep(tmp_path, "limit", data_dir, steps=150, time_min=1, signal_delay_s=50,
                        max_timeouts=30)
    out = submit(sweep, "--wait", timeout=600, env=step_floor_env(tmp_path / "site", 0.1))
    run = tmp_path / "jobs" / "limit" / "nano-bp"
    assert ends(run)[-1] == "completed" and ends(run).count("timeout") >= 1, (ends(run), out.stdout)
    assert losses(run) == losses(straight_run(run))  # every step once, bitwise equal to never stopping


@pytest.mark.slow
def test_second_submit_queues_nothing_and_a_killed_driver_resumes_on_resubmit(tmp_path, data_dir, straight_run):
    sweep = write_sweep(tmp_path, "twice", data_dir, steps=60, arms=("bp", "zbp_n4"), ckpt_every=5)
    queue = LocalQueue(tmp_path / "jobs")
    submit(sweep, "--max-parallel", "2")
    again = submit(sweep)
    live = r"\((queued|starting|step \d+/60)\)"  # status's words for a live job (it said 'running' for all)
    assert re.search(rf"left alone: nano-bp {live}, nano-zbp_n4 {live}", again.stdout), again.stdout
    assert len(queue.entries()) == 2
    runs = [tmp_path / "jobs" / "twice" / n for n in ("nano-bp", "nano-zbp_n4")]
    wait_until(lambda: all((r / "checkpoints").is_dir() and any((r / "checkpoints").iterdir()) for r in runs),
               "a checkpoint of each run", 120)
    driver_pid = queue.driver_info()["pid"]
    os.kill(driver_pid, signal.SIGKILL)
    assert not any(RunFolder(run).complete.exists() for run in runs), "a run finished before the kill: make it longer"
    wait_until(lambda: not queue.driver_alive(), "the killed driver's lock to go", 10)
    # Its ranks got SIGUSR2 from the kernel (PDEATHSIG): they checkpoint and stop rather than train on.
    wait_until(lambda: all("checkpointed" in [r.get("why") for r in read_records(run) if r["kind"] == "end"]
                           for run in runs), "the orphaned ranks to checkpoint", 60)
    out = submit(sweep, "--wait", timeout=600)
    assert "driver was not running: started it again" in out.stdout
    assert len(queue.entries()) == 2  # the same two jobs, picked up again, not queued twice
    for run in runs:
        assert ends(run) == ["preempted", "completed"], ends(run)
        assert losses(run) == losses(straight_run(run))


def last_step(run_dir: Path) -> int:
    return max((s for s, _ in losses(run_dir)), default=-1)


@pytest.mark.slow
def test_kill_9_of_a_rank_is_retried_then_fails_over_its_bound_and_retry_resumes(tmp_path, data_dir, straight_run):
    """Fault: kill -9 of the trainer rank. With max_crashes=1 the first kill is a crash, requeued from the last
    checkpoint; the second is over the bound and the run fails. A plain resubmit leaves it alone and says how to
    retry; `submit --retry` resumes it. Every step once, bitwise equal to a run never killed; and once in its
    experiment trackers (one W&B run over the three attempts; the W&B key of the queue's environment in no file)."""
    sweep = write_sweep(tmp_path, "crash", data_dir, steps=150, ckpt_every=5, max_crashes=1,
                        trackers=("tensorboard", "wandb"))
    run = tmp_path / "jobs" / "crash" / "nano-bp"
    env = {**os.environ, "WANDB_API_KEY": FAKE_WANDB_KEY, "WANDB_MODE": "offline"}
    submit(sweep, env=env)
    for attempt, step in ((1, 12), (2, 40)):
        wait_until(lambda: len([a for a in read_attempts(run) if a["event"] == "start"]) == attempt
                   and last_step(run) >= step, f"step {step} of attempt {attempt}", 120)
        pid = [a for a in read_attempts(run) if a["event"] == "start"][-1]["pid"]
        os.kill(pid, signal.SIGKILL)
        wait_until(lambda: len(ends(run)) == attempt, f"the end of attempt {attempt}", 60)
    assert not RunFolder(run).complete.exists(), "the run finished before the second kill: make it longer"
    assert ends(run) == ["crashed", "failed"]
    reasons = [a["reason"] for a in read_attempts(run) if a["event"] == "end"]
    assert "crashed 2 times, over max_crashes=1" in reasons[-1] and "killed by SIGKILL" in reasons[-1]
    # a killed rank says nothing: the reason names the last step logged, not a progress line printed long before
    for reason, step in zip(reasons, (12, 40)):
        after = re.search(r"killed by SIGKILL after step (\d+)", reason)
        assert after and int(after.group(1)) > step and "loss" not in reason, reason
    wait_driver_gone(LocalQueue(tmp_path / "jobs"))
    again = submit(sweep, env=env)
    assert "left alone: nano-bp (failed)" in again.stdout and "--retry" in again.stdout
    out = submit(sweep, "--retry", "--wait", timeout=600, env=env)
    assert "nano-bp: retry" in out.stdout
    assert "nano-bp: --retry counts its timeouts, preemptions and failures from 0 again (status's T/P/F were 0/0/2" \
        in out.stdout
    assert ends(run) == ["crashed", "failed", "completed"]
    assert losses(run) == losses(straight_run(run))
    check_trackers(run, tmp_path / "jobs")


def test_cancel_checkpoints_and_a_resubmit_resumes(tmp_path, data_dir, straight_run):
    sweep = write_sweep(tmp_path, "cancel", data_dir, steps=60)
    run = tmp_path / "jobs" / "cancel" / "nano-bp"
    submit(sweep)
    wait_until(lambda: any(r["kind"] == "train" for r in read_records(run)), "the first step", 60)
    out = subprocess.run([sys.executable, "-m", "zbpscale.cli", "cancel", str(sweep)], cwd=tmp_path,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and "stopped: nano-bp" in out.stdout, out.stdout + out.stderr
    assert ends(run) == ["cancelled"] and not RunFolder(run).complete.exists()
    status = subprocess.run([sys.executable, "-m", "zbpscale.cli", "status", str(run.parent), "--json"],
                            capture_output=True, text=True, timeout=60)
    assert status.returncode == 3 and json.loads(status.stdout)["cancel"][0]["state"] == "cancelled"
    assert 0 < len(losses(run)) < 60
    assert "resume" in submit(sweep, "--wait", timeout=300).stdout
    assert ends(run) == ["cancelled", "completed"]
    assert losses(run) == losses(straight_run(run))


def orphaned(tmp_path: Path, data_dir: Path, *, frozen: bool = False, signal_delay_s: int = 30
             ) -> tuple[Path, LocalQueue, Path, Path]:
    """A sweep of two runs, one training and one waiting behind it, whose driver and training rank were killed -9
    together (the OOM killer), or, `frozen`, whose rank was stopped (SIGSTOP: a frozen trainer, which the dead
    driver's signal does not reach) and its driver killed -9: (its file, the queue, the run that trained, the one
    that waits)."""
    sweep = write_sweep(tmp_path, "orphans", data_dir, steps=400, arms=("bp", "zbp_n4"), ckpt_every=5,
                        signal_delay_s=signal_delay_s)
    queue = LocalQueue(tmp_path / "jobs")
    running, waiting = (tmp_path / "jobs" / "orphans" / n for n in ("nano-bp", "nano-zbp_n4"))
    submit(sweep, "--max-parallel", "1")
    wait_until(lambda: last_step(running) >= 2, "the first run's steps", 120)
    start = [a for a in read_attempts(running) if a["event"] == "start"][-1]
    if frozen:
        os.kill(start["pid"], signal.SIGSTOP)
    os.kill(queue.driver_info()["pid"], signal.SIGKILL)
    if not frozen:
        os.kill(start["pid"], signal.SIGKILL)
    wait_until(lambda: not queue.driver_alive(), "the killed driver's lock to go", 10)
    return sweep, queue, running, waiting


def test_a_cancel_after_the_driver_died_stops_every_run_and_starts_none(tmp_path, data_dir):
    """The driver and the training rank killed -9 together (the OOM killer), then a cancel: the cancel starts a new
    driver, which found the running attempt dead and started it again as a crash (it trained to its end while cancel
    waited), and, started after the first request was written, started the waiting run before it read the second.
    Now: the dead attempt ends cancelled, the waiting run is cancelled before it started, and nothing trains on."""
    sweep, queue, running, waiting = orphaned(tmp_path, data_dir)
    out = subprocess.run([sys.executable, "-m", "zbpscale.cli", "cancel", str(sweep), "--timeout", "60"],
                         cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    wait_driver_gone(queue)
    assert ends(running) == ["cancelled"] and "it had died without an end record" in \
        read_attempts(running)[-1]["reason"], read_attempts(running)
    assert [a["event"] for a in read_attempts(running)].count("start") == 1
    assert ends(waiting) == ["cancelled"] and "start" not in [a["event"] for a in read_attempts(waiting)]
    assert not RunFolder(waiting).metrics.exists() and last_step(running) < 399


def test_a_cancel_after_the_driver_died_kills_a_frozen_attempt(tmp_path, data_dir):
    """A frozen rank (SIGSTOP) whose driver was killed -9, then a cancel: the cancel's driver adopted the attempt
    and only waited for its ranks to end (no cancel, time limit or hang reached a rank it had not started), so the
    cancel said 'still stopping' at its --timeout and the rank stayed stopped for ever. Now the adopted ranks are
    signalled by pid as its own are: SIGUSR2, then SIGKILL after the sweep's signal delay; the attempt ends
    cancelled, killed, and the waiting run is cancelled before it started."""
    from zbpscale.proc import pid_alive, process_start_time

    sweep, queue, running, waiting = orphaned(tmp_path, data_dir, frozen=True, signal_delay_s=3)
    pid = [a for a in read_attempts(running) if a["event"] == "start"][-1]["pid"]
    born = process_start_time(pid)
    assert born is not None  # stopped, not gone
    try:
        out = subprocess.run([sys.executable, "-m", "zbpscale.cli", "cancel", str(sweep), "--timeout", "60"],
                             cwd=tmp_path, capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stdout + out.stderr
        wait_driver_gone(queue)
        assert not pid_alive(pid, born)
        assert ends(running) == ["cancelled"] and read_attempts(running)[-1]["reason"] == "zbpscale cancel; killed"
        assert ends(waiting) == ["cancelled"] and "start" not in [a["event"] for a in read_attempts(waiting)]
    finally:
        if pid_alive(pid, born):  # the bug: the frozen rank left behind
            os.kill(pid, signal.SIGKILL)


def test_a_cancel_of_one_run_after_the_driver_died_starts_no_other(tmp_path, data_dir):
    """The driver and the training rank killed -9 together, then a cancel of the run that waits: the driver the
    cancel started settled the dead attempt as a crash and started it again (another sweep's stopped runs too),
    though status said 'submit again to go on'. Now the cancelled run ends cancelled and nothing starts: the other
    stays stopped, its dead attempt settled, until a submit starts it from its checkpoint."""
    from zbpscale.jobs.status import collect_rows

    sweep, queue, running, waiting = orphaned(tmp_path, data_dir)
    out = subprocess.run([sys.executable, "-m", "zbpscale.cli", "cancel", str(sweep), "--only", "nano-zbp_n4",
                          "--timeout", "60"], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    wait_driver_gone(queue)
    starts = lambda run: [a["event"] for a in read_attempts(run)].count("start")  # noqa: E731
    assert ends(waiting) == ["cancelled"] and starts(waiting) == 0
    assert ends(running) == ["crashed"] and starts(running) == 1, read_attempts(running)
    stopped = last_step(running)
    time.sleep(2)
    assert last_step(running) == stopped and not queue.driver_alive()
    assert "the jobs still queued wait for a submit: driver exits" in (queue.dir / "driver.log").read_text()
    rows = {r["run"]: r for r in collect_rows(tmp_path / "jobs" / "orphans")}
    assert rows["nano-bp"]["state"] == "stopped" and "submit again" in rows["nano-bp"]["reason"], rows["nano-bp"]
    submit(sweep)  # goes on: the run starts again from its checkpoint
    wait_until(lambda: starts(running) == 2, "the run to start again", 60)
    subprocess.run([sys.executable, "-m", "zbpscale.cli", "cancel", str(sweep), "--timeout", "60"], cwd=tmp_path,
                   capture_output=True, timeout=120, check=True)  # nothing left training after the test
    wait_driver_gone(queue)


def test_a_cancelled_sweep_s_data_prep_does_not_run_after_it(tmp_path, data_dir):
    """A sweep's runs cancelled while its data prep waited in the queue (behind another sweep's run): the prep
    stayed queued and ran once the other sweep was cancelled too, with nothing left to train on its data (a hub
    source: hours). It is stopped with the last run that waits for it."""
    busy = write_sweep(tmp_path, "busy", data_dir, steps=400)
    fresh = write_sweep(tmp_path, "fresh", tmp_path / "fresh-data", steps=5, arms=("bp", "zbp_n4"))
    queue = LocalQueue(tmp_path / "jobs")
    submit(busy, "--max-parallel", "1")
    wait_until(lambda: last_step(tmp_path / "jobs" / "busy" / "nano-bp") >= 1, "the busy run's steps", 120)
    submit(fresh)
    (prep,) = [e for e in queue.entries() if e.kind == "command"]
    assert prep.state == "queued"
    cancel = [sys.executable, "-m", "zbpscale.cli", "cancel", "--timeout", "60"]
    one = subprocess.run([*cancel, str(fresh), "--only", "nano-bp"], cwd=tmp_path, capture_output=True, text=True,
                         timeout=120)
    assert one.returncode == 0 and "prep-data" not in one.stdout, one.stdout + one.stderr  # nano-zbp_n4 waits on
    out = subprocess.run([*cancel, str(fresh)], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and f"fresh/prep-data: job {prep.job_id}" in out.stdout, out.stdout + out.stderr
    subprocess.run([*cancel, str(busy)], cwd=tmp_path, capture_output=True, text=True, timeout=120, check=True)
    wait_driver_gone(queue)
    assert [e.state for e in queue.entries() if e.kind == "command"] == ["cancelled"]
    assert not (tmp_path / "fresh-data" / "manifest.json").exists()
    submit(fresh, "--wait", timeout=300)  # submitted again: a prep of its own, then the runs
    assert all(RunFolder(tmp_path / "jobs" / "fresh" / n).complete.exists() for n in ("nano-bp", "nano-zbp_n4"))


def test_a_driver_started_by_a_cancel_starts_jobs_once_a_submitter_asks(tmp_path):
    """A submit while a cancel's driver holds the queue (it starts nothing) would leave its jobs queued with a
    driver running: the submitter asks it to start them, and it does from its next tick."""
    from zbpscale.jobs.executors.local_queue.driver import Driver

    queue = LocalQueue(tmp_path / "jobs")
    queue.dir.mkdir(parents=True)
    lock = queue.try_driver_lock()  # a driver holds the queue
    try:
        driver = Driver(queue, starts=False)
        assert queue.ensure_driver(starts=False) is False and not queue.starts_wanted()  # a cancel asks nothing
        assert queue.ensure_driver() is False and queue.starts_wanted()  # a submitter asks
        assert driver.busy()  # it does not leave with the ask unread
        driver.tick()
        assert driver.starts and not queue.starts_wanted()
    finally:
        lock.release()


def test_a_driver_that_did_its_work_and_left_is_not_waited_for(tmp_path, monkeypatch):
    """A cancel's driver applies its requests and leaves within a moment: ensure_driver, which waits for a started
    driver to hold the queue, waited its whole 20 s for one that had come and gone."""
    queue = LocalQueue(tmp_path / "jobs")
    queue.dir.mkdir(parents=True)
    queue.add([Entry(job_id="", name="s/r", run_dir=str(tmp_path / "r"))])
    monkeypatch.setattr(queue, "start_driver", lambda **_: queue.write_driver_info({"pid": 1, "exited": time.time()}))
    began = time.monotonic()
    assert queue.ensure_driver(starts=False) and time.monotonic() - began < 5


def test_local_refuses_runs_this_node_cannot_hold(tmp_path, data_dir):
    sweep = write_sweep(tmp_path, "big", data_dir, steps=5)
    sweep.write_text(sweep.read_text().replace("gpus_per_node=0, tasks_per_node=1", "gpus_per_node=2"))
    out = submit(sweep, check=False, env={**os.environ, "CUDA_VISIBLE_DEVICES": ""})  # a node without GPUs
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert "needs 2 GPUs; this node has 0" in out.stderr and len(out.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "jobs" / ".localq").exists()


def test_runs_after_a_failed_prep_job_name_its_log(tmp_path):
    """A sweep whose data prep fails (WikiText-103 offline): every run fails naming the prep job's log, which
    exists and says why, and `status --logs RUN` shows it."""
    sweep = tmp_path / "prepfail.py"
    sweep.write_text(f"""from zbpscale.sweep import Data, Resources, Size, Sweep, arm
CPU = Resources(gpus_per_node=0, tasks_per_node=1, cpus_per_task=1, time_min=30)
SWEEP = Sweep(name="prepfail", sizes=(Size(name="nano", global_batch=4, seq_len=32, tokens=4 * 32 * 5,
                                           resources=CPU),),
              arms=(arm("bp"),), data=Data(dir={str(tmp_path / "wt103")!r}, source="wikitext-103", workers=1),
              root={str(tmp_path / "jobs")!r})
""")
    out = submit(sweep, "--wait", check=False, timeout=300,
                 env={**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"})
    assert out.returncode == 1, out.stdout + out.stderr
    run = tmp_path / "jobs" / "prepfail" / "nano-bp"
    end = [a for a in read_attempts(run) if a["event"] == "end"][-1]
    assert end["why"] == "failed" and "dependency" in end["reason"]
    assert Path(end["log"]).is_file() and "prep-data-logs" in end["log"]
    logs = subprocess.run([sys.executable, "-m", "zbpscale.cli", "status", str(run.parent), "--logs", "nano-bp"],
                          capture_output=True, text=True, timeout=60)
    assert logs.returncode == 0 and end["log"] in logs.stdout, logs.stdout + logs.stderr
    again = submit(sweep, check=False, timeout=120)  # its hint names the sweep: a jobs root holds more than one
    assert f"fix the cause (zbpscale status {sweep} --logs RUN)" in again.stdout, again.stdout + again.stderr
    wait_driver_gone(LocalQueue(tmp_path / "jobs"))
    assert "queue empty: driver exits" in (tmp_path / "jobs" / ".localq" / "driver.log").read_text()  # not a crash
    (prep,) = [e for e in LocalQueue(tmp_path / "jobs").entries() if e.kind == "command"]
    assert prep.makes == str(tmp_path / "wt103" / "manifest.json")  # what two preps of one folder wait on


def step_records(run_dir: Path) -> list[tuple[str, int]]:
    return [(r["kind"], r["step"]) for r in read_records(run_dir) if r["kind"] in ("train", "eval", "diag")]


def test_kill_9_before_the_first_checkpoint_leaves_each_step_once(tmp_path, data_dir, straight_run):
    """#33 item 1 on the local queue: the rank killed (-9) at step >= 5 with no checkpoint yet; the requeued
    attempt starts again at step 0 and drops what the dead one logged: every step once, equal to a straight run."""
    sweep = write_sweep(tmp_path, "early", data_dir, steps=40)  # no periodic checkpoint
    run = tmp_path / "jobs" / "early" / "nano-bp"
    submit(sweep)
    wait_until(lambda: last_step(run) >= 5, "step 5", 120)
    assert not RunFolder(run).list_checkpoints()
    os.kill([a for a in read_attempts(run) if a["event"] == "start"][-1]["pid"], signal.SIGKILL)
    wait_until(lambda: RunFolder(run).complete.exists(), "the requeued attempt to finish", 180)
    wait_driver_gone(LocalQueue(tmp_path / "jobs"))
    assert ends(run) == ["crashed", "completed"]
    assert losses(run) == losses(straight_run(run))
    assert step_records(run) == step_records(straight_run(run))  # each step once, as a straight run
    (resume,) = [r for r in read_records(run) if r["kind"] == "resume"]
    assert resume["from_step"] == 0 and resume["dropped"] >= 5


@pytest.mark.slow
def test_a_frozen_trainer_is_caught_by_the_driver_requeued_and_finishes_bitwise(tmp_path, data_dir, straight_run):
    """#33 item 3 on the local queue: the trainer stopped with SIGSTOP (its own watchdog is frozen with it) and
    nobody sends SIGCONT. The driver sees no step for step_timeout_s (+ the sentinel's grace), writes what it saw
    (a stopped process) into the log and the records, kills the ranks and requeues the run as a hang: it finishes
    from its last checkpoint, every step once, bitwise equal to a run never stopped."""
    from zbpscale.jobs.sentinel import WATCHDOG_FIRST_S

    sweep = write_sweep(tmp_path, "frozen", data_dir, steps=80, ckpt_every=5, step_timeout_s=5)
    run = tmp_path / "jobs" / "frozen" / "nano-bp"
    submit(sweep)
    wait_until(lambda: RunFolder(run).list_checkpoints() and last_step(run) >= 12, "step 12", 120)
    pid = [a for a in read_attempts(run) if a["event"] == "start"][-1]["pid"]
    os.kill(pid, signal.SIGSTOP)
    stopped = time.time()
    wait_until(lambda: ends(run), "the hang to be caught", 5 + WATCHDOG_FIRST_S + 240)  # ~21 s in a loaded suite
    assert time.time() - stopped >= 5 + WATCHDOG_FIRST_S - 1  # the trainer's own watchdog had its chance first
    wait_until(lambda: RunFolder(run).complete.exists(), "the requeued attempt to finish", 180)
    wait_driver_gone(LocalQueue(tmp_path / "jobs"))
    assert ends(run) == ["hung", "completed"]
    hung = next(a for a in read_attempts(run) if a["event"] == "end")
    assert f"rank 0 (pid {pid}" in hung["reason"] and "stopped (SIGSTOP or a debugger)" in hung["reason"], hung
    assert hung["reason"].count("no step for") == 1 and hung["reason"].endswith("; requeue 1/3")
    (end,) = [r for r in read_records(run) if r["kind"] == "end" and r["why"] == "hung"]
    assert "seen from outside the trainer" in end["reason"]
    assert losses(run) == losses(straight_run(run))
    assert step_records(run) == step_records(straight_run(run))  # each step once, as a straight run


def heartbeat_step(run_dir: Path) -> int:
    return read_json(RunFolder(run_dir).heartbeat).get("step", -1)


@pytest.mark.slow
def test_a_hang_names_the_last_step_of_the_records_not_the_lagging_heartbeats(tmp_path, data_dir):
    """The hang's step: the trainer is stopped (SIGSTOP) three steps or more past its last heartbeat (rewritten at most
    every 5 s). The hang the driver records names the steps done as metrics.jsonl holds them (its last train record,
    0-based, + 1), in the attempt's end and in the trainer's end record, not the heartbeat's older count."""
    sweep = write_sweep(tmp_path, "lagging", data_dir, steps=100, step_timeout_s=5)
    run = tmp_path / "jobs" / "lagging" / "nano-bp"
    submit(sweep)
    wait_until(lambda: heartbeat_step(run) >= 1 and last_step(run) + 1 >= heartbeat_step(run) + 3,
               "three steps past a heartbeat", 120)
    pid = [a for a in read_attempts(run) if a["event"] == "start"][-1]["pid"]
    os.kill(pid, signal.SIGSTOP)
    done, beat = last_step(run) + 1, heartbeat_step(run)  # the records and the heartbeat of the stopped trainer
    assert beat < done, f"a heartbeat was written just before the stop ({beat} of {done} steps): stop again"
    wait_until(lambda: ends(run), "the hang to be caught", 5 + 15 + 240)  # ~21 s in a loaded suite
    hung = next(a for a in read_attempts(run) if a["event"] == "end")
    assert hung["why"] == "hung" and f"after step {done}, seen from outside the trainer" in hung["reason"], (hung, beat)
    (end,) = [r for r in read_records(run) if r["kind"] == "end" and r["why"] == "hung"]
    assert end["step"] == done - 1  # the last step taken, 0-based as every step record
    wait_until(lambda: RunFolder(run).complete.exists(), "the requeued attempt to finish", 180)
    wait_driver_gone(LocalQueue(tmp_path / "jobs"))
    assert [s for s, _ in losses(run)] == list(range(100))


@pytest.mark.slow
def test_a_rank_killed_with_its_driver_is_a_crash_naming_the_steps_it_dropped(tmp_path, data_dir, straight_run):
    """The driver and its rank killed together (kill -9 of the driver's process group) a few steps past
    a checkpoint: nothing was checkpointed on the way out. The next driver records the attempt as crashed (counted
    against max_crashes), naming the steps dropped (from the last step in metrics.jsonl to the newest checkpoint on
    disk), and the run finishes from that checkpoint with every step once, bitwise equal to a run never killed."""
    sweep = write_sweep(tmp_path, "together", data_dir, steps=80, ckpt_every=10)
    run = tmp_path / "jobs" / "together" / "nano-bp"
    queue = LocalQueue(tmp_path / "jobs")
    submit(sweep)

    def past_a_checkpoint() -> bool:
        found = RunFolder(run).list_checkpoints()
        return bool(found) and last_step(run) >= found[-1][0] + 2

    wait_until(past_a_checkpoint, "two steps past a checkpoint", 120)
    group = os.getpgid(queue.driver_info()["pid"])  # the driver's own session: it and the ranks it started
    assert group != os.getpgrp()
    os.killpg(group, signal.SIGKILL)
    wait_until(lambda: not queue.driver_alive(), "the killed driver's lock to go", 10)
    assert not RunFolder(run).complete.exists(), "the run finished before the kill: make it longer"
    last, resume_at = last_step(run), RunFolder(run).list_checkpoints()[-1][0]
    redone = [r for r in read_records(run) if r["kind"] in ("train", "eval", "diag") and r["step"] >= resume_at]
    assert last >= resume_at, f"killed right after checkpoint {resume_at}: nothing to drop"
    out = submit(sweep, "--wait", timeout=600)
    assert "driver was not running: started it again" in out.stdout
    assert ends(run) == ["crashed", "completed"], ends(run)
    crashed = next(a for a in read_attempts(run) if a["event"] == "end")
    assert f"last logged step is {last}, it resumes from checkpoint {resume_at}: steps {resume_at}..{last} dropped" \
        in crashed["reason"] and crashed["reason"].endswith("; requeue 1/3"), crashed
    (resume,) = [r for r in read_records(run) if r["kind"] == "resume"]
    assert resume["from_step"] == resume_at and resume["dropped"] == len(redone)
    assert losses(run) == losses(straight_run(run))
    assert step_records(run) == step_records(straight_run(run))  # each step once, as a straight run


OLD_DRIVER = """
import fcntl, sys, time
fh = open(sys.argv[1], "a")
fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)  # all that a driver of a release before the lease did
print("holding", flush=True)
time.sleep(600)
"""


def test_a_driver_of_an_older_release_holding_only_the_kernel_lock_is_alive(tmp_path):
    """A driver started before an upgrade holds driver.lock's flock and writes no lease: the queue still calls
    it alive (status does not call its runs stopped, submit starts no second driver), and dead once it is gone."""
    queue = LocalQueue(tmp_path / "jobs")
    queue.dir.mkdir(parents=True)
    old = subprocess.Popen([sys.executable, "-c", OLD_DRIVER, str(queue.dir / "driver.lock")], stdout=subprocess.PIPE,
                           text=True)
    try:
        assert old.stdout.readline().strip() == "holding"
        assert queue.driver_alive() and queue.try_driver_lock() is None
    finally:
        old.kill()
        old.wait()
    assert not queue.driver_alive()
    lock = queue.try_driver_lock()
    assert lock is not None
    lock.release()


def test_a_live_job_submitted_with_other_resources_is_named_and_the_note_s_commands_apply_them(tmp_path, data_dir):
    """A sweep file's time_min and max_timeouts raised while its runs' jobs wait or train: a job keeps what it was
    submitted with through its requeues, and submit said nothing of it. The dry run now names both runs in one line
    with the values each job has and the command that applies the new ones; that cancel, then a submit, queue jobs
    whose entries (what the driver enforces) hold the new values."""
    sweep = write_sweep(tmp_path, "limits", data_dir, steps=400, arms=("bp", "zbp_n4"), ckpt_every=5)
    queue = LocalQueue(tmp_path / "jobs")
    runs = [tmp_path / "jobs" / "limits" / n for n in ("nano-bp", "nano-zbp_n4")]
    first = submit(sweep, "--max-parallel", "1").stdout
    try:  # --max-parallel is the queue's, for every sweep under it: said where it is set
        assert "local queue: at most 1 run at once, for every sweep under jobs, until a submit sets --max-parallel " \
               "again" in first, first
        wait_until(lambda: last_step(runs[0]) >= 1, "the first run's steps", 120)
        assert [e.time_s for e in queue.entries()] == [1800.0, 1800.0]
        sweep.write_text(sweep.read_text().replace("time_min=30", "time_min=45").replace("max_timeouts=20",
                                                                                         "max_timeouts=7"))
        plan = " ".join(submit(sweep, "--dry-run").stdout.split())
        said = ("nano-bp, nano-zbp_n4: their jobs keep what they were submitted with, through requeues; the sweep "
                "file now says time_min 30 -> 45, max_timeouts 20 -> 7: to apply it, zbpscale cancel jobs/limits "
                "--only nano-bp,nano-zbp_n4, then submit again")
        assert said in plan, plan
        cancel = subprocess.run(["zbpscale", "cancel", "jobs/limits", "--only", "nano-bp,nano-zbp_n4"],
                                cwd=tmp_path, capture_output=True, text=True, timeout=120)
        assert cancel.returncode == 0, cancel.stdout + cancel.stderr
        again = submit(sweep).stdout
        assert "their jobs keep" not in again, again
        live = {Path(e.run_dir).name: e for e in queue.entries() if e.state in LIVE}
        assert sorted(live) == ["nano-bp", "nano-zbp_n4"], queue.entries()
        assert all((e.time_s, e.max_timeouts) == (2700.0, 7) for e in live.values())
        latest = [[a for a in read_attempts(r) if a["event"] == "submitted"][-1]["settings"] for r in runs]
        assert [(s["time_min"], s["max_timeouts"]) for s in latest] == [(45, 7), (45, 7)]
    finally:
        subprocess.run(["zbpscale", "cancel", "jobs/limits"], cwd=tmp_path, capture_output=True, timeout=120)
        wait_driver_gone(queue)


def test_a_garbled_queue_entry_is_left_out_and_the_others_read(tmp_path):
    """An entry file that is not UTF-8, not JSON, or whose place in the queue is words: the queue reads the others
    (status, cancel and the dry run were a UnicodeDecodeError or TypeError traceback)."""
    queue = LocalQueue(tmp_path)
    added = queue.add([Entry(job_id="", name=f"s/run{i}", kind="command", command=["true"]) for i in range(3)])
    (queue.entries_dir / "local-7.json").write_bytes(b"x\xff\n")
    (queue.entries_dir / "local-8.json").write_text("{not json")
    (queue.entries_dir / "local-9.json").write_text(json.dumps({"job_id": "local-9", "name": "s/x", "seq": "x"}))
    assert [e.job_id for e in queue.entries()] == [e.job_id for e in added]
