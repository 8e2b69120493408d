"""The `zbpscale` command as a user runs it: output compared with the library's closed forms, and a user's
mistake compared with the one-line contract (no traceback, non-zero exit)."""

import subprocess
import sys

from conftest import config_json, unwrapped, venv_seeing_this_python, wait_until
from zbpscale.run.config import SIZES, n_params


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "zbpscale.cli", *args], capture_output=True, text=True,
                          timeout=120)


def test_sizes_lists_every_preset_with_its_closed_form_count():
    out = run_cli("sizes")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()[1:]
    assert [line.split()[0] for line in lines] == list(SIZES)
    for line, cfg in zip(lines, SIZES.values()):
        assert line.split()[6] == f"{n_params(cfg) / 1e6:.1f}M"


def test_the_size_table_of_the_docs_is_the_code_s():
    """docs/method.md's size table (the README's, before #56): every preset, in order, with the numbers
    `zbpscale sizes` prints (micro was missing)."""
    page = (Path(__file__).resolve().parents[1] / "docs" / "method.md").read_text()
    table = page[page.index("| size | layers |"):].split("\n\n")[0].splitlines()[2:]
    printed = run_cli("sizes").stdout.splitlines()[1:]
    assert [row.strip("|").split("|")[0].strip() for row in table] == list(SIZES)
    for row, line in zip(table, printed):
        assert [c.strip() for c in row.strip("|").split("|")] == line.split()


def test_every_module_the_readme_names_runs_as_python_dash_m():
    """The README said every command runs as `python -m zbpscale.<module>`; `python -m zbpscale.report` was 'No
    module named'. Each module its list names answers --help as `zbpscale COMMAND --help` does."""
    import re

    readme = " ".join((Path(__file__).resolve().parents[1] / "README.md").read_text().split())
    listed = readme.split("`python -m zbpscale.<module>` (")[1].split(";")[0]
    modules = re.findall(r"`([a-z_.]+)`", listed)
    assert "report" in modules and len(modules) >= 8, modules
    for module in modules:
        out = subprocess.run([sys.executable, "-m", f"zbpscale.{module}", "--help"], capture_output=True, text=True,
                             timeout=120)
        assert out.returncode == 0 and out.stdout.startswith("usage: "), (module, out.stderr)


def test_unknown_command_is_a_usage_error_not_a_traceback():
    out = run_cli("trian")
    assert out.returncode == 2
    assert "invalid choice" in out.stderr and "Traceback" not in out.stderr


