"""`zbpscale report` (results/report.py) on the published mini ladder bundle (docs/mini_ladder), against the bundle.

Compared: the page's sections with the module's list; its state table with the bundle's summary, row for row; its
claims with the bundle's claims.md (every number of its first paragraph); its figures with those `zbpscale plot`
draws (the same figures, inline SVG); the bundle's files before and after (the report writes only its page); its
size with the issue's bound (3 MB for the ladder's 36 runs: this bundle has 67). Then real headless Chromium opens
it (tools/browser_check.py): no console error, no request that is not file: or data:, every section there; the
first screen is kept as a PNG (in $ZBPSCALE_TEST_ARTIFACTS when set, else the test's folder). A wrong target is one
line, naming it.
"""

import hashlib
import html
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import load_tool
from zbpscale.results.bundle import Bundle
from zbpscale.results.report import SECTIONS, report

REPO = Path(__file__).resolve().parents[1]
PUBLISHED = REPO / "docs" / "mini_ladder"


def digest(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def page(tmp_path_factory) -> tuple[Path, Path, str]:
    """(a copy of the published bundle, its report, the report's text)."""
    bundle = tmp_path_factory.mktemp("report") / "mini_ladder"
    shutil.copytree(PUBLISHED, bundle)
    before = digest(bundle)
    out = report(bundle, bundle.parent / "mini_ladder.html", log=lambda line: None)
    assert digest(bundle) == before  # the bundle is read, never written
    return bundle, out, out.read_text()


def test_the_page_has_every_section_and_stays_small(page):
    bundle, out, text = page
    assert re.findall(r'<section id="(\w+)"', text) == list(SECTIONS)  # the mini ladder tunes: "lr" is there
    assert out.stat().st_size < 3e6
    assert not re.search(r'(src|href)="(?!#|data:)', text)  # nothing to fetch: every reference is inside the page
    assert "<script" not in text
    provenance = text.split('<section id="provenance">')[1]
    from zbpscale.version import version

    assert f"<td>zbpscale</td><td>{version()}</td>" in provenance
    assert f"<td>command</td><td>{html.escape(f'zbpscale report {bundle} -o {out}')}</td>" in provenance


def test_the_state_table_is_the_summary(page):
    bundle, _, text = page
    state = text.split('<section id="state">')[1].split("</section>")[0]
    rows = re.findall(r"<tr><td>(.*?)</td><td>(.*?)</td><td>(.*?)</td><td>(.*?)</td><td>.*?</td>"
                      r'<td class="state-\w+">(.*?)</td><td>(.*?)</td><td>.*?</td><td>(.*?)</td>', state)
    summary = Bundle(bundle).read_summary()
    assert rows == [(html.escape(r.run), r.size, r.arm, str(r.seed), r.state, f"{r.steps}/{r.steps_total}",
                     "" if r.final_val_loss is None else f"{r.final_val_loss:.4f}") for r in summary]
    assert f"<b>{len(summary)} runs: {len(summary)} complete</b>" in state


def test_the_claims_and_figures_are_the_bundle_s(page):
    bundle, _, text = page
    claims = text.split('<section id="claims">')[1].split("</section>")[0]
    first = next(p for p in Bundle(bundle).claims.read_text().split("\n\n") if p.startswith("**zbp_n16.**"))
    numbers = re.findall(r"[-+]?\d+\.\d+", first)
    assert len(numbers) > 20 and all(n in claims for n in numbers)
    figures = {p.stem for p in Bundle(bundle).figures.glob("*.png")}  # what zbpscale plot drew into the bundle
    assert len(figures) == 5
    missing = [name for name in sorted(figures | {"loss_curves_log"}) if f'id="{name}-' not in text]
    assert missing == []  # each of plot's figures inline, and the loss curves on log tokens too
    ids = re.findall(r'\bid="([^"]+)"', text)
    assert len(ids) == len(set(ids))  # figures share one document: their ids are each figure's own


def test_each_arm_and_the_seeds_can_be_hidden_and_each_line_names_its_run(page):
    """The curves' toggles are CSS only (no script): a check box per arm hides the lines named by that arm, one
    hides the seeds' own lines; hovering a line shows its run, state and final val loss (an SVG title)."""
    bundle, _, text = page
    curves = text.split('<section id="curves">')[1].split("</section>")[0]
    rows = [r for r in Bundle(bundle).read_summary() if r.role != "tuning"]
    arms = list(dict.fromkeys(r.arm for r in rows))
    for i, arm in enumerate(arms):
        assert f'<input type="checkbox" id="show-{i}" checked><label for="show-{i}">{arm}</label>' in curves
        assert f'#show-{i}:not(:checked) ~ .fig [id*="-arm-{arm}-"] {{ display: none }}' in curves
    for r in rows:  # every run of the study has its line in both drawings, each with its tooltip
        for fig in ("loss_curves", "loss_curves_log"):
            kind = "run" if sum(o.size == r.size and o.arm == r.arm for o in rows) > 1 else "only"
            assert (f'<g id="{fig}-arm-{r.arm}-{kind}-{r.run}"><title>{r.run} ({r.state}, final val '
                    f'{r.final_val_loss:.4f})</title>') in curves, (fig, r.run)


def test_a_real_browser_opens_it_without_an_error_or_a_request(page, tmp_path):
    browser_check = load_tool("browser_check")
    if browser_check.available() is None:
        pytest.skip("no Chromium on PATH: run `python tools/browser_check.py install`")
    _, out, _ = page
    artifacts = Path(os.environ.get("ZBPSCALE_TEST_ARTIFACTS") or tmp_path)
    artifacts.mkdir(parents=True, exist_ok=True)
    seen = browser_check.check(out, ids=SECTIONS, screenshot=artifacts / "report_first_screen.png")
    assert (seen["console_errors"], seen["requests"], seen["missing_ids"]) == ([], [], []), seen
    assert seen["title"] == "zbpscale report: mini_ladder"
    assert (artifacts / "report_first_screen.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_target_that_is_neither_a_bundle_nor_a_sweep_is_one_line(tmp_path):
    for target in (tmp_path / "nowhere", tmp_path):
        out = subprocess.run([sys.executable, "-m", "zbpscale.cli", "report", str(target)], capture_output=True,
                             text=True, timeout=120)
        assert out.returncode != 0 and "Traceback" not in out.stderr and len(out.stderr.strip().splitlines()) == 1
        assert str(target) in out.stderr, out.stderr
    assert not list(tmp_path.iterdir())  # nothing written


def test_the_page_s_markdown_keeps_lists_and_drops_backslash_escapes():
    """report.html showed table.md's '\\*' as typed and glued a list's items into one paragraph ('- a - b'): a
    helper's hunt. Each item is a list item, an escaped character itself, and everything else still escaped."""
    from zbpscale.results.report import markdown_html

    page = markdown_html("- a <x>\n- **b**\n\n\\* over a run not complete\n\n| x | y |\n|---|---|\n| 1 \\* | `c` |")
    assert page == ("<ul><li>a &lt;x&gt;</li><li><b>b</b></li></ul>\n<p>* over a run not complete</p>\n"
                    "<table><thead><tr><th>x</th><th>y</th></tr></thead><tbody>\n"
                    "<tr><td>1 *</td><td><code>c</code></td></tr>\n</tbody></table>")
