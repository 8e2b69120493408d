"""The hang watchdog's words (src/zbpscale/train/watchdog.py) against the stamps the ranks left: a single trainer
blocked is not blamed on a collective; ranks that stopped stamping are named; ranks that stamp but do not step are
a collective that never completes."""

import json
import time

from zbpscale.run.folder import RunFolder
from zbpscale.train.watchdog import Watchdog


def stamp(run, rank: int, age_s: float, pid: int) -> None:
    RunFolder(run).ranks.mkdir(parents=True, exist_ok=True)
    RunFolder(run).rank_file(rank).write_text(json.dumps({"step": 7, "alive": time.time() - age_s, "pid": pid}))


def test_the_watchdog_says_which_kind_of_hang_it_sees(tmp_path):
    stamp(tmp_path, 0, 0.5, 100)
    assert Watchdog(tmp_path, 0, 1, 5).who() == ("the trainer is alive but its step does not finish (a call that "
                                                 "never returns)")
    stamp(tmp_path, 1, 0.5, 101)
    assert Watchdog(tmp_path, 0, 2, 5).who() == "every rank is alive but blocked (a collective that never completes)"
    stamp(tmp_path, 1, 30, 101)
    assert Watchdog(tmp_path, 0, 2, 5).who() == "rank 1 (pid 101, silent for 30 s) stopped reporting"
    assert Watchdog(tmp_path, 0, 3, 5).who() == ("rank 1 (pid 101, silent for 30 s), rank 2 (never reported) stopped "
                                                 "reporting")
