"""The offline compile check (tools/compile_kernels.py): every Triton kernel variant the model launches, compiled
for sm_90 and sm_80 on this CPU machine with the triton wheel's own ptxas, no GPU.

Compared: the table's variants with the full product the check promises (each kernel x dtype x n x scheme x
probe family x architecture), registers and spills with the limits; and, so that the check can fail, a planted
kernel error (a non-power-of-2 arange, which Triton refuses) and a planted register cap that forces spills."""

import dataclasses
import importlib.util
import itertools
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import load_tool

REPO = Path(__file__).resolve().parents[1]

pytestmark = [
    pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="triton is not installed"),
    pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") == "1", reason="TRITON_INTERPRET=1: nothing compiles"),
]


@pytest.mark.slow
def test_every_kernel_variant_compiles_for_sm90_and_sm80(tmp_path, capsys):
    out = subprocess.run([sys.executable, "tools/compile_kernels.py", "--json", str(tmp_path / "k.json")], cwd=REPO,
                         capture_output=True, text=True, timeout=600,
                         env={k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"})
    with capsys.disabled():  # the table belongs in CI's log
        print("\n" + out.stdout)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    result = json.loads((tmp_path / "k.json").read_text())
    rows = result["rows"]
    assert result["ok"] and not result["problems"]
    assert all(r["error"] is None and r["spills"] == 0 and 0 < r["registers"] <= 200 for r in rows)
    tool = load_tool("compile_kernels")
    seen = {(r["kernel"], r["arch"], *r["variant"].split()[:4]) for r in rows}
    expected = {(kernel, arch, dtype, f"n{n}", scheme, probe)
                for kernel, arch, dtype, n, scheme, probe in itertools.product(
                    tool.KERNELS, (90, 80), ("bf16", "float32"), tool.NS, ("central", "forward"),
                    ("rademacher", "gaussian"))
                if probe == "rademacher" or kernel.startswith("fused")}
    assert seen == expected
    # every size of both ladders launches every kernel (the sizes column names them)
    sizes = {name for name, *_ in tool.shapes()}
    for kernel in tool.KERNELS:
        assert set(",".join(r["sizes"] for r in rows if r["kernel"] == kernel).split(",")) == sizes


def test_a_planted_kernel_error_or_spill_fails_the_check(monkeypatch, capsys):
    import triton
    import triton.language as tl

    from zbpscale.zbp import closed_triton

    tool = load_tool("compile_kernels")

    @triton.jit
    def planted(x_ptr, g_ptr, out_ptr, w_ptr, h, row0, ce, se, one_minus_ce, n, eps, CENTRAL: tl.constexpr,
                N_PAD: tl.constexpr, BLOCK: tl.constexpr):
        lane = tl.arange(0, BLOCK + 1)  # Triton needs a power of 2
        tl.store(out_ptr + lane, lane)

    monkeypatch.setattr(closed_triton, "_swiglu_kernel", planted)
    assert tool.main(["--arch", "90", "--only", "closed.swiglu"]) == 1
    out = capsys.readouterr().out
    assert "12 variants of 1 kernels for sm_90" in out and "12 problem(s)" in out
    assert re.search(r"does not compile: CompilationError: at \d+:\d+: arange's range must be a power of 2", out)
    monkeypatch.undo()

    launch, size = next((launch, size) for launch, size in tool.record_launches(("fused.swiglu",))
                        if launch.variant == "bf16 n64 central gaussian")
    capped = dataclasses.replace(launch, kwargs={**launch.kwargs, "maxnreg": 64})  # it needs ~190
    (row,) = tool.compile_all([(capped, size)], (90,))
    assert row.registers == 64 and row.spills > 0 and row.problem() == f"spills {row.spills} registers"
    assert tool.Row(kernel="k", variant="v", arch=90, sizes="s", registers=201, spills=0).problem() == \
        "uses 201 registers (limit 200)"
