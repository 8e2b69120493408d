"""Checkpoints of a run: written atomically, the last K kept, loaded with `weights_only=True`.

A checkpoint holds everything resume needs: model and optimizer state, `step` (the number of optimizer
steps done, which is the step training resumes at), the RNG states of Python, NumPy and torch (CPU and
this rank's CUDA device) and the trainer's `numerics` (what the state was computed with: numerics.py). The
data position is the step itself: batches are a function of (seed, step) only.
Files are `ckpt_00001234.pt` in `<run_dir>/checkpoints/`; a partly written file is never visible under that
name (temp file, fsync, rename).

Device boundary: a checkpoint is always loaded onto the CPU, memory-mapped (ranks of one node share the
page cache instead of each reading a copy), and `restore` lets `load_state_dict` move the model and
optimizer tensors to wherever their parameters live. RNG states never leave the CPU: NumPy's keys and
torch's CPU and CUDA generator states must be CPU byte tensors (mapping them to the GPU broke every resume
on CUDA).

In the background (`Background`, #54): the trainer's periodic saves copy the state into host memory kept for the
purpose (`HostCopy`: every storage once, shared storages shared, so the file is byte for byte the one `save` writes
of the same step) and a thread of its own writes that copy with `save`, while training goes on. One write is in
flight at most; the rename is the completion marker (a file under its final name is whole), and older checkpoints
are pruned only after it. The copy is what keeps the next step out of the file: writing the live tensors from a
thread would save values of later steps (pytorch #144657), and so would reading the RNG states in the thread.
"""

from __future__ import annotations

import errno
import os
import random
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, NamedTuple

import numpy as np
import torch

from zbpscale.errors import CheckpointError
from zbpscale.files import atomic_write, remove_stale_temps
from zbpscale.run.folder import RunFolder


