"""A results bundle made fit for a repository: its small files, with this machine's paths made relative.

    python tools/publish_bundle.py results/mini_ladder docs/mini_ladder --root .
    zbpscale plot docs/mini_ladder        # table.md, claims.md and figures/ from the published copy

A bundle's run files name where they were made: config.json's data_dir, the start record's config, the log paths
of attempts.jsonl (absolute paths of the project folder on the machine that trained). This copies the bundle's
manifest, summaries and runs/ (no checkpoint) into OUT, replaces the absolute project folder (`--root`) in every
text file by a path relative to it (`/home/me/study/data/sotu` -> `data/sotu`), refuses to finish while another
absolute path of the machine is left (naming the file), and writes the manifest's file list again for the files
as published (sizes, sha256). Figures and table.md are left to `zbpscale plot OUT`, so that what a README quotes
is made from the published copy itself.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import sys
from pathlib import Path

from zbpscale.results.bundle import Bundle
from zbpscale.results.collect import file_entry

TEXT = (".json", ".jsonl", ".csv", ".md", ".log")
LEFT = re.compile(r'"(/(?:home|root|work|tmp|scratch|users?|mnt|data|gpfs|lustre)/[^"]*)"')
"""A JSON string that is an absolute path under a usual place for a user's files: a machine's path left behind."""


def publish(bundle: Path, out: Path, root: Path) -> list[Path]:
    """Copy `bundle`'s small files into `out` with `root` made relative; returns the files written."""
    src = Bundle(bundle)
    src.require(src.summary_json)
    prefix = str(root.resolve()).rstrip("/") + "/"
    if out.exists():
        shutil.rmtree(out / "runs", ignore_errors=True)
    written = []
    for path in [src.manifest, src.summary_json, src.summary_csv, *sorted(src.runs.rglob("*"))]:
        if not path.is_file() or path.suffix == ".pt" or "checkpoints" in path.parts:
            continue
        target = out / path.relative_to(bundle)
        target.parent.mkdir(parents=True, exist_ok=True)
        if path.suffix in TEXT:
            text = path.read_text().replace(prefix, "")
            left = LEFT.search(text)
            if left:
                raise SystemExit(f"{path}: an absolute path is left after making {prefix} relative: {left.group(1)}")
            target.write_text(text)
        else:
            shutil.copyfile(path, target)
        written.append(target)
    published = Bundle(out)
    manifest = json.loads(published.manifest.read_text())
    manifest["files"] = {str(p.relative_to(out)): file_entry(p) for p in sorted(published.runs.rglob("*"))
                         if p.is_file()}
    manifest["with_ckpt"] = False
    published.manifest.write_text(json.dumps(manifest, indent=1) + "\n")
    return written


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("bundle", type=Path, help="a collected bundle, e.g. results/mini_ladder")
    p.add_argument("out", type=Path, help="where the published copy goes, e.g. docs/mini_ladder")
    p.add_argument("--root", type=Path, default=Path("."), help="the project folder whose absolute path is made "
                   "relative (default: the current folder)")
    args = p.parse_args(argv)
    written = publish(args.bundle, args.out, args.root)
    print(f"{args.out}: {len(written)} files from {args.bundle}, {args.root.resolve()} made relative; "
          f"next: zbpscale plot {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
