"""`zbpscale plot` against the data it was given.

Compared: the power-law fit with a ladder built from a known gap = a * N^b (exponent and prefactor recovered;
the exponent's standard error with the closed form of simple regression); the gap figure's points with the
summary (one per size per ZBP arm that has a val loss); the files with their formats (PNG and PDF magic
bytes, the PNG decoded by matplotlib); runs without a val loss with the table (listed) and the figures
(left out, with a note); runs in progress with their markings.
"""

import dataclasses
import json
import math
from pathlib import Path

import numpy as np
import pytest

from zbpscale.collect import FIELDS, RunSummary, collect
from zbpscale.model import SIZES, n_params
from zbpscale.plot import fit_power_law, plot

PNG, PDF = b"\x89PNG\r\n\x1a\n", b"%PDF-"


def check_files(files) -> None:
    import matplotlib.image

    for path in files:
        data = Path(path).read_bytes()
        if path.suffix == ".png":
            assert data.startswith(PNG), path
            image = matplotlib.image.imread(path)
            assert image.ndim == 3 and image.shape[0] > 100 and image.shape[1] > 100
        elif path.suffix == ".pdf":
            assert data.startswith(PDF) and data.rstrip().endswith(b"%%EOF"), path


@pytest.fixture(scope="module")
def smoke_plot(results_sweep, tmp_path_factory):
    bundle = tmp_path_factory.mktemp("plot") / "smoke"
    rows = collect(results_sweep, bundle, log=lambda line: None)
    return bundle, rows, plot(bundle, log=lambda line: None)


def test_figures_of_a_real_sweep_are_valid_png_and_pdf(smoke_plot):
    bundle, rows, figures = smoke_plot
    names = {p.name for p in figures.files}
    for stem in ("loss_curves", "gap_vs_scale", "nsr_c", "rho_k"):
        assert {f"{stem}.png", f"{stem}.pdf"} <= names
    check_files(figures.files)


def test_gap_points_are_one_per_size_per_zbp_arm_with_a_val_loss(smoke_plot):
    bundle, rows, figures = smoke_plot
    final = {(r["size"], r["arm"]): r["final_val_loss"] for r in rows}
    assert [(p.arm, p.size) for p in figures.gap_points] == [("zbp_n4", "nano"), ("zbp_n4", "tiny")]
    for p in figures.gap_points:
        assert p.gap == pytest.approx(final[(p.size, p.arm)] - final[(p.size, "bp")])
        assert p.params == n_params(dataclasses.replace(SIZES[p.size], max_seq_len=32)) and p.final
    assert figures.fits == {}  # two sizes: points only
    assert any("zbp_n4: no power-law fit" in n for n in figures.notes)


def test_runs_without_val_loss_are_in_the_table_and_noted_not_drawn(smoke_plot):
    bundle, rows, figures = smoke_plot
    table = (bundle / "table.md").read_text()
    body = [line for line in table.splitlines() if line.startswith("| ") and not line.startswith("| run")]
    assert [line.split(" | ")[0][2:] for line in body] == [r["run"] for r in rows]  # every run, new ones too
    assert "| nano-zbp_n8_fwd | nano |" in table and "| new |" in table
    assert any("not in the figures: nano-zbp_n8_fwd (new), tiny-zbp_n8_fwd (new)" in n
               for n in figures.notes)
    assert "![gap_vs_scale](figures/gap_vs_scale.png)" in table


# ---------------------------------------------------------------- a synthetic ladder with a known gap

A, B = 40.0, -0.3  # gap = A * N^B


def row(size: str, arm: str, loss: float | None, status: str = "complete") -> dict:
    cfg = SIZES[size]
    fields = {f: None for f in FIELDS}
    fields.update(run=f"{size}-{arm}", size=size, arm=arm, seed=0, params=n_params(cfg),
                  params_non_embedding=n_params(cfg, embeddings=False), status=status,
                  in_progress=status != "complete", steps=10, tokens=1000, final_val_loss=loss,
                  final_val_tokens=1000 if loss else None, best_val_loss=loss, wall_time_s=60.0, gpu_hours=0.5,
                  attempts=1, timeouts=0, preemptions=0)
    return dataclasses.asdict(RunSummary(**fields))


