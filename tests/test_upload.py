"""`zbpscale upload` against a fake Hugging Face hub, never the network.

Compared: what reaches a fake HfApi object (repo created private, one commit holding exactly the bundle's files,
checkpoints only of the runs named) with the bundle on disk; a public repo and a missing token with the
one-line refusals. End to end, the real CLI and the real huggingface_hub client talk to a loopback HTTP fake
of the hub endpoints they use (HF_ENDPOINT): the files received are the bundle's byte for byte, the token
arrives in the Authorization header only, and it appears in no file we leave, no output and no process
argument list.
"""

import base64
import json
import os
import shlex
import shutil
import subprocess
import sys
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import SimpleNamespace

import pytest

from zbpscale.errors import ConfigError
from zbpscale.results import upload

TOKEN = "hf_zbpFAKEtoken0123456789abcdefghijXYZ"


def make_bundle(folder: Path) -> Path:
    """A small collected bundle by hand: the file layout of `zbpscale collect`, with one checkpoint."""
    for run in ("nano-bp", "nano-zbp_n4"):
        (folder / "runs" / run).mkdir(parents=True)
        (folder / "runs" / run / "metrics.jsonl").write_text('{"kind": "eval", "val_loss": 3.0}\n')
        (folder / "runs" / run / "config.json").write_text("{}\n")
    (folder / "runs" / "nano-bp" / "checkpoints").mkdir()
    (folder / "runs" / "nano-bp" / "checkpoints" / "ckpt_00000004.pt").write_bytes(b"\x00weights" * 10)
    (folder / "figures").mkdir()
    (folder / "figures" / "gap_vs_scale.png").write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(range(256)))
    for name in ("manifest.json", "summary.json", "summary.csv", "table.md"):
        (folder / name).write_text(f"{name}\n")
    (folder / ".summary.json.tmp").write_text("partial")
    return folder


def bundle_contents(bundle: Path, *, ckpt: bool) -> dict[str, bytes]:
    return {f"{bundle.name}/{p.relative_to(bundle).as_posix()}": p.read_bytes() for p in bundle.rglob("*")
            if p.is_file() and not p.name.startswith(".") and (ckpt or p.suffix != ".pt")}


class FakeApi:
    """The HfApi methods upload uses, over an in-memory hub: {repo_id: {"private", "files"}}."""

    def __init__(self, repos: dict | None = None):
        self.repos, self.created = repos or {}, []

    def whoami(self):
        return {"name": "alice"}

    def repo_exists(self, repo_id, *, repo_type):
        return repo_id in self.repos

    def repo_info(self, repo_id, *, repo_type):
        return SimpleNamespace(private=self.repos[repo_id]["private"])

    def create_repo(self, repo_id, *, repo_type, private, exist_ok):
        self.created.append((repo_id, repo_type, private))
        self.repos[repo_id] = {"private": private, "files": {}}

    def create_commit(self, repo_id, operations, *, commit_message, repo_type):
        for op in operations:
            self.repos[repo_id]["files"][op.path_in_repo] = Path(op.path_or_fileobj).read_bytes()

    def list_repo_tree(self, repo_id, *, path_in_repo, recursive, repo_type):
        return [SimpleNamespace(path=path, size=len(data)) for path, data in self.repos[repo_id]["files"].items()
                if path.startswith(path_in_repo + "/")]


def test_creates_a_private_repo_when_missing_and_sends_the_bundle(tmp_path):
    bundle = make_bundle(tmp_path / "smoke")
    api = FakeApi()
    sent = upload.upload_bundle(api, bundle, log=lambda line: None)
    assert api.created == [("alice/zbpscale-results", "dataset", True)] and sent.created
    assert api.repos["alice/zbpscale-results"]["files"] == bundle_contents(bundle, ckpt=False)

    api = FakeApi({"lab/zbp": {"private": True, "files": {}}})
    upload.upload_bundle(api, bundle, repo_id="lab/zbp", with_ckpt="nano-*", log=lambda line: None)
    assert api.created == [] and api.repos["lab/zbp"]["files"] == bundle_contents(bundle, ckpt=True)


def test_refuses_a_public_repo_and_unknown_checkpoints(tmp_path):
    bundle = make_bundle(tmp_path / "smoke")
    for private in (False, None):  # public, or visibility not reported
        api = FakeApi({"lab/open": {"private": private, "files": {}}})
        with pytest.raises(upload.UploadError, match="lab/open is public .*refusing"):
            upload.upload_bundle(api, bundle, repo_id="lab/open", log=lambda line: None)
        assert api.repos["lab/open"]["files"] == {}
    with pytest.raises(ConfigError, match="--with-ckpt tiny-\\*: no checkpoint"):
        upload.upload_bundle(FakeApi(), bundle, with_ckpt="tiny-*", log=lambda line: None)
    spaced = make_bundle(tmp_path / "my study")  # the hint's command, pasted, ran on 'my' (a helper's hunt)
    with pytest.raises(ConfigError) as refused:
        upload.upload_bundle(FakeApi(), spaced, with_ckpt="tiny-*", log=lambda line: None)
    assert f"--out {shlex.quote(str(spaced))} --with-ckpt" in refused.value.hint


