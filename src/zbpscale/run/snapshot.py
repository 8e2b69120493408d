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
"""

from __future__ import annotations

from functools import cached_property
from pathlib import Path

from zbpscale.errors import BrokenRunFolder, ConfigError
from zbpscale.files import read_bytes, read_json
from zbpscale.run.config import TrainConfig
from zbpscale.run.fold import Fold
from zbpscale.run.folder import RunFolder
from zbpscale.run.glance import Glance, glance_after, glance_of, indexed_tail
from zbpscale.run.history import History
from zbpscale.run.records import Record, records_of


class Snapshot:
    """A run folder, read once (see the module docstring)."""

    def __init__(self, run_dir: Path | str):
        self.folder = RunFolder(run_dir)

    def __repr__(self) -> str:
        return f"Snapshot({str(self.folder.path)!r})"

    @property
    def run_dir(self) -> Path:
        return self.folder.path

    @cached_property
    def _history(self) -> tuple[History, str]:
        try:
            return History.read(self.run_dir), ""
        except BrokenRunFolder as err:
            return History(), str(err)

    @property
    def history(self) -> History:
        """attempts.jsonl; an empty history where it cannot be read (`broken` says why)."""
        return self._history[0]

    @cached_property
    def _config(self) -> tuple[dict | None, str]:
        try:
            return self.folder.read_config(), ""
        except BrokenRunFolder as err:
            return None, str(err)

    @property
    def config(self) -> dict | None:
        """config.json as written; None when there is none or it is not a JSON object (`broken` says)."""
        return self._config[0]

    @cached_property
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
        return self._train_config[1] or self._history[1]

    @property
    def step_timeout(self) -> float:
        """The run's step_timeout_s (its config, migrated); 0 (no bound) without a config the trainer takes."""
        return self.train_config.step_timeout_s if self.train_config is not None else 0.0

    @cached_property
    def heartbeat(self) -> dict:
        """heartbeat.json ({} when there is none); a time or step that is not a number (a hand edit) left out."""
        beat = read_json(self.folder.heartbeat)
        for key in ("time", "step"):
            if key in beat and (isinstance(beat[key], bool) or not isinstance(beat[key], (int, float))):
                del beat[key]
        return beat

    @cached_property
    def plan(self) -> dict:
        return read_json(self.folder.plan)

    @cached_property
    def complete(self) -> bool:
        return self.folder.complete.exists()

    @cached_property
    def metrics(self) -> bytes:
        """metrics.jsonl's bytes (b"" when there is none)."""
        try:
            return read_bytes(self.folder.metrics)
        except OSError:
            return b""

    @cached_property
    def records(self) -> list[Record]:
        """Every record of metrics.jsonl, in order (torn lines skipped), as today's types have them."""
        return records_of(self.metrics)

    @cached_property
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

    @cached_property
    def glance(self) -> Glance:
        """What status shows of metrics.jsonl (run/glance.py's Glance): through the heartbeat's index of it, the
        bytes the trainer wrote after its latest heartbeat alone (the whole file without an index, or once read)."""
        if self._tail is not None:
            try:
                return glance_after(self.heartbeat["glance"], self._tail)
            except (TypeError, KeyError, ValueError, AttributeError):
                pass  # an index this release did not write: read the whole file
        return glance_of(self.metrics)

    @cached_property
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

    @property
    def unread_metrics(self) -> int:
        """The size of metrics.jsonl where it holds bytes but no record this release reads (garbled, or another file
        in its place: its steps, losses and tokens cannot be shown); 0 where it holds one, or is empty or missing."""
        return 0 if any(self.glance.__dict__.values()) else len(self.metrics)  # read once already to find none

    @property
    def own(self) -> dict[str, Record]:
        """The trainer's latest `start` and `end` records as the glance keeps them (run/glance.py's `shown`: a start
        record's config holds only its device; {} for each it has not written)."""
        seen = self.glance
        return {k: r for k, r in (("start", seen.start), ("end", seen.end)) if r}
