"""Sweeps as data: a sweep file builds one `Sweep` value; `expand` turns it into runs with fixed names.

    SWEEP = Sweep(name="ladder", sizes=(Size(name="s60", ...), ...), arms=(arm("bp"), arm("zbp_n16")), ...)

A run is one size x arm x seed, named `{size}-{arm}` (plus `-s{seed}` for seeds other than 0), with its
folder at `<root>/<sweep>/<run>`. Nothing here submits or trains: `zbpscale.submit` does.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import re
import traceback
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping

from zbpscale.cached import cached
from zbpscale.errors import ConfigError, ZbpError
from zbpscale.files import as_json, atomic_write
from zbpscale.jobs.settings import MIN_POLL_S, POLL_S, SweepSettings
from zbpscale.jobs.sweep_checks import distinct, field_error, field_line, is_int, is_number, need
from zbpscale.run.config import (
    SIZES,
    ModelConfig,
    TrainConfig,
    batch_plan,
    flops_per_token,
    is_seed,
    n_params,
    shape_from_yaml,
    tracker_error,
)
from zbpscale.run.folder import MAX_NAME, RunFolder, run_name, segment_problem
from zbpscale.text import closest, did_you_mean, shown_path
from zbpscale.zbp import ZBPConfig, arm_zbp_config


@dataclass(frozen=True, kw_only=True)
class Resources:
    """What one run of a size asks the scheduler for."""

    nodes: int = 1
    """Nodes per run."""
    gpus_per_node: int = 8
    """GPUs per node (0 = a CPU run)."""
    tasks_per_node: int = 0
    """Ranks per node; 0 = one per GPU (or 1 for a CPU run)."""
    cpus_per_task: int = 8
    """CPU cores per rank (data loading, the Python loop)."""
    mem_gb: int = 0
    """Memory per node in GB; 0 = the scheduler's default."""
    time_min: int = 24 * 60
    """Time limit of one job attempt, in minutes; longer runs requeue and resume."""
    partition: str | None = None
    """SLURM partition (None = the cluster's default)."""
    account: str | None = None
    """SLURM account."""
    qos: str | None = None
    """SLURM quality of service."""
    constraint: str | None = None
    """SLURM node constraint, e.g. 'h200'."""
    extra_sbatch: tuple[tuple[str, str], ...] = ()
    """Further sbatch options as (name, value) pairs, e.g. (("exclusive", ""),)."""

    def __post_init__(self) -> None:
        for name, low in (("nodes", 1), ("time_min", 1), ("cpus_per_task", 1), ("gpus_per_node", 0),
                          ("tasks_per_node", 0), ("mem_gb", 0)):
            value = getattr(self, name)
            need("Resources", "Resources.", name, value, is_int(value) and value >= low, f"an integer >= {low}")
        if self.gpus_per_node and self.tasks_per_node not in (0, self.gpus_per_node):
            raise field_error("Resources", "tasks_per_node", f"Resources.tasks_per_node={self.tasks_per_node} must "
                              f"equal gpus_per_node={self.gpus_per_node} (one rank per GPU), or be 0")
        for name in ("partition", "account", "qos", "constraint"):  # each an #SBATCH line of the job's script
            value = getattr(self, name)
            if value is not None and (not isinstance(value, str) or any(c.isspace() for c in value)):
                raise field_error("Resources", name, f"Resources.{name} must be a name without spaces, or None, got "
                                  f"{value!r}", value=value)
        pairs = tuple(self.extra_sbatch.items()) if isinstance(self.extra_sbatch, Mapping) else self.extra_sbatch
        if not isinstance(pairs, (tuple, list)) or not all(_sbatch_option(p) for p in pairs):
            bad = pairs if not isinstance(pairs, (tuple, list)) else next(p for p in pairs if not _sbatch_option(p))
            raise field_error("Resources", "extra_sbatch", f"Resources.extra_sbatch must be (option, value) pairs of "
                              f"sbatch's long options, got {bad!r:.80}", value=self.extra_sbatch,
                              hint='e.g. extra_sbatch=(("exclusive", ""), ("gres-flags", "enforce-binding")): a pair '
                              'alone needs a trailing comma')
        object.__setattr__(self, "extra_sbatch", tuple(tuple(p) for p in pairs))  # a mapping: its pairs

    @property
    def ranks_per_node(self) -> int:
        return self.tasks_per_node or self.gpus_per_node or 1

    @property
    def world_size(self) -> int:
        return self.nodes * self.ranks_per_node

    @property
    def gpus(self) -> int:
        return self.nodes * self.gpus_per_node


def _sbatch_option(pair) -> bool:
    """Whether `pair` is one of Resources.extra_sbatch's: (a long option's name, its value: words on one line or a
    number; "" for an option without one)."""
    if not isinstance(pair, (tuple, list)) or len(pair) != 2:
        return False
    name, value = pair
    return isinstance(name, str) and re.fullmatch(r"[a-z][a-z0-9_-]*", name) is not None and (
        isinstance(value, str) and "\n" not in value and "\r" not in value or is_number(value))


JOB_FIELDS = ("signal_delay_s", "max_timeouts", "max_preemptions", "max_crashes")
"""The Sweep's fields a run's job is submitted with (beside its size's Resources) and keeps through its requeues."""


