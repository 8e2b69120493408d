"""Shared test set-up: offline mode for every hub client and W&B, deterministic torch on 2 cores; readers of what
the experiment trackers wrote."""

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("WANDB_MODE", "offline")  # W&B never waits on a network here, whatever key a shell holds
# The suite runs many torch processes at once on few cores (xdist workers, each with trainers of its own): OpenMP
# threads that spin while they wait for work take the cores the others need. Three 2-thread trainers side by side
# on 2 cores took 101 s with spinning, 33 s without. The wait policy changes no result, only how threads idle.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import json  # noqa: E402
import struct  # noqa: E402
import textwrap  # noqa: E402
from pathlib import Path  # noqa: E402

import pytest  # noqa: E402
import torch  # noqa: E402

from zbpscale.train.hostmem import keep_freed_memory  # noqa: E402

keep_freed_memory()  # as every CPU trainer does: the tests that train in this process run at a trainer's speed


# ---------------------------------------------------------------- time limits
TIME_LIMITS_LOG = os.environ.get("ZBPSCALE_TIME_LIMITS")
"""A JSONL file where every wait with a time limit (a subprocess's timeout, a `wait_until`) is written down with
the time it took, when the variable is set: tools/time_limits.py reads it into each limit's margin on the machine
that ran the suite. A fixed limit must hold on a loaded 2-core machine of either kind with 3x to spare."""


def note_limit(limit: float, took: float, expired: bool) -> None:
    """Write one wait down in TIME_LIMITS_LOG (if set): where in tests/ its limit is written, the test, the limit
    and the seconds it took. One short line appended at a time, so xdist workers can share the file. A subprocess
    wait that the code under test makes (zbpscale's own timeouts, run in the test's process) is not the suite's
    limit: left out."""
    if not TIME_LIMITS_LOG:
        return
    import subprocess
    import sys

    here, frame = Path(__file__).parent, sys._getframe(1)
    while frame and (frame.f_code.co_filename == subprocess.__file__ or frame.f_code.co_name in _NOT_CALLERS):
        frame = frame.f_back
    if frame is None or Path(frame.f_code.co_filename).parent != here:
        return
    line = {"where": f"{Path(frame.f_code.co_filename).name}:{frame.f_lineno}",
            "test": os.environ.get("PYTEST_CURRENT_TEST", "").rsplit(" (", 1)[0],
            "limit": limit, "took": round(took, 3), "expired": expired}
    with open(TIME_LIMITS_LOG, "a") as fh:
        fh.write(json.dumps(line) + "\n")


_NOT_CALLERS = ("note_limit", "wait_until", "_timed")


def _time_subprocess_waits() -> None:
    """Popen.communicate and Popen.wait (so subprocess.run too) note each call given a timeout; a call inside
    another (communicate waits) is the outer call's."""
    import functools
    import inspect
    import subprocess
    import threading
    import time

    inside = threading.local()

    def timed(method):
        signature = inspect.signature(method)

        @functools.wraps(method)
        def _timed(self, *args, **kwargs):
            timeout = signature.bind(self, *args, **kwargs).arguments.get("timeout")
            if timeout is None or getattr(inside, "busy", False):
                return method(self, *args, **kwargs)
            inside.busy, t0, expired = True, time.monotonic(), False
            try:
                return method(self, *args, **kwargs)
            except subprocess.TimeoutExpired:
                expired = True
                raise
            finally:
                inside.busy = False
                note_limit(timeout, time.monotonic() - t0, expired)

        return _timed

    subprocess.Popen.communicate = timed(subprocess.Popen.communicate)
    subprocess.Popen.wait = timed(subprocess.Popen.wait)


if TIME_LIMITS_LOG:
    _time_subprocess_waits()


def losses(run_dir: Path) -> list[tuple[int, float]]:
    """A run's (step, train loss) records, in order: what resume tests compare bitwise with a straight run."""
    from zbpscale.run.records import read_records

    return [(r["step"], r["loss"]) for r in read_records(run_dir) if r["kind"] == "train"]


