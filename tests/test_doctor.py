"""`zbpscale doctor` against machines made to order: fake `sinfo` / `sacct` on PATH (answering, failing,
hanging), with and without SLURM_CONF, a sweep whose data are prepared or not. Compared: each row's level with
what that machine should get (a literal table), the exit code with the blocking rows, the hang with the timeout.
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from zbpscale import doctor

SINFO_OK = 'echo "debug* up 1"; echo "gpu up 4"'
SINFO_FAIL = 'echo "sinfo: fatal: Could not establish a configuration source" >&2; exit 1'


def fake_slurm(tmp_path: Path, monkeypatch, sinfo: str, sacct: str = "exit 0") -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    for name, body in (("sinfo", sinfo), ("sacct", sacct)):
        (bin_dir / name).write_text(f"#!/bin/sh\n{body}\n")
        (bin_dir / name).chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")


SLURM_TABLE = [  # (SLURM_CONF, sinfo, sacct, expected levels of the SLURM rows)
    (None, SINFO_FAIL, "exit 0", ["warn"]),                # no cluster here and none expected: local queue
    ("/etc/nowhere/slurm.conf", SINFO_FAIL, "exit 0", ["fail"]),  # a cluster is expected and does not answer
    ("/etc/slurm/slurm.conf", SINFO_OK, "exit 0", ["ok", "ok"]),  # controller and accounting answer
    ("/etc/slurm/slurm.conf", SINFO_OK, "exit 1", ["ok", "warn"]),  # no accounting: status falls back to squeue
]


@pytest.mark.parametrize("conf, sinfo, sacct, levels", SLURM_TABLE,
                         ids=["no-conf-no-slurm", "conf-no-answer", "conf-answers", "no-accounting"])
def test_slurm_rows(tmp_path, monkeypatch, conf, sinfo, sacct, levels):
    fake_slurm(tmp_path, monkeypatch, sinfo, sacct)
    if conf:
        monkeypatch.setenv("SLURM_CONF", conf)
    else:
        monkeypatch.delenv("SLURM_CONF", raising=False)
    checks = doctor.check_slurm()
    assert [c.level for c in checks] == levels
    assert all(c.hint for c in checks if c.level != "ok")
    if levels[0] == "ok":
        assert "partitions: debug*, gpu" in checks[0].detail
    if levels[0] == "fail":
        assert "SLURM_CONF" in checks[0].hint and conf in checks[0].detail


def test_a_hanging_sinfo_is_cut_off(tmp_path, monkeypatch):
    fake_slurm(tmp_path, monkeypatch, "exec sleep 30")
    monkeypatch.setenv("SLURM_CONF", "/etc/slurm/slurm.conf")
    start = time.monotonic()
    (check,) = doctor.check_slurm(timeout=0.5)
    assert time.monotonic() - start < 5 and check.level == "fail" and "no answer within 0.5 s" in check.detail


SWEEP = '''from zbpscale.sweep import Data, Resources, Size, Sweep, arm
SWEEP = Sweep(name="doc", sizes=(Size(name="nano", global_batch=2, resources=Resources(gpus_per_node=0)),),
              arms=(arm("bp"),), data=Data(dir="data/doc", source="embedded"), root="runs")
'''


def test_whole_report_and_exit_code(tmp_path, monkeypatch, data_dir):
    monkeypatch.chdir(tmp_path)
    fake_slurm(tmp_path, monkeypatch, SINFO_FAIL)
    monkeypatch.delenv("SLURM_CONF", raising=False)
    (tmp_path / "doc.py").write_text(SWEEP)
    checks = {c.name: c for c in doctor.run_checks(sweep="doc.py")}
    assert {"python", "torch", "GPUs", "sweep", "disk", "data", "SLURM", "tokenizer", "submitit",
            "huggingface_hub"} <= set(checks)
    assert checks["sweep"].level == "ok" and "runs/doc" in checks["sweep"].detail
    assert checks["sweep"].detail.startswith("doc: 1 size x 1 arm x 1 seed, runs in ")  # it said '1 sizes x 1 arms'
    assert checks["data"].level == "warn" and "prepare-data --source embedded --data data/doc" in checks["data"].hint
    assert checks["tokenizer"].level == "ok" and "gpt2 via" in checks["tokenizer"].detail
    assert checks["executor"].level == "ok" and checks["executor"].detail == "local: takes every run of the sweep"
    assert not any(c.level == "fail" for c in checks.values())
    (tmp_path / "gpus.py").write_text(SWEEP.replace("global_batch=2, resources=Resources(gpus_per_node=0)",
                                                    "global_batch=16, resources=Resources(gpus_per_node=8)"))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    executor = {c.name: c for c in doctor.run_checks(sweep="gpus.py")}["executor"]  # it said nothing blocks
    assert executor.level == "fail" and "needs 8 GPUs; this node has 0" in executor.detail, executor
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")

    shutil.copytree(data_dir, tmp_path / "data" / "doc")
    checks = {c.name: c for c in doctor.run_checks(sweep="doc.py")}
    assert checks["data"].level == "ok" and "129,274 train + 8,192 val tokens" in checks["data"].detail

    (tmp_path / "bad.py").write_text("SWEEP = 1\n")
    checks = {c.name: c for c in doctor.run_checks(sweep="bad.py")}
    assert checks["sweep"].level == "fail" and "not a zbpscale.sweep.Sweep" in checks["sweep"].detail


def test_exit_code_follows_the_blocking_rows(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    fake_slurm(tmp_path, monkeypatch, SINFO_FAIL)
    monkeypatch.delenv("SLURM_CONF", raising=False)
    assert doctor.run(argparse.Namespace(sweep=None, dir=str(tmp_path / "jobs"))) == 0
    assert "nothing blocks running" in capsys.readouterr().out


def test_cli_prints_one_screen_and_exits_1_on_a_blocking_problem(tmp_path, monkeypatch):
    fake_slurm(tmp_path, monkeypatch, SINFO_FAIL)
    root = str(Path(__file__).resolve().parents[1] / "src")
    env = {**os.environ, "SLURM_CONF": "/etc/nowhere/slurm.conf",
           "PYTHONPATH": os.pathsep.join([root] + [p for p in [os.environ.get("PYTHONPATH")] if p])}
    out = subprocess.run([sys.executable, "-m", "zbpscale.cli", "doctor", "--dir", str(tmp_path / "jobs")],
                         capture_output=True, text=True, timeout=120, env=env, cwd=tmp_path)
    assert out.returncode == 1, out.stdout + out.stderr
    assert "zbpscale doctor" in out.stdout and "/etc/nowhere/slurm.conf" in out.stdout
    assert "1 problem(s) block running" in out.stdout and "Traceback" not in out.stderr
    assert len(out.stdout.splitlines()) < 60  # one screen


def test_gpu_rows_from_what_torch_reports(monkeypatch):
    """The GPU branch on a CPU machine: torch's answers replaced by those of a 2 x H200 node whose driver is
    CUDA 12.4 (one GPU partly taken by another process); Triton's own ptxas is asked for real."""
    import contextlib

    import torch

    props = SimpleNamespace(name="NVIDIA H200", total_memory=141 * 2**30)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda i: props)
    monkeypatch.setattr(torch.distributed, "is_nccl_available", lambda: True)
    monkeypatch.setattr(torch.cuda.nccl, "version", lambda: (2, 21, 5))
    monkeypatch.setattr(torch.cuda, "device", lambda i: contextlib.nullcontext())
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda i: props.name)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda i: (9, 0))
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda: True)
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda i: ((139 - 100 * i) * 2**30, 141 * 2**30))
    monkeypatch.setattr(doctor, "driver_cuda", lambda: (12, 4))
    checks = doctor.check_torch()
    rows = {c.name: c for c in checks}
    assert rows["GPUs"].level == "ok" and rows["GPUs"].detail == "2 x NVIDIA H200 (141 GiB)"
    assert rows["NCCL"].level == "ok" and rows["NCCL"].detail == "2.21.5"
    (gpu,) = [c for c in checks if c.name == "GPU"]  # one line per kind of GPU, its least free memory
    assert gpu.level == "warn" and gpu.detail == "NVIDIA H200: sm_90, bf16 yes, 39 of 141 GiB free"
    if doctor.triton_ptxas(90) is not None:
        (major, minor), _, env = doctor.triton_ptxas(90)
        assert rows["Triton ptxas"].level == ("fail" if major > 12 else "warn" if minor > 4 else "ok")
        assert rows["Triton ptxas"].detail.startswith(f"ptxas CUDA {major}.{minor}, driver CUDA 12.4")


