"""Learning-rate tuning per size and arm (#53; jobs/tuning.py, sweep.Tune): the grid checked at load with
file:line; the choice from a hand-computed table of final losses (the best, a grid edge, a tie within noise, a
diverged run); the lr law against synthetic lrs of a known law; what `planned` makes of tuning runs in each state
(waiting, chosen, grown at an edge, transferred by the law); and a CPU sweep through the local queue: tuning,
then the final runs at the chosen lr, submitted by `submit --wait` once their tuning runs ended."""

from __future__ import annotations

import dataclasses
import json
import math
import re
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import unwrapped
from zbpscale.errors import ConfigError
from zbpscale.jobs import tuning
from zbpscale.jobs.sweep import expand, load_sweep, lr_text
from zbpscale.run.folder import RunFolder, parse_run_name
from zbpscale.run.history import read_attempts

SWEEP = """\
from zbpscale.sweep import Data, Resources, Size, Sweep, Tune, arm

CPU = Resources(nodes=1, gpus_per_node=0, tasks_per_node=1, cpus_per_task=1, time_min=30)


def rung(name, lr):
    return Size(name=name, global_batch=4, seq_len=32, tokens=4 * 32 * {steps}, lr=lr, resources=CPU)


SWEEP = Sweep(
    name="tuned",
    sizes=({rungs}),
    arms=(arm("bp"), arm("zbp_n4")),
    data=Data(dir={data!r}, source="embedded", workers=1),
    tune=Tune(
        sizes={sizes!r},
        grid={grid},
        budget={budget!r},
        extend={extend!r},
        check={check!r},
    ),
    train=(("eval_every", 0), ("eval_batches", 1), ("ckpt_every", 0), ("ckpt_every_s", 0)),
    root={root!r},
    poll_s=10,
)
"""


LRS = {"nano": 4e-3, "micro": 2e-3, "tiny": 1e-3}
"""Each size's lr without tuning (a relative grid multiplies it)."""


def write(tmp_path: Path, *, sizes=("nano", "micro"), grid="(0.5, 1, 2)", budget=1.0, steps=6,
          data: str = "data", extend: int = 1, rungs=("nano", "micro", "tiny"), check=()) -> Path:
    path = tmp_path / "tuned.py"
    path.write_text(SWEEP.format(sizes=tuple(sizes), grid=grid, budget=budget, steps=steps, data=str(data),
                                 root=str(tmp_path / "jobs"), extend=extend, check=tuple(check),
                                 rungs="".join(f"rung({s!r}, {LRS[s]!r}), " for s in rungs)))
    return path


def line_of(path: Path, text: str) -> int:
    return next(i for i, line in enumerate(path.read_text().splitlines(), 1) if text in line)


# ------------------------------------------------------------------------------------------ the grid at load
@pytest.mark.parametrize("change, keyword, words", [
    (dict(grid="(1,)"), "grid=", "Tune.grid must be two or more numbers > 0, distinct at 3 significant digits (a "
                                 "grid run's name writes its lr so), got (1,)"),
    (dict(grid="(0.5, -1, 2)"), "grid=", "Tune.grid must be two or more numbers > 0, distinct"),
    (dict(grid="{'bp': (0.5, 1), 'zbp_n4': (1, 1)}"), "grid=", "Tune.grid['zbp_n4'] must be two or more numbers"),
    (dict(grid="(1.0, 1.0001, 2)"), "grid=", "Tune.grid must be two or more numbers > 0, distinct at 3 significant "
                                             "digits (a grid run's name writes its lr so), got (1.0, 1.0001, 2)"),
    (dict(grid="(0.999, 1, 2)"), "grid=", "Tune.grid gives nano-bp the lrs 4e-3, 4e-3, 8e-3: two name one grid run"),
    (dict(grid="(0.5, 1, 2), check_grid=(0.5, 0.50001, 1.0)"), "check_grid=",
     "Tune.check_grid must be two or more numbers > 0, distinct at 3 significant digits"),
    (dict(grid="{'bp': (0.5, 1)}"), "grid=", "Tune.grid gives no grid for arm(s) zbp_n4"),
    (dict(grid="{'bp': (0.5, 1), 'zbp_n8': (1, 2)}"), "grid=", "Tune.grid names arm 'zbp_n8', not an arm"),
    (dict(budget=0), "budget=", "Tune.budget must be a number in (0, 1]"),
    (dict(budget=1.5), "budget=", "Tune.budget must be a number in (0, 1]"),
    (dict(sizes=("nano", "huge")), "        sizes=", "Tune.sizes names 'huge', not a size of sweep 'tuned'"),
    (dict(sizes=("nano",)), "        sizes=", "the sweep's other sizes (micro, tiny) take their lr from a law"),
    (dict(check=("micro",)), "check=", "Tune.check names 'micro', a size Tune.sizes tunes already"),
    (dict(check=("mini",)), "check=", "Tune.check names 'mini', not a size of sweep 'tuned'"),
])
def test_a_bad_grid_is_one_error_at_its_line_of_the_sweep_file(tmp_path, change, keyword, words):
    path = write(tmp_path, **change)
    with pytest.raises(ConfigError) as err:
        load_sweep(path)
    message = str(err.value.args[0])
    assert message.startswith(f"{path}:{line_of(path, keyword)}: ") and words in message, message


def test_a_check_of_a_sweep_that_tunes_every_size_hints_what_to_do(tmp_path):
    """Every size tuned and Tune.check naming one: the hint listed the sizes the law transfers to, none ('check the
    sizes the lr law transfers to: ')."""
    with pytest.raises(ConfigError) as err:
        load_sweep(write(tmp_path, sizes=("nano", "micro", "tiny"), check=("micro",)))
    assert err.value.hint == "Tune.sizes tunes every size: no lr law transfers to one, so leave Tune.check empty"


def test_tuned_sizes_of_one_shape_leave_no_law_and_are_refused_at_load(tmp_path):
    """Two tuned sizes of the same model (here: the same shape at another seq_len) give the law one N: the other
    sizes could never take an lr from it (a final run trained at its untuned lr, and each later plan raised)."""
    path = write(tmp_path, sizes=("nano", "nano_long"), rungs=("nano", "tiny"))
    long = ("Size(name='nano_long', model=model_config('nano'), global_batch=4, seq_len=64, tokens=4 * 64 * 6, "
            "lr=4e-3, resources=CPU), ")
    text = path.read_text().replace("sizes=(rung('nano', 0.004), ", "sizes=(rung('nano', 0.004), " + long)
    path.write_text("from zbpscale.run.config import model_config\n" + text)
    with pytest.raises(ConfigError) as err:
        load_sweep(path)
    message = str(err.value.args[0])
    assert message.startswith(f"{path}:{line_of(path, '        sizes=')}: "), message
    assert "tunes sizes of one non-embedding count" in message and "other sizes (tiny)" in message, message


