"""`zbpscale upload results/<tag>`: push a collected bundle to a private Hugging Face dataset repo.

    zbpscale upload results/smoke                               # -> <you>/zbpscale-results, folder smoke/
    zbpscale upload results/ladder --repo my-org/zbp-ladder     # another repo (created private if missing)
    zbpscale upload results/ladder --with-ckpt 's1b-*'          # also the checkpoints of these runs

The token comes only from the environment (`HF_TOKEN`) or from `hf auth login` (huggingface_hub's stored
token); it is never a command-line argument, and this module never prints, logs or writes it. A repo is
created private when missing; an existing repo must be private, or the upload is refused. Checkpoints in the
bundle (`zbpscale collect --with-ckpt`) are left out unless their runs are named with --with-ckpt.
`upload_bundle` takes any object with HfApi's `whoami`, `repo_exists`, `repo_info`, `create_repo` and
`create_commit`, so tests can hand it a fake hub.
"""

from __future__ import annotations

import argparse
import contextlib
import os
from dataclasses import dataclass
from pathlib import Path

from zbpscale.argtypes import value_or_positional
from zbpscale.errors import ConfigError, ZbpError
from zbpscale.results.bundle import Bundle
from zbpscale.tables import named
from zbpscale.text import matches, patterns, shown_path

REPO_TYPE = "dataset"
DEFAULT_REPO_NAME = "zbpscale-results"


class UploadError(ZbpError):
    """The hub refused or could not be reached; the message says what to do."""


@dataclass(frozen=True, kw_only=True)
class Uploaded:
    """What `upload_bundle` sent."""

    repo_id: str
    """The repo, owner/name."""
    created: bool
    """Whether the repo was created (private) by this upload."""
    paths: tuple[str, ...]
    """Paths in the repo of the files sent (the hub skips those that did not change)."""
    bytes: int
    """Their total size."""


def get_token() -> str:
    """The token from HF_TOKEN or `hf auth login`; a one-line error without one."""
    from huggingface_hub import get_token as hub_token

    token = hub_token()
    if not token:
        raise UploadError("no Hugging Face token", hint="run `hf auth login`, or set HF_TOKEN in the environment "
                          "(never on the command line)")
    return token


def bundle_files(bundle: Path, with_ckpt: str | None) -> list[Path]:
    """The bundle's files to send: everything but temporary files, and checkpoints only of the runs named."""
    b = Bundle(bundle)
    b.require()
    pats = patterns(with_ckpt)
    runs = [b.run(p.name) for p in sorted(b.runs.iterdir()) if p.is_dir()] if b.runs.is_dir() else []
    ckpts = {path: run.name for run in runs for _, path in run.list_checkpoints()}
    files, ckpt_runs = [], set()
    for path in sorted(p for p in b.path.rglob("*") if p.is_file()):
        if any(part.startswith(".") for part in path.relative_to(b.path).parts):
            continue
        if path in ckpts:
            if not matches(ckpts[path], pats):
                continue
            ckpt_runs.add(ckpts[path])
        files.append(path)
    missing = [p for p in pats if not any(matches(r, [p]) for r in ckpt_runs)]
    if missing:
        raise ConfigError(f"--with-ckpt {','.join(missing)}: no checkpoint of such a run in {bundle}",
                          hint=f"collect them first: zbpscale collect SWEEP --out {shown_path(bundle)} --with-ckpt")
    return files


def _one_line(text: str, token: str | None) -> str:
    """The error on one line, at most 300 characters, with the token (should a server echo it) blanked."""
    line = " ".join(part.strip() for part in text.splitlines() if part.strip())[:300]
    return line.replace(token, "***") if token else line


