"""The run folder: where every file of a run lives, and what a run is called. Torch-free.

`RunFolder(run_dir).<file>` is the only way zbpscale names a file of a run (the trainer, both executors, submit,
status, cancel and collect); no other module spells a file name (tests/test_layout.py greps for them).

    <run_dir>/config.json      the resolved TrainConfig (written by submit or the trainer, checked on resume)
              plan.json        parameters, GPUs and planned GPU-hours (submit; read by status)
              metrics.jsonl    the trainer's records (run/records.py: one record type per kind)
              heartbeat.json   step, tokens, time, host, pid, pid_start, rewritten every few seconds
              attempts.jsonl   one event per line: submitted | start | end (run/history.py)
              checkpoints/     ckpt_<8-digit step>.pt, written atomically, the newest K kept
              logs/            the executor's own stdout/stderr files (`job_log`: <job>_<rank>.log, <job>_0_log.out)
              .trainer.lock    flock held by the live trainer (rank 0) for its whole life: one writer per folder,
              .trainer.lease   with the lease that holds across nodes (lease.py: who holds it, renewed as it steps)
              .ranks/<r>.json  each rank's last step and liveness stamp (the hang watchdog, train/watchdog.py)
              COMPLETE         the trainer finished every step
              CANCEL           `zbpscale cancel` asked the job to stop; the next checkpoint ends it
              .snapshot.json   a look at these files kept here by releases before 2026-12-07 (a cache; the next
                               event's writer removes it: the looks are kept in the sweep folder's file now)
    <sweep folder>/.looks.jsonl  the looks the writers of attempts.jsonl keep, a line a run (run/looks.py): what a
                               look made of a run's files, named by their inodes, sizes and times
                               (run/snapshot.py; a cache status reads)

Run names are `{size}-{arm}` plus `-s{seed}` for seeds other than 0 (`run_name`, read back by
`parse_run_name`); a learning-rate tuning run has `-lr{lr}` before the seed (`s60-zbp_n16-lr3e-3-s1`); sizes and
arms never contain '-'.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Container
from dataclasses import dataclass
from pathlib import Path

from zbpscale.cached import cached
from zbpscale.errors import BrokenRunFolder
from zbpscale.files import loads, read_bytes
from zbpscale.lease import Rule, lease_path, try_lock

_NAME = re.compile(r"(?P<size>[^-]+)-(?P<arm>[^-]+)(?:-lr(?P<lr>\d[\d.]*(?:e-?\d+)?))?(?:-s(?P<seed>\d+))?")
_CKPT = re.compile(r"ckpt_(\d{8})\.pt")


LOOKS = ".looks.jsonl"
"""A sweep folder's file of the looks kept of its runs (run/looks.py): each run's `RunFolder.looks`."""

_SEGMENT = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]*")


def segment_problem(name) -> str | None:
    """Why `name` cannot be a name that becomes a folder under the jobs root and a scheduler's job name (a sweep,
    an arm, a size), or None: it must be one path segment of letters, digits, '.', '_' and '-' that starts with a
    letter, a digit or '_' (no '/', no '..', no space, nothing a shell or scancel would read as an option)."""
    if not isinstance(name, str) or not name:
        return f"must be a non-empty name, got {name!r}"
    if not _SEGMENT.fullmatch(name):
        return (f"must be one folder name of letters, digits, '.', '_' and '-', not starting with '.' or '-', "
                f"got {name!r}")
    if len(name) > MAX_NAME:
        return f"must be at most {MAX_NAME} characters (a run's folder name joins a size's and an arm's), got " \
               f"{len(name)}"
    return None


MAX_NAME = 100
"""The longest name of a sweep, size or arm: a run's folder name is `<size>-<arm>-lr<lr>-s<seed>`, and a file
system's names are at most 255 bytes."""


def job_log(logs: Path, job: str, rank: int = 0, *, submitit: bool = False) -> Path:
    """A job's log in an executor's log folder: the local queue's `<job>_<rank>.log`, submitit's
    `<job>_<rank>_log.out` (its stderr beside it, `_log.err`)."""
    return Path(logs) / (f"{job}_{rank}_log.out" if submitit else f"{job}_{rank}.log")


