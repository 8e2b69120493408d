"""A throwaway SLURM on loopback (one node, or several on one host), for the test suite and for trying the SLURM
path on a laptop.

Starts munged, MariaDB + slurmdbd (sacct needs accounting), slurmctld and one slurmd per node (`--nodes N`:
node1..nodeN, each on its own port, their names in /etc/hosts while it runs), each with 4 fake GPUs, and two
partitions for preemption (`low`, the default, preemptible with REQUEUE; `high`, which preempts it). Every
config, log, spool, state, the munge key and the database live in one private folder; every daemon it starts
is recorded in DIR/pids.json and `stop` ends exactly those, never a process found by name. Needs root
(daemons run as root, munge and mysql) and Debian's packages; the recipe is ../shared/SLURM.md.

  python tools/slurm_local.py install                 # apt-get the packages (no recommends) if missing
  eval "$(python tools/slurm_local.py start)"         # start, then `export SLURM_CONF=...` in this shell
  python tools/slurm_local.py start --nodes 2 --dir /tmp/zbpscale-slurm2   # two nodes (node1, node2)
  python tools/slurm_local.py status                  # which recorded daemons are alive, and sinfo
  python tools/slurm_local.py stop                    # cancel the cluster's jobs, stop what start started
  export $(python tools/slurm_local.py env)           # SLURM_CONF of a running cluster

All commands take --dir DIR (default /tmp/zbpscale-slurm); start takes --port (default 6817, or 16817, ...
when taken). Tests import this file and call `available()`, `start(dir)`, `is_running(dir)`, `recorded(dir)`
and `stop(dir)`; fault tests `stop_daemon(dir, name)` and `restart_daemon(dir, name)`. Export SLURM_CONF
before any Slurm command: without it the clients look the controller up in DNS.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import json
import os
import pwd
import re
import shutil
import signal
import socket
import stat
import subprocess
import sys
import time
from pathlib import Path

DEFAULT_DIR = "/tmp/zbpscale-slurm"
DEFAULT_PORT = 6817  # slurmctld; slurmd takes +1 and slurmdbd +2, all on 127.0.0.1
PORT_SETS = 6  # clusters side by side without --port: slurmctld on 6817, 16817, ..., 56817
CLUSTER = "zbpscale"
LOW_PARTITION, HIGH_PARTITION = "low", "high"
NODE, CPUS, GPUS = "localhost", 8, 4  # the node of a one-node cluster; several are node1, node2, ...
PACKAGES = ["slurmctld", "slurmd", "slurm-client", "munge", "slurmdbd", "mariadb-server"]
_DAEMON_NAMES = ("munged", "mariadbd", "slurmdbd", "slurmctld", "slurmd")
BINARIES = ["munged", "munge", "unmunge", "mariadbd", "mariadb-install-db", "mariadb-admin", "slurmdbd",
            "slurmctld", "slurmd", "sbatch", "sacct", "sacctmgr", "scontrol", "sinfo", "squeue", "scancel"]


class SlurmLocalError(Exception):
    """A cluster that cannot be installed, started or stopped; the message says what to look at."""


def _say(msg: str) -> None:
    print(f"[slurm-local] {msg}", file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------------------------------------
# Paths and environment


def node_names(nodes: int) -> list[str]:
    """The cluster's node names: `localhost` alone, or node1..nodeN (each its own slurmd on this host)."""
    return [NODE] if nodes == 1 else [f"node{i}" for i in range(1, nodes + 1)]


def _cluster(d: Path) -> dict:
    """What start() chose for the cluster in d: {"nodes": N, "port": P} (one node when not recorded)."""
    f = d / "cluster.json"
    return json.loads(f.read_text()) if f.exists() else {"nodes": 1}


def _slurmd_name(node: str) -> str:
    return "slurmd" if node == NODE else f"slurmd-{node}"


def _paths(d: Path) -> dict[str, Path]:
    return {
        "etc": d / "etc", "log": d / "log", "run": d / "run", "state": d / "state", "spool": d / "spool",
        "dev": d / "dev", "munge": d / "munge", "mariadb": d / "mariadb",
        "slurm_conf": d / "etc" / "slurm.conf", "munge_socket": d / "munge" / "munge.socket.2",
        "munge_key": d / "munge" / "munge.key", "my_cnf": d / "mariadb" / "my.cnf",
        "db_socket": d / "mariadb" / "mysqld.sock", "datadir": d / "mariadb" / "data", "pids": d / "pids.json",
    }


