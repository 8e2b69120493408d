"""One look at a run folder: each of its files read at most once, when first asked for. Torch-free.

status, cancel, collect and submit see a run through a `Snapshot`; the state decision (jobs/state.py) is a pure
function of a snapshot and the scheduler's view of its job. A snapshot holds what the folder said when each file
was read; a later look is a new snapshot (`Snapshot(run_dir)`), never a re-read of this one.

    history      attempts.jsonl (run/history.py; empty where it cannot be read, and `broken` says why)
    config       config.json as written; `train_config` migrated and validated as the trainer would; `broken`
                 says why the trainer would refuse it
    heartbeat    heartbeat.json ({} when there is none)
    plan         plan.json ({} when there is none)
    metrics      metrics.jsonl's bytes, from which `records` (every record), `glance` (what status shows) and
                 `fold` (what goodput reads) are parsed; `own` is the trainer's latest start and end records
    complete     whether COMPLETE is there
    attempts     the account of its attempts (run/account.py: goodput's and status's GPU-hours)
    shown        what status shows of the folder that its files alone say (`shown_of`: steps, losses, GPU-hours...)

The folder's digest (`keep`) is a look kept in its sweep folder's file of looks (run/looks.py: a line a run, the
sweep's read at once): what status and goodput read of a look (its history, plan, step_timeout, attempts, shown and
unread_metrics; its config, heartbeat and glance, of which shown is made, are not kept: a look through the digest
reads them from the files when asked, which the digest's stamps say are as they were), with the inode, size and
modification time of each file it was made from. The writers of attempts.jsonl keep it after each event but a job's
start (`record`): the last write to the folder of a run that has stopped, is queued or has ended. A look asked to
use it (`Snapshot(run_dir, kept=looks)`: status, for 10,000 runs, with its sweep's looks read once; `kept=True`:
read for this run) takes those values while every file is as it names them and the code that made them is this code
(`look_code`), and reads the files otherwise (a live trainer's, a folder changed by hand, a digest of another format
or release, or none): the same values either way (tests/test_snapshot.py). It is a cache: nothing reads it but a
look, nothing migrates it, and a folder without one is read as before (the digest a release before 2026-12-07 kept
in the run folder is not read; the next event's writer removes it). A look another release kept is not read either;
submit keeps one anew for each run it leaves as it is (`keep_missing`: a finished run has no next event).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import hashlib
import importlib
import json
import os
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

from zbpscale.bulk import spread
from zbpscale.cached import cached
from zbpscale.errors import BrokenRunFolder, ConfigError
from zbpscale.files import loads, read_bytes, read_json
from zbpscale.run import history, looks
from zbpscale.run.account import Attempt, account, gpu_hours, gpus_held
from zbpscale.run.config import TrainConfig
from zbpscale.run.divergence import diverged
from zbpscale.run.fold import Fold
from zbpscale.run.folder import RunFolder
from zbpscale.run.glance import Glance, glance_after, glance_of, indexed_tail
from zbpscale.run.history import History
from zbpscale.run.records import Record, records_of

DIGEST_FORMAT = 2
"""The digest's format: one of another format is not read (and the next event's writer replaces it)."""

LOOK_CODE = ("zbpscale.bulk", "zbpscale.cached", "zbpscale.errors", "zbpscale.files", "zbpscale.lease",
             "zbpscale.proc", "zbpscale.run.account", "zbpscale.run.config", "zbpscale.run.divergence",
             "zbpscale.run.fold", "zbpscale.run.folder", "zbpscale.run.formats", "zbpscale.run.glance",
             "zbpscale.run.history", "zbpscale.run.looks", "zbpscale.run.records", "zbpscale.run.snapshot",
             "zbpscale.tables", "zbpscale.text", "zbpscale.zbp.config")
"""The modules a look's values come from (this one's imports, at any depth: tests/test_snapshot.py checks): a
digest names their source (`look_code`), and one made by other code (another release, an edited clone: a config
it validated otherwise, an account it split otherwise) is not read."""


@functools.cache
def look_code() -> str:
    """A hash of LOOK_CODE's source files; "" where one cannot be read (then no digest is written or read)."""
    digest = hashlib.sha256()
    try:
        for name in LOOK_CODE:
            digest.update(Path(importlib.import_module(name).__file__).read_bytes())
    except (OSError, ImportError, TypeError):  # TypeError: a module without a file
        return ""
    return digest.hexdigest()[:16]