@dataclass(frozen=True, kw_only=True)
class Size:
    """One rung of the ladder: a model shape (a preset, or one of your own) with its batch, budget, learning rate and
    resources."""

    name: str
    """A model preset (`zbpscale sizes`), or, with `model`, a name of your own: one folder-name segment without '-'
    (run names are `{size}-{arm}[-s{seed}]`), e.g. m760."""
    global_batch: int
    """Sequences per optimizer step, across all ranks."""
    micro_batch: int = 0
    """Sequences per forward pass per rank (0 = no accumulation)."""
    tokens: int = 0
    """Training tokens; 0 = tokens_per_param x parameters. Runs train whole steps: a budget that is not a multiple
    of global_batch x seq_len is rounded up to the next step (the plan says so)."""
    tokens_per_param: float = 20.0
    """Budget rule when tokens is 0 (20 is Chinchilla's)."""
    lr: float = 3e-4
    """Peak learning rate (BP and ZBP alike unless an arm overrides it)."""
    warmup_frac: float = 0.02
    """Warmup steps as a fraction of the run."""
    seq_len: int = 0
    """Context length; 0 = the preset's."""
    resources: Resources = field(default_factory=Resources)
    """What one run of this size asks for."""
    model: ModelConfig | str | None = None
    """The model's shape: None, the preset `name`; a ModelConfig of your own (any field but zbp, the arm's); or the
    path of a YAML file of those fields, e.g. configs/model/m760.yaml, relative to the sweep's project folder (as its
    jobs/ and data/; `model_path`). After load, the ModelConfig (a YAML file's path is kept in `model_file`)."""
    model_file: str = ""
    """The YAML file the shape was read from ("" for a preset or a ModelConfig): set at load, not given."""

    def __post_init__(self) -> None:
        if self.model is None:
            if self.name not in SIZES:
                raise field_error("Size", "name", f"unknown size {self.name!r}; allowed: {', '.join(SIZES)}",
                                  hint=did_you_mean(self.name, SIZES, say=repr) or "zbpscale sizes lists them; a "
                                  "shape of your own: Size(name=..., model=ModelConfig(n_layer=..., n_head=..., "
                                  "d_model=...)) or model='configs/model/<name>.yaml'")
        else:
            self._own_shape()
        label = f"Size {self.name}: "
        if not isinstance(self.resources, Resources):
            raise field_error("Size", "resources", f"{label}resources must be a Resources(...), got "
                              f"{self.resources!r:.60}",
                              hint="e.g. resources=Resources(gpus_per_node=8, time_min=1440)")
        for name, ok, want in (("global_batch", is_int(self.global_batch) and self.global_batch >= 1,
                                "an integer >= 1"),
                               ("micro_batch", is_int(self.micro_batch) and self.micro_batch >= 0,
                                "an integer >= 0 (0: no accumulation)"),
                               ("tokens", is_int(self.tokens) and self.tokens >= 0,
                                "an integer >= 0 (0: the budget rule)"),
                               ("tokens_per_param", is_number(self.tokens_per_param) and self.tokens_per_param > 0,
                                "a number > 0"),
                               ("lr", is_number(self.lr) and self.lr > 0, "a number > 0"),
                               ("warmup_frac", is_number(self.warmup_frac) and 0 <= self.warmup_frac < 1,
                                "a number in [0, 1)"),
                               ("seq_len", is_int(self.seq_len) and self.seq_len >= 0,
                                "an integer >= 0 (0: the preset's)")):
            need("Size", label, name, getattr(self, name), ok, want)

    def _own_shape(self) -> None:
        """Check a size of your own (its name, its shape) and put its shape in `model` as a ModelConfig."""
        problem = segment_problem(self.name) if isinstance(self.name, str) else f"must be a name, got {self.name!r}"
        if problem is None and "-" in self.name:
            problem = f"must not hold '-' (run names are size-arm-seed), got {self.name!r}"
        if problem:
            raise field_error("Size", "name", f"Size name {problem}", hint="e.g. name='m760'")
        if self.name in SIZES:
            raise field_error("Size", "name", f"Size name {self.name!r} is a preset's: a shape of your own needs a "
                              "name of its own", hint="e.g. name='m760', or leave out model= to train the preset")
        shape = self.model
        if isinstance(shape, (str, Path)):
            path = model_path(Path(shape).expanduser())
            try:
                shape = shape_from_yaml(path)
            except ConfigError as err:
                hint = f"a preset is a size's name: Size(name={str(shape)!r}, ...) without model=" if str(shape) in \
                    SIZES else err.hint
                raise field_error("Size", "model", f"Size {self.name}: {err.args[0]}", hint=hint) from None
            object.__setattr__(self, "model_file", str(self.model))
        elif not isinstance(shape, ModelConfig):
            raise field_error("Size", "model", f"Size {self.name}: model must be a ModelConfig or a YAML file's path, "
                              f"got {type(shape).__name__}", hint="e.g. model=ModelConfig(n_layer=24, n_head=16, "
                              "d_model=1536)")
        elif shape.zbp is not None:
            raise field_error("Size", "model", f"Size {self.name}: its ModelConfig sets zbp, which is an arm's",
                              hint="leave zbp out of the size's shape; arm('zbp_n16') gives it")
        object.__setattr__(self, "model", shape)

    def shape(self, zbp: ZBPConfig | None = None) -> ModelConfig:
        """The model of this size (its preset's shape, or its own), with the arm's estimator `zbp`."""
        overrides = {"max_seq_len": self.seq_len} if self.seq_len else {}
        return dataclasses.replace(self.model if self.model is not None else SIZES[self.name], zbp=zbp, **overrides)

    @cached  # asked of each run of the size (10,000 runs: a shape built and checked for each)
    def params(self) -> int:
        return n_params(self.shape())

    @cached
    def params_non_embedding(self) -> int:
        """N of the scaling laws (the gap's, the lr law's): parameters without the token tables and the LM head."""
        return n_params(self.shape(), embeddings=False)

    @cached
    def steps(self) -> int:
        tokens = self.tokens or self.tokens_per_param * self.params
        return max(1, math.ceil(tokens / (self.global_batch * self.shape().max_seq_len)))


SET_ELSEWHERE = {
    "model": ("the size's shape (Size.name, Size.model) with the arm's estimator", "give the shape to a Size"),
    "data_dir": ("Sweep.data's folder", "Sweep(data=Data(dir=...))"),
    "steps": ("the size's budget", "Size(tokens=...), or Size(tokens_per_param=...)"),
    "global_batch": ("the size's: the plan counts each run's steps, tokens and GPU-hours by it",
                     "set it on each Size; an arm that needs less memory a step sets micro_batch"),
    "seed": ("Sweep.seeds': each seed is a run of its own", "Sweep(seeds=(0, 1, 2))"),
}
"""TrainConfig fields that Sweep.train and an arm may not set: (what sets them, the hint)."""


@dataclass(frozen=True, kw_only=True)
class Arm:
    """A training method: exact backprop (zbp None) or ZBP with its estimator settings."""

    name: str
    """Appears in run names: bp, zbp_n16, ..."""
    zbp: ZBPConfig | None = None
    """Estimator settings; None = the bp arm."""
    overrides: tuple[tuple[str, object], ...] = ()
    """TrainConfig fields to replace for this arm, e.g. (("lr", 1e-4),)."""
    step_time_ratio: float | tuple[tuple[str, float], ...] = 1.0
    """Step time relative to BP, for planning: one figure, or (size, figure) pairs where it differs by size
    (measure them with tools/gpu_check.sh, or tools/bench_step.py on CPU)."""
    ratio_source: str = ""
    """Where step_time_ratio comes from, in words (the machine, the estimator path, the command): the plan says it
    beside the GPU-hours it scales."""

    def ratio(self, size: str) -> float:
        """The step-time ratio of this arm at `size` (a ConfigError if a per-size table lacks it)."""
        if isinstance(self.step_time_ratio, (int, float)):
            return float(self.step_time_ratio)
        table = dict(self.step_time_ratio)
        if size not in table:
            raise ConfigError(f"arm {self.name}: step_time_ratio gives no figure for size {size}",
                              hint=f"it names {', '.join(table)}; add {size!r}")
        return table[size]