def env(dir: str | os.PathLike = DEFAULT_DIR) -> dict[str, str]:
    """The variables a Slurm client needs to talk to this cluster (jobs inherit them from sbatch)."""
    return {"SLURM_CONF": str(_paths(Path(dir).resolve())["slurm_conf"])}


def _search_path() -> str:  # daemons live in /usr/sbin, which a user's PATH may lack
    return os.pathsep.join([os.environ.get("PATH", os.defpath), "/usr/sbin", "/sbin"])


def _client_env(d: Path) -> dict[str, str]:
    return {**os.environ, "PATH": _search_path(), **env(d)}


def available() -> tuple[bool, str]:
    """Whether a local SLURM can run here, and if not, why (for pytest.skip)."""
    if not sys.platform.startswith("linux"):
        return False, f"a local SLURM needs Linux, this is {sys.platform}"
    if os.geteuid() != 0:
        return False, "a local SLURM needs root (daemons run as root, munge and mysql; fake GPUs need mknod)"
    missing = [b for b in BINARIES if shutil.which(b, path=_search_path()) is None]
    if missing:
        return False, f"{', '.join(missing)} not found: run `python tools/slurm_local.py install`"
    for user in ("munge", "mysql"):
        try:
            pwd.getpwnam(user)
        except KeyError:
            return False, f"user {user!r} missing: run `python tools/slurm_local.py install`"
    return True, "root, Slurm, munge and MariaDB found"


# ---------------------------------------------------------------------------------------------------------
# Install


def _installed(pkg: str) -> bool:
    r = subprocess.run(["dpkg-query", "-W", "-f=${Status}", pkg], capture_output=True, text=True)
    return r.returncode == 0 and r.stdout.strip() == "install ok installed"


def install() -> None:
    """apt-get install the packages that are missing (no recommends); `apt-get update` only if one is."""
    if shutil.which("dpkg-query") is None or shutil.which("apt-get") is None:
        raise SlurmLocalError("install needs Debian/Ubuntu (apt-get, dpkg-query); install Slurm 22.05+, "
                              "munge and MariaDB by hand")
    missing = [p for p in PACKAGES if not _installed(p)]
    if not missing:
        _say(f"already installed: {' '.join(PACKAGES)}")
        return
    if os.geteuid() != 0:
        raise SlurmLocalError(f"missing {' '.join(missing)}; installing needs root")
    apt_env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    _say(f"missing {' '.join(missing)}: apt-get update")
    subprocess.run(["apt-get", "update", "-qq"], check=True, env=apt_env)
    _say(f"apt-get install --no-install-recommends {' '.join(missing)}")
    subprocess.run(["apt-get", "install", "-y", "-qq", "--no-install-recommends", *missing],
                   check=True, env=apt_env)
    _say("installed; `start` runs private daemons and never uses the system's services")


# ---------------------------------------------------------------------------------------------------------
# Configuration files


def _real_memory_mib() -> int:
    with open("/proc/meminfo") as f:
        total_kib = next(int(line.split()[1]) for line in f if line.startswith("MemTotal:"))
    return max(1024, int(total_kib / 1024 * 0.9))


def _loopback_only() -> str:
    """Bind slurmctld and slurmd to the hostname's address instead of 0.0.0.0, when that is 127.0.0.1.

    Slurm binds to whatever gethostname() resolves to; where that is not 127.0.0.1 (e.g. Debian's 127.0.1.1)
    slurmd would no longer answer on NodeAddr=127.0.0.1, so the daemons keep the default there.
    """
    try:
        loopback = socket.gethostbyname(socket.gethostname()) == "127.0.0.1"
    except OSError:
        loopback = False
    if loopback:
        return "CommunicationParameters=NoCtldInAddrAny,NoInAddrAny\n"
    return "# The hostname does not resolve to 127.0.0.1: daemons bind to all addresses (munge guards them).\n"


