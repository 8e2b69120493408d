"""`zbpscale report BUNDLE_OR_SWEEP [-o FILE]`: the study in one self-contained HTML page.

    zbpscale report results/mini_ladder              # -> results/mini_ladder/report.html
    zbpscale report sweeps/ladder.py -o ladder.html  # a sweep: collected first (zbpscale collect), then reported

One file a collaborator opens from a mail or a cluster's home folder with file://: no server, no script, no
request to anything outside it (the figures are inline SVG, the styles inline). Its sections, by id:

  state        each run's state, progress, final val loss, goodput and GPU-hours; the sweep's totals
  curves       validation loss against tokens per size, arms grouped, seeds as their mean with a ± 1 sd band;
               linear or log tokens (two drawings, chosen by a radio button)
  gap          the gap to BP against N with its power-law fit and interval, and the fits and tests in figures
  lr           the lr sensitivity per size and arm, and the learning-rate table (when the sweep tunes)
  diagnostics  the NSR constant c per scale and the branch gains rho_k
  claims       the fits and tests in words, with their intervals (claims.md)
  runs         per run: its config, its attempts with how each ended, the numerics fingerprint of its latest
               attempt and the estimator path each ZBP core ran
  provenance   the zbpscale release and commit, when and by which command the page was made, the bundle's manifest

It reads the bundle (the figures are drawn again into a temporary folder, as SVG) and writes the page only.
"""

from __future__ import annotations

import argparse
import html
import json
import re
import shlex
import tempfile
import time
from collections import Counter
from pathlib import Path

from zbpscale.errors import ConfigError
from zbpscale.files import read_json, unwritable
from zbpscale.results.bundle import Bundle, holding, inside
from zbpscale.results.summary import RunSummary
from zbpscale.run.history import read_attempts
from zbpscale.run.records import tail_records
from zbpscale.tables import fmt_tokens, plural

SECTIONS = ("state", "curves", "gap", "lr", "diagnostics", "claims", "runs", "provenance")
"""The page's sections, by id, in order ("lr" only when the sweep tunes)."""

STYLE = """
body { font: 14px/1.45 system-ui, sans-serif; margin: 0 auto; max-width: 1200px; padding: 0 1.5em 3em; color: #222 }
h1 { font-size: 1.6em; margin: 0.8em 0 0.2em } h2 { border-bottom: 1px solid #ddd; margin-top: 2em }
nav a { margin-right: 1em } .muted { color: #666 } .fig { overflow-x: auto } .fig svg { max-width: 100%; height: auto }
table { border-collapse: collapse; margin: 0.8em 0; font-variant-numeric: tabular-nums }
th, td { border: 1px solid #ddd; padding: 0.25em 0.6em; text-align: right } th { background: #f4f4f4 }
td:first-child, th:first-child { text-align: left } details { margin: 0.3em 0 } summary { cursor: pointer }
pre { background: #f7f7f7; padding: 0.6em; overflow-x: auto; font-size: 12px }
.state-complete { color: #1a7f37 } .state-failed, .state-broken, .state-stalled { color: #b42318 }
.toggle input { margin-left: 1em } .logx, #x-log:checked ~ .linx { display: none }
#x-log:checked ~ .logx { display: block }
"""
"""The page's only styles (inline): the x-axis toggle of the loss curves is two drawings and a radio button."""


def bundle_of(target: str | Path, log=print) -> Path:
    """The bundle to report: `target` itself when it is one (it has summary.json), else the bundle of the sweep it
    names, collected (or brought up to date) first."""
    path = Path(target)
    if Bundle(path).summary_json.exists():
        return path
    if not path.exists():
        raise ConfigError(f"{path} does not exist", hint="give a results folder (zbpscale collect makes one) or a "
                                                         "sweep file")
    if (holder := holding(path)) is not None:  # a run's copy, the bundle's runs/ or figures/
        raise inside(path, holder)
    from zbpscale.jobs.runs import find_runs
    from zbpscale.results.collect import collect, default_out

    found = find_runs(str(path), planned_only=True)
    if len(found) != 1 or not found[0][1]:
        raise ConfigError(f"{path} is neither a results folder nor the sweep of run folders",
                          hint="give a results folder (results/<sweep>) or one sweep's file or jobs folder")
    out = default_out(found[0][1][0].run_dir.parent)
    collect(path, out, log=log)
    return Path(out)


