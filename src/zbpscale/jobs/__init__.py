"""Job control: a sweep's runs as jobs on SLURM or the local queue, and what state each run is in.

    layout.py       RunFolder: where every file of a run lives, run names (the only place a file is named)
    attempts.py     attempts.jsonl's typed events, exit codes, the retry rule
    state.py        a run's state (STATES) and what submit does with it (ACTIONS), decided once
    sweep.py        Sweep / Size / Data / Resources: a sweep file, checked at load; the arms (ARMS)
    submit.py, status.py, cancel.py    the commands
    poller.py       Poller: what waits asks the scheduler at most once per Sweep.poll_s, backed off when it fails
    sweep_edits.py  a sweep file edited under a half-done sweep: applied to runs not trained, named for the others
    sentinel.py     a trainer too frozen for its own watchdog, caught from outside (the driver, a SLURM sentinel)
    executors/      one module per back end (base.Executor): slurm.py (+ slurm_job.py, slurm_commands.py),
                    local.py (+ local_queue/)

May import: the shared modules (errors, files, lease, proc, signals, tables, text, version, cli), zbpscale.entry
(the job names kept across releases, which call back into executors/), zbpscale.data and train's torch-free modules
(schema, formats, metrics). The trainer (zbpscale.train.loop, .cli) only inside the function that runs on a compute node
(executors/slurm_job.py's run_train_job, local_queue/rank.py); zbpscale.results.summary and .bundle
only for submit --wait's table. Never results' commands (tests/test_layout.py checks). A new status column is
one entry in status.py's COLUMNS (and `cells`); a new executor is one module in executors/ added to its KINDS.
"""
