"""The example sweeps, shipped with the package, and `zbpscale init [DIR]`, which makes a study folder of them.

    smoke.py        the embedded default: tiny x {bp, zbp_n4} on CPU, about 40 s on 2 idle cores
    mini_ladder.py  the paper's figure in miniature on CPU (micro / tiny / mini x 3 arms x 3 seeds)
    ladder.py       the paper's ladder, s60 -> s1b x 3 arms x 3 seeds, on 8-GPU nodes

A clone's `sweeps/` holds links to these files. A study kept outside the clone starts with

    zbpscale init ~/study       # ~/study/sweeps/{smoke,mini_ladder,ladder}.py, to edit and submit there

A sweep's relative paths (jobs/, data/) start at the folder that holds its sweeps/, so the study's runs, data and
results stay in it. A file already there is kept, never overwritten. `--configs` also writes the presets' shapes and
the arms' training fields as YAML (configs/model/<size>.yaml, configs/train/<arm>.yaml), the layout of the study
this grew out of: `python -m zbpscale.train --model configs/model/s124.yaml --train configs/train/zbp_n16.yaml`, or
a sweep's `Size(name=..., model="configs/model/s124.yaml")` once edited into a shape of your own.
"""

from __future__ import annotations

import argparse
from importlib import resources
from pathlib import Path

from zbpscale.errors import ConfigError

NAMES = ("smoke", "mini_ladder", "ladder")
"""The example sweeps, smallest first."""


def example(name: str) -> str:
    """The text of an example sweep file."""
    return resources.files(__name__).joinpath(f"{name}.py").read_text()


def init(folder: Path) -> tuple[list[Path], list[Path]]:
    """Write the example sweeps into `folder`/sweeps (made if need be); (written, kept: already there)."""
    written, kept = [], []
    for name in NAMES:
        (written if _write_new(Path(folder) / "sweeps" / f"{name}.py", example(name)) else kept).append(
            Path(folder) / "sweeps" / f"{name}.py")
    return written, kept


def _write_new(path: Path, text: str) -> bool:
    """Write a new file at `path` (its folders made); False where something is there already, a link too (even one
    to nothing: it is not written through, out of the study folder); a ConfigError for a folder it cannot make."""
    if path.exists() or path.is_symlink():
        return False
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        there = next((p for p in (path.parent, *path.parent.parents) if p.is_file()), None)
        raise ConfigError(f"cannot make {path.parent}: {there} is a file" if there else
                          f"cannot make {path.parent}: {err.strerror or err}",
                          hint="give a folder you can write: zbpscale init DIR") from None
    with open(path, "x") as out:  # exclusive: never through a link made meanwhile
        out.write(text)
    return True


ARMS = ("bp", "zbp_n16", "zbp_n64")
"""The arms `init --configs` writes a training file for."""


def config_files() -> dict[str, str]:
    """{relative path: YAML text} of the presets' shapes and the arms' training fields (`init --configs`); each
    file spells the dataclasses' fields as config.json does (run/config.py reads them back)."""
    import dataclasses

    import yaml

    from zbpscale.run.config import SIZES, TrainConfig
    from zbpscale.zbp import arm_zbp_config

    files = {}
    for name, shape in SIZES.items():
        fields = {k: v for k, v in dataclasses.asdict(shape).items() if k != "zbp"}
        files[f"configs/model/{name}.yaml"] = (f"# the {name} preset's shape (zbpscale sizes); any ModelConfig field "
                                               "but zbp\n" + yaml.safe_dump(fields, sort_keys=False))
    defaults = {f.name: f.default for f in dataclasses.fields(TrainConfig)
                if f.default is not dataclasses.MISSING and f.name not in ("model", "data_dir", "steps")}
    for arm in ARMS:
        zbp = arm_zbp_config(arm)
        fields = {"zbp": dataclasses.asdict(zbp) if zbp else None,
                  **{k: list(v) if isinstance(v, tuple) else v for k, v in defaults.items()}}
        files[f"configs/train/{arm}.yaml"] = (f"# the {arm} arm: zbp, its estimator, and TrainConfig's fields "
                                              "(defaults; data_dir, steps: here or as flags)\n"
                                              + yaml.safe_dump(fields, sort_keys=False))
    return files


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("folder", nargs="?", default=".", help="the study folder (default: this one)")
    p.add_argument("--configs", action="store_true", help="also write configs/model/<size>.yaml for each preset and "
                                                          "configs/train/<arm>.yaml for bp, zbp_n16, zbp_n64")


def write_configs(folder: Path) -> tuple[list[Path], list[Path]]:
    """`config_files()` into `folder` (a file already there is kept); (written, kept)."""
    written, kept = [], []
    for relative, text in config_files().items():
        (written if _write_new(Path(folder) / relative, text) else kept).append(Path(folder) / relative)
    return written, kept


def run(args: argparse.Namespace) -> int:
    from zbpscale.text import shown_path

    written, kept = init(Path(args.folder))
    if args.configs:
        more = write_configs(Path(args.folder))
        written, kept = written + more[0], kept + more[1]
    for path in written:
        print(f"wrote {shown_path(path)}")
    for path in kept:
        print(f"kept {shown_path(path)} (already there: not overwritten)")
    folder = shown_path(Path(args.folder))  # a path with a space quoted, pasted as it is printed
    where = "" if Path(args.folder).resolve() == Path.cwd() else f"cd {folder} && "
    print(f"next: {where}python -m zbpscale.submit sweeps/smoke.py --wait   # about 40 s on CPU")
    return 0
