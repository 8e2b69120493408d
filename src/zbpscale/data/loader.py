"""Training and validation batches from prepared shards, memory-mapped, independent of the world size.

The global batch of step s is a function of (seed, s) only:
    starts = Generator(PCG64(SeedSequence([seed, s]))).integers(0, n_windows, size=global_batch)
where window w is the T+1 tokens at offset w of the training stream (windows never straddle two shards);
x = window[:-1], y = window[1:]. Rank r of W takes rows [r*G/W, (r+1)*G/W) of that global batch. So
(a) a run resumed at step s sees exactly the batches it would have seen, with no loader state to save, and
(b) the data order is the same whether the run has 1, 2 or 8 ranks (e.g. after a requeue onto fewer GPUs).
Windows are drawn with replacement: over a run some tokens are seen twice and some never, as in nanoGPT.

Validation batches are fixed: consecutive, non-overlapping windows from the start of the validation split,
grouped into global batches and split across ranks the same way. A split too small for one global batch is
evaluated on the largest batch that fits and that the world size divides (`val_fit`); `submit` computes the
same from the manifest and says so in its plan, before anything is queued.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from zbpscale.data import manifest_path, shards
from zbpscale.errors import ConfigError, DataError


def read_manifest(data_dir: Path) -> dict:
    """The manifest of a finished prep; a DataError with the command to run if there is none, or it is not one this
    release reads (another format, or a file cut or garbled)."""
    path = manifest_path(data_dir)
    if not path.is_file():
        what = "an unfinished prep" if (Path(data_dir) / ".prep_progress.npz").exists() else "no prepared data"
        raise DataError(f"{data_dir} holds {what} (no manifest.json)",
                        hint=f"run `zbpscale prepare-data --data {data_dir}` with the source you want (re-running "
                             "the same command resumes an interrupted prep)")
    try:
        manifest = json.loads(path.read_bytes())
    except ValueError:  # torn, edited, not UTF-8
        manifest = None
    if isinstance(manifest, dict) and manifest.get("format") != "zbpscale-shards":  # a results bundle's, say
        raise DataError(f"{data_dir} holds a manifest.json that is not a data prep's",
                        hint="give --data (or the sweep's Data.dir) a folder of its own for the prepared data")
    if not isinstance(manifest, dict) or manifest.get("format_version") != shards.VERSION or not all(
            isinstance(manifest.get(split), dict) and isinstance(manifest[split].get("tokens"), int)
            and isinstance(manifest[split].get("shards"), list) for split in ("train", "val")) or not (
            isinstance(manifest.get("tokenizer"), dict) and {"name", "n_vocab"} <= set(manifest["tokenizer"])):
        # its format's name and version alone, without the splits' shards or the tokenizer: cut by hand
        raise DataError(f"{path} is not a version-{shards.VERSION} zbpscale shard manifest",
                        hint=f"delete {data_dir} and re-run `zbpscale prepare-data`")
    return manifest


def data_identity(manifest: dict) -> str:
    """The data a run trains on, in one word: the sha256 of the token count and sha256 of every shard of both
    splits, in order (hex, 16 digits). The same for the same shards wherever they lie and whatever their files are
    called (a prep resumed after a kill writes byte-identical shards); another for any other data, tokenizer or
    split."""
    shards_of = {split: [[s["tokens"], s["sha256"]] for s in manifest[split]["shards"]] for split in ("train", "val")}
    text = json.dumps({"tokenizer": manifest["tokenizer"]["name"], **shards_of}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def vocab_problem(vocab_size: int, manifest: dict, data_dir: Path) -> ConfigError | None:
    """The error of a model whose token tables (vocab_size rows, padded to a multiple of 64) are smaller than the
    data's tokenizer's vocabulary (its embedding would be indexed past its end: an IndexError on CPU, a device-side
    assert on a GPU); None when they hold every token id."""
    tok = manifest["tokenizer"]
    if 64 * -(-vocab_size // 64) >= tok["n_vocab"]:
        return None
    return ConfigError(f"the model's vocab_size={vocab_size} is smaller than the vocabulary of the data in {data_dir} "
                       f"({tok['n_vocab']} token ids, {tok['name']})",
                       hint=f"leave vocab_size at its default ({tok['n_vocab']}) or set it to at least that")


def open_split(data_dir: Path, split: str, *, verify: bool | str = "auto") -> list:
    """The split's shards as read-only memmaps, each checked against the manifest: header and length always,
    the sha256 too when `verify` is True, or "auto" and the split is at most shards.CHECKSUM_LIMIT_BYTES."""
    manifest = read_manifest(data_dir)
    tok = manifest["tokenizer"]
    entries = manifest[split]["shards"]
    if verify == "auto":
        verify = sum(shards.TOKEN_BYTES * s["tokens"] for s in entries) <= shards.CHECKSUM_LIMIT_BYTES
    maps = []
    for shard in entries:
        path = Path(data_dir) / shard["file"]
        shards.check_shard(path, tokens=shard["tokens"], tokenizer=tok["name"], vocab_size=tok["n_vocab"],
                           sha256=shard["sha256"] if verify else None)
        maps.append(shards.open_tokens(path))
    return maps


def _checked(windows: list, where: list[tuple[Path, int]], vocab: int):
    """The windows stacked as int64 (B, T+1), after a range check: a token id past the vocabulary is a corrupt
    shard (flipped high bits), found here before the model indexes its embedding with it."""
    import numpy as np

    batch = np.stack(windows).astype(np.int64)
    if batch.size and batch.max() >= vocab:
        row = int(np.argmax(batch.max(axis=1) >= vocab))
        path, offset = where[row]
        col = int(np.argmax(batch[row] >= vocab))
        raise DataError(f"shard {path} is corrupt: token id {batch[row, col]} at position {offset + col} is past "
                        f"the vocabulary ({vocab} ids)",
                        hint=f"re-run `zbpscale prepare-data` for {path.parent} (its sha256 will not match either)")
    return batch


def split_windows(manifest: dict, split: str, seq_len: int) -> int:
    """Windows of seq_len + 1 tokens in a split, from the manifest alone: training windows start at any
    offset of a shard (the loader's n_windows), validation windows are consecutive and non-overlapping."""
    lengths = [s["tokens"] for s in manifest[split]["shards"]]
    if split == "train":
        return sum(max(n - seq_len, 0) for n in lengths)
    return sum((n - seq_len - 1) // seq_len + 1 for n in lengths if n >= seq_len + 1)


def val_fit(windows: int, batch_size: int, world_size: int, max_batches: int | None = None) -> tuple[int, int]:
    """(batch size, number of batches) of the validation set: whole batches of `batch_size` windows when one
    fits, else one batch of the most windows that `world_size` divides; (0, 0) when not even that fits."""
    if windows < batch_size:
        batch_size = windows // world_size * world_size
        if batch_size == 0:
            return 0, 0
    n = windows // batch_size
    return batch_size, n if max_batches is None else min(n, max_batches)


def _rank_rows(n: int, rank: int, world_size: int) -> slice:
    if not 0 <= rank < world_size:
        raise ConfigError(f"rank {rank} is outside world size {world_size}")
    if n % world_size:
        raise ConfigError(f"global batch {n} is not divisible by world size {world_size}",
                          hint="choose a global batch that every world size you may run on divides")
    per = n // world_size
    return slice(rank * per, (rank + 1) * per)


def _to_xy(batch):
    import torch

    batch = torch.from_numpy(batch)  # (B, T+1)
    return batch[:, :-1].contiguous(), batch[:, 1:].contiguous()  # (B, T), (B, T)


class TokenLoader:
    """`batch(step)` -> this rank's (x, y) of step `step`'s global batch; `val_batches()` -> fixed list."""

    def __init__(self, data_dir: Path, *, seq_len: int, global_batch: int, seed: int, rank: int = 0,
                 world_size: int = 1, verify: bool | str = "auto"):
        import numpy as np

        if seq_len < 1 or global_batch < 1:
            raise ConfigError(f"seq_len ({seq_len}) and global_batch ({global_batch}) must be positive")
        self.data_dir, self.seq_len, self.global_batch, self.seed = Path(data_dir), seq_len, global_batch, seed
        self.rank, self.world_size = rank, world_size
        self._rows = _rank_rows(global_batch, rank, world_size)
        self.train = open_split(data_dir, "train", verify=verify)
        self.val = open_split(data_dir, "val", verify=verify)
        self.manifest = manifest = read_manifest(data_dir)
        self.vocab = manifest["tokenizer"]["n_vocab"]
        self.identity = data_identity(manifest)
        self._paths = {split: [Path(data_dir) / s["file"] for s in manifest[split]["shards"]]
                       for split in ("train", "val")}  # for errors that name the shard
        windows = np.array([max(len(m) - seq_len, 0) for m in self.train], dtype=np.int64)  # starts per shard
        if windows.sum() == 0:
            raise DataError(f"{data_dir}: no training shard holds {seq_len + 1} tokens",
                            hint="prepare more tokens or use a larger --shard-tokens")
        self._cum = np.concatenate([[0], np.cumsum(windows)])  # window w lives in shard searchsorted(cum, w)
        self.n_windows = int(self._cum[-1])

    def global_starts(self, step: int):
        """`(shard, offset)` arrays of the global batch's windows at `step`: a function of (seed, step) only."""
        import numpy as np

        rng = np.random.Generator(np.random.PCG64(np.random.SeedSequence([self.seed, step])))
        w = rng.integers(0, self.n_windows, size=self.global_batch)
        shard = np.searchsorted(self._cum, w, side="right") - 1
        return shard, w - self._cum[shard]

    def batch(self, step: int):
        """This rank's share of step `step`'s global batch: x, y int64 tensors of shape (G/W, T)."""
        shard, offset = self.global_starts(step)
        t = self.seq_len + 1
        picked = list(zip(shard[self._rows], offset[self._rows]))
        windows = [self.train[k][o:o + t] for k, o in picked]
        return _to_xy(_checked(windows, [(self._paths["train"][k], int(o)) for k, o in picked], self.vocab))

    def val_batches(self, batch_size: int | None = None, max_batches: int | None = None) -> list:
        """Fixed validation batches, this rank's share of each: a list of (x, y), the same for every seed."""
        t = self.seq_len + 1
        spans = [(i, o) for i, m in enumerate(self.val) for o in range(0, len(m) - t + 1, self.seq_len)]
        windows = [self.val[i][o:o + t] for i, o in spans]
        where = [(self._paths["val"][i], o) for i, o in spans]
        batch_size, n = val_fit(len(windows), batch_size or self.global_batch, self.world_size, max_batches)
        if n == 0:
            raise DataError(f"{self.data_dir}: the validation split has {sum(len(m) for m in self.val):,} tokens, "
                            f"fewer than {self.world_size} window(s) of {t} (one per rank)",
                            hint="prepare with a larger --val-tokens, or a shorter seq_len")
        rows = _rank_rows(batch_size, self.rank, self.world_size)
        span = [slice(i * batch_size, (i + 1) * batch_size) for i in range(n)]
        return [_to_xy(_checked(windows[b][rows], where[b][rows], self.vocab)) for b in span]


def micro_batches(x, y, n_micro: int) -> list:
    """Split a rank's (x, y) into `n_micro` equal (x_i, y_i) for gradient accumulation, in row order."""
    if n_micro < 1 or x.shape[0] % n_micro:
        raise ConfigError(f"a rank's batch of {x.shape[0]} rows does not split into {n_micro} micro-batches",
                          hint="choose grad-accumulation steps that divide the per-rank batch")
    return list(zip(x.chunk(n_micro), y.chunk(n_micro)))
