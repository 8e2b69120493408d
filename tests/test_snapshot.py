"""The run folder's digest (run/snapshot.py's `keep`, #54 item 2), kept in its sweep folder's looks (run/looks.py): a
look through it has the values of a look at the files, on run folders of every kind at hand (the mini ladder's real
runs, runs of older releases, the status bench's runs, folders of odd states); it is not taken once a file it names
has changed, nor from a line that is not whole; the writers of attempts.jsonl keep it, many at once, and an error in
keeping it costs no event."""

from __future__ import annotations

import builtins
import dataclasses
import json
import math
import os
import shutil
from pathlib import Path

from conftest import load_tool
from zbpscale.files import atomic_write
from zbpscale.jobs import goodput_table
from zbpscale.jobs.runs import find_runs
from zbpscale.jobs.status import collect_rows
from zbpscale.run import history, looks, snapshot
from zbpscale.run.folder import RunFolder
from zbpscale.run.snapshot import Snapshot, keep, record

REPO = Path(__file__).resolve().parents[1]
UPGRADE = REPO / "tests" / "fixtures" / "upgrade"


def looked(look: Snapshot) -> str:
    """Every value a look gives that the digest keeps or stands for, as JSON text (NaN as NaN: a diverged run's)."""
    config = look.train_config
    values = {"events": look.history.events, "config": look.config, "step_timeout": look.step_timeout,
              "heartbeat": {k: v for k, v in look.heartbeat.items() if k != "glance"}, "plan": look.plan,
              "complete": look.complete, "glance": dataclasses.asdict(look.glance),
              "attempts": [dataclasses.asdict(a) for a in look.attempts], "unread_metrics": look.unread_metrics,
              "broken": look.broken, "own": look.own, "train_config": config and config.to_dict(),
              "fold": look.fold.state, "job_id": look.history.job_id, "shown": look.shown}
    return json.dumps(values, sort_keys=True)


def kept_look(run: Path) -> dict | None:
    """The digest the run's sweep folder keeps for it (its latest whole line), None without one."""
    line = looks.read(run.parent).get(run.name)
    return None if line is None else json.loads(line)


def keep_instead(run: Path, digest: dict) -> None:
    """A whole line that keeps `digest` as the run's latest."""
    looks.append(run, json.dumps(digest).encode())


def odd_folders(root: Path) -> list[Path]:
    """Run folders in states a trainer leaves rarely: queued (config, plan and a submission alone), a diverged
    run (NaN losses), metrics.jsonl that holds no record, a heartbeat edited by hand (a time that is words)."""
    made = []
    queued = root / "queued"
    queued.mkdir()
    (queued / "config.json").write_text((REPO / "docs/mini_ladder/runs/micro-bp/config.json").read_text())
    (queued / "plan.json").write_text(json.dumps({"params": 1e6, "gpus": 1, "gpu_hours": 0.5}))
    history.record(queued, "submitted", job_id="local-7", executor="local")
    made.append(queued)
    diverged = root / "diverged"
    shutil.copytree(REPO / "docs/mini_ladder/runs/micro-bp", diverged)
    with open(diverged / "metrics.jsonl", "a") as fh:
        fh.write(json.dumps({"kind": "eval", "time": 2e9, "step": 99, "tokens": 1, "val_loss": math.nan}) + "\n")
    made.append(diverged)
    garbled = root / "garbled"
    shutil.copytree(REPO / "docs/mini_ladder/runs/micro-bp", garbled)
    (garbled / "metrics.jsonl").write_text("this is not a record\n")
    (garbled / "heartbeat.json").write_text(json.dumps({"step": 3, "time": "noon"}))
    made.append(garbled)
    return made


def corpus(tmp_path: Path) -> list[Path]:
    """The run folders a look is compared on: copies of the mini ladder's 67 real runs, the upgrade fixtures'
    runs of five older releases, 24 runs of the status bench (failed, complete, preempted; 20 records after their
    latest heartbeat) and the odd folders."""
    runs = tmp_path / "runs"
    shutil.copytree(REPO / "docs" / "mini_ladder" / "runs", runs)
    for release in sorted(UPGRADE.glob("f*-*")):
        for arm in ("bp", "zbp_n4"):
            shutil.copytree(release / arm, runs / f"{release.name}-{arm}", ignore=shutil.ignore_patterns("*.pt"))
    load_tool("bench_status").build(tmp_path / "bench", 24, 60)
    return sorted(runs.iterdir()) + RunFolder.all_in(tmp_path / "bench") + odd_folders(tmp_path)


