"""The house rules of the package, checked on its source: the linter, who may import whom (each package's
docstring states it), that only RunFolder and Bundle name a file of a run or a bundle, that the records the
trainer and the executors really write are the record types, and the one temp-name scheme."""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "src" / "zbpscale"


def modules() -> dict[str, Path]:
    """{dotted name: file} of every module of the package."""
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def imports(path: Path) -> list[tuple[str, bool]]:
    """(imported zbpscale module, at module level?) for every import of a file; `from zbpscale.x import y`
    counts as zbpscale.x.y when that is a module, else as zbpscale.x."""
    tree, known, found = ast.parse(path.read_text()), modules(), []
    top = {id(node) for node in tree.body}
    for node in ast.walk(tree):
        names = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in known else node.module
                     for a in node.names]
        found += [(n, id(node) in top) for n in names if n.startswith("zbpscale")]
    return found


def test_the_code_passes_its_linter():
    """ruff with the rule set of pyproject.toml (pyflakes, pycodestyle, import order) over src, tests and tools."""
    out = subprocess.run([sys.executable, "-m", "ruff", "check", "src", "tests", "tools"], cwd=REPO,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr


SHARED = {"zbpscale", "zbpscale.argtypes", "zbpscale.bulk", "zbpscale.cached", "zbpscale.errors", "zbpscale.files",
          "zbpscale.lease", "zbpscale.proc", "zbpscale.signals", "zbpscale.tables", "zbpscale.text", "zbpscale.version"}
TORCH_FREE_TRAIN = {"zbpscale.train", "zbpscale.train.metrics", "zbpscale.train.exits", "zbpscale.train.trackers"}
RULES = {  # package: (may import at module level, may import inside a function too); "x.*": x and its modules
    "zbpscale.zbp": ({"zbpscale.zbp.*", "zbpscale.errors"}, {"zbpscale.signals"}),
    "zbpscale.data": ({"zbpscale.data.*", "zbpscale.cli", *SHARED}, set()),
    "zbpscale.run": ({"zbpscale.run.*", "zbpscale.zbp.config", *SHARED}, set()),  # the arm's ZBPConfig, in its config
    "zbpscale.train": ({"zbpscale.train.*", "zbpscale.zbp.*", "zbpscale.data.*", "zbpscale.run.*", *SHARED}, set()),
    "zbpscale.jobs": ({"zbpscale.jobs.*", "zbpscale.run.*", "zbpscale.data.*", "zbpscale.cli", "zbpscale.zbp.*",
                       "zbpscale.entry", *TORCH_FREE_TRAIN, *SHARED}, {"zbpscale.results", "zbpscale.results.bundle",
                                                                      "zbpscale.results.summary", "zbpscale.examples"}),
    "zbpscale.results": ({"zbpscale.results.*", "zbpscale.run.*", "zbpscale.jobs.state", *SHARED},
                         {"zbpscale.jobs.runs", "zbpscale.jobs.sweep", "zbpscale.jobs.tuning", "zbpscale.cli"}),
}
REACHES_UP = {"zbpscale.jobs.executors.slurm_job": "zbpscale.train.loop",
                "zbpscale.jobs.executors.local_queue.rank": "zbpscale.train.cli",
                "zbpscale.data.prepare_cli": "zbpscale.run.folder"}
"""Where a module reaches above its layer, inside one function: jobs start the trainer on the compute node; the
prepare-data command refuses a run's folder for its shards by the one rule of what a run folder is."""


def allowed(name: str, target: str, top: bool) -> bool:
    package = next((p for p in sorted(RULES, key=len, reverse=True) if name == p or name.startswith(p + ".")), None)
    if package is None:
        return True  # the shared modules and the thin entries: checked below
    at_top, inside = RULES[package]
    ok = at_top if top else at_top | inside
    return any(target == m or (m.endswith(".*") and (target == m[:-2] or target.startswith(m[:-1]))) for m in ok) \
        or (not top and REACHES_UP.get(name) == target)


def test_packages_import_only_what_their_docstrings_allow():
    """run (the run folder, its history, its config and record formats) imports only the shared modules and the
    arm's ZBPConfig, never train, jobs or results; train imports nothing of jobs nor results; jobs import train's
    torch-free modules (the loop only where a compute node runs it); results never import train, submit or an
    executor (a run's state, yes); zbp and data nothing above them (but the prepare-data command's look at what a
    run folder is, REACHES_UP); the shared modules nothing of the packages."""
    bad = []
    for name, path in modules().items():
        for target, top in imports(path):
            if name in SHARED - {"zbpscale"} and target not in SHARED:
                bad.append(f"{name} imports {target}")
            elif not allowed(name, target, top):
                bad.append(f"{name} imports {target}" + ("" if top else " (inside a function)"))
    assert not bad, "\n".join(bad)


def test_the_executor_interface_imports_no_back_end():
    """executors/base.py, what submit, status and cancel speak, imports no back end (SLURM's commands included)."""
    base = imports(modules()["zbpscale.jobs.executors.base"])
    assert [t for t, _ in base if t.startswith("zbpscale.jobs.executors")] == []


ENTRY = {"zbpscale.jobs.executors.slurm_job", "zbpscale.jobs.executors.local_queue.rank",
         "zbpscale.jobs.executors.local_queue.driver"}
"""What zbpscale.entry (the names jobs pickle and the local queue runs, kept across releases) delegates to."""
OLD_ENTRY_NAMES = {"zbpscale.job", "zbpscale.local", "zbpscale.local.rank"}
"""Names that jobs of releases before zbpscale.entry hold (pickled, or run by a live old driver)."""


ALLOWED_CIRCLES = [{"zbpscale.entry", "zbpscale.jobs.executors.slurm_job"}]
"""The one import circle kept: slurm_job imports entry's TrainJob and PrepJob under its own name, so that jobs
pickled by releases that defined them there still unpickle (entry.py's docstring), and entry imports slurm_job
when a job is called."""


def circles(graph: dict[str, set[str]]) -> list[set[str]]:
    """The import circles of a graph {module: the modules it imports}: its strongly connected components of more
    than one module (Tarjan's algorithm, iterative)."""
    index, low, stack, on, found, counter = {}, {}, [], set(), [], [0]
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter[0]
        counter[0] += 1
        stack.append(root)
        on.add(root)
        while work:
            node, edges = work[-1]
            for nxt in edges:
                if nxt not in index:
                    index[nxt] = low[nxt] = counter[0]
                    counter[0] += 1
                    stack.append(nxt)
                    on.add(nxt)
                    work.append((nxt, iter(sorted(graph.get(nxt, ())))))
                    break
                if nxt in on:
                    low[node] = min(low[node], index[nxt])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = set()
                    while True:
                        member = stack.pop()
                        on.discard(member)
                        component.add(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(component)
    return found


def test_the_package_has_no_import_circle():
    """#44: no module imports, at any depth and at any place (module level, inside a function, for type checking
    alone), a module that imports it back; but the one circle kept for old pickles (ALLOWED_CIRCLES)."""
    mods = modules()
    graph = {name: {t for t, _ in imports(path) if t in mods and t != name} for name, path in mods.items()}
    found = circles(graph)
    assert [c for c in found if c not in ALLOWED_CIRCLES] == [], found


def test_the_circle_check_finds_planted_circles():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": set(), "e": {"f"}, "f": {"e"}, "g": {"g"}}
    assert sorted(map(sorted, circles(graph))) == [["a", "b", "c"], ["e", "f"]]
    assert circles({"a": {"b"}, "b": {"c"}, "c": set()}) == []


def test_the_entry_module_imports_its_implementation_only_when_called():
    """zbpscale.entry imports nothing of zbpscale at module level (unpickling a job loads no implementation that may
    have moved) and, inside its functions, only the job modules it delegates to; the older releases' names only
    re-export it."""
    mods = modules()
    entry = imports(mods["zbpscale.entry"])
    assert [t for t, top in entry if top] == []
    assert {t for t, _ in entry} <= ENTRY
    for name in OLD_ENTRY_NAMES:
        assert {t for t, _ in imports(mods[name])} <= {"zbpscale.entry"}, name


def test_results_never_load_submit_and_status_never_loads_torch():
    """The rules hold for what an import really loads, not only for what a file spells."""
    code = ("import sys\n"
            "import zbpscale.results.collect, zbpscale.results.plot, zbpscale.results.upload\n"
            "print(sorted(m for m in sys.modules if m in ('zbpscale.jobs.submit', 'zbpscale.jobs.cancel')))\n"
            "import zbpscale.jobs.status, zbpscale.jobs.submit, zbpscale.jobs.cancel\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] == 'torch' or m == 'zbpscale.train.loop'))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == ["[]", "[]"]


OWNED = {"config.json", "plan.json", "metrics.jsonl", "heartbeat.json", "attempts.jsonl", "checkpoints", "logs",
         "COMPLETE", "CANCEL", ".trainer.lock", ".ranks", "manifest.json", "summary.json", "summary.csv", "table.md",
         "figures", "runs", "trackers.json", "tensorboard", "wandb"}
OWNERS = {"zbpscale.run.folder", "zbpscale.results.bundle", "zbpscale.data"}  # data: its prep's manifest
RUN_FILE_NAMES = re.compile(r"ckpt_|\.tmp-|_log\.(out|err)$|\{\}_(\{\}|0)\.log$|^\{\}\.json$")
"""What an f-string spelling a run's file looks like, its values as {}: a checkpoint, a temp file, a job's log,
a rank's stamp. files.py (the one temp-name scheme) and lease.py (its own files) spell theirs; the local queue's
entries (`<job>.json` under .localq/) are no run's files."""


def path_literals(path: Path) -> list[tuple[int, str]]:
    """String literals used as a file name: `x / "name"`, `x.joinpath("name")`, `Path("name")`, a glob or a
    with_name argument, f-strings there that spell a run's file (RUN_FILE_NAMES), and ckpt_ names in any string."""
    found, tree = [], ast.parse(path.read_text())
    exempt = path.name in ("files.py", "lease.py", "queue.py")
    docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                  if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef)) and node.body
                  and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)}
    for node in ast.walk(tree):
        args = []
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
            args = [node.left, node.right]
        elif isinstance(node, ast.Call):
            func = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
            if func in ("joinpath", "Path", "with_name", "glob", "rglob", "open"):
                args = node.args
        found += [(a.lineno, a.value) for a in args if isinstance(a, ast.Constant) and a.value in OWNED]
        for a in [a for a in args if isinstance(a, ast.JoinedStr) and not exempt]:
            text = "".join(str(v.value) if isinstance(v, ast.Constant) else "{}" for v in a.values)
            if RUN_FILE_NAMES.search(text):
                found.append((a.lineno, text))
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings \
                and re.search(r"ckpt_\d|ckpt_\*", node.value):
            found.append((node.lineno, node.value))
    return found