STAMPED = ("config", "plan", "attempts", "heartbeat", "metrics", "complete")
"""The files a look reads, by RunFolder attribute: the digest names each as it was when made."""


def stamps(folder: RunFolder) -> list[list[int] | None]:
    """(inode, size, modification time in ns) of each STAMPED file, None for one that is not there. A file zbpscale
    rewrites is replaced (a new inode) and one it appends to grows, so the three say whether it changed."""
    base = os.path.join(folder.path, "")  # joined as text: status stats six files of each of 10,000 runs
    found: list[list[int] | None] = []
    for name in _STAMPED_NAMES:
        try:
            st = os.stat(base + name)
        except (FileNotFoundError, NotADirectoryError):
            found.append(None)
        else:
            found.append([st.st_ino, st.st_size, st.st_mtime_ns])
    return found


_STAMPED_NAMES = tuple(getattr(RunFolder(Path(".")), f).name for f in STAMPED)
_MARKS_AT = tuple(STAMPED.index(mark) for mark in RunFolder.MARKS)
"""Where each of RunFolder.MARKS lies in a look's stamps."""


class Snapshot:
    """A run folder, read once (see the module docstring); `kept`: through its digest where it holds (its sweep's
    looks, run/looks.py's `read` of its parent folder; True: read here)."""

    def __init__(self, run_dir: Path | str, *, kept: bool | looks.Looks = False):
        self.folder = RunFolder(run_dir)
        self._use_digest = kept

    def __repr__(self) -> str:
        return f"Snapshot({str(self.folder.path)!r})"

    @property
    def run_dir(self) -> Path:
        return self.folder.path

    @cached
    def _kept(self) -> dict | None:
        """The values the folder's digest keeps, where it was asked for and names every file as it is now; None
        otherwise (not asked for, none, another format, a file changed since, or bytes that are no digest)."""
        if self._use_digest is False:
            return None
        try:
            parent, name = _placed(self.folder.path)
            sweep = self._use_digest if isinstance(self._use_digest, looks.Looks) else looks.read(parent)
            line = sweep.get(name)
            if line is None:
                return None
            kept = loads(line)
            if not look_code() or not isinstance(kept, dict) or kept.get("format") != DIGEST_FORMAT \
                    or kept.get("code") != look_code():
                return None
            now = self._stamped
            if kept["stamps"] != now or not isinstance(kept["attempts"], list) or not isinstance(kept["shown"], dict):
                return None
            return {"history": History(tuple(kept["events"])), "step_timeout": float(kept["step_timeout"]),
                    "plan": dict(kept["plan"]), "complete": now[STAMPED.index("complete")] is not None,
                    "attempts": kept["attempts"], "unread_metrics": int(kept["unread_metrics"]),
                    "shown": kept["shown"]}
        except (OSError, ValueError, TypeError, KeyError, AttributeError):
            return None

    @cached
    def _stamped(self) -> list[list[int] | None]:
        """`stamps` of the folder, taken once: what says whether its digest holds, and whether it is a run's."""
        return stamps(self.folder)

    @cached
    def is_run(self) -> bool:
        """Whether the folder is a run's (RunFolder.is_run: any of MARKS there), from the stamps this look takes
        (status tests so each of 10,000 folders in the process that reads it, not one after another before)."""
        try:
            stamped = self._stamped
        except OSError:  # a folder that cannot be listed: as RunFolder.is_run tells it
            return RunFolder.is_run(self.run_dir)
        return any(stamped[at] is not None for at in _MARKS_AT)

    @property
    def from_digest(self) -> bool:
        """Whether this look's values come from the folder's digest (asked for, and it holds)."""
        return self._kept is not None

    def digest(self) -> dict:
        """What the folder's digest keeps of this look (see the module docstring; `keep` writes it)."""
        return {"format": DIGEST_FORMAT, "code": look_code(), "events": list(self.history.events),
                "step_timeout": self.step_timeout, "plan": self.plan,
                "attempts": [dataclasses.asdict(a) for a in self.attempts], "unread_metrics": self.unread_metrics,
                "shown": self.shown}

    @cached
    def _history(self) -> tuple[History, str]:
        if self._kept is not None:
            return self._kept["history"], ""
        try:
            return History.read(self.run_dir), ""
        except BrokenRunFolder as err:
            return History(), str(err)

    @property
    def history(self) -> History:
        """attempts.jsonl; an empty history where it cannot be read (`broken` says why)."""
        return self._history[0]

    @cached
    def _config(self) -> tuple[dict | None, str]:
        try:
            return self.folder.read_config(), ""
        except BrokenRunFolder as err:
            return None, str(err)

    @property
    def config(self) -> dict | None:
        """config.json as written; None when there is none or it is not a JSON object (`broken` says)."""
        return self._config[0]

    @cached
    def _train_config(self) -> tuple[TrainConfig | None, str]:
        config, error = self._config
        if config is None:
            return None, error
        try:
            return TrainConfig.from_dict(config, source=str(self.folder.config)), ""
        except ConfigError as err:
            return None, str(BrokenRunFolder(err.args[0], hint="fix it, or move the run folder aside to start anew"))

    @property
    def train_config(self) -> TrainConfig | None:
        """The TrainConfig the trainer would take from config.json (migrated); None without one it would take."""
        return self._train_config[0]

    @property
    def broken(self) -> str:
        """Why the trainer would refuse the run's config.json (not JSON, or not a valid config by its own
        validation), or why its attempts.jsonl cannot be read, with a hint; "" when neither (or there is no config:
        a new run)."""
        return self._config_error or self._history[1]

    @cached
    def _config_error(self) -> str:
        return "" if self._kept is not None else self._train_config[1]

    @cached
    def step_timeout(self) -> float:
        """The run's step_timeout_s (its config, migrated); 0 (no bound) without a config the trainer takes."""
        if self._kept is not None:
            return self._kept["step_timeout"]
        return self.train_config.step_timeout_s if self.train_config is not None else 0.0

    @cached
    def heartbeat(self) -> dict:
        """heartbeat.json ({} when there is none); a time or step that is not a number (a hand edit) left out."""
        beat = read_json(self.folder.heartbeat)
        for key in ("time", "step"):
            if key in beat and (isinstance(beat[key], bool) or not isinstance(beat[key], (int, float))):
                del beat[key]
        return beat

    @cached
    def plan(self) -> dict:
        return self._kept["plan"] if self._kept is not None else read_json(self.folder.plan)

    @cached
    def complete(self) -> bool:
        return self._kept["complete"] if self._kept is not None else self.folder.complete.exists()

    @cached
    def metrics(self) -> bytes:
        """metrics.jsonl's bytes (b"" when there is none)."""
        try:
            return read_bytes(self.folder.metrics)
        except OSError:
            return b""

    @cached
    def records(self) -> list[Record]:
        """Every record of metrics.jsonl, in order (torn lines skipped), as today's types have them."""
        return records_of(self.metrics)

    @cached
    def _tail(self) -> bytes | None:
        """metrics.jsonl's bytes after those the heartbeat's index covers (the records the trainer wrote after its
        latest heartbeat), read once for both the glance and the fold; None where the index does not serve (none,
        one the file no longer matches, the file gone) or the whole file was read already."""
        if "metrics" in self.__dict__:
            return None
        try:
            return indexed_tail(self.folder.metrics, self.heartbeat.get("glance"))
        except OSError:
            return None

    @cached
    def glance(self) -> Glance:
        """What status shows of metrics.jsonl (run/glance.py's Glance): through the heartbeat's index of it, the
        bytes the trainer wrote after its latest heartbeat alone (the whole file without an index, or once read)."""
        if self._tail is not None:
            try:
                return glance_after(self.heartbeat["glance"], self._tail)
            except (TypeError, KeyError, ValueError, AttributeError):
                pass  # an index this release did not write: read the whole file
        return glance_of(self.metrics)

    @cached
    def fold(self) -> Fold:
        """Goodput's fold over metrics.jsonl's records (run/goodput.py): through the heartbeat's index, the records
        the trainer wrote after its latest heartbeat alone (every record without an index, or once read)."""
        if self._tail is not None:  # then the heartbeat's index is a dict
            state = self.heartbeat["glance"].get("fold")
            try:
                fold = Fold(state) if isinstance(state, dict) else None
            except (TypeError, ValueError, AttributeError):
                fold = None  # an index without the fold, or one this release did not write: read the whole file
            if fold is not None:
                for record in records_of(self._tail):
                    fold.feed(record)
                return fold
        return Fold.of(self.records)

    @cached
    def attempts(self) -> list[Attempt]:
        """The account of the run's attempts (run/account.py), oldest first."""
        if self._kept is not None:
            with contextlib.suppress(TypeError):  # else the files say, as they said when it was kept
                return [Attempt(**a) for a in self._kept["attempts"]]
        return account(self.history, self.fold, self.heartbeat)

    @cached
    def unread_metrics(self) -> int:
        """The size of metrics.jsonl where it holds bytes but no record this release reads (garbled, or another file
        in its place: its steps, losses and tokens cannot be shown); 0 where it holds one, or is empty or missing."""
        if self._kept is not None:
            return self._kept["unread_metrics"]
        return 0 if any(self.glance.__dict__.values()) else len(self.metrics)  # read once already to find none

    @cached
    def shown(self) -> dict:
        """What status shows of the folder that its files alone say (`shown_of`): kept in the digest, from which
        status reads it for each of 10,000 runs without the config, heartbeat and metrics it is made of."""
        return self._kept["shown"] if self._kept is not None else shown_of(self)

    @property
    def own(self) -> dict[str, Record]:
        """The trainer's latest `start` and `end` records as the glance keeps them (run/glance.py's `shown`: a start
        record's config holds only its device; {} for each it has not written)."""
        seen = self.glance
        return {k: r for k, r in (("start", seen.start), ("end", seen.end)) if r}