def test_building_the_parser_imports_nothing_heavy():
    code = ("import sys; from zbpscale.cli import build_parser; build_parser(); "
            "print(sorted(m for m in ('torch', 'matplotlib', 'numpy', 'huggingface_hub', 'rich', 'submitit') "
            "if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stdout.strip() == "[]", out.stdout + out.stderr


def test_a_command_imports_its_own_module_alone_and_every_command_is_listed():
    """`zbpscale status ...` builds status's parser alone (status of 10,000 runs started on every command's
    import: a fifth of a second on a slow core); `zbpscale --help` and a mistaken name still list every command."""
    from zbpscale.cli import COMMANDS

    others = sorted({m for m, _, _ in COMMANDS.values()} - {"zbpscale.jobs.status", "zbpscale.jobs.runs"})
    code = ("import sys; from zbpscale.cli import build_parser; p = build_parser('status'); "
            "a = p.parse_args(['status', 'jobs/x', '--json']); "
            f"print(a.run.__module__, a.json, [m for m in {others!r} if m in sys.modules])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stdout.split() == ["zbpscale.jobs.status", "True", "[]"], out.stdout + out.stderr
    listing = run_cli("--help").stdout
    assert all(name in listing for name in COMMANDS)
    wrong = run_cli("statu", "jobs")
    assert wrong.returncode == 2 and all(f"'{name}'" in wrong.stderr for name in COMMANDS), wrong.stderr


def test_results_commands_turn_a_wrong_folder_into_one_line(tmp_path):
    for args in (("collect", str(tmp_path / "nowhere"), "--out", str(tmp_path / "out")),
                 ("plot", str(tmp_path)), ("upload", str(tmp_path))):
        out = run_cli(*args)
        assert out.returncode == 2 and out.stderr.startswith("error: ") and len(out.stderr.splitlines()) == 1, args
        assert "hint: " in out.stderr and "Traceback" not in out.stderr


# ------------------------------------------------------------------------ a new user's first hour (#15)
import json  # noqa: E402
import os  # noqa: E402
import signal  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import pytest  # noqa: E402

REPO = Path(__file__).resolve().parents[1]


def zbpscale(*args, cwd=None, env=None) -> subprocess.CompletedProcess:
    """The console script, as a user types it."""
    return subprocess.run(["zbpscale", *map(str, args)], capture_output=True, text=True, timeout=120, cwd=cwd,
                          env=env)


def project(tmp_path: Path, *sweeps: str) -> Path:
    """A user's project folder: sweeps/ with copies of the repository's sweep files."""
    home = tmp_path / "project"
    (home / "sweeps").mkdir(parents=True)
    for name in sweeps:
        (home / "sweeps" / name).write_text((REPO / "sweeps" / name).read_text())
    return home


def one_line_error(out: subprocess.CompletedProcess, *fragments: str) -> None:
    assert out.returncode == 2, out.stdout + out.stderr
    assert len(out.stderr.strip().splitlines()) == 1 and out.stderr.startswith("error: "), out.stderr
    assert "Traceback" not in out.stderr and all(f in out.stderr for f in fragments), out.stderr


def test_every_command_is_registered_one_way_with_its_own_help():
    """`zbpscale submit --help` says `zbpscale submit` (it said `python -m zbpscale.submit`), and so does the
    module form the users' card names; every command has help written for users, sizes and prepare-data too."""
    from zbpscale.cli import COMMANDS

    for name in COMMANDS:
        out = zbpscale(name, "--help")
        assert out.returncode == 0 and out.stdout.startswith(f"usage: zbpscale {name} "), (name, out.stdout[:200])
        assert COMMANDS[name][1].split(" (")[0].lower() in " ".join(out.stdout.lower().split()), name
    module = subprocess.run([sys.executable, "-m", "zbpscale.submit", "--help"], capture_output=True, text=True,
                            timeout=60)
    assert module.returncode == 0 and module.stdout == zbpscale("submit", "--help").stdout
    listing = zbpscale("--help").stdout
    assert all(name in listing for name in COMMANDS) and "prepare-data" in listing and "sizes" in listing
    assert "--data DIR" in zbpscale("prepare-data", "--help").stdout  # one name for the data folder


def test_a_sweep_that_is_not_there_is_one_line_worded_the_same_by_every_command(tmp_path):
    for target in (tmp_path / "sweeps" / "nope.py", tmp_path / "jobs" / "nope"):
        lines = set()
        for args in (("submit", target, "--dry-run"), ("status", target), ("cancel", target),
                     ("collect", target, "--out", tmp_path / "out")):
            out = zbpscale(*args, cwd=tmp_path)
            one_line_error(out, f"no sweep file or sweep folder at {target}")
            lines.add(out.stderr)
        assert len(lines) == 1, lines
    one_line_error(zbpscale("status", cwd=tmp_path), f"no jobs/ folder in {tmp_path}", "zbpscale status sweeps/")
    # a sweep's folder of runs, to a command that takes only its file: said so, with the file it was submitted from
    runs = tmp_path / "jobs" / "mine"
    (runs / "s60-bp").mkdir(parents=True)
    (runs / "s60-bp" / "config.json").write_text("{}")
    (runs / "sweep.json").write_text(json.dumps({"name": "mine", "sweep_file": str(tmp_path / "sweeps" / "mine.py")}))
    for command in ("submit", "sizes"):
        one_line_error(zbpscale(command, runs, cwd=tmp_path), f"{runs} is a folder, not a sweep file",
                       "its runs' sweep file: ", "sweeps/mine.py")


def immutable(folder: Path):
    """`folder` made immutable (chattr +i: even root cannot create in it) until the test ends; skips without it."""
    folder.mkdir(parents=True)
    if subprocess.run(["chattr", "+i", str(folder)], capture_output=True).returncode != 0:
        pytest.skip("chattr +i is not available here (not root, or not ext4/xfs)")
    return folder


@pytest.mark.parametrize("where", ["under a file", "immutable", "in /proc"])
def test_a_jobs_root_that_cannot_be_written_is_one_line_for_submit_and_its_dry_run(tmp_path, where):
    """Sweep.root under a regular file, in an immutable folder, or in /proc: submit and its dry run both refuse
    in the same line (the folder and the errno's words), exit 2, plan nothing and leave nothing behind."""
    if where == "under a file":
        (tmp_path / "file").write_text("x")
        root, cause = tmp_path / "file" / "jobs", f"{tmp_path / 'file'} is not a folder"
    elif where == "immutable":
        root, cause = immutable(tmp_path / "frozen") / "jobs", f"{tmp_path / 'frozen'}: Operation not permitted (EPERM)"
    else:
        root, cause = Path("/proc/zbpscale-test/jobs"), "/proc is on proc"
    home = project(tmp_path, "smoke.py")
    sweep = home / "sweeps" / "smoke.py"
    sweep.write_text(sweep.read_text().replace("SWEEP = Sweep(", f"SWEEP = Sweep(root={str(root)!r}, ", 1))
    before = sorted(p.name for p in tmp_path.rglob("*"))
    try:
        lines = set()
        for args in ((sweep, "--dry-run"), (sweep,)):
            out = zbpscale("submit", *args, cwd=home)
            one_line_error(out, f"cannot make the sweep's folder of runs {root / 'smoke'}: {cause}")
            assert out.stdout == "", out.stdout  # no plan
            lines.add(out.stderr)
        assert len(lines) == 1
    finally:
        if where == "immutable":
            subprocess.run(["chattr", "-i", str(tmp_path / "frozen")], check=True)
    assert sorted(p.name for p in tmp_path.rglob("*")) == before


def test_runs_go_to_the_sweeps_project_folder_from_any_directory(tmp_path):
    """From another folder, `submit <abs sweep> --dry-run` names the jobs root it uses (the sweep's project
    folder), and status of the same file finds the runs there: no silent duplicate sweep under the cwd."""
    home = project(tmp_path, "smoke.py")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    sweep = home / "sweeps" / "smoke.py"
    plan = zbpscale("submit", sweep, "--dry-run", "--executor", "local", cwd=elsewhere)
    assert plan.returncode == 0, plan.stderr
    assert f"runs in {home / 'jobs' / 'smoke'}; data in {home / 'data' / 'embedded'}" in unwrapped(plan.stdout)
    done = home / "jobs" / "smoke" / "tiny-bp"  # a run finished earlier, as the trainer leaves it
    done.mkdir(parents=True)
    (done / "config.json").write_text(config_json(steps=20, global_batch=8))
    (done / "COMPLETE").write_text("{}\n")
    out = zbpscale("status", sweep, "--json", cwd=elsewhere)
    rows = {r["run"]: r["state"] for r in json.loads(out.stdout)["smoke"]}
    assert out.returncode == 3 and rows == {"tiny-bp": "complete", "tiny-zbp_n4": "new"}, out.stderr
    again = zbpscale("submit", sweep, "--dry-run", "--executor", "local", cwd=elsewhere)
    assert "tiny-bp" in again.stdout and "complete" in again.stdout.split("tiny-bp")[1].splitlines()[0]
    assert not (elsewhere / "jobs").exists() and not (elsewhere / "data").exists()


def test_cancel_takes_a_sweep_folder_like_status_and_collect(tmp_path):
    home = project(tmp_path, "smoke.py")
    run = home / "jobs" / "smoke" / "tiny-bp"
    run.mkdir(parents=True)
    (run / "config.json").write_text("{}")
    for target in ("jobs/smoke", "sweeps/smoke.py"):
        out = zbpscale("cancel", target, cwd=home)
        assert out.returncode == 0 and out.stdout.startswith("nothing to cancel"), out.stdout + out.stderr
    one_line_error(zbpscale("cancel", "jobs/smoke", "--only", "zzz*", cwd=home), "zzz*")
    unsubmitted = zbpscale("cancel", "sweeps/smoke.py", "--only", "tiny-zbp_n4", cwd=home)  # planned, no folder yet
    assert unsubmitted.returncode == 0 and unsubmitted.stdout.startswith("nothing to cancel"), unsubmitted.stderr


def ctrl_c_reaches_it() -> None:
    """In a child about to start: SIGINT as a terminal gives it. A suite started as a background job of a shell
    (`setsid bash -c '... .ci/run' &`) inherits SIGINT ignored, its children too, and a Python started so keeps it
    ignored: the Ctrl-C a test sends would never arrive (seen: both Ctrl-C tests failed so, and only so)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def status_folder(tmp_path: Path) -> Path:
    """A sweep folder with a running run whose every column has a value, and a complete one."""
    sweep = tmp_path / "jobs" / "wide"
    for name, steps_done in (("s1b-zbp_n64_gaussian", 40), ("s1b-bp", 100)):
        run = sweep / name
        run.mkdir(parents=True)
        now = time.time()
        (run / "config.json").write_text(config_json(steps=100, global_batch=512))
        (run / "heartbeat.json").write_text(json.dumps({"step": steps_done, "time": now}))
        (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in (
            {"kind": "start", "time": now - 60}, {"kind": "train", "time": now, "step": steps_done - 1,
                                                  "loss": 3.25, "step_time": 2.0, "tokens_per_s": 262144.0},
            {"kind": "eval", "time": now, "step": steps_done - 1, "val_loss": 3.5})))
        if steps_done == 100:
            (run / "COMPLETE").write_text("{}\n")
    return sweep


def test_status_fits_an_80_column_terminal_and_keeps_every_column_on_a_wide_one(tmp_path):
    """On a terminal (the boxed lines status prints there, before any terminal could fold them): every line within
    the width; at 80 columns the least useful columns given up, at 200 none; at 30, fewer columns than status keeps
    (3) fit: the widest is narrowed, its cells cut with an ellipsis (rich's Table did so; drawn as text, the lines
    were 38 wide)."""
    import re

    from zbpscale.jobs import status

    data = [("wide", status.collect_rows(status_folder(tmp_path)))]
    for width, dropped in ((80, True), (200, False), (30, True)):
        drawn = status.text(data, width, box=True, color=True)
        lines = [re.sub(r"\x1b\[[0-9;]*m", "", line) for line in drawn.splitlines()]
        assert max(len(line) for line in lines) <= width, (width, drawn)
        table = [line for line in lines if line.startswith(("┃", "│"))]
        header = table[0]
        if width == 30:  # the arm zbp_n64_gaussian, the widest cell, cut
            assert [c.strip() for c in header.strip("┃").split("┃")] == ["size", "arm", "state"], header
            assert table[1:] == ["│ s1b  │ bp       │ complete │", "│ s1b  │ zbp_n64… │ running  │"], table
            continue
        assert all(c in header for c in ("size", "arm", "state", "progress", "val")), header
        assert ("beat" not in header) == dropped and ("s1b" in table[1]) and "running" in drawn


def test_status_piped_or_watched_into_a_file_writes_plain_lines(tmp_path):
    """Redirected, status prints plain lines (no box drawing) with every column that fits $COLUMNS (here all);
    --watch appends a timestamped table at each refresh (it wrote 0 bytes in 10 s) and Ctrl-C ends it with the
    sweep's exit status."""
    folder = status_folder(tmp_path)
    wide = {**os.environ, "COLUMNS": "200"}
    out = zbpscale("status", folder, env=wide)
    assert out.returncode == 3 and "┃" not in out.stdout and "│" not in out.stdout
    header = out.stdout.splitlines()[1].split()
    assert header == ["size", "arm", "state", "progress", "tokens", "train", "val", "tok/s", "ETA", "T/P/F", "job",
                      "beat"]
    log = tmp_path / "watch.log"
    with open(log, "w") as fh:
        proc = subprocess.Popen(["zbpscale", "status", str(folder), "--watch", "0.3"], stdout=fh,
                                stderr=subprocess.PIPE, text=True, env=wide, preexec_fn=ctrl_c_reaches_it)
        wait_until(lambda: log.read_text().count("sweep wide") >= 2, "two frames of the watch", 60, proc=proc)
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=30) == 3
    text = log.read_text()
    assert text.startswith("[20") and "s1b-zbp_n64_gaussian" not in text and "zbp_n64_gaussian" in text


def test_a_reader_that_leaves_before_the_output_ends_ends_the_command_quietly(tmp_path):
    """`zbpscale status | head`: the reader gone, status stops as cat does (exit 141, nothing on stderr), for the
    table, --json and --goodput; it was a BrokenPipeError traceback."""
    folder = status_folder(tmp_path)
    for extra in ([], ["--json"], ["--goodput"]):
        proc = subprocess.Popen(["zbpscale", "status", str(folder), *extra], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
        proc.stdout.close()  # the reader leaves before the first line is written
        err = proc.stderr.read()
        assert proc.wait(timeout=60) == 128 + signal.SIGPIPE and err == "", (extra, proc.returncode, err)


def test_sweep_mistakes_get_one_hint_and_a_did_you_mean(tmp_path):
    home = project(tmp_path, "smoke.py", "ladder.py")
    smoke = (home / "sweeps" / "smoke.py").read_text()
    (home / "sweeps" / "typo.py").write_text(smoke.replace('("eval_every", 10)', '("eval_evry", 10)'))
    (home / "sweeps" / "arm.py").write_text(smoke.replace('arm("zbp_n4", step_time_ratio=1.25)', 'arm("zbp_x4")'))
    out = zbpscale("submit", "sweeps/typo.py", "--dry-run", cwd=home)
    one_line_error(out, "sweeps/typo.py:", "did you mean eval_every (not eval_evry)?")
    out = zbpscale("submit", "sweeps/arm.py", "--dry-run", cwd=home)
    one_line_error(out, "unknown arm 'zbp_x4'")
    assert out.stderr.count("hint:") == 1 and "--dry-run" not in out.stderr
    (home / "sweeps" / "exits.py").write_text("import sys\n\nsys.exit(0)\n" + smoke)  # it ended silently, status 0
    one_line_error(zbpscale("submit", "sweeps/exits.py", cwd=home), "sweeps/exits.py:3: the sweep file exits (0)")
    train = subprocess.run([sys.executable, "-m", "zbpscale.train", "--run-dir", tmp_path / "r", "--size", "tiny",
                            "--data", tmp_path, "--steps", "3", "--set", "eval_evry=3"], capture_output=True,
                           text=True, timeout=120)
    assert train.returncode == 2 and "did you mean --set eval_every=3?" in train.stderr
    # The 8-GPU ladder planned for this GPU-less node's local queue: refused at --dry-run as at submit (#45: it was
    # a warning, exit 0), at the gpus_per_node= line.
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}
    plan = zbpscale("submit", "sweeps/ladder.py", "--dry-run", "--executor", "local", cwd=home, env=env)
    line = next(i for i, text in enumerate((home / "sweeps" / "ladder.py").read_text().splitlines(), 1)
                if text.startswith("NODE = "))
    one_line_error(plan, f"sweeps/ladder.py:{line}: s60-bp-lr3.75e-4 needs 8 GPUs; this node has 0")
    # its GPU-hours: the tuning grid's are submitted now, the final runs' wait for it (it said "73.4 still to run")
    from zbpscale.jobs.sweep import expand, load_sweep

    runs = expand(load_sweep(home / "sweeps" / "ladder.py"))
    hours = {role: sum(r.estimated_hours() * r.size.resources.gpus for r in runs if r.role == role)
             for role in ("tuning", "final")}
    assert f"GPU-hours: {sum(hours.values()):,.1f} planned, {hours['tuning']:,.1f} in the runs to submit now, " \
        f"{hours['final']:,.1f} in runs that wait for their tuning (assumes" in unwrapped(plan.stdout)
    assert "'?': CPU runs" in zbpscale("submit", "sweeps/smoke.py", "--dry-run", cwd=home).stdout.replace("\n", " ")


# ------------------------------------------------------------------------ a new user's second hour (#24)
import shutil  # noqa: E402


def test_python_m_works_from_the_folder_that_holds_the_clone(tmp_path):
    """A clone named zbpscale with a data/ folder, an editable install in a fresh venv, the user's own sweep
    file beside the clone: from that parent folder, with the clone folder first on sys.path (python -m puts the
    current folder there), `zbpscale` must still be the installed package and `zbpscale.data` its data package,
    not the clone's data/ folder (which made `python -m zbpscale.submit` crash before the src layout)."""
    clone = tmp_path / "zbpscale"
    ignore = shutil.ignore_patterns("__pycache__", "*.egg-info")
    clone.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, clone / name)
    for name in ("src", "sweeps"):
        shutil.copytree(REPO / name, clone / name, ignore=ignore)
    (clone / "data" / "embedded").mkdir(parents=True)  # what the README's main job leaves behind
    (clone / "jobs").mkdir()
    shutil.copy(REPO / "sweeps" / "smoke.py", tmp_path / "mytiny.py")
    python = venv_seeing_this_python(tmp_path / "venv")  # pip and setuptools: those of the tests' environment
    out = subprocess.run([str(python), "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation",
                          "--no-index", "-e", str(clone)], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}

    def user(*args):
        return subprocess.run([str(python), *args], capture_output=True, text=True, timeout=300, cwd=tmp_path,
                              env=env)

    where = user("-c", "import zbpscale, zbpscale.data; print(zbpscale.__file__); print(zbpscale.data.__file__)")
    assert where.stdout.split() == [str(clone / "src" / "zbpscale" / "__init__.py"),
                                    str(clone / "src" / "zbpscale" / "data" / "__init__.py")], where.stderr
    plan = user("-m", "zbpscale.submit", "mytiny.py", "--executor", "local", "--dry-run")
    assert plan.returncode == 0 and "Traceback" not in plan.stderr, plan.stderr[-2000:]
    assert "tiny-zbp_n4" in plan.stdout and "runs in" in plan.stdout
    status = user("-m", "zbpscale.status", "mytiny.py")
    assert status.returncode in (0, 3) and "Traceback" not in status.stderr, status.stderr[-2000:]