def run_cli(bundle: Path, env: dict, *args: str) -> tuple[subprocess.CompletedProcess, list[bytes]]:
    """`zbpscale upload` in a child process; returns its result and its argument lists seen while it ran."""
    proc = subprocess.Popen([sys.executable, "-m", "zbpscale.cli", "upload", str(bundle), *args], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    cmdlines = []
    while proc.poll() is None:
        try:
            cmdlines.append(Path(f"/proc/{proc.pid}/cmdline").read_bytes())
        except OSError:
            break
        time.sleep(0.02)
    out, err = proc.communicate(timeout=120)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out.decode(), err.decode()), cmdlines


def clean_env(tmp_path: Path, **extra) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HF_")}
    return {**env, "HF_HOME": str(tmp_path / "hf-home"), "HF_HUB_DISABLE_TELEMETRY": "1", **extra}


def test_refuses_without_a_token(tmp_path):
    bundle = make_bundle(tmp_path / "smoke")
    out, _ = run_cli(bundle, clean_env(tmp_path))
    assert out.returncode == 2 and out.stdout == ""
    assert out.stderr.strip().splitlines() == [out.stderr.strip()] and "no Hugging Face token" in out.stderr
    assert "hf auth login" in out.stderr and "Traceback" not in out.stderr


# ---------------------------------------------------------------- loopback fake of the hub's HTTP API

class FakeHub(BaseHTTPRequestHandler):
    """whoami-v2, dataset info, repos/create, preupload and commit; every request must carry the token."""

    repos: dict = {}
    auth: list = []

    def log_message(self, *args):  # keep the test output (and any log) free of request lines
        pass

    def _reply(self, status: int, body: dict, headers: dict | None = None) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        for k, v in {"Content-Type": "application/json", "Content-Length": str(len(data)), **(headers or {})}.items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(data)

    def _authorized(self) -> bool:
        self.auth.append(self.headers.get("authorization"))
        if self.headers.get("authorization") != f"Bearer {TOKEN}":
            self._reply(401, {"error": "Invalid credentials in Authorization header"})
            return False
        return True

    def do_GET(self):
        if not self._authorized():
            return
        if self.path == "/api/whoami-v2":
            return self._reply(200, {"name": "alice", "type": "user"})
        repo = self.path.removeprefix("/api/datasets/")
        if "/tree/main" in repo:  # the files under a folder, as the Hub lists them (one page)
            repo, folder = repo.split("?")[0].split("/tree/main")
            folder = urllib.parse.unquote(folder.lstrip("/"))
            held = [{"type": "file", "path": path, "size": len(data), "oid": "0" * 40}
                    for path, data in self.repos.get(repo, {"files": {}})["files"].items()
                    if path.startswith(folder + "/")]
            if not held:
                return self._reply(404, {"error": "Entry not found"}, {"X-Error-Code": "EntryNotFound"})
            return self._reply(200, held)
        if repo in self.repos:
            return self._reply(200, {"id": repo, "private": self.repos[repo]["private"], "sha": "0" * 40})
        self._reply(404, {"error": "Repository not found"}, {"X-Error-Code": "RepoNotFound"})

    def do_POST(self):
        if not self._authorized():
            return
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        if self.path == "/api/repos/create":
            req = json.loads(body)
            repo = f"{req['organization']}/{req['name']}"
            self.repos[repo] = {"private": req.get("visibility") == "private", "files": {}}
            return self._reply(200, {"url": f"http://{self.headers['Host']}/datasets/{repo}"})
        repo = "/".join(self.path.removeprefix("/api/datasets/").split("/")[:2])
        if "/preupload/" in self.path:
            files = json.loads(body)["files"]
            return self._reply(200, {"files": [{"path": f["path"], "uploadMode": "regular", "shouldIgnore": False}
                                               for f in files]})
        if "/commit/" in self.path:
            for line in body.decode().splitlines():
                item = json.loads(line)
                if item["key"] == "file":
                    self.repos[repo]["files"][item["value"]["path"]] = base64.b64decode(item["value"]["content"])
            url = f"http://{self.headers['Host']}/datasets/{repo}/commit/{'1' * 40}"
            return self._reply(200, {"commitUrl": url, "commitOid": "1" * 40})
        self._reply(404, {"error": f"not faked: {self.path}"})