def shown_of(look: Snapshot) -> dict:
    """What status shows of a run folder that its files alone say, in plain JSON types (jobs/status.py's `run_row`
    adds what its history, its job and its state say): its steps and the step it reached, its latest losses and
    speed, its parameters, its GPU-hours so far and planned, the ZBP paths its trainer used, the trackers it turned
    off, whether it diverged (run/divergence.py), its attempts.jsonl's requeue counts (T/P/F), and the lr its config
    names and the role and lr words its plan gives, each only where they name it; `config`: whether it has a
    config.json."""
    config = look.config or {}
    seen, beat, plan = look.glance, look.heartbeat, look.plan
    start, train = seen.first, seen.train
    derived = start.get("derived", {})
    spike = diverged(seen.steps, config)
    return {
        "steps": config.get("steps") or derived.get("total_steps") or 0,
        "tokens_per_step": derived.get("tokens_per_step") or config.get("global_batch", 0) * config.get("seq_len", 0),
        # steps done: the heartbeat is rewritten every few seconds, the train record every log_every steps; after a
        # hard stop either may be the later one
        "step": max(beat.get("step", 0), train.get("step", -1) + 1), "beat_time": beat.get("time"),
        "train_loss": train.get("loss"), "val_loss": seen.eval.get("val_loss"),
        "tokens_per_s": train.get("tokens_per_s"), "step_time": train.get("step_time"),
        "params": derived.get("params") or plan.get("params"),
        "params_non_embedding": derived.get("params_non_embedding") or plan.get("params_non_embedding"),
        "gpu_hours": gpu_hours(sum(a.held for a in look.attempts), gpus_held(plan, look.own.get("start", {}))),
        "gpu_hours_planned": plan.get("gpu_hours"),
        "impl_used": beat.get("impl_used", start.get("impl_used", {})), "fallbacks": beat.get("fallbacks", []),
        "trackers_off": beat.get("trackers_off", []), "diverged": None if spike is None else dataclasses.asdict(spike),
        "requeues": list(look.history.requeue_counts()),
        "config": look.config is not None, **({"lr": config["lr"]} if "lr" in config else {}),
        **{f"plan_{k}": plan[k] for k in ("role", "lr_from") if k in plan},
    }


