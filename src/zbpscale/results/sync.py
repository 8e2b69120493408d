"""`zbpscale sync SWEEP`: upload a sweep's offline W&B runs from a machine that has the network.

    zbpscale sync sweeps/ladder.py                  every run's W&B folders not uploaded yet
    zbpscale sync jobs/ladder --only 's1b-*' --dry-run

A trainer without WANDB_API_KEY (a compute node without a network) writes its W&B run offline (train/trackers.py):
one folder per attempt, and per flush, under <run>/wandb/offline-run-*, all with the run's one id. This command
runs W&B's own `wandb sync` on each run's folders, oldest first (W&B appends them to one run), and W&B marks each
folder it uploaded, so running it again sends only what is new. A folder whose attempt was killed before W&B wrote
anything holds no data and is skipped. The key comes from the environment (WANDB_API_KEY) or `wandb login`, never
from the command line; zbpscale never writes it.
"""

from __future__ import annotations

import argparse
import netrc
import os
import signal
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlparse

from zbpscale import signals
from zbpscale.errors import ConfigError, ZbpError
from zbpscale.run.folder import RunFolder
from zbpscale.text import select

HEADER_BYTES = 7
"""A W&B run file holding only its header: the attempt was killed before W&B wrote any record."""


def pending(run_dir: Path) -> tuple[list[Path], int]:
    """(the run's offline W&B folders with data not uploaded yet, oldest first; how many hold no data)."""
    todo, empty = [], 0
    for folder in sorted(RunFolder(run_dir).wandb.glob("offline-run-*")):
        files = list(folder.glob("run-*.wandb"))
        if not any(f.stat().st_size > HEADER_BYTES for f in files):
            empty += 1
        elif not all(f.with_suffix(".wandb.synced").exists() for f in files):
            todo.append(folder)
    return todo, empty


def has_key() -> bool:
    """Whether W&B will find a key here: WANDB_API_KEY, or a `wandb login` for its host in the netrc file it reads
    ($NETRC, else ~/.netrc or ~/_netrc), under the host's name with its port (what `wandb login` writes for a host
    of its own, http://wandb.lab:8080) or without."""
    if os.environ.get("WANDB_API_KEY"):
        return True
    url = urlparse(os.environ.get("WANDB_BASE_URL") or "https://api.wandb.ai")
    hosts = {url.hostname, url.netloc.rpartition("@")[2]} - {None, ""}
    home = Path.home()
    files = [Path(os.environ["NETRC"]).expanduser()] if os.environ.get("NETRC") else [home / ".netrc", home / "_netrc"]
    for name in files:
        try:
            logins = netrc.netrc(name)
        except (OSError, netrc.NetrcParseError):
            continue
        if any(logins.authenticators(host) is not None for host in hosts):
            return True
    return False


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("sweep", help="a sweep file (sweeps/ladder.py) or its folder of runs (jobs/ladder)")
    p.add_argument("--only", metavar="RUNS", help="comma-separated run name patterns, e.g. 's1b-*,*-bp'")
    p.add_argument("--dry-run", action="store_true", help="say what would be uploaded; upload nothing")


def run(args: argparse.Namespace) -> int:
    from zbpscale.jobs.sweep import find_sweeps
    from zbpscale.results.bundle import Bundle

    if Bundle(Path(args.sweep)).summary_json.exists():  # its copies of the runs hold no W&B folders
        raise ConfigError(f"{args.sweep} is a results folder (collect's): W&B's folders stay in the runs' folders",
                          hint="give the sweep file, or its folder of runs (jobs/<sweep>)")
    runs = select([p for _, folder in find_sweeps(args.sweep) if folder.is_dir() for p in sorted(folder.iterdir())
                   if RunFolder(p).config.exists()], args.only)  # a sweep not submitted yet has no folder
    plan = [(p, *pending(p)) for p in runs]
    todo = [(p, folders) for p, folders, _ in plan if folders]
    for p, folders, empty in plan:
        skipped = f", {empty} empty (an attempt killed before W&B wrote it) skipped" if empty else ""
        if folders or empty:
            print(f"{p.name}: {len(folders)} W&B folder(s) to upload{skipped}")
    if not todo:
        print(f"nothing to upload: no offline W&B run waits in {len(runs)} run folder(s)")
        return 0
    if args.dry_run:
        return 0
    if not has_key():
        raise ConfigError("no W&B key here: WANDB_API_KEY is not set and `wandb login` was not run",
                          hint="run `wandb login` (or export WANDB_API_KEY from a secret), then this again")
    env = {k: v for k, v in os.environ.items() if k != "WANDB_MODE"}  # an offline shell's mode would stop the upload
    signal.signal(signal.SIGTERM, signals.unwind)  # `kill`, a scheduler: W&B's upload stops with this command
    failed = []
    for p, folders in todo:
        print(f"{p.name}: uploading {len(folders)} folder(s)", flush=True)
        why = _wandb_sync(folders, env)
        left, _ = pending(p)
        if left:  # what W&B marked is what it uploaded
            failed.append(f"{p.name}: {len(left)} of {len(folders)} folder(s) not uploaded: {why}")
    for line in failed:
        print(line, file=sys.stderr)
    if failed:
        raise ZbpError(f"{len(failed)} of {len(todo)} run(s) not uploaded", hint="check the W&B key and host W&B "
                       "said above, then run this again: what was uploaded is marked and not sent twice")
    print(f"uploaded the W&B runs of {len(todo)} run(s)")
    return 0


def _wandb_sync(folders: list[Path], env: dict) -> str:
    """W&B's `wandb sync` of one run's folders, its lines shown indented as they come (its progress); why it may
    have failed: the last error it said, else its exit status and last line. It exits 0 where the server refused
    every upload (wandb 0.31, a key the server does not take), so the caller reads what it uploaded from its marks,
    not from its exit status."""
    proc = subprocess.Popen([sys.executable, "-m", "wandb", "sync", *map(str, folders)], env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, errors="replace")
    errors, last = [], ""
    try:
        for line in proc.stdout:
            print(f"  {line.rstrip()}", flush=True)
            last = line.strip() or last
            if "error" in line.lower() or "not authenticated" in line.lower():
                errors.append(line.strip())
        code = proc.wait()
    finally:
        if proc.poll() is None:  # interrupted: not left uploading on its own
            proc.terminate()
            proc.wait()
    return errors[-1] if errors else f"wandb sync exited {code}: {last or 'no output'}"