def test_an_unknown_keyword_of_tune_is_named_with_its_fields(tmp_path):
    path = write(tmp_path)
    path.write_text(path.read_text().replace("budget=", "budgt="))
    with pytest.raises(ConfigError) as err:
        load_sweep(path)
    assert str(err.value.args[0]) == f"{path}:{line_of(path, 'budgt=')}: Tune has no field 'budgt'"
    assert "budget" in err.value.hint


def test_tuning_runs_are_ordinary_runs_named_by_their_lr(tmp_path):
    """Relative grids multiply each size's lr; the tuning runs train a budget's share of the steps; the names
    read back as the size, arm and seed."""
    sweep = load_sweep(write(tmp_path, grid="{'bp': (0.5, 1, 2), 'zbp_n4': (0.25, 0.5, 1)}", budget=0.5, steps=8))
    runs = expand(sweep)
    names = [r.name for r in runs if r.role == "tuning" and r.size.name == "nano"]
    assert names == ["nano-bp-lr2e-3", "nano-bp-lr4e-3", "nano-bp-lr8e-3",
                     "nano-zbp_n4-lr1e-3", "nano-zbp_n4-lr2e-3", "nano-zbp_n4-lr4e-3"]
    tuning_run = next(r for r in runs if r.name == "micro-zbp_n4-lr5e-4")
    cfg = tuning_run.train_config()
    assert (cfg.lr, cfg.steps, tuning_run.steps) == (5e-4, 4, 4)
    assert [r.name for r in runs if r.role == "final"] == [f"{s}-{a}" for s in ("nano", "micro", "tiny")
                                                          for a in ("bp", "zbp_n4")]
    assert parse_run_name("s60-zbp_n16-lr3e-3-s2") == ("s60", "zbp_n16", 2)
    assert [lr_text(x) for x in (3e-3, 1.5e-3, 4e-4, 2.0, 0.25, 12.5)] == ["3e-3", "1.5e-3", "4e-4", "2", "2.5e-1",
                                                                          "1.25e1"]


# ------------------------------------------------------------------------------------------ the choice
INF = math.inf


@pytest.mark.parametrize("losses, lr, edge, near", [
    ({1e-3: [3.50], 2e-3: [3.40], 4e-3: [3.45]}, 2e-3, "", (2e-3, 2e-3)),            # a clear minimum inside
    ({1e-3: [3.50, 3.30], 2e-3: [3.42, 3.42], 4e-3: [3.39, 3.47]}, 1e-3, "low", (1e-3, 1e-3)),  # seeds averaged:
    # 3.40, 3.42, 3.43: the smallest lr is best (an edge), though one seed alone would pick 4e-3
    ({1e-3: [3.60], 2e-3: [3.45], 4e-3: [3.40]}, 4e-3, "high", (4e-3, 4e-3)),         # best at the high edge
    ({1e-3: [3.41], 2e-3: [3.40], 4e-3: [3.402], 8e-3: [INF]}, 2e-3, "", (2e-3, 4e-3)),  # a tie within noise;
    # the largest lr diverged: worse than any, not a wait
    ({1e-3: [3.40], 2e-3: [3.40]}, 1e-3, "low", (1e-3, 2e-3)),                         # an exact tie: the smaller
    ({1e-3: [INF], 2e-3: [INF]}, 1e-3, "low", (1e-3, 1e-3)),  # every lr diverged: the grid grows below
])
def test_the_best_lr_of_a_hand_computed_table(losses, lr, edge, near):
    choice = tuning.best_lr(losses, near=3e-3)
    assert (choice.lr, choice.edge, choice.near) == (lr, edge, near)
    assert choice.lrs == len(losses)
    every = all(v == INF for vs in losses.values() for v in vs)  # said so, not 'best of 2 tuned lrs (loss inf)'
    assert ("every one of 2 tuned lrs diverged, the smallest taken (lower Tune.grid)" in choice.words()) == every


def test_the_lr_law_recovers_a_known_law_and_its_interval_covers_it():
    params = [1e5, 1e6, 1e7, 1e8]
    exact = tuning.fit_lr_law(params, [0.5 * n ** -0.3 for n in params])
    assert exact.a == pytest.approx(0.5, rel=1e-9) and exact.b == pytest.approx(-0.3, abs=1e-12)
    noise = [1.1, 0.92, 1.05, 0.95]  # a few percent off the law, as a coarse grid gives
    noisy = tuning.fit_lr_law(params, [0.5 * n ** -0.3 * e for n, e in zip(params, noise)])
    low, high = noisy.b_interval
    assert low < -0.3 < high and high - low < 0.2
    two = tuning.fit_lr_law(params[:2], [1e-3, 5e-4])
    assert two.b_interval is None and two.at(1e6) == pytest.approx(5e-4) and "no interval" in two.words()
    with pytest.raises(ValueError):
        tuning.fit_lr_law([1e6, 1e6], [1e-3, 2e-3])


# ------------------------------------------------------------------------------------------ planned
def fake_losses(table: dict[str, float | None]):
    return lambda run: table.get(run.name)