def in_terminal(args: list[str], columns: int = 80, cwd=None) -> str:
    """Run a command on a pseudo-terminal `columns` wide, as in a user's terminal; its output, colours removed."""
    import fcntl
    import pty
    import re
    import struct
    import termios

    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 50, columns, 0, 0))
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    proc = subprocess.Popen(args, stdin=slave, stdout=slave, stderr=slave, cwd=cwd, env=env, close_fds=True)
    os.close(slave)
    chunks = []
    while True:
        try:
            data = os.read(master, 1 << 16)
        except OSError:  # EIO: the command closed the terminal
            break
        if not data:
            break
        chunks.append(data)
    proc.wait(timeout=120)
    os.close(master)
    return re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", b"".join(chunks).decode(errors="replace")).replace("\r", "")


def test_doctor_and_the_plan_fit_an_80_column_terminal_and_print_everything_to_a_pipe(tmp_path):
    """One width rule (zbpscale/tables.py): on a terminal a table is never wider than it (the plan gives up its
    least useful columns, the doctor folds its text); piped, as wide as $COLUMNS (here wide enough for every
    column). (Lines of prose, such as a warning, are the terminal's to wrap.)"""
    plan = [sys.executable, "-m", "zbpscale.submit", str(REPO / "sweeps" / "ladder.py"), "--dry-run"]
    for args in (["zbpscale", "doctor"], plan):
        shown = in_terminal(args, 80, cwd=tmp_path)
        table = [line.rstrip() for line in shown.splitlines() if set(line) & set("│┃┏┗└┡")]
        assert len(table) > 5 and max(map(len, table)) <= 80, shown
    narrow = in_terminal(plan, 80, cwd=tmp_path)
    assert "s1b-zbp_n64" in narrow and "GPU-h" in narrow and "action" in narrow  # what a plan is for stays
    piped = subprocess.run(plan, capture_output=True, text=True, timeout=120, cwd=tmp_path,
                           env={**os.environ, "COLUMNS": "200"}).stdout
    assert "micro x accum x world" in piped and "micro x accum x world" not in narrow
    assert max(map(len, piped.splitlines())) > 80


