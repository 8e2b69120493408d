"""The figures of `zbpscale plot`, read back from their artists, against the bundle they were drawn from.

The bundle is written by the test: two sizes x three arms x three seeds, each run with eight eval records and a
diag record, one run still running, and one seed (tiny-bp-s2) with a spike at its first eval far above the other
curves. Compared: each loss panel's legend with the arms of its size (one entry per arm, the seeds light lines and
their mean bold); each panel's y limits with the quantiles of its points (above the bulk, below the spike) and the
spike with its ^ marker, annotation and note; rho_k's legends with the arms and the two branch styles, and its
labels with mathtext; every legend's rendered box with every axes' box (no overlap); the stamp's rendered box
with the box of what the figure draws (inside it, and on one line where one line fits).
"""

import dataclasses
import json
import math
from pathlib import Path

import numpy as np
import pytest

from conftest import plotted
from zbpscale.results.summary import FIELDS, RunSummary
from zbpscale.run.config import SIZES as PRESETS
from zbpscale.run.config import n_params
from zbpscale.run.folder import run_name

SIZES, ARMS, SEEDS = ("nano", "tiny"), ("bp", "zbp_n16", "zbp_n64"), (0, 1, 2)
FINAL = {"bp": 4.0, "zbp_n16": 4.3, "zbp_n64": 4.1}  # val loss at the last eval; nano 0.5 above
SPIKE = ("tiny-bp-s2", 10.996)  # at its first eval, where the other curves are near 7
RUNNING = "nano-zbp_n64-s1"  # 5 of 8 evals
SOURCE = "/scratch/someone/zbpscale/jobs/figures_of_three_seeds_at_two_sizes"


def row(size: str, arm: str, loss: float, state: str, seed: int, **extra) -> dict:
    """A summary row (as tests/test_plot.py's `row`): the run's size, arm, seed, state and final val loss."""
    fields = {f: None for f in FIELDS}
    fields.update(run=run_name(size, arm, seed), size=size, arm=arm, seed=seed, params=n_params(PRESETS[size]),
                  params_non_embedding=n_params(PRESETS[size], embeddings=False), state=state,
                  in_progress=state == "running", steps=128, tokens=16000, final_val_loss=loss,
                  final_val_tokens=16000, best_val_loss=loss, wall_time_s=60.0, gpu_hours=0.5, attempts=1, timeouts=0,
                  preemptions=0, **extra)
    return dataclasses.asdict(RunSummary(**fields))


def evals(run: str, size: str, arm: str, seed: int) -> list[dict]:
    """Eight evals (five for the running run), 2K tokens (16 steps) apart: val = final + 3 / k - 3 / 8 at the k-th,
    final at the eighth; the spike at the first of SPIKE's run."""
    final = FINAL[arm] + (0.5 if size == "nano" else 0.0) + 0.01 * seed
    out = [{"kind": "eval", "time": 0.0, "step": 16 * k - 1, "tokens": 2000 * k, "val_loss": final + 3.0 / k - 3.0 / 8}
           for k in range(1, 6 if run == RUNNING else 9)]
    if run == SPIKE[0]:
        out[0]["val_loss"] = SPIKE[1]
    return out


def diag(arm: str, seed: int) -> dict:
    """rho_k gains of four layers, attn and mlp branches."""
    blocks = [{"layer": k, "branch": b, "fwd_gain": (0.5 + 0.1 * k) * (1.02 ** seed) * (1.3 if b == "mlp" else 1),
               "bwd_gain": (0.8 + 0.05 * k) * (1.5 if arm == "bp" else 1)} for k in range(4) for b in ("attn", "mlp")]
    return {"kind": "diag", "time": 0.0, "step": 127, "blocks": blocks}


@pytest.fixture(scope="module")
def drawn(tmp_path_factory):
    """plot of the bundle: (Figures, {name: figure as saved})."""
    folder, rows = tmp_path_factory.mktemp("figures") / "three_seeds", []
    for size in SIZES:
        for arm in ARMS:
            for seed in SEEDS:
                extra = {"c_attn": 1.0 + 0.1 * seed, "c_ffn": 0.9} if arm != "bp" else {}
                r = row(size, arm, FINAL[arm], state="running" if run_name(size, arm, seed) == RUNNING else "complete",
                        seed=seed, **extra)
                rows.append(r)
                (folder / "runs" / r["run"]).mkdir(parents=True)
                records = evals(r["run"], size, arm, seed) + [diag(arm, seed)]
                text = "".join(json.dumps(e) + "\n" for e in records)
                (folder / "runs" / r["run"] / "metrics.jsonl").write_text(text)
    assert RUNNING in {r["run"] for r in rows} and SPIKE[0] in {r["run"] for r in rows}
    (folder / "summary.json").write_text(json.dumps({"sweep": "figures", "fields": FIELDS, "runs": rows}))
    (folder / "manifest.json").write_text(json.dumps({"sweep": "figures", "source": SOURCE,
                                                      "collected": "2026-01-02T03:04:05Z", "files": {}}))
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    figures, figs = plotted(folder)
    for fig in figs.values():  # closed after saving: draw again, as saved
        FigureCanvasAgg(fig).draw()
    return figures, figs


