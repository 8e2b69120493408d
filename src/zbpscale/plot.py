"""`python -m zbpscale.plot ...`: the same as `zbpscale plot ...` (zbpscale/results/plot.py)."""

import sys

from zbpscale.cli import module_main

if __name__ == "__main__":
    sys.exit(module_main("plot"))