def upload_bundle(api, bundle: str | Path, *, repo_id: str | None = None, with_ckpt: str | None = None,
                  token: str | None = None, log=print) -> Uploaded:
    """Send `bundle` to folder <tag>/ of a private dataset repo through `api` (an HfApi or a fake of it).
    `token` is only used to scrub it from error messages, should a server ever echo it."""
    from huggingface_hub import CommitOperationAdd
    from huggingface_hub.errors import HfHubHTTPError, HFValidationError

    bundle = Path(bundle)
    files = bundle_files(bundle, with_ckpt)
    tag = bundle.resolve().name
    try:
        user = api.whoami()["name"]  # first: a refused token is reported as such, not as a missing repo
        repo_id = repo_id or f"{user}/{DEFAULT_REPO_NAME}"
        created = not api.repo_exists(repo_id, repo_type=REPO_TYPE)
        if created:
            api.create_repo(repo_id, repo_type=REPO_TYPE, private=True, exist_ok=False)
        if api.repo_info(repo_id, repo_type=REPO_TYPE).private is not True:  # checked after creating, too
            raise UploadError(f"the {REPO_TYPE} repo {repo_id} is public (or its visibility is unknown): refusing "
                              "to upload to it", hint="make it private on the Hub, or name another --repo")
        paths = tuple(f"{tag}/{p.relative_to(bundle).as_posix()}" for p in files)
        there = set() if created else _held(api, repo_id, tag)
        operations = [CommitOperationAdd(path_in_repo=path, path_or_fileobj=str(p)) for path, p in zip(paths, files)]
        api.create_commit(repo_id, operations, commit_message=f"zbpscale results: {tag} ({len(files)} files)",
                          repo_type=REPO_TYPE)
    except HfHubHTTPError as err:
        status = getattr(getattr(err, "response", None), "status_code", None)
        hint = {401: "the token was refused: `hf auth login --force`, or set another HF_TOKEN",
                403: "the token cannot write there: use a write token, or a repo in your own namespace"}.get(
            status, "check the repo name and your network")
        raise UploadError(f"upload to {repo_id or 'the Hub'} failed: {_one_line(str(err), token)}", hint=hint) from None
    except HFValidationError as err:  # a --repo the Hub's own rules refuse
        raise UploadError(f"--repo {repo_id!r} is not a repo name: {_one_line(str(err), token)}",
                          hint="give --repo as owner/name, e.g. my-org/zbp-results") from None
    except _unreachable() as err:  # no network, a dead proxy, a name that does not resolve
        raise UploadError(f"upload to {repo_id or 'the Hub'} failed: the Hub cannot be reached "
                          f"({type(err).__name__}: {_one_line(str(err), token)})",
                          hint="check your network (a compute node may have none: upload from a login node)") from None
    size = sum(p.stat().st_size for p in files)
    log(f"uploaded {len(files)} files ({size / 1e6:.1f} MB) of {bundle} to the private {REPO_TYPE} repo {repo_id}, "
        f"folder {tag}/" + (" (repo created)" if created else ""))
    stale = sorted(there - set(paths))
    if stale:  # an earlier upload's: a run collect has dropped since, or another study's bundle of the same name
        log(f"note: {tag}/ in {repo_id} also holds {len(stale)} file(s) this bundle does not, left as they are: "
            f"{named([path.removeprefix(tag + '/') for path in stale], 5)} (delete them on the Hub if they are "
            f"stale, or upload this bundle under another folder name)")
    return Uploaded(repo_id=repo_id, created=created, paths=paths, bytes=size)


def _held(api, repo_id: str, tag: str) -> set[str]:
    """The files the repo holds under `tag`/ (none where the folder is not there)."""
    from huggingface_hub.errors import EntryNotFoundError
    from huggingface_hub.hf_api import RepoFile

    try:
        return {f.path for f in api.list_repo_tree(repo_id, path_in_repo=tag, recursive=True, repo_type=REPO_TYPE)
                if isinstance(f, RepoFile)}  # files, not folders
    except EntryNotFoundError:
        return set()


def _unreachable() -> tuple[type[BaseException], ...]:
    """The errors of a request that never reached the Hub, from whichever HTTP client huggingface_hub uses."""
    import importlib

    found: list[type[BaseException]] = [OSError]  # requests' errors are OSErrors
    for module in ("httpx", "httpx2"):
        with contextlib.suppress(ImportError):
            found.append(importlib.import_module(module).TransportError)
    return tuple(found)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("bundle", nargs="?", help="a collected results folder, e.g. results/smoke")
    p.add_argument("--repo", help=f"owner/name of the dataset repo (default: <you>/{DEFAULT_REPO_NAME})")
    p.add_argument("--with-ckpt", nargs="?", const="*", metavar="RUNS",
                   help="also send the checkpoints in the bundle: of every run, or of the runs matching these "
                        "comma-separated patterns (e.g. 's1b-*')")


def run(args: argparse.Namespace) -> None:
    value_or_positional(args, "bundle", "with_ckpt", "*", needs="give a collected results folder: zbpscale upload "
                                                                "results/ladder [--with-ckpt [RUNS]]")
    bundle_files(Path(args.bundle), args.with_ckpt)  # a wrong folder is reported before any token check
    if os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes", "on"):
        raise UploadError("HF_HUB_OFFLINE is set: the upload needs the Hub", hint="unset HF_HUB_OFFLINE")
    token = get_token()
    from huggingface_hub import HfApi

    upload_bundle(HfApi(token=token), args.bundle, repo_id=args.repo, with_ckpt=args.with_ckpt, token=token)

