"""`zbpscale collect SWEEP --out results/<tag>`: a small, self-contained bundle of a sweep's runs.

    zbpscale collect sweeps/smoke.py --out results/smoke        # from the sweep file: runs not started listed too (new)
    zbpscale collect jobs/smoke --out results/smoke             # from the sweep folder, as found on disk
    zbpscale collect sweeps/ladder.py --out results/ladder --with-ckpt   # plus each run's latest checkpoint

The bundle's files are listed in bundle.py; its rows are results/summary.py's RunSummary.
Safe to re-run: runs are keyed by name, files are rewritten only when they changed (an unchanged sweep gives a
byte-identical bundle), a run whose folder is gone keeps its collected copy. Runs still in progress are
collected as they are (whole JSONL lines only) and marked by their state, as `zbpscale status` derives it.
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import hashlib
import io
import json
import os
import shutil
import time
from pathlib import Path

from zbpscale.argtypes import value_or_positional
from zbpscale.errors import ConfigError
from zbpscale.files import atomic_write, unwritable
from zbpscale.results.bundle import FORMAT, VERSION, Bundle, default_out, write_if_changed
from zbpscale.results.summary import FIELDS, RunSummary, same_run, sort_key, summarize
from zbpscale.run.folder import RunFolder
from zbpscale.tables import named, plural, seed_count
from zbpscale.text import matches, patterns, select, shown_path


# ------------------------------------------------------------------------------------------------ files
def _sync_run(src: RunFolder, dst: RunFolder, *, with_ckpt: bool) -> tuple[bool, bool]:
    """Copy the run's small files (whole JSONL lines only) and, if asked, its latest checkpoint; (whether the copy
    changed, whether a checkpoint was asked for and there was none)."""
    changed = False
    for name in RunFolder.RECORDS:
        source, target = getattr(src, name), getattr(dst, name)
        if source.is_file():
            data = source.read_bytes()
            if source.suffix == ".jsonl":
                data = data[: data.rfind(b"\n") + 1]  # a line being written is left for the next collect
            changed |= write_if_changed(target, data)
    ckpts = src.list_checkpoints() if with_ckpt else []
    if ckpts:
        step, latest = ckpts[-1]
        target = dst.checkpoint(step)
        if not target.exists() or target.stat().st_size != latest.stat().st_size:  # named checkpoints never change
            target.parent.mkdir(parents=True, exist_ok=True)
            with open(latest, "rb") as fh:
                atomic_write(target, lambda out: shutil.copyfileobj(fh, out, 1 << 24))
            changed = True
        for _, old in dst.list_checkpoints():
            if old != target:
                old.unlink()
                changed = True
    return changed, with_ckpt and not ckpts


def file_entry(path: Path) -> dict:
    """A bundle file's entry in the manifest: its size and, but for a checkpoint, its sha256."""
    entry: dict = {"bytes": path.stat().st_size}
    if path.suffix != ".pt":
        entry["sha256"] = hashlib.sha256(path.read_bytes()).hexdigest()
    return entry


def _csv(rows: list[RunSummary]) -> bytes:
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=FIELDS, lineterminator="\n")
    writer.writeheader()
    for row in rows:
        writer.writerow({k: ("" if v is None else v) for k, v in dataclasses.asdict(row).items()})
    return out.getvalue().encode()


def tuned_sizes(sweep) -> dict | None:
    """summary.json's `tune`: the sizes a tuning sweep fits its lr law on, those it checks it at, and its near-best
    margin (Tune.near; None: the sweep does not tune its lr)."""
    from zbpscale.jobs.tuning import law_sizes

    if sweep.tune is None:
        return None
    return {"sizes": law_sizes(sweep), "check": [s.name for s in sweep.sizes if s.name in sweep.tune.check],
            "near": sweep.tune.near}


