"""A results bundle: where every file of a collected results folder lives, and its summary's I/O. Torch-free.

`Bundle(path).<file>` is the only way zbpscale names a file of a bundle (collect writes them, plot and upload
read them); a run's copy in it has the run folder's own layout, so `bundle.run(name)` is a `RunFolder`.

    <bundle>/manifest.json     what was collected, from where, when, and every file with its size (and sha256)
             summary.csv       one row per run (results/summary.py's RunSummary)
             summary.json      the same rows, with the sweep's name and, for a sweep that tunes its lr, the sizes
                               its lr law is fitted on and those it is checked at (`tune`)
             runs/<run>/       the run's small files (RunFolder.RECORDS) and, with --with-ckpt, its latest checkpoint
             table.md          the per-run table, the fits and tests (plot)
             claims.md         the fits and tests in words, for a README to quote (plot)
             figures/          loss curves, gap vs scale, c, rho_k as PNG and PDF (plot)
             report.html       the study in one self-contained page (report)
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path

from zbpscale.errors import ConfigError
from zbpscale.files import atomic_write, read_json
from zbpscale.results.summary import RunSummary
from zbpscale.run.folder import RunFolder

FORMAT, VERSION = "zbpscale-results", 2
"""Version 2 names a run's state `state` (version 1: `status`); both load."""


@dataclass(frozen=True)
class Bundle:
    """Where every file of one results bundle lives."""

    path: Path

    def __post_init__(self) -> None:
        object.__setattr__(self, "path", Path(self.path))

    manifest = property(lambda self: self.path / "manifest.json")
    summary_json = property(lambda self: self.path / "summary.json")
    summary_csv = property(lambda self: self.path / "summary.csv")
    runs = property(lambda self: self.path / "runs")
    table = property(lambda self: self.path / "table.md")
    claims = property(lambda self: self.path / "claims.md")
    figures = property(lambda self: self.path / "figures")
    report = property(lambda self: self.path / "report.html")

    def run(self, name: str) -> RunFolder:
        """The copy of run `name` in the bundle (a run folder's layout)."""
        return RunFolder(self.runs / name)

    def read_manifest(self) -> dict | None:
        """The manifest, None when there is none (not a collected bundle, or a notebook's own folder)."""
        return read_json(self.manifest) or None

    def read_summary(self) -> list[RunSummary]:
        """The rows of summary.json; a ConfigError if the folder is not a collected bundle, or its summary.json is not
        one collect wrote (cut or garbled)."""
        summary = self._summary()
        try:
            return [summary_row(row) for row in summary["runs"]]
        except ValueError as err:
            raise self._garbled(f"its runs: {err}") from None
        except (KeyError, TypeError) as err:
            raise self._garbled(f"its runs: {type(err).__name__}") from None

    def read_tune(self) -> dict | None:
        """summary.json's `tune` ({"sizes": the sizes the sweep fitted its lr law on, "check": those it checked it
        at, "near": its near-best margin (absent before 2026-12-06), "grid": the names of the grid runs its sweep file
        planned when collected (absent before 2026-12-06, and in a bundle collected from a folder)}); None for a
        sweep that does not tune, or a bundle collected before 2026-12-05."""
        tune = self._summary().get("tune")
        return tune if isinstance(tune, dict) else None

    def _summary(self) -> dict:
        self.require(self.summary_json)
        try:
            summary = json.loads(self.summary_json.read_bytes())
        except ValueError as err:  # torn, edited, not UTF-8
            raise self._garbled(str(err).splitlines()[0]) from None
        if not isinstance(summary, dict):
            raise self._garbled(f"a {type(summary).__name__}, not an object")
        return summary

    def _garbled(self, why: str) -> ConfigError:
        return ConfigError(f"{self.summary_json} is not a summary collect wrote ({why})",
                           hint="collect the sweep again into this folder: it writes the summary anew from the runs")

    def require(self, file: Path | None = None) -> None:
        """A ConfigError if the folder is not a collected bundle: no manifest (or no `file`)."""
        file = file or self.manifest
        if file.is_file():
            return
        if self.path.is_file():
            raise ConfigError(f"{self.path} is a file, not a collected results folder",
                              hint=f"collect its sweep first: zbpscale collect {self.path}, then give the folder "
                                   "it writes (results/<sweep>)" if self.path.suffix == ".py" else
                              f"give the folder: {self.path.parent}")
        if RunFolder.is_run(self.path) and self.path.parent.name == "runs" and \
                Bundle(self.path.parent.parent).manifest.is_file():  # a run's copy in a bundle
            raise ConfigError(f"{self.path} is a run's copy in the collected results folder {self.path.parent.parent}",
                              hint=f"give the results folder: {self.path.parent.parent}")
        if RunFolder.is_run(self.path):  # one run: its sweep's folder is what collect takes
            raise ConfigError(f"{self.path} is a run's folder, not a collected results folder",
                              hint=f"collect its sweep first: zbpscale collect {self.path.parent} (into "
                                   f"{default_out(self.path.parent)}), then give that folder")
        if self.path.name == "runs" and Bundle(self.path.parent).manifest.is_file():  # the bundle's own copies
            raise ConfigError(f"{self.path} is the runs folder of the collected results folder {self.path.parent}",
                              hint=f"give the results folder: {self.path.parent}")
        if not self.path.exists():
            raise ConfigError(f"{self.path} does not exist", hint="give a collected results folder (results/<sweep>)")
        if any(RunFolder.is_run(p) for p in _folders(self.path)):
            raise ConfigError(f"{self.path} holds runs, not a collected results folder",
                              hint=f"collect them first: zbpscale collect {self.path} (into "
                                   f"{default_out(self.path)}), then give that folder")
        if (holder := holding(self.path)) is not None:  # its figures/, say
            raise inside(self.path, holder)
        raise ConfigError(f"{self.path} is not a collected results folder (no {file.name})",
                          hint=f"make one with: zbpscale collect SWEEP --out {self.path}")


