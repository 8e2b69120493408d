"""`zbpscale status` speed on a generated sweep folder (#54 item 2: 10,000 runs under 2 s cold, 1 s warm).

Writes a folder the way a ladder's runs would leave it mid-way: each run with its config, plan, attempts (a few
requeues), heartbeat, and a metrics.jsonl of `--records` train records with an eval every 50 steps (about
1 MB per run at the default), some runs complete, some failed with a log. The records and the heartbeat are those a
trainer writes (its start records with the config and its derived numbers, an end record with a row for each of
SAVES checkpoint saves, a heartbeat with their tally), so that what status decodes of each run is as long as it is on
a cluster; and each folder's digest, as the job layer's record of the run's latest end leaves it (run/snapshot.py,
kept in the sweep folder's looks: run/looks.py).
Then times, side by side, in interleaved rounds (median): the whole command in a fresh process (`zbpscale
status DIR`, table and --json, the table on a pseudo-terminal as people see it, boxed and in color, and `zbpscale
status` of a sweep file that plans the runs, `sweep_file`), and the in-process gathering of the rows (what --watch
repeats), beside what status reads through the digests, read alone without decoding in as many processes
(`reads_alone`: the file system's part of its time). No SLURM here: the runs say executor local. Each command runs
as an installed package's does, its bytecode compiled once before the rounds (`installed`).

The digests and the heartbeats' index are caches. After the timed rounds the digests are removed and the command
and the rows timed again (status reads so a folder whose digest does not hold: a live trainer's, or one of an older
release); then the heartbeats' index is removed too (a trainer killed mid-run keeps the glance and goodput's fold of
all but the last `--tail` records in it: 20 by default, long after its latest heartbeat; 0: none, as a trainer leaves
it when it ends), the rows gathered and `status --goodput` run again: each must give the same as with the caches.

  python tools/bench_status.py
  python tools/bench_status.py --runs 100 --records 20000
  python tools/bench_status.py --runs 10000 --records 1000 --rounds 3 --cold   # root: drops the kernel's caches
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable

from zbpscale.jobs.status import collect_rows
from zbpscale.run.config import TrainConfig, derived_numbers, model_config
from zbpscale.run.fold import Fold
from zbpscale.run.folder import RunFolder
from zbpscale.run.glance import glance_index, glance_of
from zbpscale.run.records import records_of
from zbpscale.run.snapshot import keep

SIZES = ("nano", "micro", "tiny", "mini", "s60", "s124", "s350", "s1b")
ARMS = ("bp", "zbp_n16", "zbp_n64")
SAVES = 24
"""Checkpoint saves in each run's attempt before the latest (a day's attempt, a save an hour): each a row of its end
record, as a trainer writes them."""


def run_name(i: int) -> str:
    """The i-th run of a ladder of every preset size x 3 arms, seed after seed: `tiny-zbp_n16-s3`."""
    seed = i // (len(SIZES) * len(ARMS))
    return f"{SIZES[i % len(SIZES)]}-{ARMS[i // len(SIZES) % len(ARMS)]}" + (f"-s{seed}" if seed else "")


def loss(step: int) -> float:
    """A loss curve as a language model's: 10.8 at the start (ln of GPT-2's vocabulary), falling towards 3."""
    return 3.0 + 7.8 / (1 + step / 50)


def build(folder: Path, runs: int, records: int, *, index: bool = True, tail: int = 20, digest: bool = True) -> None:
    """`runs` run folders (`run_name`); `index`: their heartbeats carry the glance index a trainer of this release
    writes, covering all but the last `tail` records (0 to 20: those written after the latest heartbeat); `digest`:
    each folder's digest kept, as the job layer's record of its latest end leaves it (run/snapshot.py's `keep`)."""
    now = time.time()
    train = TrainConfig(model=model_config("s60"), data_dir="data", steps=2 * records, global_batch=256)
    config = json.dumps(train.to_dict())
    saves = [{"step": 1000 * (k + 1), "blocked_s": 0.02, "landed_s": 14.7, "overlap_steps": 16, "slowdown": 1.08}
             for k in range(SAVES)]
    tally = {"step": 1000 * SAVES, "time": now - 60, "s": 0.02 * SAVES, "n": SAVES, "last": saves[-1]}
    lines = [json.dumps({"kind": "start", "time": now - 9e4, "attempt": 1, "step": 0, "world_size": 8,
                         "config": train.to_dict(), "derived": derived_numbers(train, 8),
                         "numerics": {"torch": "2.13.0+cu128", "cpu": "AMD EPYC", "cpu_capability": "AVX512",
                                      "threads": 16, "gpu": "NVIDIA H100 80GB HBM3"},
                         "impl_used": {"attn": "closed", "ffn": "closed"}, "git": "0" * 40, "host": "gpu-node-017",
                         "versions": {"zbpscale": "0.1.0", "torch": "2.13.0+cu128", "python": "3.11.7"},
                         "setup_s": {"launch": 9.1, "model": 3.2, "restore": 0.0, "warm_up": 41.5, "data": 0.4,
                                     "total": 54.2}})]
    for step in range(records):
        tokens = (step + 1) * 262144
        lines.append(json.dumps({"kind": "train", "time": now - 9e4 + step, "step": step, "tokens": tokens,
                                 "loss": loss(step), "lr": 3e-4, "grad_norm": 0.8, "step_time": 0.9,
                                 "tokens_per_s": 291000.0}))
        if step % 50 == 49:
            lines.append(json.dumps({"kind": "eval", "time": now - 9e4 + step, "step": step, "tokens": tokens,
                                     "val_loss": loss(step) + 0.05}))
    lines.append(json.dumps({"kind": "end", "time": now - 9e4 + records, "step": records - 1, "why": "checkpointed",
                             "reason": "signal 12: requeue me", "ckpt_s": 0.02 * SAVES, "ckpts": SAVES,
                             "ckpt_saves": saves}))
    lines.append(json.dumps({**json.loads(lines[0]), "time": now - 9e4 + records + 3, "attempt": 2, "step": records}))
    for step in range(records, records + 20):
        lines.append(json.dumps({"kind": "train", "time": now - 9e4 + step + 4, "step": step, "tokens": step * 262144,
                                 "loss": loss(step), "lr": 3e-4, "grad_norm": 0.8, "step_time": 0.9,
                                 "tokens_per_s": 291000.0}))
    metrics = ("\n".join(lines) + "\n").encode()
    at = len(("\n".join(lines[:len(lines) - tail]) + "\n").encode())
    beat = {"step": records + 20 - tail, "tokens": (records + 20 - tail) * 262144,
            "time": now - 9e4 + records + 24 - tail - 0.5, "host": "gpu-node-017", "pid": 123456,
            "pid_start": 987654321, "impl_used": {"attn": "closed", "ffn": "closed"}, "fallbacks": [], "ckpt": tally}
    if index:
        beat["glance"] = glance_index(glance_of(metrics[:at]), metrics[:at], at,
                                      fold=Fold.of(records_of(metrics[:at])).state)
    for i in range(runs):
        run = folder / run_name(i)
        run.mkdir(parents=True)
        (run / "config.json").write_text(config)
        (run / "plan.json").write_text(json.dumps({"params": 6e7 + i, "gpus": 8, "gpu_hours": 40.0}))
        (run / "metrics.jsonl").write_bytes(metrics)
        (run / "heartbeat.json").write_text(json.dumps(beat))
        job = f"local-{i}"
        attempts = [{"event": "submitted", "time": now - 9e4, "job_id": job, "executor": "local"}]
        for start, end, why in ((-60, records + 1, "timeout"), (records + 2, records + 30, "timeout"),
                                (records + 60, records + 65, "preempted")):  # the trainer's two attempts, and one
            attempts += [{"event": "start", "time": now - 9e4 + start, "job_id": job},  # preempted in its start-up
                         {"event": "end", "time": now - 9e4 + end, "job_id": job, "why": why,
                          "reason": "checkpointed; requeue"}]
        if i % 10 == 0:
            attempts.append({"event": "end", "time": now - 5, "job_id": job, "why": "failed",
                             "reason": "exit status 1", "log": str(run / "logs" / f"{job}_0.log")})
            (run / "logs").mkdir()
            (run / "logs" / f"{job}_0.log").write_text("x\n" * 5000 + "RuntimeError: boom\n")
        elif i % 10 == 1:
            (run / "COMPLETE").write_text("{}\n")
        (run / "attempts.jsonl").write_text("".join(json.dumps(a) + "\n" for a in attempts))
        if digest:
            keep(run)


def sweep_file(folder: Path, runs: int) -> Path:
    """A sweep file beside `folder` that plans its runs (every preset size x ARMS, as many seeds as `runs` needs; the
    last seed's runs past `runs` have no folder yet): what `zbpscale status sweeps/ladder.py` reads."""
    seeds = -(-runs // (len(SIZES) * len(ARMS)))
    path = folder.parent.parent / "sweeps" / f"{folder.name}.py"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"""from zbpscale.sweep import Data, Resources, Size, Sweep, arm

NODE = Resources(nodes=1, gpus_per_node=8, cpus_per_task=12, mem_gb=0, time_min=24 * 60)
SWEEP = Sweep(name={folder.name!r}, root={str(folder.parent)!r},
              sizes=tuple(Size(name=n, global_batch=256, micro_batch=32, lr=1e-3, resources=NODE) for n in {SIZES!r}),
              arms=tuple(arm(a) for a in {ARMS!r}), seeds=tuple(range({seeds})),
              data=Data(dir="data/embedded", source="embedded"))
""")
    return path


def reads_alone(folder: Path, *, alone: bool = False) -> float:
    """Seconds to read, without decoding, what status reads of the runs through their digests (the sweep's looks,
    read once, and a stat of each file a look names), the stats over as many forked processes as status uses
    (`bulk.spread`; `alone`: in this process only): the part of status's time that is the file system's, beside the
    rows' (`rows in process`)."""
    from zbpscale.bulk import spread
    from zbpscale.run.looks import read
    from zbpscale.run.snapshot import stamps

    t = time.perf_counter()
    runs = RunFolder.all_in(folder)
    kept = read(folder)
    spread(lambda part: [len(stamps(RunFolder(p))) for p in part], runs, least=len(runs) + 1 if alone else None)
    assert len(kept) == len(runs)
    return time.perf_counter() - t


def disk_reads(folder: Path) -> int | None:
    """The reads the block device that holds `folder` has completed (/proc/diskstats); None where that cannot be
    told (not Linux, a file system on no block device of its own: tmpfs, overlay)."""
    dev = os.stat(folder).st_dev
    try:
        for line in Path("/proc/diskstats").read_text().splitlines():
            fields = line.split()
            if (int(fields[0]), int(fields[1])) == (os.major(dev), os.minor(dev)):
                return int(fields[3])
    except (OSError, ValueError, IndexError):
        return None
    return None


def counted(reads: dict[str, list[int]], label: str, folder: Path, timed: Callable[[], float]) -> float:
    """`timed()`, its disk reads (disk_reads) kept under `label` where they can be told."""
    before = disk_reads(folder)
    took = timed()
    after = disk_reads(folder)
    if before is not None and after is not None:
        reads[label].append(after - before)
    return took


def drop_caches() -> bool:
    """Drop the kernel's page, dentry and inode caches (root only); False where this machine does not allow it."""
    try:
        subprocess.run(["sync"], check=True)
        Path("/proc/sys/vm/drop_caches").write_text("3\n")
        return True
    except OSError:
        return False


ENV = dict(os.environ)
"""The timed commands' environment: `installed` makes it an installed package's (its bytecode compiled once)."""


def installed(tmp: Path) -> None:
    """Time the commands as an installed zbpscale runs: its modules' bytecode written once (under `tmp`, not in the
    source tree) and read after, where PYTHONDONTWRITEBYTECODE (some containers set it) would have every command
    compile every module again (a fifth of a second of status's start-up on a slow core)."""
    ENV.pop("PYTHONDONTWRITEBYTECODE", None)
    ENV["PYTHONPYCACHEPREFIX"] = str(tmp / "pycache")


def timed_status(folder: Path, *extra: str) -> tuple[float, str]:
    """(seconds, stdout) of `zbpscale status DIR *extra` (or a sweep file) in a fresh process."""
    t = time.perf_counter()
    out = subprocess.run([sys.executable, "-m", "zbpscale.cli", "status", str(folder), *extra], capture_output=True,
                         text=True, check=False, env=ENV)
    return time.perf_counter() - t, out.stdout


def timed_on_terminal(folder: Path) -> tuple[float, str]:
    """(seconds, what it drew) of `zbpscale status DIR` writing to a terminal (a pseudo-terminal 120 columns wide, in
    color): the boxed table people see, where a pipe gets plain lines."""
    import pty

    main_fd, tty = pty.openpty()
    env = {**ENV, "COLUMNS": "120", "FORCE_COLOR": "1"}
    t = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "zbpscale.cli", "status", str(folder)], stdout=tty,
                            stderr=subprocess.DEVNULL, env=env)
    os.close(tty)
    drawn = []
    while True:
        try:
            chunk = os.read(main_fd, 1 << 16)
        except OSError:  # EIO: the terminal's other end closed
            break
        if not chunk:
            break
        drawn.append(chunk)
    proc.wait()
    took = time.perf_counter() - t
    os.close(main_fd)
    return took, b"".join(drawn).decode(errors="replace")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=100)
    p.add_argument("--records", type=int, default=5000, help="train records per run")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--cold", action="store_true", help="also time status after dropping the kernel's caches (root)")
    p.add_argument("--tail", type=int, default=20, choices=range(21), metavar="0-20",
                   help="records each trainer wrote after its latest heartbeat (default 20: killed mid-run; 0: none, "
                        "as a trainer that ends leaves it)")
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="zbpscale-bench-status-") as tmp:
        folder = Path(tmp) / "jobs" / "ladder"
        t = time.perf_counter()
        build(folder, args.runs, args.records, tail=args.tail)
        print(f"built {args.runs} run folders in {time.perf_counter() - t:.0f} s", file=sys.stderr)
        size_mb = sum(f.stat().st_size for f in folder.rglob("*") if f.is_file()) / 1e6
        sweep = sweep_file(folder, args.runs)
        installed(Path(tmp))
        for extra in ([], ["--goodput"]):  # untimed: the bytecode written, as an installed package has it
            timed_status(folder, *extra)
        labels = ("zbpscale status DIR", "zbpscale status DIR --json", "zbpscale status DIR --goodput",
                  "zbpscale status DIR, on a terminal",
                  "zbpscale status SWEEP_FILE", "rows in process", "the files alone, read, not decoded",
                  "zbpscale status DIR, no digests", "rows in process, no digests", "rows in process, no index",
                  "status --goodput --json", "status --goodput --json, no index")
        times: dict[str, list[float]] = {label: [] for label in labels}
        reads: dict[str, list[int]] = collections.defaultdict(list)  # disk reads of the runs with caches dropped
        cold = args.cold and drop_caches()  # root, and a kernel that allows it
        if cold:
            times["zbpscale status DIR, caches dropped"] = []
            times["the files alone, caches dropped"] = []
            times["the files alone, caches dropped, one process"] = []
            times["zbpscale status DIR, no digests, caches dropped"] = []
        for _ in range(args.rounds):
            for label, extra in zip(labels[:3], ([], ["--json"], ["--goodput"])):
                times[label].append(timed_status(folder, *extra)[0])
            times["zbpscale status SWEEP_FILE"].append(timed_status(sweep)[0])
            took, drawn = timed_on_terminal(folder)
            times["zbpscale status DIR, on a terminal"].append(took)
            assert drawn.count("│") > args.runs, "no boxed table on the terminal"
            if cold:
                for label, timed in (("zbpscale status DIR, caches dropped", lambda: timed_status(folder)[0]),
                                     ("the files alone, caches dropped", lambda: reads_alone(folder)),
                                     ("the files alone, caches dropped, one process",
                                      lambda: reads_alone(folder, alone=True))):
                    drop_caches()
                    times[label].append(counted(reads, label, folder, timed))
            t = time.perf_counter()
            rows = collect_rows(folder)
            times["rows in process"].append(time.perf_counter() - t)
            times["the files alone, read, not decoded"].append(reads_alone(folder))
            took, accounted = timed_status(folder, "--goodput", "--json")
            times["status --goodput --json"].append(took)
        assert len(rows) == args.runs
        planned = json.loads(timed_status(sweep, "--json")[1])[folder.name]
        assert sum(r["state"] != "new" for r in planned) == args.runs, "the sweep file does not find the runs"
        RunFolder(folder / run_name(0)).looks.unlink()  # the digests are a cache: the same rows without them
        for _ in range(args.rounds):
            times["zbpscale status DIR, no digests"].append(timed_status(folder)[0])
            if cold:
                label = "zbpscale status DIR, no digests, caches dropped"
                drop_caches()
                times[label].append(counted(reads, label, folder, lambda: timed_status(folder)[0]))
            t = time.perf_counter()
            undigested = collect_rows(folder)
            times["rows in process, no digests"].append(time.perf_counter() - t)
        for beat in folder.glob("*/heartbeat.json"):  # the index is a cache: the same rows without it
            beat.write_text(json.dumps({k: v for k, v in json.loads(beat.read_text()).items() if k != "glance"}))
        for _ in range(args.rounds):
            t = time.perf_counter()
            without = collect_rows(folder)
            times["rows in process, no index"].append(time.perf_counter() - t)
            took, unindexed = timed_status(folder, "--goodput", "--json")
            times["status --goodput --json, no index"].append(took)
        assert unindexed == accounted, "goodput differs without the heartbeats' index"

        def aged(rs: list[dict]) -> list[dict]:
            return [{k: v for k, v in r.items() if k != "heartbeat_age_s"} for r in rs]

        assert aged(undigested) == aged(rows), "the rows differ without the digests"
        assert aged(without) == aged(rows), "the rows differ without the heartbeats' index"
    print(f"{args.runs} runs, {size_mb:.0f} MB of run folders, {args.tail} records after each heartbeat; median of "
          f"{args.rounds} rounds")
    for label, ts in times.items():
        if ts:
            print(f"  {label:<48} {statistics.median(ts):6.3f} s")
    if reads:  # what the cold times are made of: reads of the disk, and how many it serves a second
        print("disk reads with the caches dropped (/proc/diskstats; the rate: reads / median seconds)")
        for label, counts in reads.items():
            n = statistics.median(counts)
            print(f"  {label:<48} {n / args.runs:6.2f} a run, {n / statistics.median(times[label]):8.0f} a second")
    return 0


if __name__ == "__main__":
    sys.exit(main())
