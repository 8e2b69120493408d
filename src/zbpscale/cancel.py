"""`python -m zbpscale.cancel ...`: the same as `zbpscale cancel ...` (zbpscale/jobs/cancel.py)."""

import sys

from zbpscale.cli import module_main

if __name__ == "__main__":
    sys.exit(module_main("cancel"))
