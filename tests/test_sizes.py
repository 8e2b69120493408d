"""A ladder of your own (#60 items 1-2): a size with a model shape of its own, in Python (`ModelConfig`) or in a YAML
file of the same fields; checked at load with file:line (the sweep file's, and the YAML file's); `zbpscale sizes`
of a sweep and `--params`; and a sweep of two own-shape rungs through the local queue: plan, train, status,
collect and plot, each rung placed by its non-embedding N. Compared with the closed-form counts of the shapes
written in the test, and with the trainer's own config.json."""

from __future__ import annotations

import dataclasses
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from zbpscale.errors import ConfigError
from zbpscale.jobs.sweep import load_sweep
from zbpscale.run.config import ModelConfig, n_params, shape_from_yaml, shapes_near, train_fields_from_yaml
from zbpscale.run.folder import RunFolder

SWEEP = """\
from zbpscale.sweep import Data, ModelConfig, Resources, Size, Sweep, arm

CPU = Resources(nodes=1, gpus_per_node=0, tasks_per_node=1, cpus_per_task=1, time_min=30)
SWEEP = Sweep(
    name="own",
    sizes=(
        Size(name="p1", model=ModelConfig(n_layer=1, n_head=2, d_model=32, max_seq_len=32),
             global_batch=4, tokens=4 * 32 * {steps}, lr=3e-3, resources=CPU),
        Size(name={name!r}, model={model!r},
             global_batch=4, tokens=4 * 32 * {steps}, lr=3e-3, resources=CPU),
    ),
    arms=(arm("bp"), arm("zbp_n4")),
    data=Data(dir={data!r}, source="embedded", workers=1),
    train=(("eval_every", 2), ("eval_batches", 1), ("ckpt_every", 0), ("ckpt_every_s", 0)),
    root={root!r},
)
"""

YAML = "n_layer: 2\nn_head: 2\nd_model: 64\nmax_seq_len: 32\n"


def write(tmp_path: Path, *, name="y2", model="configs/model/y2.yaml", yaml=YAML, steps=4, data="data") -> Path:
    (tmp_path / "sweeps" / "configs" / "model").mkdir(parents=True, exist_ok=True)
    (tmp_path / "sweeps" / "configs" / "model" / "y2.yaml").write_text(yaml)
    path = tmp_path / "sweeps" / "own.py"
    path.write_text(SWEEP.format(name=name, model=model, steps=steps, data=str(data), root=str(tmp_path / "jobs")))
    return path


def test_a_size_of_its_own_shape_in_python_and_in_yaml_is_planned_as_a_preset_is(tmp_path):
    """Both spellings give the shape written (the YAML file found beside the sweep file, whatever the working
    folder); the runs train that shape (with the arm's estimator), counted in closed form."""
    sweep = load_sweep(write(tmp_path))
    p1, y2 = sweep.sizes
    assert p1.shape() == ModelConfig(n_layer=1, n_head=2, d_model=32, max_seq_len=32)
    assert y2.shape() == ModelConfig(n_layer=2, n_head=2, d_model=64, max_seq_len=32)
    assert y2.model_file == "configs/model/y2.yaml" and p1.model_file == ""
    assert y2.params_non_embedding == n_params(y2.shape(), embeddings=False) > p1.params_non_embedding
    from zbpscale.jobs.sweep import expand

    zbp = next(r for r in expand(sweep) if r.name == "y2-zbp_n4").train_config()
    assert zbp.model.n_layer == 2 and zbp.model.d_model == 64 and zbp.model.zbp is not None and zbp.model.zbp.n == 4


