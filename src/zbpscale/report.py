"""`python -m zbpscale.report ...`: the same as `zbpscale report ...` (zbpscale/results/report.py)."""

import sys

from zbpscale.cli import module_main

if __name__ == "__main__":
    sys.exit(module_main("report"))
