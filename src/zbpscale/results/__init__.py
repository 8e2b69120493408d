"""Results: a sweep's runs gathered into a bundle, analysed, drawn and shared.

    bundle.py       Bundle: where every file of a results folder lives, and its summary's I/O
    summary.py      RunSummary: one row per run, from the run's own records
    seeds.py        the runs grouped over seeds: mean, sd and n per size and arm
    gaps.py         the gap analysis: ZBP - BP at equal tokens, seed by seed, and its power-law fit in N
    fit.py          the power law gap = a * N^b through a ladder with seeds, and its interval
    lr.py           a tuning sweep's lrs: the choice per size and arm from its grid runs, the lr law, the gap at BP's
                    best lr next to each arm's own
    table.py        table.md: the runs over seeds, then one row per run
    collect.py, plot.py, upload.py    the commands
    report.py       `zbpscale report`: the study in one self-contained HTML page (plot's figures as inline SVG)

May import: the shared modules, zbpscale.run (the run folder, its history, its config and records),
zbpscale.jobs.state (a run's state, as status says it) and, inside a function, the sweep
loader, zbpscale.jobs.runs (the runs of a sweep, decided as status decides them) and zbpscale.jobs.tuning (the rule
that picks a tuned lr). Never zbpscale.jobs.submit or
an executor. A new figure is a function in plot.py that takes typed rows and returns what it drew.
"""