def arm(name: str, *, step_time_ratio: float | Mapping[str, float] = 1.0, ratio_source: str = "",
        **overrides) -> Arm:
    """A named arm: `arm("bp")`, `arm("zbp_n16", lr=1e-4)`; see zbpscale.zbp.arm_zbp_config for the names.
    step_time_ratio: a number, or a mapping {size: ratio} when the ratio differs by size; ratio_source: where it
    comes from, in words (the plan says it)."""
    per_size = not isinstance(step_time_ratio, (int, float))
    for size, ratio in step_time_ratio.items() if per_size else [(None, step_time_ratio)]:
        if isinstance(ratio, bool) or not isinstance(ratio, (int, float)) or not ratio > 0:
            where = f"[{size!r}]" if per_size else ""
            raise ConfigError(f"arm {name}: step_time_ratio{where} must be a number > 0, got {ratio!r}")
    ratios = tuple(step_time_ratio.items()) if per_size else step_time_ratio
    if not isinstance(ratio_source, str):
        raise ConfigError(f"arm {name}: ratio_source must be words (a str), got {ratio_source!r}")
    fields = {f.name for f in dataclasses.fields(TrainConfig)}
    for key in overrides:
        if key not in fields:  # a typo of one of arm's own keywords reads as an override too
            ours = ("step_time_ratio", "ratio_source")
            raise field_error("arm", key, f"arm {name}: {key!r} is neither an arm's setting ({', '.join(ours)}) nor a "
                              "TrainConfig field", hint=did_you_mean(key, [*ours, *(fields - set(SET_ELSEWHERE))])
                              or f"TrainConfig's fields: {', '.join(sorted(fields - set(SET_ELSEWHERE)))}")
    return Arm(name=name, zbp=arm_zbp_config(name), overrides=tuple(sorted(overrides.items())),
               step_time_ratio=ratios, ratio_source=ratio_source)


@dataclass(frozen=True, kw_only=True)
class Data:
    """The sweep's training data, prepared once before the runs (by a prep job when missing)."""

    dir: str
    """Prepared shard folder (`zbpscale prepare-data --data`); relative paths are from where submit runs."""
    source: str = "fineweb-edu"
    """prepare-data --source: fineweb-edu, wikitext-103, local:<glob>, embedded, sotu."""
    tokens: int = 0
    """prepare-data --tokens (0 = the whole source)."""
    config: str | None = None
    """prepare-data --config (hub dataset config)."""
    workers: int = 8
    """prepare-data --workers."""

    def __post_init__(self) -> None:
        from zbpscale.data.sources import _SOURCES_HELP, EMBEDDED, HUB

        need("Data", "Data.", "dir", self.dir, isinstance(self.dir, str) and bool(self.dir), "a folder name")
        if not isinstance(self.source, str) or not (self.source in HUB or self.source in EMBEDDED
                                                    or self.source.startswith("local:")):
            raise field_error("Data", "source", f"unknown Data.source {self.source!r}",
                              hint=did_you_mean(self.source, [*HUB, *EMBEDDED], say=repr) or _SOURCES_HELP)
        need("Data", "Data.", "tokens", self.tokens, is_int(self.tokens) and self.tokens >= 0,
             "an integer >= 0 (0: the whole source)")
        need("Data", "Data.", "workers", self.workers, is_int(self.workers) and self.workers >= 1, "an integer >= 1")
        need("Data", "Data.", "config", self.config, self.config is None or isinstance(self.config, str),
             "None or a hub config name")


@dataclass(frozen=True, kw_only=True)
class Tune:
    """A learning-rate search per size and arm (jobs/tuning.py). At each of `sizes`, every arm trains once per lr
    of its grid (tuning runs, named `{size}-{arm}-lr{lr}`, e.g. `s60-zbp_n16-lr3e-3`); the final runs of a tuned
    size and arm take its best lr (lowest final validation loss at equal tokens, seeds averaged). At the sweep's
    other sizes an lr law fitted per arm on the tuned sizes, lr*(N) = a N^b (N: non-embedding parameters), gives
    the lr. A best lr at an edge of its grid is flagged, and the grid grows by a step on that side (`extend`)."""

    sizes: tuple[str, ...]
    """The sizes at which the grid is swept (at least two when the sweep has sizes it does not tune: the law's)."""
    grid: tuple[float, ...] | tuple[tuple[str, tuple[float, ...]], ...] = (0.25, 0.5, 1.0, 2.0, 4.0)
    """The lrs tried: multipliers of the size's lr (the run's lr without tuning), or, with relative=False, the lrs
    themselves; one grid for every arm, or a mapping {arm: grid} (every arm of the sweep named)."""
    relative: bool = True
    """Whether the grid holds multipliers of each size's lr (True) or lrs (False)."""
    budget: float = 1.0
    """The tuning runs' share of the size's training tokens (1: the full budget; 0.25: the first quarter, with
    the cosine schedule over that quarter)."""
    seeds: tuple[int, ...] = (0,)
    """Seeds of every tuning run (the losses of an lr are averaged over them)."""
    near: float = 3e-3
    """Losses within this of the best are near-best (Marin's optimizer study: 3e-3): the range the plan shows."""
    extend: int = 1
    """Grid steps added, one at a time, beyond an edge where the best lr lies (0: flag it, add none)."""
    check: tuple[str, ...] = ()
    """Sizes not tuned where a small grid around the lr law's lr (`check_grid`) checks the law once the tuned sizes
    have given it; their final runs take that grid's best. The sweep's other sizes take the law's lr."""
    check_grid: tuple[float, ...] = (0.5, 1.0, 2.0)
    """The check's multipliers of the lr law's lr."""

    def __post_init__(self) -> None:
        if isinstance(self.sizes, str):
            object.__setattr__(self, "sizes", (self.sizes,))
        need("Tune", "Tune.", "sizes", self.sizes, isinstance(self.sizes, (tuple, list)) and bool(self.sizes)
             and all(isinstance(s, str) for s in self.sizes), "a tuple of size names, e.g. ('s60', 's124')")
        object.__setattr__(self, "sizes", tuple(self.sizes))
        grids = self.grid.items() if isinstance(self.grid, Mapping) else [(None, self.grid)]
        for name, grid in grids:
            if isinstance(grid, bool) or not (isinstance(grid, (tuple, list)) and len(grid) >= 2 and all(
                    is_number(v) and v > 0 for v in grid) and _distinct(grid)):
                where = f"[{name!r}]" if name is not None else ""
                raise field_error("Tune", "grid", f"Tune.grid{where} must be two or more numbers > 0, distinct at 3 "
                                  f"significant digits (a grid run's name writes its lr so), got {grid!r}",
                                  hint="e.g. grid=(0.25, 0.5, 1, 2, 4): multipliers of the size's lr")
        object.__setattr__(self, "grid", tuple((n, tuple(sorted(g))) for n, g in grids) if isinstance(
            self.grid, Mapping) else tuple(sorted(self.grid)))
        if not isinstance(self.relative, bool):
            raise field_error("Tune", "relative", f"Tune.relative must be True or False, got {self.relative!r}")
        need("Tune", "Tune.", "budget", self.budget, is_number(self.budget) and 0 < self.budget <= 1,
             "a number in (0, 1]: the share of the size's tokens")
        need("Tune", "Tune.", "seeds", self.seeds, isinstance(self.seeds, (tuple, list)) and bool(self.seeds)
             and all(map(is_seed, self.seeds)) and len(set(self.seeds)) == len(self.seeds),
             "distinct integers in [0, 2**32)")
        object.__setattr__(self, "seeds", tuple(self.seeds))
        need("Tune", "Tune.", "near", self.near, is_number(self.near) and self.near >= 0, "a number >= 0")
        need("Tune", "Tune.", "extend", self.extend, is_int(self.extend) and self.extend >= 0, "an integer >= 0")
        if isinstance(self.check, str):
            object.__setattr__(self, "check", (self.check,))
        need("Tune", "Tune.", "check", self.check, isinstance(self.check, (tuple, list))
             and all(isinstance(s, str) for s in self.check), "a tuple of size names")
        object.__setattr__(self, "check", tuple(self.check))
        need("Tune", "Tune.", "check_grid", self.check_grid, isinstance(self.check_grid, (tuple, list))
             and len(self.check_grid) >= 2 and all(is_number(v) and v > 0 for v in self.check_grid)
             and _distinct(self.check_grid), "two or more numbers > 0, distinct at 3 significant digits (a grid "
             "run's name writes its lr so)")
        object.__setattr__(self, "check_grid", tuple(sorted(self.check_grid)))

    def lrs(self, arm: str, base: float) -> tuple[float, ...]:
        """The grid of `arm` for a size whose lr without tuning is `base`, as lrs, smallest first."""
        grid = dict(self.grid)[arm] if self.grid and isinstance(self.grid[0], tuple) else self.grid
        return tuple(round_lr(v * base) if self.relative else float(v) for v in grid)


