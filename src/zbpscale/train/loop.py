"""Training of one run: `train(cfg, run_dir)` (its command, `python -m zbpscale.train`, is in cli.py).

Works alone, under torchrun and inside a submitit job (the distributed environment comes from RANK /
WORLD_SIZE / LOCAL_RANK / MASTER_*; see dist.py). Resume is automatic: a run folder with a checkpoint
continues from it, a finished one is recognised and not retrained. On SIGUSR2 or SIGTERM the handler only
sets a flag; at the next step boundary all ranks agree (one small all-reduce), write one checkpoint and
exit with EXIT_REQUEUE ("checkpointed, please requeue"); the run folder's CANCEL stamp (`zbpscale cancel`, which
needs no scheduler to write it) stops them the same way. A non-finite loss or gradient norm stops the run
before the optimizer update. The trainer knows nothing of SLURM or submitit.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import statistics
import sys
import time
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import torch

from zbpscale import signals
from zbpscale.errors import ConfigError, DataError, LeaseLost, RunFolderBusy, ZbpError
from zbpscale.files import as_json, atomic_write, read_json
from zbpscale.lease import Follower, Lock, Rule
from zbpscale.run.config import RESUME_SAFE, TrainConfig, batch_plan, derived_numbers
from zbpscale.run.folder import RunFolder
from zbpscale.run.formats import changed_fields, migrate
from zbpscale.run.history import Why
from zbpscale.run.records import attempts_of, read_records
from zbpscale.tables import age
from zbpscale.train import checkpoint, dist, hostmem, numerics
from zbpscale.train.metrics import MetricsLog, SetupTimer, redone
from zbpscale.train.model import Transformer
from zbpscale.train.watchdog import Watchdog
from zbpscale.version import git_revision, version

SETUP_S = 600.0  # no phase of a trainer's set-up (restoring a checkpoint, compiling the estimator) runs this long
LEASE_SLACK_S = 120.0  # renewal period, the watchdog's own period and last words (scontrol requeue), clock skew
PRINT_EVERY_S = 60.0  # a progress line at most this often (and at every evaluation): quiet in 24 h logs
CANCEL_LOOK_S = 1.0  # rank 0 looks for the run folder's CANCEL stamp at most this often
SAVES_KEPT = 100  # the end record's rows of the attempt's latest saves (records.SaveRow); the heartbeat has the last


class TrainingDiverged(ZbpError):
    """The loss or the gradient norm stopped being finite."""


class StoppedBeforeFirstStep(Exception):
    """A stop signal came while the ranks compiled the ZBP estimator (a Ctrl-C also kills the compiler's
    workers): the attempt ends before its start record, with nothing new to checkpoint."""


def lr_at(step: int, cfg: TrainConfig) -> float:
    """Linear warmup to cfg.lr over warmup_steps, then cosine from lr at step warmup_steps down to lr * min_lr_ratio
    at the last step; a run whose warmup leaves it no two steps (warmup_steps >= steps - 1) ends at lr."""
    if step < cfg.warmup_steps:
        return cfg.lr * (step + 1) / cfg.warmup_steps
    min_lr = cfg.lr * cfg.min_lr_ratio
    progress = (step - cfg.warmup_steps) / max(1, cfg.steps - 1 - cfg.warmup_steps)
    return min_lr + 0.5 * (cfg.lr - min_lr) * (1 + math.cos(math.pi * min(1.0, progress)))


def build_optimizer(model: torch.nn.Module, cfg: TrainConfig) -> torch.optim.AdamW:
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        is_table = name.startswith(("wte.", "wpe."))
        (no_decay if (p.dim() < 2 or is_table) and not cfg.decay_norms_and_embeddings else decay).append(p)
    groups = [{"params": decay, "weight_decay": cfg.weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    fused = next(model.parameters()).device.type == "cuda"
    return torch.optim.AdamW(groups, lr=cfg.lr, betas=cfg.betas, fused=fused)


@torch.no_grad()
def evaluate(model: torch.nn.Module, batches: list, env: dist.DistEnv, bf16: bool) -> float:
    """Mean validation loss over the fixed batches, averaged over ranks."""
    model.eval()
    total = 0.0
    for x, y in batches:
        with _autocast(env, bf16):
            total += model(x.to(env.device), y.to(env.device))[1].item()
    model.train()
    return dist.all_reduce_sum([total / len(batches)], env)[0] / env.world_size


def _edited_since(run_dir: Path, cfg: TrainConfig) -> str:
    """What a finished run's config.json says differently from the config its last attempt trained with (its start
    record), in words; "" when nothing was edited."""
    trained = next((r["config"] for r in reversed(read_records(run_dir)) if r["kind"] == "start" and "config" in r),
                   None)
    changed = _changed_since(trained, cfg) if trained else []
    return (f"; its {RunFolder(run_dir).config.name} was edited after it trained ({', '.join(changed)}): the run "
            "trained with the first values, and nothing trains again (train in a new run folder)") if changed else ""


def _autocast(env: dist.DistEnv, bf16: bool):
    return torch.autocast(env.device.type, dtype=torch.bfloat16) if bf16 else nullcontext()


def _check_config(run_dir: Path, cfg: TrainConfig) -> None:
    """Refuse a config that differs from the run's config.json, read in today's format (an older release's file
    is migrated first: the fields it lacks take the values that reproduce that release, run/formats.py)."""
    path = RunFolder(run_dir).config
    saved = RunFolder(run_dir).read_config()
    if saved is None:
        return
    try:
        saved = migrate(saved)
    except ConfigError as err:
        raise ConfigError(f"{path}: {err.args[0]}", hint=err.hint) from None
    current = as_json(cfg.to_dict())
    if saved != current:
        fields = sorted(k for k in set(saved) | set(current) if saved.get(k) != current.get(k))
        raise ConfigError(f"{path} holds a different config (fields differ: {', '.join(fields)})",
                          hint="resume with the same settings, or train in a new run folder")


def train(cfg: TrainConfig, run_dir: str | Path, on_hang: Callable[[str], None] | None = None,
          holder_gone: Rule | None = None) -> Why:
    """Train (or continue) the run in `run_dir`; returns how the attempt ended in the word of its end record
    (run.history.Why): 'completed' or 'checkpointed'. A hang (no step for
    cfg.step_timeout_s) ends the process with EXIT_HUNG after the trainer's end record and, on rank 0,
    `on_hang(reason)` (the job layer's decision: requeue or fail). `holder_gone(holder)`: the job layer's word
    that the trainer whose lease holds the run folder is gone (its job ended), so that this one may take over."""
    run_dir, called = Path(run_dir), time.time()
    signals.install()  # from the start: a stop request during set-up is honoured at the first step
    try:
        env = dist.init(cfg.device)
        if env.device.type == "cpu":
            hostmem.keep_freed_memory()  # a CPU step's large buffers stay for the next step, not faulted in again
        try:
            with _one_writer(run_dir, env, lease_bound(cfg), holder_gone) as lease:
                return _train(cfg, run_dir, env, on_hang, lease, called)
        finally:
            dist.shutdown(env)
    finally:
        signals.restore()


def lease_bound(cfg: TrainConfig) -> float | None:
    """How long another node waits on a silent trainer's lease before it takes the run folder over (None: never
    by age). Rank 0 renews its lease at most every lease.RENEW_S, at each step (and between the phases of its
    set-up), and a trainer that makes no step for step_timeout_s is ended by its own watchdog: a lease older
    than step_timeout_s (or SETUP_S, the longest phase of a set-up) plus LEASE_SLACK_S is a trainer gone. With
    the watchdog off (step_timeout_s 0) nothing bounds a live trainer's silence: only its pid (same node) or
    its job's end (the job layer's holder_gone) frees its lease."""
    return max(cfg.step_timeout_s, SETUP_S) + LEASE_SLACK_S if cfg.step_timeout_s > 0 else None


@contextlib.contextmanager
def _one_writer(run_dir: Path, env: dist.DistEnv, stale_after_s: float | None, gone: Rule | None):
    """Hold the run folder's trainer lock while training: yields rank 0's Lock, and on the other ranks a Follower
    of it (lease.py), which every writer of the trainer asks before it writes (`_renew`). Every rank refuses to
    start, in one line, when another trainer holds it (a duplicate job, a second terminal, a job of the run on
    another node): two trainers must never write one run. A run folder the lock made, left holding nothing else
    (the start refused in its set-up: no data, a shape the data does not fit), is removed with it: status and
    submit would find an empty run folder there."""
    made = env.is_main and not run_dir.exists()
    lock, holder = RunFolder(run_dir).lock(stale_after_s=stale_after_s, gone=gone) if env.is_main else (None, "")
    try:
        busy = dist.all_reduce_sum([0.0 if lock or not env.is_main else 1.0], env)[0]
        if busy:
            lease_file = RunFolder(run_dir).trainer_lease
            raise RunFolderBusy(f"{run_dir} is being trained by another trainer ({holder or 'see rank 0'}): "
                                "refusing to start a second one", hint="zbpscale status shows its job; wait for it "
                                f"or cancel it (if its holder is surely gone, remove {lease_file})")
        nonce = dist.broadcast_object(lock.holder.nonce if lock else None, env)
        yield lock or Follower(RunFolder(run_dir).trainer_lock, nonce)
    finally:
        if lock:
            folder, bare = RunFolder(run_dir), False
            if made:
                with contextlib.suppress(OSError):
                    bare = {p.name for p in run_dir.iterdir()} <= {folder.trainer_lock.name, folder.trainer_lease.name}
            lock.release()  # its lease removed
            if bare:
                with contextlib.suppress(OSError):
                    folder.trainer_lock.unlink()
                    run_dir.rmdir()


def _renew(lock: Lock | Follower | None, run_dir: Path, *, force: bool = False) -> None:
    """The check before every write into the run folder (lease.Lock.renew: in memory within a few seconds of the
    last look, else on disk, renewing rank 0's lease). A lease another trainer has taken over (this one was silent
    past lease_bound: paused, frozen in I/O) ends this one at once: LeaseLost, and nothing more is written."""
    if lock is not None and not lock.renew(force=force):
        raise LeaseLost(f"{run_dir} was taken over by another trainer ({lock.taken_by()}) while this one was silent "
                        "past its lease: stopping without writing more", hint="zbpscale status shows the run's job")


@dataclass
class _Run:
    """What one attempt holds while it trains (built by `_setup`)."""

    cfg: TrainConfig
    run_dir: Path
    env: dist.DistEnv
    model: torch.nn.Module
    ddp: torch.nn.Module  # the model, wrapped in DDP when there are several ranks
    optimizer: torch.optim.Optimizer
    loader: object  # zbpscale.data.loader.TokenLoader
    val: list
    log: MetricsLog
    numbers: dict
    start: int
    accum: int
    bf16: bool
    done: int = 0  # steps done so far (the loop keeps it): where an attempt stopped by an exception ended
    lock: Lock | None = None  # the trainer lock (rank 0), renewed as the loop goes and asked before each write
    saves: dict = field(default_factory=dict)  # this attempt's checkpoint saves (records.CheckpointTally)
    save_rows: list = field(default_factory=list)  # a records.SaveRow for each of its latest SAVES_KEPT saves
    cancel_looked: float = 0.0  # when rank 0 last looked for the run folder's CANCEL stamp (monotonic)
    writer: checkpoint.Background | None = None  # rank 0: the periodic saves, written in the background
    writing: dict | None = None  # the save in flight: its metrics.SaveRow so far, and the steps that overlap it
    quiet: list = field(default_factory=list)  # the latest step times with no write in flight (a slowdown's base)

    def guard(self) -> None:
        """Raise LeaseLost if the run folder is no longer this trainer's (`_renew`): asked before every write."""
        _renew(self.lock, self.run_dir)

    def saved(self, step: int, blocked_s: float, *, background: bool = False) -> None:
        """Count a checkpoint save of `step` that blocked the trainer for `blocked_s` seconds (a background one is
        followed as it is written: `landed`)."""
        self.saves = {**self.saves, "step": step, "time": time.time(), "s": self.saves.get("s", 0.0) + blocked_s,
                      "n": self.saves.get("n", 0) + 1}
        row = {"step": step, "blocked_s": round(blocked_s, 6)}
        if background:
            self.writing = {"row": row, "overlap": [], "quiet": statistics.median(self.quiet) if self.quiet else None}
        else:
            self._add(row)

    def stepped(self, step_time: float) -> None:
        """A step's time, for the slowdown of the steps a background write overlaps."""
        if self.writing is not None:
            self.writing["overlap"].append(step_time)
        else:
            self.quiet = (self.quiet + [step_time])[-20:]

    def landed(self, landed: checkpoint.Landed | None) -> None:
        """A background write ended: its row gets the time to landed and the overlapping steps' slowdown; a write
        that failed for a full disk is one line and training goes on (the older checkpoints are intact, the next
        save tries again); any other failure (the lease lost meanwhile) ends the attempt as it would have."""
        if landed is None or self.writing is None:
            return
        writing, self.writing = self.writing, None
        row, overlap = writing["row"], writing["overlap"]
        row.update(landed_s=round(landed.landed_s, 6), overlap_steps=len(overlap))
        if overlap and writing["quiet"]:
            row["slowdown"] = round(statistics.median(overlap) / writing["quiet"], 4)
        if landed.error is not None:
            row["error"] = f"{type(landed.error).__name__}: {landed.error}"
            self._add(row)
            if not isinstance(landed.error, checkpoint.CheckpointError):
                raise landed.error
            print(f"warning: {landed.error}; training goes on, the next checkpoint tries again", flush=True)
            return
        self._add(row)
        self.log.checkpointed()

    def _add(self, row: dict) -> None:
        self.save_rows = (self.save_rows + [row])[-SAVES_KEPT:]

    def cancel_stamped(self) -> bool:
        """Whether `zbpscale cancel` has left its stamp in the run folder: a stop request that needs no scheduler
        (it writes one where the scheduler does not answer, and beside its signal). Rank 0 looks, at most every
        CANCEL_LOOK_S (a stat on a shared filesystem); the ranks agree on it with the signals' vote."""
        if not self.env.is_main or time.monotonic() - self.cancel_looked < CANCEL_LOOK_S:
            return False
        self.cancel_looked = time.monotonic()
        return RunFolder(self.run_dir).cancel.exists()

    def end_fields(self) -> dict:
        """What an end record says of the attempt's checkpoint saves (goodput's accounting, run/goodput.py)."""
        each = {"ckpt_saves": self.save_rows} if self.save_rows else {}
        return {"ckpt_s": round(self.saves.get("s", 0.0), 6), "ckpts": self.saves.get("n", 0), **each}

    def beat(self, done: int, *, force: bool = False) -> None:
        """Rewrite the heartbeat (rank 0, at most every few seconds unless forced): the step, the estimator's
        paths and this attempt's saves, which are the last words of an attempt killed without an end record."""
        last = {"last": self.save_rows[-1]} if self.save_rows else {}  # the rows of every save: the end record's
        extra = {"ckpt": {**self.saves, **last}} if self.saves else {}
        self.log.heartbeat(done, done * self.numbers["tokens_per_step"], force=force, **estimator_state(), **extra)


