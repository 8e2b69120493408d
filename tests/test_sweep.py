"""Sweep files and the submit plan, without a scheduler.

Compared: the ladder's expansion with its closed-form size x arm x seed product and names; the plan's cost per
seed with the sum of its runs' estimates; each run's steps and
batch split with hand computation from the budget rule; the sbatch script submitit generates for every
ladder run with a reviewed golden file (tests/golden/ladder_sbatch.txt; regenerate it with
ZBPSCALE_UPDATE_GOLDEN=1 after a deliberate change, and review the diff); bad sweep files with the one-line
error contract (file, line, hint; no traceback); a run the node cannot hold with the same contract for the dry run
and the submit, and the tree before and after a refused submit; the plan's token count with the budget rounded up to
whole steps by hand.
"""

import dataclasses
import json
import math
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import unwrapped
from zbpscale.errors import ConfigError
from zbpscale.jobs.executors.slurm import sbatch_parameters
from zbpscale.jobs.state import RunState
from zbpscale.jobs.submit import plan_rows
from zbpscale.jobs.sweep import Arm, Data, Resources, Size, Sweep, arm, expand, load_sweep
from zbpscale.run.config import SIZES, n_params
from zbpscale.text import select

REPO = Path(__file__).resolve().parents[1]
GOLDEN = REPO / "tests" / "golden" / "ladder_sbatch.txt"


def test_ladder_expands_to_every_size_and_arm():
    sweep = load_sweep(REPO / "sweeps" / "ladder.py")
    grid = [r for r in expand(sweep) if r.role == "tuning"]  # #53: 5 lrs per arm at s60 and s124, seed 0
    assert [(r.name, r.steps) for r in grid] == [
        (f"{s}-{a}-lr{x}", size.steps) for s, size, lrs in (
            ("s60", sweep.sizes[0], ("3.75e-4", "7.5e-4", "1.5e-3", "3e-3", "6e-3")),
            ("s124", sweep.sizes[1], ("2.5e-4", "5e-4", "1e-3", "2e-3", "4e-3")))
        for a in ("bp", "zbp_n16", "zbp_n64") for x in lrs]
    runs = [r for r in expand(sweep) if r.role == "final"]
    assert [r.name for r in runs] == [f"{s}-{a}{x}" for s in ("s60", "s124", "s350", "s1b")
                                      for a in ("bp", "zbp_n16", "zbp_n64") for x in ("", "-s1", "-s2")]
    assert [r.seed for r in runs] == [0, 1, 2] * 12 and [r.train_config().seed for r in runs] == [0, 1, 2] * 12
    for run in runs:
        cfg = run.train_config()
        tokens = 20 * n_params(SIZES[run.size.name])
        assert cfg.steps == math.ceil(tokens / (cfg.global_batch * 1024))
        assert (cfg.model.zbp is None) == (run.arm.name == "bp")
        assert cfg.model.zbp is None or cfg.model.zbp.n == int(run.arm.name.split("_n")[1])
        assert cfg.device == "cuda" and Path(cfg.data_dir).is_absolute()
    s1b = next(r for r in runs if r.name == "s1b-bp")
    row = plan_rows([s1b], {"s1b-bp": "new"}, {"s1b-bp": RunState("new")})[0]
    assert (row["micro"], row["accum"], row["world"], row["gpus"]) == (8, 8, 16, 16)  # 1024 = 8 x 8 x 16


def render_ladder() -> str:
    from submitit.slurm.slurm import _make_sbatch_string

    blocks = []
    for run in expand(load_sweep(REPO / "sweeps" / "ladder.py")):
        script = _make_sbatch_string(command="python -u -m submitit.core._submit FOLDER", folder="/jobs/FOLDER",
                                     **sbatch_parameters(run))
        blocks.append(f"### {run.name}\n" + "".join(f"{line}\n" for line in script.splitlines()
                                                  if line.startswith("#SBATCH")))
    return "\n".join(blocks)


def test_ladder_sbatch_scripts_match_the_golden_file():
    text = render_ladder()
    if os.environ.get("ZBPSCALE_UPDATE_GOLDEN"):
        GOLDEN.write_text(text)
    assert text == GOLDEN.read_text()
    # The parameters that matter, spelled out: one rank per GPU, 2 nodes for s1b, signal before the limit.
    s1b = text.split("### s1b-zbp_n64\n")[1].split("###")[0]
    for line in ("--nodes=2", "--ntasks-per-node=8", "--gpus-per-node=8", "--signal=USR2@180", "--time=1440",
                 "--requeue"):
        assert f"#SBATCH {line}\n" in s1b


def test_a_rank_that_fails_ends_its_step():
    """srun ends the whole step when one rank exits non-zero (a hung rank's watchdog, a crash): its stopped or
    blocked peers would otherwise hold the allocation until the time limit."""
    from submitit.slurm.slurm import _make_sbatch_string

    run = expand(load_sweep(REPO / "sweeps" / "ladder.py"))[0]
    script = _make_sbatch_string(command="python -u -m submitit.core._submit FOLDER", folder="/jobs/FOLDER",
                                 **sbatch_parameters(run))
    (srun,) = [line for line in script.splitlines() if line.startswith("srun ")]
    assert "--kill-on-bad-exit=1" in srun.split(), srun


def test_only_selects_by_pattern():
    everything = expand(load_sweep(REPO / "sweeps" / "ladder.py"))
    assert [r.name for r in select(everything, "*-lr*")] == [r.name for r in everything if r.role == "tuning"]
    runs = [r for r in everything if r.role == "final"]
    assert [r.name for r in select(runs, "s60-*,*-zbp_n64")] == [
        "s60-bp", "s60-bp-s1", "s60-bp-s2", "s60-zbp_n16", "s60-zbp_n16-s1", "s60-zbp_n16-s2", "s60-zbp_n64",
        "s60-zbp_n64-s1", "s60-zbp_n64-s2", "s124-zbp_n64", "s350-zbp_n64", "s1b-zbp_n64"]
    assert [r.name for r in select(runs, "s1b-*-s2")] == ["s1b-bp-s2", "s1b-zbp_n16-s2", "s1b-zbp_n64-s2"]
    with pytest.raises(ConfigError, match="matches no run"):
        select(runs, "s2b-*")


