"""Job control: a sweep's runs as jobs on SLURM or the local queue, and what state each run is in.

    runs.py         Run: one run as the commands pass it around (name, size, arm, seed, folder, what the sweep
                    file plans, the look at its folder, its history, its job's view, its state); find_runs and
                    decided (viewed, then judged), for every command
    state.py        a run's state (STATES) and what submit does with it (ACTIONS): `decide`, a function of one
                    look at the folder (run/snapshot.py) and its job's view; an end only the scheduler knows of is
                    recorded by submit, under the sweep's lock
    reasons.py      a failed job's reason sharpened from its log's tail
    sweep.py        Sweep / Size / Data / Resources: a sweep file, checked at load; the arms (ARMS)
    sweep_checks.py where a sweep file's mistake is: field_error and the line of its field (at load, or after)
    tuning.py       a sweep's lr tuning (Tune): each final run's lr from its grid runs or the lr law, or what it
                    waits for; a grid grown at an edge
    submit.py, status.py, cancel.py    the commands
    goodput_table.py  status --goodput: each run's held hours split (run/goodput.py), and the sweep's total
    poller.py       Poller: what waits asks the scheduler at most once per Sweep.poll_s, backed off when it fails
    settings.py     what a sweep folder keeps of its sweep file (poll_s: jobs/<sweep>/sweep.json), and the defaults
    sweep_edits.py  a sweep file edited under a half-done sweep: applied to runs not trained, named for the others
    sentinel.py     a trainer too frozen for its own watchdog, caught from outside (the driver, a SLURM sentinel)
    ends.py         how an attempt ended (`why`), from what its executor saw: the one classifier of both executors
    attempt.py      what follows an attempt's end (`conclude`): started again within the run's bounds, or failed,
                    and its one end record; for both executors
    executors/      one module per back end (base.Executor, which imports none): slurm.py (+ slurm_job.py,
                    slurm_commands.py), local.py (+ local_queue/)

May import: zbpscale.run (the run folder and its history, below), the shared modules (argtypes, bulk, cached, errors,
files, lease, proc, signals, tables, text, version, cli), zbpscale.entry (the job names kept across releases, which call
back into executors/), zbpscale.data and train's torch-free modules (metrics, exits, trackers: its tracker classes
import their packages when opened). The trainer (zbpscale.train.loop, .cli) only inside the function that
runs on a compute node (executors/slurm_job.py's run_train_job, local_queue/rank.py); zbpscale.results.summary and
.bundle only for submit --wait's table; zbpscale.examples only to name the example sweeps. Never results' commands
(tests/test_layout.py checks). A new status column is one `Column` in status.py's COLUMNS; a new executor is one
module in executors/ added to its KINDS.
"""