def report(target: str | Path, out: str | Path | None = None, *, params: str = "non-embedding",
           log=print) -> Path:
    """Write the report of `target` (a bundle, or a sweep collected first) to `out` (default: the bundle's
    report.html); returns its path."""
    import matplotlib

    from zbpscale.results.plot import draw, plot_loss_curves

    if out:  # before a sweep is collected for it
        _check_page(Path(out))
    bundle = bundle_of(target, log=log)
    out = Path(out) if out else Bundle(bundle).report
    _check_page(out)
    every = Bundle(bundle).read_summary()
    svg = {"svg.fonttype": "none", "svg.hashsalt": "zbpscale"}  # text as text (small); the same ids every time
    with tempfile.TemporaryDirectory(prefix="zbpscale-report-") as tmp, matplotlib.rc_context(svg):
        drawn = draw(bundle, Bundle(tmp).figures, params=params, formats=("svg",), band=True)
        files = list(drawn.files)
        if drawn.val is not None and drawn.rows:
            files += plot_loss_curves(drawn.val, list(drawn.rows), Bundle(tmp).figures, drawn.field, log_x=True,
                                      band=True, name="loss_curves_log", formats=("svg",))[0]
        svgs = {f.stem: _titled(_inline_svg(f.stem, f.read_text()), every) for f in files}
    command = shlex.join(["zbpscale", "report", str(target), "-o", str(out)]
                         + (["--params", params] if params != "non-embedding" else []))
    page = render(bundle, every, drawn, svgs, command)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(page)
    log(f"wrote {out} ({len(page.encode()) / 1e6:.2f} MB): open it in a browser ({out.resolve().as_uri()})")
    return out


def _check_page(out: Path) -> None:
    """A ConfigError when the page cannot be written at `out` (a folder there, or a folder it cannot write into), or
    would replace a file that is not a report (a sweep file, a bundle's summary.json: only a page this command
    wrote is written over)."""
    why = f"{out} is a folder" if out.is_dir() else unwritable(out.parent)
    if why is not None:
        raise ConfigError(f"cannot write the page {out}: {why}", hint="give -o a file's path in a folder this process "
                                                                      "can write, e.g. -o report.html")
    if out.exists() and not _a_report(out):
        raise ConfigError(f"{out} is there and is not a report this command wrote: it is not written over",
                          hint="give -o a new file's path, e.g. -o report.html")


def _a_report(path: Path) -> bool:
    """Whether the file at `path` is a page `report` wrote (its title says so, near its start)."""
    try:
        with open(path, "rb") as f:
            return b"<title>zbpscale report: " in f.read(4096)
    except OSError:
        return False


