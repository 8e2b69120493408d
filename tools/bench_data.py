"""Prep throughput against raw tiktoken, on the same text, in the same run.

    python tools/bench_data.py                  # ~24 MB of text, prep with 1 and 2 workers
    python tools/bench_data.py --mb 64 --workers 1,2,4 --json

The text is the embedded corpus (CPython's help topics) repeated to `--mb` megabytes, written as parquet in
FineWeb-Edu's column layout, so the prep reads it the way it reads a downloaded FineWeb-Edu. Compared:
    raw        one process calling `encode_ordinary` on each document (the reference)
    prep (N)   `prepare()` end to end with N tokenizer processes: reading parquet through `datasets`, worker
               start-up, tokenizing, packing, sha256, fsync'd shard writes and the manifest
    after start-up   the rate from the first packed batch to the end, as the prep records it in its
               manifest (`last_run`): what a long prep runs at once imports, worker spawning and
               building the encoding in each worker are behind it
    raw (N)    N forked processes tokenizing their share of the same documents: the machine's own ceiling for N
               (on the 2-core development machines two processes reach about 0.86 x raw each, not 1.00)
Goal: prep tokens/s >= 0.85 x raw x N for small N (and as close to linear in N as the cores allow: raw (N)).
Wall-clock figures need idle cores, and small shared VMs are noisy (raw tiktoken alone varies by +-20% from
one run to the next on the 2-core development machines): the load average is printed, each round runs raw and
the preps back to back, ratios are taken within a round, and medians over `--repeat` rounds are reported.
"tok/CPU-s x raw" (tokens per CPU-second of all the prep's processes, against raw) is what the pipeline costs
on top of tokenizing, whatever the load.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import resource
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))


def corpus(mb: float) -> list[str]:
    from zbpscale.data.sources import embedded_documents

    docs = embedded_documents()
    size = sum(len(d.encode()) for d in docs)
    copies = max(1, round(mb * 1e6 / size))
    return [d for _ in range(copies) for d in docs]


def write_parquet(docs: list[str], folder: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    n = len(docs)
    pq.write_table(pa.table({"text": docs, "id": [f"<urn:uuid:{i}>" for i in range(n)],
                             "url": [f"https://example.org/{i}" for i in range(n)], "score": [3.0] * n}),
                   folder / "part_0.parquet", row_group_size=1000)


def _cpu_seconds() -> float:
    """CPU time of this process and of its finished children (the tokenizer workers, once joined)."""
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def bench_raw(docs: list[str]) -> dict:
    from zbpscale.data.tokenizer import get_gpt2_encoding

    enc, _ = get_gpt2_encoding()
    t0, c0 = time.perf_counter(), _cpu_seconds()
    tokens = sum(len(enc.encode_ordinary(d)) for d in docs)
    return {"mode": "raw encode_ordinary", "workers": 1, "tokens": tokens, "seconds": time.perf_counter() - t0,
            "cpu_seconds": _cpu_seconds() - c0}


def bench_raw_parallel(docs: list[str], processes: int, tokens: int) -> dict:
    """Raw tokenizing in `processes` forked processes, each its share of the documents (`tokens` in all, as the
    raw run counted them): the machine's own ceiling for N tokenizer processes (cores that share caches and memory
    bandwidth give less than N x one)."""
    from zbpscale.data.tokenizer import get_gpt2_encoding

    enc, _ = get_gpt2_encoding()  # built before the fork: each child starts tokenizing at once
    t0, c0 = time.perf_counter(), _cpu_seconds()
    pids = []
    for k in range(processes):
        pid = os.fork()
        if pid == 0:
            try:
                for d in docs[k::processes]:
                    enc.encode_ordinary(d)
            finally:
                os._exit(0)
        pids.append(pid)
    for pid in pids:
        os.waitpid(pid, 0)
    return {"mode": "raw encode_ordinary", "workers": processes, "tokens": tokens,
            "seconds": time.perf_counter() - t0, "cpu_seconds": _cpu_seconds() - c0}


def bench_prep(src: Path, out: Path, workers: int) -> dict:
    from zbpscale.data.prepare import PrepConfig, prepare

    shutil.rmtree(out, ignore_errors=True)
    cfg = PrepConfig(source=f"local:{src}", out=out, workers=workers, val_tokens=0, shard_tokens=10_000_000)
    t0, c0 = time.perf_counter(), _cpu_seconds()
    with contextlib.redirect_stdout(io.StringIO()):  # the prep's own progress lines
        manifest = prepare(cfg, log=lambda _: None)
    return {"mode": "prep", "workers": workers, "tokens": manifest["train"]["tokens"],
            "seconds": time.perf_counter() - t0, "cpu_seconds": _cpu_seconds() - c0,
            "startup_seconds": manifest["last_run"]["startup_seconds"],
            "steady_tokens_per_s": manifest["last_run"]["steady_tokens_per_s"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=float, default=24.0, help="megabytes of text (default 24)")
    parser.add_argument("--workers", default="1,2", help="comma-separated worker counts (default 1,2)")
    parser.add_argument("--repeat", type=int, default=5, help="rounds of (raw, prep per worker count); default 5")
    parser.add_argument("--json", action="store_true", help="print one JSON record per line instead of a table")
    args = parser.parse_args()

    docs = corpus(args.mb)
    mb = sum(len(d.encode()) for d in docs) / 1e6
    load = os.getloadavg()[0]
    workers = [int(w) for w in args.workers.split(",")]
    rounds = []
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "src"
        src.mkdir()
        write_parquet(docs, src)
        for _ in range(args.repeat):  # each round: raw, then the preps, back to back on the same machine state
            raw = bench_raw(docs)
            rounds.append([raw] + [bench_raw_parallel(docs, w, raw["tokens"]) for w in workers if w > 1]
                          + [bench_prep(src, Path(tmp) / "out", w) for w in workers])

    records = []
    for k in range(len(rounds[0])):
        runs = [rnd[k] for rnd in rounds]
        raw_rates = [rnd[0]["tokens"] / rnd[0]["seconds"] for rnd in rounds]
        rates = [r["tokens"] / r["seconds"] for r in runs]
        rec = {"mode": runs[0]["mode"], "workers": runs[0]["workers"], "tokens": runs[0]["tokens"],
               "seconds": statistics.median([r["seconds"] for r in runs]), "tokens_per_s": statistics.median(rates),
               "tokens_per_s_range": [min(rates), max(rates)],
               "vs_raw": statistics.median([a / b for a, b in zip(rates, raw_rates)]),
               "cpu_efficiency_vs_raw": statistics.median([(r["tokens"] / r["cpu_seconds"]) * (rnd[0]["cpu_seconds"] /
                                                 rnd[0]["tokens"]) for r, rnd in zip(runs, rounds)])}
        rec["per_worker_vs_raw"] = rec["vs_raw"] / rec["workers"]
        if "steady_tokens_per_s" in runs[0]:
            rec["startup_seconds"] = statistics.median([r["startup_seconds"] for r in runs])
            rec["steady_tokens_per_s"] = statistics.median([r["steady_tokens_per_s"] for r in runs])
            rec["steady_vs_raw"] = statistics.median([r["steady_tokens_per_s"] / b for r, b in zip(runs, raw_rates)])
            rec["steady_per_worker_vs_raw"] = rec["steady_vs_raw"] / rec["workers"]
        rec.update(text_mb=round(mb, 1), documents=len(docs), cpus=os.cpu_count(), load_before=round(load, 2),
                   repeat=args.repeat)
        records.append(rec)
    if args.json:
        for r in records:
            print(json.dumps(r))
        return
    print(f"{mb:.1f} MB of text, {len(docs):,} documents, {os.cpu_count()} CPUs, load average {load:.2f} before; "
          f"medians of {args.repeat} rounds, ratios taken within each round")
    print(f"{'':<20}{'':>8}{'end to end':^46}{'after start-up':^39}")
    print(f"{'mode':<20}{'workers':>8}{'seconds':>9}{'tokens/s (min-max)':>28}{'x raw':>7}{'/worker':>9}"
          f"{'start-up s':>11}{'tokens/s':>12}{'x raw':>7}{'/worker':>9}{'tok/CPU-s x raw':>17}")
    for r in records:
        lo, hi = r["tokens_per_s_range"]
        steady = (f"{r['startup_seconds']:>11.2f}{r['steady_tokens_per_s']:>12,.0f}{r['steady_vs_raw']:>7.2f}"
                  f"{r['steady_per_worker_vs_raw']:>9.2f}") if "steady_tokens_per_s" in r else f"{'':>39}"
        rate = f"{r['tokens_per_s']:,.0f} ({lo / 1e6:.2f}-{hi / 1e6:.2f}M)"
        print(f"{r['mode']:<20}{r['workers']:>8}{r['seconds']:>9.2f}{rate:>28}{r['vs_raw']:>7.2f}"
              f"{r['per_worker_vs_raw']:>9.2f}{steady}{r['cpu_efficiency_vs_raw']:>17.2f}")


if __name__ == "__main__":
    main()
