"""`zbpscale collect SWEEP --out results/<tag>`: a small, self-contained bundle of a sweep's runs.

    zbpscale collect sweeps/smoke.py --out results/smoke        # from the sweep file: runs not started listed too (new)
    zbpscale collect jobs/smoke --out results/smoke             # from the sweep folder, as found on disk
    zbpscale collect sweeps/ladder.py --out results/ladder --with-ckpt   # plus each run's latest checkpoint

The bundle:
  manifest.json            what was collected, from where, when, and every file with its size (and sha256)
  summary.csv, .json       one row per run (`RunSummary`)
  runs/<run>/              metrics.jsonl, config.json, attempts.jsonl, heartbeat.json, COMPLETE (those that
                           exist), and with --with-ckpt the latest checkpoints/ckpt_*.pt
Safe to re-run: runs are keyed by name, files are rewritten only when they changed (an unchanged sweep gives a
byte-identical bundle), a run whose folder is gone keeps its collected copy. Runs still in progress are
collected as they are (whole JSONL lines only) and marked by their status, as `zbpscale status` derives it.
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import hashlib
import io
import json
import math
import os
import re
import shutil
import time
import sys
from dataclasses import dataclass
from pathlib import Path

from zbpscale.runfolder import ATTEMPTS, CHECKPOINTS, COMPLETE, CONFIG, atomic_write, parse_run_name
from zbpscale.errors import ConfigError
from zbpscale.runfolder import count_ends
from zbpscale.metrics import HEARTBEAT, METRICS, read_jsonl

FORMAT, VERSION = "zbpscale-results", 1
RUN_FILES = (METRICS, CONFIG, ATTEMPTS, HEARTBEAT, COMPLETE)
IN_PROGRESS = ("running", "stalled", "queued")  # a job holds the run: its numbers are still changing


@dataclass(frozen=True, kw_only=True)
class RunSummary:
    """One row of summary.csv / summary.json: a run as its folder shows it."""

    run: str
    """Run name, `{size}-{arm}` (plus `-s{seed}`)."""
    size: str
    """Model size preset."""
    arm: str
    """Training arm: bp, zbp_n16, ..."""
    seed: int
    """Seed of the run."""
    params: int | None
    """Parameters, embeddings included."""
    params_non_embedding: int | None
    """Parameters without the token/position tables and the LM head."""
    status: str
    """As `zbpscale status` says: complete | running | stalled | queued | stopped | cancelled | failed | new."""
    in_progress: bool
    """Running, stalled or queued: a job holds the run, so its numbers will still change (a stopped, cancelled
    or failed run changes only if submitted again)."""
    reason: str | None
    """Why the run failed, stalled, stopped or was cancelled (`zbpscale status`'s one line)."""
    steps: int
    """Optimizer steps done."""
    steps_total: int | None
    """Optimizer steps of the whole run."""
    tokens: int
    """Training tokens seen so far."""
    tokens_total: int | None
    """Training tokens of the whole run."""
    final_val_loss: float | None
    """Latest validation loss (the final one once the run is complete)."""
    final_val_tokens: int | None
    """Tokens at which final_val_loss was measured."""
    best_val_loss: float | None
    """Lowest validation loss so far."""
    final_train_loss: float | None
    """Latest training loss."""
    wall_time_s: float
    """Seconds spent in training attempts (first to last record of each attempt; queueing left out)."""
    gpu_hours: float | None
    """wall time x GPUs, summed over attempts (0 for CPU runs; None when a run's device was 'auto')."""
    attempts: int
    """Training attempts started (start records)."""
    timeouts: int
    """Attempts that ended at the time limit and were requeued."""
    preemptions: int
    """Attempts that were preempted and requeued."""
    c_attn: float | None
    """NSR constant c = NSR * n / d of the attention core, mean over layers, from the latest diag record."""
    c_ffn: float | None
    """The same for the SwiGLU core."""
    impl_used: str = ""
    """The ZBP estimator's path per core in the latest attempt, e.g. 'attn=closed ffn=closed' (a slower path than
    asked means a fast one failed: the run's log and heartbeat.json say why); '' for bp."""
    diag_step: int | None
    """Step of that diag record."""
    diag_every: int | None
    """Steps between diag records, from the run's config (0: diagnostics off; None: config not known)."""
    updated: float | None
    """Unix time of the run's latest record."""


FIELDS = tuple(f.name for f in dataclasses.fields(RunSummary))


# ------------------------------------------------------------------------------------------------ summary
def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def _attempt_cost(records: list[dict]) -> tuple[float, float | None]:
    """(wall seconds, GPU-hours) summed over the attempts: each from its start record to its last record."""
    attempts: list[list[dict]] = []
    for r in records:
        if r.get("kind") == "start":
            attempts.append([r])
        elif attempts and "time" in r:
            attempts[-1].append(r)
    wall = gpu_h = 0.0
    for start, *rest in attempts:
        seconds = max(0.0, (rest[-1] if rest else start)["time"] - start["time"])
        device = start.get("config", {}).get("device")
        gpus = start.get("world_size", 1) if device == "cuda" else 0 if device == "cpu" else math.nan
        wall, gpu_h = wall + seconds, gpu_h + seconds * gpus / 3600
    return wall, (None if math.isnan(gpu_h) else gpu_h)


def summarize(run_dir: Path, *, name: str, size: str, arm: str, seed: int, state: tuple[str, str | None],
              config: dict | None = None) -> RunSummary:
    """The summary row of one run folder; `state`: (status, reason) from `zbpscale status`; `config`: the
    planned config, for runs that have not written theirs."""
    records = read_jsonl(run_dir / METRICS)
    attempts = read_jsonl(run_dir / ATTEMPTS)
    status, reason = state
    by_kind: dict[str, list[dict]] = {}
    for r in records:
        by_kind.setdefault(r.get("kind"), []).append(r)
    starts, trains, evals, diags = (by_kind.get(k, []) for k in ("start", "train", "eval", "diag"))
    if starts and "config" in starts[-1]:  # the config the run trained with
        config = starts[-1]["config"]
    elif (run_dir / CONFIG).exists():
        config = json.loads((run_dir / CONFIG).read_text())
    derived = starts[-1].get("derived", {}) if starts else {}
    if not derived and config:
        derived = _planned_numbers(config)
    cores = diags[-1].get("cores", []) if diags else []
    impl = {}
    for r in records:  # the latest attempt's: its start record, then its diag records
        if r.get("kind") == "start" or (r.get("kind") == "diag" and "impl_used" in r):
            impl = r.get("impl_used", {})
    wall, gpu_h = _attempt_cost(records)
    return RunSummary(
        run=name, size=size, arm=arm, seed=seed, params=derived.get("params"),
        params_non_embedding=derived.get("params_non_embedding"), status=status, in_progress=status in IN_PROGRESS,
        reason=reason, steps=trains[-1]["step"] + 1 if trains else 0, steps_total=derived.get("total_steps"),
        tokens=trains[-1]["tokens"] if trains else 0, tokens_total=derived.get("total_tokens"),
        final_val_loss=evals[-1]["val_loss"] if evals else None,
        final_val_tokens=evals[-1]["tokens"] if evals else None,
        best_val_loss=min(e["val_loss"] for e in evals) if evals else None,
        final_train_loss=trains[-1]["loss"] if trains else None, wall_time_s=round(wall, 3),
        gpu_hours=None if gpu_h is None else round(gpu_h, 6), attempts=len(starts),
        timeouts=count_ends(attempts, "timeout"), impl_used=" ".join(f"{c}={p}" for c, p in impl.items()),
        preemptions=count_ends(attempts, "preempted"),
        c_attn=_mean([c["c"] for c in cores if c.get("core") == "attn"]),
        c_ffn=_mean([c["c"] for c in cores if c.get("core") == "ffn"]),
        diag_step=diags[-1]["step"] if diags else None, diag_every=(config or {}).get("diag_every"),
        updated=records[-1].get("time") if records else None,
    )


def _planned_numbers(config: dict) -> dict:
    """Parameters, steps and tokens of a run that has not started (imports torch, through the model)."""
    from zbpscale.schema import TrainConfig, n_params

    cfg = TrainConfig.from_dict(config)
    return {"params": n_params(cfg.model), "params_non_embedding": n_params(cfg.model, embeddings=False),
            "total_steps": cfg.steps, "total_tokens": cfg.steps * cfg.global_batch * cfg.seq_len}


# ------------------------------------------------------------------------------------------------ runs
@dataclass(frozen=True, kw_only=True)
class Source:
    """A run to collect: where its folder is and what it is."""

    name: str
    """Run name (the key in the bundle)."""
    run_dir: Path
    """Its folder (may not exist yet)."""
    size: str
    """Model size preset."""
    arm: str
    """Training arm."""
    seed: int
    """Seed."""
    config: dict | None = None
    """Planned config (sweep files only), for runs that have not written theirs."""


def find_runs(sweep: str | Path) -> tuple[str, list[Source]]:
    """(sweep name, runs) from a sweep file (every planned run) or a sweep folder (the run folders in it)."""
    path = Path(sweep)
    if path.is_file():
        from zbpscale.sweep import expand, load_sweep

        s = load_sweep(path)
        return s.name, [Source(name=r.name, run_dir=r.run_dir, size=r.size.name, arm=r.arm.name, seed=r.seed,
                               config=r.train_config().to_dict()) for r in expand(s)]
    if not path.is_dir():
        from zbpscale.sweep import not_found

        raise not_found(path)
    runs = []
    for run_dir in sorted(p for p in path.iterdir() if p.is_dir()):
        parsed = parse_run_name(run_dir.name)
        if parsed and any((run_dir / f).exists() for f in (METRICS, CONFIG, ATTEMPTS)):
            size, arm, seed = parsed
            runs.append(Source(name=run_dir.name, run_dir=run_dir, size=size, arm=arm, seed=seed))
    if not runs:
        raise ConfigError(f"{path} holds no run folders ({{size}}-{{arm}} with a config.json or metrics.jsonl)",
                          hint="give the sweep folder, e.g. jobs/smoke, or the sweep file")
    return path.name, runs


# ------------------------------------------------------------------------------------------------ files
def _write_if_changed(dst: Path, data: bytes) -> bool:
    if dst.exists() and dst.read_bytes() == data:
        return False
    dst.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(dst, data)
    return True


def _sync_run(src: Source, dst: Path, *, with_ckpt: bool) -> bool:
    """Copy the run's small files (whole JSONL lines only) and, if asked, its latest checkpoint."""
    changed = False
    for name in RUN_FILES:
        if (src.run_dir / name).is_file():
            data = (src.run_dir / name).read_bytes()
            if name.endswith(".jsonl"):
                data = data[: data.rfind(b"\n") + 1]  # a line being written is left for the next collect
            changed |= _write_if_changed(dst / name, data)
    ckpts = sorted((src.run_dir / CHECKPOINTS).glob("ckpt_*.pt")) if with_ckpt else []
    if ckpts:
        latest, folder = ckpts[-1], dst / CHECKPOINTS
        target = folder / latest.name
        if not target.exists() or target.stat().st_size != latest.stat().st_size:  # named checkpoints never change
            folder.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(latest, folder / f".{latest.name}.tmp")
            os.replace(folder / f".{latest.name}.tmp", target)
            changed = True
        for old in folder.glob("ckpt_*.pt"):
            if old.name != latest.name:
                old.unlink()
                changed = True
    return changed


def _file_entry(path: Path) -> dict:
    entry: dict = {"bytes": path.stat().st_size}
    if path.suffix != ".pt":
        entry["sha256"] = hashlib.sha256(path.read_bytes()).hexdigest()
    return entry


def _csv(rows: list[dict]) -> bytes:
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=FIELDS, lineterminator="\n")
    writer.writeheader()
    for row in rows:
        writer.writerow({k: ("" if row.get(k) is None else row.get(k)) for k in FIELDS})
    return out.getvalue().encode()