def test_seeds_and_duplicates():
    sizes = (Size(name="tiny", global_batch=8, tokens=8192),)
    sweep = Sweep(name="x", sizes=sizes, arms=(arm("bp"),), seeds=(0, 1), data=Data(dir="d"))
    assert [r.name for r in expand(sweep)] == ["tiny-bp", "tiny-bp-s1"]
    with pytest.raises(ConfigError, match="duplicate run names: tiny-bp"):
        Sweep(name="x", sizes=sizes, arms=(arm("bp"), arm("bp")), data=Data(dir="d"))


def test_every_size_and_arm_of_many_seeds_is_checked_and_the_jobs_folder_kept_or_followed(tmp_path, monkeypatch):
    """A sweep checks each run's config as the trainer would, once for a run's seeds (their configs differ by the
    seed alone, checked as TrainConfig checks it): a size or an arm whose config the trainer would refuse is named,
    behind another that passes, at any seed count. A Sweep built in Python has no home: its folder follows the working
    folder; a sweep file's is its project's, wherever the command runs (kept once: each of its runs asks for it)."""
    ok, split = Size(name="tiny", global_batch=8, tokens=8192), Size(name="micro", global_batch=8, micro_batch=3,
                                                                     tokens=8192)
    seeds = tuple(range(5))
    with pytest.raises(ConfigError, match="run micro-bp: micro_batch=3 does not divide"):
        Sweep(name="x", sizes=(ok, split), arms=(arm("bp"),), seeds=seeds, data=Data(dir="d"))
    with pytest.raises(ConfigError, match="run tiny-zbp_n16: TrainConfig.eval_batches must be an integer >= 1"):
        Sweep(name="x", sizes=(ok,), arms=(arm("bp"), arm("zbp_n16", eval_batches=-2)), seeds=seeds,
              data=Data(dir="d"))
    sweep = Sweep(name="x", sizes=(ok,), arms=(arm("bp"),), seeds=seeds, data=Data(dir="d"))
    monkeypatch.chdir(tmp_path)
    assert sweep.jobs_dir == tmp_path / "jobs" / "x" and sweep.jobs_root == tmp_path / "jobs"
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    assert sweep.jobs_dir == tmp_path / "elsewhere" / "jobs" / "x"
    relative = dataclasses.replace(sweep, home="proj")  # a home given as a relative path: from the working folder too
    assert relative.jobs_dir == tmp_path / "elsewhere" / "proj" / "jobs" / "x"
    monkeypatch.chdir(tmp_path)
    assert relative.jobs_dir == tmp_path / "proj" / "jobs" / "x" and relative.jobs_root == tmp_path / "proj" / "jobs"
    (tmp_path / "sweeps").mkdir()
    (tmp_path / "sweeps" / "x.py").write_text("from zbpscale.sweep import Data, Size, Sweep, arm\n"
                                              "SWEEP = Sweep(name='x', sizes=(Size(name='tiny', global_batch=8, "
                                              "tokens=8192),), arms=(arm('bp'),), data=Data(dir='d'))\n")
    loaded = load_sweep(tmp_path / "sweeps" / "x.py")
    for where in (tmp_path, tmp_path / "sweeps"):
        monkeypatch.chdir(where)
        assert loaded.jobs_dir == tmp_path / "jobs" / "x" and loaded.jobs_root == tmp_path / "jobs"
        assert [r.run_dir for r in expand(loaded)] == [tmp_path / "jobs" / "x" / "tiny-bp"]