def test_a_look_through_the_digest_has_the_values_of_a_look_at_the_files(tmp_path):
    folders = corpus(tmp_path)
    assert len(folders) > 100
    for run in folders:
        assert keep(run), run
        kept, read = Snapshot(run, kept=True), Snapshot(run)
        assert kept.from_digest and not read.from_digest
        assert looked(kept) == looked(read), run


def test_a_digest_is_not_taken_once_a_file_it_names_has_changed(tmp_path):
    """Each file a look reads, changed as its writer changes it (appended, replaced even with the same bytes, made,
    removed), or a digest of another format or made by other code, or bytes that are no digest: the look reads the
    files."""
    run = tmp_path / "run"
    shutil.copytree(REPO / "docs" / "mini_ladder" / "runs" / "micro-bp", run)
    folder = RunFolder(run)

    def append_record():
        with open(folder.metrics, "a") as fh:
            fh.write(json.dumps({"kind": "train", "time": 2e9, "step": 40, "tokens": 1, "loss": 1.0,
                                 "step_time": 0.1}) + "\n")

    changes = {
        "a record appended": append_record,
        "the heartbeat rewritten, the same bytes":
            lambda: atomic_write(folder.heartbeat, folder.heartbeat.read_bytes()),
        "an event appended": lambda: history.record(run, "submitted", job_id="local-9", executor="local"),
        "the config rewritten": lambda: atomic_write(folder.config, folder.config.read_bytes()),
        "a plan made": lambda: atomic_write(folder.plan, json.dumps({"gpus": 2})),
        "COMPLETE removed": lambda: folder.complete.unlink(),
        "COMPLETE made again": lambda: folder.complete.write_text(""),
        "another format": lambda: keep_instead(run, {**kept_look(run), "format": snapshot.DIGEST_FORMAT + 1}),
        "no digest": lambda: looks.append(run, b"{not json"),
        "another release's code": lambda: keep_instead(run, {**kept_look(run), "code": "0" * 16}),
        "a digest without its stamps": lambda: keep_instead(
            run, {k: v for k, v in kept_look(run).items() if k != "stamps"}),
        "a line torn": lambda: torn(folder.looks),
        "two appends crossed": lambda: crossed(folder.looks),
        "the sweep's looks removed": lambda: folder.looks.unlink(),
    }

    def torn(path: Path) -> None:  # a writer killed mid-line: the line it leaves is the run's latest
        data = path.read_bytes()
        last = data[:-1].rindex(b"\n") + 1 if data.count(b"\n") > 1 else 0
        with open(path, "ab") as fh:
            fh.write(data[last:-200])

    def crossed(path: Path) -> None:  # another node's append written over this one's tail (NFS)
        data = path.read_bytes()
        path.write_bytes(data[:-40] + b"x" * 39 + b"\n")

    for what, change in changes.items():
        assert keep(run) and Snapshot(run, kept=True).from_digest, what
        change()
        kept = Snapshot(run, kept=True)
        assert not kept.from_digest, what
        assert looked(kept) == looked(Snapshot(run)), what


def test_a_run_named_relative_to_where_it_is_asked_is_looked_at_through_its_sweep_s_looks(tmp_path, monkeypatch):
    """A run folder named as a user names it (from its sweep's folder, from inside it: `.`, from a folder beside
    it: `../run`): its look is its sweep folder's line for its name, one read for all runs given alike
    (through_digests), and none is taken from a file of another folder."""
    run = tmp_path / "sweep" / "run"
    shutil.copytree(REPO / "docs" / "mini_ladder" / "runs" / "micro-bp", run)
    (tmp_path / "sweep" / "other").mkdir()
    (run / "logs").mkdir()
    assert keep(run)
    for cwd, given in ((tmp_path / "sweep", "run"), (run, "."), (tmp_path / "sweep" / "other", "../run"),
                       (run / "logs", ".."), (tmp_path, "sweep/run")):
        monkeypatch.chdir(cwd)
        looks_taken = snapshot.through_digests([Path(given)])
        assert looks_taken[Path(given)].from_digest, (cwd, given)
        assert looked(looks_taken[Path(given)]) == looked(Snapshot(run)), given
        assert Snapshot(Path(given), kept=True).from_digest, given
    monkeypatch.chdir(tmp_path / "sweep" / "other")  # a folder of no run: its parent's looks hold no line for it
    assert not snapshot.through_digests([Path(".")])[Path(".")].from_digest


