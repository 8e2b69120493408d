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


def test_building_the_parser_imports_nothing_heavy():
    code = ("import sys; from zbpscale.cli import build_parser; build_parser(); "
            "print(sorted(m for m in ('torch', 'matplotlib', 'numpy', 'huggingface_hub', 'rich', 'submitit') "
            "if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stdout.strip() == "[]", out.stdout + out.stderr


def test_results_commands_turn_a_wrong_folder_into_one_line(tmp_path):
    for args in (("collect", str(tmp_path / "nowhere"), "--out", str(tmp_path / "out")),
                 ("plot", str(tmp_path)), ("upload", str(tmp_path))):
        out = run_cli(*args)
        assert out.returncode == 2 and out.stderr.startswith("error: ") and len(out.stderr.splitlines()) == 1, args
        assert "hint: " in out.stderr and "Traceback" not in out.stderr