def _train(cfg: TrainConfig, run_dir: Path, env: dist.DistEnv, on_hang: Callable[[str], None] | None,
           lease: Lock | Follower | None = None, called: float | None = None) -> Why:
    """`lease`: rank 0's Lock (renewed as it trains), a Follower of it on the other ranks (asked only before their
    watchdog writes its stamp); `called`: when train() was called (the start record's set-up phases)."""
    _check_config(run_dir, cfg)
    if RunFolder(run_dir).complete.exists():
        if env.is_main:
            print(f"{run_dir}: already complete ({RunFolder(run_dir).complete.name} marker present); nothing to do"
                  + _edited_since(run_dir, cfg))
        return "completed"
    try:
        r = _setup(cfg, run_dir, env, lease if env.is_main else None, called)
    except StoppedBeforeFirstStep:
        if env.is_main:
            print(f"stopped on signal {signals.received()} while compiling, before the first step: nothing new to "
                  "checkpoint; run again to continue", flush=True)
        return "checkpointed"

    def hung(reason: str) -> None:  # rank 0, from the watchdog's thread while the loop is blocked
        try:
            r.log.write("end", step=dog.step - 1, why="hung", reason=reason, **r.end_fields())
            r.log.close()
        except OSError as err:  # a full disk: the job layer still records the hang and ends the attempt
            print(f"watchdog: the end record was not written ({err})", file=sys.stderr, flush=True)
        if on_hang is not None:
            on_hang(reason)

    dog = Watchdog(run_dir, env.rank, env.world_size, cfg.step_timeout_s, on_hang=hung,
                   guard=lambda: _renew(lease, run_dir)).start()
    try:
        return _loop(r, dog)
    except KeyboardInterrupt:  # a second Ctrl-C: a person stopped it on purpose, said in its records
        _last_word(r, r.done - 1, "interrupted", "Ctrl-C twice: stopped without a checkpoint")
        raise
    except TrainingDiverged:  # its end record is written where it is found
        _let_land(r)
        raise
    except RunFolderBusy:  # LeaseLost: another trainer has the folder now (_renew): nothing more is written into it
        raise
    except ZbpError as err:  # e.g. a full disk at a checkpoint: the cause, for status, before the one-line error
        _let_land(r)
        _last_word(r, r.done - 1, "failed", f"{type(err).__name__}: {err}")
        raise
    finally:
        dog.stop()