def holding(path: Path) -> Path | None:
    """The collected results folder `path` lies in (its runs/, a run's copy there, its figures/), None if none: where
    every command that takes a bundle, or refuses one, points a path inside one."""
    path = Path(path)
    return next((p for p in (path.parent, path.parent.parent) if p != path and Bundle(p).manifest.is_file()), None)


def inside(path: Path, holder: Path) -> ConfigError:
    """The one-line error of a path inside the collected results folder `holder`, given where the folder is asked."""
    return ConfigError(f"{path} is inside the collected results folder {holder}",
                       hint=f"give the results folder: {holder}")


def _folders(path: Path) -> list[Path]:
    return [p for p in path.iterdir() if p.is_dir()] if path.is_dir() else []


def default_out(folder: Path) -> Path:
    """Where a sweep's bundle goes by default: results/<sweep> beside the jobs folder that holds its runs
    (`folder`: jobs/<sweep>), so that the project folder's jobs/ and results/ sit side by side wherever collect is
    run from, as the runs do."""
    folder = Path(folder).absolute()
    return folder.parent.parent / "results" / folder.name


def summary_row(row: dict) -> RunSummary:
    """A RunSummary from a row of summary.json, of this version or an older one (missing or null fields are None,
    but those of a type without None and no default, which every release wrote: a run's name, size, arm, state,
    seed, steps, tokens, ...); a ValueError naming the field that is missing, null where it may not be, or not of
    its type (a hand edit: "8.73" for a loss), as every reader of the rows would fail on it further on."""
    row = dict(row)
    if "state" not in row and "status" in row:  # version 1
        row["state"] = row.pop("status")
    known = {f.name: f for f in dataclasses.fields(RunSummary)}
    for name in ("run", "size", "arm", "state"):
        if not isinstance(row.get(name), str):
            who = f"run {row['run']}: " if isinstance(row.get("run"), str) else "a run: "
            raise ValueError(who + (f"no {name}" if name not in row else f"its {name} {row[name]!r} is not a name"))
    for name, f in known.items():  # every release wrote these with a value: readers sort and count them
        if f.default is dataclasses.MISSING and "None" not in f.type.split(" | ") and row.get(name) is None:
            raise ValueError(f"run {row['run']}: " + (f"no {name}" if name not in row else f"{name} is null"))
    for name, value in row.items():
        if name in known and not _of_type(value, known[name].type):
            raise ValueError(f"run {row['run']}: {name} {value!r} is not {known[name].type}")
    values = {name: row.get(name, None if f.default is dataclasses.MISSING else f.default) for name, f in known.items()}
    return RunSummary(**values)


_TYPES = {"str": (str,), "State": (str,), "bool": (bool,), "int": (int,), "float": (int, float), "None": ()}


def _of_type(value, annotation: str) -> bool:
    """Whether a value read from JSON is of a RunSummary field's type ('float | None': a number), or null (a field
    an older release wrote so, read as not known)."""
    if value is None:
        return True
    names = annotation.split(" | ")
    kinds = tuple(t for n in names for t in _TYPES[n])
    return isinstance(value, kinds) and (bool in kinds or not isinstance(value, bool))


def write_if_changed(path: Path, data: bytes) -> bool:
    """Write `data` atomically unless `path` holds it already (an unchanged sweep gives a byte-identical bundle)."""
    if path.exists() and path.read_bytes() == data:
        return False
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, data)
    return True

