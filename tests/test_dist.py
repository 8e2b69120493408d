"""The process-group backend against the rule in dist.py's docstring (a table), without a GPU: device
objects of type cuda are only compared, never used."""

import pytest
import torch

from zbpscale.errors import ConfigError
from zbpscale.train import dist


@pytest.mark.parametrize("device, env, expected", [
    ("cuda", None, "nccl"),    # the default on GPUs
    ("cpu", None, "gloo"),     # the default on CPUs
    ("cuda", "gloo", "gloo"),  # several ranks on one GPU (gpu_check.sh)
    ("cuda", "nccl", "nccl"),
    ("cpu", "gloo", "gloo"),
])
def test_backend_table(monkeypatch, device, env, expected):
    if env is None:
        monkeypatch.delenv(dist.BACKEND_ENV, raising=False)
    else:
        monkeypatch.setenv(dist.BACKEND_ENV, env)
    assert dist.backend_for(torch.device(device)) == expected


@pytest.mark.parametrize("device, env, match", [
    ("cpu", "nccl", "needs CUDA ranks"),
    ("cuda", "mpi", "not one of nccl, gloo"),
])
def test_backend_errors(monkeypatch, device, env, match):
    monkeypatch.setenv(dist.BACKEND_ENV, env)
    with pytest.raises(ConfigError, match=match):
        dist.backend_for(torch.device(device))