def superseded(kept: dict[str, RunSummary], now: dict[str, RunSummary], *, planned: bool) -> list[tuple[str, str]]:
    """[(run, why)] of the rows an earlier collect wrote, of runs not found now (`kept`'s names not in `now`), that
    would mislead the bundle: a run of the size, arm and seed of a run found now (a run trained by hand, moved
    aside: both were the study's one run there), and, collecting a sweep file, a grid run it no longer plans that
    never answered (its size and arm would wait for it for ever)."""
    from zbpscale.results.lr import grid_answer

    taken = {(r.size, r.arm, r.seed): r.run for r in now.values() if r.role != "tuning"}
    out = []
    for name, r in kept.items():
        if name in now:
            continue
        if r.role != "tuning" and (r.size, r.arm, r.seed) in taken:
            out.append((name, f"{taken[r.size, r.arm, r.seed]} is the run of size {r.size}, arm {r.arm}, seed "
                              f"{r.seed} now"))
        elif r.role == "tuning" and planned and grid_answer(r) is None:
            out.append((name, "a grid run the sweep file no longer plans, which never answered"))
    return out


# ------------------------------------------------------------------------------------------------ collect
def collect(sweep: str | Path, out: str | Path | None = None, *, with_ckpt: bool | str = False,
            log=print) -> list[RunSummary]:
    """Collect (or update) the bundle at `out` (default: `default_out`); returns the summary rows.
    with_ckpt: also copy the latest checkpoint of every run (True) or of the runs matching comma-separated
    name patterns ('s1b-*,*-bp'), as `zbpscale upload --with-ckpt` takes them."""
    from zbpscale.jobs.runs import decided, find_runs

    path = Path(sweep)
    if not path.exists():
        from zbpscale.jobs.sweep import not_found

        raise not_found(path)
    for held in (path, path.parent, path.parent.parent):  # a bundle, or in one (runs/, a run's copy, figures/)
        made = Bundle(held).read_manifest() if path.is_dir() else None
        if isinstance(made, dict) and made.get("format") == FORMAT:
            source = made.get("source", "SWEEP")
            raise ConfigError(f"{path} is a collected results folder (of sweep {made.get('sweep')!r})" if held == path
                              else f"{path} is inside the collected results folder {held}",
                              hint=f"collect the sweep it came from: zbpscale collect {source}")
    found = find_runs(str(path), planned_only=True)
    if len(found) > 1:
        raise ConfigError(f"{path} holds {len(found)} sweeps ({', '.join(n for n, _ in found)})",
                          hint="name one: zbpscale collect jobs/<sweep> (or its sweep file)")
    if not found[0][1]:
        raise ConfigError(f"{path} holds no run folders (folders with a config.json, metrics.jsonl or attempts.jsonl)",
                          hint="give the sweep folder, e.g. jobs/smoke, or the sweep file")
    ((name, sources),) = found
    bundle = Bundle(out or default_out(sources[0].run_dir.parent))
    if not any(r.run_dir.is_dir() or bundle.run(r.name).path.is_dir() for r in sources):  # never submitted
        raise ConfigError(f"no run of sweep {name} has a folder yet: nothing to collect",
                          hint=f"submit it first: zbpscale submit {path}")
    runs_at = sources[0].run_dir.parent.resolve()
    if bundle.path.resolve() == runs_at or runs_at in bundle.path.resolve().parents:  # '..' and links followed
        raise ConfigError(f"--out {bundle.path} is inside the sweep's folder of runs ({runs_at})",
                          hint=f"give the bundle a folder of its own (the default: {default_out(runs_at)})")
    if bundle.path.resolve() in runs_at.parents:
        raise ConfigError(f"--out {bundle.path} holds the sweep's folder of runs ({runs_at})",
                          hint=f"give the bundle a folder of its own (the default: {default_out(runs_at)})")
    if not _ours(bundle):
        raise ConfigError(f"{bundle.path} holds files and is not a results folder collect wrote: they are not "
                          "written over", hint="give --out a new folder for the bundle")
    if (why := unwritable(bundle.path)) is not None:
        raise ConfigError(f"cannot write the bundle into {bundle.path}: {why}",
                          hint="give --out a folder this process can write")
    ckpt_patterns = ["*"] if with_ckpt is True else patterns(with_ckpt or None)
    if with_ckpt and with_ckpt is not True:  # the runs named: a pattern that names none is a mistake, as --only's
        select(sources, with_ckpt, option="--with-ckpt")
    looked, _ = decided(sources, sources[0].run_dir.parent.parent)  # every run, as status decides them
    looks = {r.name: r for r in looked}  # the look at its folder each was decided on, for its summary too
    old_manifest = bundle.read_manifest()
    if old_manifest and old_manifest.get("sweep") != name:
        raise ConfigError(f"{bundle.path} holds sweep {old_manifest.get('sweep')!r}, not {name!r}",
                          hint="collect each sweep into its own results/<tag>")
    other = (bundle.path.resolve() / str((old_manifest or {}).get("runs_at") or runs_at)).resolve()
    if other != runs_at and other.is_dir() and runs_at.is_dir():  # two studies of one sweep name: not mixed
        raise ConfigError(f"{bundle.path} holds the runs of {other}; {runs_at} is another folder of runs of sweep "
                          f"{name!r}: collected into one bundle, their rows would mix",
                          hint=f"give --out a folder of its own, or delete {bundle.path} to collect it anew")
    try:
        rows = {r.run: r for r in bundle.read_summary()} if bundle.summary_json.exists() else {}
        kept_tune = bundle.read_tune() if bundle.summary_json.exists() else None
    except ConfigError as err:  # a summary cut or garbled: written anew from the runs (what collecting again is for)
        log(f"{err.args[0]}: written anew from the runs")
        rows, kept_tune = {}, None
    sweep_file = next((s.planned.sweep for s in sources if s.planned is not None), None)
    tune = tuned_sizes(sweep_file) if sweep_file is not None else kept_tune  # collected from its folder: as it was
    if sweep_file is not None and tune is not None:  # the grid runs it plans now: a grid narrowed leaves some out
        tune["grid"] = sorted(s.name for s in sources if s.planned is not None and s.planned.role == "tuning")
    changed, summaries = [], {}
    for src in sources:
        config = src.planned.train_config().to_dict() if src.planned else None
        seen = looks.get(src.name)
        row = summarize(seen.seen if seen else src.run_dir, name=src.name, size=src.size, arm=src.arm, seed=src.seed,
                        state=(seen.state.state, seen.state.reason or None) if seen else ("new", None), config=config,
                        role=src.planned.role if src.planned else "")
        if src.planned is not None and src.planned.waits_for and not RunFolder(src.run_dir).config.exists():
            row = dataclasses.replace(row, lr=None)  # a final run whose lr its tuning has not given yet
        summaries[src.name] = row
    if twins := same_run(summaries.values()):
        raise ConfigError(f"{path}: {twins}", hint="keep one run per size, arm and seed in the sweep's folder (move "
                          "the other aside), or train it as another seed")
    no_ckpt: list[str] = []  # runs --with-ckpt names that have none to copy
    for src in sources:
        row = summaries[src.name]
        if not src.run_dir.is_dir() and bundle.run(src.name).path.is_dir():
            log(f"{src.name}: no run folder at {src.run_dir}; keeping the copy collected before")
            continue
        if src.run_dir.is_dir():
            synced, none = _sync_run(RunFolder(src.run_dir), bundle.run(src.name),
                                     with_ckpt=matches(src.name, ckpt_patterns))
            changed += [src.name] if synced else []
            no_ckpt += [src.name] if none else []
        rows[src.name] = row
    for gone, why in superseded(rows, summaries, planned=sweep_file is not None):
        del rows[gone]
        shutil.rmtree(bundle.run(gone).path, ignore_errors=True)
        log(f"{gone}: left out of the bundle, where an earlier collect put it: {why}")
    # run folders beside the planned ones that the sweep file does not plan: left out (status shows them), said
    unplanned = [p.name for p in RunFolder.all_in(runs_at, but=summaries)] if sweep_file is not None else []
    if unplanned:
        log(f"note: {plural(len(unplanned), 'run folder')} in {runs_at} that the sweep file does not plan left out "
            f"({named(unplanned)}): zbpscale collect {shown_path(runs_at)} takes every run folder there")
    for kept in (n for n in rows if n not in summaries):  # its folder deleted or moved since: said, as a planned one
        log(f"{kept}: the sweep file no longer plans it; keeping the copy collected before" if kept in unplanned
            else f"{kept}: no run folder in {runs_at}; keeping the copy collected before")
    ordered = sorted(rows.values(), key=sort_key)
    summary = {"sweep": name, "fields": list(FIELDS), "runs": [dataclasses.asdict(r) for r in ordered],
               **({"tune": tune} if tune else {})}
    write_if_changed(bundle.summary_json, (json.dumps(summary, indent=1) + "\n").encode())
    write_if_changed(bundle.summary_csv, _csv(ordered))
    files = {str(p.relative_to(bundle.path)): file_entry(p) for p in sorted(bundle.runs.rglob("*"))
             if p.is_file() and not p.name.startswith(".")} if bundle.runs.is_dir() else {}
    manifest = {"format": FORMAT, "version": VERSION, "sweep": name, "source": str(sweep),
                "runs_at": os.path.relpath(runs_at, bundle.path.resolve()),  # from the bundle: no machine's path
                "with_ckpt": bool(ckpt_patterns) or bool((old_manifest or {}).get("with_ckpt")),
                "runs": {r.run: r.state for r in ordered}, "files": files}
    if old_manifest is None or {k: v for k, v in old_manifest.items() if k != "collected"} != manifest:
        manifest["collected"] = time.strftime("%Y-%m-%dT%H:%M:%S%z")
        write_if_changed(bundle.manifest, (json.dumps(manifest, indent=1) + "\n").encode())
    counts: dict[str, int] = {}
    for r in ordered:
        counts[r.state] = counts.get(r.state, 0) + 1
    log(f"{bundle.path}: {plural(len(ordered), 'run')}, {seed_count(r.seed for r in ordered)} ("
        + ", ".join(f"{n} {s}" for s, n in counts.items()) + "); "
        + (f"updated {', '.join(changed)}" if changed else "no run changed"))
    if no_ckpt:
        log(f"note: --with-ckpt: {plural(len(no_ckpt), 'run')} without a checkpoint to copy ({named(no_ckpt)})")
    for r in ordered:
        if r.diverged:  # before anyone reads a figure whose axis it stretches
            log(f"note: {r.run} diverged: {r.diverged}")
    where = shown_path(bundle.path)  # as it is typed: quoted where it holds a space
    log(f"next: zbpscale plot {where} (table and figures); zbpscale report {where} (one HTML page)")
    return ordered