def test_no_digest_is_kept_of_a_folder_that_changes_while_it_is_read_or_of_a_broken_one(tmp_path, monkeypatch):
    run = tmp_path / "run"
    shutil.copytree(REPO / "docs" / "mini_ladder" / "runs" / "micro-bp", run)
    digest = Snapshot.digest

    def read_by_a_live_trainer(look):  # the trainer appends a record while the look is taken
        values = digest(look)
        with open(RunFolder(run).metrics, "a") as fh:
            fh.write(json.dumps({"kind": "train", "time": 2e9, "step": 41, "tokens": 1, "loss": 1.0}) + "\n")
        return values

    with monkeypatch.context() as patch:
        patch.setattr(Snapshot, "digest", read_by_a_live_trainer)
        assert not keep(run) and kept_look(run) is None
    (run / "config.json").write_text('{"steps": "many"}')  # a config the trainer would refuse: its words name paths
    assert Snapshot(run).broken and not keep(run) and kept_look(run) is None


def test_every_event_keeps_the_digest_and_one_that_cannot_be_kept_costs_no_event(tmp_path, monkeypatch):
    run = tmp_path / "run"
    shutil.copytree(REPO / "docs" / "mini_ladder" / "runs" / "micro-bp", run)
    record(run, "end", job_id="local-3", executor="local", why="completed", reason="all steps done")
    assert Snapshot(run, kept=True).from_digest
    assert Snapshot(run, kept=True).history.events[-1]["job_id"] == "local-3"
    kept = RunFolder(run).looks.read_bytes()
    record(run, "start", job_id="local-3", executor="local", host="node-1")  # its trainer writes next: none kept
    assert RunFolder(run).looks.read_bytes() == kept and not Snapshot(run, kept=True).from_digest
    assert Snapshot(run, kept=True).history.events[-1]["event"] == "start"

    def full_disk(run_dir):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(snapshot, "keep", full_disk)
    record(run, "submitted", job_id="local-4", executor="local")
    assert history.read_attempts(run)[-1]["job_id"] == "local-4"
    look = Snapshot(run, kept=True)
    assert not look.from_digest and look.history.job_id == "local-4"


def test_keep_missing_keeps_a_look_where_the_sweep_s_is_another_release_s_or_none(tmp_path):
    """After an upgrade every look names other code and is not read, and a finished run has no next event to keep
    one: keep_missing (what submit does for the runs it leaves) keeps a look at each run whose sweep holds none of
    this code, and only those."""
    sweep = tmp_path / "sweep"
    names = ("current", "older", "none")
    for name in names:
        shutil.copytree(REPO / "docs" / "mini_ladder" / "runs" / "micro-bp", sweep / name)
    runs = [sweep / n for n in names]
    assert keep(runs[0]) and keep(runs[1])
    keep_instead(runs[1], {**kept_look(runs[1]), "code": "0" * 16})  # as a release before left it
    before = looks.read(sweep)
    assert [Snapshot(r, kept=True).from_digest for r in runs] == [True, False, False]
    assert snapshot.keep_missing(runs) == 2
    assert [Snapshot(r, kept=True).from_digest for r in runs] == [True, True, True]
    assert looks.read(sweep).get("current") == before.get("current")  # kept once, not again
    assert all(looked(Snapshot(r, kept=True)) == looked(Snapshot(r)) for r in runs)
    assert snapshot.keep_missing(runs) == 0