def seed_rngs(seed: int) -> None:
    """Seed Python's, NumPy's and torch's global generators (the run draws only from torch's, but all three
    are checkpointed: seeded, a straight run's checkpoints equal a resumed run's byte for byte)."""
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def rng_state() -> dict:
    np_state = np.random.get_state()
    state = {
        "python": random.getstate(),
        "numpy": (np_state[0], torch.from_numpy(np_state[1].copy()), *np_state[2:]),
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state()  # this rank's current device (a CPU byte tensor)
    return state


def set_rng_state(state: dict) -> None:
    """Restore `rng_state()`'s states; a tensor that is not a CPU byte tensor is a bug upstream (ValueError)."""
    for name, t in [("numpy", state["numpy"][1]), ("torch", state["torch"]), ("cuda", state.get("cuda"))]:
        if isinstance(t, torch.Tensor) and t.device.type != "cpu":
            raise ValueError(f"RNG state {name!r} is on {t.device}; RNG states must be loaded onto the CPU")
    random.setstate(state["python"])
    kind, keys, *rest = state["numpy"]
    np.random.set_state((kind, keys.numpy(), *rest))
    torch.set_rng_state(state["torch"])
    cuda = state.get("cuda")
    if isinstance(cuda, (list, tuple)):  # checkpoints before 0.1.1 kept every visible device's state
        index = torch.cuda.current_device() if torch.cuda.is_available() else 0
        cuda = cuda[index] if index < len(cuda) else None
    if cuda is not None and torch.cuda.is_available():
        torch.cuda.set_rng_state(cuda)


def _caused_by(err: BaseException, code: int) -> bool:
    """Whether an OSError with errno `code` is in the exception's chain (torch wraps the write's OSError)."""
    seen = set()
    while err is not None and id(err) not in seen:
        if isinstance(err, OSError) and err.errno == code:
            return True
        seen.add(id(err))
        err = err.__cause__ or err.__context__
    return False


def save(run_dir: Path, step: int, payload: dict, *, keep: int, guard: Callable[[], None] = lambda: None,
         rng: dict | None = None) -> Path:
    """Write `payload` (plus the step and RNG states: `rng`, else the generators' states now) as the checkpoint of
    `step`; keep the newest `keep`.
    Written by files.atomic_write, after removing the temp files a killed writer left (the trainer lock makes
    this process the folder's only writer). A failed write leaves no temp file behind and the older checkpoints
    untouched; a full disk is a one-line `CheckpointError`. `guard()` (the trainer's lease) is asked before the
    write and again before the written file takes its name: a trainer paused mid-save that lost the run folder
    meanwhile leaves no checkpoint."""
    guard()
    folder = RunFolder(run_dir)
    folder.checkpoints.mkdir(parents=True, exist_ok=True)
    remove_stale_temps(folder.checkpoints)
    final = folder.checkpoint(step)
    try:
        state = {**payload, "step": step, "rng": rng_state() if rng is None else rng}
        atomic_write(final, lambda fh: torch.save(state, fh), before_rename=guard)
    except BaseException as err:
        if _caused_by(err, errno.ENOSPC):
            found = folder.list_checkpoints()
            kept = f"the newest checkpoint, {found[-1][1].name}, is intact" if found else "there is no older checkpoint"
            raise CheckpointError(f"no space left on device at {folder.checkpoints}: the checkpoint of step {step} "
                                  f"was not written; {kept}",
                                  hint="free space on that filesystem, then run again") from None
        raise
    guard()  # a trainer paused right after the rename must not prune a new holder's checkpoints when it wakes
    for _, old in folder.list_checkpoints()[:-keep]:
        old.unlink(missing_ok=True)
    return final


class HostCopy:
    """Copies of a state (nested dicts, lists and tuples of tensors and plain values) in host memory that is kept
    and used again by the next copy of the same state (its storages: the parameters' and the optimizer's, updated
    in place, keep their sizes). Every storage is copied once and the copy's tensors view it as the originals
    view theirs (offset, size, stride), containers are rebuilt with their attributes (a state_dict's `_metadata`)
    and an object met twice is copied once: `torch.save` of the copy writes the bytes it writes of the original.
    A CUDA storage lands in pinned memory, the copies waited for before `__call__` returns."""

    def __init__(self) -> None:
        self._kept: dict[tuple[int, int], torch.UntypedStorage] = {}  # (source storage, bytes) -> host storage

    def __call__(self, state: dict) -> dict:
        kept, self._kept, memo = self._kept, {}, {}
        on_gpu = False

        def host(storage: torch.UntypedStorage) -> torch.UntypedStorage:
            nonlocal on_gpu
            key = (storage._cdata, storage.nbytes())
            if key not in self._kept:
                buffer = kept.get(key)
                if buffer is None:
                    pin = storage.device.type == "cuda"
                    buffer = torch.empty(storage.nbytes(), dtype=torch.uint8, pin_memory=pin).untyped_storage()
                if storage.device.type == "cpu":  # one memcpy (torch's copy_ wakes its thread pool per tensor: ~10 ms
                    np.copyto(_bytes(buffer), _bytes(storage))  # each on a loaded machine, for hundreds of tensors)
                else:
                    on_gpu = True
                    buffer.copy_(storage, non_blocking=True)
                self._kept[key] = buffer
            return self._kept[key]

        def copy(obj):
            if id(obj) in memo:
                return memo[id(obj)]
            if isinstance(obj, torch.Tensor):
                out = torch.empty(0, dtype=obj.dtype).set_(host(obj.untyped_storage()), obj.storage_offset(),
                                                           obj.size(), obj.stride())
                out.requires_grad_(obj.requires_grad)
            elif isinstance(obj, dict):
                out = type(obj)((key, copy(value)) for key, value in obj.items())
                if getattr(obj, "__dict__", None):
                    out.__dict__.update(copy(vars(obj)))
            elif isinstance(obj, list):
                out = [copy(value) for value in obj]
            elif isinstance(obj, tuple):
                values = [copy(value) for value in obj]
                out = type(obj)(*values) if hasattr(obj, "_fields") else tuple(values)
            else:  # numbers, strings, None: immutable
                out = obj
            memo[id(obj)] = out
            return out

        state = copy(state)
        if on_gpu:
            torch.cuda.synchronize()
        return state


def _bytes(storage: torch.UntypedStorage) -> np.ndarray:
    """A CPU storage's bytes as a NumPy array (a view, no copy)."""
    return torch.empty(0, dtype=torch.uint8).set_(storage).numpy()


@dataclass
class Landed:
    """A background write that ended: the checkpoint of `step` written (`error` None) or not (`error`: why, in one
    line; the older checkpoints are intact), `landed_s` after the state's copy began."""

    step: int
    landed_s: float
    error: BaseException | None = None


class Background:
    """The periodic saves of one trainer (rank 0), each written by a thread while training goes on: `start` waits
    for the write in flight (one at a time), copies the state and its RNG states into host memory (HostCopy) and
    starts the write (`save`, the lease asked before it and before the rename); `poll` says whether it has ended,
    `wait` waits for it. A write that fails hands its exception to `poll` / `wait` (a full disk: CheckpointError)."""

    def __init__(self, run_dir: Path, *, keep: int, guard: Callable[[], None] = lambda: None) -> None:
        self.run_dir, self.keep, self.guard = Path(run_dir), keep, guard
        self.copy = HostCopy()
        self._thread: threading.Thread | None = None
        self._landed: Landed | None = None

    def start(self, step: int, payload: dict) -> Landed | None:
        """Start writing `payload` as the checkpoint of `step`; returns the write that was in flight, if any."""
        before = self.wait()
        asked, held_at = time.perf_counter(), time.time()
        state = self.copy({**payload, "rng": rng_state()})
        rng = state.pop("rng")

        def write() -> None:
            try:
                path = save(self.run_dir, step, state, keep=self.keep, guard=self.guard, rng=rng)
                os.utime(path, (held_at, held_at))  # its time is its state's, as a synchronous save's (goodput's redo)
                self._landed = Landed(step, time.perf_counter() - asked)
            except BaseException as err:  # handed to the training thread
                self._landed = Landed(step, time.perf_counter() - asked, err)

        self._landed = None
        self._thread = threading.Thread(target=write, name="zbpscale-checkpoint", daemon=True)
        self._thread.start()
        return before

    @property
    def in_flight(self) -> bool:
        return self._thread is not None

    def poll(self) -> Landed | None:
        """The write that ended since the last look, if one did."""
        if self._thread is None or self._thread.is_alive():
            return None
        return self.wait()

    def wait(self) -> Landed | None:
        """Wait for the write in flight; it, or None when there was none."""
        if self._thread is None:
            return None
        self._thread.join()
        self._thread, landed = None, self._landed
        return landed


def load_latest(run_dir: Path) -> dict | None:
    """The newest checkpoint of the run on the CPU (memory-mapped), or None; a file that fails to load is
    reported, not skipped."""
    found = RunFolder(run_dir).list_checkpoints()
    if not found:
        return None
    step, path = found[-1]
    try:
        state = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
    except Exception as err:  # a corrupt file must not silently restart the run from scratch
        raise CheckpointError(f"checkpoint {path} cannot be read ({type(err).__name__}: {err})",
                       hint="move it aside to resume from the previous checkpoint") from err
    if state.get("step") != step:
        raise CheckpointError(f"checkpoint {path} says step {state.get('step')}, its name says {step}",
                       hint="move it aside to resume from the previous checkpoint")
    return state


class Restored(NamedTuple):
    step: int  # the step to resume at: 0 for a new run
    numerics: dict | None  # the fingerprint of the attempt that wrote the checkpoint (None: none, or older)


def restore(run_dir: Path, model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> Restored:
    """Load the newest checkpoint into `model` and `optimizer` (their tensors go to the device of the
    parameters they belong to) and restore the RNG states on the CPU."""
    state = load_latest(run_dir)
    if state is None:
        return Restored(0, None)
    model.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    for kept in optimizer.state.values():  # on the CPU the optimizer keeps the loaded tensors themselves, mapped from
        for k, v in kept.items():  # the file: it stayed mapped for the whole attempt, its disk space held after the
            if torch.is_tensor(v) and v.device.type == "cpu":  # next saves removed it (a resumed run needed room
                kept[k] = v.clone()  # for one checkpoint more than a fresh one)
    set_rng_state(state["rng"])
    return Restored(state["step"], state.get("numerics"))