def loss_panels(figs) -> dict[str, object]:
    return {ax.get_title().split()[0]: ax for ax in figs["loss_curves"].axes if ax.get_visible()}


def points(ax, *, spike: bool) -> list[float]:
    """The val losses of a panel's runs as written, with or without the spike."""
    size = ax.get_title().split()[0]
    return [e["val_loss"] for arm in ARMS for seed in SEEDS for e in evals(run_name(size, arm, seed), size, arm, seed)
            if spike or (run_name(size, arm, seed), e["val_loss"]) != SPIKE]


def legends(fig) -> list:
    return [ax.get_legend() for ax in fig.axes if ax.get_legend()] + list(fig.legends)


def test_loss_curves_have_one_legend_entry_per_arm(drawn):
    """3 arms x 3 seeds a panel: 3 entries (it was 9), each with its seed count and the running run; each seed a
    light line, the mean of each arm a bold one."""
    figures, figs = drawn
    expected = {"nano": ["bp (3 seeds)", "zbp_n16 (3 seeds)", "zbp_n64 (3 seeds; 1 running)"],
                "tiny": ["bp (3 seeds)", "zbp_n16 (3 seeds)", "zbp_n64 (3 seeds)"]}
    assert figures.curves == expected
    for size, ax in loss_panels(figs).items():
        assert [t.get_text() for t in ax.get_legend().get_texts()] == expected[size]
        light = [line for line in ax.get_lines() if line.get_alpha() == pytest.approx(0.3) and len(line.get_xdata())]
        bold = [line for line in ax.get_lines() if line.get_linewidth() > 2]
        assert len(light) == 9 and len(bold) == 3
        (mean,) = [line for line in bold if line.get_color() == "black"]  # bp: seeds 0.01 apart, 8 shared evals
        assert list(mean.get_xdata()) == [2000 * k for k in range(1, 9)]
        bp = [[e["val_loss"] for e in evals(run_name(size, "bp", s), size, "bp", s)] for s in SEEDS]
        assert np.allclose(mean.get_ydata(), np.mean(bp, axis=0))
        running = [line for line in bold if line.get_linestyle() == "--"]
        assert len(running) == (size == "nano")  # the mean of an arm with a run not complete is dashed


def test_the_y_axis_of_loss_curves_is_set_by_the_bulk_and_the_spike_is_marked(drawn):
    """tiny: the upper limit lies below the spike (10.996) and above the 90th percentile of the other points; the
    spike is a ^ at the top edge in bp's color, annotated and named in a note. nano (no spike): every point shows."""
    figures, figs = drawn
    panels = loss_panels(figs)
    low, top = panels["tiny"].get_ylim()
    rest = points(panels["tiny"], spike=False)
    assert np.quantile(rest, 0.9) <= top < SPIKE[1] and low <= min(rest)
    low, high = panels["nano"].get_ylim()
    assert low <= min(points(panels["nano"], spike=True)) and high >= max(points(panels["nano"], spike=True))

    (clip,) = figures.clipped
    assert (clip.run, clip.tokens, clip.step, clip.val_loss, clip.size) == (SPIKE[0], 2000, 16, SPIKE[1], "tiny")
    (marker,) = [line for line in panels["tiny"].get_lines() if line.get_marker() == "^"]
    assert list(marker.get_xdata()) == [2000] and marker.get_color() == "black"
    assert [t.get_text() for t in panels["tiny"].texts] == ["tiny-bp-s2: 11.00 at 2K tok ↑"]
    assert not [line for line in panels["nano"].get_lines() if line.get_marker() == "^"] and not panels["nano"].texts
    (note,) = [n for n in figures.notes if n.startswith("loss_curves:")]
    assert note == (f"loss_curves: the y axis of tiny is clipped at {top:.2f}; above it: tiny-bp-s2 (11.00 after 16 "
                    "steps)")


def test_no_legend_lies_over_an_axes(drawn):
    """Every legend of every figure, as rendered, lies outside every axes' box (the plot areas)."""
    _, figs = drawn
    assert set(figs) == {"loss_curves", "gap_vs_scale", "nsr_c", "rho_k"}
    for name, fig in figs.items():
        renderer = fig.canvas.get_renderer()
        assert legends(fig), name
        for box in (leg.get_window_extent(renderer) for leg in legends(fig)):
            for ax in (a for a in fig.axes if a.get_visible()):
                assert not box.overlaps(ax.get_window_extent(renderer)), (name, ax.get_title())