def write_bundle(folder: Path, rows: list[dict]) -> Path:
    for r in rows:
        run = folder / "runs" / r["run"]
        run.mkdir(parents=True)
        if r["final_val_loss"] is not None:
            evals = [{"kind": "eval", "time": 0.0, "step": s, "tokens": 100 * (s + 1),
                      "val_loss": r["final_val_loss"] + 1.0 / (s + 1)} for s in range(9)]
            evals.append({"kind": "eval", "time": 0.0, "step": 9, "tokens": 1000, "val_loss": r["final_val_loss"]})
            (run / "metrics.jsonl").write_text("".join(json.dumps(e) + "\n" for e in evals))
    (folder / "summary.json").write_text(json.dumps({"sweep": "ladder", "fields": FIELDS, "runs": rows}))
    return folder


def test_power_law_fit_recovers_the_exponent():
    params = [n_params(SIZES[s]) for s in ("nano", "tiny", "mini", "s60")]
    exact = fit_power_law(params, [A * n ** B for n in params])
    assert exact.b == pytest.approx(B, abs=1e-9) and exact.a == pytest.approx(A, rel=1e-7)
    assert exact.b_se == pytest.approx(0, abs=1e-7)

    noise = [1.05, 0.97, 1.02, 0.98]
    fit = fit_power_law(params, [A * n ** B * e for n, e in zip(params, noise)])
    x, y = np.log(params), np.log([A * n ** B * e for n, e in zip(params, noise)])
    slope, intercept = np.polyfit(x, y, 1)
    rss = np.sum((y - (intercept + slope * x)) ** 2)
    se = math.sqrt(rss / (len(x) - 2) / np.sum((x - x.mean()) ** 2))  # closed form of simple regression
    assert fit.b == pytest.approx(slope) and fit.b_se == pytest.approx(se)
    assert abs(fit.b - B) < 3 * fit.b_se
    low, high = fit.band(params)
    assert np.all(low < high) and np.all(low <= fit.a * np.asarray(params, float) ** fit.b)


def test_gap_figure_fits_the_ladder_and_marks_runs_in_progress(tmp_path):
    sizes = ("nano", "tiny", "mini")
    rows = [row(s, "bp", 3.0) for s in sizes]
    rows += [row(s, "zbp_n16", 3.0 + A * n_params(SIZES[s]) ** B,
                 status="running" if s == "mini" else "complete") for s in sizes]
    rows += [row("nano", "zbp_n64", 3.01), row("tiny", "zbp_n64", None, status="queued")]
    figures = plot(write_bundle(tmp_path / "ladder", rows), log=lambda line: None)

    points = [(p.arm, p.size, p.final) for p in figures.gap_points]
    assert points == [("zbp_n16", "nano", True), ("zbp_n16", "tiny", True), ("zbp_n16", "mini", False),
                      ("zbp_n64", "nano", True)]
    assert set(figures.fits) == {"zbp_n16"}
    assert figures.fits["zbp_n16"].b == pytest.approx(B, abs=1e-6)
    check_files(figures.files)
    table = (tmp_path / "ladder" / "table.md").read_text()
    assert "| mini-zbp_n16 | mini |" in table and "running (in progress)" in table
    assert "| tiny-zbp_n64 | tiny |" in table and "queued (in progress)" in table
    assert any("tiny-zbp_n64 (queued)" in n for n in figures.notes)
    assert any("zbp_n64: no power-law fit" in n for n in figures.notes)
    assert figures.curves["mini"] == ["bp", "zbp_n16 (running)"] and figures.curves["tiny"] == ["bp", "zbp_n16"]