def test_ctrl_c_while_a_command_imports_is_one_line_not_a_traceback(tmp_path):
    """`python -m zbpscale.train` spends its first seconds importing torch; a Ctrl-C then was an import traceback."""
    proc = subprocess.Popen([sys.executable, "-m", "zbpscale.train", "--run-dir", str(tmp_path / "run")],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=ctrl_c_reaches_it)
    maps = Path(f"/proc/{proc.pid}/maps")
    # libtorch mapped: torch's import has begun; its Python half takes a second more
    wait_until(lambda: "libtorch" in maps.read_text(), "torch's import to begin", 60, proc=proc, every=0.005)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode in (-signal.SIGINT, 130), (proc.returncode, err)
    assert err.strip() == "interrupted while starting; nothing was done", err
    assert not (tmp_path / "run").exists()


def test_ctrl_c_while_the_zbpscale_script_imports_is_one_line_too(tmp_path):
    """The one line was `python -m`'s alone: the `zbpscale` script (pip's, which imports zbpscale.cli before it
    runs the command) gave an import traceback. A script of that name, interrupted right after zbpscale's own
    import (where the Ctrl-C lands while the rest imports), says the line."""
    script = tmp_path / "bin" / "zbpscale"
    script.parent.mkdir()
    script.write_text("import zbpscale\nraise KeyboardInterrupt\n")
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=60)
    assert out.stderr.strip() == "interrupted while starting; nothing was done", out.stderr
    other = tmp_path / "bin" / "mytool"  # any other program that imports zbpscale keeps Python's own report
    other.write_text(script.read_text())
    assert "Traceback" in subprocess.run([sys.executable, str(other)], capture_output=True, text=True,
                                         timeout=60).stderr


