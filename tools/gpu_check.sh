#!/usr/bin/env bash
# The GPU acceptance run in one call (~6 minutes on one H200): Triton kernel tests, step benchmarks at the
# reference and ladder shapes, exact resume after SIGUSR2 and SIGKILL, two ranks on one GPU, a 1-GPU sweep
# through the local queue, diagnostics of the trained runs. Summary: ${OUT:-.}/gpu_check/gpu_check.json; one
# log per part beside it. Exit status 1 if any part failed. See tools/gpu_check.py for the parts.
#   bash tools/gpu_check.sh                     # all parts
#   bash tools/gpu_check.sh --parts resume,ranks
set -uo pipefail
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
python -c "import torch; print('torch', torch.__version__, torch.cuda.get_device_name() if torch.cuda.is_available() else 'no GPU')"
exec python tools/gpu_check.py --device cuda --out "${OUT:-.}/gpu_check" "$@"
