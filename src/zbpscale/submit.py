"""`python -m zbpscale.submit ...`: the same as `zbpscale submit ...` (zbpscale/jobs/submit.py)."""

import sys

from zbpscale.cli import module_main

if __name__ == "__main__":
    sys.exit(module_main("submit"))