def _ours(bundle: Bundle) -> bool:
    """Whether collect may write into the bundle's folder: none or empty, a bundle collect wrote (its manifest names
    the sweep, or, garbled, lies beside nothing but what collect, plot and report write), or one a collect that was
    stopped left before its manifest (its runs/, and its summaries)."""
    try:
        names = {p.name for p in bundle.path.iterdir()}
    except (FileNotFoundError, NotADirectoryError):
        return True
    if not names or "sweep" in (bundle.read_manifest() or {}):
        return True
    made = {p.name for p in (bundle.runs, bundle.summary_json, bundle.summary_csv)}
    if bundle.manifest.name in names:  # a manifest garbled (read as none): the folder is collect's if all else is
        made |= {p.name for p in (bundle.manifest, bundle.table, bundle.claims, bundle.figures, bundle.report)}
    return bundle.runs.name in names and names <= made


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("sweep", nargs="?", help="a sweep file (sweeps/smoke.py) or a sweep folder (jobs/smoke)")
    p.add_argument("--out", metavar="DIR", help="the bundle folder (default: results/<sweep name> beside the jobs "
                                                "folder of its runs, in the project folder)")
    p.add_argument("--with-ckpt", nargs="?", const="*", metavar="RUNS",
                   help="also copy the latest checkpoint of every run, or of the runs matching these comma-separated "
                        "patterns (e.g. 's1b-*')")


def run(args: argparse.Namespace) -> None:
    value_or_positional(args, "sweep", "with_ckpt", "*", needs="give a sweep file or folder: zbpscale collect "
                                                              "sweeps/ladder.py [--with-ckpt [RUNS]]")
    collect(args.sweep, args.out, with_ckpt=args.with_ckpt)