def render(bundle: Path, every: list[RunSummary], drawn, svgs: dict[str, str], command: str) -> str:
    """The page (see the module docstring) from the bundle's summary rows (`every`), plot.draw's Figures, the
    SVG text of each figure by name and the command that made it."""
    from zbpscale.results.claims import claims_markdown, fits_markdown
    from zbpscale.results.lr import lr_markdown

    manifest = Bundle(bundle).read_manifest() or {}
    name = manifest.get("sweep") or bundle.name
    tuned = drawn.tuning
    lrs = lr_markdown(tuned, list(drawn.rows)) if tuned else ""
    sections = {
        "state": ("The sweep at a glance", state_table(every)),
        "curves": ("Loss curves", _curves(svgs, list(dict.fromkeys(r.arm for r in drawn.rows)))
                   + _notes(drawn.notes)),
        "gap": ("The gap to BP against scale",
                _figure(svgs, "gap_vs_scale", "no gap figure: no size has both bp and a ZBP arm with a validation "
                                              "loss") + markdown_html(fits_markdown(drawn.study))),
        "lr": ("Learning rates", _figure(svgs, "lr_sensitivity", "no grid run has answered yet") + markdown_html(lrs))
        if tuned or any(r.role == "tuning" for r in every) else None,
        "diagnostics": ("Diagnostics: c per scale and rho_k",
                        _figure(svgs, "nsr_c", "no NSR figure: no ZBP run has a diag record yet")
                        + _figure(svgs, "rho_k", "no rho_k figure: no run has a diag record yet")),
        "claims": ("Claims", markdown_html(claims_markdown(drawn.study, list(drawn.rows)))),
        "runs": ("Runs", runs_html(bundle, every)),
        "provenance": ("Provenance", provenance_html(manifest, command)),
    }
    shown = {k: v for k, v in sections.items() if v is not None}
    nav = " ".join(f'<a href="#{k}">{html.escape(title)}</a>' for k, (title, _) in shown.items())
    body = "\n".join(f'<section id="{k}"><h2>{html.escape(title)}</h2>\n{content}\n</section>'
                     for k, (title, content) in shown.items())
    collected = manifest.get("collected", "?")
    return (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">\n'
            f'<meta name="viewport" content="width=device-width, initial-scale=1">\n'
            f"<title>zbpscale report: {html.escape(name)}</title>\n<style>{STYLE}</style></head>\n<body>\n"
            f"<h1>Sweep {html.escape(name)}</h1>\n"
            f'<p class="muted">{len(every)} runs, collected {html.escape(collected)} from '
            f"<code>{html.escape(str(manifest.get('source', bundle)))}</code></p>\n<nav>{nav}</nav>\n{body}\n"
            f"</body></html>\n")


# ------------------------------------------------------------------------------------------------ sections
STATE_COLUMNS = ("run", "size", "arm", "seed", "role", "state", "progress", "tokens", "final val", "goodput",
                 "GPU-hours", "attempts")


def state_table(rows: list[RunSummary]) -> str:
    """Each run's state and what it reached, and the sweep's totals under the table."""
    body = []
    for r in rows:
        progress = f"{r.steps}/{r.steps_total}" if r.steps_total else str(r.steps)
        cells = (r.run, r.size, r.arm, str(r.seed), r.role or "final", r.state, progress, fmt_tokens(r.tokens),
                 _num(r.final_val_loss, "{:.4f}"), _num(r.goodput, "{:.0%}"), _num(r.gpu_hours, "{:,.1f}"),
                 str(r.attempts))
        body.append("<tr>" + "".join(f'<td class="state-{html.escape(r.state)}">{html.escape(c)}</td>'
                                     if i == 5 else f"<td>{html.escape(c)}</td>" for i, c in enumerate(cells))
                    + "</tr>")
    hours = sum(r.gpu_hours or 0.0 for r in rows)
    total = ", ".join(f"{n} {s}" for s, n in Counter(r.state for r in rows).items())
    return (f"<p><b>{plural(len(rows), 'run')}: {html.escape(total)}</b>; {hours:,.1f} GPU-hours held in all.</p>"
            + _table(STATE_COLUMNS, body))


def runs_html(bundle: Path, rows: list[RunSummary]) -> str:
    """One collapsed block per run: config, attempts with their ends, numerics fingerprint, estimator path."""
    blocks = []
    for r in rows:
        folder = Bundle(bundle).run(r.run)
        config = read_json(folder.config)
        start = tail_records(folder.metrics, ("start",)).get("start", {})  # the latest attempt's
        attempt_rows = ["<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in (
            _when(a.get("time")), a.get("event", ""), a.get("job_id", ""), a.get("executor", ""), a.get("why", ""),
            a.get("reason", ""))) + "</tr>" for a in read_attempts(folder.path)]
        impl = ", ".join(f"{core} {path}" for core, path in (start.get("impl_used") or {}).items()) or \
            (r.impl_used or "exact autograd (bp)")
        blocks.append(
            f"<details><summary><b>{html.escape(r.run)}</b> <span class=\"muted\">{html.escape(r.state)}"
            f"{': ' + html.escape(r.reason) if r.reason else ''}</span></summary>\n"
            f"<p>estimator path: {html.escape(impl)}</p>\n"
            f"<p>attempts</p>{_table(('time', 'event', 'job', 'executor', 'why', 'reason'), attempt_rows)}\n"
            f"<p>numerics of its latest attempt</p><pre>{html.escape(json.dumps(start.get('numerics', {}), indent=1))}"
            f"</pre>\n<p>config</p><pre>{html.escape(json.dumps(config, indent=1))}</pre></details>")
    return "\n".join(blocks) or "<p>no runs</p>"


