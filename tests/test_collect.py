"""`zbpscale collect` against the run folders it reads.

Compared: each summary row with the records of the real run behind it (closed-form parameter counts, the last
and lowest eval record, tokens = steps x batch x seq, the mean c of the latest diag record), the CSV with the
JSON, the copied files with the originals byte for byte; a second collect with the first (identical bundle,
no duplicate row); a collect after more steps with the run's new records; the status of hand-made run
folders with a literal table; a run whose val loss went above its loss at step 0 flagged in the summary, table.md's
rows and collect's lines with the numbers written (the runs that fell, not), and an older bundle's rows without
that field.
"""

import csv
import dataclasses
import json
import shutil
import time
from pathlib import Path

import pytest

from zbpscale.errors import ConfigError
from zbpscale.files import read_jsonl
from zbpscale.results.collect import FIELDS, collect
from zbpscale.run.config import model_config, n_params


def snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def jobs_of(sweep_file: Path) -> Path:
    return sweep_file.parent / "jobs" / "results"


def test_summary_rows_match_the_runs_records(results_sweep, tmp_path):
    rows = collect(results_sweep, tmp_path / "out", log=lambda line: None)
    assert [r.run for r in rows] == ["nano-bp", "nano-zbp_n4", "nano-zbp_n8_fwd",
                                        "tiny-bp", "tiny-zbp_n4", "tiny-zbp_n8_fwd"]
    for row in rows:
        model = model_config(row.size, max_seq_len=32)
        assert row.params == n_params(model)
        assert row.params_non_embedding == n_params(model, embeddings=False)
        assert row.steps_total == 4 and row.tokens_total == 4 * 2 * 32
        assert row.diag_every == 4  # the sweep's, for planned runs too
        if row.arm == "zbp_n8_fwd":  # never started: listed, with its planned numbers
            assert (row.state, row.in_progress, row.steps, row.final_val_loss) == \
                ("new", False, 0, None)
            assert not (tmp_path / "out" / "runs" / row.run).exists()
            continue
        records = read_jsonl(jobs_of(results_sweep) / row.run / "metrics.jsonl")
        evals = [r["val_loss"] for r in records if r["kind"] == "eval"]
        diag = [r for r in records if r["kind"] == "diag"][-1]
        assert (row.state, row.in_progress, row.steps, row.tokens) == ("complete", False, 4, 256)
        assert row.final_val_loss == evals[-1] and row.best_val_loss == min(evals)
        assert row.gpu_hours == 0.0 and row.wall_time_s > 0 and row.attempts == 1
        assert row.diag_step == 3
        assert row.diverged is None  # trained for real, its val losses fell below its start
        for core in ("attn", "ffn"):
            cs = [c["c"] for c in diag["cores"] if c["core"] == core]
            assert getattr(row, f"c_{core}") == (pytest.approx(sum(cs) / len(cs)) if row.arm != "bp" else None)
        for name in ("metrics.jsonl", "config.json", "COMPLETE"):
            copied = tmp_path / "out" / "runs" / row.run / name
            assert copied.read_bytes() == (jobs_of(results_sweep) / row.run / name).read_bytes()
        assert not (tmp_path / "out" / "runs" / row.run / "checkpoints").exists()  # only with --with-ckpt

    with open(tmp_path / "out" / "summary.csv") as fh:
        table = list(csv.DictReader(fh))
    assert list(table[0]) == list(FIELDS)
    assert [{k: ("" if v is None else str(v)) for k, v in dataclasses.asdict(r).items()} for r in rows] == table
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert manifest["sweep"] == "results" and manifest["runs"]["tiny-zbp_n8_fwd"] == "new"
    assert set(manifest["files"]) == {k for k in snapshot(tmp_path / "out") if k.startswith("runs/")}