def test_every_command_runs_the_same_way_under_python_m_and_zbpscale_alone_lists_them(tmp_path):
    """`python -m zbpscale.<module>` is the command (collect, plot, upload, doctor and prepare-data did nothing and
    exited 0); `zbpscale` with no command prints the command list, not only argparse's complaint, and exits 0:
    asking what there is is no mistake (#45)."""
    for module, command in (("collect", "collect"), ("plot", "plot"), ("upload", "upload"),
                            ("data.prepare_cli", "prepare-data")):
        out = subprocess.run([sys.executable, "-m", f"zbpscale.{module}"], capture_output=True, text=True,
                             timeout=120, cwd=tmp_path)
        said = f"zbpscale {command} " if module in ("collect", "upload") else f"usage: zbpscale {command}"
        assert out.returncode == 2 and said in out.stderr, (module, out.stderr)  # collect, upload: their hint's
    doctor = subprocess.run([sys.executable, "-m", "zbpscale.doctor"], capture_output=True, text=True, timeout=120,
                            cwd=tmp_path)
    assert "zbpscale doctor" in doctor.stdout and doctor.returncode in (0, 1)
    alone = subprocess.run(["zbpscale"], capture_output=True, text=True, timeout=120)
    assert alone.returncode == 0 and all(name in alone.stdout for name in ("submit", "status", "collect", "doctor"))


def test_collect_puts_the_bundle_beside_the_runs_wherever_it_is_run_and_help_texts_teach(tmp_path, results_sweep):
    """One rule for runs and results (#24): without --out the bundle goes to results/<sweep> beside the jobs folder
    of its runs, not under the current folder. `upload --help` shows no token on a command line; the trainer's
    --help opens with what it does and gives examples."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    out = zbpscale("collect", results_sweep, cwd=elsewhere)
    assert out.returncode == 0, out.stderr
    bundle = results_sweep.parent / "results" / "results"
    assert (bundle / "summary.json").is_file() and not (elsewhere / "results").exists()
    assert str(bundle) in out.stdout
    upload = zbpscale("upload", "--help")
    assert "HF_TOKEN=" not in upload.stdout and "hf auth login" in upload.stdout
    trainer = subprocess.run([sys.executable, "-m", "zbpscale.train", "--help"], capture_output=True, text=True,
                             timeout=120).stdout
    assert "Train one run" in trainer and "examples:" in trainer and "thin entry point" not in trainer


# ------------------------------------------------------------------------ everything fits 80 columns (#45)
def columns(n: int) -> dict:
    """The environment of a command whose output goes to a pipe that says it is `n` columns wide."""
    return {**os.environ, "COLUMNS": str(n)}


def test_every_help_fits_80_columns_and_keeps_its_examples_whole(monkeypatch, capsys):
    """Each command's --help at COLUMNS=80 (status's was 100 wide, submit's 110, sync's 111): every line within
    80, and every example line of the command's own text there as written, not folded; the same for `zbpscale`
    alone, `python -m zbpscale.submit` and the trainer's --help."""
    from zbpscale.cli import COMMANDS, build_parser

    monkeypatch.setenv("COLUMNS", "80")
    for name, (_, _, more) in COMMANDS.items():
        with pytest.raises(SystemExit):
            build_parser().parse_args([name, "--help"])
        shown = capsys.readouterr().out
        assert shown.startswith(f"usage: zbpscale {name}") and max(map(len, shown.splitlines())) <= 80, name
        examples = [line for line in more.splitlines() if line.startswith(" ")]
        assert all(line in shown.splitlines() for line in examples), (name, shown)
    for args in (["zbpscale"], ["zbpscale", "--help"], [sys.executable, "-m", "zbpscale.submit", "--help"],
                 [sys.executable, "-m", "zbpscale.train", "--help"]):
        out = subprocess.run(args, capture_output=True, text=True, timeout=120, env=columns(80))
        assert out.returncode == 0 and "usage:" in out.stdout and max(map(len, out.stdout.splitlines())) <= 80, args


def test_help_text_is_refilled_to_the_width_and_examples_are_kept():
    """text.fill_help against what it should make of each kind of line, at 40 columns."""
    from zbpscale.text import fill_help

    text = ("examples:\n"
            "  zbpscale status jobs/x     one sweep\n"  # fits: kept as written, its spaces too
            "  zbpscale status jobs/ladder --logs s60-zbp_n16 --lines 5\n"  # wider: folded under a deeper indent
            "\n"
            "Prose written on long lines is refilled to the width, a paragraph at a\n"
            "time.\n"
            "exit status: 0 all complete, 2 a mistake, 3 unfinished\n")  # a label opens a paragraph
    assert fill_help(text, 40) == [
        "examples:",
        "  zbpscale status jobs/x     one sweep",
        "  zbpscale status jobs/ladder --logs",
        "      s60-zbp_n16 --lines 5",
        "",
        "Prose written on long lines is refilled",
        "to the width, a paragraph at a time.",
        "exit status: 0 all complete, 2 a",
        "mistake, 3 unfinished",
    ]


def test_doctor_and_the_plan_piped_fit_columns_or_80(tmp_path):
    """Piped, `zbpscale doctor` was 160 wide whatever COLUMNS said and the ladder's plan table 121: both fit
    COLUMNS=80 now; the plan keeps what a plan is for (run, action, GPU-h) and gives up the rest."""
    doctor = subprocess.run(["zbpscale", "doctor"], capture_output=True, text=True, timeout=120, cwd=tmp_path,
                            env=columns(80))
    assert "zbpscale doctor" in doctor.stdout and max(map(len, doctor.stdout.splitlines())) <= 80, doctor.stdout
    plan = subprocess.run([sys.executable, "-m", "zbpscale.submit", str(REPO / "sweeps" / "ladder.py"), "--dry-run"],
                          capture_output=True, text=True, timeout=120, cwd=tmp_path, env=columns(80)).stdout
    table = [line.rstrip() for line in plan.splitlines() if set(line) & set("│┃┏┗└┡")]
    assert len(table) > 36 and max(map(len, table)) <= 80, plan
    assert all(word in table[1] for word in ("run", "action", "GPU-h")) and "micro x accum x world" not in plan
    assert "s1b-zbp_n64-s2" in plan


def test_status_piped_fits_columns_and_gives_up_empty_columns_first(tmp_path):
    """Piped at COLUMNS=80 every line of status's table fits. At a width that the columns empty in every row (no
    job: runs trained by hand; no ETA: none running) make up, exactly those go: at 80 columns status kept an
    empty ETA column while it gave up tok/s."""
    from zbpscale.jobs import status

    folder = status_folder(tmp_path)
    out = zbpscale("status", folder, env=columns(80))
    assert out.returncode == 3 and max(map(len, out.stdout.splitlines()[:4])) <= 80, out.stdout
    rows = [{**r, "eta_s": None} for r in status.collect_rows(folder)]
    full = status.plain_table("wide", rows, 1000)[1]
    assert full.split() == ["size", "arm", "state", "progress", "tokens", "train", "val", "tok/s", "ETA", "T/P/F",
                            "job", "beat"]
    narrow = status.plain_table("wide", rows, len(full) - len("  ETA") - len("  job"))
    assert narrow[1].split() == ["size", "arm", "state", "progress", "tokens", "train", "val", "tok/s", "T/P/F",
                                 "beat"]
    assert max(map(len, narrow)) <= len(full) - 10