def test_only_run_folder_and_bundle_name_their_files():
    named = [f"{p.relative_to(REPO)}:{line}: {text!r}" for name, p in modules().items() if name not in OWNERS
             for line, text in path_literals(p)]
    assert not named, "name these through RunFolder or Bundle:\n" + "\n".join(named)


def test_the_file_name_check_finds_a_planted_name(tmp_path):
    """The check above can fail: it finds each way of spelling a file name."""
    planted = tmp_path / "planted.py"
    planted.write_text('from pathlib import Path\nrun = Path("x")\na = run / "config.json"\n'
                       'b = run.joinpath("COMPLETE")\nc = list(run.glob("ckpt_*.pt"))\nd = run / f"{job}_0.log"\n'
                       'e = run / f"{rank}.json"\nf = run.with_name(f".{run.name}.tmp-{pid}")\nok = run / f"{x}.png"\n')
    assert sorted(line for line, _ in path_literals(planted)) == [3, 4, 5, 6, 7, 8]


# ---------------------------------------------------------------- the record types, against what is written

def fields_of(kind: type) -> set[str]:
    return set(kind.__annotations__)


def test_the_records_of_real_runs_are_their_record_types(results_sweep):
    """Every line of every metrics.jsonl and attempts.jsonl and every heartbeat.json of a sweep trained for real
    (bp and ZBP, with diagnostics) has the fields of its record type, and its rows those of the row types."""
    from zbpscale.run.folder import RunFolder
    from zbpscale.run.history import EVENTS, read_attempts
    from zbpscale.run.records import RECORDS, BlockRow, CoreRow, Heartbeat, read_records

    kinds = set()
    runs = [p for p in (results_sweep.parent / "jobs" / "results").iterdir() if RunFolder(p).metrics.exists()]
    assert runs
    for run in runs:
        for record in read_records(run):
            kinds.add(record["kind"])
            assert set(record) <= fields_of(RECORDS[record["kind"]]), (run.name, record["kind"])
            for row in record.get("blocks", []):
                assert set(row) == fields_of(BlockRow)
            for row in record.get("cores", []):
                assert set(row) == fields_of(CoreRow)
        for event in read_attempts(run):
            assert set(event) <= fields_of(EVENTS[event["event"]]), (run.name, event["event"])
        beat = json.loads(RunFolder(run).heartbeat.read_text())
        assert set(beat) <= fields_of(Heartbeat)
    assert kinds >= {"start", "train", "eval", "diag", "end"}