def _let_land(r: _Run) -> None:
    """An attempt that ends on an error lets its background write, if one is in flight, land (it holds an earlier
    step's state, whole); best effort: its own failure changes nothing of the error being raised."""
    try:
        if r.writer is not None:
            r.landed(r.writer.wait())
    except Exception:
        pass


def _last_word(r: _Run, step: int, why: Why, reason: str) -> None:
    """The end record of an attempt that stops on an exception; best effort (the disk may be full, the folder may
    have been taken over meanwhile)."""
    try:
        r.log.write("end", step=step, why=why, reason=reason, **r.end_fields())
        r.log.close()
    except (OSError, LeaseLost):
        pass


def _loop(r: _Run, dog: Watchdog) -> Why:
    cfg, env = r.cfg, r.env
    tokens_per_step = r.numbers["tokens_per_step"]
    last_ckpt, last_print, done, stop = time.monotonic(), 0.0, r.start, None
    r.done = done
    times: list[float] = []  # this attempt's step times after its first (which pays first-use costs): the ETA
    dog.beat(done)
    _renew(r.lock, r.run_dir)
    for step in range(r.start, cfg.steps):
        t0 = time.perf_counter()
        time_due = cfg.ckpt_every_s > 0 and time.monotonic() - last_ckpt >= cfg.ckpt_every_s
        loss, grad_norm, lr, stop, time_votes = _step(r, step, time_due)
        done, step_time = step + 1, time.perf_counter() - t0
        r.done = done
        r.stepped(step_time)
        _renew(r.lock, r.run_dir)  # before writing: after a long pause the folder may be another trainer's
        if r.writer is not None:
            r.landed(r.writer.poll())
        if step > r.start:
            times = (times + [step_time])[-50:]
        if step % cfg.log_every == 0 or done == cfg.steps:
            r.log.write("train", step=step, tokens=done * tokens_per_step, loss=loss, lr=lr, grad_norm=grad_norm,
                        step_time=step_time, tokens_per_s=tokens_per_step / step_time)
        # ---- evaluation and diagnostics ----
        val_loss = None
        if (cfg.eval_every and done % cfg.eval_every == 0) or done == cfg.steps:
            val_loss = evaluate(r.ddp, r.val, env, r.bf16)
            _renew(r.lock, r.run_dir)
            r.log.write("eval", step=step, tokens=done * tokens_per_step, val_loss=val_loss)
        if cfg.diag_every and done % cfg.diag_every == 0 and env.is_main:
            from zbpscale.train.diagnostics import diagnose

            stats = diagnose(r.model, r.val[0], cfg.model.zbp, diag_seed=step)
            r.log.write("diag", step=step, **stats, **{k: v for k, v in estimator_state().items() if k == "impl_used"})
        r.beat(done)
        if env.is_main and (time.monotonic() - last_print >= PRINT_EVERY_S or val_loss is not None):
            _print_progress(r, done, loss, val_loss, step_time, statistics.median(times) if times else None)
            last_print = time.monotonic()
        # ---- checkpoint: periodic, by wall time, or because a signal asked for one ----
        periodic = cfg.ckpt_every and done % cfg.ckpt_every == 0
        if (periodic or time_votes or stop) and done < cfg.steps:
            _save(r, done, background=not stop)  # a stop's checkpoint is written before the exit says so
            last_ckpt = time.monotonic()
        dog.beat(done)
        if stop:
            break
    return _finish(r, done, stop)


