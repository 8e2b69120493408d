"""When a sweep file changes under a half-done sweep: the sweep file is the truth for what it still decides.

Each submit (and dry run) compares every run folder's config.json (in today's format) with what the sweep file
now gives (`config_changes`), and `config_notes` decides, one line per run that differs:
  - a run that has not trained (no checkpoint, no live attempt) is rewritten to match;
  - a run that has trained goes on as it was trained, except that `--apply-changes` gives it the new values of
    the fields safe on resume (run/config.py RESUME_SAFE: they decide when it evaluates, checkpoints or logs,
    never what it computes); any other change needs a new run (another name), said in the line.
A run folder whose run the file no longer plans (its size, arm or seed removed) while its job is queued or running
is named too (`unplanned_notes`, by submit, its dry run and status): the job trains on unless it is cancelled, and
the line says how (`zbpscale cancel <sweep folder> --only <run>`). A live job keeps what it was submitted with (its
size's Resources, the sweep's signal_delay_s and max_*) through its requeues: where the file now gives other values,
`settings_notes` says so, with the same cancel, after which the next submit resumes the run with them.
A dry run says what the submit would do and writes nothing. Torch-free.
"""

from __future__ import annotations

import json
from pathlib import Path

from zbpscale.files import as_json, atomic_write
from zbpscale.jobs import runs as found
from zbpscale.jobs.state import RunState
from zbpscale.jobs.sweep import PlannedRun, lr_text
from zbpscale.run.config import RESUME_SAFE, TrainConfig
from zbpscale.run.folder import RunFolder
from zbpscale.run.snapshot import Snapshot
from zbpscale.tables import ALIKE, named
from zbpscale.text import shown_path


def config_notes(runs: list[PlannedRun], states: dict[str, RunState], *, apply: bool, dry_run: bool,
                 looks: dict[str, Snapshot] | None = None) -> list[str]:
    """The sweep file is the truth for what it still decides. A run folder whose config.json differs from what
    the file now gives: a run that has not trained (no checkpoint, no live attempt) is rewritten to match; a run
    that has trained keeps its config (it resumes as it was trained), except, with `apply` (--apply-changes),
    the fields that are safe to change on resume (schema.RESUME_SAFE). One line per run either way; a dry run
    writes nothing and says what the submit would do. A final run whose lr waits for tuning (its grid grew) is
    compared once the lr is known; one whose job is live is named (it trains at the lr it was given). `looks`:
    {run name: the look its state was decided on}."""
    notes = []
    for run in runs:
        if run.waits_for:  # a final run whose lr tuning has not given yet: compared (and rewritten) once it has
            if states[run.name].state in ("queued", "running", "stalled", "unknown"):
                lr = (((looks or {}).get(run.name) or Snapshot(run.run_dir)).config or {}).get("lr")
                at = f" at lr {lr_text(lr)}" if isinstance(lr, float) else ""
                notes.append(f"{run.name}: its lr waits for tuning again (its grid grew), but its job{at} is live: "
                             f"it trains at the lr it was given unless cancelled (zbpscale cancel "
                             f"{shown_path(run.run_dir.parent)} --only {run.name})")
            continue
        changes = config_changes(run, (looks or {}).get(run.name))
        if not changes:
            continue
        state = states[run.name].state
        shown = lambda names: ", ".join(f"{n} {changes[n][0]!r} -> {changes[n][1]!r}" for n in names)  # noqa: E731
        shape = [n for n in changes if n.startswith("model.") and not n.startswith("model.zbp")]
        source = "the sweep file" if not (run.size.model_file and shape) else \
            f"its model file {run.size.model_file}" if len(shape) == len(changes) else \
            f"the sweep file and its model file {run.size.model_file}"
        if not trained(run, state):
            if not dry_run:
                rewrite_config(run)
            notes.append(f"{run.name}: config.json {'will be ' if dry_run else ''}rewritten from {source}, which "
                         f"changed since it was written (it has not trained yet): {shown(changes)}")
            continue
        safe = [n for n in changes if n in RESUME_SAFE] if apply and state != "complete" else []
        if safe:
            if not dry_run:
                rewrite_config(run, safe)
            when = "when it next resumes" if state in ("running", "stalled", "unknown") else "as it resumes"
            notes.append(f"{run.name}: --apply-changes {'will apply' if dry_run else 'applied'} {shown(safe)} "
                         f"(safe on resume; it takes them {when})")
        kept = [n for n in changes if n not in safe]
        if not kept:
            continue
        can = [n for n in kept if n in RESUME_SAFE]
        then = [f"--apply-changes applies {', '.join(can)} (safe on resume)"] if can and state != "complete" else []
        if len(can) < len(kept):
            other = ", ".join(n for n in kept if n not in can)
            then.append(f"for {other}, train a new run (another name: a seed or an arm of the sweep), or move its "
                        "folder aside to start it anew")
        notes.append(f"{run.name}: {source} changed since it trained ({shown(kept)}); it "
                     f"{'stays as it was trained' if state == 'complete' else 'goes on as it was trained'}: "
                     + "; ".join(then))
    return notes


