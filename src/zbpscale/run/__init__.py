"""The run below everything: one run's folder, its history and the formats of its files. Torch-free.

    folder.py   RunFolder: where every file of a run lives (logs, rank stamps and checkpoint names too), run names;
                the only module that spells a run's file (tests/test_layout.py checks, f-strings included)
    history.py  the typed events of attempts.jsonl and `History`, a run's attempts read once as a value (its latest
                job, that job's last start and end, requeue counts, the retry rule), and the one vocabulary of
                how an attempt ended (`why`)
    snapshot.py Snapshot: one look at a run folder, each of its files read at most once (what status, cancel,
                collect and submit decide and show a run from); looks.py: its digest, kept in the sweep folder's
                file of looks, a line a run
    goodput.py  where the wall time held by a run's jobs went (training, start-up, saves, lost work, other; the
                queue wait beside), from attempts.jsonl, metrics.jsonl and the heartbeat read as plain JSON
    fold.py     the trainer's attempts folded over metrics.jsonl's records (goodput's reading of the file), whose
                state the trainer keeps in its heartbeat's index so that goodput reads only the records after it
    config.py   TrainConfig and ModelConfig (config.json), the size presets, the batch plan and every derived
                number, the model shapes of YAML files; formats.py: config.json's formats and their migrations
    records.py  the record types of metrics.jsonl and heartbeat.json (train/metrics.py writes them) and their
                readers; glance.py: status's one read of metrics.jsonl through the heartbeat's index of it;
                divergence.py: whether a run's val loss went above its start

How an attempt ended (`why`: completed, checkpointed, timeout, preempted, cancelled, crashed, hung, diverged,
failed, interrupted) is the word of both the trainer's end record and the attempts' end events, and what
`train()` returns. A run's *state* (jobs/state.py: complete, running, stopped, failed, ...) is another thing:
what the run is in now, decided from its folder, its history and the scheduler's view of its job.

Below train, jobs and results, each of which imports it; it imports only the shared modules and the arm's
ZBPConfig (zbp/config.py, which a config holds): never train, jobs or results.
"""

from zbpscale.run.folder import RunFolder, parse_run_name, run_name
from zbpscale.run.history import History

__all__ = ["History", "RunFolder", "parse_run_name", "run_name"]
