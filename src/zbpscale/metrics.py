"""The run's own records: metrics.jsonl (append-only, one JSON object per line) and heartbeat.json.

Schema of metrics.jsonl, one object per line, each with `kind` and `time` (Unix seconds):
  start  attempt, step (where this attempt starts), world_size, config, derived, numerics (numerics.fingerprint:
         torch, cpu, cpu_capability, threads, gpu), impl_used ({core: closed | fused | plain}, what each ZBP core
         runs after the warm-up; {} for bp), git, versions, host
  resume from_step, dropped (records past the checkpoint removed so that no step appears twice), kept and
         differs (numerics.adopt: what this attempt kept of the checkpoint's numerics, what differs)
  train  step, tokens, loss, lr, grad_norm, step_time, tokens_per_s
  eval   step, tokens, val_loss
  diag   step, blocks: [{layer, branch, fwd_gain, bwd_gain}],
         cores: [{layer, core, d_mean, n, nsr, c, c_median, c_mean, floor_frac}] (diagnostics.core_stats),
         grad_cosine (ZBP vs BP parameter gradients on the same batch), impl_used (ZBP runs: as in start, as
         of this step)
  end    step, status (completed | checkpointed | diverged | hung | failed), reason
`step` in train/eval/diag records is the 0-based step just taken; a run of S steps logs steps 0..S-1.
"""

from __future__ import annotations

import json
import os
import socket
import time
from pathlib import Path

from zbpscale.runfolder import COMPLETE, HEARTBEAT, METRICS, atomic_write  # noqa: F401 - re-exported names
from zbpscale.runfolder import process_start_time

STEP_KINDS = ("train", "eval", "diag")


def read_jsonl(path: Path) -> list[dict]:
    """The objects of a JSONL file, in order; a torn line (a killed writer) is skipped; no file: []."""
    path = Path(path)
    if not path.exists():
        return []
    records = []
    for line in path.read_text().splitlines():
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return records


def read_records(run_dir: Path) -> list[dict]:
    """Every record of the run's metrics.jsonl, in order."""
    return read_jsonl(Path(run_dir) / METRICS)


class MetricsLog:
    """Appends records to metrics.jsonl (rank 0 only) and rewrites heartbeat.json every few seconds."""

    def __init__(self, run_dir: Path, *, enabled: bool = True, heartbeat_s: float = 5.0):
        self.run_dir, self.enabled, self.heartbeat_s = Path(run_dir), enabled, heartbeat_s
        self._pid_start = process_start_time(os.getpid())  # with the pid, names this process (pids are reused)
        self.path = self.run_dir / METRICS
        self._last_beat = 0.0
        self._fh = None
        if enabled:
            self.run_dir.mkdir(parents=True, exist_ok=True)

    def rollback_to(self, step: int) -> int:
        """Drop step records at or past `step` (work after the checkpoint, about to be redone)."""
        if not self.enabled or not self.path.exists():
            return 0
        records = read_records(self.run_dir)
        kept = [r for r in records if not (r.get("kind") in STEP_KINDS and r.get("step", -1) >= step)]
        dropped = len(records) - len(kept)
        if dropped or len(self.path.read_text().splitlines()) != len(records):
            atomic_write(self.path, "".join(json.dumps(r) + "\n" for r in kept))
        return dropped

    def write(self, kind: str, **fields) -> None:
        if not self.enabled:
            return
        if self._fh is None:
            self._fh = open(self.path, "a")
        self._fh.write(json.dumps({"kind": kind, "time": time.time(), **fields}) + "\n")
        self._fh.flush()

    def heartbeat(self, step: int, tokens: int, *, force: bool = False, **extra) -> None:
        """Rewrite heartbeat.json (at most every heartbeat_s unless forced); `extra`: more fields, e.g. the
        estimator's impl_used and fallbacks (train.estimator_state)."""
        now = time.time()
        if not self.enabled or (not force and now - self._last_beat < self.heartbeat_s):
            return
        self._last_beat = now
        beat = {"step": step, "tokens": tokens, "time": now, "host": socket.gethostname(), "pid": os.getpid(),
                "pid_start": self._pid_start, **extra}
        atomic_write(self.run_dir / HEARTBEAT, json.dumps(beat) + "\n")

    def close(self) -> None:
        if self._fh is not None:
            os.fsync(self._fh.fileno())
            self._fh.close()
            self._fh = None