def test_planned_waits_chooses_grows_at_an_edge_and_transfers_by_the_law(tmp_path):
    sweep = load_sweep(write(tmp_path))
    # nano: lrs 2e-3, 4e-3, 8e-3; micro: 1e-3, 2e-3, 4e-3
    runs, tuned = tuning.planned(sweep, fake_losses({}))
    finals = {r.name: r for r in runs if r.role == "final"}
    assert finals["nano-bp"].waits_for == ("nano-bp-lr2e-3", "nano-bp-lr4e-3", "nano-bp-lr8e-3")
    assert set(finals["tiny-bp"].waits_for) == {f"{s}-bp-lr{x}" for s, xs in (("nano", ("2e-3", "4e-3", "8e-3")),
                                                                              ("micro", ("1e-3", "2e-3", "4e-3")))
                                                for x in xs}
    table = {"nano-bp-lr2e-3": 3.5, "nano-bp-lr4e-3": 3.4, "nano-bp-lr8e-3": 3.45,   # best inside: 4e-3
             "micro-bp-lr1e-3": 3.3, "micro-bp-lr2e-3": 3.2, "micro-bp-lr4e-3": 3.25,  # 2e-3
             "nano-zbp_n4-lr2e-3": 3.6, "nano-zbp_n4-lr4e-3": 3.7, "nano-zbp_n4-lr8e-3": INF,  # low edge: grows
             "micro-zbp_n4-lr1e-3": 3.5}  # the rest of micro's zbp grid still trains
    runs, tuned = tuning.planned(sweep, fake_losses(table))
    by = {r.name: r for r in runs}
    assert by["nano-bp"].lr == 4e-3 and "tuned at nano: best of 3 tuned lrs" in by["nano-bp"].lr_from
    assert by["micro-bp"].lr == 2e-3
    law = tuned.laws["bp"]
    n_nano, n_micro, n_tiny = (s.params_non_embedding for s in sweep.sizes)
    assert law.b == pytest.approx(math.log(2e-3 / 4e-3) / math.log(n_micro / n_nano))
    assert by["tiny-bp"].lr == pytest.approx(float(f"{law.at(n_tiny):.3g}")) and "lr law" in by["tiny-bp"].lr_from
    assert "grid's edge" not in by["tiny-bp"].lr_from
    assert "nano-zbp_n4-lr1e-3" in by and by["nano-zbp_n4-lr1e-3"].role == "tuning"  # one step below the edge
    assert by["nano-zbp_n4"].waits_for == ("nano-zbp_n4-lr1e-3",)
    assert by["tiny-zbp_n4"].waits_for and by["tiny-zbp_n4"].lr is None
    # the grown step answers: still the edge, but Tune.extend=1 is spent: chosen, and flagged
    table["nano-zbp_n4-lr1e-3"] = 3.55
    runs, tuned = tuning.planned(sweep, fake_losses(table))
    by = {r.name: r for r in runs}
    assert by["nano-zbp_n4"].lr == 1e-3 and tuned.choices["nano", "zbp_n4"].edge == "low"
    assert "at the low edge of the grid" in by["nano-zbp_n4"].lr_from
    assert not any(r.name == "nano-zbp_n4-lr5e-4" for r in runs)


def test_a_final_run_whose_lr_waits_again_keeps_its_config_and_a_live_job_is_named(tmp_path):
    """The grid grew (Tune.grid widened, Tune.extend raised) under a final run already submitted at the old best:
    its lr waits for tuning again. Its config is not compared with the sweep file's untuned lr (it was rewritten to
    it, and the queued job trained at it while status called it tuned); a live job is named, with its cancel."""
    from zbpscale.jobs.state import RunState
    from zbpscale.jobs.sweep_edits import config_notes

    sweep = load_sweep(write(tmp_path, sizes=("nano",), rungs=("nano",)))
    runs, _ = tuning.planned(sweep, fake_losses({}))
    final = next(r for r in runs if r.name == "nano-bp")
    assert final.waits_for and final.lr is None
    dataclasses.replace(final, lr=8e-3, waits_for=()).write_folder()  # submitted at the grid's old best
    config = RunFolder(final.run_dir).config.read_bytes()
    for state, said in (("queued", True), ("new", False)):
        states = {r.name: RunState(state) for r in runs}
        notes = config_notes(runs, states, apply=False, dry_run=False)
        assert RunFolder(final.run_dir).config.read_bytes() == config
        assert [n for n in notes if n.startswith("nano-bp:")] == ([
            "nano-bp: its lr waits for tuning again (its grid grew), but its job at lr 8e-3 is live: it trains at "
            f"the lr it was given unless cancelled (zbpscale cancel {final.run_dir.parent} --only nano-bp)"]
            if said else [])


def test_status_says_where_a_final_run_s_lr_came_from_by_the_lr_it_trains_at(tmp_path):
    """status's lr_from: the tuning's words while the run's config holds the lr tuning chooses now; the words of
    the lr it was submitted with (its plan.json) once they differ (the grid grew, or its lr waits again)."""
    from zbpscale.jobs.status import collect_rows

    path = write(tmp_path, sizes=("nano",), rungs=("nano",))
    sweep = load_sweep(path)
    runs, _ = tuning.planned(sweep, fake_losses({}))
    final = next(r for r in runs if r.name == "nano-bp")
    dataclasses.replace(final, lr=4e-3, waits_for=(), lr_from="submitted at the grid's old best").write_folder()

    def row() -> dict:
        return next(r for r in collect_rows(path) if r["run"] == "nano-bp")

    assert row()["lr"] == 4e-3 and row()["lr_from"] == "submitted at the grid's old best"  # its lr waits again
    for r in runs:  # the grid answers: 4e-3 is its best
        if r.role == "tuning" and r.arm.name == "bp":
            folder = RunFolder(r.write_folder())
            folder.metrics.write_text(json.dumps({"kind": "eval", "step": 5, "val_loss": 3.0 if r.lr == 4e-3 else 3.5})
                                      + "\n")
            folder.complete.write_text("{}\n")
    assert row()["lr"] == 4e-3 and row()["lr_from"].startswith("tuned at nano: best of 3 tuned lrs")
    config = RunFolder(final.run_dir).config
    config.write_text(config.read_text().replace('"lr": 0.004', '"lr": 0.002'))  # it trains at another lr
    assert row()["lr"] == 2e-3 and row()["lr_from"] == "submitted at the grid's old best"


FINAL_LOSS_CASES = {  # metrics.jsonl lines, COMPLETE or not -> what a tuning run answers
    "complete": ([{"kind": "eval", "step": 3, "val_loss": 3.5}, {"kind": "train", "step": 4, "loss": 3.0},
                  {"kind": "eval", "step": 7, "val_loss": 3.25}, {"kind": "end", "step": 7, "why": "completed"}],
                 True),
    "a last eval without a loss": ([{"kind": "eval", "step": 3, "val_loss": 3.5},
                                    {"kind": "eval", "step": 7, "val_loss": None}], True),
    "diverged, then resumed and completed": ([{"kind": "eval", "step": 3, "val_loss": 9.0},
                                              {"kind": "end", "step": 3, "why": "diverged"},
                                              {"kind": "eval", "step": 7, "val_loss": 3.0}], True),
    "diverged, an older release's end record": ([{"kind": "end", "step": 3, "status": "diverged"}], False),
    "still training": ([{"kind": "eval", "step": 3, "val_loss": 3.5}], False),
    "complete, no eval": ([{"kind": "train", "step": 0, "loss": 3.0}], True),
    "no metrics": (None, False),
}


