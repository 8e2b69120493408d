"""results/claims.py and the README: every number the README says of the mini ladder is what its bundle makes.

Compared: the README's quoted block with docs/mini_ladder/claims.md, byte for byte; docs/mini_ladder's claims.md and
table.md with what `zbpscale plot` makes again from a copy of that bundle (the published one, tools/publish_bundle.py:
no path of the machine that trained it); the claims' numbers with the table's fits section they are said from.
"""

import re
import shutil
from pathlib import Path

from zbpscale.results.plot import plot

REPO = Path(__file__).resolve().parents[1]
DOCS = REPO / "docs" / "mini_ladder"
BEGIN, END = "<!-- claims: docs/mini_ladder/claims.md -->\n", "<!-- end of claims -->"


def test_the_readme_quotes_the_mini_ladders_claims_whole():
    readme = (REPO / "README.md").read_text()
    assert readme.count(BEGIN) == 1 and readme.count(END) == 1
    quoted = readme.split(BEGIN)[1].split(END)[0]
    assert quoted == (DOCS / "claims.md").read_text()


def test_the_docs_bundle_makes_its_own_table_and_claims_again(tmp_path):
    copy = Path(shutil.copytree(DOCS, tmp_path / "mini_ladder", ignore=shutil.ignore_patterns("figures")))
    figures = plot(copy, log=lambda line: None)
    assert (copy / "claims.md").read_text() == (DOCS / "claims.md").read_text()
    assert (copy / "table.md").read_text() == (DOCS / "table.md").read_text()
    # what the prose says of the gap law is the table's row
    claims, table = (DOCS / "claims.md").read_text(), (DOCS / "table.md").read_text()
    for arm, fit in figures.study.fits.items():
        assert f"| {arm} | {fit.a:.3g} | {fit.b:+.3f} |" in table
        assert f"**{arm}.**" in claims and f"b = {fit.b:+.2f}" in claims


def test_the_docs_bundle_holds_no_path_of_the_machine_that_made_it():
    left = [(p.name, m) for p in DOCS.rglob("*") if p.is_file() and p.suffix in (".json", ".jsonl", ".csv", ".md")
            for m in re.findall(r'"(/(?:home|root|work|tmp|scratch|mnt)/[^"]*)"', p.read_text())]
    assert left == []
