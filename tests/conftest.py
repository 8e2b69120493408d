"""Shared test set-up: offline mode for every hub client, deterministic torch on 2 cores."""

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import pytest  # noqa: E402
import torch  # noqa: E402


@pytest.fixture(autouse=True)
def _torch_defaults():
    torch.manual_seed(0)
    yield


def load_slurm_local():
    """tools/slurm_local.py, imported by path (tools/ is not a package)."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "tools" / "slurm_local.py"
    spec = importlib.util.spec_from_file_location("slurm_local", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="session")
def slurm_cluster():
    """(state folder, client env) of a running local SLURM: the one named by ZBPSCALE_SLURM_DIR (left
    running), or a fresh one in /tmp that is stopped, by its recorded PIDs, after the session."""
    import shutil
    import tempfile
    from pathlib import Path

    slurm_local = load_slurm_local()
    ok, reason = slurm_local.available()
    if not ok:
        pytest.skip(reason)
    shared = os.environ.get("ZBPSCALE_SLURM_DIR")
    folder = Path(shared) if shared else Path(tempfile.mkdtemp(prefix="zbpscale-slurm-test-", dir="/tmp"))
    owned = not slurm_local.is_running(folder)
    env = {**os.environ, **slurm_local.start(folder), "OMP_NUM_THREADS": "1"}
    yield folder, env
    if owned:
        slurm_local.stop(folder)
        left = [f"{r['name']} ({r['pid']})" for r in slurm_local.recorded(folder) if r["alive"]]
        assert not left, f"daemons left running after stop: {left}"
        if not shared:
            shutil.rmtree(folder, ignore_errors=True)
