"""Experiment trackers: the trainer's records, as metrics.jsonl gets them, handed on to TensorBoard, W&B or any
other tracker (rank 0 only). metrics.jsonl stays the source of truth; a tracker is a view of it.

The seam is `Trackers`: MetricsLog passes it every record it writes, the loop asks it to flush at each checkpoint
and to close at the end of the attempt. A tracker that raises (not installed, a full disk in its folder, a dead
network) is turned off for the rest of the attempt with one line in the log and a note in heartbeat.json (which
`zbpscale status` shows); training goes on and metrics.jsonl is complete.

A tracker is one class: a subclass of `Tracker` with a `name` is a value `TrainConfig.trackers` (and
`Sweep.trackers`) accepts. It gets the run (`TrackedRun`) and what it kept in an earlier attempt when an attempt
starts, each step's scalars and notes, `flush()` after a checkpoint and `close()`.

One tracker run per run, each step once, whatever kills an attempt: trackers.json in the run folder holds, per
tracker, what it keeps across attempts (W&B's run id) and `through`, the last step it made durable (at a flush or
at the end of an attempt). An attempt hands each tracker the steps of metrics.jsonl after its `through` (what a
kill lost in the tracker but the checkpoint kept), then its own. TensorBoard hides what an earlier attempt wrote
past `through` (`purge_step`); W&B resumes its run (`resume="allow"`). A tracker whose own files can say more than
`through` (W&B's offline folders that killed attempts of earlier releases left in the run) says it when it opens
(`holds_through`), and is sent only the steps after that.

Nothing is written once the trainer has lost its run folder (its lease, train/loop.py): the training thread's calls
come through MetricsLog, which asks the lease first; a tracker's own thread asks `TrackedRun.may_write`; a tracker
whose writer is another process (W&B's wandb-core) writes outside the run folder and moves what it wrote in under
the lease (`WandB._land`).

Torch-free at import: each tracker imports its package when an attempt opens it.
"""

from __future__ import annotations

import itertools
import json
import logging
import os
import queue
import secrets
import shutil
import socket
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, ClassVar

from zbpscale.errors import LeaseLost
from zbpscale.files import atomic_write, read_json
from zbpscale.run.config import TRACKERS
from zbpscale.run.folder import RunFolder
from zbpscale.run.history import History
from zbpscale.run.records import STEP_KINDS, attempts_of

INSTALL_HINT = "pip install 'zbpscale[trackers]'"


@dataclass(frozen=True)
class TrackedRun:
    """What a tracker knows of the run when an attempt opens it."""

    run_dir: Path
    name: str
    """The run's name (its folder's name): the tracker run's display name."""
    sweep: str
    """The sweep's name (the run folder's parent folder): W&B's project and group."""
    config: dict
    """The resolved TrainConfig (TrainConfig.to_dict), with the code version under `code`."""
    may_write: Callable[[], bool] = lambda: True
    """Whether this process still holds the run folder (the trainer's lease): a tracker that writes from a thread of
    its own asks before each write; the training thread's calls are asked for already (MetricsLog's guard)."""


class Tracker:
    """One experiment tracker (a subclass with a `name` is one; see TensorBoard and WandB below)."""

    name: ClassVar[str] = ""
    rewrites: ClassVar[bool] = False
    """True: it can hide what it showed from a step on (TensorBoard's purge_step), so that the steps an attempt
    redoes after a resume are shown with their new values. False (W&B): a step it holds is not sent again (a
    resumed run redoes it bit for bit: docs/reproducibility.md "What bit for bit means")."""
    known: ClassVar[dict[str, type["Tracker"] | None]] = TRACKERS
    """Every tracker by name, the one registry a config is checked against (run/config.py's TRACKERS): a subclass
    with a name registers itself."""

    def __init_subclass__(cls, **kwargs) -> None:
        super().__init_subclass__(**kwargs)
        if cls.name:
            Tracker.known[cls.name] = cls

    @classmethod
    def holds_through(cls, run: TrackedRun, kept: dict) -> int:
        """The last step this tracker holds from earlier attempts as far as its own files tell (-1: they tell
        nothing), asked when an attempt opens it: an attempt killed between flushes may have left more than
        trackers.json's `through` says (W&B's offline folders, up to the release that moved them into the run only
        once finished). `kept`: what it kept (`self.keep`)."""
        return -1

    def __init__(self, run: TrackedRun, first_step: int, kept: dict) -> None:
        """Open the tracker for an attempt of `run`; it will be given every step from `first_step` on (it holds the
        earlier ones); `kept`: what it kept in an earlier attempt (`self.keep`), {} at first."""
        self.run, self.first_step = run, first_step
        self.keep: dict = {}
        """What this tracker keeps for the run's later attempts (trackers.json)."""

    def log(self, step: int, scalars: dict[str, float]) -> None:
        """Scalars of optimizer step `step` (0-based, as in metrics.jsonl); one step may come in several calls."""
        raise NotImplementedError

    def note(self, step: int, tag: str, text: str) -> None:
        """A line of text at `step` (the estimator path in use, how an attempt ended)."""

    def flush(self) -> bool:
        """Make what was logged durable (a checkpoint was just written); False when the tracker skips this one."""
        return True

    def close(self) -> None:
        """The attempt ends: make what was logged durable and let go."""


