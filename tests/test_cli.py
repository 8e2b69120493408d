"""The `zbpscale` command as a user runs it: output compared with the library's closed forms, and a user's
mistake compared with the one-line contract (no traceback, non-zero exit)."""

import subprocess
import sys

from zbpscale.model import SIZES, n_params


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


def test_unknown_command_is_a_usage_error_not_a_traceback():
    out = run_cli("trian")
    assert out.returncode == 2
    assert "invalid choice" in out.stderr and "Traceback" not in out.stderr
