#!/usr/bin/env bash
# The GPU acceptance run in one call (at most ~8 minutes on one H200): every kernel variant compiled offline and
# on the GPU, the doctor's GPU rows, Triton kernel tests, step benchmarks at the reference and ladder shapes,
# exact resume after SIGUSR2 and SIGKILL, two ranks on one GPU, the mini ladder with one GPU per run, diagnostics
# of its trained runs. Summary: ${OUT:-.}/gpu_check/gpu_check.json (and a dated copy to commit under docs/gpu/);
# one log per part beside it; the figures to paste are printed at the end. Exit status 1 if any part failed.
# See tools/gpu_check.py for the parts.
#   bash tools/gpu_check.sh                     # all parts
#   bash tools/gpu_check.sh --parts resume,ranks
set -uo pipefail
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}"
python -c "import torch; print('torch', torch.__version__, torch.cuda.get_device_name() if torch.cuda.is_available() else 'no GPU')"
# zbpscale's dependencies that this Python lacks (the lent machine's image lacks some), said first
python - <<'EOF'
import importlib.metadata, re, sys
try:
    import tomllib
except ImportError:  # Python 3.10: not checked
    sys.exit(0)
missing = []
for need in tomllib.load(open("pyproject.toml", "rb"))["project"]["dependencies"]:
    name = re.match(r"[A-Za-z0-9_.-]+", need).group(0)
    try:
        importlib.metadata.distribution(name)
    except importlib.metadata.PackageNotFoundError:
        missing.append(name)
if missing:
    print(f"gpu_check: this Python lacks {', '.join(missing)} of zbpscale's dependencies: what imports them fails "
          "(hint: carry them as wheels on PYTHONPATH: docs/gpu.md)", file=sys.stderr)
EOF
exec python tools/gpu_check.py --device cuda --out "${OUT:-.}/gpu_check" "$@"
