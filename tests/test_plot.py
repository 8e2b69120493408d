"""`zbpscale plot` against the data it was given.

Compared: the power-law fit with a ladder built from a known gap = a * N^b (exponent and prefactor recovered;
the exponent's standard error with the closed form of simple regression); the gap figure's points with the
summary (one per size per ZBP arm that has a val loss); the files with their formats (PNG and PDF magic
bytes, the PNG decoded by matplotlib); runs without a val loss with the table (listed) and the figures
(left out, with a note); runs in progress with their markings. Through the console script, on run folders
written by the test: a gap with the val losses the test wrote at the latest eval both runs made (not their
last ones), the status words with the steps written, and the one line `plot` prints for a bundle without
evals with what its configs say about diag_every. With seeds: the table over seeds (mean, sample sd and n of the
final and best val losses and of the gap, each seed against bp of its own seed) with numbers worked by hand on
run folders of 3 seeds; the gap fit with the mean of the seeds' own least-squares lines; the legends with what
the error bars and the band are, and "one seed" where there is one.
"""

import dataclasses
import json
import math
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from conftest import config_json, plotted, trainer_env
from zbpscale.errors import ConfigError
from zbpscale.results import plot as plot_module
from zbpscale.results.bundle import Bundle
from zbpscale.results.collect import collect
from zbpscale.results.gaps import gap_points, val_curves
from zbpscale.results.plot import plot
from zbpscale.results.summary import FIELDS, RunSummary
from zbpscale.run.config import SIZES, n_params
from zbpscale.run.folder import run_name

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
    final = {(r.size, r.arm): r.final_val_loss for r in rows}
    assert [(p.arm, p.size) for p in figures.gap_points] == [("zbp_n4", "nano"), ("zbp_n4", "tiny")]
    for p in figures.gap_points:
        assert p.gap == pytest.approx(final[(p.size, p.arm)] - final[(p.size, "bp")])
        assert p.params == n_params(dataclasses.replace(SIZES[p.size], max_seq_len=32), embeddings=False) and p.final
    assert figures.fits == {}  # two sizes: points only
    assert any("zbp_n4: no power-law fit" in n for n in figures.notes)


def test_runs_without_val_loss_are_in_the_table_and_noted_not_drawn(smoke_plot):
    bundle, rows, figures = smoke_plot
    table = (bundle / "table.md").read_text()
    runs = table.split("## Fits and tests")[0]  # the per-run table, not the fits' tables after it
    body = [line for line in runs.splitlines() if line.startswith("| ") and not line.startswith("| run")]
    assert [line.split(" | ")[0][2:] for line in body] == [r.run for r in rows]  # every run, new ones too
    assert "| nano-zbp_n8_fwd | nano |" in table and "| new |" in table
    assert any("not in the figures: nano-zbp_n8_fwd (new), tiny-zbp_n8_fwd (new)" in n
               for n in figures.notes)
    assert "![gap_vs_scale](figures/gap_vs_scale.png)" in table


def test_a_real_one_seed_sweep_says_one_seed_on_its_figures(smoke_plot, tmp_path):
    """#35: collect + plot of a sweep of one seed (trained for real): the gap figure's legend and the NSR figure
    say "one seed", and table.md has no table over seeds."""
    bundle, _, _ = smoke_plot
    figures, drawn = drawn_plot(None, [], bundle=bundle)
    assert "one seed: no error bars" in legend(drawn["gap_vs_scale"].axes[0])
    assert drawn["gap_vs_scale"].axes[0].get_title().endswith("(one seed)")
    assert drawn["nsr_c"].get_suptitle().startswith("one seed")
    assert "Over seeds" not in (bundle / "table.md").read_text() and figures.gap_points


# ---------------------------------------------------------------- a synthetic ladder with a known gap

A, B = 40.0, -0.3  # gap = A * N^B


def row(size: str, arm: str, loss: float | None, state: str = "complete", seed: int = 0, **extra) -> dict:
    cfg = SIZES[size]
    fields = {f: None for f in FIELDS}
    fields.update(run=run_name(size, arm, seed), size=size, arm=arm, seed=seed, params=n_params(cfg),
                  params_non_embedding=n_params(cfg, embeddings=False), state=state,
                  in_progress=state in ("running", "queued"), steps=10 if loss else 0, tokens=1000 if loss else 0,
                  final_val_loss=loss,
                  final_val_tokens=1000 if loss else None, best_val_loss=loss, wall_time_s=60.0, gpu_hours=0.5,
                  attempts=1, timeouts=0, preemptions=0, **extra)
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


@pytest.mark.parametrize("params, embeddings", [("non-embedding", False), ("total", True)])
def test_gap_figure_fits_the_full_budget_points_and_marks_runs_in_progress(tmp_path, params, embeddings):
    """Gaps that follow A N^B exactly, N non-embedding (the default) or total parameters: the fit on that N
    recovers B; the axis says which N it is."""
    sizes = ("nano", "tiny", "mini", "s60")
    rows = [row(s, "bp", 3.0) for s in sizes]
    rows += [row(s, "zbp_n16", 3.0 + A * n_params(SIZES[s], embeddings=embeddings) ** B,
                 state="running" if s == "mini" else "complete") for s in sizes]
    rows += [row("nano", "zbp_n64", 3.01), row("tiny", "zbp_n64", None, state="queued")]
    figures, drawn = plotted(write_bundle(tmp_path / "ladder", rows), params=params)

    points = [(p.arm, p.size, p.final) for p in figures.gap_points]
    assert points == [("zbp_n16", "nano", True), ("zbp_n16", "tiny", True), ("zbp_n16", "mini", False),
                      ("zbp_n16", "s60", True), ("zbp_n64", "nano", True)]
    assert all(p.params == n_params(SIZES[p.size], embeddings=embeddings) for p in figures.gap_points)
    assert set(figures.fits) == {"zbp_n16"}
    assert figures.fits["zbp_n16"].n == 3  # the running mini is drawn hollow, not fitted
    assert figures.fits["zbp_n16"].b == pytest.approx(B, abs=1e-6)
    assert drawn["gap_vs_scale"].axes[0].get_xlabel() == plot_module.PARAMS[params][1]
    check_files(figures.files)
    table = (tmp_path / "ladder" / "table.md").read_text()
    assert "| mini-zbp_n16 | mini |" in table and "| running at step 10 |" in table
    assert "| tiny-zbp_n64 | tiny |" in table and "| queued |" in table
    assert any("tiny-zbp_n64 (queued)" in n for n in figures.notes)
    assert any("zbp_n64: no power-law fit" in n for n in figures.notes)
    assert figures.curves["mini"] == ["bp", "zbp_n16 (running)"] and figures.curves["tiny"] == ["bp", "zbp_n16"]