# ---------------------------------------------------------------------------------------- records -> scalars
def scalars_of(kind: str, record: dict) -> dict[str, float]:
    """The scalars a tracker shows for one metrics.jsonl record (train, eval and diag records; {} for others)."""
    if kind == "train":
        return {f"train/{k}": record[k] for k in ("loss", "lr", "grad_norm", "tokens_per_s", "step_time", "tokens")
                if record.get(k) is not None}
    if kind == "eval":
        return {"val/loss": record["val_loss"], "val/tokens": record["tokens"]}
    if kind != "diag":
        return {}
    found = {"diag/grad_cosine": record["grad_cosine"]} if record.get("grad_cosine") is not None else {}
    for b in record.get("blocks", []):
        found[f"rho_fwd/L{b['layer']}.{b['branch']}"] = b["fwd_gain"]
        found[f"rho_bwd/L{b['layer']}.{b['branch']}"] = b["bwd_gain"]
    for c in record.get("cores", []):
        found[f"c/L{c['layer']}.{c['core']}"] = c["c"]
        found[f"nsr/L{c['layer']}.{c['core']}"] = c["nsr"]
    return found


def notes_of(kind: str, record: dict) -> dict[str, str]:
    """The text a tracker shows for one record: the estimator path at the start of an attempt, how it ended."""
    if kind == "start":
        used = record.get("impl_used") or {}
        path = ", ".join(f"{core} {impl}" for core, impl in used.items()) or "exact backprop (bp arm)"
        return {"estimator_path": f"attempt {record.get('attempt')}: {path}"}
    if kind == "end":
        return {"attempt_end": f"{record.get('why')}: {record.get('reason', '')}"}
    return {}


def unwritten_end(earlier: list[dict], run_dir: Path) -> dict | None:
    """The end record the attempt before this one could not write (killed: kill -9, the OOM killer, a lost node),
    for the trackers: in the words the job layer recorded for it in attempts.jsonl (its `why` and reason), else
    "crashed" with no record; None when the last attempt wrote its end (or there was none)."""
    attempts = attempts_of(earlier)
    if not attempts or any(r.get("kind") == "end" for r in attempts[-1]):
        return None
    said = (History.read(run_dir).ends_since(None, attempts[-1][0].get("time", 0)) or [{}])[-1]
    return {"kind": "end", "why": said.get("why", "crashed"),
            "reason": said.get("reason") or "killed before it wrote an end record (kill -9, the OOM killer, a lost "
                                            "node); resumed from its last checkpoint"}