def _node_lines(port: int, nodes: int) -> str:
    """NodeName and PartitionName lines: one node on SlurmdPort, or several on one host, each on its own port."""
    names = node_names(nodes)
    common = f"CPUs={CPUS} RealMemory={_real_memory_mib()} Gres=gpu:{GPUS} State=UNKNOWN"
    if nodes == 1:
        lines = [f"NodeName={NODE} NodeAddr=127.0.0.1 {common}"]
    else:
        lines = [f"NodeName={n} NodeHostname=localhost NodeAddr=127.0.0.1 Port={port + 10 + i} {common}"
                 for i, n in enumerate(names, 1)]
    listed = ",".join(names)
    lines += [f"PartitionName={LOW_PARTITION} Nodes={listed} Default=YES MaxTime=INFINITE State=UP PriorityTier=1 "
              "PreemptMode=REQUEUE GraceTime=20",
              f"PartitionName={HIGH_PARTITION} Nodes={listed} MaxTime=INFINITE State=UP PriorityTier=10 "
              "PreemptMode=OFF"]
    return "\n".join(lines) + "\n"


def _slurm_conf(p: dict[str, Path], port: int, nodes: int = 1) -> str:
    auth = f"socket={p['munge_socket']},cred_expire=10"
    per_node = "" if nodes == 1 else "-%n"
    return f"""\
# Written by tools/slurm_local.py: a cluster of {nodes} node(s) on loopback. See ../shared/SLURM.md.
ClusterName={CLUSTER}
SlurmctldHost=localhost(127.0.0.1)
SlurmctldPort={port}
SlurmdPort={port + 1}
{_loopback_only()}SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
# A short credential lifetime: with the default 120 s a requeued job waits ~170 s before it may start again.
AuthInfo={auth}
StateSaveLocation={p['state']}
SlurmdSpoolDir={p['spool']}/slurmd{per_node}
SlurmctldPidFile={p['run']}/slurmctld.pid
SlurmdPidFile={p['run']}/slurmd{per_node}.pid
SlurmctldLogFile={p['log']}/slurmctld.log
SlurmdLogFile={p['log']}/slurmd{per_node}.log
# A node whose slurmd is silent this long is DOWN (a lost node), and its jobs end NODE_FAIL.
SlurmdTimeout={300 if nodes == 1 else 15}
SlurmctldDebug=info
SlurmdDebug=info
# No cgroups, no systemd.
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
MpiDefault=none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
# Without a default, each job takes the node's whole memory and jobs run one at a time.
DefMemPerCPU=500
# Let the node advertise more CPUs than the machine has.
SlurmdParameters=config_overrides
ReturnToService=2
GresTypes=gpu
# sacct is how submitit reads job state: accounting is not optional.
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=localhost
AccountingStoragePort={port + 2}
# Clients reach slurmdbd through the munge socket named here, not through AuthInfo's.
AccountingStoragePass={p['munge_socket']}
AccountingStorageTRES=gres/gpu
# Limits as a site enforces them: a MaxSubmitJobs that sacctmgr sets on a user (or QOS) refuses sbatch past it.
AccountingStorageEnforce=limits
JobCompType=jobcomp/none
# Preemption by partition priority; the preempted job gets its --signal (USR2) at the start of GraceTime.
PreemptType=preempt/partition_prio
PreemptMode=REQUEUE
SlurmctldParameters=preempt_send_user_signal
JobRequeue=1
# Job ids of their own for clusters side by side (the tests' xdist workers each run one): submitit seeds a job's
# MASTER_PORT with its id, so two clusters' job 5 of two ranks each would take the same port on this host.
FirstJobId={1 + 100000 * (port // 10000)}
# Fast scheduling for tests.
SchedulerParameters=bf_interval=2,sched_interval=5
MinJobAge=600
KillWait=5
InactiveLimit=0
MailProg=/bin/true
{_node_lines(port, nodes)}"""


def _slurmdbd_conf(p: dict[str, Path], port: int) -> str:
    return f"""\
# Written by tools/slurm_local.py. MariaDB is reached through its socket (MYSQL_UNIX_PORT in slurmdbd's env).
# Slurm 22.05's slurmdbd listens on all addresses whatever DbdAddr says; the private munge key guards it.
AuthType=auth/munge
AuthInfo=socket={p['munge_socket']}
DbdHost=localhost
DbdAddr=127.0.0.1
DbdPort={port + 2}
SlurmUser=root
LogFile={p['log']}/slurmdbd.log
PidFile={p['run']}/slurmdbd.pid
DebugLevel=info
StorageType=accounting_storage/mysql
StorageHost=localhost
StorageUser=root
StorageLoc=slurm_acct_db
"""


