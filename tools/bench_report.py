"""`zbpscale report` at scale: the page of a sweep of `--runs` runs, its size, the time to write it and to open it.

Builds the run folders tools/bench_status.py builds (every preset size x bp, zbp_n16, zbp_n64, seed after seed:
1,000 runs are 8 sizes x 3 arms x 42 seeds; `--records` train records each, an eval every 50), collects them
(`zbpscale collect`), writes the report (`zbpscale report`) and opens it in headless Chromium
(tools/browser_check.py; left out where Chromium is missing), which must see no console error and no request.

  python tools/bench_report.py                      # 1,000 runs of 1,000 records
  python tools/bench_report.py --runs 36 --json     # the ladder's 36 runs
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import browser_check  # noqa: E402
from bench_status import build  # noqa: E402
from zbpscale.results.report import SECTIONS  # noqa: E402


def timed(*argv: str, cwd: Path) -> float:
    t = time.perf_counter()
    subprocess.run([sys.executable, "-m", "zbpscale.cli", *argv], cwd=cwd, check=True, capture_output=True)
    return time.perf_counter() - t


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=1000)
    p.add_argument("--records", type=int, default=1000, help="train records per run")
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="zbpscale-bench-report-") as tmp:
        root = Path(tmp)
        build(root / "jobs" / "ladder", args.runs, args.records)
        figures = {"collect_s": timed("collect", "jobs/ladder", "--out", "results", cwd=root),
                   "report_s": timed("report", "results", "-o", "report.html", cwd=root)}
        page = (root / "report.html").read_text()
        figures["report_mb"] = round(len(page.encode()) / 1e6, 2)
        figures["sections_mb"] = {s: round(len(part.split("</section>")[0].encode()) / 1e6, 2)
                                  for s, part in re.findall(r'<section id="(\w+)">(.*?)(?=<section id=|\Z)', page,
                                                            flags=re.S)}
        if browser_check.available():
            t = time.perf_counter()
            seen = browser_check.check(root / "report.html", ids=[s for s in SECTIONS if s != "lr"])
            figures["browser_s"] = round(time.perf_counter() - t, 2)  # Chromium's start included (~0.4 s)
            figures["browser_clean"] = not (seen["console_errors"] or seen["requests"] or seen["missing_ids"])
    figures = {"runs": args.runs, "records": args.records, **{k: round(v, 2) if isinstance(v, float) else v
                                                             for k, v in figures.items()}}
    print(json.dumps(figures) if args.json else "\n".join(f"{k}: {v}" for k, v in figures.items()))
    return 0 if figures.get("browser_clean", True) else 1


if __name__ == "__main__":
    sys.exit(main())
