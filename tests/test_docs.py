"""The README a newcomer reads in ten minutes, and the docs/ pages that hold the rest (#56 item 3).

Compared: README.md's length with its bound; the headings of the README as committed (git HEAD) and of the README
before #56 with the headings of README.md and docs/*.md now, so that a section moved out is never lost; every
relative link of README.md and docs/*.md with the files on disk; each docs page's closing "Guarantees" section with
the tests/ files and test functions it names.
"""

import re
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
PAGES = sorted((REPO / "docs").glob("*.md"))  # docs/mini_ladder/ is a published bundle, not a page
MAX_README_LINES = 260

MOVED = {
    # the sections of the 1,065-line README before #56 that left it, and the page each one went to
    "Learning rates, tuned per arm and size": "docs/tuning.md",
    "Watching a sweep: TensorBoard and W&B": "docs/trackers.md",
    "Upgrading in the middle of a sweep": "docs/upgrading.md",
    "Results: collect, plot, upload; doctor": "docs/results.md",
    "Layout": "docs/layout.md",
    "Model sizes": "docs/method.md",
    "The method in one paragraph": "docs/method.md",
    "Benchmarks": "docs/benchmarks.md",
    "GPU acceptance run": "docs/gpu.md",
    "GPU readiness: compiled offline, measured, owed": "docs/gpu.md",
    # bold run-in headings of the old README's "Run" section, made headings of their pages
    "Where runs go": "docs/running.md",
    "Polling the scheduler": "docs/running.md",
    "One writer per run folder, on any filesystem": "docs/faults.md",
    "When SLURM's two views disagree": "docs/faults.md",
    "The sweep file is the truth for what it still decides": "docs/faults.md",
    'What "bit for bit" means, as measured': "docs/reproducibility.md",
    "The same run on another GPU count": "docs/reproducibility.md",
    "Goodput: where a run's hours go": "docs/goodput.md",
    "Seeds and error bars": "docs/results.md",
    "Fits and tests": "docs/results.md",
    "Diagnostics and the measurement floor": "docs/method.md",
}
KEPT = ("zbpscale", "Set up and test", "Run", "The figure in miniature: `sweeps/mini_ladder.py`", "Learning rates")
"""Headings of the old README that stay in it ("Learning rates" is inside the quoted claims block)."""


def outside_code(text: str) -> list[str]:
    """The lines of a Markdown text that are not inside a ``` fence."""
    lines, fence = [], False
    for line in text.splitlines():
        if line.startswith("```"):
            fence = not fence
        elif not fence:
            lines.append(line)
    return lines


def headings(text: str) -> list[str]:
    """Each heading's text, whatever its level (a section may move up or down a level with its page)."""
    return [m.group(1).strip() for line in outside_code(text) if (m := re.match(r"#{1,6} (.+)", line))]


def all_headings() -> set[str]:
    return {h for doc in (README, *PAGES) for h in headings(doc.read_text())}


def test_the_readme_is_short():
    n = len(README.read_text().splitlines())
    assert n <= MAX_README_LINES, f"README.md has {n} lines (at most {MAX_README_LINES}): move a section to docs/"


def test_every_heading_of_the_committed_readme_is_still_a_heading_somewhere():
    out = subprocess.run(["git", "-C", str(REPO), "show", "HEAD:README.md"], capture_output=True, text=True,
                         timeout=60)
    if out.returncode != 0:
        pytest.skip(f"no git history to compare with: {out.stderr.strip()}")
    lost = sorted(set(headings(out.stdout)) - all_headings())
    assert lost == [], f"headings of README.md at HEAD in neither README.md nor docs/*.md: {lost}"


def test_every_section_moved_out_of_the_readme_is_on_its_page():
    kept = headings(README.read_text())
    assert [h for h in KEPT if h not in kept] == []
    for heading, page in MOVED.items():
        assert heading in headings((REPO / page).read_text()), (heading, page)


def test_every_relative_link_points_to_a_file_that_exists():
    broken = []
    for doc in (README, *PAGES):
        for line in outside_code(doc.read_text()):
            for target in re.findall(r"\]\(([^)\s]+)\)", line):
                if re.match(r"[a-z]+:", target) or target.startswith("#"):
                    continue  # a web address or an anchor on the same page
                if not (doc.parent / target.split("#")[0]).exists():
                    broken.append(f"{doc.relative_to(REPO)}: {target}")
    assert broken == []


def test_the_readme_links_every_docs_page():
    text = README.read_text()
    assert [p.name for p in PAGES if f"](docs/{p.name})" not in text] == []


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_each_page_ends_with_its_guarantees_naming_tests_that_exist(page):
    text = page.read_text()
    sections = re.split(r"^## ", text, flags=re.M)
    assert len(sections) > 1 and sections[-1].startswith("Guarantees"), \
        f"{page.name}: the last section must be '## Guarantees and how they are tested'"
    guarantees = sections[-1]
    named = re.findall(r"tests/(\w+\.py)(?:::(\w+))?", guarantees)
    assert named, f"{page.name}: its Guarantees name no tests/ file"
    for file, function in named:
        path = REPO / "tests" / file
        assert path.is_file(), f"{page.name} names tests/{file}, which does not exist"
        if function:
            assert re.search(rf"^def {function}\(", path.read_text(), flags=re.M), \
                f"{page.name} names tests/{file}::{function}, which is not a test there"


def test_each_page_starts_with_what_a_user_does():
    """The first thing under a page's title is a command (a code block) or a heading whose section opens with one."""
    for page in PAGES:
        body = page.read_text().split("\n", 1)[1]
        first_code = body.find("```")
        assert 0 <= first_code < 400, f"{page.name}: no command near its top"


def test_the_fields_apply_changes_takes_are_named_as_the_code_has_them():
    """docs/faults.md names the fields `submit --apply-changes` gives a trained run: the trainer's RESUME_SAFE (it
    once left out `trackers`)."""
    from zbpscale.run.config import RESUME_SAFE

    text = " ".join((REPO / "docs" / "faults.md").read_text().split())
    said = text[text.index("`--apply-changes` gives it"):].split("RESUME_SAFE")[0]
    assert re.findall(r"`(\w+)`", said) == list(RESUME_SAFE)
