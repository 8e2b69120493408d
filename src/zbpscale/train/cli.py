"""`python -m zbpscale.train`: one run by hand, in its folder (train/__main__.py runs `main`).

    python -m zbpscale.train --run-dir jobs/try/tiny-bp --size tiny --arm bp --data data/embedded --steps 200
    torchrun --nproc-per-node 8 -m zbpscale.train --run-dir ... (same flags)
    python -m zbpscale.train --run-dir jobs/try/tiny-bp      # continue a run from its folder
    python -m zbpscale.train --model configs/model/m124.yaml --train configs/train/zbp_n16.yaml --run-dir ...

The flags build a TrainConfig (or repeat an existing run's config.json); `train` does the rest. YAML files spell the
same fields: --model a shape's (as --size's preset), --train the training fields and the arm's zbp (flags given
beside them win).
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys

from zbpscale.argtypes import folder_path
from zbpscale.data import manifest_path
from zbpscale.errors import ConfigError, LeaseLost, ZbpError, report
from zbpscale.run.config import TrainConfig
from zbpscale.run.folder import RunFolder
from zbpscale.tables import named
from zbpscale.text import HelpFormatter, did_you_mean
from zbpscale.train.exits import EXIT_DIVERGED, EXIT_LEASE_LOST, EXIT_REQUEUE, EXIT_USAGE, leave
from zbpscale.train.loop import TrainingDiverged, train

OWN_FLAGS = {"steps": "--steps N", "data_dir": "--data FOLDER", "model": "--size NAME or --model FILE"}
"""The config's fields that --set does not take: each has a flag of its own."""


def _parse(argv: list[str] | None):
    import argparse

    p = argparse.ArgumentParser(
        prog="python -m zbpscale.train", formatter_class=HelpFormatter,
        description="Train one run in its folder, or continue it from its last checkpoint. Sweeps are submitted "
                    "with `zbpscale submit`; this is one run by hand.",
        epilog="""examples:
  python -m zbpscale.train --run-dir jobs/try/tiny-bp --size tiny --arm bp \\
      --data data/embedded --steps 200
  python -m zbpscale.train --run-dir jobs/try/tiny-bp      continue it
  torchrun --nproc-per-node 8 -m zbpscale.train --run-dir jobs/try/s60-bp \\
      --size s60 --data data/fineweb --steps 4600
  python -m zbpscale.train --run-dir jobs/try/m124-zbp_n16 \\
      --model configs/model/m124.yaml --train configs/train/zbp_n16.yaml

A run's config.json fixes every setting: the command that made it, or --run-dir alone, continues it. Ctrl-C (or
SIGUSR2, SIGTERM) checkpoints at the next step and exits 75; run the same command to continue.
exit status: 0 complete, 75 checkpointed (run again to continue), 2 a mistake, 3 diverged, 5 another trainer
took the run over while this one was paused""")
    p.add_argument("--run-dir", required=True, type=folder_path,
                   help="the run folder (created; resumed when it has a config)")
    p.add_argument("--size", help="model size preset (see `zbpscale sizes`)")
    p.add_argument("--model", metavar="YAML", help="a model shape's file instead of --size (its keys: ModelConfig's "
                                                   "fields, e.g. n_layer: 12)")
    p.add_argument("--train", metavar="YAML", help="a file of training fields (TrainConfig's, and zbp: the arm's "
                                                   "estimator, e.g. zbp: {n: 16})")
    p.add_argument("--arm", help="bp (the default), zbp_n16, zbp_n64, zbp_n4_fwd, ...")
    p.add_argument("--data", help="prepared data folder")
    p.add_argument("--steps", type=int, help="optimizer steps")
    p.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE",
                   help="any TrainConfig field, e.g. --set global_batch=32 --set lr=1e-3 (repeatable)")
    return p.parse_args(argv)