@pytest.mark.parametrize("case", list(FINAL_LOSS_CASES))
def test_a_tuning_run_s_answer_is_the_one_its_whole_file_gives(tmp_path, case):
    """final_loss decodes only the end records and the last eval: the same answer as reading every record (torn
    lines in between, as a killed writer leaves them)."""
    from zbpscale.run.records import read_records

    lines, complete = FINAL_LOSS_CASES[case]
    sweep = load_sweep(write(tmp_path))
    run = next(r for r in expand(sweep) if r.role == "tuning")
    folder = RunFolder(run.run_dir)
    folder.path.mkdir(parents=True)
    if lines is not None:
        text = "".join(json.dumps({"kind": r["kind"], "time": 1.0 + i, **{k: v for k, v in r.items() if k != "kind"}})
                       + "\n" + ('{"kind": "eval", "ti\n' if i == 0 else "") for i, r in enumerate(lines))
        folder.metrics.write_text(text)
    if complete:
        folder.complete.write_text("{}\n")
    records = read_records(run.run_dir)
    if any(r.get("kind") == "end" and r.get("why") == "diverged" for r in records):
        expected = math.inf
    elif not complete:
        expected = None
    else:
        evals = [r["val_loss"] for r in records if r.get("kind") == "eval" and r.get("val_loss") is not None]
        expected = evals[-1] if evals else None
    assert tuning.final_loss(run) == expected
    assert expected is not None or case in ("still training", "complete, no eval", "no metrics")


def test_a_sweep_that_tunes_its_one_size_chooses_without_a_law(tmp_path):
    """Every size tuned, one of them: the choice is the grid's best and no lr law is fitted (it needs two sizes)."""
    sweep = load_sweep(write(tmp_path, sizes=("nano",), rungs=("nano",)))
    table = {"nano-bp-lr2e-3": 3.5, "nano-bp-lr4e-3": 3.4, "nano-bp-lr8e-3": 3.45,
             "nano-zbp_n4-lr2e-3": 3.6, "nano-zbp_n4-lr4e-3": 3.7, "nano-zbp_n4-lr8e-3": 3.8}
    runs, tuned = tuning.planned(sweep, fake_losses(table))
    finals = {r.name: r.lr for r in runs if r.role == "final"}
    assert finals == {"nano-bp": 4e-3, "nano-zbp_n4": None} and tuned.laws == {}
    assert next(r for r in runs if r.name == "nano-zbp_n4").waits_for == ("nano-zbp_n4-lr1e-3",)  # grown at its edge


def test_a_tuning_run_stopped_and_resumed_trains_as_its_straight_run(tmp_path, data_dir):
    """A grid run on a part of the budget (Tune.budget=0.5: its own steps, its cosine over them) stopped by a stop
    signal at step 3 and resumed trains bit for bit as it does straight: resume works for tuning runs as for any."""
    import torch

    from conftest import losses
    from zbpscale import signals
    from zbpscale.train import checkpoint
    from zbpscale.train.loop import train

    sweep = load_sweep(write(tmp_path, budget=0.5, steps=12, data=str(data_dir)))
    run = next(r for r in tuning.planned(sweep)[0] if r.role == "tuning")
    cfg = run.train_config()
    assert cfg.steps == 6 and run.name == "nano-bp-lr2e-3"
    folders = {name: tmp_path / name for name in ("straight", "stopped")}
    for folder in folders.values():
        folder.mkdir()
        RunFolder(folder).config.write_text(json.dumps(cfg.to_dict()))
    assert train(cfg, folders["straight"]) == "completed"
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(signals, "received", lambda: 12 if len(losses(folders["stopped"])) >= 3 else 0)
        assert train(cfg, folders["stopped"]) == "checkpointed"
    assert train(cfg, folders["stopped"]) == "completed"
    assert losses(folders["stopped"]) == losses(folders["straight"]) and len(losses(folders["straight"])) == 6
    a, b = (checkpoint.load_latest(f)["model"] for f in folders.values())
    assert all(torch.equal(a[k], b[k]) for k in a)