def _setup(cfg: TrainConfig, run_dir: Path, env: dist.DistEnv, lock: Lock | None = None,
           called: float | None = None) -> _Run:
    """Model, optimizer (restored from the newest checkpoint), data, the metrics log and the start record (with
    the seconds of each phase of this set-up, metrics.SETUP_PHASES)."""
    from torch.nn.parallel import DistributedDataParallel

    from zbpscale.data.loader import TokenLoader, vocab_problem

    phases = SetupTimer(called)
    bf16 = cfg.bf16 if cfg.bf16 is not None else env.device.type == "cuda"
    _, accum = batch_plan(cfg, env.world_size)
    numbers = derived_numbers(cfg, env.world_size)
    checkpoint.seed_rngs(cfg.seed)  # the same initial weights on every rank
    model = Transformer(cfg.model).to(env.device)
    optimizer = build_optimizer(model, cfg)
    phases.done("model")
    start, saved_numerics = checkpoint.restore(run_dir, model, optimizer)  # 0 for a new run
    phases.done("restore")
    _renew(lock, run_dir)
    kept, differs = numerics.adopt(saved_numerics, env.device)  # compute as the checkpoint's attempt did
    impl_used, interrupted = _warm_up(cfg, env, bf16)
    phases.done("warm_up")
    _renew(lock, run_dir)
    if dist.all_reduce_sum([float(interrupted)], env)[0]:  # every rank stops, whichever was interrupted
        raise StoppedBeforeFirstStep()
    ddp = DistributedDataParallel(model) if env.distributed else model
    loader = TokenLoader(cfg.data_dir, seq_len=cfg.seq_len, global_batch=cfg.global_batch, seed=cfg.seed,
                         rank=env.rank, world_size=env.world_size)
    if problem := vocab_problem(cfg.model.vocab_size, loader.manifest, cfg.data_dir):
        raise problem  # every rank reads the same manifest: every rank stops here
    val = loader.val_batches(max_batches=cfg.eval_batches)  # what fits when the split is small (val_fit)
    numbers["val_batches"], numbers["val_batch"] = len(val), len(val[0][0]) * env.world_size
    phases.done("data")

    records = read_records(run_dir) if env.is_main else []
    before = _checkpointed_by(records, start)  # the start record of the attempt whose checkpoint this resumes
    _same_data(before, loader, env)
    _same_config(before, cfg, env, run_dir, start)
    log = MetricsLog(run_dir, enabled=env.is_main, guard=lambda: _renew(lock, run_dir))
    if env.is_main:
        attempt = 1 + sum(r["kind"] == "start" for r in records)
        # What the attempt before left past this attempt's starting point is its lost work (goodput's accounting)
        redo = redone(records, read_json(RunFolder(run_dir).heartbeat), start, _mtime(RunFolder(run_dir), start))
        # Whatever an earlier attempt logged past this attempt's starting point (its checkpoint, or step 0 when it
        # died before its first one) is redone now: drop it, so that every reader sees each step once.
        dropped = log.rollback_to(start)
        if cfg.trackers:
            log.trackers = open_trackers(cfg, run_dir, start, may_write=lock.renew if lock else lambda: True)
        if start or dropped or redo.get("redo_steps"):
            log.write("resume", from_step=start, dropped=dropped, kept=kept, differs=differs,
                      world_size=env.world_size, world_size_from=(before or {}).get("world_size"), **redo)
        atomic_write(RunFolder(run_dir).config, json.dumps(cfg.to_dict(), indent=1) + "\n", before_rename=log.guard)
        print(f"run {run_dir} attempt {attempt}: " + ", ".join(
            f"{k}={v:,}" if isinstance(v, int) else f"{k}={v:.3g}" if isinstance(v, float) else f"{k}={v}"
            for k, v in numbers.items()), flush=True)
        if start:
            print(f"resuming at step {start} of {cfg.steps}" + "".join(f"; {k}" for k in kept), flush=True)
            if note := _world_note(cfg, before, numbers):
                print(note, flush=True)
        elif dropped:
            print(f"starting again at step 0: an earlier attempt stopped before its first checkpoint ({dropped} of "
                  "its records dropped, to be redone)", flush=True)
        if differs:
            print(f"warning: not bit for bit with the attempt that wrote the checkpoint ({', '.join(differs)})",
                  flush=True)
        elif start and saved_numerics is None:  # written by a release before 2026-12-01 (train/numerics.py)
            print("note: the checkpoint does not say what it was computed with (an older release wrote it): bit for "
                  "bit only where this attempt has its torch build, CPU model and thread count", flush=True)
        if numbers["val_batch"] < cfg.global_batch:
            print(f"note: the validation split holds fewer than {cfg.global_batch} windows of {cfg.seq_len + 1} "
                  f"tokens: evaluating on one batch of {numbers['val_batch']}", flush=True)
        log.write("start", attempt=attempt, step=start, world_size=env.world_size, config=cfg.to_dict(),
                  derived=numbers, data_id=loader.identity, numerics=numerics.fingerprint(env.device),
                  impl_used=impl_used, git=git_revision(),
                  host=os.uname().nodename,
                  versions={"zbpscale": version(), "torch": torch.__version__, "python": sys.version.split()[0]},
                  setup_s=phases.total())
    writer = checkpoint.Background(run_dir, keep=cfg.keep_ckpts, guard=lambda: _renew(lock, run_dir)) \
        if env.is_main else None
    return _Run(cfg=cfg, run_dir=run_dir, env=env, model=model, ddp=ddp, optimizer=optimizer, loader=loader,
                val=val, log=log, numbers=numbers, start=start, accum=accum, bf16=bf16, lock=lock, writer=writer)


