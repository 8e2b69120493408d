"""Every fixed time limit of the test suite against the time its wait took: the margins, worst first.

    ZBPSCALE_TIME_LIMITS=limits.jsonl python -m pytest      # tests/conftest.py writes one line per wait
    python tools/time_limits.py limits.jsonl                 # exit 1: a limit with less than --margin to spare
    python tools/time_limits.py a.jsonl b.jsonl --margin 3 --all

A wait is a subprocess's `timeout=` (Popen.communicate or wait, so subprocess.run too) or conftest's
`wait_until`; its line says where in tests/ the limit is written, the test, the limit and the seconds taken. The
table has one row per place: the limit, how many waits it bounded, the longest, and the margin (limit / longest).
A limit must hold with 3x to spare on a loaded 2-core machine of either kind (the suite under xdist is such a
machine), so run the suite there and read the table; a wait that did expire is shown as such.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
from pathlib import Path


def read(paths: list[Path]) -> list[dict]:
    lines = []
    for path in paths:
        lines += [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return lines


def places(waits: list[dict]) -> list[dict]:
    """One row per place a limit is written: the smallest margin any of its waits had."""
    rows: dict[str, dict] = {}
    for w in waits:
        row = rows.setdefault(w["where"], {"where": w["where"], "waits": 0, "expired": 0, "margin": float("inf")})
        row["waits"] += 1
        row["expired"] += bool(w["expired"])
        margin = w["limit"] / max(w["took"], 1e-3)
        if w["expired"] or margin < row["margin"]:
            row.update(margin=0.0 if w["expired"] else margin, limit=w["limit"], took=w["took"], test=w["test"])
    return sorted(rows.values(), key=lambda r: r["margin"])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("logs", nargs="+", type=Path, help="JSONL files written under ZBPSCALE_TIME_LIMITS")
    p.add_argument("--margin", type=float, default=3.0, help="the least margin a limit may have (default 3)")
    p.add_argument("--all", action="store_true", help="every place, not only those under the margin")
    args = p.parse_args(argv)
    missing = [str(path) for path in args.logs if not path.is_file()]
    if missing:
        print(f"error: no such file: {missing[0]} (hint: run the suite with ZBPSCALE_TIME_LIMITS={missing[0]})",
              file=sys.stderr)
        return 2
    rows = places(read(args.logs))
    short = [r for r in rows if r["margin"] < args.margin]
    print(f"{'margin':>7}  {'limit s':>8}  {'took s':>8}  {'waits':>5}  place (the tightest wait's test)")
    for r in rows if args.all else short:
        margin = "EXPIRED" if r["expired"] else f"{r['margin']:.1f}x"
        print(f"{margin:>7}  {r['limit']:>8.0f}  {r['took']:>8.1f}  {r['waits']:>5}  {r['where']} ({r['test']})")
    print(f"{len(rows)} places with a limit, {sum(r['waits'] for r in rows)} waits; "
          f"{len(short)} with less than {args.margin:g}x to spare")
    return 1 if short else 0


if __name__ == "__main__":
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # `| head` ends the table quietly
    sys.exit(main())