def _gres_conf(p: dict[str, Path], nodes: int = 1) -> str:
    return "AutoDetect=off\n" + "".join(f"NodeName={n} Name=gpu File={p['dev']}/nvidia[0-{GPUS - 1}]\n"
                                        for n in node_names(nodes))


def _my_cnf(p: dict[str, Path]) -> str:
    return f"""\
[client]
socket={p['db_socket']}

[mysqld]
datadir={p['datadir']}
socket={p['db_socket']}
pid-file={p['mariadb']}/mariadbd.pid
log-error={p['mariadb']}/mariadbd.log
skip-networking
skip-name-resolve
innodb_buffer_pool_size=64M
innodb_flush_log_at_trx_commit=2
"""


def _write(path: Path, text: str, mode: int = 0o644) -> None:
    path.write_text(text)
    path.chmod(mode)


def _prepare(d: Path, p: dict[str, Path], port: int, nodes: int = 1) -> None:
    """Create the folder tree, configs, munge key, fake GPU devices and (once) the MariaDB datadir."""
    if len(str(p["munge_socket"])) > 100 or len(str(p["db_socket"])) > 100:
        raise SlurmLocalError(f"{d} is too long a path for unix sockets (~100 characters): pick a shorter --dir")
    d.mkdir(parents=True, exist_ok=True)
    d.chmod(0o755)  # munge and mysql must reach their subfolders
    blocked = [a for a in d.parents if not os.stat(a).st_mode & stat.S_IXOTH]
    if blocked:
        raise SlurmLocalError(f"{blocked[0]} is not searchable by other users (munge, mysql): "
                              f"pick a --dir outside it, e.g. under /tmp")
    for key in ("etc", "log", "run", "state", "spool", "dev"):
        p[key].mkdir(exist_ok=True)
    for node in node_names(nodes):
        (p["spool"] / ("slurmd" if nodes == 1 else f"slurmd-{node}")).mkdir(exist_ok=True)
    munge, mysql = pwd.getpwnam("munge"), pwd.getpwnam("mysql")
    for key, user in (("munge", munge), ("mariadb", mysql)):
        p[key].mkdir(exist_ok=True)
        os.chown(p[key], user.pw_uid, user.pw_gid)
        p[key].chmod(0o755)

    _write(p["slurm_conf"], _slurm_conf(p, port, nodes))
    _write(d / "cluster.json", json.dumps({"nodes": nodes, "port": port}) + "\n")
    _write(p["etc"] / "slurmdbd.conf", _slurmdbd_conf(p, port), 0o600)
    _write(p["etc"] / "gres.conf", _gres_conf(p, nodes))
    _write(p["my_cnf"], _my_cnf(p))

    if not p["munge_key"].exists():
        fd = os.open(p["munge_key"], os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o400)
        with os.fdopen(fd, "wb") as f:
            f.write(os.urandom(1024))
    os.chown(p["munge_key"], munge.pw_uid, munge.pw_gid)
    p["munge_key"].chmod(0o400)

    for i in range(GPUS):  # character devices (regular files are rejected), all /dev/null underneath
        dev = p["dev"] / f"nvidia{i}"
        if not dev.exists():
            os.mknod(dev, stat.S_IFCHR | 0o666, os.makedev(1, 3))

    if not (p["datadir"] / "mysql").is_dir():
        t0 = time.monotonic()
        r = subprocess.run(["mariadb-install-db", f"--defaults-file={p['my_cnf']}", "--user=mysql",
                            "--auth-root-authentication-method=socket", "--skip-test-db"],
                           capture_output=True, text=True, env=_client_env(d))
        if r.returncode != 0:
            raise SlurmLocalError(f"mariadb-install-db failed:\n{r.stdout}{r.stderr}")
        _say(f"mariadb    datadir created in {time.monotonic() - t0:.1f} s ({p['datadir']})")


# ---------------------------------------------------------------------------------------------------------
# Processes: recorded by PID and start time, so a reused PID is never mistaken for ours