def provenance_html(manifest: dict, command: str) -> str:
    """The release and commit that made the page, when, by which command, from which collection."""
    from zbpscale.version import git_revision, version

    facts = {"zbpscale": version(), "commit": git_revision() or "not a clone",
             "made": time.strftime("%Y-%m-%d %H:%M:%S %z"), "command": command,
             "bundle collected": manifest.get("collected", "?"), "from": manifest.get("source", "?")}
    return _table(("what", "value"), [f"<tr><td>{html.escape(k)}</td><td>{html.escape(str(v))}</td></tr>"
                                      for k, v in facts.items()])


# ------------------------------------------------------------------------------------------------ helpers
def _curves(svgs: dict[str, str], arms: list[str]) -> str:
    """The loss curves, linear and log tokens, with a radio button between them and a check box per arm and one for
    the seeds' own lines (CSS only: each line of the figures is named by its arm, plot._seeds_and_mean)."""
    if "loss_curves" not in svgs:
        return "<p>no loss curves: no run has a validation loss yet</p>"
    boxes = "".join(f'<input type="checkbox" id="show-{i}" checked><label for="show-{i}">{html.escape(arm)}</label>'
                    for i, arm in enumerate(arms))
    hide = "\n".join(f'#show-{i}:not(:checked) ~ .fig [id*="-arm-{_css(arm)}-"] {{ display: none }}'
                      for i, arm in enumerate(arms))
    return (f"<style>{hide}\n#show-seeds:not(:checked) ~ .fig [id*=\"-run-\"] {{ display: none }}</style>\n"
            '<div class="toggle">tokens axis: <input type="radio" name="x" id="x-lin" checked>'
            '<label for="x-lin">linear</label><input type="radio" name="x" id="x-log"><label for="x-log">log</label>'
            f' &nbsp; show:{boxes}<input type="checkbox" id="show-seeds" checked><label for="show-seeds">each '
            "seed</label> &nbsp; <span class=\"muted\">(hover a line for its run)</span>"
            f'\n<div class="fig linx">{svgs["loss_curves"]}</div>\n'
            f'<div class="fig logx">{svgs.get("loss_curves_log", "")}</div></div>')


def _css(text: str) -> str:
    """`text` inside a CSS string in double quotes."""
    return text.replace("\\", "\\\\").replace('"', '\\"')


def _titled(svg: str, rows: list[RunSummary]) -> str:
    """`svg` with a tooltip (an SVG <title>) on each line named by plot._seeds_and_mean: the run, its state and
    final val loss; an arm's mean and band."""
    tips = {}
    for r in rows:
        final = "" if r.final_val_loss is None else f", final val {r.final_val_loss:.4f}"
        for kind in ("run", "only"):
            tips[f"arm-{r.arm}-{kind}-{r.run}"] = f"{r.run} ({r.state}{final})"
        tips[f"arm-{r.arm}-mean"] = f"{r.arm}: the mean over its seeds"
        tips[f"arm-{r.arm}-band"] = f"{r.arm}: ± 1 sd over its seeds"

    def tip(m: re.Match) -> str:
        name = m.group(2) if m.group(2) in tips else re.sub(r"-\d+$", "", m.group(2))
        return m.group(0) + (f"<title>{html.escape(tips[name])}</title>" if name in tips else "")

    return re.sub(r'<g id="([^"]*?)-(arm-[^"]*)">', tip, svg)


def _figure(svgs: dict[str, str], name: str, missing: str) -> str:
    return f'<div class="fig">{svgs[name]}</div>' if name in svgs else f"<p>{html.escape(missing)}</p>"