def arm_order(arm: str) -> tuple:
    """bp first, then the ZBP arms by probe count: bp, zbp_n4, zbp_n16, zbp_n16_fwd, zbp_n64."""
    m = re.match(r"zbp_n(\d+)", arm)
    return (0, 0, arm) if arm == "bp" else (1, int(m[1]) if m else 0, arm)


def sort_key(row: dict) -> tuple:
    """Summary rows in the ladder's order: by parameters, then arm (bp first), then seed."""
    return (row["params"] if row["params"] is not None else math.inf, row["size"], arm_order(row["arm"]),
            row["seed"])


def read_summary(bundle: Path) -> list[dict]:
    """The rows of a bundle's summary.json; a ConfigError if the folder is not a collected bundle."""
    path = Path(bundle) / "summary.json"
    if not path.is_file():
        raise ConfigError(f"{bundle} is not a collected results folder (no summary.json)",
                          hint="make one with: zbpscale collect SWEEP --out " + str(bundle))
    return json.loads(path.read_text())["runs"]


# ------------------------------------------------------------------------------------------------ collect
def default_out(folder: Path) -> Path:
    """Where a sweep's bundle goes by default: results/<sweep> beside the jobs folder that holds its runs
    (`folder`: jobs/<sweep>), so that the project folder's jobs/ and results/ sit side by side wherever collect is
    run from, as the runs do."""
    folder = Path(folder).absolute()
    return folder.parent.parent / "results" / folder.name


