"""Documents -> a validation split held out by document, and fixed-size shards for each split.

Every document is tokenized with an end-of-text token in front of it, then routed:
    document i goes to `val` while the validation split is short of its size and
    hash(seed, i) < VAL_DOC_FRACTION; every other document goes to `train`.
The last validation document is cut at the split's size (its remainder is dropped, never trained on); the
training stream is cut at the token budget. Each split is written as shards of exactly `shard_tokens`
tokens (the last one shorter). The packer's whole state is a few counters plus the tokens not yet in a
finished shard, so a prep can checkpoint it after each finished shard and resume to byte-identical shards.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from zbpscale.data.shards import to_uint16, write_shard

VAL_DOC_FRACTION = 0.1
"""Share of documents drawn into the validation split, from the start of the source, until it is full."""


def is_val_candidate(seed: int, doc_index: int) -> bool:
    """Whether document `doc_index` is drawn for validation (a fixed function of the seed and the index)."""
    digest = hashlib.blake2b(f"{seed}:{doc_index}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") < VAL_DOC_FRACTION * 2**64


class SplitWriter:
    """Cuts one split's token stream into shards `<split>_<k:06d>.bin` of `shard_tokens` tokens."""

    def __init__(self, out: Path, split: str, *, shard_tokens: int, budget: int | None, tokenizer: str,
                 vocab_size: int):
        import numpy as np

        self.out, self.split, self.shard_tokens, self.budget = Path(out), split, shard_tokens, budget
        self.tokenizer, self.vocab_size = tokenizer, vocab_size
        self.shards: list[dict] = []  # {"file", "tokens", "sha256"} of each finished shard
        self.written = 0  # tokens in finished shards
        self.documents = 0  # documents that contributed tokens (a cut document counts once)
        self._buf = np.empty(0, dtype=np.uint16)
        self._fill = 0

    @property
    def tokens(self) -> int:
        return self.written + self._fill

    @property
    def full(self) -> bool:
        return self.budget is not None and self.tokens >= self.budget

    def add(self, tokens) -> int:
        """Append one document's tokens (cut at the budget); return how many shards this finished."""
        if self.budget is not None:
            tokens = tokens[: max(self.budget - self.tokens, 0)]
        if len(tokens) == 0:
            return 0
        tokens = to_uint16(tokens)
        self.documents += 1
        finished = 0
        while len(tokens):
            if len(self._buf) == 0:
                self._alloc()
            take = min(len(tokens), self.shard_tokens - self._fill)
            self._buf[self._fill:self._fill + take] = tokens[:take]
            self._fill += take
            tokens = tokens[take:]
            if self._fill == self.shard_tokens:
                self._flush()
                finished += 1
        return finished

    def _alloc(self) -> None:
        import numpy as np

        size = self.shard_tokens if self.budget is None else min(self.shard_tokens, self.budget - self.written)
        self._buf = np.empty(max(size, 0), dtype=np.uint16)

    def finish(self) -> None:
        """Write the last, shorter shard (if any tokens are pending)."""
        if self._fill:
            self._flush()

    def _flush(self) -> None:
        name = f"{self.split}_{len(self.shards):06d}.bin"
        sha = write_shard(self.out / name, self._buf[:self._fill], tokenizer=self.tokenizer,
                          vocab_size=self.vocab_size)
        self.shards.append({"file": name, "tokens": self._fill, "sha256": sha})
        self.written += self._fill
        self._fill = 0

    def pending(self):
        """The tokens not yet in a finished shard (a copy)."""
        return self._buf[:self._fill].copy()

    def state(self) -> dict:
        return {"shards": self.shards, "written": self.written, "documents": self.documents}

    def restore(self, state: dict, pending) -> None:
        self.shards, self.written, self.documents = list(state["shards"]), state["written"], state["documents"]
        self._alloc()
        self._fill = len(pending)
        self._buf[:self._fill] = pending

    def summary(self) -> dict:
        return {"tokens": self.tokens, "documents": self.documents, "budget": self.budget,
                "shards": self.shards}


class Packer:
    """Routes tokenized documents to the validation and training writers, in document order."""

    def __init__(self, *, train: SplitWriter, val: SplitWriter, seed: int, eot: int):
        self.train, self.val, self.seed, self.eot = train, val, seed, eot
        self.next_doc = 0  # every document before this index has been routed (or dropped)

    @property
    def done(self) -> bool:
        return self.train.full and self.val.full

    def wants(self, doc_index: int) -> bool:
        """Whether a document needs tokenizing at all (False once both splits that could take it are full)."""
        if not self.val.full and is_val_candidate(self.seed, doc_index):
            return True
        return not self.train.full

    def feed(self, doc_index: int, tokens) -> int:
        """Route document `doc_index` (its tokens start with the EOT token); return shards finished."""
        assert doc_index >= self.next_doc, "documents must be fed in order"
        if not self.val.full and is_val_candidate(self.seed, doc_index):
            finished = self.val.add(tokens)
        else:
            finished = self.train.add(tokens)
        self.next_doc = doc_index + 1
        return finished

    def skip_to(self, doc_index: int) -> None:
        """Mark the documents before `doc_index` as routed (they were not wanted by either split)."""
        self.next_doc = max(self.next_doc, doc_index)

    def state(self) -> dict:
        return {"next_doc": self.next_doc, "train": self.train.state(), "val": self.val.state()}

    def restore(self, state: dict, train_pending, val_pending) -> None:
        self.next_doc = state["next_doc"]
        self.train.restore(state["train"], train_pending)
        self.val.restore(state["val"], val_pending)