def test_rho_k_has_one_entry_per_arm_and_mathtext_labels(drawn):
    """One legend per size (column): the 3 arms and the attn and mlp styles; labels and titles in mathtext (they
    rendered: the figure was drawn), no literal J_k^T; each arm's seeds light and their mean bold."""
    _, figs = drawn
    fig = figs["rho_k"]
    arms = {"nano": ["bp (3 seeds)", "zbp_n16 (3 seeds)", "zbp_n64 (3 seeds; 1 running)"],
            "tiny": ["bp (3 seeds)", "zbp_n16 (3 seeds)", "zbp_n64 (3 seeds)"]}
    found = legends(fig)  # the top row's, by size
    assert [[t.get_text() for t in leg.get_texts()] for leg in found] == \
        [arms[size] + ["attn branch", "mlp branch"] for size in SIZES]
    for ax in fig.axes:
        for text in (ax.get_ylabel(), ax.get_title(), ax.get_xlabel()):
            assert "$" in text and "J_k^T" not in text, text
        light = [line for line in ax.get_lines() if line.get_alpha() == pytest.approx(0.3)]
        bold = [line for line in ax.get_lines() if line.get_linewidth() > 2 and len(line.get_xdata())]
        assert len(light) == 3 * 3 * 2 and len(bold) == 3 * 2  # arms x seeds x branches; arms x branches
    assert any(r"J_k^\top" in ax.get_ylabel() for ax in fig.axes)


def test_the_stamp_fits_the_width_of_what_the_figure_draws(drawn):
    """The stamp (with a long source path) lies within the box the figure is saved with, measured without it, and
    is one line when one line of 4.5 pt fits that width; the gap figure's remarks lie within that box too, clear
    of its legend and of the plot area."""
    _, figs = drawn
    for name, fig in figs.items():
        renderer = fig.canvas.get_renderer()
        (stamp,) = [t for t in fig.texts if t.get_gid() == "stamp"]
        assert SOURCE in stamp.get_text().replace("\n", ""), name
        stamp.set_visible(False)
        drawn_box = fig.get_tightbbox(renderer).transformed(fig.dpi_scale_trans)  # inches -> pixels
        one_line = fig.text(0, 0, stamp.get_text().replace("\n", " "), fontsize=4.5)
        if one_line.get_window_extent(renderer).width <= drawn_box.width:
            assert "\n" not in stamp.get_text(), name
        one_line.remove()
        stamp.set_visible(True)
        box = stamp.get_window_extent(renderer)
        assert drawn_box.x0 - 1 <= box.x0 and box.x1 <= drawn_box.x1 + 1, (name, box, drawn_box)
        if name == "gap_vs_scale":
            ax = fig.axes[0]
            (remarks,) = ax.texts
            assert "needs >= 3 sizes" in remarks.get_text()
            rbox = remarks.get_window_extent(renderer)
            assert drawn_box.x0 - 1 <= rbox.x0 and rbox.x1 <= drawn_box.x1 + 1
            assert not rbox.overlaps(ax.get_legend().get_window_extent(renderer))
            assert not rbox.overlaps(ax.get_window_extent(renderer))


def test_the_figures_files_are_written(drawn):
    figures, _ = drawn
    names = {Path(p).name for p in figures.files}
    assert {f"{n}.{e}" for n in ("loss_curves", "gap_vs_scale", "nsr_c", "rho_k") for e in ("png", "pdf")} <= names


def test_a_run_whose_every_loss_is_not_a_number_sets_no_axis_and_is_no_crash(tmp_path):
    """A panel whose first run (bp, drawn first) stopped at a non-finite loss, its one eval nan, beside a ZBP run that
    learned: plot and report failed ('Axis limits cannot be NaN or Inf': the axis took min() of a nan first). Now
    the panel's y axis is the one the ZBP run alone gives (compared with a bundle of it alone), and summarize's best
    val loss is the lowest number whatever the order of the evals."""
    from zbpscale.results.summary import summarize

    def bundle(folder: Path, with_nan: bool) -> Path:
        rows = [row("tiny", "bp", math.nan, "failed", 0)] if with_nan else []
        rows.append(row("tiny", "zbp_n16", 3.2, "complete", 0))
        for r in rows:
            (folder / "runs" / r["run"]).mkdir(parents=True)
            losses = [math.nan] if r["arm"] == "bp" else [4.0, 3.5, 3.2]
            text = "".join(json.dumps({"kind": "eval", "time": 0.0, "step": 15 * (i + 1) - 1, "tokens": 960 * (i + 1),
                                       "val_loss": v}) + "\n" for i, v in enumerate(losses))
            (folder / "runs" / r["run"] / "metrics.jsonl").write_text(text)
        (folder / "summary.json").write_text(json.dumps({"sweep": "nan", "fields": FIELDS, "runs": rows}))
        return folder

    _, figs = plotted(bundle(tmp_path / "nan", True))
    _, alone = plotted(bundle(tmp_path / "alone", False))
    assert loss_panels(figs)["tiny"].get_ylim() == loss_panels(alone)["tiny"].get_ylim()

    run = tmp_path / "jobs" / "nan" / "tiny-bp"
    run.mkdir(parents=True)
    for order in ([math.nan, 7.6, 7.1], [7.6, 7.1, math.nan]):
        (run / "metrics.jsonl").write_text("".join(json.dumps({"kind": "eval", "time": float(i), "step": i,
                                                               "tokens": 64 * (i + 1), "val_loss": v}) + "\n"
                                                   for i, v in enumerate(order)))
        summary = summarize(run, name="tiny-bp", size="tiny", arm="bp", seed=0, state=("failed", None))
        assert summary.best_val_loss == 7.1
