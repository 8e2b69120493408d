"""The example sweeps, shipped with the package, and `zbpscale init [DIR]`, which makes a study folder of them.

    smoke.py        the embedded default: tiny x {bp, zbp_n4} on CPU, about 40 s on 2 idle cores
    mini_ladder.py  the paper's figure in miniature on CPU (micro / tiny / mini x 3 arms x 3 seeds)
    ladder.py       the paper's ladder, s60 -> s1b x 3 arms x 3 seeds, on 8-GPU nodes

A clone's `sweeps/` holds links to these files. A study kept outside the clone starts with

    zbpscale init ~/study       # ~/study/sweeps/{smoke,mini_ladder,ladder}.py, to edit and submit there

A sweep's relative paths (jobs/, data/) start at the folder that holds its sweeps/, so the study's runs, data and
results stay in it. A file already there is kept, never overwritten.
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
    sweeps = Path(folder) / "sweeps"
    try:
        sweeps.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise ConfigError(f"cannot make {sweeps}: {err.strerror or err}",
                          hint="give a folder you can write: zbpscale init DIR") from None
    written, kept = [], []
    for name in NAMES:
        path = sweeps / f"{name}.py"
        if path.exists():
            kept.append(path)
            continue
        path.write_text(example(name))
        written.append(path)
    return written, kept


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("folder", nargs="?", default=".", help="the study folder (default: this one)")


def run(args: argparse.Namespace) -> int:
    from zbpscale.text import shown_path

    written, kept = init(Path(args.folder))
    for path in written:
        print(f"wrote {shown_path(path)}")
    for path in kept:
        print(f"kept {shown_path(path)} (already there: not overwritten)")
    where = "" if Path(args.folder).resolve() == Path.cwd() else f"cd {shown_path(Path(args.folder))} && "
    print(f"next: {where}python -m zbpscale.submit sweeps/smoke.py --wait   # about 40 s on CPU")
    return 0
