"""tools/gpu_check.py, the GPU acceptance run, on the CPU: its resume, ranks, sweep and diag parts at the nano
size, so that a GPU session spends its minutes on the GPU and not on the script's own bugs.

Compared: each part's verdict with the facts it claims (the interrupted runs were stopped and killed mid-run,
the summary says every part passed); and, so that the comparisons can fail, the bitwise check on two runs
that differ (bp against zbp_n4)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import load_tool

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_gpu_check_passes_on_cpu_and_its_comparisons_can_fail(tmp_path, data_dir):
    out = subprocess.run([sys.executable, "tools/gpu_check.py", "--device", "cpu", "--out", str(tmp_path),
                          "--data", str(data_dir)], cwd=REPO, capture_output=True, text=True,
                         timeout=1800)  # 40 s alone on 2 cores; 167-388 s in the suite (tools/time_limits.py)
    summary = json.loads((tmp_path / "gpu_check.json").read_text())
    assert out.returncode == 0, json.dumps(summary["parts"], indent=1)
    parts = summary["parts"]
    assert list(parts) == ["resume", "ranks", "sweep", "diag"]  # kernels and bench need CUDA: left out
    assert all(p["ok"] for p in parts.values())
    prof = load_tool("gpu_check").PROFILES["cpu"]
    for arm in prof["arms"]:
        r = parts["resume"][arm]
        assert prof["usr2_at"] <= r["usr2_after_step"] < r["killed_after_step"] < prof["steps"] - 1
    assert parts["ranks"]["max_rel_diff_one_vs_two"] < 1e-4
    assert prof["usr2_at"] <= parts["ranks"]["usr2_to_rank1_after_step"] < prof["steps"] - 1
    assert set(parts["diag"]["runs"]) == {"nano-zbp_n4"}

    gpu_check = load_tool("gpu_check")
    with pytest.raises(gpu_check.PartFailed, match="train losses differ"):
        gpu_check._compare_bitwise(tmp_path / "resume" / "bp-straight", tmp_path / "resume" / "zbp_n4-straight",
                                   prof["steps"])