def test_a_study_folder_outside_the_clone_starts_with_zbpscale_init(tmp_path):
    """#45 item 7: outside the clone, `sweeps/smoke.py` is missing with a hint naming `zbpscale init`; init writes
    the example sweeps, the clone's own files (its sweeps/ links to the package's), keeps a file already there
    byte for byte, and the study's plan puts its runs in the study folder. (The wheel install's init is run by
    test_local's main job.)"""
    for name in ("smoke", "mini_ladder", "ladder"):
        assert (REPO / "sweeps" / f"{name}.py").resolve() == REPO / "src" / "zbpscale" / "examples" / f"{name}.py"
    missing = zbpscale("submit", "sweeps/smoke.py", "--dry-run", cwd=tmp_path)
    one_line_error(missing, "no sweep file or sweep folder at sweeps/smoke.py",
                   "zbpscale init . writes the example sweeps")
    out = zbpscale("init", "study", cwd=tmp_path)
    study = tmp_path / "study"
    assert out.returncode == 0 and "next: cd study && python -m zbpscale.submit sweeps/smoke.py" in out.stdout, out
    for name in ("smoke", "mini_ladder", "ladder"):
        assert (study / "sweeps" / f"{name}.py").read_bytes() == (REPO / "sweeps" / f"{name}.py").read_bytes()
    edited = study / "sweeps" / "smoke.py"
    edited.write_text(edited.read_text() + "# my study\n")
    again = zbpscale("init", cwd=study)
    assert again.returncode == 0 and "kept sweeps/smoke.py (already there: not overwritten)" in again.stdout, again
    assert edited.read_text().endswith("# my study\n")
    plan = zbpscale("submit", "sweeps/smoke.py", "--dry-run", cwd=study, env={**os.environ, "COLUMNS": "300"})
    assert plan.returncode == 0 and f"runs in {study / 'jobs' / 'smoke'};" in plan.stdout, plan.stdout + plan.stderr


def test_one_run_s_folder_and_a_results_folder_given_as_data_are_named_for_what_they_are(tmp_path, capsys):
    """cancel, collect and report of one run's folder said 'no runs under' it, with a hint to submit a sweep
    first (then to give its sweep's folder with --only, which collect and report do not take); prepare-data into a
    results bundle hinted to delete the bundle."""
    from zbpscale.cli import main

    run = tmp_path / "jobs" / "s" / "tiny-bp"
    run.mkdir(parents=True)
    (run / "config.json").write_text("{}\n")
    for command in ("cancel", "collect", "report"):
        assert main([command, str(run)]) == 2
        err = capsys.readouterr().err
        assert f"{run} is one run's folder, not a sweep's (hint: give its sweep's folder: {run.parent} (cancel and " \
               "sync take --only tiny-bp for this run alone" in err, err  # collect and report have no --only
    sweep = tmp_path / "never.py"  # never submitted: collect wrote a bundle of 'new' runs, report an empty page
    sweep.write_text("from zbpscale.sweep import *\nSWEEP = Sweep(name='never', sizes=(Size(name='tiny', "
                     "global_batch=8, tokens=8192),), arms=(arm('bp'),), data=Data(dir='d'), "
                     f"root={str(tmp_path)!r})\n")
    for command in ("collect", "report"):
        assert main([command, str(sweep)]) == 2
        err = capsys.readouterr().err
        assert "no run of sweep never has a folder yet: nothing to collect" in err and "submit it first" in err, err
    assert not (tmp_path / "results" / "never").exists()
    bundle = tmp_path / "results" / "s"
    bundle.mkdir(parents=True)
    (bundle / "manifest.json").write_text(json.dumps({"format": "zbpscale-results", "sweep": "s", "runs": {}}))
    proc = run_cli("prepare-data", "--source", "embedded", "--data", str(bundle))  # it leaves bare: a process
    assert proc.returncode == 2, proc.stderr
    err = proc.stderr
    assert "holds a manifest.json that is not a data prep's" in err and "delete" not in err, err


def test_init_never_writes_through_a_link_and_says_a_file_in_a_folder_s_place_in_one_line(tmp_path):
    """init into a study whose sweeps/smoke.py is a link to nothing wrote the example through it, out of the study
    folder; `init --configs` where configs/model is a file was a traceback (FileExistsError); a folder with a space
    in its name was printed unquoted in the `next:` line."""
    study = tmp_path / "my study"
    (study / "sweeps").mkdir(parents=True)
    outside = tmp_path / "elsewhere.py"
    (study / "sweeps" / "smoke.py").symlink_to(outside)
    (study / "configs").mkdir()
    (study / "configs" / "model").write_text("mine\n")
    out = zbpscale("init", "my study", cwd=tmp_path)
    assert out.returncode == 0 and not outside.exists(), out
    assert "kept 'my study/sweeps/smoke.py'" in out.stdout or "kept my study/sweeps/smoke.py" in out.stdout, out
    assert "next: cd 'my study' && python -m zbpscale.submit" in out.stdout, out.stdout
    configs = zbpscale("init", "my study", "--configs", cwd=tmp_path)
    one_line_error(configs, "cannot make my study/configs/model: my study/configs/model is a file",
                   "give a folder you can write")
    assert (study / "configs" / "model").read_text() == "mine\n"