def stamped(seen: list[Snapshot], *, threads: int = 4, probe: int = 32, slow_s: float = 1e-4) -> None:
    """Take each look's stamps (`Snapshot._stamped`): in `threads` threads where the first `probe` looks took over
    `slow_s` a look (the kernel's caches cold: each folder a read of the disk, which answers several at once), else
    one after another (warm, threads only contend). Status of 10,000 runs, caches dropped: 3.59 -> 3.28 s."""
    t = time.perf_counter()
    for look in seen[:probe]:
        _stamps_of(look)
    rest = seen[probe:]
    if not rest or time.perf_counter() - t <= slow_s * probe:
        for look in rest:
            _stamps_of(look)
        return
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(threads) as pool:
        for _ in pool.map(lambda k: [_stamps_of(look) for look in rest[k::threads]], range(threads)):
            pass


def _stamps_of(look: Snapshot) -> None:
    with contextlib.suppress(OSError):  # a folder that cannot be read: its look says so when asked
        look._stamped


def through_digests(run_dirs: Iterable[Path], sweeps: dict[str, looks.Looks] | None = None) -> dict[Path, Snapshot]:
    """A look at each run folder through its digest where it holds (`Snapshot(d, kept=...)`), each sweep folder's
    looks read once for all its runs (status of 10,000 runs; `sweeps`: those read so far, by folder, to read no
    sweep's again: status reads them before its processes fork, each of which looks at its runs)."""
    return {run_dir: Snapshot(run_dir, kept=sweep) for run_dir, _, sweep in _with_looks(run_dirs, sweeps)}


