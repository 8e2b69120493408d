"""`python -m zbpscale.upload ...`: the same as `zbpscale upload ...` (zbpscale/results/upload.py)."""

import sys

from zbpscale.cli import module_main

if __name__ == "__main__":
    sys.exit(module_main("upload"))