def test_a_boxed_table_is_the_rich_table_it_replaces():
    """tables.boxed draws status's, goodput's and the plan's terminal tables as text (a rich Table took 6.3 s to
    draw status's 10,000 rows, the plan's 3 s): line for line what rich draws for the same cells (a heavy rule under
    the header, a space each side, words left, numbers right), on 300 random tables; in color, the same text with
    each styled cell, and the header, in its style's codes; narrower than it needs, within the width, each cell
    whole or cut with an ellipsis."""
    import io
    import random
    import re

    from rich.console import Console
    from rich.table import Table

    from zbpscale.tables import boxed, painted, plain_lines, widths

    rng = random.Random(0)
    for _ in range(300):
        columns = [f"c{k}" + "x" * rng.randint(0, 6) for k in range(rng.randint(1, 6))]
        rows = [{c: rng.choice(["", "a", "complete", "3.14", "1,020/2,000 51%", "ünï"]) for c in columns}
                for _ in range(rng.randint(0, 5))]
        left = {c for c in columns if rng.random() < 0.5}
        table = Table()
        for c in columns:
            table.add_column(c, justify="left" if c in left else "right", no_wrap=True)
        for r in rows:
            table.add_row(*(r[c] for c in columns))
        drawn = io.StringIO()
        Console(file=drawn, width=400, force_terminal=False).print(table)
        assert boxed(columns, rows, left) == drawn.getvalue().splitlines()
        colored = boxed(columns, rows, left, color=True, style=lambda i, c: "bold red" if i % 2 else None)
        assert [re.sub(r"\x1b\[[0-9;]*m", "", line) for line in colored] == drawn.getvalue().splitlines()
        assert all(f" {painted(c, 'bold')}" in colored[1] for c in columns)
        assert all(f" {painted(r[c], 'bold red')}" in colored[3 + i] for i, r in enumerate(rows) if i % 2
                   for c in columns)
        assert painted("x", "bold red") == "\x1b[1;31mx\x1b[0m"
        first = lambda i, c: "green" if c == columns[0] and i % 2 else None  # noqa: E731 - one column styled
        one = boxed(columns, rows, left, color=True, style=first)  # the other columns drawn without a style
        assert [re.sub(r"\x1b\[[0-9;]*m", "", line) for line in one] == drawn.getvalue().splitlines()
        assert all(f" {painted(r[columns[0]], 'green')}" in one[3 + i] for i, r in enumerate(rows) if i % 2)
        assert sum(line.count("\x1b[0m") for line in one[3:-1]) == len(rows) // 2  # those cells alone
        wide = {**widths(columns, rows), "other": 99}  # the widths status measures once, of more columns
        assert boxed(columns, rows, left, wide=wide) == boxed(columns, rows, left)
        assert plain_lines(columns, rows, left, wide=wide) == plain_lines(columns, rows, left)
        narrow = len(drawn.getvalue().splitlines()[0]) - rng.randint(1, 12)  # narrower than it needs
        if narrow >= 4 * len(columns) + 1:  # a character a column at least
            cut = boxed(columns, rows, left, width=narrow)
            assert boxed(columns, rows, left, width=narrow, wide=wide) == cut
            assert len(cut) == len(rows) + 4 and all(len(line) <= narrow for line in cut), (narrow, cut)
            for line, cells in zip(cut[3:-1], rows):
                for got, c in zip(line[1:-1].split("│"), columns):
                    got = got[1:-1].strip()
                    assert got == cells[c] or (got.endswith("…") and cells[c].startswith(got[:-1])), (got, cells[c])


# ------------------------------------------------------------------ everyday mistakes, one line each (2026-12-05)
def test_a_fifo_for_a_model_file_a_name_too_long_and_sync_before_any_submit_are_one_line(tmp_path, capsys):
    """A model YAML that is a FIFO hung `sizes` and the dry run for ever; a size name of 300 characters passed the
    dry run and failed the submit with a traceback (a file name too long); `sync` of a sweep never submitted raised
    FileNotFoundError."""
    from zbpscale.cli import main

    os.mkfifo(tmp_path / "shape.yaml")
    sweep = tmp_path / "s.py"
    body = (f"from zbpscale.sweep import *\nSWEEP = Sweep(name='s', sizes=(Size(name={{name!r}}, global_batch=8, "
            f"tokens=8192{{model}}),), arms=(arm('bp'),), data=Data(dir='d', source='embedded'), "
            f"root={str(tmp_path)!r})\n")
    for name, model, words in (("mine", ", model='shape.yaml'", "shape.yaml is not a file"),
                               ("x" * 300, ", model=ModelConfig(n_layer=2, n_head=2, d_model=64)",
                                "must be at most 100 characters")):
        sweep.write_text(body.format(name=name, model=model))
        code = main(["submit", str(sweep), "--dry-run", "--executor", "local"])
        err = capsys.readouterr().err
        assert code == 2 and words in err and len(err.splitlines()) == 1, err
    sweep.write_text(body.format(name="tiny", model=""))
    assert main(["sync", str(sweep)]) == 0
    assert "nothing to upload" in capsys.readouterr().out


@pytest.mark.parametrize("args, words", [
    (("submit", "x.py", "--max-parallel", "-1"), "argument --max-parallel: an integer >= 1, got '-1'"),
    (("submit", "x.py", "--max-parallel", "0"), "argument --max-parallel: an integer >= 1, got '0'"),
    (("status", "--watch", "0"), "argument --watch: a number >= 0.1 and <= 86400, got '0'"),
    (("status", "--lines", "-5"), "argument --lines: an integer >= 1, got '-5'"),
    (("status", "--stall-after", "-1"), "argument --stall-after: a number >= 1, got '-1'"),
    (("status", "--watch", "inf"), "argument --watch: a number >= 0.1 and <= 86400, got 'inf'"),
    (("status", "--watch", "1e12"), "argument --watch: a number >= 0.1 and <= 86400, got '1e12'"),  # an overflow
    (("cancel", "x", "--timeout", "nan"), "argument --timeout: a number >= 0, got 'nan'"),
    (("prepare-data", "--data", ""), "argument --data/--out: a folder's path, got ''"),  # wrote into ./
    (("status", "--bogus"), "zbpscale status: error: unrecognized arguments: --bogus"),  # under the top usage
    (("prepare-data", "--data", "d", "--log-every", "nan"), "argument --log-every: a number >= 0.1, got 'nan'"),
    (("status", "--json", "--watch"), "error: --json does not --watch"),
    (("status", "--logs", "r", "--watch", "5"), "error: --logs does not --watch"),
    (("status", "--logs", "r", "--json"), "error: --logs prints a log, not JSON"),
])
def test_a_number_out_of_range_or_flags_that_do_not_go_together_are_one_line(args, words, capsys):
    """A negative --max-parallel was kept in the local queue's settings and stopped it for good; --watch 0 or -1
    spun or raised; --lines -5 printed all but five lines; --json and --logs ignored --watch."""
    from zbpscale.cli import main

    try:
        code = main(list(args))
    except SystemExit as stop:  # argparse's usage error
        code = stop.code
    err = capsys.readouterr().err
    assert code == 2 and words in err.splitlines()[-1] and "Traceback" not in err, err


def test_a_max_parallel_below_one_kept_by_an_older_release_does_not_stop_the_queue(tmp_path):
    from zbpscale.jobs.executors.local_queue.driver import Driver
    from zbpscale.jobs.executors.local_queue.queue import LocalQueue

    queue = LocalQueue(tmp_path)
    queue.dir.mkdir(parents=True)
    driver = Driver(queue)
    default = 0 if driver.inventory else 1  # as many as the GPUs allow; 1 on a CPU-only node
    for kept, bound in ((-1, default), (0, default), (3, 3)):
        (queue.dir / "settings.json").write_text(json.dumps({"max_parallel": kept}))
        assert driver.max_parallel() == bound, kept