MULTILINE = """from zbpscale.sweep import Data, Resources, Size, Sweep, arm

CPU = Resources(gpus_per_node=0, cpus_per_task=2, time_min=30)
SWEEP = Sweep(
    name="t",
    sizes=(Size(name="tiny", global_batch=8, tokens=8 * 128 * 20, lr=3e-3,
                seq_len=128, warmup_frac=0.1, resources=CPU),),
    arms=(arm("bp"), arm("zbp_n4")),
    data=Data(dir="data/embedded", source='embedded',
              tokens=0, workers=1),
    train=(('eval_every', 10), ('eval_batches', 2)),
    max_timeouts=3,
)
"""
BAD_SWEEPS = [
    ("no_sweep.py", "X = 1\n", "defines no SWEEP"),
    ("wrong_type.py", "SWEEP = {'name': 'x'}\n", "SWEEP is {'name': 'x'}, not a zbpscale.sweep.Sweep"),
    ("none.py", "SWEEP = None\n", "SWEEP is None, not a zbpscale.sweep.Sweep"),  # it said: defines no SWEEP
    ("raises.py", "import math\n\nSWEEP = 1 / 0\n", "raises.py:3: ZeroDivisionError"),
    ("unknown_size.py", "from zbpscale.sweep import *\n\nS = Size(name='s2b', global_batch=8)\n",
     "unknown_size.py:3: unknown size 's2b'"),
    ("unknown_arm.py", "from zbpscale.sweep import *\nA = arm('zbp16')\n", "unknown_arm.py:2: unknown arm"),
    ("syntax.py", "SWEEP = (\n", "syntax.py:1: syntax error: '(' was never closed (hint: line 1 reads: SWEEP = ()"),
    ("unknown_field.py", "from zbpscale.sweep import *\n"
     "SWEEP = Sweep(name='x', sizes=(Size(name='tiny', global_batch=8),),\n"
     "    arms=(arm('bp', learning_rate=1.0),), data=Data(dir='d'))\n",
     "unknown_field.py:3: arm bp: 'learning_rate' is neither an arm's setting (step_time_ratio, ratio_source) nor a "
     "TrainConfig field (hint: TrainConfig's fields: betas, bf16,"),
    ("model_typo.py", "from zbpscale.sweep import *\nM = ModelConfig(n_layer=2,\n    n_heads=4, d_model=64)\n",
     "model_typo.py:3: ModelConfig has no field 'n_heads' (hint: did you mean n_head?)"),  # as a YAML shape's typo
    # Faults: values sbatch would reject after the run folders were written, or that make no sense: refused at load
    ("negative_signal_delay.py", "from zbpscale.sweep import *\n"
     "SWEEP = Sweep(name='x', sizes=(Size(name='tiny', global_batch=8),),\n"
     "    arms=(arm('bp'),), data=Data(dir='d'), signal_delay_s=-10)\n",
     "negative_signal_delay.py:3: Sweep.signal_delay_s must be an integer >= 0, got -10"),
    ("zero_cpus.py", "from zbpscale.sweep import *\nR = Resources(cpus_per_task=0)\n",
     "zero_cpus.py:2: Resources.cpus_per_task must be an integer >= 1, got 0"),
    ("negative_timeouts.py", "from zbpscale.sweep import *\n"
     "SWEEP = Sweep(name='x', sizes=(Size(name='tiny', global_batch=8),),\n"
     "    arms=(arm('bp'),), data=Data(dir='d'), max_timeouts=-1)\n",
     "negative_timeouts.py:3: Sweep.max_timeouts must be an integer >= 0, got -1"),
    ("signal_after_limit.py", "from zbpscale.sweep import *\nR = Resources(time_min=2)\n"
     "SWEEP = Sweep(name='x', sizes=(Size(name='tiny', global_batch=8, resources=R),),\n"
     "    arms=(arm('bp'),), data=Data(dir='d'), signal_delay_s=120)\n",
     "signal_after_limit.py:3: Sweep 'x': size tiny has time_min=2, not longer than signal_delay_s=120"),
    # A new user's mistakes (#24): the line of the field itself, a did-you-mean, every value checked at load
    *[(name, MULTILINE.replace(good, bad), message) for name, good, bad, message in (
        ("fast_poll.py", "max_timeouts=3", "max_timeouts=3, poll_s=2",  # #32: the controller is shared
         "fast_poll.py:12: Sweep.poll_s must be a number >= 10 (seconds between questions to the scheduler; sites "
         "ask for 60-120), got 2"),
        ("typo_sweep_field.py", "max_timeouts=3", "max_timeout=3",
         "typo_sweep_field.py:12: Sweep has no field 'max_timeout' (hint: did you mean max_timeouts?)"),
        ("typo_size_field.py", "warmup_frac=0.1", "warmup_fraction=0.1",
         "typo_size_field.py:7: Size has no field 'warmup_fraction' (hint: did you mean warmup_frac?)"),
        ("negative_workers.py", "workers=1", "workers=-2",
         "negative_workers.py:10: Data.workers must be an integer >= 1, got -2"),
        ("negative_data_tokens.py", "tokens=0,", "tokens=-5,",
         "negative_data_tokens.py:10: Data.tokens must be an integer >= 0 (0: the whole source), got -5"),
        ("unknown_source.py", "source='embedded'", "source='embeded'",
         "unknown_source.py:9: unknown Data.source 'embeded' (hint: did you mean 'embedded'?)"),
        ("negative_lr.py", "lr=3e-3", "lr=-3e-3", "negative_lr.py:6: Size tiny: lr must be a number > 0, got -0.003"),
        ("negative_warmup.py", "warmup_frac=0.1", "warmup_frac=-0.1",
         "negative_warmup.py:7: Size tiny: warmup_frac must be a number in [0, 1), got -0.1"),
        ("negative_seq_len.py", "seq_len=128", "seq_len=-3",
         "negative_seq_len.py:7: Size tiny: seq_len must be an integer >= 0 (0: the preset's), got -3"),
        ("typo_train_field.py", "('eval_every', 10)", "('eval_evry', 10)",
         "typo_train_field.py:11: Sweep 't': unknown TrainConfig field(s) eval_evry (hint: did you mean eval_every"),
        ("bad_train_value.py", "('eval_batches', 2)", "('eval_batches', -2)",
         "bad_train_value.py:11: run tiny-bp: TrainConfig.eval_batches must be an integer >= 1, got -2"),
        ("unknown_tracker.py", "max_timeouts=3,", "max_timeouts=3,\n    trackers=('wandb', 'mlflow'),",  # #34
         "unknown_tracker.py:13: Sweep.trackers names an unknown tracker 'mlflow' (hint: trackers: tensorboard, "
         "wandb)"),
        # #45: the trackers= line and a did-you-mean; seeds named twice at the seeds= line, with a hint that fits
        ("typo_tracker.py", "max_timeouts=3,", "max_timeouts=3,\n    trackers=('tensorbord',),",
         "typo_tracker.py:13: Sweep.trackers names an unknown tracker 'tensorbord' (hint: did you mean "
         "'tensorboard'?)"),
        ("tracker_not_a_name.py", "max_timeouts=3,", "max_timeouts=3,\n    trackers=(None,),",
         "tracker_not_a_name.py:13: Sweep.trackers must be a tuple of tracker names, e.g. ('tensorboard',), got "
         "(None,)"),
        ("repeated_seed.py", "max_timeouts=3,", "max_timeouts=3,\n    seeds=(0, 0),",
         "repeated_seed.py:13: Sweep.seeds names seed 0 more than once: (0, 0) (hint: each seed once: "
         "seeds=(0, 1))"),
        ("repeated_seeds.py", "max_timeouts=3,", "max_timeouts=3,\n    seeds=(0, 1, 1, 3),",
         "repeated_seeds.py:13: Sweep.seeds names seed 1 more than once: (0, 1, 1, 3) (hint: each seed once: "
         "seeds=(0, 1, 2, 3))"),
        ("big_seed.py", "max_timeouts=3,", "max_timeouts=3,\n    seeds=(0, 2**32),",  # it crashed 4 times
         "big_seed.py:13: Sweep.seeds must be a tuple of integers in [0, 2**32), got (0, 4294967296)"),
        # #59: a name becomes a folder under the jobs root and a job's name: one segment, checked at load
        *[(f"bad_name_{i}.py", 'name="t"', f"name={bad!r}",
           f"bad_name_{i}.py:5: Sweep.name must be one folder name of letters, digits, '.', '_' and '-', not "
           f"starting with '.' or '-', got {bad!r} (hint: e.g. {fixed!r}") for i, (bad, fixed) in enumerate((
               ("../esc", "_esc"), ("b/slash", "b_slash"), ("b space", "b_space"), (".hidden", "hidden"),
               ("-x", "x")))],
        ("empty_name.py", 'name="t"', 'name=""', "empty_name.py:5: Sweep.name must be a non-empty name, got ''"),
        ("micro_batch_split.py", "global_batch=8,", "global_batch=8, micro_batch=3,",  # at load, not at submit
         "micro_batch_split.py:6: run tiny-bp: micro_batch=3 does not divide the per-rank batch 8 (global_batch=8 / "
         "world size 1)"),
        ("ranks_split.py", "cpus_per_task=2,", "cpus_per_task=2, tasks_per_node=3,",  # it said GPUs of a CPU run
         "ranks_split.py:6: run tiny-bp: global_batch=8 is not divisible by world size 3 (hint: pick a global batch "
         "that is a multiple of 3, the number of ranks (one per GPU; tasks_per_node of a CPU run))"),
        ("repeated_arm.py", 'arm("zbp_n4")', 'arm("bp")',
         "repeated_arm.py:8: Sweep 't' has duplicate run names: tiny-bp (hint: each size and arm may appear once; "
         "use seeds for repeats)"),
        # a helper's hunt: a tuple of one without its comma, a name where a call goes (TypeError, AttributeError)
        ("sizes_no_comma.py", "resources=CPU),),", "resources=CPU)),",
         "sizes_no_comma.py:6: Sweep.sizes must be a tuple of Size, got one alone (hint: a tuple of one needs a "
         "trailing comma: sizes=(Size(name='s60', global_batch=256),))"),
        ("arms_named.py", 'arms=(arm("bp"), arm("zbp_n4")),', 'arms=("bp",),',
         "arms_named.py:8: Sweep.arms must be a tuple of Arm, got 'bp' (hint: e.g. arms=(arm('bp'),))"),
        ("train_pair_alone.py", "train=(('eval_every', 10), ('eval_batches', 2)),", "train=('eval_every', 10),",
         "train_pair_alone.py:11: Sweep.train must be (field, value) pairs, got ('eval_every', 10) (hint: e.g. "
         "train=(('eval_every', 500),): a pair alone needs a trailing comma)"),
        ("data_as_words.py", "data=Data(dir=\"data/embedded\", source='embedded',\n              tokens=0, workers=1),",
         "data='data/embedded',",
         "data_as_words.py:9: Sweep.data must be a Data(...), got 'data/embedded' (hint: e.g. "
         "data=Data(dir='data/fineweb', source='fineweb-edu'))"),
        ("resources_dict.py", "resources=CPU)", "resources={'gpus_per_node': 0})",
         "resources_dict.py:7: Size tiny: resources must be a Resources(...), got {'gpus_per_node': 0} (hint: e.g. "
         "resources=Resources(gpus_per_node=8, time_min=1440))"),
        ("extra_sbatch_alone.py", "time_min=30)", "time_min=30, extra_sbatch=('exclusive', ''))",
         "extra_sbatch_alone.py:3: Resources.extra_sbatch must be (option, value) pairs of sbatch's long options, "
         "got 'exclusive' (hint: e.g."),
        ("partition_lines.py", "time_min=30)", "time_min=30, partition='gpu\\n#SBATCH --qos=high')",
         "partition_lines.py:3: Resources.partition must be a name without spaces, or None, got 'gpu\\n#SBATCH "
         "--qos=high'"),
        # set elsewhere: the plan counted steps and hours by the size's batch; three seeds were one run
        ("global_batch_in_arm.py", 'arm("zbp_n4")', 'arm("zbp_n4", global_batch=32)',
         "global_batch_in_arm.py:8: Sweep 't': global_batch is not set in train= or an arm: it is the size's: the "
         "plan counts each run's steps, tokens and GPU-hours by it (hint: set it on each Size; an arm that needs "
         "less memory a step sets micro_batch)"),
        ("seed_in_train.py", "('eval_batches', 2)", "('seed', 7)",
         "seed_in_train.py:11: Sweep 't': seed is not set in train= or an arm: it is Sweep.seeds': each seed is a "
         "run of its own (hint: Sweep(seeds=(0, 1, 2)))"),
        ("steps_in_train.py", "('eval_batches', 2)", "('steps', 5)",
         "steps_in_train.py:11: Sweep 't': steps is not set in train= or an arm: it is the size's budget (hint: "
         "Size(tokens=...), or Size(tokens_per_param=...))"),
        ("train_twice.py", "('eval_batches', 2)", "('eval_every', 20)",
         "train_twice.py:11: Sweep.train sets eval_every twice (10, then 20) (hint: set each field once)"),
        ("arm_keyword_typo.py", 'arm("zbp_n4")', 'arm("zbp_n4", step_time_ration=2.0)',
         "arm_keyword_typo.py:8: arm zbp_n4: 'step_time_ration' is neither an arm's setting (step_time_ratio, "
         "ratio_source) nor a TrainConfig field (hint: did you mean step_time_ratio?)"),
        ("long_name.py", 'name="t"', f'name="{"a" * 101}"',
         f"long_name.py:5: Sweep.name must be at most 100 characters (a run's folder name joins a size's and an "
         f"arm's), got 101 (hint: e.g. '{'a' * 100}': it names a folder under the jobs root)"),
    )],
]


