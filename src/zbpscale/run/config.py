"""A run's config (config.json), torch-free: the model's shape (`ModelConfig`, the named sizes and their
closed-form counts) and the training run (`TrainConfig`, its batch plan and derived numbers), read back as the
trainer reads them (`TrainConfig.from_dict`, through run/formats.py's migrations).

Job control (submit, status, cancel, collect, the local driver) plans and checks runs with these and never
imports torch or the training loop; train/model.py and train/loop.py build on them.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import os
import re
import stat
from dataclasses import dataclass

from zbpscale.errors import ConfigError
from zbpscale.run.formats import FORMAT, migrate
from zbpscale.text import did_you_mean
from zbpscale.zbp.config import ZBPConfig

POS_EMBS = ("learned", "rope")


@dataclass(frozen=True, kw_only=True)
class ModelConfig:
    """Shape of the model and which of its cores are physical black boxes."""

    n_layer: int
    """Number of transformer blocks."""
    n_head: int
    """Attention heads; must divide d_model."""
    d_model: int
    """Residual stream width."""
    d_ff: int = 0
    """SwiGLU hidden width h (the core's unit has 2h inputs); 0 means 8/3 * d_model rounded up to 64."""
    max_seq_len: int = 1024
    """Context length T (also the size of the learned position table)."""
    vocab_size: int = 50257
    """Tokenizer vocabulary (GPT-2 BPE); the embedding tables are padded to a multiple of 64."""
    pos_emb: str = "learned"
    """Position encoding: learned (absolute table) or rope (rotary on q and k)."""
    rope_theta: float = 10000.0
    """RoPE base frequency (pos_emb == 'rope' only)."""
    norm_eps: float = 1e-6
    """RMSNorm epsilon."""
    init_std: float = 0.02
    """Std of the normal init; output projections use init_std / sqrt(2 * n_layer)."""
    zbp: ZBPConfig | None = None
    """None: the bp arm (exact backprop everywhere). Otherwise the estimator of the physical cores."""

    def __post_init__(self) -> None:
        for name in ("n_layer", "n_head", "d_model", "max_seq_len", "vocab_size"):
            value = getattr(self, name)
            if not _is_int(value) or value < 1:
                raise ConfigError(f"ModelConfig.{name} must be an integer >= 1, got {value!r}")
        for name in ("rope_theta", "norm_eps", "init_std"):
            value = getattr(self, name)
            if not _is_number(value) or not 0 < value < math.inf:
                raise ConfigError(f"ModelConfig.{name} must be a number > 0, got {value!r}")
        if self.d_model % self.n_head:
            heads = [h for h in range(1, 257) if self.d_model % h == 0 and self.d_model // h >= 8]
            raise ConfigError(f"ModelConfig.n_head={self.n_head} must divide d_model={self.d_model}",
                              hint=f"n_head values that do (head dim >= 8): {heads}" if heads else
                              "choose a d_model that is a multiple of the head dim you want (e.g. 64)")
        if self.pos_emb not in POS_EMBS:
            raise ConfigError(f"ModelConfig.pos_emb must be one of {', '.join(POS_EMBS)}; got {self.pos_emb!r}")
        if self.pos_emb == "rope" and self.head_dim % 2:
            raise ConfigError(f"ModelConfig: rope needs an even head dim (d_model / n_head), got {self.head_dim}")
        if not _is_int(self.d_ff) or self.d_ff < 0:
            raise ConfigError(f"ModelConfig.d_ff must be an integer >= 0 (0 = automatic), got {self.d_ff!r}")
        if self.zbp is not None and not isinstance(self.zbp, ZBPConfig):
            raise ConfigError(f"ModelConfig.zbp must be a ZBPConfig or None, got {type(self.zbp).__name__}")

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_head

    @property
    def hidden(self) -> int:
        return self.d_ff or 64 * math.ceil(8 * self.d_model / 3 / 64)

    @property
    def padded_vocab(self) -> int:
        return 64 * math.ceil(self.vocab_size / 64)


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)  # true is not the integer 1 of a shape


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


# Named sizes, ordered by parameter count. Ladder sizes are named after their total parameter count;
# the small ones (tests, smoke runs, the CPU mini ladder) are not.
SIZES: dict[str, ModelConfig] = {
    "nano": ModelConfig(n_layer=2, n_head=2, d_model=32, max_seq_len=64),  # job-layer tests: fast steps
    "micro": ModelConfig(n_layer=2, n_head=2, d_model=64, max_seq_len=128),  # the mini ladder's smallest rung
    "tiny": ModelConfig(n_layer=4, n_head=4, d_model=128, max_seq_len=128),
    "mini": ModelConfig(n_layer=4, n_head=4, d_model=256, max_seq_len=256),
    "s60": ModelConfig(n_layer=12, n_head=6, d_model=384),
    "s124": ModelConfig(n_layer=12, n_head=10, d_model=640),
    "s350": ModelConfig(n_layer=20, n_head=16, d_model=1024),
    "s1b": ModelConfig(n_layer=16, n_head=16, d_model=2048),
}


SHAPE_FIELDS = tuple(f.name for f in dataclasses.fields(ModelConfig) if f.name != "zbp")
"""A model shape's fields: every ModelConfig field but the arm's estimator (zbp)."""


def shape_of(fields, source: str, lines: dict[str, int] | None = None) -> ModelConfig:
    """The model shape `fields` (a mapping of SHAPE_FIELDS, e.g. a YAML file's) gives; a ConfigError naming `source`
    (and, given `lines`, the line of the key at fault: `source:line`) for an unknown key (with a did-you-mean),
    a missing one or a bad value (heads that do not divide the width, an odd head dim for rope, ...)."""
    lines = lines or {}

    def where(key: str | None) -> str:
        return f"{source}:{lines[key]}" if key in lines else source

    if not isinstance(fields, dict):
        held = "nothing" if fields is None else f"a {type(fields).__name__}"
        raise ConfigError(f"{source} holds {held}, not a mapping of a model shape's fields",
                          hint="e.g. n_layer: 24, n_head: 16, d_model: 1536 (one per line)")
    for key in fields:
        if key == "zbp":
            raise ConfigError(f"{where(key)}: zbp is an arm's setting, not a size's", hint="remove it from the shape")
        if key not in SHAPE_FIELDS:
            hint = did_you_mean(str(key), SHAPE_FIELDS, say=repr) or f"fields: {', '.join(SHAPE_FIELDS)}"
            raise ConfigError(f"{where(key)}: a model shape has no field {key!r}", hint=hint)
    missing = [k for k in ("n_layer", "n_head", "d_model") if k not in fields]
    if missing:
        raise ConfigError(f"{source}: a model shape needs {', '.join(missing)}", hint="e.g. n_layer: 24, n_head: 16, "
                          "d_model: 1536; every other field has a default")
    try:
        return ModelConfig(**fields)
    except ConfigError as err:
        named = [k for k in fields if k in err.args[0]]  # the field the error names, for its line
        raise ConfigError(f"{where(named[0] if named else None)}: {err.args[0]}", hint=err.hint) from None


def read_yaml(path) -> tuple[object, dict[str, int]]:
    """A YAML file's value and, for a mapping, the line of each top-level key; a ConfigError with `file:line` for
    a file that cannot be read or parsed."""
    import yaml

    try:
        if not stat.S_ISREG(os.stat(path).st_mode):  # a FIFO would wait for a writer for ever
            raise ConfigError(f"{path} is not a file", hint="give the path of a YAML file")
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
    except OSError as err:
        raise ConfigError(f"{path} cannot be read ({err.strerror})", hint="check the file's path") from None
    except UnicodeDecodeError as err:
        raise ConfigError(f"{path} is not UTF-8 text (byte {err.start}: {err.reason})",
                          hint="save it as UTF-8") from None
    loader = _yaml_loader()(text)
    try:
        node = loader.get_single_node()
        value = None if node is None else loader.construct_document(node)
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        at = f"{path}:{mark.line + 1}" if mark is not None else str(path)
        raise ConfigError(f"{at}: not valid YAML ({getattr(err, 'problem', None) or err})",
                          hint="one `field: value` per line, e.g. n_layer: 24") from None
    finally:
        loader.dispose()
    _once(node, path)
    lines = {k.value: k.start_mark.line + 1 for k, _ in node.value} if isinstance(node, yaml.MappingNode) else {}
    return value, lines


def _once(node, path) -> None:
    """A ConfigError at the line of a key given twice in one mapping, at any depth (`zbp: {n: 16, n: 64}`): PyYAML
    keeps the last of two silently."""
    import yaml

    if isinstance(node, yaml.MappingNode):
        seen: dict = {}
        for key, value in node.value:
            if key.value in seen:
                raise ConfigError(f"{path}:{key.start_mark.line + 1}: {key.value} is given twice (first on line "
                                  f"{seen[key.value]})", hint="keep one of them")
            seen[key.value] = key.start_mark.line + 1
            _once(value, path)
    elif isinstance(node, yaml.SequenceNode):
        for item in node.value:
            _once(item, path)


@functools.cache
def _yaml_loader():
    """PyYAML's safe loader, reading a number with an exponent and no dot (`1e-5`, `3e-4`) as a float, as YAML 1.2
    does: PyYAML follows YAML 1.1, which reads it as text, and a config then held the string '1e-5'."""
    import yaml

    class Loader(yaml.SafeLoader):
        pass

    exponent = re.compile(r"^[-+]?[0-9][0-9_]*(?:\.[0-9_]*)?[eE][-+]?[0-9]+$")
    Loader.add_implicit_resolver("tag:yaml.org,2002:float", exponent, list("-+0123456789"))
    return Loader


def shape_from_yaml(path) -> ModelConfig:
    """The model shape of a YAML file whose keys are SHAPE_FIELDS (`configs/model/m760.yaml`); a ConfigError with
    `file:line` for a YAML error, an unknown key or a bad value."""
    fields, lines = read_yaml(path)
    return shape_of(fields, str(path), lines)


def train_fields_from_yaml(path) -> dict:
    """The training fields of a YAML file (`configs/train/zbp_n16.yaml`): TrainConfig's fields but `model`, and
    `zbp`, the arm's estimator (a mapping of ZBPConfig's fields; null or absent: bp), as config.json spells them;
    a ConfigError with `file:line` for an unknown key (with a did-you-mean). Values are checked when the config is
    built from them (TrainConfig.from_dict, the trainer's own rules)."""
    fields, lines = read_yaml(path)
    if fields is None:
        return {}
    if not isinstance(fields, dict):
        raise ConfigError(f"{path} holds a {type(fields).__name__}, not a mapping of training fields",
                          hint="e.g. lr: 3.0e-4, global_batch: 256, zbp: {n: 16} (one per line)")
    for key in fields:
        if key not in TRAIN_FIELDS:
            where = f"{path}:{lines[key]}" if key in lines else str(path)
            hint = "the model's shape is --model's file" if key in SHAPE_FIELDS or key == "model" else \
                did_you_mean(str(key), TRAIN_FIELDS, say=repr) or f"fields: {', '.join(TRAIN_FIELDS)}"
            raise ConfigError(f"{where}: a training config has no field {key!r}", hint=hint)
    if fields.get("zbp") is not None and not isinstance(fields["zbp"], dict):
        where = f"{path}:{lines['zbp']}" if "zbp" in lines else str(path)
        raise ConfigError(f"{where}: zbp must be a mapping of the estimator's fields, or null for bp",
                          hint="e.g. zbp: {n: 16, scheme: central}")
    zbp_fields = [f.name for f in dataclasses.fields(ZBPConfig)]
    for key in fields.get("zbp") or {}:
        if key not in zbp_fields:
            where = f"{path}:{lines['zbp']}" if "zbp" in lines else str(path)
            raise ConfigError(f"{where}: zbp has no field {key!r}",
                              hint=did_you_mean(str(key), zbp_fields, say=repr) or f"fields: {', '.join(zbp_fields)}")
    return fields


def model_config(size: str, **overrides) -> ModelConfig:
    """The preset `size`, with any field replaced (e.g. zbp=ZBPConfig(n=16), max_seq_len=256)."""
    if size not in SIZES:
        raise ConfigError(f"unknown size {size!r}; allowed: {', '.join(SIZES)}")
    return dataclasses.replace(SIZES[size], **overrides)


def n_params(cfg: ModelConfig, *, embeddings: bool = True) -> int:
    """Closed-form parameter count. Without embeddings: the token and position tables and the LM head
    are left out (the blocks and the final norm remain)."""
    d, h = cfg.d_model, cfg.hidden
    per_block = 4 * d * d + 3 * d * h + 4 * d  # q k v o, w_in (d x 2h), w_out (h x d); q/k/attn/mlp norms
    body = cfg.n_layer * per_block + d  # + final norm
    if not embeddings:
        return body
    tables = 2 * cfg.padded_vocab * d + (cfg.max_seq_len * d if cfg.pos_emb == "learned" else 0)
    return body + tables


def flops_per_token(cfg: ModelConfig) -> float:
    """Training FLOPs per token of the bp arm: 6 * (the non-embedding parameters, their norm weights counted as
    the convention does, + the LM head) + 12 * L * T * d for attention."""
    matmul_params = n_params(cfg, embeddings=False) + cfg.padded_vocab * cfg.d_model  # blocks + LM head
    return 6.0 * matmul_params + 12.0 * cfg.n_layer * cfg.max_seq_len * cfg.d_model


def size_table(shapes: dict[str, ModelConfig] | None = None, notes: dict[str, str] | None = None) -> str:
    """A plain-text table of model shapes (default: the presets): shape, parameter counts, forward-backward FLOPs per
    token; `notes`: a last column (where a shape comes from)."""
    shapes, notes = shapes or SIZES, notes or {}
    wide = max(6, *(len(name) for name in shapes))
    head = f"{'size':<{wide}} layers  heads  d_model  d_ff   seq    params  non-embedding  FLOPs/token"
    rows = [head + ("  from" if notes else "")]
    for name, c in shapes.items():
        rows.append((f"{name:<{wide}} {c.n_layer:>6} {c.n_head:>6} {c.d_model:>8} {c.hidden:>5} {c.max_seq_len:>5} "
                     f"{n_params(c) / 1e6:>8.1f}M {n_params(c, embeddings=False) / 1e6:>13.2f}M "
                     f"{flops_per_token(c):>12.3g}" + (f"  {notes[name]}" if name in notes else "")).rstrip())
    return "\n".join(rows)


ASPECT = (32, 128)
"""d_model / n_layer of the shapes `shapes_near` proposes: the presets' span (s60 32 ... s1b 128)."""


def shapes_near(params: float, *, count: int = 5, within: float = 0.1, **fields) -> list[ModelConfig]:
    """Shapes whose non-embedding parameter count is within `within` of `params`, by a stated rule: a head dim of
    64, d_model a multiple of 64, d_model / n_layer in ASPECT (the presets' span), d_ff automatic; the `count`
    nearest to the target first (ties: the aspect nearer 64). `fields`: other ModelConfig fields (max_seq_len, ...)."""
    found = []
    for layers in range(1, 129):
        for d in range(64, 16385, 64):
            if not ASPECT[0] <= d / layers <= ASPECT[1]:
                continue
            shape = ModelConfig(n_layer=layers, n_head=d // 64, d_model=d, **fields)
            off = abs(n_params(shape, embeddings=False) / params - 1)
            if off <= within:
                found.append((off, abs(math.log(d / layers / 64)), shape))
    return [shape for *_, shape in sorted(found, key=lambda f: (f[0], f[1]))[:count]]


def parse_count(text: str) -> float:
    """'760M', '1.2B', '85K', '5e8' as a number; a ConfigError otherwise."""
    units = {"K": 1e3, "M": 1e6, "B": 1e9, "G": 1e9}
    text = str(text).strip()
    try:
        value = float(text[:-1]) * units[text[-1].upper()] if text and text[-1].upper() in units else float(text)
    except ValueError:
        value = math.nan
    if not value > 0 or math.isinf(value):
        raise ConfigError(f"--params must be a parameter count, e.g. 760M or 1.2B, got {text!r}")
    return value


def is_seed(value) -> bool:
    """An integer in [0, 2**32): NumPy's global generator, which the trainer seeds and checkpoints, takes no other."""
    return _is_int(value) and 0 <= value < 2**32


@dataclass(frozen=True, kw_only=True)
class TrainConfig:
    """Everything one run needs; written to <run_dir>/config.json and checked on every resume."""

    model: ModelConfig
    """The model and its arm (model.zbp None = bp)."""
    data_dir: str
    """Folder of prepared shards (`zbpscale prepare-data`)."""
    steps: int
    """Optimizer steps of the whole run."""
    global_batch: int = 64
    """Sequences per optimizer step across all ranks (tokens per step = global_batch * seq_len)."""
    micro_batch: int = 0
    """Sequences per forward pass on one rank; 0 = the rank's whole share (no accumulation)."""
    lr: float = 3e-4
    """Peak learning rate, reached at the end of warmup."""
    min_lr_ratio: float = 0.1
    """The cosine schedule ends at lr * min_lr_ratio at the last step (train/loop.py's lr_at: a run whose warmup
    leaves it no two steps ends at lr)."""
    warmup_steps: int = 0
    """Linear warmup from lr / warmup_steps to lr."""
    weight_decay: float = 0.1
    """Decoupled (AdamW) weight decay of the matrices."""
    decay_norms_and_embeddings: bool = False
    """Also decay the norm weights and the token/position embeddings."""
    betas: tuple[float, float] = (0.9, 0.95)
    """AdamW betas."""
    grad_clip: float = 1.0
    """Clip the global gradient norm to this (0 = no clipping; the norm is still logged)."""
    eval_every: int = 100
    """Evaluate every this many steps (and after the last one); 0 = only at the end."""
    eval_batches: int = 8
    """Fixed validation batches (of global_batch sequences) per evaluation."""
    ckpt_every: int = 500
    """Checkpoint every this many steps (0 = only on signals and at the end)."""
    ckpt_every_s: float = 1800.0
    """... and whenever this many seconds passed since the last checkpoint (0 = never by time)."""
    keep_ckpts: int = 2
    """Checkpoints kept on disk (the newest)."""
    step_timeout_s: float = 1800.0
    """A rank that makes no step for this long (a hung collective, a stopped rank, a lost node) ends the
    attempt: stacks to the log, a `hung` record, a requeue from the last checkpoint counted as a crash (0 = off)."""
    diag_every: int = 0
    """Diagnostics (branch gains, per-core NSR and c, ZBP/BP gradient cosine) every this many steps; 0 = off."""
    log_every: int = 1
    """Write a train record every this many steps."""
    seed: int = 0
    """Seed of the initialization and of the data order."""
    device: str = "auto"
    """auto (GPU when there is one), cpu or cuda."""
    bf16: bool | None = None
    """bf16 autocast; None = on for CUDA, off for CPU. ZBP measurements stay fp32 either way."""
    trackers: tuple[str, ...] = ()
    """Experiment trackers that rank 0 reports to besides metrics.jsonl: tensorboard, wandb (train/trackers.py;
    `pip install 'zbpscale[trackers]'`). One that fails is turned off for the attempt; training goes on."""

    def __post_init__(self) -> None:
        def number(v) -> bool:
            return _is_number(v) and math.isfinite(v)

        for name in ("steps", "global_batch", "eval_batches", "keep_ckpts", "log_every"):
            if not _is_int(getattr(self, name)) or getattr(self, name) < 1:
                raise ConfigError(f"TrainConfig.{name} must be an integer >= 1, got {getattr(self, name)!r}")
        for name in ("micro_batch", "warmup_steps", "eval_every", "ckpt_every", "diag_every"):
            if not _is_int(getattr(self, name)) or getattr(self, name) < 0:
                raise ConfigError(f"TrainConfig.{name} must be an integer >= 0, got {getattr(self, name)!r}")
        if not is_seed(self.seed):
            raise ConfigError(f"TrainConfig.seed must be an integer in [0, 2**32) (NumPy's seeds), got {self.seed!r}")
        if not number(self.lr) or not self.lr > 0:
            raise ConfigError(f"TrainConfig.lr must be a number > 0, got {self.lr!r}")
        if not number(self.min_lr_ratio) or not 0 <= self.min_lr_ratio <= 1:
            raise ConfigError(f"TrainConfig.min_lr_ratio must be a number in [0, 1], got {self.min_lr_ratio!r}")
        for name in ("weight_decay", "grad_clip", "ckpt_every_s", "step_timeout_s"):
            if not number(getattr(self, name)) or getattr(self, name) < 0:
                raise ConfigError(f"TrainConfig.{name} must be a number >= 0, got {getattr(self, name)!r}")
        if isinstance(self.betas, list):  # as JSON and YAML give it
            object.__setattr__(self, "betas", tuple(self.betas))
        if not (isinstance(self.betas, tuple) and len(self.betas) == 2 and all(number(b) and 0 <= b < 1
                                                                               for b in self.betas)):
            raise ConfigError(f"TrainConfig.betas must be two numbers in [0, 1), e.g. (0.9, 0.95), got {self.betas!r}")
        if not isinstance(self.decay_norms_and_embeddings, bool):
            raise ConfigError(f"TrainConfig.decay_norms_and_embeddings must be True or False, got "
                              f"{self.decay_norms_and_embeddings!r}")
        if not isinstance(self.bf16, (bool, type(None))):
            raise ConfigError(f"TrainConfig.bf16 must be True or False (or None: the device's default), got "
                              f"{self.bf16!r}")
        if not isinstance(self.data_dir, str):
            raise ConfigError(f"TrainConfig.data_dir must be a folder's path, got {self.data_dir!r}")
        bad = tracker_error(self.trackers, "TrainConfig.trackers")
        if bad:
            raise bad
        if self.device not in ("auto", "cpu", "cuda"):
            raise ConfigError(f"TrainConfig.device must be auto, cpu or cuda; got {self.device!r}")

    @property
    def seq_len(self) -> int:
        return self.model.max_seq_len

    def to_dict(self) -> dict:
        """What config.json holds: the fields, and the config format they are in (run/formats.py)."""
        return {"format": FORMAT, **dataclasses.asdict(self)}

    @classmethod
    def from_dict(cls, d: dict, *, source: str = "the config") -> "TrainConfig":
        """The config of `to_dict`, or of an older release's config.json (migrated to today's format first); a
        ConfigError naming `source` for a missing, unknown or bad field."""
        try:
            d = migrate(d)
            d.pop("format")
            model = dict(d.pop("model"))
            zbp = model.pop("zbp", None)
            model = ModelConfig(**model, zbp=ZBPConfig(**zbp) if zbp else None)
            return cls(**{**d, "model": model, "betas": tuple(d.get("betas", (0.9, 0.95))),
                          "trackers": tuple(d.get("trackers", ()))})
        except ConfigError as err:
            raise ConfigError(f"{source}: {err.args[0]}", hint=err.hint) from None
        except (TypeError, KeyError, ValueError) as err:
            raise ConfigError(f"{source} does not hold a valid config ({type(err).__name__}: {err})",
                              hint="restore it, or train in a new run folder") from None


TRACKERS: dict[str, type | None] = {"tensorboard": None, "wandb": None}
"""The experiment trackers a config may name: each name and its class (train/trackers.py's Tracker subclasses
register themselves here as they are defined). The built-in names are here before their classes are imported, so
that a config is checked alike where train/trackers.py is not loaded (status, submit)."""


def tracker_error(trackers, label: str) -> ConfigError | None:
    """Why `trackers` is not a tuple of known tracker names (TRACKERS), as an error about the field `label` (with a
    did-you-mean for a mistyped name); None when it is."""
    known = sorted(TRACKERS)
    if not isinstance(trackers, tuple) or not all(isinstance(name, str) for name in trackers):
        return ConfigError(f"{label} must be a tuple of tracker names, e.g. ('tensorboard',), got {trackers!r}",
                           hint=f"trackers: {', '.join(known)}")
    unknown = [name for name in trackers if name not in TRACKERS]
    if unknown:
        return ConfigError(f"{label} names an unknown tracker {unknown[0]!r}",
                           hint=did_you_mean(unknown[0], known, say=repr) or f"trackers: {', '.join(known)}")
    return None


TRAIN_FIELDS = tuple(f.name for f in dataclasses.fields(TrainConfig) if f.name != "model") + ("zbp",)
"""The keys of a training YAML file (train_fields_from_yaml): TrainConfig's fields but model, and the arm's zbp."""


RESUME_SAFE = ("eval_every", "eval_batches", "ckpt_every", "ckpt_every_s", "keep_ckpts", "step_timeout_s",
               "diag_every", "log_every", "trackers")
"""TrainConfig fields that decide only when the trainer evaluates, checkpoints, logs, reports or gives up on a hung
step, never what it computes: a run may resume with other values of these and train bit for bit as it would have
(tests/test_sweep_edits.py checks it against a straight run). Every other field changes the run."""


def batch_plan(cfg: TrainConfig, world_size: int) -> tuple[int, int]:
    """(micro_batch, accumulation steps) per rank for the fixed global batch; a ConfigError if impossible."""
    if cfg.global_batch % world_size:
        raise ConfigError(f"global_batch={cfg.global_batch} is not divisible by world size {world_size}",
                          hint=f"pick a global batch that is a multiple of {world_size}, the number of ranks (one "
                          "per GPU; tasks_per_node of a CPU run)")
    per_rank = cfg.global_batch // world_size
    micro = cfg.micro_batch or per_rank
    if per_rank % micro:
        raise ConfigError(f"micro_batch={micro} does not divide the per-rank batch {per_rank} "
                          f"(global_batch={cfg.global_batch} / world size {world_size})",
                          hint=f"use a micro_batch that divides {per_rank}")
    return micro, per_rank // micro


def derived_numbers(cfg: TrainConfig, world_size: int) -> dict:
    """Every number that follows from the config, printed and saved before any compute is spent."""
    micro, accum = batch_plan(cfg, world_size)
    params = n_params(cfg.model)
    tokens_per_step = cfg.global_batch * cfg.seq_len
    total_tokens = tokens_per_step * cfg.steps
    return {
        "params": params,
        "params_non_embedding": n_params(cfg.model, embeddings=False),
        "world_size": world_size,
        "micro_batch": micro,
        "accumulation_steps": accum,
        "tokens_per_step": tokens_per_step,
        "total_steps": cfg.steps,
        "total_tokens": total_tokens,
        "tokens_per_param": total_tokens / params,
        "flops_per_token": flops_per_token(cfg.model),
        "total_flops_bp": flops_per_token(cfg.model) * total_tokens,
        "arm": "bp" if cfg.model.zbp is None else f"zbp n={cfg.model.zbp.n} {cfg.model.zbp.scheme} "
                                                   f"{cfg.model.zbp.probe} cores={cfg.model.zbp.cores}",
    }