def _distinct(values) -> bool:
    """Whether numbers stay distinct at 3 significant digits (`round_lr`: 0.5 and 0.50001 name one grid run)."""
    return len({round_lr(v) for v in values}) == len(values)


def round_lr(lr: float) -> float:
    """An lr to 3 significant digits, as its run's name writes it (0.5 x 6e-3 is 0.0030000000000000005)."""
    return float(f"{lr:.3g}")


def lr_text(lr: float) -> str:
    """An lr as a run name writes it, 3 significant digits: 3e-3, 1.5e-3, 4e-4, 2 (no '+', no zero padding)."""
    mantissa, exponent = f"{lr:.2e}".split("e")
    mantissa = mantissa.rstrip("0").rstrip(".")
    return f"{mantissa}e{int(exponent)}" if int(exponent) else mantissa


@dataclass(frozen=True, kw_only=True)
class Sweep:
    """Every run of a study: sizes x arms x seeds, with the shared settings."""

    name: str
    """Folder name under root, and the first part of every run's name."""
    sizes: tuple[Size, ...]
    """The ladder's rungs, smallest first."""
    arms: tuple[Arm, ...]
    """Training methods compared."""
    data: Data
    """Training data."""
    seeds: tuple[int, ...] = (0,)
    """Seeds per size x arm."""
    tune: Tune | None = None
    """A learning-rate search per size and arm (Tune); None: every run trains at its size's (or arm's) lr."""
    train: tuple[tuple[str, object], ...] = ()
    """TrainConfig fields shared by all runs, e.g. (("eval_every", 500), ("diag_every", 1000))."""
    trackers: tuple[str, ...] = ()
    """Experiment trackers every run reports to besides its metrics.jsonl: "tensorboard", "wandb"
    (docs/trackers.md; `pip install 'zbpscale[trackers]'`). A bare name (trackers="tensorboard") is taken as one."""
    root: str = "jobs"
    """Where run folders live: <root>/<name>/<run> (e.g. a scratch filesystem); a relative root starts at
    `home`."""
    max_timeouts: int = 20
    """Requeues after a time limit before a run is marked failed."""
    max_preemptions: int = 100
    """Requeues after preemption before a run is marked failed."""
    max_crashes: int = 3
    """Requeues after a crash (an exception, a killed rank) before a run is marked failed (local queue; on
    SLURM a crashed job ends, and submitting again resumes it)."""
    signal_delay_s: int = 180
    """Seconds between the time-limit signal and the kill: one step plus one checkpoint must fit."""
    visible_within_s: int = 180
    """Seconds after submission during which a job that the scheduler does not list yet counts as queued
    ("submitted, not yet visible to the scheduler"), never as gone."""
    poll_s: float = POLL_S
    """Seconds between two questions to the scheduler (squeue, sacct) while a command waits (submit --wait, status
    --watch, cancel): they read the run folders as often as they like and ask early when a folder changes; a
    scheduler that does not answer is asked less and less often, up to every 10 minutes (jobs/poller.py). Sites
    ask for 60-120 s; at least 10. Submit keeps it in the sweep's folder (jobs/settings.py), so that a command given
    the folder waits by it too."""
    arrays: bool = True
    """SLURM: the runs of one size (the same resources) go as one job array, one sbatch call for them all (sites
    ask for arrays, and cap what one user may queue); False for a site that forbids arrays: a job per run."""
    array_parallelism: int = 0
    """SLURM: at most this many runs of an array at once (sbatch's `--array=0-N%P`); 0: no throttle of our own."""
    gpu_peak_tflops: float = 989.0
    """Dense bf16 peak per GPU (H200: 989), for the plan's time estimates."""
    assumed_mfu: float = 0.35
    """Model-FLOPs utilization assumed by the plan for BP."""
    home: str = ""
    """Where relative paths (root, Data.dir) start: for a Sweep built by a sweep file that load_sweep runs, the file's
    project folder, the parent of the `sweeps/` folder that holds it (else the file's own folder), set as the Sweep
    is built (so that its runs are checked once), so that every command finds the same runs from any working
    directory. "" (a Sweep built in Python): the current directory."""

    @property
    def jobs_root(self) -> Path:
        """The absolute jobs root (the local queue lives in it too)."""
        return self._jobs_dir.parent if os.path.isabs(self.home) else (Path(self.home or ".") / self.root).absolute()

    @property
    def jobs_dir(self) -> Path:
        """The sweep's folder of runs: <root>/<name>."""
        return self._jobs_dir if os.path.isabs(self.home) else self.jobs_root / self.name

    @cached
    def _jobs_dir(self) -> Path:
        """jobs_dir of a sweep whose home is absolute (a sweep file's: the path does not change with the working
        directory), made once: each of a sweep file's 10,000 runs asks for it (its run_dir)."""
        return (Path(self.home) / self.root).absolute() / self.name

    def __post_init__(self) -> None:
        if not self.home and _LOADING is not None:  # built by the sweep file load_sweep runs: its home, checked once
            object.__setattr__(self, "home", str(project_folder(_LOADING)))
        for name, kind, example in (("sizes", Size, "Size(name='s60', global_batch=256)"), ("arms", Arm, "arm('bp')")):
            object.__setattr__(self, name, _tuple_of(name, getattr(self, name), kind, example))
        if not isinstance(self.data, Data):
            raise field_error("Sweep", "data", f"Sweep.data must be a Data(...), got {self.data!r:.60}",
                              hint="e.g. data=Data(dir='data/fineweb', source='fineweb-edu')")
        object.__setattr__(self, "train", _train_pairs(self.train))
        for owner, name in (("Sweep", self.name), *(("Arm", a.name) for a in self.arms)):
            bad = segment_problem(name)
            if bad:  # it becomes a folder under root and a job's name: '../x' would leave the jobs root
                fixed = (re.sub(r"[^A-Za-z0-9._-]+", "_", str(name)).lstrip(".-") or "ladder")[:MAX_NAME]
                raise field_error(owner, "name", f"{owner}.name {bad}", value=name,
                                  hint=f"e.g. {fixed!r}: it names a folder under the jobs root")
        for name in ("max_timeouts", "max_preemptions", "max_crashes", "signal_delay_s", "visible_within_s",
                     "array_parallelism"):
            value = getattr(self, name)
            need("Sweep", "Sweep.", name, value, is_int(value) and value >= 0, "an integer >= 0")
        if not isinstance(self.arrays, bool):
            raise field_error("Sweep", "arrays", f"Sweep.arrays must be True or False, got {self.arrays!r}")
        need("Sweep", "Sweep.", "poll_s", self.poll_s, is_number(self.poll_s) and self.poll_s >= MIN_POLL_S,
             f"a number >= {MIN_POLL_S:g} (seconds between questions to the scheduler; sites ask for 60-120)")
        need("Sweep", "Sweep.", "gpu_peak_tflops", self.gpu_peak_tflops,
             is_number(self.gpu_peak_tflops) and self.gpu_peak_tflops > 0, "a number > 0")
        need("Sweep", "Sweep.", "assumed_mfu", self.assumed_mfu,
             is_number(self.assumed_mfu) and 0 < self.assumed_mfu <= 1, "a number in (0, 1]")
        need("Sweep", "Sweep.", "seeds", self.seeds, isinstance(self.seeds, (tuple, list))
             and all(map(is_seed, self.seeds)), "a tuple of integers in [0, 2**32)")
        if not self.sizes or not self.arms or not self.seeds:
            raise ConfigError(f"Sweep {self.name!r} needs at least one size, one arm and one seed")
        repeated = [seed for i, seed in enumerate(self.seeds) if seed in self.seeds[:i]]
        if repeated:
            raise field_error("Sweep", "seeds", f"Sweep.seeds names seed {repeated[0]!r} more than once: "
                              f"{self.seeds!r}", hint=f"each seed once: seeds={tuple(sorted(distinct(self.seeds)))!r}")
        if isinstance(self.trackers, (str, list)):  # trackers="tensorboard": one name, not its letters
            object.__setattr__(self, "trackers", (self.trackers,) if isinstance(self.trackers, str)
                               else tuple(self.trackers))
        bad = tracker_error(self.trackers, "Sweep.trackers")
        if bad:
            raise field_error("Sweep", "trackers", str(bad.args[0]), hint=bad.hint)
        known = {f.name for f in dataclasses.fields(TrainConfig)} - set(SET_ELSEWHERE)
        given = set(dict(self.train)).union(*(dict(a.overrides) for a in self.arms))
        if given & set(SET_ELSEWHERE):
            name = sorted(given & set(SET_ELSEWHERE))[0]
            what, hint = SET_ELSEWHERE[name]
            raise field_error("arm", name, f"Sweep {self.name!r}: {name} is not set in train= or an arm: it is "
                              f"{what}", hint=hint)
        if given - known:
            unknown = sorted(given - known)
            guess = ", ".join(f"{c} (not {u})" for u in unknown if (c := closest(u, known)))
            raise field_error("arm", unknown[0], f"Sweep {self.name!r}: unknown TrainConfig field(s) "
                              f"{', '.join(unknown)}",
                              hint=f"did you mean {guess}?" if guess else f"fields: {', '.join(sorted(known))}")
        for size in self.sizes:
            if size.resources.time_min * 60 <= self.signal_delay_s:
                raise ConfigError(f"Sweep {self.name!r}: size {size.name} has time_min={size.resources.time_min}, "
                                  f"not longer than signal_delay_s={self.signal_delay_s} s",
                                  hint="the time-limit signal must come after the job starts: raise time_min")
        for a in self.arms:
            for size in self.sizes:
                a.ratio(size.name)  # a per-size table must cover every size of the sweep
        if self.tune is not None:
            tune_problem(self)
        names = Counter(r.name for r in expand(self))
        duplicates = sorted(n for n, count in names.items() if count > 1)
        if duplicates:  # the seeds are distinct: a size or an arm appears twice
            arms = [a.name for a in self.arms]
            raise field_error("Sweep", "arms" if len(set(arms)) < len(arms) else "sizes",
                              f"Sweep {self.name!r} has duplicate run names: {', '.join(duplicates)}",
                              hint="each size and arm may appear once; use seeds for repeats")
        checked = set()  # a run's seeds differ in their config by the seed alone, checked above as TrainConfig does
        for run in expand(self):  # every value the trainer will check, checked now, the batch's split too
            if (run.size.name, run.arm.name, run.lr, run.role) in checked:
                continue
            checked.add((run.size.name, run.arm.name, run.lr, run.role))
            try:
                batch_plan(run.train_config(), run.size.resources.world_size)
            except ConfigError as err:
                field = str(err.args[0]).split(" ")[0].rpartition(".")[2].split("=")[0]
                raise field_error("", field, f"run {run.name}: {err.args[0]}", hint=err.hint) from None


