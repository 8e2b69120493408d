#!/usr/bin/env bash
# One call on a GPU machine (a few minutes on an H200): the Triton kernels' correctness tests, then the
# training-step benchmark of BP against the ZBP arms at the issue's reference shape (d=512 L=8 T=1024 batch 8,
# bf16 autocast). Logs go to ${OUT:-.}/gpu_tests.log and ${OUT:-.}/bench_step.txt.
#   bash tools/gpu_check.sh
set -uo pipefail
cd "$(dirname "$0")/.."
out="${OUT:-.}"
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
python -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__, torch.cuda.get_device_name())"
python -m pytest tests/test_fused.py -m gpu -q -p no:cacheprovider 2>&1 | tee "$out/gpu_tests.log"
tests=${PIPESTATUS[0]}
python tools/bench_step.py --device cuda --d 512 --layers 8 --heads 8 --seq 1024 --batch 8 \
  --arms bp,zbp_n16,zbp_n64,zbp_n16_fwd,zbp_n64_fwd 2>&1 | tee "$out/bench_step.txt"
bench=${PIPESTATUS[0]}
echo "gpu tests exit $tests, benchmark exit $bench"
exit $((tests || bench))
