"""The shard file format: a 64-byte header, then the tokens as little-endian uint16.

Header layout (little-endian, 64 bytes):
    0   8s   magic b"ZBPTOK\\x00\\x01"
    8   u32  format version (1)
    12  u32  header size in bytes (64)
    16  u64  token count
    24  u32  vocabulary size of the tokenizer
    28  u32  bytes per token (2)
    32  16s  tokenizer name, NUL-padded ASCII ("gpt2")
    48  16x  reserved (zero)

Every file here is written atomically (temp file, fsync, rename, fsync of the folder), so a file with its
final name is always complete; a prep killed mid-write leaves at most a `*.tmp-<pid>` file, which nothing reads.
A shard whose header, size or tokenizer disagrees with what is expected raises a DataError that says how
to rebuild it.
"""

from __future__ import annotations

import hashlib
import struct
from pathlib import Path

from zbpscale.errors import DataError
from zbpscale.files import atomic_write

MAGIC = b"ZBPTOK\x00\x01"
VERSION = 1
HEADER_SIZE = 64
TOKEN_BYTES = 2
MAX_TOKEN_ID = 65535
_HEADER = struct.Struct("<8sIIQII16s16x")
assert _HEADER.size == HEADER_SIZE


def to_uint16(ids):
    """Token ids (any integer numpy array) as uint16; a DataError if one does not fit in 16 bits."""
    import numpy as np

    ids = np.asarray(ids)
    if ids.dtype == np.uint16:
        return ids
    if ids.size and int(ids.max()) > MAX_TOKEN_ID:
        raise DataError(f"token id {int(ids.max())} does not fit in a uint16 shard (largest allowed is "
                        f"{MAX_TOKEN_ID})", hint="use a tokenizer with at most 65536 tokens, such as gpt2 (50257)")
    if ids.size and ids.dtype.kind == "i" and int(ids.min()) < 0:
        raise DataError(f"negative token id {int(ids.min())}", hint="the tokenizer output is corrupt")
    return ids.astype(np.uint16, copy=False)


def pack_header(n_tokens: int, tokenizer: str, vocab_size: int) -> bytes:
    if vocab_size > MAX_TOKEN_ID + 1:
        raise DataError(f"tokenizer {tokenizer!r} has {vocab_size} tokens; uint16 shards hold at most 65536",
                        hint="use a tokenizer with at most 65536 tokens, such as gpt2 (50257)")
    name = tokenizer.encode("ascii")
    if len(name) > 16:
        raise DataError(f"tokenizer name {tokenizer!r} is longer than 16 bytes", hint="use a shorter name")
    return _HEADER.pack(MAGIC, VERSION, HEADER_SIZE, n_tokens, vocab_size, TOKEN_BYTES, name)


def write_shard(path: Path, tokens, *, tokenizer: str, vocab_size: int) -> str:
    """Write one shard atomically; return the sha256 of the whole file (header included)."""
    tokens = to_uint16(tokens)
    header = pack_header(len(tokens), tokenizer, vocab_size)
    payload = tokens.astype("<u2", copy=False).tobytes()
    atomic_write(path, [header, payload])
    return hashlib.sha256(header + payload).hexdigest()


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 22), b""):
            digest.update(block)
    return digest.hexdigest()


def read_header(path: Path) -> dict:
    """Parse and check a shard's header against the file; a DataError names what is wrong."""
    path = Path(path)
    fix = f"delete {path.parent} and re-run `zbpscale prepare-data` with the same options"
    if not path.is_file():
        raise DataError(f"shard {path} is missing", hint=fix)
    size = path.stat().st_size
    if size < HEADER_SIZE:
        raise DataError(f"shard {path} is truncated: {size} bytes, shorter than its {HEADER_SIZE}-byte header",
                        hint=fix)
    with open(path, "rb") as f:
        magic, version, header_size, n_tokens, vocab, token_bytes, name = _HEADER.unpack(f.read(HEADER_SIZE))
    if magic != MAGIC:
        raise DataError(f"{path} is not a zbpscale shard (bad magic {magic!r})", hint=fix)
    if version != VERSION or header_size != HEADER_SIZE or token_bytes != TOKEN_BYTES:
        raise DataError(f"shard {path} has format version {version} (header {header_size} B, {token_bytes} B/token);"
                        f" this zbpscale reads version {VERSION}", hint=fix)
    expected = HEADER_SIZE + TOKEN_BYTES * n_tokens
    if size != expected:
        raise DataError(f"shard {path} is truncated or padded: its header says {n_tokens} tokens "
                        f"({expected} bytes) but the file has {size} bytes", hint=fix)
    return {"tokens": n_tokens, "tokenizer": name.rstrip(b"\x00").decode("ascii"), "vocab_size": vocab}


CHECKSUM_LIMIT_BYTES = 2 << 30  # "auto" verification hashes the shards when the split is at most this large


def check_shard(path: Path, *, tokens: int, tokenizer: str, vocab_size: int, sha256: str | None = None) -> None:
    """Check a shard against its manifest entry (header always; the sha256 of the file when given)."""
    header = read_header(path)
    fix = f"delete {Path(path).parent} and re-run `zbpscale prepare-data` with the same options"
    if header["tokens"] != tokens:
        raise DataError(f"shard {path} holds {header['tokens']} tokens; the manifest says {tokens}", hint=fix)
    if (header["tokenizer"], header["vocab_size"]) != (tokenizer, vocab_size):
        raise DataError(f"shard {path} was written with tokenizer {header['tokenizer']} ({header['vocab_size']} "
                        f"tokens); expected {tokenizer} ({vocab_size})", hint=fix)
    if sha256 is not None and file_sha256(path) != sha256:
        raise DataError(f"shard {path} does not match the sha256 recorded for it", hint=fix)


def open_tokens(path: Path):
    """The shard's tokens as a read-only numpy memmap (no copy); checks the header first."""
    import numpy as np

    n = read_header(path)["tokens"]
    if n == 0:
        return np.zeros(0, dtype=np.uint16)
    return np.memmap(path, dtype="<u2", mode="r", offset=HEADER_SIZE, shape=(n,))