def _mtime(folder: RunFolder, step: int) -> float | None:
    """When the checkpoint of `step` was written (a background one: when its state was copied; None: step 0, or no
    such file)."""
    try:
        return folder.checkpoint(step).stat().st_mtime if step else None
    except OSError:
        return None


def _same_data(before: dict | None, loader, env: dist.DistEnv) -> None:
    """Refuse, on every rank, to resume a run on other data than the attempt whose checkpoint it resumes trained on
    (`before`, its start record, read on rank 0): its data folder re-prepared with other options or from another
    source, or, for a run whose config names the folder by a relative path (an older release kept it so), another
    folder of that name. Their shards' identity (loader.data_identity) differs; a start record of a release before
    2026-12-06 has none, and nothing is compared."""
    trained = (before or {}).get("data_id")
    other = env.is_main and trained is not None and trained != loader.identity
    if dist.all_reduce_sum([1.0 if other else 0.0], env)[0]:
        raise DataError(f"{loader.data_dir.resolve()} holds other data than this run trained on up to its checkpoint "
                        f"(its shards are {loader.identity}; the run trained on {trained or 'those rank 0 read'})",
                        hint="resume it on the data it trained on (re-preparing it with the same command and options "
                             "writes the same shards), or train in a new run folder")


def _same_config(before: dict | None, cfg: TrainConfig, env: dist.DistEnv, run_dir: Path, start: int) -> None:
    """Refuse, on every rank, to resume a run with another config than the attempt whose checkpoint it resumes
    trained with (`before`, its start record, read on rank 0), but in the fields that never change what a run
    computes (RESUME_SAFE, which a sweep's --apply-changes edits) and its data folder's path (its shards are
    compared, `_same_data`). config.json is checked against the config given (`_check_config`); one deleted, or put
    back from elsewhere, was written anew from the sweep file, and the run resumed its checkpoint at another lr."""
    changed = _changed_since(before["config"], cfg, but=(*RESUME_SAFE, "data_dir")) \
        if env.is_main and isinstance((before or {}).get("config"), dict) else []
    if dist.all_reduce_sum([1.0 if changed else 0.0], env)[0]:
        said = f" ({', '.join(changed)})" if changed else ""  # rank 0 read the records
        raise ConfigError(f"{run_dir}: its checkpoint of step {start} was trained with another config than this "
                          f"one{said}",
                          hint="resume it with the config it trained with (its latest start record in metrics.jsonl "
                               "holds it), or train in a new run folder")