def test_a_field_without_a_record_type_is_refused(tmp_path):
    from zbpscale.run.history import record
    from zbpscale.train.metrics import MetricsLog

    log = MetricsLog(tmp_path)
    with pytest.raises(TypeError, match="TrainRecord has no field val_loss"):
        log.write("train", step=0, val_loss=1.0)
    with pytest.raises(TypeError, match="Heartbeat has no field impl"):
        log.heartbeat(0, 0, force=True, impl={})
    with pytest.raises(TypeError, match="End has no field job"):
        record(tmp_path, "end", job="1", why="completed")
    with pytest.raises(TypeError, match="End.why must be one of"):
        record(tmp_path, "end", job_id="1", why="complete")


# ---------------------------------------------------------------- one temp-name scheme

def test_a_killed_checkpoint_writer_leaves_nothing_the_next_save_keeps(tmp_path):
    """A checkpoint writer killed mid-write leaves its temp file (files.temp_path); the next save
    removes it, as every writer's stale temps are found by the one pattern."""
    import torch

    from zbpscale import files
    from zbpscale.run.folder import RunFolder
    from zbpscale.train import checkpoint

    folder = RunFolder(tmp_path)
    folder.checkpoints.mkdir()
    stale = files.temp_path(folder.checkpoint(3))  # as a writer killed mid-checkpoint leaves it
    stale.write_bytes(b"half a checkpoint")
    checkpoint.save(tmp_path, 4, {"model": {"w": torch.zeros(2)}}, keep=2)
    assert sorted(p.name for p in folder.checkpoints.iterdir()) == [folder.checkpoint(4).name]


def test_the_state_words_of_the_command_help_are_the_states():
    from zbpscale.cli import COMMANDS
    from zbpscale.jobs.state import STATES

    help_states = re.search(r"states: (.*)", COMMANDS["status"][2]).group(1).split(", ")
    assert sorted(help_states) == sorted(STATES)
