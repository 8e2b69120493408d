"""The run below everything: one run's folder and its history. Torch-free.

    folder.py   RunFolder: where every file of a run lives (logs, rank stamps and checkpoint names too), run names;
                the only module that spells a run's file (tests/test_layout.py checks, f-strings included)
    history.py  the typed events of attempts.jsonl and `History`, a run's attempts read once as a value (its latest
                job, that job's last start and end, requeue counts, the retry rule), and the one vocabulary of
                how an attempt ended (`why`)
    snapshot.py Snapshot: one look at a run folder, each of its files read at most once (what status, cancel,
                collect and submit decide and show a run from)
    goodput.py  where the wall time held by a run's jobs went (training, start-up, saves, lost work, other; the
                queue wait beside), from attempts.jsonl, metrics.jsonl and the heartbeat read as plain JSON
    fold.py     the trainer's attempts folded over metrics.jsonl's records (goodput's reading of the file), whose
                state the trainer keeps in its heartbeat's index so that goodput reads only the records after it

How an attempt ended (`why`: completed, checkpointed, timeout, preempted, cancelled, crashed, hung, diverged,
failed, interrupted) is the word of both the trainer's end record and the attempts' end events, and what
`train()` returns. A run's *state* (jobs/state.py: complete, running, stopped, failed, ...) is another thing:
what the run is in now, decided from its folder, its history and the scheduler's view of its job.

Below train, jobs and results, each of which imports it; it imports only the shared modules, and, inside a
Snapshot's functions, train's torch-free modules (the trainer's own reading of its records and config).
"""

from zbpscale.run.folder import RunFolder, parse_run_name, run_name
from zbpscale.run.history import History

__all__ = ["History", "RunFolder", "parse_run_name", "run_name"]