def wait_until(predicate, what: str, timeout: float = 300, *, proc=None, every: float = 0.2,
               run: Path | None = None) -> None:
    """Poll `predicate` every `every` seconds until it holds; fail saying `what` was not seen within `timeout`
    seconds (with `run`'s state: what a failure on a CI machine leaves to read), or (given `proc`, a Popen) that the
    process exited first, with its output."""
    import time

    t0 = time.monotonic()
    while not predicate():
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"{what}: the process exited first ({proc.returncode}): {proc.communicate()}")
        if time.monotonic() - t0 > timeout:
            note_limit(timeout, time.monotonic() - t0, True)
            state = f"\n{run_state(run)}" if run is not None else ""
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}{state}")
        time.sleep(every)
    note_limit(timeout, time.monotonic() - t0, False)


def unwrapped(text: str) -> str:
    """Output with the prose that tables.wrap folded joined back into one line each (a line that begins with spaces
    continues the one before it): for assertions on what a note says, not on where the terminal's width broke it."""
    import re

    return re.sub(r"\n +", " ", text)


def run_state(run: Path, lines: int = 40) -> str:
    """A run folder's attempts and the tail of each of its job logs (stack frames left out), as text."""
    parts = []
    for path in [run / "attempts.jsonl", *sorted((run / "logs").glob("*.out"))]:
        try:
            text = path.read_text(errors="replace").splitlines()
        except OSError as err:
            parts.append(f"--- {path.name}: {err}")
            continue
        kept = [line for line in text if not line.startswith(("  File ", "    "))]
        parts.append(f"--- {path.name} (last {lines} of {len(kept)} lines)\n" + "\n".join(kept[-lines:]))
    return "\n".join(parts)


def pytest_xdist_auto_num_workers(config):
    """`-n auto`: one worker more than the machine has cores, since many tests spend part of their time waiting
    (on SLURM's scheduler, a timeout, a process they killed), and no more than tools/slurm_local.py has port sets
    for, since each worker may start a SLURM cluster of its own (two sets kept: a user's cluster, the 2-node one).
    PYTEST_XDIST_AUTO_NUM_WORKERS overrides it."""
    given = os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS", "")
    return int(given) if given.isdigit() else min(len(os.sched_getaffinity(0)) + 1, load_slurm_local().PORT_SETS - 2)


ONE_WORKER = ("test_data.py", "test_figures.py", "test_many_nodes.py", "test_plot.py")
"""Test files whose tests share costly module-scoped fixtures (the many-node tests: a 2-node cluster and its
reference runs): each goes whole to one xdist worker, which builds them once. Any other test goes on its own."""


def unit_of(nodeid: str) -> str:
    """The unit of work an xdist worker is given that this test is part of: its file or itself."""
    path = nodeid.split("::")[0]
    return path if path.rsplit("/", 1)[-1] in ONE_WORKER else nodeid


def pytest_xdist_make_scheduler(config, log):
    """xdist's scope scheduler over `unit_of`'s units, in the order of the collection (pyproject's addopts says
    --no-loadscope-reorder). Its own --dist loadgroup marks are not used: with pytest 9.2 they group nothing."""
    from xdist.scheduler import LoadScopeScheduling

    class Units(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return unit_of(nodeid)

    return Units(config, log)


def pytest_collection_modifyitems(config, items):
    """Under xdist, the costliest units first (a test marked slow counted as a minute, any other as a second), so
    that no worker begins a long one when the others are nearly done; a unit's tests stay in file order."""
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        return
    unit, cost = {item: unit_of(item.nodeid) for item in items}, {}
    for item in items:
        cost[unit[item]] = cost.get(unit[item], 0) + (60 if item.get_closest_marker("slow") else 1)
    items.sort(key=lambda item: -cost[unit[item]])


@pytest.fixture(autouse=True)
def _torch_defaults():
    torch.manual_seed(0)
    yield


def load_tool(name: str):
    """tools/<name>.py, imported by path (tools/ is not a package); registered in sys.modules, where its
    dataclasses look their module up."""
    import importlib.util
    import sys
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "tools" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def venv_seeing_this_python(folder: Path) -> Path:
    """Make a fresh venv (no pip of its own) whose interpreter also sees every package of the interpreter that
    runs the tests, wherever that lives (a venv as the README makes, a conda env, a bare interpreter); its
    python. A .pth file in the new venv lists the running interpreter's site folders after the venv's own, so
    what the venv installs wins, and pip, setuptools and torch come from the environment the user set up
    (`--system-site-packages` would give the *base* interpreter's, not the user's venv's). Offline."""
    import site
    import subprocess
    import sys

    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(folder)], check=True, timeout=120)
    python = folder / "bin" / "python"
    inner = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                           capture_output=True, text=True, check=True, timeout=60).stdout.strip()
    outer = [*site.getsitepackages(), *([site.getusersitepackages()] if site.ENABLE_USER_SITE else [])]
    (Path(inner) / "_outer_environment.pth").write_text("".join(f"{p}\n" for p in outer if Path(p).is_dir()))
    return python