def config_from_args(args) -> TrainConfig:
    """A TrainConfig from the command line, or the run folder's config.json for an existing run (whose settings
    flags may repeat, never change)."""
    for item in args.set:  # before anything else says a flag is missing ("missing --steps" of --set steps=5)
        key, sep, _ = item.partition("=")
        if sep and key in OWN_FLAGS:
            raise ConfigError(f"--set {item!r}: {key} has its own flag", hint=f"give {OWN_FLAGS[key]}")
    folder = RunFolder(args.run_dir)
    given = [f"--{k} {getattr(args, k)}" for k in ("size", "model", "train", "arm", "data", "steps")
             if getattr(args, k) is not None]
    given += [f"--set {item}" for item in args.set]
    saved = folder.read_config()
    if args.data is not None:  # kept absolute, as a sweep's runs keep it: a resume from another folder reads the same
        args.data = os.path.abspath(args.data)  # data (a relative path was read from wherever the resume ran)
    if saved is not None:  # an existing run: its config.json fixes every setting (resume is bit for bit)
        cfg = TrainConfig.from_dict(saved, source=str(folder.config))
        if args.data is not None and os.path.realpath(args.data) == os.path.realpath(cfg.data_dir):
            args.data = cfg.data_dir  # the same folder, spelled another way (relative, ./, absolute, a link)
        if not given:
            return cfg
        have, want = cfg.to_dict(), _asked(args, cfg, _train_file(args)).to_dict()
        if want == have:  # the command that made it, run again: continue
            return cfg
        state = f"complete after {cfg.steps} steps" if folder.complete.exists() else f"{cfg.steps} steps planned"
        changed = sorted(k for k in have if have[k] != want.get(k))
        raise ConfigError(f"{args.run_dir} is an existing run ({state}): its config.json fixes every setting, and "
                          f"{' '.join(given)} would change {', '.join(changed)}",
                          hint=f"continue it as it is with --run-dir {args.run_dir} alone (or the command that "
                          "made it); to train longer or differently, start a new run folder")
    if not given:
        raise ConfigError(f"{folder.config} does not exist",
                          hint="give --size (or --model), --arm, --data and --steps (or --train) for a new run")
    if runs := [p.name for p in RunFolder.all_in(folder.path)]:  # a typo of the sweep's folder for a run's in it
        raise ConfigError(f"{args.run_dir} holds runs ({named(runs)}), not a run of its own",
                          hint=f"give the new run a folder of its own: --run-dir {os.path.join(args.run_dir, 'NAME')}")
    if manifest_path(folder.path).exists():
        raise ConfigError(f"{args.run_dir} is a prepared data folder, not a run's",
                          hint=f"give the run a folder of its own, and --data {args.run_dir}")
    if args.size and args.model:
        raise ConfigError("--size and --model both give the model's shape", hint="give one of them")
    trained = _train_file(args)
    missing = [f"--{k}" for k, field in (("size", None), ("data", "data_dir"), ("steps", "steps"))
               if getattr(args, k) is None and (k != "size" or not args.model) and field not in trained]
    if missing:
        raise ConfigError(f"missing {', '.join(missing)} for a new run"
                          + (" (or in the --train file)" if args.train and missing != ["--size"] else ""))
    cfg = _asked(args, None, trained)
    return dataclasses.replace(cfg, data_dir=os.path.abspath(cfg.data_dir))  # a --train file's too


def _train_file(args) -> dict:
    """The fields of the --train file ({} without one)."""
    from zbpscale.run.config import train_fields_from_yaml

    return train_fields_from_yaml(args.train) if args.train else {}


