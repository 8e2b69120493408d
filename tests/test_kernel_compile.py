"""The offline compile check (tools/compile_kernels.py): every Triton kernel variant the model launches, compiled
for sm_90 and sm_80 on this CPU machine with the triton wheel's own ptxas, no GPU.

Compared: the table's variants with what the check promises, registers and spills with the limits: in the default
suite, every factor of a kernel's variants (dtype, scheme, probe family; n) on both architectures (--cover, a third
of the variants); under `pytest -m kernels`, their full product (each kernel x dtype x n x scheme x probe family x
architecture); and, so that the check can fail, a planted kernel error (a non-power-of-2 arange, which Triton
refuses) and a planted register cap that forces spills."""

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


def compiled(tmp_path, *flags: str, hang_s: float) -> list[dict]:
    """The rows of tools/compile_kernels.py run with `flags`, its table printed into the test's log; `hang_s` only
    stops a compile that hangs (the default suite's share takes ~20 s alone on 2 cores, 2-3x that beside the other
    workers)."""
    out = subprocess.run([sys.executable, "tools/compile_kernels.py", *flags, "--json", str(tmp_path / "k.json")],
                         cwd=REPO, capture_output=True, text=True, timeout=hang_s,
                         env={k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"})
    print("\n" + out.stdout)  # the table belongs in the log of a failing run
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    result = json.loads((tmp_path / "k.json").read_text())
    assert result["ok"] and not result["problems"]
    rows = result["rows"]
    assert all(r["error"] is None and r["spills"] == 0 and 0 < r["registers"] <= 200 for r in rows)
    tool = load_tool("compile_kernels")
    sizes = {name for name, *_ in tool.shapes()}  # every size of both ladders launches every kernel
    for kernel in tool.KERNELS:
        assert set(",".join(r["sizes"] for r in rows if r["kernel"] == kernel).split(",")) == sizes
    return rows


def product(tool, *, n: bool = True) -> set[tuple]:
    """(kernel, arch, dtype[, n], scheme, probe) of every variant the model can launch: gaussian probes only
    through the direct-query (fused) kernels."""
    return {(kernel, arch, dtype, *((f"n{k}",) if n else ()), scheme, probe)
            for kernel, arch, dtype, k, scheme, probe in itertools.product(
                tool.KERNELS, tool.ARCHS, ("bf16", "float32"), tool.NS, ("central", "forward"),
                ("rademacher", "gaussian"))
            if probe == "rademacher" or kernel.startswith("fused")}


def test_every_kernel_meets_every_factor_on_both_targets(tmp_path):
    """The default suite's share (--cover): each kernel at every dtype x scheme x probe on sm_90 and on sm_80, and
    at every n on each, compiled without an error, a spill or more than 200 registers; the heaviest variant
    among them."""
    rows = compiled(tmp_path, "--cover", hang_s=900)
    tool = load_tool("compile_kernels")
    seen = {(r["kernel"], r["arch"], *r["variant"].split()[:4]) for r in rows}
    assert {(k, a, d, s, p) for k, a, d, _, s, p in seen} == product(tool, n=False)
    assert {(k, a, n) for k, a, _, n, _, _ in seen} == {(k, a, f"n{n}") for k, a in itertools.product(
        tool.KERNELS, tool.ARCHS) for n in tool.NS}
    assert seen < product(tool) and len(seen) < len(product(tool)) / 2
    heaviest = {a for k, a, _, n, _, p in seen if (k, n, p) == ("fused.swiglu", "n64", "gaussian")}  # ~190 registers
    assert heaviest == set(tool.ARCHS)


@pytest.mark.kernels
@pytest.mark.slow  # so that `-m "not slow"`, which replaces the default `-m 'not kernels'`, leaves it out too
def test_every_kernel_variant_compiles_for_sm90_and_sm80(tmp_path):
    """The full product (`pytest -m kernels`; tools/gpu_check.sh compiles it on a GPU too): every kernel x dtype
    x n x scheme x probe x architecture."""
    rows = compiled(tmp_path, hang_s=1800)
    seen = {(r["kernel"], r["arch"], *r["variant"].split()[:4]) for r in rows}
    assert seen == product(load_tool("compile_kernels"))


def test_a_planted_kernel_error_or_spill_fails_the_check(monkeypatch, capsys):
    import triton
    import triton.language as tl

    from zbpscale.zbp import closed_triton

    tool = load_tool("compile_kernels")

    @triton.jit
    def planted(x_ptr, g_ptr, out_ptr, w_ptr, h, row0, ce, se, one_minus_ce, n, eps, CENTRAL: tl.constexpr,
                N_PAD: tl.constexpr, BLOCK: tl.constexpr, HASH: tl.constexpr):
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