def _tuple_of(name: str, value, kind: type, example: str) -> tuple:
    """Sweep.<name> as a tuple of `kind` (a list taken as one), or a field_error: one alone (a tuple of one missing
    its trailing comma), or something else in its place (a preset's or an arm's name as words)."""
    if isinstance(value, kind):
        raise field_error("Sweep", name, f"Sweep.{name} must be a tuple of {kind.__name__}, got one alone",
                          hint=f"a tuple of one needs a trailing comma: {name}=({example},)")
    bad = value if not isinstance(value, (tuple, list)) else next((v for v in value if not isinstance(v, kind)), None)
    if bad is not None:
        raise field_error("Sweep", name, f"Sweep.{name} must be a tuple of {kind.__name__}, got {bad!r:.60}",
                          hint=f"e.g. {name}=({example},)")
    return tuple(value)


def _train_pairs(value) -> tuple[tuple[str, object], ...]:
    """Sweep.train as (field, value) pairs (a mapping taken as its items), or a field_error: not pairs, or a field
    set twice (the last would win without a word)."""
    pairs = tuple(value.items()) if isinstance(value, Mapping) else value
    if not isinstance(pairs, (tuple, list)) or not all(
            isinstance(p, (tuple, list)) and len(p) == 2 and isinstance(p[0], str) for p in pairs):
        raise field_error("Sweep", "train", f"Sweep.train must be (field, value) pairs, got {value!r:.60}",
                          hint="e.g. train=(('eval_every', 500),): a pair alone needs a trailing comma")
    seen: dict[str, object] = {}
    for name, v in pairs:
        if name in seen:
            raise field_error("", name, f"Sweep.train sets {name} twice ({seen[name]!r}, then {v!r})",
                              hint="set each field once")
        seen[name] = v
    return tuple(tuple(p) for p in pairs)