# ---------------------------------------------------------------------------------------- the seam
class Trackers:
    """The trackers of one attempt (rank 0): every record in, failures contained, each step once."""

    def __init__(self, names: tuple[str, ...], run: TrackedRun, start: int, earlier: list[dict]) -> None:
        """Open `names` for an attempt of `run` that starts at step `start`; `earlier`: the run's records before it
        (metrics.jsonl after the rollback), from which a tracker gets the steps it does not hold yet."""
        self.run, self.live, self.last = run, [], -1
        self.off: list[str] = []
        """One line per tracker turned off in this attempt, for heartbeat.json and `zbpscale status`."""
        self.path = RunFolder(run.run_dir).trackers
        saved = read_json(self.path) if self.path.exists() else {}
        self.saved: dict[str, dict] = saved if isinstance(saved, dict) else {}
        self.through: dict[str, int] = {}
        for name in names:
            kept, cls = dict(self.saved.get(name, {})), Tracker.known[name]
            through = kept.pop("through", -1)
            try:
                through = max(through, cls.holds_through(run, kept))
                if cls.rewrites:  # what it holds from `start` on is redone now: hidden, given again
                    through = min(through, start - 1)
                tracker = cls(run, through + 1, kept)
            except Exception as err:  # noqa: BLE001 - a tracker never stops training (module docstring)
                self._turn_off(name, err)
                continue
            self.live.append(tracker)
            self.through[name] = through
        self._save()  # what a tracker keeps (W&B's id) is on disk before its first step
        for r in earlier:
            if r.get("kind") in STEP_KINDS:
                self._send(r["kind"], r, only=[t for t in self.live if r["step"] > self.through[t.name]])
        lost = unwritten_end(earlier, run.run_dir)
        if lost is not None:  # the attempt before this one was killed before it could say how it ended: said now
            self._send("end", {**lost, "step": start}, only=list(self.live))

    def record(self, kind: str, record: dict) -> None:
        """Hand one metrics.jsonl record to every live tracker (a step record to those that do not hold it)."""
        step = record.get("step", 0) if kind in STEP_KINDS else None
        self._send(kind, record, only=[t for t in self.live if step is None or step > self.through[t.name]])

    def flush(self) -> None:
        """A checkpoint was written: what the trackers hold is made durable (the steps before it, and no more)."""
        flushed = [t for t in list(self.live) if self._call(t, lambda t: t.flush())]
        if flushed:
            self.through.update({t.name: max(self.through[t.name], self.last) for t in flushed})
            self._save()

    def close(self) -> None:
        """The attempt ends: every tracker holds what it was given."""
        closed = [t for t in list(self.live) if self._call(t, lambda t: (t.close(), True)[1])]
        self.through.update({t.name: max(self.through[t.name], self.last) for t in closed})
        self.live = []
        self._save()

    def _send(self, kind: str, record: dict, only: list[Tracker]) -> None:
        scalars, notes = scalars_of(kind, record), notes_of(kind, record)
        step = record.get("step", 0)
        if kind in STEP_KINDS:
            self.last = max(self.last, step)
        for tracker in only:
            self._call(tracker, lambda t: (t.log(step, scalars) if scalars else None,
                                           [t.note(step, tag, text) for tag, text in notes.items()]))

    def _save(self) -> None:
        for name, through in self.through.items():
            tracker = next((t for t in self.live if t.name == name), None)
            keep = tracker.keep if tracker is not None else {k: v for k, v in self.saved.get(name, {}).items()
                                                              if k != "through"}
            self.saved[name] = {**keep, "through": through}
        try:
            atomic_write(self.path, json.dumps(self.saved, indent=1) + "\n", before_rename=self._may_write)
        except OSError as err:  # a full disk: the trackers may show a step twice after a kill, training goes on
            print(f"trackers: could not write {self.path}: {err}", file=sys.stderr, flush=True)

    def _may_write(self) -> None:
        if not self.run.may_write():
            raise LeaseLost(f"{self.run.run_dir} is another trainer's now: trackers.json is left as it is")

    def _call(self, tracker: Tracker, action) -> bool:
        """action(tracker)'s value; False, and the tracker off for the attempt, when it raises."""
        try:
            return bool(action(tracker))
        except Exception as err:  # noqa: BLE001 - a tracker never stops training
            self.live.remove(tracker)
            self.through.pop(tracker.name, None)  # what it showed past its last flush is not known: kept as was
            self._turn_off(tracker.name, err)
            try:
                tracker.close()
            except Exception:  # noqa: BLE001 - it already failed once: its close is best effort, said above
                pass
            return False

    def _turn_off(self, name: str, err: Exception) -> None:
        hint = f" ({INSTALL_HINT})" if isinstance(err, ImportError) else ""
        line = f"{name}: {type(err).__name__}: {err}{hint}".replace("\n", " ")
        self.off.append(line)
        print(f"tracker {name} is off for the rest of this attempt (training goes on; metrics.jsonl is complete): "
              f"{line}", file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------------------- TensorBoard
class TensorBoard(Tracker):
    """Event files in <run>/tensorboard, one TensorBoard run per run folder: `tensorboard --logdir jobs/<sweep>`.
    A later attempt hides the events earlier ones wrote from its first step on (`purge_step`, as SummaryWriter
    writes it: a SessionLog START at that step): those steps come again.

    Each event is written when it is given, in the training thread, one `write` each, to a new events file per
    attempt (tensorboard's own RecordWriter: length, CRC, event): nothing waits in a buffer or a writer thread, so
    an error (a full disk, an immutable folder) is raised here, to turn the tracker off with one line, and nothing
    is written once the trainer has lost its run folder (SummaryWriter's thread would write its queue whenever it
    woke). `flush()` and `close()` fsync."""

    name = "tensorboard"
    rewrites = True
    files = itertools.count()  # a process may open several attempts within a second (tests, notebooks)

    def __init__(self, run: TrackedRun, first_step: int, kept: dict) -> None:
        super().__init__(run, first_step, kept)
        from tensorboard.compat.proto.event_pb2 import Event, SessionLog
        from tensorboard.summary.writer.record_writer import RecordWriter

        folder = RunFolder(run.run_dir).tensorboard
        earlier = folder.is_dir() and any(folder.iterdir())
        folder.mkdir(parents=True, exist_ok=True)
        name = f"events.out.tfevents.{int(time.time()):010d}.{socket.gethostname()}.{os.getpid()}.{next(self.files)}"
        self.file = open(folder / name, "ab", buffering=0)
        self.records = RecordWriter(self.file)
        self.Event = Event
        self._write(Event(step=first_step if earlier else 0, file_version="brain.Event:2"))
        if earlier:
            self._write(Event(step=first_step, session_log=SessionLog(status=SessionLog.START)))
        else:
            self.note(0, "config", "```\n" + json.dumps(run.config, indent=1) + "\n```")

    def _write(self, event) -> None:
        event.wall_time = time.time()
        self.records.write(event.SerializeToString())

    def log(self, step: int, scalars: dict[str, float]) -> None:
        from tensorboard.compat.proto.summary_pb2 import Summary

        values = [Summary.Value(tag=tag, simple_value=value) for tag, value in scalars.items()]
        self._write(self.Event(step=step, summary=Summary(value=values)))

    def note(self, step: int, tag: str, text: str) -> None:
        from torch.utils.tensorboard.summary import text as text_summary

        self._write(self.Event(step=step, summary=text_summary(tag, text)))

    def flush(self) -> bool:
        os.fsync(self.file.fileno())
        return True

    def close(self) -> None:
        if not self.file.closed:
            os.fsync(self.file.fileno())
            self.file.close()


# ---------------------------------------------------------------------------------------- Weights & Biases
def wandb_mode() -> str | None:
    """W&B's mode for this process: WANDB_MODE when set (None: W&B reads it), else online with WANDB_API_KEY in
    the environment, else offline (a compute node without a key or a network; `zbpscale sync` uploads later)."""
    if os.environ.get("WANDB_MODE"):
        return None
    return "online" if os.environ.get("WANDB_API_KEY") else "offline"


def offline() -> bool:
    """Whether W&B writes this process's runs to offline folders (which `zbpscale sync` uploads)."""
    return (wandb_mode() or os.environ["WANDB_MODE"]) in ("offline", "dryrun")


STAGING = "zbpscale-wandb-"  # W&B's folders of an open run, in the node's temp dir: <STAGING><id>-<pid>-<random>


class WandB(Tracker):
    """One W&B run per zbpscale run for its whole life: the id is made by the first attempt and kept in
    trackers.json; every attempt resumes it (`resume="allow"`). Project: WANDB_PROJECT, else the sweep's name;
    group: the sweep; name: the run; config: the TrainConfig and the code version. W&B reads the API key from the
    environment (or its own login); zbpscale never writes it.

    W&B's `log` costs a few hundred microseconds of Python (1-2% of a 30 ms GPU step): a thread of its own makes the
    calls, in order, while the training thread goes on (it waits on the GPU every step), each only while the run
    folder is still this trainer's (`TrackedRun.may_write`). W&B has no flush: `flush()` finishes the W&B run and
    resumes it (in offline mode a new offline-run folder; `wandb sync` uploads a run's folders in order), at most
    every FLUSH_S.

    W&B's files are written by a process of its own (wandb-core), which buffers and writes when it likes: after a
    freeze of the trainer it may write what it was sent before, and a woken trainer's last call may still reach it.
    So it never writes into the run folder: each W&B run opens in a folder of the node's temp dir (`staging`), and
    a finished one is copied into `<run>/wandb/` and renamed into place while the lease is still this trainer's
    (`_land`). An attempt killed between flushes leaves its W&B folder in the temp dir (removed by the next attempt
    on that node): the next attempt sends the steps after trackers.json's `through` again, so the folders `zbpscale
    sync` uploads hold each step once. Folders of older releases' killed attempts in the run folder are still read
    back (`holds_through`, train/wandb_log.py). Online, the server keeps the run's steps and refuses a step below
    its last one. trackers.json keeps the id and the folders already read (`sealed`)."""

    name = "wandb"
    FLUSH_S = 600.0
    WRITTEN_S = 20.0  # how long a finished run's file may take to be written whole (`_check_written`)

    @classmethod
    def holds_through(cls, run: TrackedRun, kept: dict) -> int:
        from zbpscale.train import wandb_log

        if not kept.get("id") or not offline():
            return -1
        sealed = set(kept.get("sealed", ()))
        found = [wandb_log.last_step(f) for f in wandb_log.folders(run.run_dir, kept["id"]) if f.name not in sealed]
        return max(found, default=-1)

    def __init__(self, run: TrackedRun, first_step: int, kept: dict) -> None:
        super().__init__(run, first_step, kept)
        import wandb

        # W&B logs to a file in its folder through Python's logging; on a full disk every line fails, and logging
        # prints each failure with a traceback (hundreds of lines an attempt). This process is the trainer's: a
        # log line that cannot be written is dropped, as the logging docs advise for production; a failure that
        # matters turns the tracker off in one line (Trackers._call, `_check_written`).
        logging.raiseExceptions = False
        self.wandb = wandb
        self.keep = {"id": kept.get("id") or secrets.token_hex(6)}
        self._seal()  # every folder so far: read by holds_through (or sealed before); this attempt's comes next
        self.offline = offline()
        self.settings = wandb.Settings(console="off", silent=True)
        self.calls: queue.SimpleQueue = queue.SimpleQueue()
        self.row: dict[str, float] = {}  # the scalars of step `row_step`, sent whole when the next step begins
        self.row_step, self.sent = -1, -1  # `sent`: the last step sent to the W&B run now open (-1: none)
        self.error: Exception | None = None
        self.wb = self._open()
        later = f", upload it later with: zbpscale sync {run.run_dir.parent}" if self.offline else ""
        print(f"W&B: run {self.keep['id']} ({wandb_mode() or os.environ['WANDB_MODE']}){later}", flush=True)

    def _open(self):
        """Start (or resume) the W&B run, in a staging folder of this node's temp dir, and the thread that calls it."""
        run = self.run
        self.opened = time.monotonic()
        self._remove_dead_staging()
        self.staging = Path(tempfile.mkdtemp(prefix=f"{STAGING}{self.keep['id']}-{os.getpid()}-"))
        wb = self.wandb.init(id=self.keep["id"], resume="allow", mode=wandb_mode(), dir=str(self.staging),
                             project=os.environ.get("WANDB_PROJECT") or run.sweep, group=run.sweep, name=run.name,
                             config=run.config, settings=self.settings)
        self.folder, self.sent = Path(wb.dir).parent, -1  # <staging>/wandb/offline-run-*/ (wb.dir is its files/)
        self.thread = threading.Thread(target=self._calls, name="zbpscale-wandb", daemon=True)
        self.thread.start()
        return wb

    def _seal(self) -> None:
        """Note every offline folder of the run as read: what they hold is at most `through` from now on."""
        from zbpscale.train import wandb_log

        self.keep["sealed"] = [f.name for f in wandb_log.folders(self.run.run_dir, self.keep["id"])]

    def _calls(self) -> None:
        while (call := self.calls.get()) is not None:
            if self.error is None and self.run.may_write():
                try:
                    call()
                except Exception as err:  # noqa: BLE001 - raised again in the training thread (`_put`)
                    self.error = err

    def _put(self, call) -> None:
        if self.error is not None:
            raise self.error
        self.calls.put(call)

    def _finish(self) -> None:
        """Wait for the calls made so far, then finish the W&B run, check that its folder holds them and move it
        into the run folder."""
        self._send_row()
        self.calls.put(None)
        self.thread.join()
        try:
            if self.error is not None:
                raise self.error
            self.wb.finish()
            self._check_written()
            self._land()
        finally:
            shutil.rmtree(self.staging, ignore_errors=True)

    def _land(self) -> None:
        """Copy the finished W&B folder into `<run>/wandb/` and rename it into place, both while the run folder is
        this trainer's: what wandb-core writes later (into the staging folder) never reaches the run."""
        into = RunFolder(self.run.run_dir).wandb
        name, landing = self.folder.name, into / f".landing-{self.folder.name}"
        if not self.run.may_write():
            raise LeaseLost(f"{self.run.run_dir} is another trainer's now: W&B's folder {name} is not moved into it")
        into.mkdir(parents=True, exist_ok=True)
        dest = next(into / f"{name}{suffix}" for suffix in itertools.chain([""], (f"-{i}" for i in itertools.count(1)))
                    if not (into / f"{name}{suffix}").exists())  # W&B's own naming when a second's name is taken
        shutil.rmtree(landing, ignore_errors=True)
        try:
            shutil.copytree(self.folder, landing, symlinks=True)
            if not self.run.may_write():
                raise LeaseLost(f"{self.run.run_dir} is another trainer's now: W&B's folder {name} is left out")
            os.rename(landing, dest)
        except OSError:  # a full disk: what this folder held is sent again by the next attempt (`through` stays)
            shutil.rmtree(landing, ignore_errors=True)
            raise

    def _remove_dead_staging(self) -> None:
        """The staging folders this node's temp dir still holds for this W&B run from attempts whose process is
        gone (killed between flushes): never moved into the run, their steps are sent again."""
        for folder in Path(tempfile.gettempdir()).glob(f"{STAGING}{self.keep['id']}-*-*"):
            pid = folder.name[len(STAGING) + len(self.keep["id"]) + 1:].split("-")[0]
            try:
                os.kill(int(pid), 0)
            except ProcessLookupError:
                shutil.rmtree(folder, ignore_errors=True)
            except (ValueError, OSError):  # not a pid, or another user's process: left alone
                pass

    def _check_written(self) -> None:
        """Offline, the finished run's folder must be whole (it is moved into the run next, `_land`) and hold the
        last step sent: W&B drops what it cannot write (a full disk) without a word. Raising turns the tracker off
        and keeps trackers.json's `through` where it was; the next attempt sends the rest."""
        from zbpscale.train import wandb_log

        if not self.offline:
            return
        # W&B's writer (the wandb-core process) writes its file in 32 KiB blocks and the last, partial one when it
        # closes the file, which may be after `finish()` returned (seen on a loaded 2-core machine: steps up to 41
        # of 49, the first block): the file is whole once its `exit` record is in it. A full disk never gets there:
        # no wait where there is no room for a block.
        room = shutil.disk_usage(self.folder).free >= 2 * wandb_log.BLOCK
        deadline = time.monotonic() + (self.WRITTEN_S if room else 0.0)
        while True:
            held, whole = wandb_log.written(self.folder)
            if whole or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        if held < self.sent:
            raise OSError(f"W&B wrote steps up to {held} of the {self.sent} sent into {self.folder} (is its disk "
                          "full?); the next attempt sends the rest")

    def log(self, step: int, scalars: dict[str, float]) -> None:
        """A step's scalars come in several records (train, eval, diag); they go to W&B as one row, committed when
        the next step begins (or at a flush): W&B writes a committed row at once, so that a killed attempt's
        folder holds whole steps and the steps before, never a row it was still waiting to complete."""
        if self.row and step != self.row_step:
            self._send_row()
        self.row_step = step
        self.row.update(scalars)

    def _send_row(self) -> None:
        if self.row:
            row, step, self.row = self.row, self.row_step, {}
            self._put(lambda: self.wb.log(row, step=step, commit=True))
            self.sent = step

    def note(self, step: int, tag: str, text: str) -> None:
        self._put(lambda: self.wb.summary.update({tag: text}))

    def flush(self) -> bool:
        if time.monotonic() - self.opened < self.FLUSH_S:
            return False
        self._finish()
        self._seal()
        self.wb = self._open()
        return True

    def close(self) -> None:
        try:
            self._finish()
            self._seal()
        finally:
            _remove_import_temps()


def _remove_import_temps() -> None:
    """Remove the two folders wandb makes in the node's temp dir when it is imported (scratch for media and
    artifacts, which this tracker never logs): the interpreter's exit would remove them, but a trainer leaves by
    os._exit (train/exits.py), and each attempt left two folders on the node. An attempt killed -9 still leaves
    them. Where a release of wandb keeps them elsewhere, nothing is removed (tests/test_trackers.py counts them)."""
    try:
        from wandb.sdk.artifacts.artifact import Artifact
        from wandb.sdk.data_types._private import MEDIA_TMP

        temps = [MEDIA_TMP, Artifact._TMP_DIR]
    except (ImportError, AttributeError):
        return
    for temp in temps:
        try:
            temp.cleanup()  # once: its finalizer and atexit call find nothing left to do
        except (AttributeError, OSError):
            pass