@pytest.fixture
def fake_hub():
    FakeHub.repos, FakeHub.auth = {}, []
    server = ThreadingHTTPServer(("127.0.0.1", 0), FakeHub)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}", FakeHub
    server.shutdown()
    server.server_close()


def test_end_to_end_against_a_loopback_hub_never_leaks_the_token(tmp_path, fake_hub):
    endpoint, hub = fake_hub
    bundle = make_bundle(tmp_path / "smoke")
    env = clean_env(tmp_path, HF_TOKEN=TOKEN, HF_ENDPOINT=endpoint, HF_HUB_OFFLINE="0")
    out, cmdlines = run_cli(bundle, env)
    assert out.returncode == 0, out.stderr
    assert hub.repos["alice/zbpscale-results"]["private"] is True
    assert hub.repos["alice/zbpscale-results"]["files"] == bundle_contents(bundle, ckpt=False)
    assert hub.auth and set(hub.auth) == {f"Bearer {TOKEN}"}  # the token was used, in the header only
    assert "private dataset repo alice/zbpscale-results" in out.stdout

    assert cmdlines and not any(TOKEN.encode() in c for c in cmdlines)
    assert TOKEN not in out.stdout + out.stderr
    for path in list(bundle.rglob("*")) + list((tmp_path / "hf-home").rglob("*")):
        assert not path.is_file() or TOKEN.encode() not in path.read_bytes(), path

    hub.repos["alice/zbpscale-results"]["private"] = False  # someone made it public: the next upload refuses
    out, _ = run_cli(bundle, env)
    assert out.returncode == 2 and "is public" in out.stderr and TOKEN not in out.stdout + out.stderr


def test_a_second_upload_names_what_the_folder_holds_that_the_bundle_does_not(tmp_path, fake_hub):
    """A bundle uploaded, then collected again without one of its runs and uploaded to the same folder: the folder
    kept the dropped run's files beside a summary without it, and nothing said so. The upload names them (it
    deletes nothing: a run's checkpoints sent once with --with-ckpt stay)."""
    endpoint, hub = fake_hub
    bundle = make_bundle(tmp_path / "smoke")
    env = clean_env(tmp_path, HF_TOKEN=TOKEN, HF_ENDPOINT=endpoint, HF_HUB_OFFLINE="0")
    first, _ = run_cli(bundle, env)
    assert first.returncode == 0 and "note:" not in first.stdout, first.stdout + first.stderr
    dropped = sorted(p.relative_to(bundle).as_posix() for p in (bundle / "runs").iterdir())[0]
    shutil.rmtree(bundle / dropped)
    again, _ = run_cli(bundle, env)
    assert again.returncode == 0, again.stderr
    stale = sorted(k.removeprefix("smoke/") for k in hub.repos["alice/zbpscale-results"]["files"]
                   if k.startswith(f"smoke/{dropped}/"))
    assert stale and f"note: smoke/ in alice/zbpscale-results also holds {len(stale)} file(s)" in again.stdout
    assert stale[0] in again.stdout and TOKEN not in again.stdout + again.stderr


def test_a_hub_that_cannot_be_reached_and_a_bad_repo_name_are_one_line(tmp_path, fake_hub):
    """No network (a port nothing listens on), and a --repo the Hub's rules refuse: one line each, the token never
    in it (they were tracebacks: httpx's ConnectError, huggingface_hub's HFValidationError)."""
    import socket

    with socket.socket() as s:  # a loopback port that nothing listens on
        s.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{s.getsockname()[1]}"
    bundle = make_bundle(tmp_path / "smoke")
    out, _ = run_cli(bundle, clean_env(tmp_path, HF_TOKEN=TOKEN, HF_ENDPOINT=dead, HF_HUB_OFFLINE="0"))
    assert out.returncode == 2 and "the Hub cannot be reached" in out.stderr and "Traceback" not in out.stderr
    assert len(out.stderr.splitlines()) == 1 and TOKEN not in out.stdout + out.stderr, out.stderr
    endpoint, _ = fake_hub
    out, _ = run_cli(bundle, clean_env(tmp_path, HF_TOKEN=TOKEN, HF_ENDPOINT=endpoint, HF_HUB_OFFLINE="0"),
                     "--repo", "bad repo name")
    assert out.returncode == 2 and "is not a repo name" in out.stderr and "Traceback" not in out.stderr, out.stderr
    assert len(out.stderr.splitlines()) == 1 and TOKEN not in out.stdout + out.stderr