def tune_problem(sweep: Sweep) -> None:
    """A Tune that does not fit its sweep, as a field_error: a size or arm it names that the sweep lacks, a size
    left to the lr law with fewer than two tuned sizes to fit it on."""
    tune, sizes, arms = sweep.tune, [s.name for s in sweep.sizes], [a.name for a in sweep.arms]
    for name in tune.sizes:
        if name not in sizes:
            raise field_error("Tune", "sizes", f"Tune.sizes names {name!r}, not a size of sweep {sweep.name!r}",
                              hint=did_you_mean(name, sizes, say=repr) or f"its sizes: {', '.join(sizes)}")
    if tune.grid and isinstance(tune.grid[0], tuple):
        named = [n for n, _ in tune.grid]
        for name in named:
            if name not in arms:
                raise field_error("Tune", "grid", f"Tune.grid names arm {name!r}, not an arm of sweep "
                                  f"{sweep.name!r}", hint=did_you_mean(name, arms, say=repr)
                                  or f"its arms: {', '.join(arms)}")
        if set(arms) - set(named):
            raise field_error("Tune", "grid", f"Tune.grid gives no grid for arm(s) "
                              f"{', '.join(a for a in arms if a not in named)}",
                              hint="a mapping names every arm of the sweep, or give one grid for all")
    left = [s for s in sizes if s not in tune.sizes]  # the sizes the lr law gives their lr
    for name in tune.check:
        if name not in sizes or name in tune.sizes:
            raise field_error("Tune", "check", f"Tune.check names {name!r}, " + (
                "a size Tune.sizes tunes already" if name in tune.sizes else f"not a size of sweep {sweep.name!r}"),
                hint=f"check the sizes the lr law transfers to: {', '.join(left)}" if left else
                "Tune.sizes tunes every size: no lr law transfers to one, so leave Tune.check empty")
    for size in (s for s in sweep.sizes if s.name in tune.sizes):  # multipliers of a size's lr that round alike
        for arm in sweep.arms:
            lrs = tune.lrs(arm.name, PlannedRun(sweep, size, arm, 0).base_lr)
            if len(set(lrs)) < len(lrs):
                raise field_error("Tune", "grid", f"Tune.grid gives {size.name}-{arm.name} the lrs "
                                  f"{', '.join(lr_text(lr) for lr in lrs)}: two name one grid run (3 significant "
                                  "digits)", hint="space the grid's values further apart")
    counts = {s.params_non_embedding for s in sweep.sizes if s.name in tune.sizes}
    if left and len(set(tune.sizes)) < 2:
        raise field_error("Tune", "sizes", f"Tune.sizes={tune.sizes!r} tunes one size; the sweep's other sizes "
                          f"({', '.join(left)}) take their lr from a law lr = a N^b fitted on the tuned sizes, "
                          "which needs two", hint="tune at least two sizes, or all of them")
    if left and len(counts) < 2:
        raise field_error("Tune", "sizes", f"Tune.sizes={tune.sizes!r} tunes sizes of one non-embedding count "
                          f"(N={counts.pop():,}); the sweep's other sizes ({', '.join(left)}) take their lr from a "
                          "law lr = a N^b fitted on the tuned sizes, which needs two counts",
                          hint="tune sizes of two different shapes, or all of them")


