"""`python -m zbpscale.status ...`: the same as `zbpscale status ...` (zbpscale/jobs/status.py)."""

import sys

from zbpscale.cli import module_main

if __name__ == "__main__":
    sys.exit(module_main("status"))