@pytest.mark.parametrize("name, text, message", BAD_SWEEPS, ids=[b[0] for b in BAD_SWEEPS])
def test_bad_sweep_files_are_one_line_errors(tmp_path, name, text, message):
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(ConfigError, match=re.escape(message)):
        load_sweep(path)
    out = subprocess.run([sys.executable, "-m", "zbpscale.submit", str(path), "--dry-run"], capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 2
    assert len(out.stderr.strip().splitlines()) == 1 and "Traceback" not in out.stderr
    assert message.split(":")[0] in out.stderr


def test_a_name_that_would_leave_its_folder_writes_nothing(tmp_path):
    """#59: Sweep(name='../esc') trained in <study>/esc/, outside the jobs root. Refused at load, by submit itself
    (not a dry run) too, before anything is written; an Arm built by hand is held to the same rule."""
    (tmp_path / "study" / "sweeps").mkdir(parents=True)
    path = tmp_path / "study" / "sweeps" / "esc.py"
    path.write_text(MULTILINE.replace('name="t"', 'name="../esc"'))
    before = sorted(tmp_path.rglob("*"))
    out = subprocess.run([sys.executable, "-m", "zbpscale.submit", str(path), "--executor", "local"],
                         capture_output=True, text=True, timeout=120, cwd=tmp_path / "study")
    assert out.returncode == 2 and "Sweep.name must be one folder name" in out.stderr, out.stderr
    assert sorted(tmp_path.rglob("*")) == before
    with pytest.raises(ConfigError, match=r"Arm.name must be one folder name .* got 'a/b'"):
        Sweep(name="x", sizes=(Size(name="tiny", global_batch=8),), arms=(Arm(name="a/b"),), data=Data(dir="d"))


def test_missing_sweep_file(tmp_path):
    with pytest.raises(ConfigError, match="no sweep file or sweep folder at.*hint: give a sweep file"):
        load_sweep(tmp_path / "nope.py")


FIT_SWEEP = """from zbpscale.sweep import *
R = Resources(gpus_per_node=0, tasks_per_node={tasks}, cpus_per_task=1, time_min=30)
SWEEP = Sweep(name='fit', sizes=(Size(name='mini', global_batch={batch}, seq_len={seq}, tokens=1000, resources=R),),
    arms=(arm('bp'),), data=Data(dir={data!r}, source='embedded'), root={root!r}, train=(('eval_batches', 2),))
"""


@pytest.mark.parametrize("tasks, batch, seq, code, expect", [
    # the H200 case: 8,192 validation tokens hold 31 windows of 257 < 32: the plan says what will be evaluated
    (1, 32, 256, 0, "fewer than global_batch=32: it will evaluate on one batch of 31"),
    (2, 32, 256, 0, "it will evaluate on one batch of 30"),
    # 8,192 validation tokens hold one window of 4,097, fewer than one per rank: refused before anything is queued
    (2, 32, 4096, 2, "error: mini-bp: the validation split of"),
], ids=["one-rank", "two-ranks", "nothing-fits"])
def test_plan_checks_the_batch_against_prepared_data(tmp_path, data_dir, tasks, batch, seq, code, expect):
    path = tmp_path / "fit.py"
    path.write_text(FIT_SWEEP.format(tasks=tasks, batch=batch, seq=seq, data=str(data_dir), root=str(tmp_path)))
    out = subprocess.run([sys.executable, "-m", "zbpscale.submit", str(path), "--dry-run", "--executor", "local"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == code, out.stderr
    assert expect in unwrapped(out.stdout + out.stderr)
    assert "Traceback" not in out.stderr and not (tmp_path / "fit").exists()  # a dry run writes nothing


@pytest.mark.parametrize("data, words", [
    ("source='sotu'", "source: 'embedded' there, 'sotu' in the sweep"),
    ("source='embedded', tokens=4096", "tokens: None there, 4096 in the sweep"),
    ("source='embedded'", ""),
])
def test_a_sweep_whose_data_differ_from_the_prepared_folder_is_refused(tmp_path, data_dir, data, words):
    """A sweep file copied and given another Data.source but not its own Data.dir: its runs trained on the folder's
    corpus without a word (only the manifest's presence was looked at). The dry run and the submit refuse it."""
    path = tmp_path / "fit.py"
    path.write_text(FIT_SWEEP.format(tasks=1, batch=8, seq=32, data=str(data_dir), root=str(tmp_path))
                    .replace("source='embedded'", data))
    out = subprocess.run([sys.executable, "-m", "zbpscale.submit", str(path), "--dry-run", "--executor", "local"],
                         capture_output=True, text=True, timeout=120)
    said = unwrapped(out.stdout + out.stderr)
    assert out.returncode == (2 if words else 0), said
    assert (f"holds data prepared with other options than the sweep's Data ({words})" in said) == bool(words), said
    assert "Traceback" not in out.stderr


def test_a_copied_sweep_file_that_keeps_the_name_is_refused_the_runs_folder_names_its_file(tmp_path, data_dir):
    """sweeps/other.py copied from sweeps/fit.py, its lr changed, its name not: its runs' folder is fit's, whose
    runs it would plan as its own ('the sweep file changed since it trained'). Refused, naming both files, by
    submit, and by status, cancel and collect given the file (status showed fit's runs as other.py plans them); a
    sweep file renamed (the first one gone) or a project folder copied elsewhere takes its folder over."""
    from zbpscale.jobs.settings import SweepSettings

    def dry(path: Path) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "zbpscale.submit", str(path), "--dry-run", "--executor", "local"],
                              capture_output=True, text=True, timeout=120)

    project = tmp_path / "study"
    (project / "sweeps").mkdir(parents=True)
    first, other = project / "sweeps" / "fit.py", project / "sweeps" / "other.py"
    first.write_text(FIT_SWEEP.format(tasks=1, batch=8, seq=32, data=str(data_dir), root="."))  # the project's
    other.write_text(first.read_text().replace("tokens=1000", "tokens=2000"))
    (project / "fit").mkdir()
    SweepSettings(name="fit", sweep_file=str(first)).write(project / "fit")  # as fit.py's submit left it
    out = dry(other)
    said = unwrapped(out.stdout + out.stderr)
    assert out.returncode == 2 and f"{project / 'fit'} holds the runs of" in said and "fit.py; " in said, said
    assert "also calls itself 'fit'" in said and "Traceback" not in said
    for command in ("status", "cancel", "collect"):  # status showed fit's runs as other.py planned them
        out = subprocess.run([sys.executable, "-m", "zbpscale.cli", command, str(other)], capture_output=True,
                             text=True, timeout=120)
        said = unwrapped(out.stderr)
        assert out.returncode == 2 and "also calls itself 'fit'" in said and "Traceback" not in said, said
    assert dry(first).returncode == 0
    copied = tmp_path / "copy"
    shutil.copytree(project, copied)
    assert dry(copied / "sweeps" / "other.py").returncode == 0  # another project folder's file is named there
    first.rename(project / "sweeps" / "fit_old.py.bak")
    assert dry(other).returncode == 0, "a renamed sweep file's folder is the new name's"


@pytest.mark.parametrize("given, words", [
    ("betas=0.9", "TrainConfig.betas must be two numbers in [0, 1), e.g. (0.9, 0.95), got 0.9"),
    ("lr='abc'", "TrainConfig.lr must be a number > 0, got 'abc'"),
    ("bf16='yes'", "TrainConfig.bf16 must be True or False (or None: the device's default), got 'yes'"),
    ("grad_clip=float('nan')", "TrainConfig.grad_clip must be a number >= 0, got nan"),
    ("eval_every=True", "TrainConfig.eval_every must be an integer >= 0, got True"),
    ("seed=3", "Sweep 'fit': seed is not set in train= or an arm: it is Sweep.seeds'"),  # each seed was seed 3
])
def test_an_arm_s_training_value_of_the_wrong_kind_is_refused_at_load(tmp_path, given, words):
    """arm('bp', betas=0.9) passed the dry run, wrote config.json, and broke the run at its start ('float' object
    is not iterable, with a hint to restore the file); lr='abc' was a TypeError; bf16='yes' trained."""
    path = tmp_path / "arms.py"
    path.write_text(FIT_SWEEP.format(tasks=1, batch=8, seq=32, data="d", root=str(tmp_path))
                    .replace("arms=(arm('bp'),)", f"arms=(arm('bp', {given}),)"))
    out = subprocess.run([sys.executable, "-m", "zbpscale.submit", str(path), "--dry-run", "--executor", "local"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and words in unwrapped(out.stderr) and f"{path}:" in out.stderr, out.stderr
    assert len(out.stderr.splitlines()) == 1


def test_a_relative_local_source_starts_at_the_project_folder_and_one_naming_nothing_is_refused(tmp_path):
    """Data(source='local:raw/*.jsonl') was handed to the prep job as written, which ran elsewhere (the local
    queue's folder): it found nothing, and every run failed with it. The job now gets it from the project folder,
    as Data.dir; a source that names no file is refused by the dry run and the submit, before anything is queued."""
    from zbpscale.jobs.sweep import prep_config

    project = tmp_path / "study"
    (project / "sweeps").mkdir(parents=True)
    (project / "raw").mkdir()
    (project / "raw" / "a.jsonl").write_text(json.dumps({"text": "some words"}) + "\n")
    path = project / "sweeps" / "local.py"
    path.write_text(FIT_SWEEP.format(tasks=1, batch=8, seq=32, data="data", root=".")
                    .replace("source='embedded'", "source='local:raw/*.jsonl'"))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    dry = [sys.executable, "-m", "zbpscale.submit", str(path), "--dry-run", "--executor", "local"]
    assert subprocess.run(dry, capture_output=True, text=True, timeout=120, cwd=elsewhere).returncode == 0
    assert prep_config(load_sweep(path)).source == f"local:{project / 'raw' / '*.jsonl'}"
    path.write_text(path.read_text().replace("raw/*.jsonl", "rwa/*.jsonl"))
    out = subprocess.run(dry, capture_output=True, text=True, timeout=120, cwd=elsewhere)
    assert out.returncode == 2 and f"nothing found at local:{project / 'rwa' / '*.jsonl'}" in out.stderr, out.stderr
    assert len(out.stderr.splitlines()) == 1


def test_a_bare_tracker_name_is_one_name_not_its_letters():
    """#45: trackers="tensorboard" is the tuple ("tensorboard",) (a list is a tuple too), down to each run's config."""
    sizes, data = (Size(name="tiny", global_batch=8, tokens=8192),), Data(dir="d")
    for given in ("tensorboard", ["tensorboard"], ("tensorboard",)):
        sweep = Sweep(name="x", sizes=sizes, arms=(arm("bp"),), data=data, trackers=given)
        assert sweep.trackers == ("tensorboard",) and expand(sweep)[0].train_config().trackers == ("tensorboard",)
        assert dataclasses.replace(sweep, name="y").trackers == ("tensorboard",)


GPU_SWEEP = """from zbpscale.sweep import *
R = Resources(cpus_per_task=1, time_min=30,
              gpus_per_node=1)
SWEEP = Sweep(name='gpu', sizes=(Size(name='tiny', global_batch=8, tokens=8192, resources=R),),
    arms=(arm('bp'),), data=Data(dir='data', source='embedded'), root={root!r})
"""


@pytest.mark.parametrize("root_exists", [False, True], ids=["new-root", "root-with-another-sweep"])
def test_a_run_this_node_cannot_hold_is_refused_by_the_dry_run_and_the_submit_alike(tmp_path, root_exists):
    """#45: gpus_per_node=1 on a node without GPUs (the local queue): the dry run and the submit print the same one
    line at the sweep file's gpus_per_node= line, both exit 2, and the refused submit leaves every byte of the tree
    as it was (no sweep folder, no .submit.lock, no jobs root it made)."""
    root = tmp_path / "jobs"
    if root_exists:
        (root / "other" / "tiny-bp").mkdir(parents=True)
        (root / "other" / "tiny-bp" / "config.json").write_text("{}")
    path = tmp_path / "gpu.py"
    path.write_text(GPU_SWEEP.format(root=str(root)))

    def tree() -> dict:
        return {str(p): p.read_bytes() if p.is_file() else None for p in tmp_path.rglob("*")}

    before, errors = tree(), set()
    for extra in (["--dry-run"], []):
        out = subprocess.run([sys.executable, "-m", "zbpscale.submit", str(path), "--executor", "local", *extra],
                             capture_output=True, text=True, timeout=120,
                             env={**os.environ, "CUDA_VISIBLE_DEVICES": ""})  # a node without GPUs
        assert out.returncode == 2, out.stdout + out.stderr
        assert len(out.stderr.strip().splitlines()) == 1 and "Traceback" not in out.stderr
        assert "warning" not in out.stdout and "tiny-bp" in out.stdout  # the plan, then the refusal
        errors.add(out.stderr)
        assert tree() == before, extra
    assert errors == {f"error: {path}:3: tiny-bp needs 1 GPU; this node has 0 (hint: lower Resources.gpus_per_node "
                      "in the sweep (CPU runs: gpus_per_node=0), or check CUDA_VISIBLE_DEVICES)\n"}


@pytest.mark.parametrize("seq, note", [
    (1024, "note: tiny: tokens 20,480 rounded up to 24,576 (3 steps of 8,192 tokens)"),  # 20,480 / 8,192 = 2.5
    (128, None),  # 20,480 / 1,024 = 20 steps: nothing to say
])
def test_the_plan_says_when_a_token_budget_is_rounded_up_to_whole_steps(tmp_path, seq, note):
    """#45 item 5: a budget that is not a whole number of steps (batch x seq_len) trains the next whole step; the
    plan's tokens column shows it and a note says it, once per size (the two arms share it)."""
    path = tmp_path / "round.py"
    path.write_text(MULTILINE.replace("seq_len=128", f"seq_len={seq}"))  # tokens=8 * 128 * 20, global_batch=8
    out = subprocess.run([sys.executable, "-m", "zbpscale.submit", str(path), "--dry-run", "--executor", "local"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    notes = [line for line in out.stdout.splitlines() if line.startswith("note: tiny:") or "rounded" in line]
    assert notes == ([note] if note else [])
    assert ("24,576" in out.stdout) == bool(note)  # the tokens column says the same


def test_ladder_plan_scales_each_size_by_its_own_gpu_ratio():
    sweep = load_sweep(REPO / "sweeps" / "ladder.py")
    hours = {r.name: r.estimated_hours() for r in expand(sweep)}
    for a in sweep.arms:
        for size in sweep.sizes:
            expected = dict(a.step_time_ratio)[size.name] if a.name != "bp" else 1.0
            assert hours[f"{size.name}-{a.name}"] / hours[f"{size.name}-bp"] == pytest.approx(expected, rel=1e-12)


def test_the_plan_counts_the_seeds_and_what_they_cost(capsys):
    """#35: the ladder's plan says how many seeds it has and what each costs in GPU-hours (the sum of its runs'
    estimates); a selection of some seeds says which of the sweep's; a sweep of one seed says what another
    would add."""
    from zbpscale.jobs.submit import print_plan

    sweep = load_sweep(REPO / "sweeps" / "ladder.py")
    runs = expand(sweep)
    per_seed = sum(r.estimated_hours() * r.size.resources.gpus for r in runs if r.seed == 0 and r.role == "final")

    def plan(chosen, of=sweep) -> str:
        rows = plan_rows(chosen, {r.name: "new" for r in chosen}, {r.name: RunState("new") for r in chosen})
        print_plan(of, rows)
        return capsys.readouterr().out

    out = plan(runs)
    assert f"sweep ladder: {len(runs)} runs, 3 seeds" in out and len(runs) == 36 + 30  # 30 tuning runs (seed 0)
    assert f"seeds 0, 1, 2: {per_seed:,.1f} GPU-hours each, {3 * per_seed:,.1f} for the 3" in out
    assert f"seed 0 (of the sweep's 3: 0, 1, 2): {per_seed:,.1f} GPU-hours" in plan([r for r in runs if not r.seed])
    # a tuning run is no seed's cost: the grid's GPU-hours are the tuning note's (submit's tuning_notes)
    one = dataclasses.replace(sweep, seeds=(0,))
    assert f"one seed (0): no seed-to-seed spread, so no error bars; each further seed (Sweep.seeds) adds " \
        f"{per_seed:,.1f} GPU-hours" in unwrapped(plan(expand(one), one))


@pytest.mark.parametrize("ratio, message", [
    ({"tiny": 2.0}, "step_time_ratio gives no figure for size mini"),
    ({"tiny": 2.0, "mini": 0}, r"step_time_ratio\['mini'\] must be a number > 0"),
    (-1.0, "step_time_ratio must be a number > 0"),
])
def test_step_time_ratio_errors(ratio, message):
    with pytest.raises(ConfigError, match=message):
        Sweep(name="x", sizes=(Size(name="tiny", global_batch=8), Size(name="mini", global_batch=8)),
              arms=(arm("zbp_n16", step_time_ratio=ratio),), data=Data(dir="d"))


def test_fault_a_garbled_run_folder_is_planned_as_broken_and_left_alone(tmp_path, data_dir):
    path = tmp_path / "fit.py"
    path.write_text(FIT_SWEEP.format(tasks=1, batch=8, seq=64, data=str(data_dir), root=str(tmp_path)))
    (tmp_path / "fit" / "mini-bp").mkdir(parents=True)
    (tmp_path / "fit" / "mini-bp" / "config.json").write_text("{garbage")
    out = subprocess.run([sys.executable, "-m", "zbpscale.submit", str(path), "--dry-run", "--executor", "local"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "broken" in out.stdout and "mini-bp: broken run folder:" in unwrapped(out.stdout)
    assert "config.json is not valid JSON" in unwrapped(out.stdout)


def test_job_control_imports_no_torch(tmp_path):
    """Planning, status and cancel run without torch or the training loop (a login node, a fast `status`)."""
    (tmp_path / "sweeps").mkdir()
    (tmp_path / "sweeps" / "ladder.py").write_text((REPO / "sweeps" / "ladder.py").read_text())
    code = ("import contextlib, io, sys\n"
            "from zbpscale.cli import main\n"
            "from zbpscale.jobs import cancel, status, submit\n"
            "from zbpscale.jobs.executors import slurm_job\n"
            "from zbpscale.jobs.executors.local_queue import driver\n"
            "from zbpscale.results import collect\n"
            "with contextlib.redirect_stdout(io.StringIO()):\n"
            "    main(['submit', 'sweeps/ladder.py', '--dry-run', '--executor', 'local'])\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] == 'torch' or m == 'zbpscale.train.loop'))\n")
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == "[]"


def test_a_hint_names_twenty_runs_and_the_closest_to_a_mistyped_name():
    """A sweep of 10,000 runs: a selection that matches none, or a run that is not there, gets a hint that lists 20
    runs and how many more there are (it listed all 10,000), after the closest name for a mistyped one."""
    from zbpscale.text import HINTED, runs_hint

    names = [f"s60-bp-s{i}" for i in range(10_000)]
    with pytest.raises(ConfigError) as err:
        select([dataclasses.make_dataclass("R", ["name"])(n) for n in names], "s2b-*")
    assert err.value.hint == f"runs: {', '.join(names[:HINTED])} (+{10_000 - HINTED:,} more)"
    assert runs_hint(names, "s60-bp-s12x") == f"did you mean s60-bp-s12? runs: {', '.join(names[:20])} (+9,980 more)"
    assert runs_hint(names[:2], "nothing like it") == "runs: s60-bp-s0, s60-bp-s1"


def test_a_resubmit_names_the_runs_it_leaves_alone_alike_once(tmp_path):
    """A second submit of a sweep whose runs are complete but one, failed: past ALIKE (3) runs said alike, one
    entry names three and the count of the others, where the first of them stands (a 10,000-run sweep's line named
    every run); up to three, each run by name; in the runs' order."""
    import json

    for seeds, said in ((7, "nano-bp, nano-bp-s2, nano-bp-s3 (+3 more) (complete), nano-bp-s1 (failed)"),
                        (3, "nano-bp (complete), nano-bp-s1 (failed), nano-bp-s2 (complete)")):
        folder = tmp_path / f"{seeds}"
        (folder / "s.py").parent.mkdir()
        (folder / "s.py").write_text(
            "from zbpscale.sweep import Data, Resources, Size, Sweep, arm\n"
            "CPU = Resources(nodes=1, gpus_per_node=0, tasks_per_node=1, cpus_per_task=1, time_min=30)\n"
            f"SWEEP = Sweep(name='alike', root={str(folder / 'jobs')!r}, sizes=(Size(name='nano', global_batch=4, "
            "seq_len=32, tokens=512, lr=1e-3, resources=CPU),),\n"
            f"              arms=(arm('bp'),), seeds=tuple(range({seeds})),\n"
            "              data=Data(dir='data', source='embedded'))\n")
        for run in expand(load_sweep(folder / "s.py")):  # each trained to the end (its config and COMPLETE), or
            folder_of = Path(run.run_dir)  # failed (its job's end recorded)
            folder_of.mkdir(parents=True)
            (folder_of / "config.json").write_text(json.dumps(run.train_config().to_dict()))
            if run.seed == 1:
                (folder_of / "attempts.jsonl").write_text("".join(json.dumps(e) + "\n" for e in (
                    {"event": "submitted", "time": 1.0, "job_id": "local-1", "executor": "local"},
                    {"event": "start", "time": 2.0, "job_id": "local-1"},
                    {"event": "end", "time": 3.0, "job_id": "local-1", "why": "failed", "reason": "exit status 1"})))
            else:
                (folder_of / "COMPLETE").write_text("{}\n")
        out = subprocess.run([sys.executable, "-m", "zbpscale.submit", str(folder / "s.py"), "--executor", "local"],
                             capture_output=True, text=True, timeout=120, cwd=folder)
        assert out.returncode == 0, out.stderr
        assert f"left alone: {said}\n" in out.stdout, out.stdout


def test_a_config_error_with_a_hint_says_its_hint_once():
    """A config.json (or training YAML) naming an unknown tracker printed its hint twice: the error's words, with
    their hint, were wrapped with the file's name and the hint again."""
    from zbpscale.run.config import TrainConfig, model_config

    d = TrainConfig(model=model_config("nano"), data_dir="d", steps=2).to_dict()
    d["trackers"] = ["foo"]
    with pytest.raises(ConfigError) as err:
        TrainConfig.from_dict(d, source="x.json")
    assert str(err.value) == "x.json: TrainConfig.trackers names an unknown tracker 'foo' (hint: trackers: " \
                             "tensorboard, wandb)"


def test_extra_sbatch_given_as_a_mapping_is_its_pairs_in_the_job_s_options():
    """A helper's hunt: extra_sbatch={"exclusive": ""} (a mapping, as arm's step_time_ratio takes one) loaded, and
    the SLURM submit failed with a traceback after the run folders and the prep job were made."""
    from zbpscale.jobs.executors.slurm import sbatch_parameters

    res = Resources(gpus_per_node=0, time_min=30, extra_sbatch={"exclusive": "", "gres-flags": "enforce-binding"})
    assert res.extra_sbatch == (("exclusive", ""), ("gres-flags", "enforce-binding"))
    sweep = Sweep(name="x", sizes=(Size(name="tiny", global_batch=8, tokens=8192, resources=res),),
                  arms=(arm("bp"),), data=Data(dir="d"))
    extra = sbatch_parameters(expand(sweep)[0])["additional_parameters"]
    assert extra == {"requeue": True, "exclusive": "", "gres-flags": "enforce-binding"}


def test_a_seed_out_of_numpy_s_range_is_refused_by_the_trainer_s_config():
    """What `--set seed=...` of a run trained by hand is checked by (a sweep's seeds are checked as Sweep.seeds)."""
    import dataclasses

    run = expand(Sweep(name="x", sizes=(Size(name="tiny", global_batch=8, tokens=8192),), arms=(arm("bp"),),
                       data=Data(dir="d")))[0]
    with pytest.raises(ConfigError, match=re.escape("TrainConfig.seed must be an integer in [0, 2**32) (NumPy's "
                                                    "seeds), got 4294967296")):
        dataclasses.replace(run.train_config(), seed=2**32)