def test_recollect_is_identical_then_follows_new_steps(results_sweep, tmp_path):
    """A run seen mid-way (records up to step 1, a line being written), then again, then finished."""
    source = jobs_of(results_sweep) / "nano-zbp_n4"
    sweep = tmp_path / "jobs" / "live"
    run = sweep / "nano-zbp_n4"
    shutil.copytree(source, run, ignore=shutil.ignore_patterns("checkpoints", "COMPLETE"))
    full = (source / "metrics.jsonl").read_text()
    early = [line for line in full.splitlines() if json.loads(line).get("step", 0) <= 1
             and json.loads(line)["kind"] != "end"]
    (run / "metrics.jsonl").write_text("\n".join(early) + '\n{"kind": "train", "st')  # torn last line
    (run / "heartbeat.json").write_text(json.dumps({"step": 2, "time": time.time()}) + "\n")
    out = tmp_path / "out"

    first = collect(sweep, out, log=lambda line: None)
    assert [(r.run, r.state, r.in_progress, r.steps) for r in first] == \
        [("nano-zbp_n4", "running", True, 2)]
    assert (out / "runs" / "nano-zbp_n4" / "metrics.jsonl").read_text() == "\n".join(early) + "\n"
    before = snapshot(out)
    again = collect(sweep, out, log=lambda line: None)
    assert again == first and snapshot(out) == before  # byte-identical bundle, one row per run

    (run / "metrics.jsonl").write_text(full)
    (run / "COMPLETE").write_text((source / "COMPLETE").read_text())
    done = collect(sweep, out, log=lambda line: None)
    assert [(r.run, r.state, r.in_progress, r.steps) for r in done] == \
        [("nano-zbp_n4", "complete", False, 4)]
    assert (out / "runs" / "nano-zbp_n4" / "metrics.jsonl").read_text() == full
    assert len(json.loads((out / "summary.json").read_text())["runs"]) == 1


def test_with_ckpt_copies_the_latest_checkpoint_only(results_sweep, tmp_path):
    sweep = tmp_path / "results"
    sweep.mkdir()
    (sweep / "nano-bp").symlink_to(jobs_of(results_sweep) / "nano-bp")
    collect(sweep, tmp_path / "out", with_ckpt=True, log=lambda line: None)
    source = sorted((jobs_of(results_sweep) / "nano-bp" / "checkpoints").glob("ckpt_*.pt"))[-1]
    copied = list((tmp_path / "out" / "runs" / "nano-bp" / "checkpoints").iterdir())
    assert [p.name for p in copied] == [source.name] and copied[0].read_bytes() == source.read_bytes()
    shutil.copytree(jobs_of(results_sweep) / "nano-bp", sweep / "nano-bp-s1", ignore=shutil.ignore_patterns("ckpt_*"))
    said = []  # a run --with-ckpt names that has no checkpoint: said, where nothing was
    collect(sweep, tmp_path / "out", with_ckpt=True, log=said.append)
    assert "note: --with-ckpt: 1 run without a checkpoint to copy (nano-bp-s1)" in said, said


def test_a_run_folder_gone_keeps_its_collected_copy_and_another_sweep_is_refused(results_sweep, tmp_path):
    out = tmp_path / "out"
    collect(results_sweep, out, log=lambda line: None)
    elsewhere = tmp_path / "elsewhere.py"  # the same sweep, with its run root on a disk that is not here
    elsewhere.write_text(results_sweep.read_text().replace(str(results_sweep.parent / "jobs"), str(tmp_path / "no")))
    lines = []
    rows = collect(elsewhere, out, log=lines.append)
    assert [r.state for r in rows if r.arm != "zbp_n8_fwd"] == ["complete"] * 4
    assert any("keeping the copy collected before" in line for line in lines)
    other = tmp_path / "other.py"
    other.write_text(results_sweep.read_text().replace('name="results"', 'name="other"'))
    with pytest.raises(ConfigError, match="holds sweep 'results', not 'other'"):
        collect(other, out, log=lambda line: None)


