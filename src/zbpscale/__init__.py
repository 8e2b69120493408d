"""zbpscale: zeroth-order backpropagation (ZBP) against backpropagation across a ladder of model sizes."""

import sys

__version__ = "0.1.0"

if sys.argv[:1] == ["-m"] or sys.argv[0].rpartition("/")[2] == "zbpscale":  # `python -m zbpscale.<command>`,
    # or the `zbpscale` script, still importing (torch takes seconds)

    def _interrupted(kind, value, tb, _default=sys.excepthook):
        """A Ctrl-C before the command's own handlers are in place is one line, not an import traceback."""
        if issubclass(kind, KeyboardInterrupt):
            print("interrupted while starting; nothing was done", file=sys.stderr)
            return
        _default(kind, value, tb)

    sys.excepthook = _interrupted