@dataclass(frozen=True)
class PlannedRun:
    """One size x arm x seed of a sweep: a run of the study, or (role "tuning") one lr of a Tune's grid."""

    sweep: Sweep
    size: Size
    arm: Arm
    seed: int
    lr: float | None = None
    """Its lr when the sweep's tuning sets it (a tuning run's grid point, a final run's choice); None: the size's (or
    the arm's), or, for a final run whose tuning is not done, not known yet (`waits_for`)."""
    role: str = ""
    """"tuning" (a run of a Tune's grid), "final" (a run of a size and arm that a Tune sets the lr of), or ""."""
    lr_from: str = ""
    """Where a final run's lr comes from, in words (jobs/tuning.py): the tuning runs' best, or the lr law."""
    waits_for: tuple[str, ...] = ()
    """The tuning runs a final run waits for (not complete yet): its lr is not known until they are."""

    @property
    def name(self) -> str:
        if self.role == "tuning":
            return f"{self.size.name}-{self.arm.name}-lr{lr_text(self.lr)}" + (f"-s{self.seed}" if self.seed else "")
        return run_name(self.size.name, self.arm.name, self.seed)

    @property
    def steps(self) -> int:
        """Optimizer steps: the size's, or a tuning run's share of them (Tune.budget)."""
        if self.role == "tuning":
            return max(1, math.ceil(self.sweep.tune.budget * self.size.steps))
        return self.size.steps

    @property
    def base_lr(self) -> float:
        """The lr without tuning: the size's, or the sweep's or arm's override (a relative Tune.grid multiplies it)."""
        return float({"lr": self.size.lr, **dict(self.sweep.train), **dict(self.arm.overrides)}["lr"])

    @property
    def run_dir(self) -> Path:
        return self.sweep.jobs_dir / self.name

    def train_config(self) -> TrainConfig:
        size, steps = self.size, self.steps
        fields = dict(model=size.shape(self.arm.zbp), data_dir=str(data_path(self.sweep)), steps=steps,
                      global_batch=size.global_batch, micro_batch=size.micro_batch, lr=size.lr,
                      warmup_steps=int(size.warmup_frac * steps), seed=self.seed,
                      device="cuda" if size.resources.gpus_per_node else "cpu", trackers=tuple(self.sweep.trackers))
        fields.update(dict(self.sweep.train))
        fields.update(dict(self.arm.overrides))
        if self.lr is not None:
            fields["lr"] = self.lr
        return TrainConfig(**fields)

    def write_folder(self) -> Path:
        """Create the run folder with its resolved config (kept when it exists: the run resumes with it) and its
        plan (parameters, GPUs, estimated GPU-hours, for `zbpscale status`); returns the folder, absolute. A new
        submission lifts an earlier `zbpscale cancel`."""
        folder = RunFolder(self.run_dir.absolute())
        folder.path.mkdir(parents=True, exist_ok=True)
        folder.cancel.unlink(missing_ok=True)
        if not folder.config.exists():
            atomic_write(folder.config, json.dumps(self.train_config().to_dict(), indent=1) + "\n")
        res, hours = self.size.resources, self.estimated_hours()
        plan = {"params": self.size.params, "params_non_embedding": self.size.params_non_embedding, "gpus": res.gpus,
                "world_size": res.world_size,
                "gpu_hours": 0.0 if not res.gpus else hours * res.gpus, "time_min": res.time_min}
        if self.role:  # a run of a sweep that tunes its lr: what it is, and where a final run's lr came from
            plan.update(role=self.role, lr_from=self.lr_from)
        atomic_write(folder.plan, json.dumps(plan, indent=1) + "\n")
        return folder.path

    def job_settings(self) -> dict:
        """What its job is submitted with and keeps through its requeues, as plain JSON: the size's Resources and the
        sweep's JOB_FIELDS (both executors record it in the `submitted` event; sweep_edits.settings_notes compares)."""
        said = {**dataclasses.asdict(self.size.resources), **{k: getattr(self.sweep, k) for k in JOB_FIELDS}}
        return as_json(said)

    def estimated_hours(self) -> float:
        """Wall-clock hours from the sweep's throughput assumption (CPU runs: unknown -> nan)."""
        res = self.size.resources
        if not res.gpus:
            return math.nan
        flops = flops_per_token(self.size.shape()) * self.steps * self.size.global_batch \
            * self.size.shape().max_seq_len
        seconds = flops / (res.gpus * self.sweep.gpu_peak_tflops * 1e12 * self.sweep.assumed_mfu)
        return seconds * self.arm.ratio(self.size.name) / 3600


def data_path(sweep: Sweep) -> Path:
    """The prepared data folder, absolute (a relative Data.dir starts at the sweep's home)."""
    return (Path(sweep.home or ".") / sweep.data.dir).absolute()


def prep_config(sweep: Sweep):
    """The data-prep job of a sweep whose data are not prepared (both executors run this one description; the
    local queue as the command line `data.prepare_cli.to_argv` writes)."""
    from zbpscale.data.prepare import PrepConfig

    d = sweep.data
    return PrepConfig(source=prep_source(sweep), out=data_path(sweep), tokens=d.tokens or None,
                      workers=max(1, d.workers), config=d.config)


def prep_source(sweep: Sweep) -> str:
    """Data.source as the prep job takes it: a relative `local:` path starts at the sweep's home, as Data.dir does
    (the job runs elsewhere: the local queue's folder, a compute node's working directory)."""
    source = sweep.data.source
    pattern = source[len("local:"):] if source.startswith("local:") else ""
    if pattern and not Path(pattern).expanduser().is_absolute():
        return "local:" + str(Path(sweep.home or ".").absolute() / pattern)
    return source


def project_folder(sweep_file: Path) -> Path:
    """Where a sweep file's relative paths start: the parent of its `sweeps/` folder, else its own folder."""
    folder = Path(sweep_file).absolute().parent
    return folder.parent if folder.name == "sweeps" else folder


def refuse_other_owner(sweep: Sweep, path: Path, command: str) -> None:
    """A ConfigError where the sweep's folder holds the runs of another sweep file of this project (a sweep file
    copied and not renamed: its runs would mix with the first's, planned by either file in turn), as the folder's
    sweep.json names it; nothing when it names this file, or one that is gone (renamed), or one of another project
    folder (a study copied). `command`: what the hint says to do with the other file (submit; give, to a command
    that reads)."""
    kept = SweepSettings.read(sweep.jobs_dir)
    other = Path(kept.sweep_file) if kept and kept.sweep_file else None
    if other is None or not other.is_file() or project_folder(other) != project_folder(path):
        return
    try:
        if other.samefile(path):
            return
    except OSError:
        return
    raise ConfigError(f"{sweep.jobs_dir} holds the runs of {shown_path(other)}; {shown_path(path)} also calls itself "
                      f"{sweep.name!r}", hint=f"give {shown_path(path)} a name of its own (Sweep(name=...)), or "
                      f"{command} {shown_path(other)}")


def model_path(given: str | Path) -> Path:
    """Where a size's YAML model file is: a relative path starts at the project folder of the sweep file being
    loaded (where its jobs/ and data/ go, and `zbpscale init --configs` writes configs/model/), or, where only that
    holds the file, at the sweep file's own folder (as releases before 2026-12-05 read it); outside a load, at the
    working directory."""
    path = Path(given)
    if path.is_absolute() or _LOADING is None:
        return path
    project, beside = project_folder(_LOADING) / path, _LOADING.parent / path
    return beside if beside.is_file() and not project.is_file() else project


_FIELDS_OF = {"Sweep": Sweep, "Size": Size, "Data": Data, "Resources": Resources, "Tune": Tune,
              "ModelConfig": ModelConfig, "Arm": Arm}
"""The classes a sweep file calls with keywords, by name (for load_sweep's word on an unknown keyword)."""


def expand(sweep: Sweep) -> list[PlannedRun]:
    """Every run of the sweep, sizes outermost, then arms, then (a tuning sweep's) the tuning runs of the grid by lr
    and seed, then seeds. A final run's lr is left to jobs/tuning.py's `planned`, which reads the tuning runs."""
    runs = []
    for size in sweep.sizes:
        for a in sweep.arms:
            if sweep.tune is None:
                runs += [PlannedRun(sweep, size, a, seed) for seed in sweep.seeds]
                continue
            if size.name in sweep.tune.sizes:
                base = PlannedRun(sweep, size, a, 0).base_lr
                runs += [PlannedRun(sweep, size, a, seed, lr=lr, role="tuning")
                         for lr in sweep.tune.lrs(a.name, base) for seed in sweep.tune.seeds]
            runs += [PlannedRun(sweep, size, a, seed, role="final") for seed in sweep.seeds]
    return runs