def run_name(size: str, arm: str, seed: int = 0) -> str:
    """The run of `arm` at `size` with `seed`: 's60-bp', 's60-zbp_n16-s1'."""
    return f"{size}-{arm}" + (f"-s{seed}" if seed else "")


def parse_run_name(name: str) -> tuple[str, str, int] | None:
    """(size, arm, seed) of a run name, or None if it is not one."""
    m = _NAME.fullmatch(name)
    return (m["size"], m["arm"], int(m["seed"] or 0)) if m else None


@dataclass(frozen=True)
class RunFolder:
    """Where every file of one run lives (submitit's JobPaths, for a run)."""

    path: Path

    def __post_init__(self) -> None:
        if not isinstance(self.path, Path):  # a Path made again is parsed again: 5 us, 3 times a run in status
            object.__setattr__(self, "path", Path(self.path))

    config = cached(lambda self: self.path / "config.json")
    plan = cached(lambda self: self.path / "plan.json")
    metrics = cached(lambda self: self.path / "metrics.jsonl")
    heartbeat = cached(lambda self: self.path / "heartbeat.json")
    attempts = cached(lambda self: self.path / "attempts.jsonl")
    checkpoints = cached(lambda self: self.path / "checkpoints")
    logs = cached(lambda self: self.path / "logs")
    complete = cached(lambda self: self.path / "COMPLETE")
    digest = cached(lambda self: self.path / ".snapshot.json")  # a look kept here by releases before 2026-12-07
    looks = cached(lambda self: self.path.parent / LOOKS)  # its sweep folder's kept looks (run/looks.py)
    cancel = cached(lambda self: self.path / "CANCEL")
    trainer_lock = cached(lambda self: self.path / ".trainer.lock")
    trainer_lease = cached(lambda self: lease_path(self.trainer_lock))
    ranks = cached(lambda self: self.path / ".ranks")
    trackers = cached(lambda self: self.path / "trackers.json")  # what trackers keep across attempts (W&B id)
    tensorboard = cached(lambda self: self.path / "tensorboard")  # TensorBoard's event files
    wandb = cached(lambda self: self.path / "wandb")  # W&B's folder (offline runs: offline-run-*)

    RECORDS = ("metrics", "config", "attempts", "heartbeat", "complete")
    """The run's small files, by attribute: what `zbpscale collect` copies into a results bundle."""

    MARKS = ("config", "metrics", "attempts")
    """The files, by attribute, any one of which makes a folder a run's: its config, metrics or attempts."""

    @classmethod
    def is_run(cls, path: str | Path) -> bool:
        """Whether a folder is a run's (MARKS): the one rule of every command that looks for runs."""
        return any(os.path.exists(os.path.join(path, name)) for name in cls._MARK_NAMES)

    @classmethod
    def all_in(cls, folder: Path, *, but: Container[str] = (), checked: bool = True) -> list[Path]:
        """The run folders in `folder` (a sweep's), by name, but those named in `but`; one scan of the folder, a
        file test or two for each entry in it ([] when `folder` is no folder). `checked=False`: every folder in
        it, as the scan tells their types, none tested (status tests each in the process that reads it:
        run/snapshot.py's `Snapshot.is_run`; a cold folder of 10,000 runs took 0.75 s to test here)."""
        try:  # iterdir makes each path without parsing it again (10,000 runs: 3.4 -> 0.5 us a path)
            children = {p.name: p for p in Path(folder).iterdir()}
            if not checked:
                with os.scandir(folder) as entries:
                    folders = {e.name for e in entries if e.is_dir()}
        except (FileNotFoundError, NotADirectoryError):
            return []
        return [children[n] for n in sorted(children)
                if n not in but and (cls.is_run(children[n]) if checked else n in folders)]

    @property
    def name(self) -> str:
        return self.path.name

    def checkpoint(self, step: int) -> Path:
        """The checkpoint of `step` (the number of optimizer steps done)."""
        return self.checkpoints / f"ckpt_{step:08d}.pt"

    def list_checkpoints(self) -> list[tuple[int, Path]]:
        """(step, path) of the run's finished checkpoints, oldest first (a temp file is never one)."""
        if not self.checkpoints.is_dir():
            return []
        return sorted((int(m.group(1)), p) for p in self.checkpoints.iterdir() if (m := _CKPT.fullmatch(p.name)))

    def rank_file(self, rank: int) -> Path:
        """Rank `rank`'s liveness stamp (the hang watchdog)."""
        return self.ranks / f"{rank}.json"

    def rank_files(self) -> list[Path]:
        """Every rank's liveness stamp, by rank."""
        found = self.ranks.glob("*.json") if self.ranks.is_dir() else []
        return sorted((p for p in found if p.stem.isdigit()), key=lambda p: int(p.stem))

    def log_path(self, submitted: dict, job: str) -> Path:
        """The job's log file (the local queue's `<job>_0.log`, submitit's `<job>_0_log.out`), else its folder;
        `submitted`: the run's latest submitted event, which names the executor's log folder."""
        logs = self.here(submitted["logs"]) if submitted.get("logs") else self.logs
        out = job_log(logs, job, submitit=True)
        for path in (job_log(logs, job), out, out.with_name(out.name[:-4] + ".err")):
            if path.exists():
                return path
        found = sorted((p for p in logs.glob(f"{job}_*") if p.suffix in (".log", ".out", ".err")),
                       key=lambda p: p.stat().st_mtime) if logs.is_dir() else []  # a log, never submitit's pickle
        return found[-1] if found else logs

    def here(self, recorded: str | Path) -> Path:
        """A path recorded in the run's files (a log in attempts.jsonl), where it is now: one that lay in its sweep's
        folder (the run's own, a SLURM array's logs beside the runs) when the study was elsewhere (moved, or copied)
        is taken in that folder where it is now, absolute as recorded; others as recorded."""
        sweep = self.path.absolute().parent
        parts = Path(recorded).parts
        mine = (sweep.parent.name, sweep.name)  # <jobs root>/<sweep>: the tail of any path the sweep's folder had
        at = next((i for i in range(len(parts) - 1, 0, -1) if parts[i - 1:i + 1] == mine), None)
        return Path(recorded) if at is None else sweep.joinpath(*parts[at + 1:])

    def lock(self, *, stale_after_s: float | None = None, gone: Rule | None = None):
        """Take the trainer lock (lease.try_lock): one trainer per run folder, on every node. (Lock, "") or
        (None, who holds it); `stale_after_s`, `gone`: when another trainer's lease counts as gone (lease.judge)."""
        return try_lock(self.trainer_lock, stale_after_s=stale_after_s, gone=gone)

    def read_config(self) -> dict | None:
        """The run's config.json as a dict, None when there is none; a `BrokenRunFolder` when it cannot be
        read as a JSON object (the run cannot go on until it is fixed or moved aside)."""
        try:
            data = read_bytes(self.config)
        except FileNotFoundError:
            return None
        except NotADirectoryError:  # `train --run-dir sweep.py`: it said to check the file's permissions
            file = next((p for p in (self.path, *self.path.parents) if p.is_file()), self.path)
            raise BrokenRunFolder(f"{file} is a file, not a folder",
                                  hint="a run is a folder (made if it does not exist): give another path") from None
        except OSError as err:
            raise BrokenRunFolder(f"{self.config} cannot be read ({err.strerror})",
                                  hint="check the file's permissions") from None
        try:
            config = loads(data)
        except (json.JSONDecodeError, UnicodeDecodeError) as err:
            where = f"line {err.lineno}: {err.msg}" if isinstance(err, json.JSONDecodeError) else "not UTF-8"
            raise BrokenRunFolder(f"{self.config} is not valid JSON ({where})",
                                  hint="restore it, or move the run folder aside to start the run anew") from None
        if not isinstance(config, dict):
            raise BrokenRunFolder(f"{self.config} holds a {type(config).__name__}, not a config object",
                                  hint="restore it, or move the run folder aside to start the run anew")
        return config


RunFolder._MARK_NAMES = tuple(getattr(RunFolder(Path(".")), f).name for f in RunFolder.MARKS)
"""The file names of MARKS (RunFolder.is_run tests each)."""