def test_the_plan_lists_a_sweep_s_rungs_by_their_non_embedding_count(tmp_path):
    """A rung of one's own listed before a smaller one: the plan listed it first (the sweep file's order), where
    status, collect and the figures order by N (a helper's hunt)."""
    path = write(tmp_path)
    path.write_text(path.read_text().replace('Size(name="p1"', 'Size(name="p0"').replace(
        "sizes=(\n", 'sizes=(\n        Size(name="p9", model=ModelConfig(n_layer=3, n_head=2, d_model=64, '
        'max_seq_len=32), global_batch=4, tokens=4 * 32 * 4, lr=3e-3, resources=CPU),\n'))
    out = subprocess.run([sys.executable, "-m", "zbpscale.submit", str(path), "--dry-run", "--executor", "local"],
                         capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr
    listed = re.findall(r"^\W*(p0|y2|p9)-(bp|zbp_n4) ", out.stdout, re.M)
    assert listed == [(s, a) for s in ("p0", "y2", "p9") for a in ("bp", "zbp_n4")], out.stdout
    relative = write(tmp_path, data="../data")  # Data.dir starts at the project folder: said without its '..'
    out = subprocess.run([sys.executable, "-m", "zbpscale.submit", str(relative), "--dry-run", "--executor", "local"],
                         capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert f"data in {tmp_path.parent / 'data'}\n" in out.stdout.replace("\n  ", " "), out.stdout + out.stderr


def test_a_yaml_shape_is_found_from_the_project_folder_as_init_configs_writes_it(tmp_path):
    """`zbpscale init DIR --configs` writes DIR/configs/model/<preset>.yaml and the sweeps into DIR/sweeps/; a size's
    `model="configs/model/<x>.yaml"` is read from DIR, as the sweep's jobs/ and data/ are (where both DIR and the
    sweep file's folder hold the file, DIR's; a file only beside the sweep file, as releases before 2026-12-05 read
    it, still is); the shape is the preset's, field for field."""
    from zbpscale.examples import write_configs
    from zbpscale.run.config import SIZES

    write_configs(tmp_path)
    path = write(tmp_path, name="mytiny", model="configs/model/tiny.yaml")
    assert load_sweep(path).sizes[1].shape() == SIZES["tiny"]
    beside = tmp_path / "sweeps" / "configs" / "model" / "tiny.yaml"  # another shape, beside the sweep file
    beside.write_text(YAML)
    assert load_sweep(path).sizes[1].shape() == SIZES["tiny"]
    (tmp_path / "configs" / "model" / "tiny.yaml").unlink()
    assert load_sweep(path).sizes[1].shape().d_model == 64  # the older place


@pytest.mark.parametrize("where", ["sweep", "yaml"])
def test_a_sweep_or_shape_file_that_is_not_utf8_is_one_line(tmp_path, where):
    path = write(tmp_path)
    target = path if where == "sweep" else tmp_path / "sweeps" / "configs" / "model" / "y2.yaml"
    target.write_bytes(target.read_bytes() + "# caf\u00e9\n".encode("latin-1"))
    with pytest.raises(ConfigError) as err:
        load_sweep(path)
    assert f"{target} is not UTF-8 text" in str(err.value) and len(str(err.value).splitlines()) == 1, err.value


@pytest.mark.parametrize("change, at, words", [
    (dict(yaml=YAML.replace("d_model", "d_modle")), ("y2.yaml", 3),
     "a model shape has no field 'd_modle' (hint: did you mean 'd_model'?)"),
    (dict(yaml=YAML.replace("n_head: 2", "n_head: 3")), ("y2.yaml", 2), "n_head=3 must divide d_model=64"),
    (dict(yaml=YAML.replace("n_head: 2", "n_head: 64") + "pos_emb: rope\n"), ("y2.yaml", 2),
     "rope needs an even head dim (d_model / n_head), got 1"),
    (dict(yaml="n_layer: 2\nn_head: [2\n"), ("y2.yaml", 3), "not valid YAML"),
    (dict(yaml=YAML + "zbp: {n: 4}\n"), ("y2.yaml", 5), "zbp is an arm's setting, not a size's"),
    (dict(yaml="- 1\n- 2\n"), None, "holds a list, not a mapping of a model shape's fields"),
    (dict(yaml="# to do\n"), None, "holds nothing, not a mapping of a model shape's fields"),
    (dict(yaml=YAML + "n_head: 4\n"), ("y2.yaml", 5), "n_head is given twice (first on line 2)"),
    (dict(yaml=YAML + "init_std: abc\n"), ("y2.yaml", 5), "ModelConfig.init_std must be a number > 0, got 'abc'"),
    (dict(yaml=YAML + "rope_theta: 0\n"), ("y2.yaml", 5), "ModelConfig.rope_theta must be a number > 0, got 0"),
    (dict(yaml=YAML + "norm_eps: .nan\n"), ("y2.yaml", 5), "ModelConfig.norm_eps must be a number > 0, got nan"),
    (dict(yaml=YAML.replace("n_layer: 2", "n_layer: true")), ("y2.yaml", 1),
     "ModelConfig.n_layer must be an integer >= 1, got True"),
    (dict(model="configs/model/nope.yaml"), None, "nope.yaml cannot be read"),
    (dict(model="tiny"), None, "(hint: a preset is a size's name: Size(name='tiny', ...) without model=)"),
    (dict(name="y-2"), None, "Size name must not hold '-'"),
    (dict(name="tiny"), None, "Size name 'tiny' is a preset's"),
], ids=["unknown-key", "heads", "rope", "yaml-syntax", "zbp", "a-list", "comments-only", "twice", "float-text",
        "rope-theta-0", "eps-nan", "bool-int", "missing-file", "preset-as-model", "hyphen", "preset-name"])
def test_a_bad_shape_is_one_line_at_its_lines_and_writes_nothing(tmp_path, change, at, words):
    """The sweep file's line of the size at fault, then the YAML file's line of the key at fault where there is one;
    one line; nothing written."""
    path = write(tmp_path, **change)
    with pytest.raises(ConfigError) as err:
        load_sweep(path)
    message = f"{err.value}"
    name = change.get("name", "y2")
    line = next(i for i, text in enumerate(path.read_text().splitlines(), 1) if f"Size(name={name!r}" in text)
    assert message.startswith(f"{path}:{line}: ") and words in message, message
    if at is not None:
        assert f"{at[0]}:{at[1]}: " in message, message
    assert len(message.splitlines()) == 1 and not (tmp_path / "jobs").exists()


def test_yaml_numbers_with_an_exponent_and_no_dot_are_numbers(tmp_path):
    """`1e-5` is a float in YAML 1.2 and text in YAML 1.1 (PyYAML's): a shape's norm_eps and a training file's lr
    written so are read as the numbers they mean (the config held the string '1e-5' and the trainer crashed)."""
    (tmp_path / "m.yaml").write_text(YAML + "norm_eps: 1e-5\nrope_theta: +1E4\n")
    (tmp_path / "t.yaml").write_text("lr: 3e-4\nweight_decay: 1_0e-2\nsteps: 10\n")
    shape = shape_from_yaml(tmp_path / "m.yaml")
    assert (shape.norm_eps, shape.rope_theta) == (1e-5, 1e4)
    assert train_fields_from_yaml(tmp_path / "t.yaml") == {"lr": 3e-4, "weight_decay": 0.1, "steps": 10}
    (tmp_path / "t.yaml").write_text("lr: 3e-4\nzbp:\n  n: 16\n  scheme: central\n  n: 64\n")  # nested, twice
    with pytest.raises(ConfigError, match=r"t.yaml:5: n is given twice \(first on line 3\)"):
        train_fields_from_yaml(tmp_path / "t.yaml")


def test_a_model_file_edited_after_its_runs_trained_is_named_as_what_changed(tmp_path):
    """The plan's note on a run whose shape changed since it trained names the YAML file (it blamed the sweep file,
    which the user had not touched)."""
    from zbpscale.jobs.state import RunState
    from zbpscale.jobs.sweep import expand
    from zbpscale.jobs.sweep_edits import config_notes

    path = write(tmp_path)
    run = next(r for r in expand(load_sweep(path)) if r.name == "y2-bp")
    run.write_folder()
    (path.parent / "configs" / "model" / "y2.yaml").write_text(YAML.replace("n_layer: 2", "n_layer: 3"))
    runs = expand(load_sweep(path))
    notes = config_notes(runs, {r.name: RunState("complete") for r in runs}, apply=False, dry_run=True)
    assert [n for n in notes if n.startswith("y2-bp")] == [
        "y2-bp: its model file configs/model/y2.yaml changed since it trained (model.n_layer 2 -> 3); it stays as it "
        "was trained: for model.n_layer, train a new run (another name: a seed or an arm of the sweep), or move its "
        "folder aside to start it anew"]
    from zbpscale.jobs.submit import plan_rows
    from zbpscale.run.snapshot import Snapshot

    states = {r.name: RunState("complete") for r in runs}
    rows = {r["run"]: r for r in plan_rows(runs, {r.name: "leave" for r in runs}, states,
                                            {r.name: Snapshot(r.run_dir) for r in runs})}
    trained_shape = ModelConfig(n_layer=2, n_head=2, d_model=64, max_seq_len=32)  # its row: what it trained
    assert (rows["y2-bp"]["n"], rows["y2-bp"]["params"]) == (n_params(trained_shape, embeddings=False),
                                                             n_params(trained_shape))
    assert rows["y2-zbp_n4"]["n"] == n_params(dataclasses.replace(trained_shape, n_layer=3), embeddings=False)


@pytest.mark.parametrize("args, words", [
    (["--params", ""], "--params must be a parameter count, e.g. 760M or 1.2B, got ''"),  # printed the presets
    (["SWEEP", "--params", "5M"], "--params proposes shapes for any sweep; a sweep file lists its own sizes"),
])
def test_sizes_options_that_do_not_go_together_are_one_line(tmp_path, args, words):
    path = write(tmp_path)
    out = subprocess.run([sys.executable, "-m", "zbpscale.cli", "sizes", *[str(path) if a == "SWEEP" else a
                                                                           for a in args]],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and words in out.stderr and len(out.stderr.splitlines()) == 1, out.stderr


def test_a_bad_python_shape_points_at_its_line(tmp_path):
    """A ModelConfig of your own that fails its own checks is one line at the sweep file's line of that call."""
    path = write(tmp_path)
    path.write_text(path.read_text().replace("ModelConfig(n_layer=1, n_head=2,", "ModelConfig(n_layer=1, n_head=3,"))
    with pytest.raises(ConfigError) as err:
        load_sweep(path)
    line = next(i for i, text in enumerate(path.read_text().splitlines(), 1) if "n_head=3" in text)
    assert str(err.value).startswith(f"{path}:{line}: ") and "n_head=3 must divide d_model=32" in str(err.value)


def test_sizes_of_a_sweep_and_shapes_near_a_budget(tmp_path):
    """`zbpscale sizes SWEEP` lists its sizes by N with their shapes, counts and where each comes from;
    `--params 760M` proposes shapes whose non-embedding counts are within 10 % of it (every one checked here in
    closed form), and a small budget too."""
    path = write(tmp_path)
    out = subprocess.run([sys.executable, "-m", "zbpscale.cli", "sizes", str(path)], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    rows = [line.split() for line in out.stdout.splitlines()[1:]]
    assert [(r[0], r[3], r[-1]) for r in rows] == [("p1", "32", "own"), ("y2", "64", "configs/model/y2.yaml")]
    shape = shape_from_yaml(path.parent / "configs" / "model" / "y2.yaml")
    assert rows[1][7] == f"{n_params(shape, embeddings=False) / 1e6:.2f}M"
    for target in (760e6, 5e6):
        near = shapes_near(target)
        assert near and all(abs(n_params(s, embeddings=False) / target - 1) <= 0.1 for s in near)
        assert all(s.d_model % 64 == 0 and s.head_dim == 64 and 32 <= s.d_model / s.n_layer <= 128 for s in near)
    out = subprocess.run([sys.executable, "-m", "zbpscale.cli", "sizes", "--params", "760M"], capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0 and "model=ModelConfig(n_layer=" in out.stdout, out.stdout + out.stderr
    bad = subprocess.run([sys.executable, "-m", "zbpscale.cli", "sizes", "--params", "lots"], capture_output=True,
                         text=True, timeout=120)
    assert bad.returncode == 2 and "Traceback" not in bad.stderr and "--params must be a parameter count" in bad.stderr


@pytest.mark.slow
def test_a_ladder_of_own_shapes_goes_end_to_end_through_the_local_queue(tmp_path, data_dir):
    """Two rungs of their own (Python and YAML) x bp, zbp_n4: submit --wait trains them, their config.json holds the
    shape written, status shows them complete, collect's summary gives each rung its N, and plot draws the
    gap-vs-scale figure with the rungs ordered by N."""
    path = write(tmp_path, data=str(data_dir))
    out = subprocess.run([sys.executable, "-m", "zbpscale.submit", str(path), "--executor", "local", "--wait"],
                         cwd=tmp_path, capture_output=True, text=True, timeout=900)
    assert out.returncode == 0 and "all 4 runs complete" in out.stdout, out.stdout + out.stderr
    sweep = load_sweep(path)
    for size in sweep.sizes:
        config = json.loads(RunFolder(tmp_path / "jobs" / "own" / f"{size.name}-bp").config.read_text())
        assert {k: config["model"][k] for k in ("n_layer", "n_head", "d_model")} == {
            "n_layer": size.shape().n_layer, "n_head": size.shape().n_head, "d_model": size.shape().d_model}
    status = subprocess.run([sys.executable, "-m", "zbpscale.cli", "status", str(path), "--json"], cwd=tmp_path,
                            capture_output=True, text=True, timeout=120)
    assert status.returncode == 0 and {r["state"] for r in json.loads(status.stdout)["own"]} == {"complete"}
    bundle = tmp_path / "results" / "own"
    for args in (["collect", str(path)], ["plot", str(bundle)]):
        done = subprocess.run([sys.executable, "-m", "zbpscale.cli", *args], cwd=tmp_path, capture_output=True,
                              text=True, timeout=300)
        assert done.returncode == 0, done.stdout + done.stderr
    rows = json.loads((bundle / "summary.json").read_text())["runs"]
    by_size = {r["size"]: r["params_non_embedding"] for r in rows}
    assert by_size == {s.name: s.params_non_embedding for s in sweep.sizes}
    assert (bundle / "figures" / "gap_vs_scale.png").stat().st_size > 10_000
    table = (bundle / "table.md").read_text()
    assert table.index("| p1 ") < table.index("| y2 ")  # by N


def test_a_count_the_rule_cannot_reach_names_the_nearest_shape_it_makes():
    """`sizes --params 1M` said only that no shape was within 10%: it names the nearest count the rule reaches, the
    closest of every shape the rule allows (checked here by brute force over the small ones)."""
    for given, target in (("1M", 1e6), ("10", 10.0)):
        out = subprocess.run([sys.executable, "-m", "zbpscale.cli", "sizes", "--params", given], capture_output=True,
                             text=True, timeout=60)
        shapes = [ModelConfig(n_layer=n, n_head=d // 64, d_model=d) for n in range(1, 9) for d in range(64, 1025, 64)
                  if 32 <= d / n <= 128]
        best = min(shapes, key=lambda s: abs(n_params(s, embeddings=False) - target))
        assert out.returncode == 1 and out.stdout.strip().endswith(
            f"the nearest it makes: {n_params(best, embeddings=False):,} (n_layer={best.n_layer}, "
            f"d_model={best.d_model})"), out.stdout