# ------------------------------------------------------------------------------------------ end to end
@pytest.mark.slow
def test_a_tuning_sweep_through_the_local_queue(tmp_path, data_dir):
    """nano and micro tuned (3 lrs x bp, zbp_n4), tiny transferred by the law: `submit` sends the tuning runs
    and says the final runs wait; `submit --wait` sends each final run once its lr is known, at that lr."""
    path = write(tmp_path, steps=4, data=str(data_dir))
    command = [sys.executable, "-m", "zbpscale.submit", str(path), "--executor", "local", "--max-parallel", "2"]
    first = subprocess.run(command + ["--dry-run"], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert first.returncode == 0, first.stdout + first.stderr
    assert first.stdout.count("wait (tuning)") == 6  # every final run
    plan = unwrapped(first.stdout)
    assert "nano-bp: lr waits for 3 tuning runs (nano-bp-lr2e-3, nano-bp-lr4e-3, nano-bp-lr8e-3)" in plan
    out = subprocess.run(command + ["--wait"], cwd=tmp_path, capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "tuning: the lr of" in out.stdout and re.search(r"all \d+ runs complete", out.stdout), out.stdout
    sweep = load_sweep(path)
    runs, tuned = tuning.planned(sweep)  # now from the tuning runs' own records
    for run in runs:
        folder = RunFolder(run.run_dir)
        assert folder.complete.exists(), run.name
        config = json.loads(folder.config.read_text())
        assert config["lr"] == run.lr, (run.name, config["lr"], run.lr)
        assert [a["event"] for a in read_attempts(run.run_dir)][0] == "submitted"
    table = out.stdout.split(re.search(r"all \d+ runs complete", out.stdout)[0])[1]  # what --wait ends with
    assert all(re.search(rf"^{re.escape(r.name)} ", table, re.M) for r in runs), table  # grid steps it added too
    finals = {r.name: r for r in runs if r.role == "final"}
    losses = {r.name: tuning.final_loss(r) for r in runs if r.role == "tuning"}
    for arm in ("bp", "zbp_n4"):
        for size in ("nano", "micro"):
            grid = {r.lr: losses[r.name] for r in runs if r.role == "tuning" and r.size.name == size
                    and r.arm.name == arm}
            assert finals[f"{size}-{arm}"].lr == min(grid, key=lambda lr: (grid[lr], lr))  # the table's best
        assert finals[f"tiny-{arm}"].lr_from.startswith("lr law")
    plan = json.loads(RunFolder(finals["tiny-bp"].run_dir).plan.read_text())
    assert plan["role"] == "final" and plan["lr_from"].startswith("lr law")
    status = subprocess.run([sys.executable, "-m", "zbpscale.cli", "status", str(path)], cwd=tmp_path,
                            capture_output=True, text=True, timeout=120)
    assert status.returncode == 0, status.stdout + status.stderr
    assert " grid " in status.stdout and "lr" in status.stdout.splitlines()[1]  # the lr column, grid runs marked
    edges = [f"{s}-{a}: lr" for (s, a), c in tuned.choices.items() if c.edge]  # never taken silently
    assert all(any(line.startswith(e) and "the optimum may lie beyond it" in line
                   for line in unwrapped(status.stdout).splitlines()) for e in edges), status.stdout
    bundle = tmp_path / "results" / "tuned"
    for args in (["collect", str(path)], ["plot", str(bundle)]):
        done = subprocess.run([sys.executable, "-m", "zbpscale.cli", *args], cwd=tmp_path, capture_output=True,
                              text=True, timeout=300)
        assert done.returncode == 0, done.stdout + done.stderr
    assert (bundle / "figures" / "lr_sensitivity.png").stat().st_size > 10_000
    summary = json.loads((bundle / "summary.json").read_text())["runs"]
    assert {(r["run"], r["role"], r["lr"]) for r in summary} == {(r.name, r.role, r.lr) for r in runs}
    table = (bundle / "table.md").read_text()
    for (size, arm), choice in tuned.choices.items():  # the table's choice is the one the final runs trained at
        assert f"| {size} | {arm} | {choice.lrs} lrs | {lr_text(choice.lr)} |" in table
        assert finals[f"{size}-{arm}"].lr == choice.lr
    grid = sorted(r.name for r in runs if r.role == "tuning")  # the grid runs the sweep file plans
    assert json.loads((bundle / "summary.json").read_text())["tune"] == {"sizes": ["nano", "micro"], "check": [],
                                                                          "near": 3e-3, "grid": grid}
    for arm, law in tuned.laws.items():  # and its law the one tiny's final runs took their lr from
        assert f"{arm} {law.words().removeprefix('lr law ')}" in unwrapped(table)
    # #56: the report of the sweep file (its bundle, brought up to date first) has the lr section and its figure
    done = subprocess.run([sys.executable, "-m", "zbpscale.cli", "report", str(path)], cwd=tmp_path,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and f"wrote {bundle / 'report.html'}" in done.stdout, done.stdout + done.stderr
    page = (bundle / "report.html").read_text()
    assert '<section id="lr">' in page and 'id="lr_sensitivity-' in page


# ------------------------------------------------------------------------------------------ the bundle
def row(run: str, size: str, arm: str, lr: float, loss: float | None, *, seed: int = 0, role: str = "tuning",
        state: str = "complete", params: int = 0):
    from zbpscale.results.bundle import summary_row

    return summary_row(dict(run=run, size=size, arm=arm, seed=seed, lr=lr, role=role, state=state,
                            final_val_loss=loss, params_non_embedding=params, params=params, steps=4,
                            tokens=4 * 64, in_progress=False, wall_time_s=1.0, attempts=1, timeouts=0, preemptions=0))


def test_the_bundle_s_lrs_and_what_tuning_changed_in_the_gap():
    """results/lr.py on hand-made rows: the choice per size and arm, the law through the tuned sizes, and the gap
    at each arm's own best lr next to the gap at BP's best lr (ZBP's loss there minus BP's best)."""
    from zbpscale.results.lr import lr_markdown, tuning_of

    rows = [row("a-bp-lr1e-3", "a", "bp", 1e-3, 3.30, params=10**5),
            row("a-bp-lr2e-3", "a", "bp", 2e-3, 3.20, params=10**5),
            row("a-bp-lr4e-3", "a", "bp", 4e-3, 3.25, params=10**5),
            row("a-zbp_n4-lr1e-3", "a", "zbp_n4", 1e-3, 3.40, params=10**5),
            row("a-zbp_n4-lr2e-3", "a", "zbp_n4", 2e-3, 3.50, params=10**5),
            row("a-zbp_n4-lr4e-3", "a", "zbp_n4", 4e-3, None, state="failed", params=10**5),  # diverged
            row("b-bp-lr5e-4", "b", "bp", 5e-4, 3.0, params=10**6),
            row("b-bp-lr1e-3", "b", "bp", 1e-3, 2.9, params=10**6),
            row("b-bp-lr2e-3", "b", "bp", 2e-3, 2.95, params=10**6),
            row("b-zbp_n4-lr1e-3", "b", "zbp_n4", 1e-3, None, state="running", params=10**6),  # not yet
            row("a-bp", "a", "bp", 2e-3, 3.2, role="final", params=10**5),
            row("c-bp", "c", "bp", 5e-4, 2.7, role="final", params=10**7)]
    t = tuning_of(rows)
    assert {k: (c.lr, c.edge) for k, c in t.choices.items()} == {
        ("a", "bp"): (2e-3, ""), ("a", "zbp_n4"): (1e-3, "low"), ("b", "bp"): (1e-3, "")}
    assert t.laws["bp"].b == pytest.approx(math.log10(0.5)) and "zbp_n4" not in t.laws  # one size tuned
    (size, arm, own, shared), = t.gaps
    assert (size, arm) == ("a", "zbp_n4") and own == pytest.approx(3.40 - 3.20) and shared == pytest.approx(0.30)
    text = lr_markdown(t, [r for r in rows if r.role == "final"])
    assert "| a | zbp_n4 | 3 lrs | 1e-3 | 3.4000 | 1e-3 | low |  |" in text
    assert "| c | bp | (lr law) | | | | | 5e-4 |" in text
    assert "zbp_n4 at a: +0.2000 at its own best lr, +0.3000 at BP's" in text


def test_a_size_whose_bp_grid_diverged_at_every_lr_has_no_gap_from_tuning():
    """BP's grid at a size all diverged (each answers inf): what tuning changed in the gap there is said to be
    none (it was -inf: ZBP's loss minus BP's infinite one)."""
    from zbpscale.results.lr import lr_markdown, tuning_of

    rows = [dataclasses.replace(row(f"a-bp-lr{lr:g}", "a", "bp", lr, None, state="failed", params=10**5),
                                stopped_nonfinite=True) for lr in (1e-3, 2e-3, 4e-3)]
    rows += [row(f"a-zbp_n4-lr{lr:g}", "a", "zbp_n4", lr, loss, params=10**5)
             for lr, loss in ((1e-3, 3.4), (2e-3, 3.3), (4e-3, 3.5))]
    t = tuning_of(rows)
    assert t.choices["a", "bp"].loss == math.inf
    (size, arm, own, shared), = t.gaps
    assert (size, arm) == ("a", "zbp_n4") and math.isnan(own) and math.isnan(shared)
    text = lr_markdown(t, [])
    assert "zbp_n4 at a: none, BP diverged at every lr of its grid." in text and "inf" not in text.split("changed")[1]


def test_a_loss_not_finite_answers_lr_too_high_and_a_grid_not_all_answered_chooses_nothing(tmp_path):
    """One rule for the planner and the bundle (tuning.answer): a grid run that completed with a nan val loss, or
    that its trainer stopped at a non-finite loss, answers inf (the planner raised on nan, every command of the
    sweep with it; the bundle waited for it for ever); a run that crashed or was cancelled has not answered, and its
    size and arm have no choice in the bundle yet, as the planner's final runs wait (the bundle chose from the runs
    that had answered: a 1-lr 'grid' at its low edge); the near-best margin is the sweep's Tune.near."""
    from types import SimpleNamespace

    from zbpscale.results.lr import lr_markdown, tuning_of

    folder = tmp_path / "nano-bp-lr1e30"
    folder.mkdir()
    (folder / "metrics.jsonl").write_text(json.dumps({"kind": "eval", "time": 0.0, "step": 0, "tokens": 8,
                                                      "val_loss": math.nan}) + "\n")
    (folder / "COMPLETE").write_text("{}\n")
    assert tuning.final_loss(SimpleNamespace(run_dir=folder)) == math.inf
    assert tuning.best_lr({1e-3: [3.0], 1e30: [tuning.final_loss(SimpleNamespace(run_dir=folder))]}).lr == 1e-3

    def told(r, **fields):
        return dataclasses.replace(r, **fields)

    rows = [row("a-bp-lr1e-3", "a", "bp", 1e-3, 3.30, params=10**5),
            told(row("a-bp-lr2e-3", "a", "bp", 2e-3, math.nan, params=10**5), stopped_nonfinite=False),
            told(row("a-bp-lr4e-3", "a", "bp", 4e-3, None, state="failed", params=10**5), stopped_nonfinite=True),
            told(row("a-zbp_n4-lr1e-3", "a", "zbp_n4", 1e-3, 3.40, params=10**5), stopped_nonfinite=False),
            told(row("a-zbp_n4-lr2e-3", "a", "zbp_n4", 2e-3, None, state="failed", params=10**5),
                 stopped_nonfinite=False),  # crashed, its bounds spent: a retry resumes it
            told(row("a-zbp_n4-lr4e-3", "a", "zbp_n4", 4e-3, None, state="cancelled", params=10**5),
                 stopped_nonfinite=False)]
    t = tuning_of(rows, tune={"sizes": ["a"], "check": [], "near": 0.5})
    assert {k: (c.lr, c.loss, c.edge) for k, c in t.choices.items()} == {("a", "bp"): (1e-3, 3.30, "low")}
    assert t.waiting == {("a", "zbp_n4"): ("a-zbp_n4-lr2e-3", "a-zbp_n4-lr4e-3")}
    text = lr_markdown(t, [])
    assert "| a | zbp_n4 | waits for 2 runs | | | | |  |" in text, text
    assert "an lr whose loss is within 0.5 of the best's is near-best" in text, text


def test_grid_runs_the_sweep_file_no_longer_plans_are_left_out_of_the_bundle_s_choice_as_the_planner_leaves_them(
        tmp_path):
    """A grid narrowed after all its runs answered (Tune.grid, extend): the planner chose among the runs it plans,
    the bundle among every grid run it held, so the table, claims and report gave another best lr and law than the
    one the final runs trained at (a helper's sweep, 2026-12-06). With the grid runs collect names (summary.json's
    tune.grid), the bundle's choices are those of the planned runs alone (compared with a bundle without the
    others); plot says which it left out."""
    from zbpscale.results.lr import tuning_of

    rows = [row(f"{size}-bp-lr{lr:g}", size, "bp", lr, loss, params=n)
            for size, n, losses in (("a", 10**5, (3.30, 3.20, 3.25, 3.10)), ("b", 10**6, (3.00, 2.90, 2.95, 2.80)))
            for lr, loss in zip((1e-3, 2e-3, 4e-3, 1.6e-2), losses)]  # 1.6e-2: best, no longer planned
    planned = [r for r in rows if r.lr != 1.6e-2]
    tune = {"sizes": ["a", "b"], "check": [], "near": 3e-3, "grid": [r.run for r in planned]}
    t, reference = tuning_of(rows, tune=tune), tuning_of(planned, tune={**tune, "grid": None})
    assert {k: c.lr for k, c in t.choices.items()} == {("a", "bp"): 2e-3, ("b", "bp"): 2e-3}
    assert t.choices == reference.choices and t.laws == reference.laws and t.losses == reference.losses
    assert tuning_of(rows, tune={**tune, "grid": None}).choices[("a", "bp")].lr == 1.6e-2  # an older bundle: as it was
    from zbpscale.results.plot import draw
    from zbpscale.results.summary import FIELDS

    bundle = tmp_path / "bundle"
    (bundle / "runs").mkdir(parents=True)
    (bundle / "summary.json").write_text(json.dumps({"sweep": "t", "fields": list(FIELDS), "tune": tune,
                                                     "runs": [dataclasses.asdict(r) for r in rows]}))
    notes = draw(bundle, bundle / "figures", formats=("png",)).notes
    assert "grid runs the sweep file no longer plans, left out of the lr choices and law as the planner leaves " \
           "them: a-bp-lr0.016, b-bp-lr0.016" in notes, notes


def test_the_bundle_s_lr_law_is_the_one_the_final_runs_took_theirs_from(tmp_path):
    """A sweep tuning nano and micro and checking the law at tiny: the bundle's law (results/lr.py, told the tuned
    sizes as collect keeps them) is the planner's own, not a fit through the checked size too; the check says the
    law's lr at tiny and the best of the grid around it. A bundle that does not name its tuned sizes fits every size
    with a grid, and says so."""
    from zbpscale.results.collect import tuned_sizes
    from zbpscale.results.lr import lr_markdown, tuning_of

    sweep = load_sweep(write(tmp_path, check=("tiny",)))
    table = {"nano-bp-lr2e-3": 3.5, "nano-bp-lr4e-3": 3.4, "nano-bp-lr8e-3": 3.45,
             "micro-bp-lr1e-3": 3.3, "micro-bp-lr2e-3": 3.2, "micro-bp-lr4e-3": 3.25}
    runs, _ = tuning.planned(sweep, fake_losses(table))
    grid = [r for r in runs if r.size.name == "tiny" and r.arm.name == "bp" and r.role == "tuning"]
    table.update({grid[0].name: 3.1, grid[1].name: 3.05, grid[2].name: 3.0})  # the law's lr x 2 is the best
    runs, tuned = tuning.planned(sweep, fake_losses(table))
    rows = [row(r.name, r.size.name, r.arm.name, r.lr, table[r.name], params=r.size.params_non_embedding)
            for r in runs if r.name in table]
    tune = tuned_sizes(sweep)
    assert tune == {"sizes": ["nano", "micro"], "check": ["tiny"], "near": 3e-3}
    t = tuning_of(rows, tune=tune)
    assert t.laws == tuned.laws and t.laws["bp"].sizes == 2  # a, b and their interval: the planner's, exactly
    ((size, arm, law_lr, best),) = t.checks
    assert (size, arm, law_lr, best) == ("tiny", "bp", grid[1].lr, grid[2].lr)
    text = lr_markdown(t, [])
    assert "through the best lr of the tuned sizes (nano, micro), as the sweep fitted it" in text
    assert f"bp {tuned.laws['bp'].words().removeprefix('lr law ')}" in text
    assert f"bp at tiny: {lr_text(grid[1].lr)}, best {lr_text(grid[2].lr)} (x2)" in text
    older = tuning_of(rows)  # a bundle collected before summary.json named the tuned sizes
    assert older.laws["bp"].sizes == 3 and older.laws["bp"].b != tuned.laws["bp"].b and not older.checks
    assert "this bundle does not name the sweep's tuned sizes: collect it again" in lr_markdown(older, [])


@pytest.mark.slow
def test_submit_wait_of_a_final_run_waits_for_its_grid_submitted_apart(tmp_path, data_dir):
    """The grid submitted alone (--only), then `submit --only nano-bp --wait` at once: it ended at once with 'not
    complete: nano-bp ... which did not answer' while the grid runs were queued. It waits for them, submits the
    final run once its lr is known, at that lr, and ends complete."""
    path = write(tmp_path, sizes=("nano",), rungs=("nano",), data=str(data_dir), extend=0, steps=4)
    command = [sys.executable, "-m", "zbpscale.submit", str(path), "--executor", "local"]
    grid = subprocess.run(command + ["--only", "nano-bp-lr*"], cwd=tmp_path, capture_output=True, text=True,
                          timeout=120)
    assert grid.returncode == 0, grid.stdout + grid.stderr
    out = subprocess.run(command + ["--only", "nano-bp", "--wait"], cwd=tmp_path, capture_output=True, text=True,
                         timeout=600)
    assert out.returncode == 0 and "all 1 run complete" in out.stdout, out.stdout + out.stderr
    assert "tuning: the lr of nano-bp is known: submitting" in out.stdout, out.stdout
    runs, tuned = tuning.planned(load_sweep(path))
    final = next(r for r in runs if r.name == "nano-bp")
    assert RunFolder(final.run_dir).complete.exists() and final.lr == tuned.choices["nano", "bp"].lr
    assert json.loads(RunFolder(final.run_dir).config.read_text())["lr"] == final.lr
    path.write_text(path.read_text().replace("grid=(0.5, 1, 2),", "grid=(0.5, 1, 2, 4),"))  # after it completed
    again = subprocess.run(command + ["--only", "nano-bp*", "--wait"], cwd=tmp_path, capture_output=True, text=True,
                           timeout=600)
    assert again.returncode == 0 and "all 5 runs complete" in again.stdout, again.stdout + again.stderr
    assert "the lr of nano-bp is known" not in again.stdout, again.stdout  # it said 'submitting' of a complete run
    now = tuning.planned(load_sweep(path))[1].choices["nano", "bp"].lr
    assert now != final.lr, "the grown grid's best is the old one: the note below is not exercised"
    status = subprocess.run([sys.executable, "-m", "zbpscale.cli", "status", str(path)], cwd=tmp_path,
                            capture_output=True, text=True, timeout=120)
    assert f"nano-bp: trained at lr {lr_text(final.lr)} ({final.lr_from}); its tuning's choice is now " \
           f"{lr_text(now)}: its numbers are at the old lr" in unwrapped(status.stdout), status.stdout


@pytest.mark.slurm
@pytest.mark.slow
def test_a_tuning_sweep_on_slurm_as_arrays_then_its_final_runs(tmp_path, data_dir, slurm_cluster):
    """The test SLURM: the grid of each size goes as one job array (bp and zbp_n4 x 3 lrs: one sbatch), the
    final runs are submitted by `submit --wait` once their size and arm's grid has answered, at the chosen lr."""
    _, env = slurm_cluster
    path = write(tmp_path, steps=4, data=str(data_dir), extend=0, rungs=("nano", "micro"))
    out = subprocess.run([sys.executable, "-m", "zbpscale.submit", str(path), "--executor", "slurm", "--wait"],
                         cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "tuning: the lr of" in out.stdout and "all 16 runs complete" in out.stdout, out.stdout
    runs, tuned = tuning.planned(load_sweep(path))
    jobs = {}
    for run in runs:
        (job,) = [a["job_id"] for a in read_attempts(run.run_dir) if a["event"] == "submitted"]
        jobs.setdefault((run.size.name, run.role), set()).add(job.partition("_")[0])
        assert json.loads(RunFolder(run.run_dir).config.read_text())["lr"] == run.lr
    assert len(jobs["nano", "tuning"]) == len(jobs["micro", "tuning"]) == 1, jobs  # a size's grid: one array
    # (a final run goes as soon as its own size and arm's grid has answered: by itself, or with others then ready)
    for (size, arm), choice in tuned.choices.items():
        final = next(r for r in runs if r.name == f"{size}-{arm}")
        assert final.lr == choice.lr  # an edge's lr too, said in its lr_from
        assert final.lr_from.endswith(f"at the {choice.edge} edge of the grid") == bool(choice.edge), final.lr_from
        start = min(a["time"] for a in read_attempts(final.run_dir) if a["event"] == "start")
        grid_ends = [a["time"] for r in runs if r.role == "tuning" and (r.size.name, r.arm.name) == (size, arm)
                     for a in read_attempts(r.run_dir) if a["event"] == "end"]
        assert start > max(grid_ends)  # the final run started after its grid had answered


def test_a_checked_size_tunes_a_small_grid_around_the_law_s_lr_once_the_law_is_known(tmp_path):
    sweep = load_sweep(write(tmp_path, check=("tiny",)))
    runs, _ = tuning.planned(sweep, fake_losses({}))
    assert not any(r.size.name == "tiny" and r.role == "tuning" for r in runs)  # no law yet: no check grid
    assert len(next(r for r in runs if r.name == "tiny-bp").waits_for) == 6
    table = {"nano-bp-lr2e-3": 3.5, "nano-bp-lr4e-3": 3.4, "nano-bp-lr8e-3": 3.45,
             "micro-bp-lr1e-3": 3.3, "micro-bp-lr2e-3": 3.2, "micro-bp-lr4e-3": 3.25}
    runs, tuned = tuning.planned(sweep, fake_losses(table))
    center = float(f"{tuned.laws['bp'].at(sweep.sizes[2].params_non_embedding):.3g}")
    grid = [r for r in runs if r.size.name == "tiny" and r.arm.name == "bp" and r.role == "tuning"]
    assert [r.lr for r in grid] == [float(f"{center * m:.3g}") for m in (0.5, 1.0, 2.0)]
    final = next(r for r in runs if r.name == "tiny-bp")
    assert final.waits_for == tuple(r.name for r in grid) and final.lr is None
    table.update({grid[0].name: 3.1, grid[1].name: 3.0, grid[2].name: 3.05})
    runs, tuned = tuning.planned(sweep, fake_losses(table))
    final = next(r for r in runs if r.name == "tiny-bp")
    assert final.lr == grid[1].lr and final.lr_from.startswith(f"checked at tiny around the lr law's {lr_text(center)}")
    assert tuned.laws["bp"].sizes == 2  # the law is the tuned sizes' alone


def test_the_plan_of_a_cpu_tuning_sweep_counts_its_grid_and_the_check_to_come(tmp_path):
    """A helper's hunt: a CPU sweep's plan said nothing of its tuning (its note spoke only in GPU-hours, which a CPU
    run has none of), so mini_ladder's '57 runs' hid the 9 check runs planned once the lr law is known. The note
    counts both: 2 tuned sizes x 2 arms x 3 lrs now, 2 arms x the check grid's 3 lrs later."""
    from zbpscale.jobs.submit import tuning_notes

    sweep = load_sweep(write(tmp_path, check=("tiny",)))
    runs, tuned = tuning.planned(sweep, fake_losses({}))
    assert sum(r.role == "tuning" for r in runs) == 2 * 2 * 3
    assert f"tuning: 12 runs; {2 * len(sweep.tune.check_grid)} runs to come for the check at tiny (planned once the " \
           "lr law is known); budget 1 of a size's tokens" in tuning_notes(sweep, runs, tuned)
    # --only: the check of the sizes and arms it selects, no word of tuning it does not select ('0 runs ... the check
    # at s350' was said of `--only 's1b-*'`)
    tiny_bp = [r for r in runs if r.name == "tiny-bp"]
    assert f"tuning: {len(sweep.tune.check_grid)} runs to come for the check at tiny (planned once the lr law is " \
           "known); budget 1 of a size's tokens" in tuning_notes(sweep, tiny_bp, tuned)
    assert not any(n.startswith("tuning:") for n in tuning_notes(sweep, [r for r in runs if r.name == "nano-bp"],
                                                                 tuned))


def test_what_collect_keeps_of_a_grid_and_a_final_run_whose_lr_waits(tmp_path):
    """A final run submitted at its grid's old best while its lr waits again keeps that lr in the bundle (collect
    blanked it: status showed it, the bundle did not); a grid run an earlier collect kept that the sweep file no
    longer plans and that never answered is dropped (its size and arm waited for it for ever in the bundle); the
    plan's budget note is about the final runs (a grid run trains Tune.budget of a size's tokens by design)."""
    from zbpscale.jobs.submit import budget_notes
    from zbpscale.results.collect import collect, superseded

    sweep = load_sweep(write(tmp_path, sizes=("nano",), rungs=("nano",), budget=0.5))
    runs, _ = tuning.planned(sweep, fake_losses({}))
    assert budget_notes(runs) == []  # it said 'nano: tokens 768 cut to 384' of the grid runs
    final = next(r for r in runs if r.name == "nano-bp")
    dataclasses.replace(final, lr=8e-3, waits_for=()).write_folder()
    rows = {r.run: r for r in collect(tmp_path / "tuned.py", log=lambda line: None)}
    assert rows["nano-bp"].lr == 8e-3 and rows["nano-zbp_n4"].lr is None  # the latter not submitted: no config
    old = row("nano-bp-lr1e-1", "nano", "bp", 0.1, None, state="cancelled")
    assert superseded({old.run: old}, rows, planned=True) == [
        ("nano-bp-lr1e-1", "a grid run the sweep file no longer plans, which never answered")]
    assert superseded({old.run: old}, rows, planned=False) == []  # collected from its folder: nothing to tell


def test_submit_wait_of_a_final_run_whose_grid_is_not_selected_says_what_it_waits_for(tmp_path):
    """`submit --only nano-bp --wait` while nano's grid has not run: it ended at once with 'not complete: nano-bp'
    and no word that the run waits for grid runs outside the selection."""
    path = write(tmp_path, sizes=("nano",), rungs=("nano",), data=str(tmp_path / "data"))
    out = subprocess.run([sys.executable, "-m", "zbpscale.submit", str(path), "--only", "nano-bp", "--wait",
                          "--executor", "local"], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert out.returncode == 1 and "not complete: nano-bp" in out.stdout, out.stdout + out.stderr
    assert "nano-bp: its lr waits for nano-bp-lr2e-3, nano-bp-lr4e-3, nano-bp-lr8e-3, which did not answer (not " \
           "selected, or cancelled or failed: status says)" in unwrapped(out.stdout), out.stdout


def test_an_lr_law_through_a_best_at_a_grid_s_edge_says_so(tmp_path):
    """Every grid's best at its edge (Tune.extend spent) is flagged at its size; the law through it, which gives
    the other sizes their lr, said nothing of it."""
    sweep = load_sweep(write(tmp_path, extend=0))
    table = {"nano-bp-lr2e-3": 3.3, "nano-bp-lr4e-3": 3.4, "nano-bp-lr8e-3": 3.45,  # the low edge
             "micro-bp-lr1e-3": 3.3, "micro-bp-lr2e-3": 3.2, "micro-bp-lr4e-3": 3.25}
    runs, _ = tuning.planned(sweep, fake_losses(table))
    tiny = next(r for r in runs if r.name == "tiny-bp")
    assert tiny.lr_from.startswith("lr law") and tiny.lr_from.endswith("; through the best lr at a grid's edge at nano")
    from zbpscale.jobs.status import notes  # status said it of the grid's size, not of the sizes the law gave an lr
    row = dict(run="tiny-bp", size="tiny", arm="bp", lr=tiny.lr, lr_from=tiny.lr_from, lr_planned=tiny.lr,
               role="final", state="new", reason="", step=0)
    assert notes([row]) == [(f"tiny-bp: lr {lr_text(tiny.lr)}, {tiny.lr_from}: a best beyond that grid would move "
                             "the law (Tune.extend, Tune.grid)", "stopped")]
