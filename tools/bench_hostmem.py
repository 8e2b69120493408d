"""A CPU trainer with and without train/hostmem.keep_freed_memory, side by side: CPU seconds (user, system), page
faults and wall time of whole trainer processes (`python -m zbpscale.train`, start-up included), alternating the
two arms `--repeat` times per size on the same data. The "without" arm is the same trainer with keep_freed_memory
replaced by a no-op before it trains. Also checks that both arms log the same losses, bit for bit.

    python tools/bench_hostmem.py                          # nano (the tests' size) and tiny (the smoke sweep's)
    python tools/bench_hostmem.py --sizes nano --steps 81 --repeat 3
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))

RUN = ("import sys; import zbpscale.train.hostmem as h\n"
       "if sys.argv[1] == 'without': h.keep_freed_memory = lambda: False\n"
       "from zbpscale.train.cli import main; sys.exit(main(sys.argv[2:]))")


def prepare(out: Path) -> Path:
    from zbpscale.data.prepare import PrepConfig
    from zbpscale.data.prepare import prepare as run_prep

    data = out / "embedded"
    run_prep(PrepConfig(source="embedded", out=data, offline=True), log=lambda line: None)
    return data


def one(arm: str, size: str, steps: int, batch: int, data: Path, run_dir: Path) -> dict:
    argv = [sys.executable, "-c", RUN, arm, "--run-dir", str(run_dir), "--size", size, "--data", str(data),
            "--steps", str(steps), "--set", f"global_batch={batch}", "--set", "eval_every=0"]
    began = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": str(REPO / "src")})
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - began
    proc.returncode = os.waitstatus_to_exitcode(status)
    err = proc.stderr.read()
    proc.stderr.close()
    if proc.returncode != 0:
        raise SystemExit(f"{arm} {size}: trainer exited {proc.returncode}: {err[-2000:]}")
    losses = [json.loads(line)["loss"] for line in (run_dir / "metrics.jsonl").read_text().splitlines()
              if json.loads(line)["kind"] == "train"]
    return {"user": usage.ru_utime, "sys": usage.ru_stime, "faults": usage.ru_minflt, "wall": wall, "losses": losses}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="nano,tiny")
    parser.add_argument("--steps", type=int, default=41)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--repeat", type=int, default=2)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="zbpscale-bench-hostmem-") as tmp:
        data = prepare(Path(tmp))
        threads = os.environ.get("OMP_NUM_THREADS", "unset")
        print(f"{args.steps} steps, global batch {args.batch}, OMP_NUM_THREADS={threads}; median of {args.repeat} "
              "whole processes per arm")
        print(f"{'size':6s} {'arm':8s} {'user s':>7s} {'sys s':>7s} {'CPU s':>7s} {'faults':>10s} {'wall s':>7s}")
        for size in args.sizes.split(","):
            got: dict[str, list[dict]] = {"without": [], "with": []}
            for i in range(args.repeat):
                for arm in (("without", "with") if i % 2 == 0 else ("with", "without")):
                    got[arm].append(one(arm, size, args.steps, args.batch, data, Path(tmp) / f"{size}-{arm}-{i}"))
            med = {arm: {k: statistics.median(r[k] for r in rows) for k in ("user", "sys", "faults", "wall")}
                   for arm, rows in got.items()}
            for arm in ("without", "with"):
                m = med[arm]
                print(f"{size:6s} {arm:8s} {m['user']:7.1f} {m['sys']:7.1f} {m['user'] + m['sys']:7.1f} "
                      f"{m['faults']:10,.0f} {m['wall']:7.1f}")
            cpu = {arm: med[arm]["user"] + med[arm]["sys"] for arm in med}
            same = all(r["losses"] == got["without"][0]["losses"] for rows in got.values() for r in rows)
            print(f"{size:6s} with/without: CPU {cpu['with'] / cpu['without']:.2f}x, wall "
                  f"{med['with']['wall'] / med['without']['wall']:.2f}x; losses bit for bit equal: {same}")


if __name__ == "__main__":
    main()