@pytest.fixture(scope="session")
def wheel_python(tmp_path_factory) -> Path:
    """The python of a fresh venv where zbpscale is a non-editable install (`pip install .` of a copy of this
    tree: pyproject.toml, README.md, src/) whose source copy is then deleted, so nothing can import from a
    source folder; the rest (torch, submitit, ...) comes from the tests' environment. Offline."""
    import shutil
    import subprocess

    repo = Path(__file__).resolve().parents[1]
    base = tmp_path_factory.mktemp("wheel")
    clone = base / "zbpscale-src"
    clone.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(repo / name, clone / name)
    shutil.copytree(repo / "src", clone / "src", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    python = venv_seeing_this_python(base / "venv")
    out = subprocess.run([str(python), "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation",
                          "--no-index", str(clone)], capture_output=True, text=True, timeout=300, cwd=base)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    shutil.rmtree(clone)
    where = subprocess.run([str(python), "-c", "import zbpscale; print(zbpscale.__file__)"], capture_output=True,
                           text=True, timeout=60, cwd=base, env=wheel_env())
    assert where.stdout.strip().startswith(str(base / "venv")), where.stdout + where.stderr  # the installed copy
    return python


def wheel_env(**extra: str) -> dict:
    """The environment of a command run with `wheel_python`: no PYTHONPATH or VIRTUAL_ENV of the tests' own."""
    return {**{k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}, **extra}


def load_slurm_local():
    return load_tool("slurm_local")


@pytest.fixture(scope="session")
def slurm_cluster():
    """(state folder, client env) of a running local SLURM: the one named by ZBPSCALE_SLURM_DIR (left running;
    under xdist, the first worker's), or a fresh one in /tmp that is stopped, by its recorded PIDs, after the
    session. Each xdist worker has a cluster of its own: a test may preempt with a job that needs the whole node,
    set a per-user submit limit or wait for the queue to empty, which another test's jobs would disturb."""
    import shutil
    import tempfile
    from pathlib import Path

    slurm_local = load_slurm_local()
    ok, reason = slurm_local.available()
    if not ok:
        pytest.skip(reason)
    shared = os.environ.get("ZBPSCALE_SLURM_DIR") if os.environ.get("PYTEST_XDIST_WORKER", "gw0") == "gw0" else None
    folder = Path(shared) if shared else Path(tempfile.mkdtemp(prefix="zbpscale-slurm-test-", dir="/tmp"))
    owned = not slurm_local.is_running(folder)
    env = {**os.environ, **slurm_local.start(folder), "OMP_NUM_THREADS": "1"}
    yield folder, env
    if owned:
        slurm_local.stop(folder)
        left = [f"{r['name']} ({r['pid']})" for r in slurm_local.recorded(folder) if r["alive"]]
        assert not left, f"daemons left running after stop: {left}"
        if not shared:
            shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(scope="session")
def two_node_cluster():
    """(state folder, client env) of a fresh 2-node SLURM (node1, node2: two slurmd on this host), started for the
    session beside the one-node cluster and stopped, by its recorded PIDs, after it."""
    import shutil
    import tempfile
    from pathlib import Path

    slurm_local = load_slurm_local()
    ok, reason = slurm_local.available()
    if not ok:
        pytest.skip(reason)
    folder = Path(tempfile.mkdtemp(prefix="zbpscale-slurm2-", dir="/tmp"))
    env = {**os.environ, **slurm_local.start(folder, nodes=2), "OMP_NUM_THREADS": "1"}
    yield folder, env
    slurm_local.stop(folder)
    left = [f"{r['name']} ({r['pid']})" for r in slurm_local.recorded(folder) if r["alive"]]
    assert not left, f"daemons left running after stop: {left}"
    shutil.rmtree(folder, ignore_errors=True)


def counter_plain(f, x, g, *, n, probe, scheme, eps, seed, mask=None, version=2):
    """The plain formula on the counter probes (of hash `version`), materialised, queried in x's dtype: what the
    fused and closed-form kernels must compute (tests/test_fused.py, tests/test_closed_form.py)."""
    from zbpscale.zbp import counter

    d = x.shape[-1]
    rows = torch.arange(x.numel() // d, device=x.device).view(*x.shape[:-1], 1)
    u = counter.probes(probe, seed, n, rows, torch.arange(d, device=x.device), x.dtype, version)  # (n, ..., d)
    if mask is not None:
        u = u * mask
    if scheme == "central":
        df = (f(x + eps * u) - f(x - eps * u)) / (2 * eps)
    else:
        df = (f(x + eps * u) - f(x)) / eps
    return ((df * g).sum(-1, keepdim=True) * u).sum(0) / n


def run_in_triton_interpreter(test_file: str, function: str) -> None:
    """Call `function` of `test_file` in a fresh interpreter with TRITON_INTERPRET=1: the variable must be set
    before triton is first imported (torch.compile imports it), so the kernels run on CPU tensors there."""
    import subprocess
    import sys

    code = ("import importlib.util as u; s = u.spec_from_file_location('t', %r); m = u.module_from_spec(s); "
            "s.loader.exec_module(m); m.%s()" % (test_file, function))
    path = os.pathsep.join(filter(None, [str(Path(test_file).parent), os.environ.get("PYTHONPATH")]))  # conftest
    env = {**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": path}
    child = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=600)
    assert child.returncode == 0, child.stdout + child.stderr


def config_json(size: str = "nano", **fields) -> str:
    """A run folder's config.json as the trainer would accept it: the `size` preset with `fields` set (a
    stand-in run folder must hold a real config: status calls one the trainer would refuse broken)."""
    import json

    from zbpscale.run.config import TrainConfig, model_config

    fields = {"data_dir": "data", "steps": 100, **fields}
    return json.dumps(TrainConfig(model=model_config(size), **fields).to_dict())


STEP_FLOOR_SITE = """\
import os
if os.environ.get("ZBPSCALE_TEST_STEP_FLOOR_S") and not (os.environ.get("ZBPSCALE_TEST_STEP_FLOOR_FIRST") and
                                                         os.environ.get("SLURM_RESTART_COUNT", "0") != "0"):
    import time  # tests/conftest.py, step_floor_env
    from zbpscale.train.metrics import MetricsLog
    _write, _floor = MetricsLog.write, float(os.environ["ZBPSCALE_TEST_STEP_FLOOR_S"])
    def _slow_write(self, kind, **fields):
        if kind == "train":
            time.sleep(_floor)
        _write(self, kind, **fields)
    MetricsLog.write = _slow_write
"""


def step_floor_env(folder: Path, floor_s: float, env: dict | None = None, *, first_attempt: bool = False) -> dict:
    """`env` (default: this process's) for a command whose trainers (its jobs' too, which inherit it) take at least
    `floor_s` more per step, sleeping as they write each step's record (a sitecustomize.py in `folder`, on
    PYTHONPATH): for a test whose timing, a signal so many seconds into an attempt, must hold however fast the
    machine trains. `first_attempt`: only a SLURM job's first attempt sleeps (SLURM_RESTART_COUNT unset or 0); its
    requeued attempts train at full speed. The sleep changes no number a step computes."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "sitecustomize.py").write_text(STEP_FLOOR_SITE)
    env = os.environ if env is None else env
    path = os.pathsep.join(filter(None, [str(folder), env.get("PYTHONPATH")]))
    return {**env, "PYTHONPATH": path, "ZBPSCALE_TEST_STEP_FLOOR_S": str(floor_s),
            **({"ZBPSCALE_TEST_STEP_FLOOR_FIRST": "1"} if first_attempt else {})}


def trainer_env(threads: int | None, **extra: str) -> dict:
    """The environment of a trainer process: OMP_NUM_THREADS=threads, or (None) unset: the machine's default,
    as a user's shell has it."""
    env = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}
    if threads is not None:
        env["OMP_NUM_THREADS"] = str(threads)
    return {**env, **extra}


@pytest.fixture(scope="session")
def straight_run(tmp_path_factory):
    """The reference of every resume test: `straight_run(run_dir)` is the folder of the run's config trained once,
    without a stop, in a fresh process at the thread count the run's first attempt recorded (a CPU's results may
    depend on its thread count, never on whether the process resumed: zbpscale/train/numerics.py).

    The straight run leaves out the checkpoints and trackers, which schema.RESUME_SAFE says never change what a
    run computes (test_sweep_edits checks that claim on its own), so the tests whose runs compute and log the same
    steps share one straight run, across xdist workers too: it is keyed by the config's other fields, the bytes of
    its data (each worker prepares its own copy) and the first attempt's numerics, and trained by whichever test
    asks first while the others wait on its lock."""
    import fcntl
    import functools
    import hashlib
    import subprocess
    import sys

    from zbpscale.run.records import read_records

    shared = tmp_path_factory.getbasetemp()
    shared = (shared.parent if os.environ.get("PYTEST_XDIST_WORKER") else shared) / "straight-runs"
    shared.mkdir(exist_ok=True)
    left_out = {"ckpt_every": 0, "ckpt_every_s": 0, "keep_ckpts": 2, "step_timeout_s": 1800.0, "trackers": []}

    @functools.cache
    def data_digest(folder: Path) -> str:
        digest = hashlib.sha256()
        for path in sorted(p for p in folder.rglob("*.bin") if p.is_file()):
            digest.update(f"{path.relative_to(folder)}\0".encode())
            digest.update(path.read_bytes())
        return digest.hexdigest()

    def straight(run_dir: Path) -> Path:
        first = next(r for r in read_records(run_dir) if r["kind"] == "start")
        config = json.loads((run_dir / "config.json").read_text())
        assert set(left_out) <= set(config), "a field the straight run leaves out has been renamed"
        what = {k: v for k, v in config.items() if k not in left_out and k != "data_dir"}
        what |= {"data": data_digest(Path(config["data_dir"])), "numerics": first["numerics"]}
        dest = shared / hashlib.sha256(json.dumps(what, sort_keys=True).encode()).hexdigest()[:16]
        with open(dest.with_suffix(".lock"), "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # another worker training this key: wait for its run
            if not (dest / "done").exists():
                dest.mkdir(exist_ok=True)
                (dest / "config.json").write_text(json.dumps({**config, **left_out}))
                done = subprocess.run([sys.executable, "-m", "zbpscale.train", "--run-dir", str(dest)],
                                      capture_output=True, text=True, timeout=900,
                                      env=trainer_env(first["numerics"]["threads"]))
                assert done.returncode == 0, done.stdout + done.stderr
                assert json.dumps(read_records(dest)[0]["numerics"]) == json.dumps(first["numerics"])  # same machine
                (dest / "done").touch()
        return dest

    return straight


@pytest.fixture(scope="session")
def data_dir(tmp_path_factory) -> Path:
    """The embedded corpus, prepared by zbpscale's own prep once per session."""
    from zbpscale.data.prepare import PrepConfig, prepare

    out = tmp_path_factory.mktemp("data") / "embedded"
    prepare(PrepConfig(source="embedded", out=out, offline=True), log=lambda line: None)
    return out


def write_sweep(folder: Path, name: str, data_dir: Path, *, steps: int, arms=("bp",), tasks: int = 1,
                time_min: int = 30, signal_delay_s: int = 30, max_timeouts: int = 20, ckpt_every: int = 0,
                max_crashes: int = 3, nodes: int = 1, step_timeout_s: float = 1800.0, trackers=()) -> Path:
    """A sweep file of the nano model on CPU (batch 4 x 32 tokens: a fraction of a second per step), one size,
    the given arms, jobs under folder/jobs; returns its path."""
    arms_src = ", ".join(f"arm({a!r})" for a in arms)
    path = folder / f"{name}.py"
    path.write_text(textwrap.dedent(f"""\
        from zbpscale.jobs.sweep import Data, Resources, Size, Sweep, arm

        CPU = Resources(nodes={nodes}, gpus_per_node=0, tasks_per_node={tasks}, cpus_per_task=1, time_min={time_min})
        SWEEP = Sweep(
            name={name!r},
            sizes=(Size(name="nano", global_batch=4, seq_len=32, tokens=4 * 32 * {steps}, lr=3e-3, resources=CPU),),
            arms=({arms_src},),
            data=Data(dir={str(data_dir)!r}, source="embedded"),
            train=(("eval_every", 0), ("eval_batches", 1), ("ckpt_every", {ckpt_every}), ("ckpt_every_s", 0),
                   ("step_timeout_s", {step_timeout_s})),
            root={str(folder / "jobs")!r},
            max_timeouts={max_timeouts},
            max_crashes={max_crashes},
            signal_delay_s={signal_delay_s},
            trackers={tuple(trackers)!r},
        )
        """))
    return path


RESULTS_SWEEP = '''
from zbpscale.jobs.sweep import Data, Resources, Size, Sweep, arm

CPU = Resources(nodes=1, gpus_per_node=0, tasks_per_node=1, cpus_per_task=1, time_min=30)
SWEEP = Sweep(
    name="results",
    sizes=tuple(Size(name=s, global_batch=2, tokens=2 * 32 * 4, lr=3e-3, seq_len=32, resources=CPU)
                for s in ("nano", "tiny")),
    arms=(arm("bp"), arm("zbp_n4"), arm("zbp_n8_fwd")),
    data=Data(dir={data!r}, source="embedded", workers=1),
    root={root!r},
    train=(("eval_every", 2), ("eval_batches", 1), ("ckpt_every", 0), ("ckpt_every_s", 0), ("diag_every", 4)),
)
'''


@pytest.fixture(scope="session")
def results_sweep(tmp_path_factory, data_dir):
    """A sweep file whose bp and zbp_n4 runs (nano and tiny; 4 steps of 2 x 32 tokens, 2 evals, 1 diag) were
    trained for real by zbpscale.train, and whose zbp_n8_fwd runs were never started (pending). Built once."""
    import json

    from zbpscale.jobs.sweep import expand, load_sweep
    from zbpscale.run.folder import RunFolder
    from zbpscale.train.loop import train

    base = tmp_path_factory.mktemp("results_sweep")
    path = base / "results.py"
    path.write_text(RESULTS_SWEEP.format(data=str(data_dir), root=str(base / "jobs")))
    for run in expand(load_sweep(path)):
        if run.arm.name != "zbp_n8_fwd":
            cfg = run.train_config()
            run.run_dir.mkdir(parents=True)
            RunFolder(run.run_dir).config.write_text(json.dumps(cfg.to_dict(), indent=1) + "\n")
            train(cfg, run.run_dir)
    return path


# ---------------------------------------------------------------- what experiment trackers wrote
def tensorboard_scalars(run_dir: Path, tag: str) -> list[tuple[int, float]]:
    """(step, value) of `tag` as TensorBoard shows it (purged events left out)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from zbpscale.run.folder import RunFolder

    acc = EventAccumulator(str(RunFolder(run_dir).tensorboard), size_guidance={"scalars": 0})
    acc.Reload()
    return [(e.step, e.value) for e in acc.Scalars(tag)]


def tensorboard_texts(run_dir: Path, tag: str) -> list[tuple[int, str]]:
    """(step, text) of a text summary `tag` as TensorBoard shows it (purged events left out)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.util.tensor_util import make_ndarray

    from zbpscale.run.folder import RunFolder

    acc = EventAccumulator(str(RunFolder(run_dir).tensorboard), size_guidance={"tensors": 0})
    acc.Reload()
    return [(e.step, make_ndarray(e.tensor_proto).item().decode()) for e in acc.Tensors(f"{tag}/text_summary")]


def wandb_records(path: Path) -> list:
    """The records of one W&B run file (run-<id>.wandb), read here independently of the trainer's reader
    (train/wandb_log.py), which decides what a later attempt sends: a 7-byte header, then LevelDB log blocks of
    32 KiB whose chunks (crc 4, length 2, type 1: full, first, middle, last) hold serialized wandb Record
    protobufs. A writer killed mid-record (or a full disk) leaves a torn tail: a chunk past the end of the file, or
    a record that does not parse, ends the reading."""
    from google.protobuf.message import DecodeError
    from wandb.proto import wandb_internal_pb2 as pb

    data, pos, found, part = path.read_bytes(), 7, [], b""
    while pos + 7 <= len(data):
        if 32768 - pos % 32768 < 7:  # a block's tail too short for a chunk header is padding
            pos += 32768 - pos % 32768
            continue
        _, length, kind = struct.unpack("<IHB", data[pos:pos + 7])
        chunk, pos = data[pos + 7:pos + 7 + length], pos + 7 + length
        if len(chunk) < length:
            break
        part = chunk if kind in (1, 2) else part + chunk
        if kind in (1, 4):
            record = pb.Record()
            try:
                record.ParseFromString(part)
            except DecodeError:
                break
            found.append(record)
    return found


def wandb_runs(run_dir: Path) -> list[tuple[str, list]]:
    """(folder name, records) of each offline W&B folder of a run, oldest first."""
    from zbpscale.run.folder import RunFolder

    folders = sorted(RunFolder(run_dir).wandb.glob("offline-run-*"))
    return [(f.name, [r for p in f.glob("run-*.wandb") for r in wandb_records(p)]) for f in folders]


def wandb_history(run_dir: Path, key: str) -> list[tuple[int, float]]:
    rows = []
    for _, records in wandb_runs(run_dir):
        for r in records:
            if r.WhichOneof("record_type") == "history":
                items = {i.key or "/".join(i.nested_key): json.loads(i.value_json) for i in r.history.item}
                if key in items:
                    rows.append((r.history.step.num, items[key]))
    return rows


FAKE_WANDB_KEY = "zbp-test-key-0123456789abcdef0123456789abcdef"
"""A W&B API key put in a job's environment (with WANDB_MODE=offline): it must appear in no file of the jobs."""


def check_trackers(run_dir: Path, jobs: Path) -> None:
    """What a run's experiment trackers wrote against its metrics.jsonl, after however many attempts: one W&B run
    (the id of trackers.json) in every offline folder, every train step once in W&B and in TensorBoard with the
    JSONL's loss (TensorBoard's rounded to float32), and FAKE_WANDB_KEY in no file under `jobs`."""
    from zbpscale.run.folder import RunFolder
    from zbpscale.run.records import read_records

    losses = [(r["step"], r["loss"]) for r in read_records(run_dir) if r["kind"] == "train"]
    run_id = json.loads(RunFolder(run_dir).trackers.read_text())["wandb"]["id"]
    ids = {r.run.run_id for _, records in wandb_runs(run_dir) for r in records if r.WhichOneof("record_type") == "run"}
    assert ids == {run_id}
    assert wandb_history(run_dir, "train/loss") == losses
    assert tensorboard_scalars(run_dir, "train/loss") == [(s, float(torch.tensor(v, dtype=torch.float32)))
                                                          for s, v in losses]
    assert [p for p in jobs.rglob("*") if p.is_file() and FAKE_WANDB_KEY.encode() in p.read_bytes()] == []


# ---------------------------------------------------------------- what plot drew
def plotted(bundle: Path, **options) -> tuple:
    """`zbpscale plot` of `bundle` (plot's `options`: params) in this process: (its Figures, {name: each
    matplotlib figure as saved}), kept for their artists to be read (closed after saving: draw them again to
    measure)."""
    from zbpscale.results import plot as plot_module

    figs, save = {}, plot_module._save

    def keep(fig, out, name, formats=("png", "pdf")):
        figs[name] = fig
        return save(fig, out, name, formats)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(plot_module, "_save", keep)
        figures = plot_module.plot(bundle, log=lambda line: None, **options)
    return figures, figs