# ---- on a GPU node: what can break the ZBP kernels before a run (the checks are pure; the GPU only feeds them)

PTXAS_TABLE = [  # (driver CUDA, ptxas CUDA, level): a newer major release cannot load; a newer minor may not JIT
    ((12, 4), (13, 4), "fail"),
    ((12, 4), (12, 9), "warn"),
    ((13, 0), (12, 9), "ok"),
    ((13, 4), (13, 4), "ok"),
]


@pytest.mark.parametrize("driver, ptxas, level", PTXAS_TABLE)
def test_the_driver_must_load_what_tritons_ptxas_writes(driver, ptxas, level):
    check = doctor.check_ptxas(driver, (ptxas, "/site/triton/bin/ptxas-blackwell", "TRITON_PTXAS_BLACKWELL_PATH"),
                               older="/site/triton/bin/ptxas")
    assert check.level == level
    assert f"ptxas CUDA {ptxas[0]}.{ptxas[1]}, driver CUDA {driver[0]}.{driver[1]}" in check.detail
    if level != "ok":  # the hint names the variable that points Triton at the wheel's older ptxas
        assert check.hint.startswith("export TRITON_PTXAS_BLACKWELL_PATH=/site/triton/bin/ptxas,")
    assert doctor.check_ptxas(None, None).level == "warn"  # no triton: the plain path, said so