def _start_time(pid: int) -> int | None:
    """Start time of a live, non-zombie process (clock ticks since boot), else None."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return None
    if fields[0] in ("Z", "X"):
        _reap(pid)
        return None
    return int(fields[19])


def _reap(pid: int) -> None:
    try:  # only succeeds when the daemon is our child (start() called in this process)
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass


def _alive(rec: dict) -> bool:
    started = _start_time(rec["pid"])
    return started is not None and started == rec["start_time"]


def _read_pids(d: Path) -> list[dict]:
    f = _paths(d)["pids"]
    return json.loads(f.read_text())["daemons"] if f.exists() else []


def _write_pids(d: Path, daemons: list[dict]) -> None:
    f = _paths(d)["pids"]
    tmp = f.with_suffix(".tmp")
    tmp.write_text(json.dumps({"daemons": daemons}, indent=1) + "\n")
    tmp.replace(f)


def _spawn(name: str, cmd: list[str], d: Path, daemons: list[dict], user: str | None = None,
           extra_env: dict[str, str] | None = None) -> dict:
    """Start one daemon in the foreground of its own session and record its PID at once."""
    out = _paths(d)["log"] / f"{name}.out"
    proc_env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C.UTF-8", **env(d), **(extra_env or {})}
    cmd = [shutil.which(cmd[0], path=proc_env["PATH"]) or cmd[0], *cmd[1:]]
    kw = {}
    if user:
        u = pwd.getpwnam(user)
        kw = dict(user=u.pw_uid, group=u.pw_gid, extra_groups=[])
    with open(out, "ab") as log:
        proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                env=proc_env, cwd=d, start_new_session=True, **kw)
    start_time = None
    for _ in range(100):  # /proc/<pid>/stat appears at once; the loop only guards a very early exit
        start_time = _start_time(proc.pid)
        if start_time is not None or proc.poll() is not None:
            break
        time.sleep(0.01)
    rec = {"name": name, "pid": proc.pid, "start_time": start_time, "cmd": cmd, "out": str(out)}
    daemons.append(rec)
    _write_pids(d, daemons)
    return rec


def _wait_ready(name: str, rec: dict, check, timeout: float, what: str, logs: list[Path]) -> None:
    """Poll check() until it says ready; fail early, naming the logs, if the daemon dies or time runs out."""
    t0 = time.monotonic()
    while True:
        if not _alive(rec):
            raise SlurmLocalError(f"{name} (pid {rec['pid']}) exited during start-up: read "
                                  + ", ".join(str(x) for x in logs))
        ok, detail = check()
        if ok:
            _say(f"{name:<10} pid {rec['pid']:<7} ready in {time.monotonic() - t0:4.1f} s ({what}{detail})")
            return
        if time.monotonic() - t0 > timeout:
            raise SlurmLocalError(f"{name} not ready after {timeout:g} s ({what}): read "
                                  + ", ".join(str(x) for x in logs))
        time.sleep(0.2)


def _run(cmd: list[str], d: Path, input: str | None = None, timeout: float = 10) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(cmd, capture_output=True, text=True, input=input, env=_client_env(d),
                              timeout=timeout)
    except subprocess.TimeoutExpired:
        return subprocess.CompletedProcess(cmd, 124, "", f"timed out after {timeout} s")


def _port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


# ---------------------------------------------------------------------------------------------------------
# start / stop / status


def _daemons(d: Path, p: dict[str, Path], port: int, nodes: int = 1) -> list[tuple]:
    """In start order: (name, command, user, extra env, readiness check, what it checks, logs to read)."""
    sock, cnf, log = str(p["munge_socket"]), f"--defaults-file={p['my_cnf']}", p["log"]

    def ok(cmd: list[str]) -> bool:
        return _run(cmd, d).returncode == 0

    def munge_ok():
        cred = _run(["munge", "-n", "-S", sock], d)
        return cred.returncode == 0 and _run(["unmunge", "-S", sock], d, input=cred.stdout).returncode == 0, ""

    def ctld_ok():  # UP, and registered in slurmdbd (else sacct knows nothing of its jobs)
        if "is UP" not in _run(["scontrol", "ping"], d).stdout:
            return False, ""
        rows = _run(["sacctmgr", "-n", "-P", "list", "cluster", "format=cluster,controlport"], d).stdout.split()
        return f"{CLUSTER}|{port}" in rows, ""

    def node_ok(node: str):
        def check():
            state = _run(["sinfo", "-h", "-N", "-n", node, "-o", "%T"], d).stdout.split()
            up = bool(state) and state[0] in ("idle", "mixed", "allocated")  # a trailing * means not responding
            return up, f": {node} {state[0]}" if up else ""
        return check

    per_node = nodes > 1

    return [
        ("munged", ["munged", "-F", f"--socket={sock}", f"--key-file={p['munge_key']}",
                    f"--pid-file={p['munge']}/munged.pid", f"--log-file={p['munge']}/munged.log",
                    f"--seed-file={p['munge']}/munged.seed"], "munge", None,
         munge_ok, "munge -n | unmunge", [p["munge"] / "munged.log"]),
        ("mariadbd", ["mariadbd", cnf], "mysql", None,
         lambda: (ok(["mariadb-admin", cnf, "ping"]), ""), "mariadb-admin ping", [p["mariadb"] / "mariadbd.log"]),
        # Slurm's MySQL plugin has no socket setting; the MariaDB client library reads MYSQL_UNIX_PORT.
        ("slurmdbd", ["slurmdbd", "-D"], None, {"MYSQL_UNIX_PORT": str(p["db_socket"])},
         lambda: (ok(["sacctmgr", "-n", "list", "cluster"]), ""), "sacctmgr list cluster", [log / "slurmdbd.log"]),
        ("slurmctld", ["slurmctld", "-D", "-f", str(p["slurm_conf"])], None, None,
         ctld_ok, "scontrol ping: UP, cluster registered in slurmdbd", [log / "slurmctld.log"]),
        *[(_slurmd_name(node), ["slurmd", "-D", "-N", node, "-f", str(p["slurm_conf"])], None, None,
           node_ok(node), "sinfo", [log / (f"slurmd-{node}.log" if per_node else "slurmd.log")])
          for node in node_names(nodes)],
    ]


def recorded(dir: str | os.PathLike = DEFAULT_DIR) -> list[dict]:
    """The daemons DIR/pids.json records, in start order, each with `alive` set to whether it still runs."""
    return [{**r, "alive": _alive(r)} for r in _read_pids(Path(dir).resolve())]


def is_running(dir: str | os.PathLike = DEFAULT_DIR) -> bool:
    """True when every daemon recorded in DIR/pids.json is alive."""
    daemons = _read_pids(Path(dir).resolve())
    names = [*_DAEMON_NAMES[:-1], *map(_slurmd_name, node_names(_cluster(Path(dir).resolve())["nodes"]))]
    return [r["name"] for r in daemons] == names and all(_alive(r) for r in daemons)


def start(dir: str | os.PathLike = DEFAULT_DIR, port: int | None = None, timeout: float = 60, nodes: int = 1
          ) -> dict[str, str]:
    """Start the cluster in DIR (or find it running) and return the env vars its clients need; `nodes` > 1 runs
    one slurmd per node (node1, node2, ...) on this host, and adds their names to /etc/hosts while it runs.

    port is slurmctld's (slurmd +1, slurmdbd +2); None takes the first of 6817, 16817, ... whose three
    ports are free on 127.0.0.1, so a test cluster can run beside a user's.
    """
    d = Path(dir).resolve()
    ok, reason = available()
    if not ok:
        raise SlurmLocalError(reason)
    p = _paths(d)
    old = _read_pids(d) if d.exists() else []
    if old and is_running(d) and _cluster(d)["nodes"] == nodes:
        _say(f"already running in {d} (pids {', '.join(str(r['pid']) for r in old)})")
        return env(d)
    if any(_alive(r) for r in old):
        dead = [r["name"] for r in old if not _alive(r)]
        _say(f"partly running in {d} (dead: {', '.join(dead)}): stopping the rest, then starting again")
        stop(d)
    with _one_start_at_a_time():  # two starts at once would take the same free ports (and edit /etc/hosts)
        candidates = [port] if port is not None else [DEFAULT_PORT + 10000 * i for i in range(PORT_SETS)]
        used = [0, 1, 2, *range(11, 11 + nodes)] if nodes > 1 else [0, 1, 2]
        port = next((c for c in candidates if all(_port_free(c + i) for i in used)), None)
        if port is None:
            raise SlurmLocalError(f"ports {', '.join(f'{c}-{c + 2}' for c in candidates)} on 127.0.0.1 are in use: "
                                  f"another SLURM? (`python tools/slurm_local.py status --dir ...`), or pass --port")

        t_start = time.monotonic()
        _say(f"state folder {d}, ports {port}-{port + 2} on 127.0.0.1")
        _prepare(d, p, port, nodes)
        daemons: list[dict] = []
        _write_pids(d, daemons)
        try:
            if nodes > 1:
                _hosts(d, node_names(nodes))
            for name, cmd, user, extra_env, check, what, logs in _daemons(d, p, port, nodes):
                rec = _spawn(name, cmd, d, daemons, user, extra_env)
                _wait_ready(name, rec, check, timeout, what, [*logs, Path(rec["out"])])
        except BaseException:
            _say("start failed: stopping the daemons it started")
            stop(d, quiet=True)
            raise
    _say(f"cluster {CLUSTER!r} up in {time.monotonic() - t_start:.1f} s: partitions {LOW_PARTITION} (default, "
         f"preemptible) and {HIGH_PARTITION}, {CPUS} CPUs, gpu:{GPUS} on node(s) {','.join(node_names(nodes))}")
    return env(d)


@contextlib.contextmanager
def _one_start_at_a_time():
    """Held while a cluster picks its ports and starts its daemons (the tests' xdist workers each start one)."""
    with open(Path(DEFAULT_DIR + "-start.lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


HOSTS = Path("/etc/hosts")


def _hosts(d: Path, names: list[str]) -> None:
    """Make the node names resolve to 127.0.0.1 (submitit takes MASTER_ADDR from the first node's name): one
    line in /etc/hosts, marked with this cluster's folder, removed by stop()."""
    _hosts_remove(d)
    try:
        with open(HOSTS, "a") as fh:
            fh.write(f"127.0.0.1 {' '.join(names)}  # zbpscale slurm_local {d}\n")
    except OSError as err:
        raise SlurmLocalError(f"cannot add the node names to {HOSTS} ({err.strerror}): several nodes need them to "
                              "resolve to 127.0.0.1 (submitit takes MASTER_ADDR from the first node's name)") from None


def _hosts_remove(d: Path) -> None:
    if not HOSTS.exists():
        return
    mark = f"# zbpscale slurm_local {d}"
    lines = HOSTS.read_text().splitlines(keepends=True)
    kept = [line for line in lines if not line.rstrip().endswith(mark)]
    if kept != lines:
        HOSTS.write_text("".join(kept))  # in place: /etc/hosts may be a bind mount that cannot be replaced


def _cancel_jobs(d: Path, quiet: bool) -> None:
    """Cancel this cluster's jobs so no job step outlives the daemons (slurmstepd is not ours to kill)."""
    ids = _run(["squeue", "-h", "-o", "%A"], d).stdout.split()
    if not ids:
        return
    if not quiet:
        _say(f"cancelling {len(ids)} job(s): {' '.join(ids)}")
    _run(["scancel", *ids], d)
    t0 = time.monotonic()
    while time.monotonic() - t0 < 30 and _run(["squeue", "-h", "-o", "%A"], d).stdout.split():
        time.sleep(0.5)


def _signal(rec: dict, sig: int) -> None:
    if _alive(rec):  # checked just before: the PID is still the process start() recorded
        try:
            os.kill(rec["pid"], sig)
        except ProcessLookupError:
            pass


def stop(dir: str | os.PathLike = DEFAULT_DIR, quiet: bool = False) -> None:
    """Stop exactly the daemons recorded in DIR/pids.json, in reverse start order (TERM, then KILL)."""
    d = Path(dir).resolve()
    daemons = _read_pids(d)
    if not any(_alive(r) for r in daemons):
        if not quiet:
            _say(f"nothing running in {d}")
        return
    if any(r["name"] == "slurmctld" and _alive(r) for r in daemons):
        _cancel_jobs(d, quiet)
    for rec in reversed(daemons):
        _stop_one(rec, quiet)
    _hosts_remove(d)
    left = [f"{r['name']} ({r['pid']})" for r in daemons if _alive(r)]
    if left:
        raise SlurmLocalError(f"still alive after SIGKILL: {', '.join(left)}")


def _stop_one(rec: dict, quiet: bool) -> None:
    """SIGTERM to one recorded daemon, SIGKILL after its grace; says how it ended."""
    if not _alive(rec):
        return
    t0, grace, how = time.monotonic(), 30 if rec["name"] == "mariadbd" else 15, "SIGTERM"
    _signal(rec, signal.SIGTERM)
    while _alive(rec) and time.monotonic() - t0 < grace:
        time.sleep(0.1)
    if _alive(rec):
        _signal(rec, signal.SIGKILL)
        how = "SIGKILL after SIGTERM"
        while _alive(rec) and time.monotonic() - t0 < grace + 5:
            time.sleep(0.1)
    if not quiet:
        _say(f"{rec['name']:<10} pid {rec['pid']:<7} stopped ({how}, {time.monotonic() - t0:.1f} s)")


def stop_daemon(dir: str | os.PathLike, name: str) -> None:
    """Stop one daemon of a running cluster (a fault test: `slurmdbd`, accounting down), by its recorded PID."""
    d = Path(dir).resolve()
    (rec,) = [r for r in _read_pids(d) if r["name"] == name]
    _stop_one(rec, quiet=False)


def restart_daemon(dir: str | os.PathLike, name: str, timeout: float = 60) -> None:
    """Start a daemon that stop_daemon stopped, with the command start() gave it, and wait until it is ready;
    its new PID replaces the old one in DIR/pids.json."""
    d = Path(dir).resolve()
    p = _paths(d)
    port = int(re.search(r"^SlurmctldPort=(\d+)", p["slurm_conf"].read_text(), re.M).group(1))
    daemons = _read_pids(d)
    index = next(i for i, r in enumerate(daemons) if r["name"] == name)
    if _alive(daemons[index]):
        return
    nodes = _cluster(d)["nodes"]
    _, cmd, user, extra_env, check, what, logs = next(x for x in _daemons(d, p, port, nodes) if x[0] == name)
    rest = daemons[:index] + daemons[index + 1:]
    rec = _spawn(name, cmd, d, rest, user, extra_env)
    daemons = [*daemons[:index], rec, *daemons[index + 1:]]
    _write_pids(d, daemons)
    _wait_ready(name, rec, check, timeout, what, [*logs, Path(rec["out"])])


def status(dir: str | os.PathLike = DEFAULT_DIR) -> bool:
    """Print each recorded daemon as alive or dead, then sinfo; True when all are alive."""
    d = Path(dir).resolve()
    daemons = _read_pids(d)
    if not daemons:
        print(f"no cluster recorded in {d}")
        return False
    for r in daemons:
        print(f"{r['name']:<10} pid {r['pid']:<7} {'alive' if _alive(r) else 'dead'}")
    if any(r["name"] == "slurmctld" and _alive(r) for r in daemons):
        print(_run(["sinfo"], d).stdout, end="")
    print(f"SLURM_CONF={env(d)['SLURM_CONF']}")
    return is_running(d)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="command", required=True)
    sub.add_parser("install", help="apt-get install the packages (no recommends) if missing")
    for name, text in (("start", "start the cluster (or find it running); prints `export SLURM_CONF=...`"),
                       ("stop", "cancel its jobs and stop the daemons that start recorded"),
                       ("status", "which recorded daemons are alive, and sinfo"),
                       ("env", "print SLURM_CONF=... for this cluster")):
        sp = sub.add_parser(name, help=text)
        sp.add_argument("--dir", default=DEFAULT_DIR, help=f"state folder (default {DEFAULT_DIR})")
        if name == "start":
            sp.add_argument("--nodes", type=int, default=1,
                            help="nodes, each its own slurmd on this host (default 1; several: node1, node2, ...)")
            sp.add_argument("--port", type=int, default=None,
                            help=f"slurmctld port; slurmd +1, slurmdbd +2 (default: {DEFAULT_PORT}, or "
                                 f"{DEFAULT_PORT + 10000}, ... when taken)")
    args = ap.parse_args(argv)
    try:
        if args.command == "install":
            install()
        elif args.command == "start":
            for k, v in start(args.dir, port=args.port, nodes=args.nodes).items():
                print(f"export {k}={v}")
        elif args.command == "stop":
            stop(args.dir)
        elif args.command == "status":
            return 0 if status(args.dir) else 1
        elif args.command == "env":
            for k, v in env(args.dir).items():
                print(f"{k}={v}")
            if not is_running(args.dir):
                _say(f"no cluster running in {Path(args.dir).resolve()}: run `start` first")
                return 1
    except SlurmLocalError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    except subprocess.CalledProcessError as e:
        print(f"error: {' '.join(map(str, e.cmd))} exited with {e.returncode}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
