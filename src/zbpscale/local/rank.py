"""`python -m zbpscale.local.rank RUN_DIR`: one rank of a local-queue run, as drivers of releases before 2026-12-02
start it (the same environment protocol as today's; see zbpscale/local/__init__.py)."""

import sys

from zbpscale.entry import local_rank

if __name__ == "__main__":
    local_rank(sys.argv[1])