def test_the_stamp_never_covers_a_label_nor_is_cut(smoke_plot, tmp_path):
    """Every figure of a real sweep's bundle, as saved: the stamp (what made the figure) overlaps no title, axis
    label or tick label, and the PNG is wide enough to hold it whole (it used to sit on the left x label and
    be cut at the right edge of one-panel figures)."""
    import matplotlib.image
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    bundle, _, _ = smoke_plot
    _, drawn = plotted(bundle)
    assert set(drawn) == {"loss_curves", "gap_vs_scale", "nsr_c", "rho_k"}
    for name, fig in drawn.items():
        FigureCanvasAgg(fig).draw()  # the figure was closed after saving: draw it again, as saved
        renderer = fig.canvas.get_renderer()
        (stamp,) = [t for t in fig.texts if t.get_gid() == "stamp"]
        box = stamp.get_window_extent(renderer)
        for ax in (a for a in fig.axes if a.get_visible()):  # its box holds the title, labels and drawn ticks
            assert not box.overlaps(ax.get_tightbbox(renderer)), (name, ax.get_title())
        png = matplotlib.image.imread(bundle / "figures" / f"{name}.png")
        assert png.shape[1] >= box.width * 150 / fig.dpi and box.y1 <= fig.bbox.y0 + 1  # whole, below the axes


# ---------------------------------------------------------------- through the console script, on run folders

TOKENS_PER_STEP = 64  # batch 2 x 32 tokens


def make_run(sweep: Path, name: str, *, steps: int, done: int, eval_every: int, val, end: str = "completed",
             diag_every: int = 4, seed: int = 0) -> dict[int, float]:
    """A run folder as the trainer and a local job leave it: `done` of `steps` steps, an eval every `eval_every`
    steps (and at the last) with val loss val(steps done); `end`: why its job ended (COMPLETE when all steps are
    done). Returns {steps done: val loss}, as written."""
    run, t0 = sweep / name, time.time() - 3600
    run.mkdir(parents=True)
    config = json.loads(config_json(steps=steps, global_batch=2, eval_every=eval_every, diag_every=diag_every,
                                    device="cpu", seed=seed))
    (run / "config.json").write_text(json.dumps(config))
    derived = {"params": 1000, "params_non_embedding": 500, "total_steps": steps, "tokens_per_step": TOKENS_PER_STEP,
               "total_tokens": steps * TOKENS_PER_STEP}
    records = [{"kind": "start", "time": t0, "step": 0, "world_size": 1, "config": config, "derived": derived}]
    evals = {}
    for s in range(done):
        tokens = (s + 1) * TOKENS_PER_STEP
        records.append({"kind": "train", "time": t0 + s, "step": s, "tokens": tokens, "loss": 7.0 - s / 10})
        if (s + 1) % eval_every == 0 or s + 1 == steps:
            evals[s + 1] = val(s + 1)
            records.append({"kind": "eval", "time": t0 + s, "step": s, "tokens": tokens, "val_loss": evals[s + 1]})
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    attempts = [{"event": "submitted", "time": t0 - 10, "job_id": f"local-{name}", "executor": "local"},
                {"event": "start", "time": t0, "job_id": f"local-{name}", "executor": "local"},
                {"event": "end", "time": t0 + done, "job_id": f"local-{name}", "why": end, "reason": end}]
    (run / "attempts.jsonl").write_text("".join(json.dumps(a) + "\n" for a in attempts))
    if done == steps:
        (run / "COMPLETE").write_text("{}\n")
    return evals