def _notes(notes) -> str:
    return "".join(f'<p class="muted">note: {html.escape(n)}</p>' for n in notes)


def _inline_svg(name: str, text: str) -> str:
    """An SVG file's text as an element of the page: without its XML prolog, doctype and metadata, and its ids
    prefixed with the figure's `name` (several figures share one document, and so one id space)."""
    if "<svg" not in text:
        return ""
    text = re.sub(r"<metadata>.*?</metadata>\s*", "", text[text.index("<svg"):], flags=re.S)
    seen: dict[str, int] = {}

    def own(m: re.Match) -> str:  # an artist's gid may name several elements (the clipped points): number repeats
        seen[m.group(1)] = seen.get(m.group(1), 0) + 1
        return f'id="{name}-{m.group(1)}' + (f"-{seen[m.group(1)]}" if seen[m.group(1)] > 1 else "") + '"'

    text = re.sub(r'\bid="([^"]*)"', own, text)
    return re.sub(r'(href="#|url\(#)', rf"\g<1>{name}-", text)


def _table(columns, body_rows: list[str], *, escaped: bool = False) -> str:
    """A table of `columns` (text, or HTML when `escaped`) over `body_rows` (each a `<tr>` element)."""
    head = "".join(f"<th>{c if escaped else html.escape(c)}</th>" for c in columns)
    return f"<table><thead><tr>{head}</tr></thead><tbody>\n" + "\n".join(body_rows) + "\n</tbody></table>"


def _num(value: float | None, fmt: str) -> str:
    return "" if value is None else fmt.format(value)


def _when(t) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t)) if isinstance(t, (int, float)) else ""


def markdown_html(text: str) -> str:
    """The markdown that results/claims.py and results/lr.py write, as HTML: headings, paragraphs, lists, pipe
    tables, **bold**, `code` and backslash escapes; everything escaped."""
    out: list[str] = []
    for block in re.split(r"\n\s*\n", text.strip()):
        lines = block.splitlines()
        if all(line.startswith("|") for line in lines):
            cells = [[c.strip() for c in line.strip().strip("|").split("|")] for line in lines]
            body = [row for row in cells[1:] if not all(set(c) <= set("-: ") for c in row)]  # not the rule
            out.append(_table([_inline(c) for c in cells[0]], ["<tr>" + "".join(f"<td>{_inline(c)}</td>" for c in row)
                                                               + "</tr>" for row in body], escaped=True))
        elif m := re.match(r"(#{1,6}) (.*)", lines[0]):
            level = min(len(m.group(1)) + 2, 6)  # under the page's h1 and the section's h2
            out.append(f"<h{level}>{_inline(m.group(2))}</h{level}>")
            if lines[1:]:
                out.append(markdown_html("\n".join(lines[1:])))
        elif all(line.startswith("- ") for line in lines):  # a list: an item a line (table.md's remarks)
            out.append("<ul>" + "".join(f"<li>{_inline(line[2:])}</li>" for line in lines) + "</ul>")
        elif block.strip():
            out.append(f"<p>{_inline(' '.join(lines))}</p>")
    return "\n".join(out)


def _inline(text: str) -> str:
    """Markdown's **bold**, `code` and backslash escapes (table.md's '\\*') in a line, as HTML; the rest escaped."""
    text = re.sub(r"\*\*(.+?)\*\*", r"<b>\1</b>", html.escape(text))
    text = re.sub(r"`(.+?)`", r"<code>\1</code>", text)
    return re.sub(r"\\([\\`*_{}\[\]()#+.!|-])", r"\1", text)


# ------------------------------------------------------------------------------------------------ command
def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("target", metavar="BUNDLE_OR_SWEEP",
                   help="a results folder (zbpscale collect makes one), or a sweep file or jobs folder: collected "
                        "first")
    p.add_argument("-o", "--out", metavar="FILE", help="the page to write (default: BUNDLE/report.html)")
    p.add_argument("--params", choices=("non-embedding", "total"), default="non-embedding",
                   help="N on the scale axes and in the gap fit (as zbpscale plot)")


def run(args: argparse.Namespace) -> None:
    report(args.target, args.out, params=args.params)