def test_stamps_taken_in_threads_where_the_disk_is_slow_are_those_taken_one_after_another(tmp_path, monkeypatch):
    """#54: status takes its looks' stamps in threads where the first looks were slow to take (caches cold: a read
    of the disk each, which answers several at once), one after another otherwise; every look is stamped once, by
    one or by several threads, as `stamps` stamps its folder."""
    import threading

    shutil.copytree(REPO / "docs" / "mini_ladder" / "runs", tmp_path / "runs")
    folders = sorted((tmp_path / "runs").iterdir()) + [tmp_path / "no such run", tmp_path / "runs" / "README"]
    (tmp_path / "runs" / "README").write_text("a file, not a folder\n")
    assert len(folders) > 40
    taken = snapshot.stamps
    for slow_s, threaded in ((math.inf, False), (0.0, True)):
        by: set[int] = set()
        monkeypatch.setattr(snapshot, "stamps", lambda folder: by.add(threading.get_ident()) or taken(folder))
        seen = [Snapshot(p) for p in folders]
        snapshot.stamped(seen, probe=4, slow_s=slow_s)
        assert [look.__dict__.get("_stamped") for look in seen] == [taken(RunFolder(p)) for p in folders]
        assert (len(by) > 1) is threaded


def test_status_rows_are_the_same_through_the_digests_and_without_them(tmp_path):
    """The bench's runs and the mini ladder's, as two sweep folders: the rows status and status --goodput give
    through their digests are the rows they give once the digests are removed (but each heartbeat's age, which grows
    between the looks)."""
    bench, mini = tmp_path / "jobs" / "ladder", tmp_path / "jobs" / "mini"
    load_tool("bench_status").build(bench, 30, 60)
    shutil.copytree(REPO / "docs" / "mini_ladder" / "runs", mini)
    runs = RunFolder.all_in(bench) + RunFolder.all_in(mini)
    for run in runs:
        assert keep(run)

    def rows() -> list[dict]:  # status's rows, and status --goodput's
        return [{k: v for k, v in row.items() if k != "heartbeat_age_s"}
                for sweep in (bench, mini) for row in collect_rows(sweep)] + \
            goodput_table.rows([r for _, found in find_runs(str(tmp_path / "jobs"), None) for r in found])

    through = rows()
    for sweep in (bench, mini):
        os.unlink(sweep / ".looks.jsonl")
    assert json.dumps(through) == json.dumps(rows()) and len(through) == 97 + 98  # and goodput's total


def test_status_through_the_digests_opens_no_file_of_a_run_but_a_failed_one_s_log(tmp_path, monkeypatch):
    """#54 item 2: what status shows of a run whose look holds comes from its sweep's looks (one file) and six stats
    of its files: its config, heartbeat, plan, attempts and metrics are not opened (the look keeps what its row
    shows of them: Snapshot.shown); a failed run's log is, for the last line of its error. Without the looks, each
    is."""
    bench = tmp_path / "jobs" / "ladder"
    load_tool("bench_status").build(bench, 30, 60)
    opened: list[Path] = []

    def opens(real):
        def recording(path, *args, **kwargs):
            if isinstance(path, (str, os.PathLike)):  # not a descriptor
                opened.append(Path(os.path.abspath(path)))
            return real(path, *args, **kwargs)
        return recording

    def rows() -> list[dict]:
        opened.clear()
        with monkeypatch.context() as patch:
            patch.setattr(os, "open", opens(os.open))
            patch.setattr(builtins, "open", opens(builtins.open))
            found = collect_rows(bench)
        return [{k: v for k, v in row.items() if k != "heartbeat_age_s"} for row in found]

    through = rows()
    in_runs = {p.relative_to(bench) for p in opened if p.is_relative_to(bench)}
    assert in_runs - {Path(".looks.jsonl")} == {p for p in in_runs if p.parent.name == "logs"}
    assert sum(r["state"] == "failed" for r in through) == len(in_runs) - 1 > 0  # a log each, and the looks
    os.unlink(bench / ".looks.jsonl")
    assert rows() == through
    read = {p.relative_to(bench) for p in opened if p.is_relative_to(bench)}
    assert {Path("nano-bp/config.json"), Path("nano-bp/heartbeat.json"), Path("nano-bp/attempts.jsonl")} <= read