def _asked(args, base: TrainConfig | None, trained: dict) -> TrainConfig:
    """The config the flags ask for: on top of `base` (an existing run's) where a flag is absent, else new. The
    --train file's fields come first, the flags on top; the model is --size's preset or --model's shape, with the
    arm's estimator (--arm, else the --train file's zbp); `trained`: the --train file's fields (_train_file)."""
    from zbpscale.run.config import model_config, shape_from_yaml
    from zbpscale.run.formats import FORMAT
    from zbpscale.zbp import arm_zbp_config

    fields = {f.name: f for f in dataclasses.fields(TrainConfig)}
    overrides = {}
    for item in args.set:
        key, sep, value = item.partition("=")
        if not sep or key not in fields or key in OWN_FLAGS:  # OWN_FLAGS: said by config_from_args
            settable = [k for k in fields if k not in OWN_FLAGS]
            raise ConfigError(f"--set {item!r}: expected FIELD=VALUE with FIELD one of {', '.join(settable)}",
                              hint=did_you_mean(key, settable, say=lambda c: f"--set {c}={value}") if sep else None)
        overrides[key] = parse_field_value(key, value, fields[key].type)
    if args.arm is not None and trained.get("zbp") is not None:
        raise ConfigError(f"--arm {args.arm} and the zbp of {args.train} both give the arm", hint="give one of them")
    shape = model_config(args.size) if args.size else shape_from_yaml(args.model) if args.model else None
    if shape is not None or trained:  # a new shape or a training file: the config.json they spell, checked as one
        if shape is None:
            shape = dataclasses.replace(base.model, zbp=None)
        zbp = arm_zbp_config(args.arm) if args.arm is not None else None
        spelled = {"format": FORMAT, **({} if base is None else {k: v for k, v in base.to_dict().items()
                                                                 if k not in ("format", "model")}),
                   **{k: v for k, v in trained.items() if k != "zbp"},
                   "model": {**dataclasses.asdict(shape), "zbp": dataclasses.asdict(zbp) if zbp else
                             trained.get("zbp")}}
        spelled.setdefault("data_dir", args.data)
        spelled.setdefault("steps", args.steps)
        base = TrainConfig.from_dict(spelled, source=args.train or args.model or "the flags")
    model = base.model if args.arm is None else dataclasses.replace(base.model, zbp=arm_zbp_config(args.arm))
    return dataclasses.replace(base, model=model, data_dir=args.data or base.data_dir, steps=args.steps or base.steps,
                               **overrides)


_TYPES = {"int": int, "float": (int, float), "str": str, "bool": bool, "None": type(None)}


def parse_field_value(name: str, text: str, annotation: str):
    """A `--set NAME=TEXT` value (JSON, or a bare string) checked against the field's annotation, e.g.
    'int', 'bool | None', 'tuple[float, float]'; a one-line ConfigError naming the field and the type."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError:
        value = text
    for option in (part.strip() for part in annotation.split("|")):
        if option.startswith("tuple[") and option.endswith(", ...]"):  # any length: a JSON list or a,b,c
            kind = _TYPES[option[6:-6].strip()]
            found = value.split(",") if isinstance(value, str) else value
            if isinstance(found, list) and all(isinstance(v, kind) and not isinstance(v, bool) for v in found):
                return tuple(found)
        elif option.startswith("tuple["):
            items = [t.strip() for t in option[6:-1].split(",")]
            if isinstance(value, list) and len(value) == len(items) and all(
                    isinstance(v, _TYPES[t]) and not isinstance(v, bool) for v, t in zip(value, items)):
                return tuple(value)
        elif isinstance(value, _TYPES[option]) and (option == "bool" or not isinstance(value, bool)):
            return float(value) if option == "float" else value
    raise ConfigError(f"--set {name}={text}: {name} takes {annotation}, not {type(value).__name__}",
                      hint=f"e.g. --set {name}={_example(annotation)}")


def _example(annotation: str) -> str:
    first = annotation.split("|")[0].strip()
    if first.endswith(", ...]"):
        return "tensorboard,wandb" if first == "tuple[str, ...]" else "[1,2]"
    if first.startswith("tuple["):
        return "[" + ",".join("0.9" for _ in first[6:-1].split(",")) + "]"
    return {"int": "8", "float": "0.001", "str": "cpu", "bool": "true"}.get(first, first)


def main(argv: list[str] | None = None) -> int:
    try:
        args = _parse(argv)
        status = train(config_from_args(args), args.run_dir)
    except TrainingDiverged as err:
        report(err)
        return EXIT_DIVERGED
    except LeaseLost as err:  # the run folder is another trainer's now: nothing more of this process may reach it
        report(err)
        leave(EXIT_LEASE_LOST)
    except ZbpError as err:
        report(err)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("interrupted (Ctrl-C twice): stopped without a checkpoint; run again to continue from the last one",
              file=sys.stderr)
        return 130
    return EXIT_REQUEUE if status == "checkpointed" else 0

