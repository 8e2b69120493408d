"""`python -m zbpscale.collect ...`: the same as `zbpscale collect ...` (zbpscale/results/collect.py)."""

import sys

from zbpscale.cli import module_main

if __name__ == "__main__":
    sys.exit(module_main("collect"))