def test_this_tritons_ptxas_is_found_per_architecture():
    pytest.importorskip("triton")
    for arch in (80, 90):
        (major, minor), path, env = doctor.triton_ptxas(arch)
        assert Path(path).is_file() and major >= 11 and env.startswith("TRITON_PTXAS")


GPU_TABLE = [  # (capability, bf16, free GiB of 141, level)
    ((9, 0), True, 139, "ok"),
    ((9, 0), True, 60, "warn"),  # another process holds most of it
    ((7, 0), False, 30, "warn"),  # V100: no bf16, kernels not checked for it
]


@pytest.mark.parametrize("capability, bf16, free, level", GPU_TABLE)
def test_each_kind_of_gpu_gets_one_line(capability, bf16, free, level):
    check = doctor.check_gpu("NVIDIA H200", capability, bf16, free * 2**30, 141 * 2**30)
    assert check.level == level
    assert check.detail == (f"NVIDIA H200: sm_{capability[0]}{capability[1]}, bf16 {'yes' if bf16 else 'no'}, "
                            f"{free} of 141 GiB free")


def test_a_sweep_s_trackers_are_named_by_doctor_the_plan_and_the_wait_s_ending(tmp_path, monkeypatch, data_dir):
    """#45 item 6: a sweep with trackers: doctor checks each one's package (installed here: ok, with W&B's mode;
    one missing: a blocking row with the install hint), and the plan and submit --wait's last lines give the
    commands that show the runs: TensorBoard over the sweep's folder, `zbpscale sync` for W&B written offline."""
    from importlib import metadata

    from conftest import write_sweep
    from zbpscale.jobs.submit import results_table, tracker_lines
    from zbpscale.jobs.sweep import expand, load_sweep

    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.delenv("WANDB_MODE", raising=False)
    rows = {c.name: c for c in doctor.check_trackers(("tensorboard", "wandb"))}
    assert rows["tensorboard"].level == "ok" and rows["tensorboard"].detail == metadata.version("tensorboard")
    assert rows["wandb"].level == "ok" and "offline here" in rows["wandb"].detail
    real = metadata.version
    monkeypatch.setattr(metadata, "version", lambda name: (_ for _ in ()).throw(metadata.PackageNotFoundError(name))
                        if name == "wandb" else real(name))
    (missing,) = [c for c in doctor.check_trackers(("wandb",))]
    assert missing.level == "fail" and missing.hint == "pip install 'zbpscale[trackers]'"
    monkeypatch.setattr(metadata, "version", real)

    path = write_sweep(tmp_path, "tracked", data_dir, steps=4, trackers=("tensorboard", "wandb"))
    plan = subprocess.run([sys.executable, "-m", "zbpscale.submit", str(path), "--dry-run", "--executor", "local"],
                          capture_output=True, text=True, timeout=120, env={**os.environ, "COLUMNS": "200"})
    assert plan.returncode == 0, plan.stdout + plan.stderr
    sweep = load_sweep(path)
    assert f"note: trackers: tensorboard --logdir {sweep.jobs_dir}" in plan.stdout
    assert f"note: trackers: zbpscale sync {path}" in plan.stdout
    ending = results_table(sweep, expand(sweep), str(path))
    assert [line.strip() for line in ending[-2:]] == tracker_lines(sweep, str(path))
    monkeypatch.setenv("WANDB_API_KEY", "not-a-real-key")
    assert tracker_lines(sweep, str(path))[-1] == "# W&B: online, project 'tracked' (WANDB_API_KEY is set)"