def test_results_commands_say_one_line_for_a_wrong_place_and_collect_mends_a_garbled_summary(tmp_path, results_sweep,
                                                                                             capsys):
    """collect into a file, into the runs' own folder, into a read-only folder; a report's page onto a folder; plot
    of a folder of runs (its hint collects them where collect puts them); --with-ckpt and sync's --only that name no
    run: each one line (they were tracebacks, or a silent success). A summary.json cut short is one line for plot
    and report, and collecting again writes it anew, equal to a fresh collect's."""
    from zbpscale.cli import main

    jobs = tmp_path / "jobs"
    shutil.copytree(results_sweep.parent / "jobs", jobs)
    runs = jobs / "results"
    (tmp_path / "afile").write_text("")
    locked = tmp_path / "locked"
    locked.mkdir()

    def one_line(*args) -> str:
        code = main([str(a) for a in args])
        err = capsys.readouterr().err
        assert code == 2 and len(err.splitlines()) == 1 and "hint: " in err, (args, err)
        return err

    assert "is not a folder" in one_line("collect", runs, "--out", tmp_path / "afile")
    assert "inside the sweep's folder of runs" in one_line("collect", runs, "--out", runs)
    assert "inside the sweep's folder of runs" in one_line("collect", runs, "--out", runs / runs.name / "x")
    assert main(["collect", str(runs), "--out", str(runs / ".." / ".." / "via-dots")]) == 0  # '..' leaves it
    capsys.readouterr()
    assert "holds the sweep's folder of runs" in one_line("collect", runs, "--out", jobs)  # status saw it as a sweep
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "summary.csv").write_text("my notes\n")
    assert "holds files and is not a results folder collect wrote" in one_line("collect", runs, "--out", mine)
    assert (mine / "summary.csv").read_text() == "my notes\n"
    stopped = tmp_path / "stopped"  # what a collect stopped before its manifest leaves: collected again
    shutil.copytree(tmp_path / "via-dots" / "runs", stopped / "runs")
    assert main(["collect", str(runs), "--out", str(stopped)]) == 0
    capsys.readouterr()
    assert "matches no run" in one_line("collect", runs, "--with-ckpt", "NOPE-*")
    # --with-ckpt takes an optional value: the sweep written after it was taken as its value ("arguments are
    # required: sweep"); a value that is no file or folder leaves the sweep missing, in one line
    assert "no sweep given (hint: give a sweep file or folder" in one_line("collect", "--with-ckpt", "NOPE-*")
    assert main(["collect", "--with-ckpt", str(runs), "--out", str(tmp_path / "all-ckpts")]) == 0
    capsys.readouterr()
    assert json.loads((tmp_path / "all-ckpts" / "manifest.json").read_text())["with_ckpt"] is True
    assert "HF_HUB_OFFLINE is set" in one_line("upload", "--with-ckpt", tmp_path / "all-ckpts")  # the bundle taken
    assert "no bundle given (hint: give a collected results folder" in one_line("upload", "--with-ckpt")
    assert "matches no run" in one_line("sync", runs, "--only", "nope")
    hint = one_line("plot", runs)
    assert "holds runs" in hint and f"zbpscale collect {runs}" in hint and str(tmp_path / "results" / "results") in hint
    if os.geteuid() != 0:  # root writes anywhere
        locked.chmod(0o555)
        assert "cannot write the bundle" in one_line("collect", runs, "--out", locked / "b")
    assert main(["collect", str(runs)]) == 0
    bundle = tmp_path / "results" / "results"
    whole = (bundle / "summary.json").read_bytes()
    capsys.readouterr()
    said = one_line("plot", bundle / "runs")  # its hint was to collect them, which is refused: the bundle's copies
    assert f"is the runs folder of the collected results folder {bundle} (hint: give the results folder" in said
    copy = next((bundle / "runs").iterdir())  # one run's copy: its hint was to collect bundle/runs (refused)
    assert f"{copy} is a run's copy in the collected results folder {bundle} (hint: give the results folder: " \
           f"{bundle})" in one_line("plot", copy)
    figures = bundle / "figures"  # plot's: every command's hint was a folder it then refused, or to submit a sweep
    figures.mkdir(exist_ok=True)
    for command, inner in (("plot", figures), ("upload", figures), ("report", figures), ("report", copy),
                           ("report", bundle / "runs")):
        assert f"{inner} is inside the collected results folder {bundle} (hint: give the results folder: " \
               f"{bundle})" in one_line(command, inner), (command, inner)
    for inner in (figures, copy):  # collect's hint was to collect bundle/runs, for the copy (refused)
        assert f"{inner} is inside the collected results folder {bundle} (hint: collect the sweep it came from: " \
               f"zbpscale collect {runs})" in one_line("collect", inner)
    assert "does not exist" in one_line("plot", tmp_path / "nowhere")
    frozen = tmp_path / "frozen-bundle"  # a bundle this process cannot write in: a traceback (EROFS, EPERM)
    shutil.copytree(bundle, frozen)
    if subprocess.run(["chattr", "+i", str(frozen)], capture_output=True).returncode == 0:
        try:
            assert f"cannot write table.md and the figures into {frozen}: {frozen}: Operation not permitted" in \
                one_line("plot", frozen)
        finally:
            subprocess.run(["chattr", "-i", str(frozen)], check=True)
    assert "is a folder" in one_line("report", bundle, "-o", tmp_path)
    for kept in (results_sweep, bundle / "summary.json"):  # only a page report wrote is written over
        before = kept.read_bytes()
        assert "is not a report this command wrote" in one_line("report", bundle, "-o", kept)
        assert kept.read_bytes() == before
    assert main(["report", str(bundle), "-o", str(tmp_path / "r.html")]) == 0
    assert main(["report", str(bundle), "-o", str(tmp_path / "r.html")]) == 0  # its own page again
    capsys.readouterr()
    assert "is not a folder" in one_line("report", bundle, "-o", tmp_path / "afile" / "r.html")
    (bundle / "summary.json").write_bytes(whole[:len(whole) // 2])
    assert "is not a summary collect wrote" in one_line("plot", bundle)
    assert "is not a summary collect wrote" in one_line("report", bundle)
    assert main(["collect", str(runs)]) == 0
    assert "written anew from the runs" in capsys.readouterr().out
    assert (bundle / "summary.json").read_bytes() == whole
    manifest = json.loads((bundle / "manifest.json").read_bytes())  # garbled: the bundle was refused as not collect's
    (bundle / "manifest.json").write_text("{garbage")
    assert main(["collect", str(runs)]) == 0
    assert {**json.loads((bundle / "manifest.json").read_bytes()), "collected": 0} == {**manifest, "collected": 0}
