"""`python -m zbpscale.train ...` (or `torchrun -m zbpscale.train ...`): one run by hand (train/cli.py)."""

import sys

from zbpscale.train.cli import main

sys.exit(main())