def test_the_disk_row_fails_where_submit_could_not_write(tmp_path):
    """--dir on a file said the disk was fine; the row asks what submit asks (files.unwritable)."""
    (tmp_path / "afile").write_text("")
    row = doctor.check_disk(tmp_path / "afile")
    assert row.level == "fail" and "is not a folder" in row.detail, row
    row = doctor.check_disk(tmp_path / "afile" / "jobs")
    assert row.level == "fail" and "is not a folder" in row.detail, row
    assert "GiB free at" in doctor.check_disk(tmp_path / "new" / "jobs").detail  # made when the runs start


@pytest.mark.parametrize("text", ["", "garb{", '{"format": "zbpscale-shards", "format_version": 1}',
                                  '{"format": "zbpscale-shards", "format_version": 1, "train": {"tokens": 1000}, '
                                  '"val": {"tokens": 10}}'])  # no shards, no tokenizer: the trainer's KeyError
def test_a_data_manifest_the_trainer_would_refuse_fails_its_row(tmp_path, text):
    """An empty, garbled or fieldless manifest.json: a failed data row with the loader's hint (doctor was a
    JSONDecodeError or KeyError traceback on the file it is there to diagnose); a prepared folder is ok."""
    from zbpscale.data import prepare

    good, bad = tmp_path / "good", tmp_path / "bad"
    made = prepare.prepare(prepare.PrepConfig(source="embedded", out=good), log=lambda _: None)
    bad.mkdir()
    (bad / "manifest.json").write_text(text)
    ok, failed = doctor.check_data([good, bad])
    assert ok.level == "ok" and ok.detail == f"{good}: {made['train']['tokens']:,} train + 8,192 val tokens"
    assert failed.level == "fail" and str(bad / "manifest.json") in failed.detail
    assert failed.hint == f"delete {bad} and re-run `zbpscale prepare-data`"


def test_doctor_fails_the_data_submit_refuses_and_its_hint_is_the_prep_job_s_command(tmp_path, data_dir):
    """A helper's hunt: doctor said 'data ok' of a folder with a shard deleted (the trainer refused it at once) and
    of data prepared with other options than the sweep's Data (submit refused it), and its hint to prepare a
    missing folder left out the sweep's --tokens (following it made data submit refused). Now the data row fails as
    the trainer and submit would, in their words, and the hint is the prep job's own command."""
    from zbpscale.data.prepare_cli import to_argv
    from zbpscale.jobs.submit import other_data
    from zbpscale.jobs.sweep import load_sweep, prep_config
    from zbpscale.text import shown_path

    copy = tmp_path / "data" / "embedded"
    shutil.copytree(data_dir, copy)
    (ok,) = doctor.check_data([copy])
    assert ok.level == "ok"
    shard = next(copy.glob("train_*.bin"))
    shard.write_bytes(shard.read_bytes()[:-2])  # cut: the trainer refuses it before a step
    (row,) = doctor.check_data([copy])
    assert row.level == "fail" and f"shard {shard} is truncated or padded" in row.detail, row
    shard.unlink()
    (row,) = doctor.check_data([copy])
    assert row.level == "fail" and row.detail == f"shard {shard} is missing", row

    sweep_file = tmp_path / "s.py"
    sweep_file.write_text("from zbpscale.sweep import *\nSWEEP = Sweep(name='s', sizes=(Size(name='nano', "
                          "global_batch=4, tokens=4096, resources=Resources(gpus_per_node=0, time_min=30)),), "
                          f"arms=(arm('bp'),), data=Data(dir={str(tmp_path / 'e100k')!r}, source='embedded', "
                          "tokens=100_000), root='jobs')\n")
    sweep = load_sweep(sweep_file)
    rows = [c for c in doctor.run_checks(sweep=str(sweep_file)) if c.name == "data"]
    argv = to_argv(prep_config(sweep))  # its folder as typed (from here: the absolute path)
    assert [r.level for r in rows] == ["warn"] and rows[0].hint.endswith("zbpscale prepare-data " + " ".join(
        shown_path(a) if a == str(tmp_path / "e100k") else a for a in argv)) and "--tokens 100000" in rows[0].hint
    shutil.copytree(data_dir, tmp_path / "e100k")  # prepared without the sweep's token budget
    rows = [c for c in doctor.run_checks(sweep=str(sweep_file)) if c.name == "data"]
    refused = other_data(sweep, json.loads((tmp_path / "e100k" / "manifest.json").read_text()))
    assert [(r.level, r.detail, r.hint) for r in rows] == [("fail", refused.args[0], refused.hint)], rows
    out = subprocess.run([sys.executable, "-m", "zbpscale.submit", str(sweep_file), "--dry-run"], capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 2 and "holds data prepared with other options than the sweep's Data" in out.stderr
