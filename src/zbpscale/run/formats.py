"""The formats of a run's config.json, and the migration of an older one to today's. Torch-free.

A run outlives the release that started it: a run folder written by an older zbpscale is resumed by a newer one
(a requeued job after `pip install -U`, a hand-run trainer). `config.json` says its format (`"format": N`; files
written before the key existed are told apart by their fields), and `migrate` brings it to FORMAT one step at a
time, each step giving the fields that format added the value that reproduces what the older release did.

    format  first written by            what it added
    1       b538eea (2026-11-30)        the trainer: TrainConfig, ModelConfig, ZBPConfig (n .. seed)
    2       8fffa0a (2026-11-30)        ZBPConfig.impl (the fused estimator; before it every arm ran `plain`)
    3       12e27ef (2026-12-01)        TrainConfig.step_timeout_s (the hang watchdog; before it, none)
    4       (2026-12-02)                TrainConfig.trackers (experiment trackers; before them, none);
                                        ZBPConfig.seeding (probes by global-batch position; before it `micro`)
    5       (2026-12-06)                ZBPConfig.probe_hash (no two core calls share probes; before it 1)

A change to TrainConfig, ModelConfig or ZBPConfig is a new format: add its field names to FIELDS, a function to
MIGRATIONS that turns the previous format into it, and a row above (tests/test_upgrade.py fails until then).

Caveat: a format names fields, not numerics. Two releases that write the same fields may compute differently
(the ZBP probe stream changed at 6d57bee, 2026-11-30): the checkpoint's numerics fingerprint and the resume
record say what a resumed run can keep; docs/upgrading.md "Upgrading in the middle of a sweep".
"""

from __future__ import annotations

import copy

from zbpscale.errors import ConfigError

_TRAIN_1 = ("model", "data_dir", "steps", "global_batch", "micro_batch", "lr", "min_lr_ratio", "warmup_steps",
            "weight_decay", "decay_norms_and_embeddings", "betas", "grad_clip", "eval_every", "eval_batches",
            "ckpt_every", "ckpt_every_s", "keep_ckpts", "diag_every", "log_every", "seed", "device", "bf16")
_MODEL_1 = ("n_layer", "n_head", "d_model", "d_ff", "max_seq_len", "vocab_size", "pos_emb", "rope_theta", "norm_eps",
            "init_std", "zbp")
_ZBP_1 = ("n", "probe", "scheme", "eps", "chunk", "cores", "seed")

FIELDS: dict[int, dict[str, frozenset[str]]] = {
    1: {"train": frozenset(_TRAIN_1), "model": frozenset(_MODEL_1), "zbp": frozenset(_ZBP_1)},
    2: {"train": frozenset(_TRAIN_1), "model": frozenset(_MODEL_1), "zbp": frozenset(_ZBP_1 + ("impl",))},
    3: {"train": frozenset(_TRAIN_1 + ("step_timeout_s",)), "model": frozenset(_MODEL_1),
        "zbp": frozenset(_ZBP_1 + ("impl",))},
    4: {"train": frozenset(_TRAIN_1 + ("step_timeout_s", "trackers")), "model": frozenset(_MODEL_1),
        "zbp": frozenset(_ZBP_1 + ("impl", "seeding"))},
    5: {"train": frozenset(_TRAIN_1 + ("step_timeout_s", "trackers")), "model": frozenset(_MODEL_1),
        "zbp": frozenset(_ZBP_1 + ("impl", "seeding", "probe_hash"))},
}
"""The fields of TrainConfig ('train'), ModelConfig ('model') and ZBPConfig ('zbp') in each format."""

FORMAT = max(FIELDS)
"""The format this release writes."""


def _add_zbp_impl(config: dict) -> None:
    """1 -> 2: ZBPConfig.impl. Before the fused estimator every ZBP arm ran the reference estimator: 'plain'."""
    model = config.get("model")
    zbp = model.get("zbp") if isinstance(model, dict) else None
    if isinstance(zbp, dict):
        zbp.setdefault("impl", "plain")


def _add_step_timeout(config: dict) -> None:
    """2 -> 3: TrainConfig.step_timeout_s. Before the hang watchdog no step was ever timed out: 0 (off)."""
    config.setdefault("step_timeout_s", 0.0)


def _to_4(config: dict) -> None:
    """3 -> 4: TrainConfig.trackers. Before the tracker seam a run reported to none: (). ZBPConfig.seeding: before
    it the probes were keyed by the micro-batch (its global index, and each row's place in it): 'micro'."""
    config.setdefault("trackers", [])
    model = config.get("model")
    zbp = model.get("zbp") if isinstance(model, dict) else None
    if isinstance(zbp, dict):
        zbp.setdefault("seeding", "micro")


def _to_5(config: dict) -> None:
    """4 -> 5: ZBPConfig.probe_hash. Before it the fused and closed paths drew their probes by hash 1."""
    model = config.get("model")
    zbp = model.get("zbp") if isinstance(model, dict) else None
    if isinstance(zbp, dict):
        zbp.setdefault("probe_hash", 1)


MIGRATIONS = {1: _add_zbp_impl, 2: _add_step_timeout, 3: _to_4, 4: _to_5}
"""format N -> the function that turns a format-N config (in place) into a format-N+1 one."""


def format_of(config: dict) -> int:
    """The format of a config.json: its `format` key, else told by its fields (a bp config without
    step_timeout_s may be 1 or 2; the step 1 -> 2 changes only ZBP configs, so 1 serves)."""
    if "format" in config:
        return config["format"]
    if "step_timeout_s" in config:
        return 3
    zbp = config.get("model", {}).get("zbp") if isinstance(config.get("model"), dict) else None
    return 2 if isinstance(zbp, dict) and "impl" in zbp else 1


def migrate(config: dict) -> dict:
    """A copy of `config` (a config.json of any format) in format FORMAT, with the `format` key; a ConfigError
    for a format this release does not know (a newer release wrote it). A config already in FORMAT is copied at its
    top level only (its nested values are `config`'s own: read them, do not edit them); an older one all the way
    down, since its migration edits nested fields (status validates 10,000 current configs: the deep copy was half
    of TrainConfig.from_dict)."""
    version = format_of(config)
    if not isinstance(version, int) or isinstance(version, bool) or not 1 <= version <= FORMAT:
        newer = isinstance(version, int) and version > FORMAT
        raise ConfigError(f"written in config format {version!r}; this zbpscale reads formats 1 to {FORMAT}",
                          hint="upgrade zbpscale to the release that wrote it" if newer else
                          "restore it, or train in a new run folder")
    config = copy.deepcopy(config) if version < FORMAT else dict(config)
    config.pop("format", None)
    for step in range(version, FORMAT):
        MIGRATIONS[step](config)
    return {"format": FORMAT, **config}


def changed_fields(before: dict, after: dict, prefix: str = "") -> list[str]:
    """`field before -> after` for every field two configs (both in format FORMAT) give differently, nested ones
    dotted (model.zbp.n), in field order."""
    lines = []
    for key in dict.fromkeys([*before, *after]):
        a, b = before.get(key), after.get(key)
        if isinstance(a, dict) and isinstance(b, dict):
            lines += changed_fields(a, b, f"{prefix}{key}.")
        elif a != b:
            lines.append(f"{prefix}{key} {a!r} -> {b!r}")
    return lines