def _with_looks(run_dirs: Iterable[Path], sweeps: dict[str, looks.Looks] | None = None
                ) -> Iterator[tuple[Path, str, looks.Looks]]:
    """Each run folder with its name and its sweep folder's looks, each sweep's read once (kept in `sweeps`)."""
    sweeps = {} if sweeps is None else sweeps
    for run_dir in run_dirs:
        parent, name = _placed(run_dir)
        sweep = sweeps.get(parent)
        if sweep is None:
            sweep = sweeps[parent] = looks.read(parent)
        yield run_dir, name, sweep


def _placed(run_dir: Path | str) -> tuple[str, str]:
    """(its sweep folder, its name) of a run folder, as text: a Path's text is made once, where abspath and a
    Path made cost 10 us a run of a 10,000-run status; absolute only for a path that ends in `.` or `..`."""
    text = os.fspath(run_dir)
    if os.path.basename(text) in ("", ".", ".."):
        text = os.path.abspath(text)
    return os.path.dirname(text), os.path.basename(text)


def keep(run_dir: Path | str) -> bool:
    """Write the run folder's digest (see the module docstring) from a look taken now; whether it was written. Not
    written where the look is broken (its words name the folder's path, which may move) or where a file changed
    while it was read (a live trainer: its digest would be stale at once)."""
    folder = RunFolder(run_dir)
    before = stamps(folder)
    look = Snapshot(folder.path)
    if not look_code() or look.broken:  # before the rest of the look is taken: none would be kept
        return False
    digest = look.digest()
    if stamps(folder) != before:
        return False
    looks.append(folder.path, json.dumps({**digest, "stamps": before}).encode())  # a cache: no fsync
    with contextlib.suppress(FileNotFoundError):
        os.unlink(folder.digest)  # a release before's, in the run folder: not read
    return True


def keep_missing(run_dirs: Iterable[Path], *, say: Callable[[int], None] = lambda count: None) -> int:
    """Keep a look at each run folder (`keep`) whose sweep's looks hold none made by this code: a run whose latest
    event a release before kept (its look names other code, and is not read), or none kept (a run of a release
    before the looks, or moved in by hand). How many were kept. What submit does for the runs it leaves as they are,
    so that status reads each such run's files once more at most: after an upgrade, until its next event (which a
    finished run never has), it read them at every status. Only the line's code is checked (a byte search, 10,000
    runs in 0.1 s): a line of this code whose files changed since belongs to a live trainer, whose look would be
    stale at once. `say(count)` before the work, where there is any (10,000 runs: 11 s on 2 cores, once)."""
    code = look_code()
    if not code:
        return 0
    mark = b'"code": "%s"' % code.encode()  # as keep's json.dumps writes it
    stale = [run_dir for run_dir, name, sweep in _with_looks(run_dirs)
             if (line := sweep.get(name)) is None or mark not in line]
    if stale:
        say(len(stale))
    return sum(spread(lambda part: [try_keep(run_dir) for run_dir in part], stale, least=50))


def record(run_dir: Path, event: str, **fields) -> None:
    """history.record (an event appended to attempts.jsonl), then the folder's digest kept: every writer of the
    attempts record writes through here, the last writer of a folder whose trainer has stopped. Not after a `start`:
    the trainer it announces writes at once (the digest would be stale before it was read, and the look cost the
    job's start a read of metrics.jsonl). A digest that cannot be written (a full disk, a look that raises) is no
    error of the event's: a look reads the files."""
    history.record(run_dir, event, **fields)
    if event != "start":
        try_keep(run_dir)


def try_keep(run_dir: Path) -> bool:
    """`keep`, and False where it raises (a full disk, a folder whose files a look cannot make values of: a hand
    edit): the digest is a cache, and its writers' work, the record that matters, is done."""
    try:
        return keep(run_dir)
    except Exception:  # noqa: BLE001 - see the docstring
        return False