def zbpscale(*args, cwd: Path) -> subprocess.CompletedProcess:
    out = subprocess.run(["zbpscale", *map(str, args)], cwd=cwd, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    return out


def table_rows(bundle: Path) -> dict[str, dict[str, str]]:
    """The rows of table.md's per-run table (after the table over seeds, when there is one), by run."""
    text = (bundle / "table.md").read_text().split("Runs:")[-1].split("## Fits and tests")[0]
    lines = [line for line in text.splitlines() if line.startswith("| ")]
    head = [h.strip() for h in lines[0].strip("|").split("|")]
    return {cells[0]: dict(zip(head, cells)) for cells in
            ([c.strip() for c in line.strip("|").split("|")] for line in lines[1:])}


def test_a_cancelled_run_is_compared_with_bp_at_equal_tokens(tmp_path):
    """The issue's table: zbp cancelled at 9/12 against bp done 12/12 showed the gap of their last val losses
    and 'cancelled (in progress)'."""
    sweep = tmp_path / "jobs" / "cut"
    bp = make_run(sweep, "nano-bp", steps=12, done=12, eval_every=2, val=lambda s: 5.0 - s / 10)
    zbp = make_run(sweep, "nano-zbp_n4", steps=12, done=9, eval_every=2, val=lambda s: 6.0 - s / 20, end="cancelled")
    make_run(sweep, "tiny-bp", steps=10, done=10, eval_every=5, val=lambda s: 4.0 - s / 10)  # evals at 5, 10
    make_run(sweep, "tiny-zbp_n4", steps=10, done=7, eval_every=4, val=lambda s: 5.0, end="cancelled")  # at 4
    zbpscale("collect", "jobs/cut", "--out", "results/cut", cwd=tmp_path)
    zbpscale("plot", "results/cut", cwd=tmp_path)
    bundle = tmp_path / "results" / "cut"

    summary = {r.run: r for r in Bundle(bundle).read_summary()}
    assert (summary["nano-zbp_n4"].state, summary["nano-zbp_n4"].in_progress) == ("cancelled", False)
    table = table_rows(bundle)
    assert table["nano-zbp_n4"]["state"] == "cancelled at 9/12" and table["nano-bp"]["state"] == "complete"
    assert "in progress" not in (bundle / "table.md").read_text()
    both = max(set(bp) & set(zbp))  # 8 steps: zbp's last eval, which bp also made
    assert table["nano-zbp_n4"]["gap vs bp"] == f"{zbp[both] - bp[both]:+.4f} at {both}/12"
    assert table["tiny-zbp_n4"]["gap vs bp"] == "n/c"  # evals at 4 steps against 5 and 10: none in common

    rows = Bundle(bundle).read_summary()
    points, apart = gap_points(rows, val_curves(bundle, rows))
    assert [(p.size, p.tokens, p.final) for p in points] == [("nano", both * TOKENS_PER_STEP, False)]
    assert points[0].gap == pytest.approx(zbp[both] - bp[both]) and apart == ["zbp_n4 at tiny"]


def test_one_size_says_on_the_gap_figure_that_a_fit_needs_three(tmp_path):
    _, drawn = plotted(write_bundle(tmp_path / "one", [row("tiny", "bp", 3.0), row("tiny", "zbp_n4", 3.4)]))
    ax = drawn["gap_vs_scale"].axes[0]
    assert any("needs >= 3 sizes" in t.get_text() for t in ax.texts)
    low, high = ax.get_xlim()
    assert math.sqrt(low * high) == pytest.approx(n_params(SIZES["tiny"], embeddings=False))  # in the middle
    assert high / low == pytest.approx(10.0)


@pytest.mark.parametrize("diag_every", [1000, 0])
def test_a_bundle_without_evals_gets_one_truthful_line(tmp_path, diag_every):
    sweep = tmp_path / "jobs" / "early"
    for name in ("nano-bp", "nano-zbp_n4"):  # started, not yet at their first eval
        make_run(sweep, name, steps=4000, done=3, eval_every=500, val=None, end="timeout", diag_every=diag_every)
    zbpscale("collect", "jobs/early", "--out", "results/early", cwd=tmp_path)
    out = zbpscale("plot", "results/early", cwd=tmp_path)
    lines = out.stdout.splitlines()
    assert len(lines) == 1 and out.stderr == ""
    assert lines[0].startswith("wrote results/early/table.md and claims.md; no figures: no run has an eval or diag "
                               "record yet") and (tmp_path / "results" / "early" / "claims.md").is_file()
    assert not (tmp_path / "results" / "early" / "figures").exists()
    assert ("diag_every" in lines[0]) == (diag_every == 0)
    notes = (tmp_path / "results" / "early" / "table.md").read_text()
    assert ("set diag_every" in notes) == (diag_every == 0)


def test_runs_trained_by_hand_into_folders_without_a_dash_are_collected_and_plotted(tmp_path, data_dir):
    """`python -m zbpscale.train --run-dir G/try/run ...` (a folder named without a dash, no sweep), then `zbpscale
    collect G/try` and `zbpscale plot`: plot raised IndexError (it cut the size off the run's name). Compared: each
    summary row's size and arm with the model the trainer recorded in its config.json (the size preset and arm
    that give that model), its final val loss and the gap with the runs' own last eval records, and each loss
    curve's label with its folder's name."""
    from zbpscale.run.config import TrainConfig, model_config
    from zbpscale.run.records import read_records
    from zbpscale.zbp.config import arm_zbp_config

    runs = {"run": "bp", "probes": "zbp_n4"}
    for name, arm in runs.items():
        trained = subprocess.run(
            [sys.executable, "-m", "zbpscale.train", "--run-dir", f"G/try/{name}", "--size", "nano", "--arm", arm,
             "--data", str(data_dir), "--steps", "4", "--set", "global_batch=2", "--set", "eval_every=2",
             "--set", "eval_batches=1", "--set", "ckpt_every=0", "--set", "ckpt_every_s=0", "--set", "device=cpu"],
            cwd=tmp_path, env=trainer_env(1), capture_output=True, text=True, timeout=300)
        assert trained.returncode == 0, trained.stdout + trained.stderr
    zbpscale("collect", "G/try", "--out", "results/try", cwd=tmp_path)
    figures = plot(tmp_path / "results" / "try", log=lambda line: None)

    rows = {r.run: r for r in Bundle(tmp_path / "results" / "try").read_summary()}
    last_val = {}
    for name, arm in runs.items():
        folder = tmp_path / "G" / "try" / name
        recorded = TrainConfig.from_dict(json.loads((folder / "config.json").read_text()))
        row = rows[name]
        assert (row.arm, row.seed, row.state) == (arm, recorded.seed, "complete")
        assert recorded.model == model_config(row.size, max_seq_len=recorded.seq_len, zbp=arm_zbp_config(row.arm))
        last_val[name] = [r["val_loss"] for r in read_records(folder) if r["kind"] == "eval"][-1]
        assert row.final_val_loss == last_val[name]
    assert figures.curves == {"nano": ["run", "probes"]}  # bp first; each line named by its folder
    (point,) = figures.gap_points
    assert (point.size, point.arm, point.final) == ("nano", "zbp_n4", True)
    assert point.gap == pytest.approx(last_val["probes"] - last_val["run"])
    check_files(f for f in figures.files if f.suffix in (".png", ".pdf"))


def test_the_docs_copy_of_the_mini_ladder_shows_only_files_that_exist():
    """docs/mini_ladder/table.md linked nsr_c.png and rho_k.png, which were not there (#24): every image the docs
    copy and the README show exists."""
    import re

    repo = Path(__file__).resolve().parents[1]
    for doc in (repo / "docs" / "mini_ladder" / "table.md", repo / "README.md"):
        links = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", doc.read_text())
        assert links, doc
        for link in links:
            assert (doc.parent / link).is_file(), (doc.name, link)


# ---------------------------------------------------------------- seeds: the table over seeds and the figures

def seeds_table(bundle: Path) -> dict[tuple[str, str], dict[str, str]]:
    """The rows of table.md's first table (the runs over seeds), by (size, arm)."""
    text = (bundle / "table.md").read_text()
    lines = [line for line in text.split("Runs:")[0].splitlines() if line.startswith("| ")]
    head = [h.strip() for h in lines[0].strip("|").split("|")]
    rows = [dict(zip(head, [c.strip() for c in line.strip("|").split("|")])) for line in lines[1:]]
    return {(r["size"], r["arm"]): r for r in rows}


def test_the_table_over_seeds_pairs_each_gap_with_bp_of_its_seed(tmp_path):
    """Run folders of 3 seeds (nano: every seed of both arms; tiny: zbp_n4 of seeds 0, 1 and 3, bp of 0, 1, 2;
    micro: zbp_n4 of seed 0 alone),
    collected and plotted: each size and arm's mean ± sample sd and n of the final and best val losses, and of
    the gap taken seed by seed against bp of the same seed, equal the numbers worked by hand."""
    sweep = tmp_path / "jobs" / "seeds"
    final = {("nano", "bp"): (3.0, 3.1, 2.9), ("nano", "zbp_n4"): (3.5, 3.4, 3.6),
             ("tiny", "bp"): (3.0, 3.2, 2.6), ("tiny", "zbp_n4"): (3.3, 3.6, None, 3.9), ("micro", "zbp_n4"): (3.2,)}
    for (size, arm), losses in final.items():
        for seed, loss in enumerate(losses):
            if loss is not None:  # val at step 2 below the final one by 0.1 x (seed + 1): the best val loss
                make_run(sweep, run_name(size, arm, seed), steps=4, done=4, eval_every=2, seed=seed,
                         val=lambda s, loss=loss, seed=seed: loss - 0.1 * (seed + 1) if s == 2 else loss)
    rows = collect(sweep, tmp_path / "out", log=lambda line: None)
    assert [(r.run, r.seed) for r in rows if r.size == "tiny" and r.arm == "zbp_n4"] == \
        [("tiny-zbp_n4", 0), ("tiny-zbp_n4-s1", 1), ("tiny-zbp_n4-s3", 3)]
    figures = plot(tmp_path / "out", log=lambda line: None)
    table = seeds_table(tmp_path / "out")

    # by hand: nano bp 3.0, 3.1, 2.9 -> mean 3.0, sd sqrt((0 + 0.01 + 0.01) / 2) = 0.1; best = final - 0.1 (s + 1):
    # 2.9, 2.9, 2.6 -> mean 2.8, sd sqrt((0.01 + 0.01 + 0.04) / 2) = sqrt(0.03)
    assert table[("nano", "bp")]["seeds"] == "3" and table[("nano", "bp")]["complete"] == "3/3"
    assert table[("nano", "bp")]["final val"] == "3.0000 ± 0.1000"
    assert table[("nano", "bp")]["best val"] == f"2.8000 ± {math.sqrt(0.03):.4f}"
    # nano zbp_n4 - bp, seed by seed: 0.5, 0.3, 0.7 -> +0.5 ± 0.2 (the difference of the means is 0.5 too)
    assert table[("nano", "zbp_n4")]["gap vs bp (same seed)"] == "+0.5000 ± 0.2000"
    # tiny bp 3.0, 3.2, 2.6 -> mean 44 / 15, deviations 1, 4, -5 fifteenths: sd sqrt((1 + 16 + 25) / 2) / 15
    assert table[("tiny", "bp")]["final val"] == f"{44 / 15:.4f} ± {math.sqrt(21) / 15:.4f}"
    # tiny zbp_n4: seeds 0, 1, 3 at 3.3, 3.6, 3.9 -> 3.6 ± 0.3; paired with bp: seeds 0 and 1 only, 0.3 and
    # 0.4 -> +0.35 ± sqrt(0.005) (n=2); unpaired, the means would give 3.6 - 44 / 15 = +0.667
    assert table[("tiny", "zbp_n4")]["final val"] == "3.6000 ± 0.3000"
    assert table[("tiny", "zbp_n4")]["gap vs bp (same seed)"] == f"+0.3500 ± {math.sqrt(0.005):.4f} (n=2)"
    (point,) = [p for p in figures.gap_points if p.size == "tiny"]
    assert point.seeds == (0, 1) and point.gaps == (pytest.approx(0.3), pytest.approx(0.4))
    assert (point.spread.n, point.spread.se) == (2, pytest.approx(math.sqrt(0.005 / 2)))
    (lone,) = [n for n in figures.notes if n.startswith("not in the gap figure, no bp run of the same seed")]
    # a size with no bp run at all is named too (it was left out of the figure and the fits without a word)
    assert lone.endswith(": zbp_n4 at micro (no bp run at that size), zbp_n4 at tiny, seed 3"), lone
    runs = table_rows(tmp_path / "out")  # the per-run table: each run against bp of its own seed
    assert runs["tiny-zbp_n4-s1"]["gap vs bp"] == "+0.4000" and runs["tiny-zbp_n4-s3"]["gap vs bp"] == ""
    assert runs["nano-zbp_n4-s2"]["gap vs bp"] == "+0.7000"


def ladder_rows(seeds: int, noise) -> list[dict]:
    """bp and zbp_n16 at four sizes x `seeds`: bp at 3.0 + 0.01 seed, zbp_n16 above it by A N^B noise[seed][i];
    c_attn 1 + 0.1 seed for the NSR figure."""
    sizes = ("nano", "tiny", "mini", "s60")
    rows = []
    for seed in range(seeds):
        for i, size in enumerate(sizes):
            n = n_params(SIZES[size], embeddings=False)
            rows.append(row(size, "bp", 3.0 + 0.01 * seed, seed=seed))
            rows.append(row(size, "zbp_n16", 3.0 + 0.01 * seed + A * n ** B * noise[seed][i], seed=seed,
                            c_attn=1.0 + 0.1 * seed, c_ffn=1.0))
    return rows


def drawn_plot(folder: Path | None, rows: list[dict], bundle: Path | None = None):
    """plot of the bundle written from `rows` into `folder` (or of `bundle`): (Figures, {name: figure as saved})."""
    return plotted(bundle or write_bundle(folder, rows))


def legend(ax) -> str:
    return " ".join(t.get_text() for t in ax.get_legend().get_texts())


def bands(ax) -> int:
    from matplotlib.collections import PolyCollection

    return sum(isinstance(c, PolyCollection) and any(len(p.vertices) for p in c.get_paths()) for c in ax.collections)


def test_the_gap_figure_with_three_seeds_draws_each_seed_the_mean_and_the_band(tmp_path):
    """With noise this small the Huber fit is least squares: the mean of the seeds' own lines (closed form,
    np.polyfit per seed), its bootstrap s.e. their sd / sqrt(3) within the resampling's error; the legend says
    what the error bars are (± 1 sd) and what the band is (68%, bootstrap over seeds); the NSR figure's marker is
    the mean of the seeds' c."""
    noise = [[1.05, 0.97, 1.10, 0.98], [0.93, 1.04, 0.99, 1.06], [1.02, 1.01, 0.92, 1.00]]
    figures, drawn = drawn_plot(tmp_path / "ladder", ladder_rows(3, noise))
    fit = figures.fits["zbp_n16"]
    x = np.log([n_params(SIZES[s], embeddings=False) for s in ("nano", "tiny", "mini", "s60")])
    slopes = [np.polyfit(x, np.log(A * np.exp(x) ** B * np.asarray(e)), 1)[0] for e in noise]
    assert (fit.seeds, fit.n) == (3, 4) and fit.b == pytest.approx(np.mean(slopes), abs=1e-6)
    assert fit.b_se == pytest.approx(np.std(slopes, ddof=1) / math.sqrt(3), rel=0.06)
    ax = drawn["gap_vs_scale"].axes[0]
    words = legend(ax)
    assert "mean of 3 seeds ± 1 sd" in words and "68% interval" in words and "bootstrap over seeds" in words
    assert "t, 2 d.o.f." in words
    assert rf"$N^{{{fit.b:.3f} \pm {fit.half_width():.3f}}}$" in words and bands(ax) == 1  # mathtext
    assert ax.get_title() == "Gap to backprop against scale (3 seeds)"
    assert drawn["nsr_c"].get_suptitle().startswith("mean of 3 seeds ± 1 sd")
    means = [c.lines[0].get_ydata()[0] for c in drawn["nsr_c"].axes[0].containers]  # and the legend's (nan)
    assert [m for m in means if not math.isnan(m)] == [pytest.approx(1.1)] * 4  # c_attn 1.0, 1.1, 1.2 per size
    assert "Over seeds (3: 0, 1, 2)" in (tmp_path / "ladder" / "table.md").read_text()


def test_one_seed_says_so_and_draws_no_band(tmp_path):
    figures, drawn = drawn_plot(tmp_path / "one", ladder_rows(1, [[1.05, 0.97, 1.10, 0.98]]))
    fit = figures.fits["zbp_n16"]
    assert fit.seeds == 1 and math.isnan(fit.b_se)
    ax = drawn["gap_vs_scale"].axes[0]
    assert rf"$N^{{{fit.b:.3f}}}$ (one seed: no band)" in legend(ax) and "one seed: no error bars" in legend(ax)
    assert bands(ax) == 0 and ax.get_title() == "Gap to backprop against scale (one seed)"
    assert drawn["nsr_c"].get_suptitle().startswith("one seed: no error bars")
    assert any(n.startswith("one seed per size and arm") for n in figures.notes)
    assert "Over seeds" not in (tmp_path / "one" / "table.md").read_text()


def test_a_fit_leaves_out_a_seed_missing_at_a_size_and_refuses_a_gap_not_positive():
    """fit_gaps on points written by hand: seed 2 missing at one size is left out of the fit (said), which then
    equals the fit of seeds 0 and 1 alone; a seed's gap <= 0 at a fitted size means no fit, naming it."""
    from zbpscale.results.fit import fit_gap_law
    from zbpscale.results.gaps import GapPoint, fit_gaps

    params = [1e5, 1e6, 1e7]
    gaps = {0: [0.10, 0.20, 0.40], 1: [0.12, 0.18, 0.44], 2: [0.11, 0.21, 0.39]}

    def points(arm: str, seeds_at: list[tuple[int, ...]], change=None) -> list[GapPoint]:
        return [GapPoint(arm=arm, size=f"s{i}", params=n, seeds=seeds, tokens=1000, final=True,
                         gaps=tuple((change or {}).get((s, i), gaps[s][i]) for s in seeds))
                for i, (n, seeds) in enumerate(zip(params, seeds_at))]

    fits, remarks = fit_gaps(points("zbp_n16", [(0, 1, 2), (0, 1), (0, 1, 2)])
                             + points("zbp_n64", [(0, 1, 2)] * 3, change={(1, 2): -0.01}))
    assert fits["zbp_n16"] == fit_gap_law(params, [gaps[0], gaps[1]]) and fits["zbp_n16"].seeds == 2
    assert remarks["zbp_n16"] == "zbp_n16: the fit leaves out seed 2, not at every size at the full budget"
    assert "zbp_n64" not in fits
    assert remarks["zbp_n64"] == ("zbp_n64: no power-law fit, a gap is not positive (seed 1 at s2: -0.0100); the "
                                  "fit is in log-log space")
    _, remarks = fit_gaps(points("zbp_n64", [(0, 1, 2)] * 3, change={(1, 2): -0.01, (2, 0): 0.0}))
    assert remarks["zbp_n64"] == ("zbp_n64: no power-law fit, 2 gaps are not positive (seed 1 at s2: -0.0100, seed 2 "
                                  "at s0: +0.0000); the fit is in log-log space")  # each one, checked in the table


def test_a_seed_whose_loss_is_not_a_number_is_no_fit_no_win_and_no_crash(tmp_path):
    """A diverged run's val loss is nan: the gap law is not fitted through it (named), its compute multiplier is
    censored above (BP's first eval is already below it), not '< 1', which says ZBP beat BP; the loss curves' band
    over seeds (the report's) leaves that point out instead of raising in statistics.stdev."""
    from zbpscale.results.laws import bp_tokens_for
    from zbpscale.results.plot import draw

    rows = ladder_rows(3, [[1.05, 0.97, 1.10, 0.98], [0.93, 1.04, 0.99, 1.06], [1.02, 1.01, 0.92, 1.00]])
    broken = next(r for r in rows if r["run"] == "mini-zbp_n16-s1")
    broken.update(final_val_loss=math.nan, best_val_loss=math.nan)
    bundle = write_bundle(tmp_path / "nan", rows)
    figures = draw(bundle, tmp_path / "figures", band=True, formats=("png",))
    assert "zbp_n16" not in figures.fits
    assert "a gap is not a finite positive number (seed 1 at mini: +nan)" in " ".join(figures.notes), figures.notes
    assert bp_tokens_for(math.nan, [(100, 5.0), (1000, 3.0)]) == 0.0
    figures, _ = drawn_plot(None, rows, bundle)
    claims = Bundle(bundle).claims.read_text()
    assert "mini: per seed " in claims and "< 1" not in claims, claims


def test_sizes_go_by_their_non_embedding_count_and_a_run_never_started_changes_no_axis(tmp_path):
    """Rungs of your own, a deep narrow one (the larger N, the smaller total) beside a shallow wide one: the summary,
    the groups over seeds, claims.md's ladder and table.md put the wide one first, as `zbpscale sizes` does; a run
    that never started (neither count known) leaves N the figures' axis (it made the whole study's axis the total
    parameter count)."""
    from zbpscale.results.seeds import group_runs
    from zbpscale.results.summary import sort_key

    shapes = {"deep": (321_000, 6_800_000), "wide": (214_000, 13_100_000)}
    rows = []
    for size, (n, total) in shapes.items():
        for arm, loss in (("bp", 3.0), ("zbp_n4", 3.2)):
            rows.append({**row("nano", arm, loss), "run": f"{size}-{arm}", "size": size, "params": total,
                         "params_non_embedding": n})
    rows.append({**row("nano", "zbp_n4", None, state="new", seed=1), "run": "wide-zbp_n4-s1", "size": "wide",
                 "params": None, "params_non_embedding": None})
    bundle = write_bundle(tmp_path / "own", rows)
    summaries = [RunSummary(**r) for r in rows]
    assert [r.run for r in sorted(summaries, key=sort_key)] == ["wide-bp", "wide-zbp_n4", "deep-bp", "deep-zbp_n4",
                                                                 "wide-zbp_n4-s1"]  # its count unknown: last
    assert [g.size for g in group_runs(summaries)] == ["wide", "wide", "deep", "deep"]
    figures, _ = drawn_plot(None, rows, bundle)
    assert not any("total parameter count" in n for n in figures.notes), figures.notes
    ladder = [line.split(" | ")[0].strip("| ") for line in Bundle(bundle).claims.read_text().splitlines()[2:4]]
    assert ladder == ["wide", "deep"]
    table = (bundle / "table.md").read_text()
    assert table.index("| wide") < table.index("| deep")


def test_two_runs_of_one_size_arm_and_seed_are_refused_not_merged(tmp_path):
    """A run trained by hand into the sweep's folder beside the sweep's own, the same size, arm and seed: the gap
    took one of them, claims.md averaged both into bp's cell and table.md said 2 seeds, silently. collect refuses
    in one line, naming them, before it writes anything; plot refuses such a bundle (an older one, or edited)."""
    sweep = tmp_path / "jobs" / "twin"
    make_run(sweep, "nano-bp", steps=4, done=4, eval_every=2, val=lambda s: 5.0 - s / 10)
    make_run(sweep, "rerun bp", steps=4, done=4, eval_every=2, val=lambda s: 4.5 - s / 10)  # nano, bp, seed 0
    out = subprocess.run(["zbpscale", "collect", "jobs/twin"], cwd=tmp_path, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 2 and len(out.stderr.splitlines()) == 1, out.stderr
    assert "runs nano-bp, rerun bp are each size nano, arm bp, seed 0: the study compares one" in out.stderr
    assert not (tmp_path / "results").exists()
    rows = [row("nano", "bp", 3.0), {**row("nano", "bp", 2.9), "run": "rerun bp"}]
    with pytest.raises(ConfigError, match="runs nano-bp, rerun bp are each size nano, arm bp, seed 0"):
        plot(write_bundle(tmp_path / "edited", rows), log=lambda line: None)


def test_claims_say_each_size_s_seeds_and_mark_runs_not_complete(tmp_path):
    """A seed missing at one size and a run failed mid-way at another: claims.md said 'over 2 seeds' for a size of
    one and averaged the failed run's last loss into the ladder's table unmarked; table.md's table over seeds
    averaged it unmarked too (only its complete column said 1/2). Both mark the losses."""
    rows = [r for r in ladder_rows(2, [[1.05, 0.97, 1.10, 0.98], [0.93, 1.04, 0.99, 1.06]])
            if r["run"] != "tiny-zbp_n16-s1"]
    cut = next(r for r in rows if r["run"] == "mini-zbp_n16")
    cut.update(state="failed")
    _, _ = drawn_plot(tmp_path / "cut", rows)
    claims = (tmp_path / "cut" / "claims.md").read_text()
    assert "mean ± sample sd over its seeds: " in claims and "(tiny, 1 seed)" in claims and "(nano, 2 seeds)" in \
        claims, claims
    mini = next(line for line in claims.splitlines() if line.startswith("| mini "))
    assert mini.count(" *") == 2, mini  # zbp_n16's loss and its gap
    assert "\\* over a run not complete" in claims and "S - 1 d.o.f., S the seeds it is over" in claims
    table = (tmp_path / "cut" / "table.md").read_text()
    over_seeds = table[:table.index("Runs:")]
    mini = next(line for line in over_seeds.splitlines() if line.startswith("| mini ") and "zbp_n16" in line)
    cells = mini.split(" | ")  # | size | non-emb. | arm | seeds | complete | final val | best val | gap
    assert cells[4] == "1/2" and cells[5].endswith(" *") and cells[6].endswith(" *"), mini
    assert "\\* over a run not complete: its last validation loss" in over_seeds
    full, _ = drawn_plot(tmp_path / "full", ladder_rows(2, [[1.05, 0.97, 1.10, 0.98], [0.93, 1.04, 0.99, 1.06]]))
    claims = (tmp_path / "full" / "claims.md").read_text()
    assert "mean ± sample sd over 2 seeds: " in claims and " *" not in claims and "at 1 d.o.f." in claims
    assert " *" not in (tmp_path / "full" / "table.md").read_text()


def test_collect_of_a_bundle_and_plot_of_a_file_or_a_run_say_what_to_give(tmp_path):
    """collect results/x (or its runs/) made a bundle of the bundle's copies (a sweep called 'runs', in
    results/results/runs); plot of a sweep file hinted to collect into the sweep file; plot of one run's folder
    hinted a collect of that folder, which then found no runs. Each is one line naming what to give."""
    sweep = tmp_path / "jobs" / "x"
    make_run(sweep, "nano-bp", steps=4, done=4, eval_every=2, val=lambda s: 5.0 - s / 10)
    zbpscale("collect", "jobs/x", cwd=tmp_path)
    (tmp_path / "x.py").write_text("# a sweep file\n")
    for command, words in ((("collect", "results/x"), "results/x is a collected results folder (of sweep 'x') (hint: "
                            "collect the sweep it came from: zbpscale collect jobs/x)"),
                           (("collect", "results/x/runs"), "results/x/runs is inside the collected results folder "
                            "results/x"),
                           (("plot", "x.py"), "x.py is a file, not a collected results folder (hint: collect its "
                            "sweep first: zbpscale collect x.py"),
                           (("plot", "jobs/x/nano-bp"), "jobs/x/nano-bp is a run's folder, not a collected results "
                            "folder (hint: collect its sweep first: zbpscale collect jobs/x (into")):
        out = subprocess.run(["zbpscale", *command], cwd=tmp_path, capture_output=True, text=True, timeout=120)
        assert out.returncode == 2 and words in out.stderr and len(out.stderr.splitlines()) == 1, out.stderr
    assert sorted(p.name for p in (tmp_path / "results").iterdir()) == ["x"]


def test_a_bundle_plotted_from_inside_is_named_in_its_table(tmp_path, monkeypatch):
    """`cd results/x && zbpscale plot .` wrote table.md under an empty heading ('# ': the name of '.')."""
    bundle = write_bundle(tmp_path / "ladder", [row("nano", "bp", 3.0)])
    monkeypatch.chdir(bundle)
    plot(Path("."), log=lambda line: None)
    assert (bundle / "table.md").read_text().startswith("# ladder\n")


def test_a_figure_the_bundle_no_longer_draws_is_removed(tmp_path):
    """Plotted with ZBP runs, then again once they left the bundle: gap_vs_scale stayed in figures/ (and was
    uploaded) though table.md no longer showed it."""
    rows = ladder_rows(1, [[1.05, 0.97, 1.10, 0.98]])
    bundle = write_bundle(tmp_path / "b", rows)
    plot(bundle, log=lambda line: None)
    figures = bundle / "figures"
    assert (figures / "gap_vs_scale.png").is_file() and (figures / "gap_vs_scale.pdf").is_file()
    said = []
    (bundle / "summary.json").write_text(json.dumps({"sweep": "ladder", "fields": FIELDS,
                                                     "runs": [r for r in rows if r["arm"] == "bp"]}))
    plot(bundle, log=said.append)
    assert not (figures / "gap_vs_scale.png").exists() and not (figures / "gap_vs_scale.pdf").exists()
    assert (figures / "loss_curves.png").is_file()
    assert f"removed {figures / 'gap_vs_scale.png'}: this bundle no longer draws it" in said


@pytest.mark.parametrize("edit, words", [
    ({"final_val_loss": "8.73"}, "run nano-bp: final_val_loss '8.73' is not float | None"),
    ({"params_non_embedding": "500"}, "run nano-bp: params_non_embedding '500' is not int | None"),
    ({"steps": True}, "run nano-bp: steps True is not int"),
    ({"seed": None}, "run nano-bp: seed is null"),  # each a TypeError of plot or report (a helper's hunt)
    ({"tokens": "delete"}, "run nano-bp: no tokens"),
    ({"wall_time_s": "delete"}, "run nano-bp: no wall_time_s"),
], ids=["loss-as-text", "count-as-text", "bool-for-int", "null-seed", "no-tokens", "no-wall-time"])
def test_a_summary_edited_by_hand_is_one_line_naming_the_field(tmp_path, edit, words):
    """A number written as text in summary.json raised a ValueError or TypeError in table.py or fmt_count; a row
    of a run's name alone, a TypeError; a seed, tokens or wall time removed or null, a TypeError of plot or report:
    the one line summary.json's reader promises, naming the field."""
    bundle = write_bundle(tmp_path / "edited", [row("nano", "bp", 3.0)])
    summary = json.loads((bundle / "summary.json").read_text())
    summary["runs"][0].update(edit)
    summary["runs"][0] = {k: v for k, v in summary["runs"][0].items() if v != "delete"}
    (bundle / "summary.json").write_text(json.dumps(summary))
    with pytest.raises(ConfigError, match=re.escape(f"is not a summary collect wrote (its runs: {words})")):
        plot(bundle, log=lambda line: None)
    (tmp_path / "edited" / "summary.json").write_text(json.dumps({"sweep": "x", "runs": [{"run": "x"}]}))
    with pytest.raises(ConfigError, match=re.escape("(its runs: run x: no size)")):
        plot(tmp_path / "edited", log=lambda line: None)


def test_a_run_moved_aside_leaves_the_bundle_its_twin_took(tmp_path):
    """A run trained by hand, collected, then the sweep's own run of its size, arm and seed: collect refuses the
    pair; the hand-made one moved aside as told, collect drops the row and copy an earlier collect kept of it (it
    stayed, and plot refused the bundle for ever)."""
    sweep = tmp_path / "jobs" / "twin"
    make_run(sweep, "rerun bp", steps=4, done=4, eval_every=2, val=lambda s: 4.5 - s / 10)  # nano, bp, seed 0
    zbpscale("collect", "jobs/twin", cwd=tmp_path)
    make_run(sweep, "nano-bp", steps=4, done=4, eval_every=2, val=lambda s: 5.0 - s / 10)
    refused = subprocess.run(["zbpscale", "collect", "jobs/twin"], cwd=tmp_path, capture_output=True, text=True,
                             timeout=120)
    assert refused.returncode == 2 and "the study compares one" in refused.stderr, refused.stderr
    (sweep / "rerun bp").rename(tmp_path / "rerun bp")
    out = zbpscale("collect", "jobs/twin", cwd=tmp_path)
    assert "rerun bp: left out of the bundle, where an earlier collect put it: nano-bp is the run of size nano, arm " \
           "bp, seed 0 now" in out.stdout, out.stdout
    bundle = tmp_path / "results" / "twin"
    assert [r.run for r in Bundle(bundle).read_summary()] == ["nano-bp"] and not (bundle / "runs" / "rerun bp").exists()
    zbpscale("plot", "results/twin", cwd=tmp_path)


def test_a_run_copy_deleted_from_the_bundle_is_said_not_left_to_change_the_gaps_silently(tmp_path):
    """A ladder of two seeds whose mini-bp-s1 copy was deleted from runs/: its gap at mini and the fits went on with
    one seed fewer, and the only note said there was no bp run of that seed with a validation loss (its row in
    summary.json has one). Now a note names the missing copy and says to collect again; the gap points are those
    of the bundle without that run's row (the same seeds left out). A copy there whose records are garbage was said
    to have no validation loss yet, and its zbp runs to have no bp run of their seed: it is named as the missing
    one is."""
    rows = ladder_rows(2, [[1.05, 0.97, 1.10, 0.98], [0.93, 1.04, 0.99, 1.06]])
    bundle = write_bundle(tmp_path / "cut", rows)
    shutil.rmtree(bundle / "runs" / "mini-bp-s1")
    figures, _ = drawn_plot(None, rows, bundle)
    assert (f"mini-bp-s1: its copy is missing from {bundle / 'runs'} though the summary has a val loss: not in the "
            "curves, gaps or fits; collect the sweep again to restore them") in figures.notes, figures.notes
    assert not any("no validation loss yet" in n or "no bp run of the same seed" in n for n in figures.notes)
    without = [r for r in rows if r["run"] != "mini-bp-s1"]
    reference, _ = drawn_plot(tmp_path / "without", without)
    assert figures.gap_points == reference.gap_points
    garbled = write_bundle(tmp_path / "garbled", rows)  # the copy there, its records garbage
    (garbled / "runs" / "mini-bp-s1" / "metrics.jsonl").write_bytes(b"\x00\x17 not a record\n" * 40)
    figures, _ = drawn_plot(None, rows, garbled)
    assert (f"mini-bp-s1: its copy in {garbled / 'runs'} holds no validation record though the summary has a val "
            "loss: not in the curves, gaps or fits; collect the sweep again to restore them") in figures.notes, \
        figures.notes
    assert not any("no validation loss yet" in n or "no bp run of the same seed" in n for n in figures.notes)
    assert figures.gap_points == reference.gap_points