def _changed_since(trained: dict, cfg: TrainConfig, *, but: tuple[str, ...] = ()) -> list[str]:
    """`changed_fields` from the config a start record holds (`trained`) to `cfg`, both read in today's format, but
    the fields `but` names; [] for a start record's config this release cannot read (nothing to compare)."""
    try:
        before, now = migrate(trained), migrate(as_json(cfg.to_dict()))
    except ConfigError:
        return []
    kept = lambda config: {k: v for k, v in config.items() if k not in but}  # noqa: E731
    return changed_fields(kept(before), kept(now))


def _checkpointed_by(records: list, start: int) -> dict | None:
    """The start record of the attempt that wrote the checkpoint at step `start`: the last attempt that started
    before it (None for a new run)."""
    return next((a[0] for a in reversed(attempts_of(records)) if a[0].get("step", 0) < start), None)


def _world_note(cfg: TrainConfig, before: dict | None, numbers: dict) -> str | None:
    """One line when this attempt has another number of ranks than the one whose checkpoint it resumes, saying
    what that changes (docs/reproducibility.md, "The same run on another GPU count"); None when the number is the
    same or unknown."""
    world, world_from = numbers["world_size"], (before or {}).get("world_size")
    if world_from is None or world_from == world:
        return None
    zbp, micro, micro_from = cfg.model.zbp, numbers["micro_batch"], before.get("derived", {}).get("micro_batch")
    line = f"resuming on {world} rank(s) a run checkpointed on {world_from}: "
    if zbp is None or zbp.seeding == "global":
        return line + "the same batches" + (" and ZBP probes" if zbp else "") + ", so the same run to rounding"
    if micro == micro_from:
        return line + f"the same batches and, at the same micro batch ({micro}), the same ZBP probes"
    return line + (f"its ZBP probes follow the micro batch ({micro_from} -> {micro}: seeding 'micro', a run from "
                   "before 2026-12-02), so from here on it draws other probes than it would have")


