"""The `zbpscale` command: one subcommand per job, heavy imports inside the subcommand that needs them.

A `ZbpError` (the user's mistake) prints as one red line on stderr and exits 2; anything else is a bug and
keeps its traceback.
"""

from __future__ import annotations

import argparse
import sys

from zbpscale.errors import ZbpError


def _cmd_sizes(args: argparse.Namespace) -> None:
    from zbpscale.schema import size_table

    print(size_table())


def _cmd_prepare_data(args: argparse.Namespace) -> None:
    from zbpscale.data import prepare_cli

    prepare_cli.run(args)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="zbpscale", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("sizes", help="list the model size presets with their parameter counts")
    p.set_defaults(func=_cmd_sizes)

    # `zbpscale submit ...` is handed whole to `python -m zbpscale.submit` (see main).
    sub.add_parser("submit", help="plan and submit a sweep (same as python -m zbpscale.submit)", add_help=False)
    sub.add_parser("cancel", help="stop a sweep's runs cleanly (checkpoint first); submit again to resume",
                   add_help=False)
    sub.add_parser("status", help="every run of a sweep at a glance (exit 0 complete, 1 failed, 3 unfinished)",
                   add_help=False)

    p = sub.add_parser("prepare-data", help="tokenize a corpus into GPT-2 BPE uint16 shards")
    from zbpscale.data import prepare_cli

    prepare_cli.add_arguments(p)
    p.set_defaults(func=_cmd_prepare_data)

    from zbpscale import collect, doctor, plot, upload  # light at import: their heavy imports are inside run()

    for module, help_text in ((collect, "gather a sweep's runs into results/<tag> (metrics, configs, summary)"),
                              (plot, "figures and a per-run table of a collected results folder"),
                              (upload, "push a results folder to a private Hugging Face repo (token from env)"),
                              (doctor, "check this machine: versions, GPUs, disk, data, SLURM, tokenizer")):
        name = module.__name__.rsplit(".", 1)[1]
        p = sub.add_parser(name, help=help_text, description=module.__doc__.splitlines()[0])
        module.add_arguments(p)
        p.set_defaults(func=module.run)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["submit"]:
        from zbpscale import submit

        return submit.main(argv[1:])
    if argv[:1] == ["cancel"]:
        from zbpscale import cancel

        return cancel.main(argv[1:])
    if argv[:1] == ["status"]:
        from zbpscale import status

        return status.main(argv[1:])
    args = build_parser().parse_args(argv)
    try:
        code = args.func(args)
    except ZbpError as err:
        print(f"\033[31merror:\033[0m {err}" if sys.stderr.isatty() else f"error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    return code or 0


if __name__ == "__main__":
    sys.exit(main())