def test_a_digest_names_the_code_of_every_module_a_look_s_values_come_from():
    """LOOK_CODE is the closure of run/snapshot.py's imports (tests/test_layout.py's reading of them): a module it
    comes to import, whose change could change a look's values, is named there, and a digest of other code is not
    read."""
    from test_layout import imports, modules

    known, seen, todo = modules(), set(), ["zbpscale.run.snapshot"]
    while todo:
        name = todo.pop()
        if name in known and name not in seen:
            seen.add(name)
            todo += [n for n, _ in imports(known[name])]
    assert sorted(seen) == sorted(snapshot.LOOK_CODE)
    assert len(snapshot.look_code()) == 16


def test_appends_of_many_writers_at_once_are_each_a_whole_line(tmp_path):
    """Eight processes appending to one sweep's looks at once (submit, the driver, SLURM jobs), 4.5 KB a line as a
    real digest: every line is whole, and each run's look is its writer's last; with compaction on the way (a small
    SLACK), every look read is one its run's writer wrote, and the file stays bounded."""
    import multiprocessing

    def write(names: list[str], versions: int) -> None:
        for v in range(versions):
            for name in names:
                looks.append(tmp_path / name, json.dumps({"run": name, "v": v, "pad": "x" * 4500}).encode())

    def run_writers(versions: int) -> list[str]:
        fork = multiprocessing.get_context("fork")
        names = [[f"w{w}-r{r}" for r in range(6)] for w in range(8)]
        procs = [fork.Process(target=write, args=(part, versions)) for part in names]
        for p in procs:
            p.start()
        for p in procs:
            p.join(60)
            assert p.exitcode == 0
        return [n for part in names for n in part]

    names = run_writers(4)  # 192 lines, 0.9 MB: under SLACK, no compaction
    kept = looks.read(tmp_path)
    assert len(kept) == len(names) and all(json.loads(kept.get(n))["v"] == 3 for n in names)
    assert (tmp_path / ".looks.jsonl").read_bytes().count(b"\n\n") == 4 * len(names) - 1  # a line each, whole
    (tmp_path / ".looks.jsonl").unlink()
    old = looks.SLACK
    looks.SLACK = 50_000  # the forked writers compact every few dozen lines
    try:
        names = run_writers(20)
    finally:
        looks.SLACK = old
    kept = looks.read(tmp_path)
    assert 0 < len(kept) <= len(names)
    for name in names:  # a line lost in a compaction's race leaves an older one, or none: never another's
        line = kept.get(name)
        assert line is None or json.loads(line)["run"] == name
    assert (tmp_path / ".looks.jsonl").stat().st_size < 2 * len(names) * 4600 + 50_000 + 8 * 4600


def test_compaction_keeps_the_latest_line_of_each_run_where_it_is_whole(tmp_path, monkeypatch):
    monkeypatch.setattr(looks, "SLACK", 0)
    path = tmp_path / ".looks.jsonl"
    for v in range(3):
        for r in range(4):
            looks.append(tmp_path / f"r{r}", json.dumps({"v": v, "r": r}).encode())
    with open(path, "ab") as fh:
        fh.write(b"\nr0\t00000000\t{torn")  # a writer killed mid-line: r0's earlier lines are older than its event
    looks.compact(path)
    data = path.read_bytes()
    header, body = data.split(b"\n", 1)
    assert header == b"\tcompacted\t%d" % len(body) and body.count(b"\n") == 3
    kept = looks.read(tmp_path)
    assert kept.get("r0") is None and [json.loads(kept.get(f"r{r}")) for r in (1, 2, 3)] == \
        [{"v": 2, "r": r} for r in (1, 2, 3)]


def test_a_digest_kept_in_the_run_folder_by_a_release_before_is_not_read_and_is_removed(tmp_path):
    run = tmp_path / "run"
    shutil.copytree(REPO / "docs" / "mini_ladder" / "runs" / "micro-bp", run)
    assert keep(run)
    legacy = RunFolder(run).digest
    legacy.write_text(json.dumps(kept_look(run)))  # what the release before wrote, of the same code and files
    (tmp_path / ".looks.jsonl").unlink()
    assert not Snapshot(run, kept=True).from_digest
    assert keep(run) and not legacy.exists() and Snapshot(run, kept=True).from_digest