def open_trackers(cfg: TrainConfig, run_dir: Path, start: int, may_write: Callable[[], bool] = lambda: True):
    """The experiment trackers of this attempt (train/trackers.py), given the run's records so far (after the
    rollback: the steps before this attempt's first); `may_write()`: whether the run folder is still this
    trainer's (its lease), for a tracker that writes from a thread of its own."""
    from zbpscale.train.trackers import TrackedRun, Trackers

    folder = Path(run_dir).absolute()
    config = {**cfg.to_dict(), "code": {"zbpscale": version(), "git": git_revision()}}
    run = TrackedRun(run_dir=folder, name=folder.name, sweep=folder.parent.name, config=config, may_write=may_write)
    return Trackers(cfg.trackers, run, start, read_records(run_dir))


def _warm_up(cfg: TrainConfig, env: dist.DistEnv, bf16: bool) -> tuple[dict[str, str], bool]:
    """Compile the ZBP estimator's fast paths before the first step (a failing one falls back here), so that the
    start record says which path each core takes and no step time counts the compile. ({core: path}, whether a
    stop signal broke the compile)."""
    from zbpscale.zbp import fused

    fused.used.clear()  # what this run's cores ran (a process may train several runs: tests, notebooks)
    zbp = cfg.model.zbp
    if zbp is None:
        return {}, False
    t0 = time.perf_counter()
    dtype = torch.bfloat16 if bf16 and env.device.type == "cuda" else torch.float32  # what backward hands the cores
    announce = (lambda: print("compiling the ZBP estimator's kernels (once per process, before the first step)",
                              flush=True)) if env.is_main else None
    try:
        used = fused.warm_up(zbp, seq_len=cfg.seq_len, hidden=cfg.model.hidden, device=env.device, dtype=dtype,
                             announce=announce)
    except Exception:  # noqa: BLE001 - with a stop requested the compile's failure is the stop (fused._recoverable)
        if not signals.received():
            raise
        return {}, True
    if env.is_main and used:
        print(f"ZBP estimator: {', '.join(f'{core} {path}' for core, path in used.items())} "
              f"(ready in {time.perf_counter() - t0:.1f} s)", flush=True)
    return used, False


def estimator_state() -> dict:
    """What the heartbeat says of the ZBP estimator in this process: the path each core ran, and every fast
    path that failed (one line each); empty before any core ran."""
    from zbpscale.zbp import fused

    used = fused.paths_used()
    if not used:
        return {}
    return {"impl_used": used, "fallbacks": [f"{path} failed on {device}: {why}"
                                             for (device, path), why in fused.failed.items()]}


def _step(r: _Run, step: int, time_due: bool) -> tuple[float, float, float, float, float]:
    """One optimizer step: (global loss, gradient norm, lr, stop votes, wall-clock checkpoint votes)."""
    from zbpscale.data.loader import micro_batches

    cfg, env = r.cfg, r.env
    lr = lr_at(step, cfg)
    for group in r.optimizer.param_groups:
        group["lr"] = lr
    # ---- forward / backward over this rank's micro-batches (all-reduce on the last only) ----
    x_all, y_all = r.loader.batch(step)
    loss_sum = torch.zeros((), device=env.device)
    for m, (x, y) in enumerate(micro_batches(x_all, y_all, r.accum)):
        r.model.set_zbp_clock(step=step, micro=env.rank * r.accum + m, rank=0,  # global micro index
                              seq0=env.rank * len(x_all) + m * len(x))  # and global index of its first sequence
        last = m == r.accum - 1
        with (nullcontext() if last or not env.distributed else r.ddp.no_sync()), _autocast(env, r.bf16):
            _, loss = r.ddp(x.to(env.device), y.to(env.device))
        (loss / r.accum).backward()
        loss_sum += loss.detach()
    # ---- one small collective: global loss, stop requests (a signal, the CANCEL stamp), wall-clock checkpoint due ----
    loss_g, signalled, cancelled, time_votes = dist.all_reduce_sum(
        [loss_sum.item() / r.accum, float(signals.received() != 0), float(r.cancel_stamped()),
         float(time_due and env.is_main)], env)
    loss_g /= env.world_size
    max_norm = cfg.grad_clip if cfg.grad_clip > 0 else float("inf")
    grad_norm = torch.nn.utils.clip_grad_norm_(r.model.parameters(), max_norm).item()
    # ---- never step on a non-finite loss or gradient ----
    if not (math.isfinite(loss_g) and math.isfinite(grad_norm)):
        values = (("loss", loss_g), ("grad norm", grad_norm))
        said = " and ".join(f"{name} {v}" for name, v in values if not math.isfinite(v))
        beside = "".join(f" ({name} {v:.4g})" for name, v in values if math.isfinite(v))  # the one that is finite
        r.log.write("end", step=step, why="diverged", reason=f"non-finite {said}{beside}", **r.end_fields())
        raise TrainingDiverged(
            f"step {step}: loss {loss_g}, grad norm {grad_norm} is not finite; stopped before the "
            f"optimizer update in {r.run_dir}", hint="lower the learning rate or check the data")
    r.optimizer.step()
    r.optimizer.zero_grad(set_to_none=True)
    return loss_g, grad_norm, lr, _stop_cause(signalled, cancelled), time_votes