def find_sweeps(target: str | None) -> list[tuple[str, Path]]:
    """[(sweep name, sweep folder)] for a sweep file, a sweep folder, a jobs root, or nothing (./jobs)."""
    path = Path(target or "jobs")
    if path.is_file() and path.suffix == ".py":
        sweep = load_sweep(path)
        return [(sweep.name, sweep.jobs_dir)]
    if target is None and not path.is_dir():
        raise ConfigError(f"no jobs/ folder in {Path.cwd()}, where runs go by default",
                          hint="give a sweep file or its folder of runs, e.g. zbpscale status sweeps/smoke.py")
    if not path.is_dir():
        raise not_found(path)
    if _holds_runs(path):
        return [(path.name, path)]
    sweeps = [(p.name, p) for p in sorted(path.iterdir()) if p.is_dir() and not p.name.startswith(".")
              and _holds_runs(p)]
    if not sweeps and RunFolder.is_run(path):  # status takes one run's folder; the others take its sweep's
        raise ConfigError(f"{path} is one run's folder, not a sweep's", hint=f"give its sweep's folder: "
                          f"{shown_path(path.parent)} (cancel and sync take --only {path.name} for this run alone; "
                          "collect and report take the sweep whole)")
    if not sweeps:
        raise ConfigError(f"no runs under {path}", hint="submit a sweep first: zbpscale submit SWEEP")
    return sweeps


def _holds_runs(folder: Path) -> bool:
    """Whether a folder holds a run folder (RunFolder.is_run: a sweep's folder): read up to the first one."""
    with os.scandir(folder) as entries:
        return any(e.is_dir() and RunFolder.is_run(e.path) for e in entries)


def not_found(path: str | Path) -> ConfigError:
    """The one wording of every command (submit, status, cancel, collect) for a sweep that is not there; for one
    of the example sweeps in a folder without them, how to get them."""
    from zbpscale.examples import NAMES

    path = Path(path)
    if path.parent.name == "sweeps" and path.stem in NAMES and not path.parent.is_dir():
        hint = f"zbpscale init {shown_path(path.parent.parent)} writes the example sweeps (they come with zbpscale)"
    else:
        hint = "give a sweep file (sweeps/ladder.py), or, to status, cancel or collect, its folder of runs " \
               "(jobs/ladder)"
    return ConfigError(f"no sweep file or sweep folder at {path}", hint=hint)


_LOADING: Path | None = None
"""The sweep file being loaded (load_sweep): a size's YAML model file is found from it (`model_path`)."""


def load_sweep(path: str | Path) -> Sweep:
    """Run a sweep file and return its `SWEEP`; every mistake is one ConfigError naming the file (and line)."""
    global _LOADING
    path = Path(path)
    if path.is_dir():  # a sweep's folder of runs (status, cancel and collect take one; submit, sizes, doctor do not)
        kept = SweepSettings.read(path)
        raise ConfigError(f"{path} is a folder, not a sweep file",
                          hint=f"its runs' sweep file: {shown_path(Path(kept.sweep_file))}" if kept and kept.sweep_file
                          else "give the sweep file, e.g. sweeps/ladder.py")
    if not path.is_file():
        raise not_found(path)
    namespace: dict = {"__name__": f"zbpscale_sweep_{path.stem}", "__file__": str(path)}
    try:
        source = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as err:
        raise ConfigError(f"{path} is not UTF-8 text (byte {err.start}: {err.reason})",
                          hint="a sweep file is Python source: save it as UTF-8") from None
    try:
        code = compile(source, str(path), "exec")
        _LOADING = path
        try:
            exec(code, namespace)  # noqa: S102 - a sweep file is the user's own Python
        finally:
            _LOADING = None
    except SyntaxError as err:
        text = (err.text or "").strip()
        raise ConfigError(f"{path}:{err.lineno}: syntax error: {err.msg}",
                          hint=f"line {err.lineno} reads: {text:.80}" if text else "fix the sweep file") from None
    except SystemExit as err:  # sys.exit() or exit() in the file: the command ended without a word, status 0
        frames = [f for f in traceback.extract_tb(err.__traceback__) if f.filename == str(path)]
        where = f"{path}:{frames[-1].lineno}" if frames else str(path)
        code = "" if err.code is None else f" ({err.code!r})"
        raise ConfigError(f"{where}: the sweep file exits{code} as it is loaded",
                          hint="a sweep file builds one SWEEP = Sweep(...) and does nothing else") from None
    except Exception as err:
        frames = [f for f in traceback.extract_tb(err.__traceback__) if f.filename == str(path)]
        line = frames[-1].lineno if frames else None
        unknown = re.search(r"(\w+)\.__init__\(\) got an unexpected keyword argument '(\w+)'", str(err))
        if isinstance(err, TypeError) and unknown and unknown.group(1) in _FIELDS_OF:
            owner, name = unknown.groups()
            fields = [f.name for f in dataclasses.fields(_FIELDS_OF[owner]) if f.name != "home"]
            where = f"{path}:{field_line(source, line, owner, name) or line}"
            hint = did_you_mean(name, fields) or f"its fields: {', '.join(fields)}"
            raise ConfigError(f"{where}: {owner} has no field {name!r}", hint=hint) from None
        if isinstance(err, ZbpError):  # zbpscale's own word on the mistake, with its own hint
            field = getattr(err, "field", None)
            at = (field_line(source, line, *field) if field and line else None) or line
            where = f"{path}:{at}" if at else str(path)
            raise ConfigError(f"{where}: {err.args[0]}", hint=err.hint) from None
        where = f"{path}:{line}" if line else str(path)
        raise ConfigError(f"{where}: {type(err).__name__}: {err}", hint="fix the sweep file") from None
    if "SWEEP" not in namespace:
        raise ConfigError(f"{path} defines no SWEEP", hint="end the file with SWEEP = Sweep(...)")
    sweep = namespace["SWEEP"]
    if not isinstance(sweep, Sweep):
        raise ConfigError(f"{path}: SWEEP is {sweep!r:.60}, not a zbpscale.sweep.Sweep",
                          hint="end the file with SWEEP = Sweep(...)")
    # a SWEEP built before the file ran (imported from another module) did not get its home as it was built
    return sweep if sweep.home else dataclasses.replace(sweep, home=str(project_folder(path)))