def test_the_summary_counts_timeouts_preemptions_and_failures_as_status_does(results_sweep, tmp_path):
    """T/P/F: status's column and the bundle's timeouts, preemptions and failures (crashed, hung and failed ends)
    are the same counts, since the run's last --retry."""
    from zbpscale.jobs.status import collect_rows

    jobs = tmp_path / "jobs" / "results"
    shutil.copytree(jobs_of(results_sweep) / "tiny-bp", jobs / "tiny-bp")
    now = time.time()
    events = [{"event": "submitted", "time": now - 100, "job_id": "1", "executor": "local"}]
    whys = ["crashed", "timeout", "preempted", "hung", "timeout", "crashed", "failed"]
    for k, why in enumerate(whys):
        if k == 2:  # a --retry: the counts start again
            events.append({"event": "submitted", "time": now - 89.5 + 2 * k, "job_id": "1", "executor": "local",
                           "retry": True})
        events += [{"event": "start", "time": now - 89 + 2 * k, "job_id": "1"},
                   {"event": "end", "time": now - 88 + 2 * k, "job_id": "1", "why": why, "reason": "r"}]
    (jobs / "tiny-bp" / "attempts.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    (row,) = collect(jobs, tmp_path / "out", log=lambda line: None)
    (shown,) = collect_rows(jobs)
    assert (row.timeouts, row.preemptions, row.failures) == (1, 1, 3)
    assert (shown["timeouts"], shown["preemptions"], shown["failures"]) == (1, 1, 3)
    # a run folder whose config.json is gone: the state status gives it (collect called it new)
    (jobs / "tiny-bp" / "config.json").unlink()
    (row,) = collect(jobs, tmp_path / "out", log=lambda line: None)
    (shown,) = collect_rows(jobs)
    assert row.state == shown["state"] and row.reason == (shown["reason"] or None), (row.state, shown["state"])


def test_a_bundle_of_format_1_still_loads_and_plots(results_sweep, tmp_path):
    """Bundles collected before a run's state was called `state` (format 1 named it `status`) load with the same
    states, and plot draws them."""
    from zbpscale.results.bundle import Bundle
    from zbpscale.results.plot import plot

    out = tmp_path / "out"
    collect(results_sweep, out, log=lambda line: None)
    summary = json.loads((out / "summary.json").read_text())
    for row in summary["runs"]:
        row["status"] = row.pop("state")
    (out / "summary.json").write_text(json.dumps(summary))
    rows = Bundle(out).read_summary()
    assert [r.state for r in rows] == [r["status"] for r in summary["runs"]] and "complete" in {r.state for r in rows}
    assert plot(out, log=lambda line: None).gap_points


def finished_run(sweep: Path, name: str, train: dict[int, float], evals: dict[int, float]) -> Path:
    """A run folder as a trainer run by hand leaves it: its config, its records as MetricsLog writes them (a start
    record, the train and val losses of each step, an end), COMPLETE. 48 steps of 64 tokens."""
    from conftest import config_json
    from zbpscale.run.folder import RunFolder
    from zbpscale.train.metrics import MetricsLog

    folder = RunFolder(sweep / name)
    folder.path.mkdir(parents=True)
    config = json.loads(config_json("tiny", steps=48, global_batch=2, device="cpu"))
    folder.config.write_text(json.dumps(config))
    log = MetricsLog(folder.path)
    log.write("start", attempt=1, step=0, world_size=1, config=config,
              derived={"params": 1000, "params_non_embedding": 500, "total_steps": 48, "total_tokens": 48 * 64})
    for step in sorted(set(train) | set(evals)):
        if step in train:
            log.write("train", step=step, tokens=64 * (step + 1), loss=train[step])
        if step in evals:
            log.write("eval", step=step, tokens=64 * (step + 1), val_loss=evals[step])
    log.write("end", step=47, why="completed", reason="all steps done")
    log.close()
    folder.complete.write_text("{}\n")
    return folder.path


def test_a_run_whose_val_loss_went_above_its_start_is_flagged(tmp_path):
    """The issue's mini ladder: tiny-bp-s2's first eval (step 15, 10.996) is above its loss at step 0 (10.951),
    its later ones near its other seeds'. collect flags it, and it alone: summary.json and .csv, a console line,
    table.md's state cell and a note with the numbers."""
    from zbpscale.results.gaps import val_curves
    from zbpscale.results.table import runs_markdown

    sweep = tmp_path / "jobs" / "mini"
    falling = {0: 10.951, 15: 8.1, 31: 7.2, 47: 6.9}
    finished_run(sweep, "tiny-bp", falling, {15: 7.6, 31: 7.0, 47: 6.8})
    finished_run(sweep, "tiny-bp-s1", falling, {15: 7.7, 31: 7.1, 47: 6.9})
    finished_run(sweep, "tiny-bp-s2", falling, {15: 10.996, 31: 7.3, 47: 7.0})
    out, lines = tmp_path / "out", []
    rows = collect(sweep, out, log=lines.append)
    said = "val 10.996 at step 15 is above its start 10.951"
    assert {r.run: r.diverged for r in rows} == {"tiny-bp": None, "tiny-bp-s1": None, "tiny-bp-s2": said}
    assert {r["run"]: r["diverged"] for r in json.loads((out / "summary.json").read_text())["runs"]} == \
        {"tiny-bp": None, "tiny-bp-s1": None, "tiny-bp-s2": said}
    with open(out / "summary.csv") as fh:
        assert {r["run"]: r["diverged"] for r in csv.DictReader(fh)} == {"tiny-bp": "", "tiny-bp-s1": "",
                                                                        "tiny-bp-s2": said}
    assert [line for line in lines if "diverged" in line] == [f"note: tiny-bp-s2 diverged: {said}"]

    table, notes = runs_markdown(rows, val_curves(out, rows))
    states = {cells[0]: cells[5] for cells in ([c.strip() for c in line.strip("|").split("|")]
                                                for line in table.splitlines()[2:])}
    assert states == {"tiny-bp": "complete", "tiny-bp-s1": "complete", "tiny-bp-s2": "complete (diverged)"}
    assert [n for n in notes if "diverged" in n] == [
        f"tiny-bp-s2 diverged: {said} (a run's start: its train loss at step 0, else ln(vocab)); look at its curve "
        "before using its numbers"]


def test_a_bundle_of_one_run_says_so_in_the_singular(tmp_path):
    """collect's summary line counts its runs in words: '1 run', not '1 runs'."""
    sweep, out, lines = tmp_path / "jobs" / "one", tmp_path / "out", []
    finished_run(sweep, "tiny-bp", {0: 10.951, 15: 8.1}, {15: 7.6})
    collect(sweep, out, log=lines.append)
    assert any(line.startswith(f"{out}: 1 run, one seed (1 complete); ") for line in lines), lines


def test_an_older_bundle_without_the_diverged_field_still_loads(results_sweep, tmp_path):
    """Rows of summary.json written before runs were flagged as diverged (no `diverged`) load, as not flagged."""
    from zbpscale.results.bundle import Bundle

    out = tmp_path / "out"
    rows = collect(results_sweep, out, log=lambda line: None)
    summary = json.loads((out / "summary.json").read_text())
    for row in summary["runs"]:
        del row["diverged"]
    summary["fields"].remove("diverged")
    (out / "summary.json").write_text(json.dumps(summary))
    assert Bundle(out).read_summary() == [dataclasses.replace(r, diverged=None) for r in rows]


def test_records_edited_to_hold_words_for_numbers_are_skipped_as_torn_lines_are(tmp_path):
    """A run's metrics.jsonl with a train record whose loss is words and an eval record whose val_loss is words (a
    hand edit) gave a summary.json with a word for final_val_loss, which plot and report then refused ("not a
    summary collect wrote", hinting to collect again: the same words again), and a gap that failed comparing words
    with numbers. The records are skipped as torn lines are: the summary's rows are those of the same folder
    without them, and plot and report draw the bundle."""
    from zbpscale.results.plot import plot
    from zbpscale.results.report import report

    falling = {0: 10.951, 15: 8.1, 31: 7.2, 47: 6.9}
    runs = {}
    for sweep in ("clean", "edited"):
        for name in ("tiny-bp", "tiny-zbp_n4"):
            runs[sweep, name] = finished_run(tmp_path / "jobs" / sweep, name, falling, {15: 7.6, 31: 7.0, 47: 6.8})
    for name in ("tiny-bp", "tiny-zbp_n4"):
        shutil.copyfile(runs["clean", name] / "metrics.jsonl", runs["edited", name] / "metrics.jsonl")
        metrics = runs["edited", name] / "metrics.jsonl"
        *lines, end = metrics.read_text().splitlines()
        words = [json.dumps({"kind": "train", "time": time.time(), "step": 47, "tokens": 3072, "loss": "abc"}),
                 json.dumps({"kind": "eval", "time": time.time(), "step": 47, "tokens": 3072, "val_loss": "n/a"})]
        metrics.write_text("\n".join([*lines, *words, end]) + "\n")
    clean = collect(tmp_path / "jobs" / "clean", tmp_path / "clean", log=lambda line: None)
    edited = collect(tmp_path / "jobs" / "edited", tmp_path / "edited", log=lambda line: None)
    assert [dataclasses.replace(r, wall_time_s=0, goodput=None) for r in edited] == \
        [dataclasses.replace(r, wall_time_s=0, goodput=None) for r in clean]
    assert edited[0].final_val_loss == 6.8 and edited[0].final_train_loss == 6.9
    assert plot(tmp_path / "edited", log=lambda line: None).gap_points
    assert report(tmp_path / "edited", tmp_path / "edited.html", log=lambda line: None).is_file()


def test_a_run_folder_whose_name_names_no_arm_goes_by_its_config(tmp_path):
    """`tiny-rerun` (bp, seed 1, trained by hand) and `tiny-bp.old` (a copy of tiny-bp moved aside in the folder)
    parse as `{size}-{arm}`: collect made them arms 'rerun' and 'bp.old' and compared each with bp as a ZBP arm (a
    gap, a fit). Their configs say what they are: tiny-rerun is bp's seed 1; tiny-bp.old is tiny-bp again, which
    collect refuses in one line (the study compares one)."""
    sweep = tmp_path / "jobs" / "hand"
    losses = ({0: 10.9, 15: 8.1, 47: 6.9}, {15: 7.6, 47: 6.8})
    finished_run(sweep, "tiny-bp", *losses)
    rerun = finished_run(sweep, "tiny-rerun", *losses)
    config = json.loads((rerun / "config.json").read_text())
    (rerun / "config.json").write_text(json.dumps({**config, "seed": 1}))
    rows = collect(sweep, tmp_path / "out", log=lambda line: None)
    assert {r.run: (r.size, r.arm, r.seed) for r in rows} == {"tiny-bp": ("tiny", "bp", 0),
                                                              "tiny-rerun": ("tiny", "bp", 1)}
    shutil.copytree(sweep / "tiny-bp", sweep / "tiny-bp.old")
    with pytest.raises(ConfigError, match="runs tiny-bp, tiny-bp.old are each size tiny, arm bp, seed 0: the study "
                                          "compares one"):
        collect(sweep, tmp_path / "again", log=lambda line: None)


def test_two_studies_of_one_sweep_name_are_not_mixed_in_one_bundle(tmp_path):
    """Study A (tiny, mini) collected into a bundle, then study B of the same sweep name (a copy of the project,
    tiny only, other losses) collected into the same folder: the bundle held B's tiny rows beside A's mini rows, its
    manifest naming B alone. Refused in one line while A's runs are there; a project moved (A's folder gone) is
    collected into its bundle as before."""
    losses = ({0: 10.9, 15: 8.1, 47: 6.9}, {15: 7.6, 47: 6.8})
    for study, sizes in (("A", ("tiny", "mini")), ("B", ("tiny",))):
        for size in sizes:
            finished_run(tmp_path / study / "jobs" / "smoke", f"{size}-bp", *losses)
    out = tmp_path / "results" / "smoke"
    collect(tmp_path / "A" / "jobs" / "smoke", out, log=lambda line: None)
    with pytest.raises(ConfigError, match=f"{out} holds the runs of {tmp_path / 'A' / 'jobs' / 'smoke'}; "
                                          f"{tmp_path / 'B' / 'jobs' / 'smoke'} is another folder of runs of sweep "
                                          "'smoke'"):
        collect(tmp_path / "B" / "jobs" / "smoke", out, log=lambda line: None)
    assert json.loads((out / "manifest.json").read_text())["runs_at"] == "../../A/jobs/smoke"  # no machine's path
    shutil.move(tmp_path / "A", tmp_path / "A-moved")
    rows = collect(tmp_path / "A-moved" / "jobs" / "smoke", out, log=lambda line: None)
    assert {r.run for r in rows} == {"tiny-bp", "mini-bp"}


def test_a_run_folder_deleted_since_the_last_collect_is_said_when_its_copy_is_kept(tmp_path):
    """Collected from its folder, then one run folder deleted: collect said 'no run changed' and kept its row and
    copy without a word (collecting from the sweep file says it). It says which it keeps, and keeps it."""
    losses = ({0: 10.9, 15: 8.1, 47: 6.9}, {15: 7.6, 47: 6.8})
    sweep = tmp_path / "jobs" / "lad"
    for name in ("tiny-bp", "mini-bp"):
        finished_run(sweep, name, *losses)
    collect(sweep, tmp_path / "out", log=lambda line: None)
    shutil.rmtree(sweep / "mini-bp")
    lines = []
    rows = collect(sweep, tmp_path / "out", log=lines.append)
    assert {r.run for r in rows} == {"tiny-bp", "mini-bp"}
    assert f"mini-bp: no run folder in {sweep}; keeping the copy collected before" in lines, lines


def test_run_folders_the_sweep_file_does_not_plan_are_said_when_it_leaves_them_out(tmp_path):
    """Collected from the sweep file, a run folder beside its runs that it does not plan (status shows it) was left
    out without a word; collected once from the folder, then from the sweep file, its copy was kept 'no run folder
    in' the folder that holds it (a helper's hunt). Each is said as it is."""
    losses = ({0: 10.9, 15: 8.1, 47: 6.9}, {15: 7.6, 47: 6.8})
    runs = tmp_path / "jobs" / "lad"
    for name in ("tiny-bp", "tiny-zbp_n4"):
        finished_run(runs, name, *losses)
    sweep = tmp_path / "lad.py"
    sweep.write_text("from zbpscale.sweep import *\nSWEEP = Sweep(name='lad', sizes=(Size(name='tiny', global_batch=2, "
                     "tokens=48 * 64, resources=Resources(gpus_per_node=0)),), arms=(arm('bp'),), data=Data(dir='d'), "
                     f"root={str(tmp_path / 'jobs')!r})\n")
    lines = []
    assert {r.run for r in collect(sweep, tmp_path / "out", log=lines.append)} == {"tiny-bp"}
    assert f"note: 1 run folder in {runs} that the sweep file does not plan left out (tiny-zbp_n4): zbpscale " \
           f"collect {runs} takes every run folder there" in lines, lines
    collect(runs, tmp_path / "out", log=lambda line: None)
    lines = []
    assert {r.run for r in collect(sweep, tmp_path / "out", log=lines.append)} == {"tiny-bp", "tiny-zbp_n4"}
    assert "tiny-zbp_n4: the sweep file no longer plans it; keeping the copy collected before" in lines, lines


def test_the_commands_and_the_page_s_address_it_prints_hold_a_path_with_a_space_as_typed(tmp_path):
    """A study in 'réal run/': collect's next: line printed the bundle's path bare (pasted, the shell split it) and
    report printed file:// with the space and the é as they are (not an address). The next: line now splits, as a
    shell splits it, into the commands with the bundle's path whole; the address is the page's file URL."""
    import shlex
    from urllib.parse import unquote, urlparse

    from zbpscale.results.report import report

    sweep = tmp_path / "réal run" / "jobs" / "lad"
    finished_run(sweep, "tiny-bp", {0: 10.9, 15: 8.1, 47: 6.9}, {15: 7.6, 47: 6.8})
    out, lines = tmp_path / "réal run" / "out dir", []
    collect(sweep, out, log=lines.append)
    (line,) = [line for line in lines if line.startswith("next: ")]
    words = shlex.split(line.removeprefix("next: "))
    assert words[:3] == ["zbpscale", "plot", str(out)] and str(out) in words, words
    said = []
    page = report(out, out / "rép.html", log=said.append)
    (url,) = [w.rstrip(")") for line in said for w in line.split("(") if w.startswith("file:")]
    assert urlparse(url).scheme == "file" and unquote(urlparse(url).path) == str(page.resolve()), url