def settings_notes(runs: list[PlannedRun], states: dict[str, RunState], looks: dict[str, Snapshot] | None = None
                   ) -> list[str]:
    """The runs whose job is live (or may be) but was submitted with other Resources, signal_delay_s or bounds on
    requeues (PlannedRun.job_settings) than the sweep file now gives: the job keeps its own through its requeues, and
    nothing said so. One line per change, naming the runs it is said of (ALIKE of them past that many), with how to
    apply it: a cancel checkpoints the job, and the next submit resumes the run with the new values. A job whose
    `submitted` event does not say what it was submitted with (an older release's) is not compared."""
    changed: dict[str, list[PlannedRun]] = {}
    live = [r for r in runs if states[r.name].state in ("queued", "running", "stalled", "unknown")]
    for run in live:
        had = ((looks or {}).get(run.name) or Snapshot(run.run_dir)).history.submitted.get("settings")
        if isinstance(had, dict):
            now = run.job_settings()
            words = ", ".join(f"{k} {had[k]!r} -> {now[k]!r}" for k in now if k in had and had[k] != now[k])
            if words:
                changed.setdefault(words, []).append(run)
    notes = []
    for words, alike in changed.items():
        names = [r.name for r in alike]
        only = only_of(alike, live)
        notes.append(f"{named(names)}: {'its job keeps' if len(names) == 1 else 'their jobs keep'} what "
                     f"{'it was' if len(names) == 1 else 'they were'} submitted with, through requeues; the sweep "
                     f"file now says {words}: to apply it, zbpscale cancel {shown_path(alike[0].run_dir.parent)} "
                     f"--only {only}, then submit again (it resumes from its latest checkpoint)")
    return notes


def only_of(alike: list[PlannedRun], live: list[PlannedRun]) -> str:
    """The `--only` of a cancel that stops the runs `alike` and no other of the `live` ones: their names, up to
    ALIKE; past that, `{size}-*` of each size whose live runs are all among them, else every name (a line to paste,
    never a placeholder)."""
    names = [r.name for r in alike]
    sizes = list(dict.fromkeys(r.size.name for r in alike))
    if len(names) > ALIKE and all({r.name for r in live if r.size.name == size} <= set(names) for size in sizes):
        return ",".join(f"{size}-*" for size in sizes)  # a size's name holds no '-': its runs' names alone match
    return ",".join(names)


def trained(run: PlannedRun, state: str) -> bool:
    """Whether a run goes on with the config.json it has (it has a checkpoint, is complete, or its job is live or may
    be), whatever the sweep file now says; else submit rewrites that config from the sweep file."""
    return state in ("complete", "running", "stalled", "unknown") or bool(RunFolder(run.run_dir).list_checkpoints())


def unplanned_notes(runs: list[found.Run]) -> list[str]:
    """One line per run folder that the sweep file no longer plans (`found.Run.unplanned`, decided) whose job is
    live, or may be: it trains on unless cancelled."""
    return [unplanned_note(r.name, r.history.job_id, r.state.state, r.run_dir.parent) for r in runs
            if r.unplanned and r.job.live]


def unplanned_note(name: str, job: str, state: str, sweep_dir: Path) -> str:
    """The line for one such run (`state`: its state word), with the command that cancels its job."""
    doing = {"running": "running", "stalled": "running (stalled)",
             "unknown": "perhaps alive (the scheduler does not answer)"}.get(state, "queued")
    return (f"{name}: no longer in the sweep file, but its job {job} is {doing}: it trains on unless cancelled "
            f"(zbpscale cancel {shown_path(sweep_dir)} --only {name})")


def config_changes(run: PlannedRun, seen: Snapshot | None = None) -> dict[str, tuple]:
    """{field: (the run folder's value, the sweep file's)} where the run's config.json (in today's format; `seen`:
    a look at the folder, else one now) differs from what the sweep file now gives; nested fields dotted
    (model.d_model, model.zbp.n). {} without a config, or with one the trainer would refuse (the run is broken:
    said elsewhere). A data_dir that moved, with the same prepared data there (equal manifests), is no change."""
    from zbpscale.data import manifest_path

    saved = (seen or Snapshot(run.run_dir)).train_config
    given = run.train_config()
    if saved is None or saved == given:  # most runs: compared as configs, no dict of either built (0.4 ms a run)
        return {}
    have = _flat(saved.to_dict())
    want = _flat(as_json(given.to_dict()))
    changes = {k: (have.get(k), want.get(k)) for k in sorted(set(have) | set(want)) if have.get(k) != want.get(k)}
    if "data_dir" in changes:
        manifests = [manifest_path(Path(d)) for d in changes["data_dir"]]
        if all(m.is_file() for m in manifests) and manifests[0].read_bytes() == manifests[1].read_bytes():
            del changes["data_dir"]
    return changes


def rewrite_config(run: PlannedRun, fields: list[str] | None = None) -> None:
    """Write the sweep file's values into the run's config.json: all of them (`fields` None: as a new run
    would get), or only `fields` (dotted names of config_changes)."""
    folder = RunFolder(run.run_dir)
    want = as_json(run.train_config().to_dict())
    if fields is None:
        config = want
    else:
        config = TrainConfig.from_dict(folder.read_config() or {}, source=str(folder.config)).to_dict()
        config = as_json(config)
        for name in fields:
            *path, last = name.split(".")
            have, new = config, want
            for key in path:
                have, new = have[key], new[key]
            have[last] = new[last]
    TrainConfig.from_dict(config, source=str(folder.config))  # still a config the trainer takes
    atomic_write(folder.config, json.dumps(config, indent=1) + "\n")


def _flat(config: dict, prefix: str = "") -> dict:
    """A nested config as {dotted name: value} (lists as tuples; a None sub-config as None)."""
    flat = {}
    for key, value in config.items():
        if isinstance(value, dict):
            flat.update(_flat(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = tuple(value) if isinstance(value, list) else value
    return flat