def _stop_cause(signalled: float, cancelled: float) -> str | None:
    """What the ranks voted to stop on, in words, or None: a stop signal (maybe to other ranks only: SLURM may
    signal one node first), else rank 0's sight of the run folder's CANCEL stamp."""
    if signalled:
        here = signals.received()
        return f"signal {here}" if here else f"a stop signal to {signalled:g} other rank(s)"
    return "the run folder's CANCEL stamp" if cancelled else None


def _save(r: _Run, done: int, *, background: bool) -> None:
    """Checkpoint `done` steps (rank 0 writes; every rank waits for it), counted in the attempt's saves (the time
    the trainer was blocked) and said at once in the heartbeat. In the background, the trainer waits only for the
    write in flight, if any, and for the state's copy (checkpoint.Background); else for the whole write."""
    t0 = time.perf_counter()
    if r.env.is_main:
        _renew(r.lock, r.run_dir, force=True)  # still ours? a checkpoint is worth the look every time
        r.landed(r.writer.wait())  # one write at a time: a save waits for the one in flight (blocked time)
        if background:
            r.writer.start(done, _state(r))
        else:
            checkpoint.save(r.run_dir, done, _state(r), keep=r.cfg.keep_ckpts, guard=r.guard)
            r.log.checkpointed()
    dist.barrier(r.env)
    r.saved(done, time.perf_counter() - t0, background=background and r.env.is_main)
    r.beat(done, force=True)


def _state(r: _Run) -> dict:
    """What a checkpoint holds besides the step and RNG states (checkpoint.save adds those)."""
    return {"model": r.model.state_dict(), "optimizer": r.optimizer.state_dict(),
            "numerics": numerics.fingerprint(r.env.device)}


def _print_progress(r: _Run, done: int, loss: float, val_loss: float | None, step_time: float,
                    typical: float | None) -> None:
    """One line for a person watching the run (every PRINT_EVERY_S seconds, and at each evaluation); the ETA
    from `typical` (the median step time after the attempt's first step), none before it is known."""
    left = None if typical is None else (r.cfg.steps - done) * typical
    eta = "" if left is None else f" eta {age(left)}"
    val = f" val {val_loss:.4f}" if val_loss is not None else ""
    print(f"step {done}/{r.cfg.steps} loss {loss:.4f}{val} {r.numbers['tokens_per_step'] / step_time:,.0f} tok/s"
          f"{eta}", flush=True)


def _finish(r: _Run, done: int, stop: str | None) -> Why:
    """The end of an attempt: the final checkpoint and COMPLETE marker, or (`stop`, what the ranks voted to stop
    on: "signal 12", the CANCEL stamp) the record of a stop."""
    cfg, env = r.cfg, r.env
    _renew(r.lock, r.run_dir, force=True)  # still ours? before the last checkpoint, COMPLETE and the end record
    if stop is None:
        if env.is_main:
            t0 = time.perf_counter()
            r.landed(r.writer.wait())
            checkpoint.save(r.run_dir, cfg.steps, _state(r), keep=cfg.keep_ckpts, guard=r.guard)
            r.saved(cfg.steps, time.perf_counter() - t0)
            atomic_write(RunFolder(r.run_dir).complete, json.dumps({"steps": cfg.steps, "time": time.time()}) + "\n",
                         before_rename=r.guard)
            print(f"done: {cfg.steps} steps in {r.run_dir}", flush=True)
        r.log.write("end", step=cfg.steps - 1, why="completed", reason="all steps done", **r.end_fields())
    else:
        r.log.write("end", step=done - 1, why="checkpointed", reason=f"{stop}: requeue me", **r.end_fields())
        if env.is_main:
            again = ("run again to continue" if "CANCEL" not in stop else
                     f"submitting the sweep again lifts it (or remove {RunFolder(r.run_dir).cancel}) to continue")
            print(f"checkpointed at step {done} on {stop}; {again}", flush=True)
    r.beat(done, force=True)
    r.log.close()
    dist.barrier(env)
    return "completed" if stop is None else "checkpointed"
