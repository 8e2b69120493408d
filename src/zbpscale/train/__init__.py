"""Training one run: the model and its configs, the loop, and everything the loop writes into the run folder.

    model.py        the OLMo2-style transformer with its physical (ZBP) and digital parts
    loop.py         train(cfg, run_dir): the loop, resume, evaluation, stop signals; loop's own command in cli.py
    dist.py         DDP set-up and collectives;  checkpoint.py  atomic checkpoints, RNG states, safe loading
    metrics.py      the writer of metrics.jsonl and heartbeat.json (their types: run/records.py) (torch-free)
    diagnostics.py  rho_k and the NSR constant c (rows typed in run/records.py);  numerics.py  what a run computed with
    watchdog.py     a hung collective ends the process;  cli.py  `python -m zbpscale.train`
    exits.py        the exit codes by which a training process tells its executor how it ended (torch-free)
    trackers.py     TensorBoard, W&B and the seam a tracker plugs into;  wandb_log.py  W&B's offline files read back

May import: zbpscale.zbp, zbpscale.data, zbpscale.run (the run folder, its config and record formats, the word
for how an attempt ended) and
the shared modules (argtypes, bulk, cached, errors, files, lease, proc, signals, tables, text, version). Nothing of
zbpscale.jobs, nothing of zbpscale.results (tests/test_layout.py checks). A new diagnostic is
a field of run/records.py's DiagRecord (or a row type there), computed in diagnostics.py and drawn in
results/plot.py.
"""