def collect(sweep: str | Path, out: str | Path | None = None, *, with_ckpt: bool | str = False,
            log=print) -> list[dict]:
    """Collect (or update) the bundle at `out` (default: `default_out`); returns the summary rows.
    with_ckpt: also copy the latest checkpoint of every run (True) or of the runs matching comma-separated
    name patterns ('s1b-*,*-bp'), as `zbpscale upload --with-ckpt` takes them."""
    import fnmatch

    from zbpscale.status import collect_rows

    name, sources = find_runs(sweep)
    out = Path(out) if out else default_out(sources[0].run_dir.parent)
    patterns = ["*"] if with_ckpt is True else [p.strip() for p in (with_ckpt or "").split(",") if p.strip()]
    folder = sources[0].run_dir.parent
    states = {r["run"]: (r["state"], r["reason"] or None) for r in collect_rows(folder)} if folder.is_dir() else {}
    manifest_path = out / "manifest.json"
    old_manifest = json.loads(manifest_path.read_text()) if manifest_path.exists() else None
    if old_manifest and old_manifest.get("sweep") != name:
        raise ConfigError(f"{out} holds sweep {old_manifest.get('sweep')!r}, not {name!r}",
                          hint="collect each sweep into its own results/<tag>")
    old_rows = {r["run"]: r for r in read_summary(out)} if (out / "summary.json").exists() else {}
    rows, changed = dict(old_rows), []
    for src in sources:
        row = dataclasses.asdict(summarize(src.run_dir, name=src.name, size=src.size, arm=src.arm, seed=src.seed,
                                           state=states.get(src.name, ("new", None)), config=src.config))
        if not src.run_dir.is_dir() and (out / "runs" / src.name).is_dir():
            log(f"{src.name}: no run folder at {src.run_dir}; keeping the copy collected before")
            continue
        ckpt = any(fnmatch.fnmatchcase(src.name, p) for p in patterns)
        if src.run_dir.is_dir() and _sync_run(src, out / "runs" / src.name, with_ckpt=ckpt):
            changed.append(src.name)
        rows[src.name] = row
    ordered = sorted(rows.values(), key=sort_key)
    summary = json.dumps({"sweep": name, "fields": list(FIELDS), "runs": ordered}, indent=1) + "\n"
    _write_if_changed(out / "summary.json", summary.encode())
    _write_if_changed(out / "summary.csv", _csv(ordered))
    runs_dir = out / "runs"
    files = {str(p.relative_to(out)): _file_entry(p) for p in sorted(runs_dir.rglob("*"))
             if p.is_file() and not p.name.startswith(".")} if runs_dir.is_dir() else {}
    manifest = {"format": FORMAT, "version": VERSION, "sweep": name, "source": str(sweep),
                "with_ckpt": bool(patterns) or bool((old_manifest or {}).get("with_ckpt")),
                "runs": {r["run"]: r["status"] for r in ordered}, "files": files}
    if old_manifest is None or {k: v for k, v in old_manifest.items() if k != "collected"} != manifest:
        manifest["collected"] = time.strftime("%Y-%m-%dT%H:%M:%S%z")
        _write_if_changed(manifest_path, (json.dumps(manifest, indent=1) + "\n").encode())
    counts: dict[str, int] = {}
    for r in ordered:
        counts[r["status"]] = counts.get(r["status"], 0) + 1
    log(f"{out}: {len(ordered)} runs (" + ", ".join(f"{n} {s}" for s, n in counts.items()) + "); "
        + (f"updated {', '.join(changed)}" if changed else "no run changed"))
    return ordered


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("sweep", help="a sweep file (sweeps/smoke.py) or a sweep folder (jobs/smoke)")
    p.add_argument("--out", metavar="DIR", help="the bundle folder (default: results/<sweep name> beside the jobs "
                                                "folder of its runs, in the project folder)")
    p.add_argument("--with-ckpt", nargs="?", const="*", metavar="RUNS",
                   help="also copy the latest checkpoint of every run, or of the runs matching these comma-separated "
                        "patterns (e.g. 's1b-*')")


def run(args: argparse.Namespace) -> None:
    collect(args.sweep, args.out, with_ckpt=args.with_ckpt)


def main(argv: list[str] | None = None) -> int:
    """`python -m zbpscale.collect ...`, the same as `zbpscale collect ...`."""
    from zbpscale.cli import module_main

    return module_main("collect", argv)


if __name__ == "__main__":
    sys.exit(main())
