#!/usr/bin/env bash
# GPU check of the Stage 03 local providers (vLLM and transformers on CUDA); < 10 min on one GPU.
#
# Usage: bash scripts/gpu_check.sh [--cases N] [--out DIR] [--skip-tests] [-h|--help]
#   --cases N      cases in the stage-batching benchmark (default 200)
#   --out DIR      where gpu_stage_batching.json and the pytest log go (default $OUT, else
#                  benchmarks/results)
#   --skip-tests   run only the benchmark
#
# Steps: (1) fail fast, with the reason, when there is no NVIDIA GPU, no CUDA torch or no vllm;
# (2) the GPU tests (pytest --rungpu -m gpu tests/llm: the tiny random Qwen2-VL through the
# transformers provider on CUDA in bf16); (3) benchmarks/gpu_stage_batching.py: the tiny VLM
# through vLLM, stage-batched versus one conversation at a time (throughputs, LLM.chat calls,
# output agreement). Uses CHEXPERCEPT_PYTHON, else .venv/bin/python, else python.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; }
cases=200
out="${OUT:-$ROOT/benchmarks/results}"
run_tests=1
while [ $# -gt 0 ]; do
  case "$1" in
    -h|--help) usage; exit 0 ;;
    --cases) [ $# -ge 2 ] || { echo "gpu_check: --cases needs a value" >&2; exit 2; }; cases="$2"; shift 2 ;;
    --out) [ $# -ge 2 ] || { echo "gpu_check: --out needs a value" >&2; exit 2; }; out="$2"; shift 2 ;;
    --skip-tests) run_tests=0; shift ;;
    *) echo "gpu_check: unknown flag '$1'" >&2; usage >&2; exit 2 ;;
  esac
done

if [ -n "${CHEXPERCEPT_PYTHON:-}" ]; then PY="$CHEXPERCEPT_PYTHON"
elif [ -x "$ROOT/.venv/bin/python" ]; then PY="$ROOT/.venv/bin/python"
else PY="python"; fi

command -v nvidia-smi >/dev/null 2>&1 || {
  echo "gpu_check: nvidia-smi not found: this check needs a machine with an NVIDIA GPU" >&2; exit 2; }
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader

"$PY" - <<'EOF'
import sys
try:
    import torch
except ImportError as exc:
    sys.exit(f"gpu_check: torch is not importable ({exc}); pip install -e '.[gpu]'")
if not torch.cuda.is_available():
    sys.exit(f"gpu_check: torch {torch.__version__} sees no CUDA device")
try:
    import vllm
except ImportError as exc:
    sys.exit(f"gpu_check: vllm is not importable ({exc}); pip install -e '.[gpu]'")
import transformers
print(f"torch {torch.__version__} (CUDA {torch.version.cuda}), vllm {vllm.__version__}, "
      f"transformers {transformers.__version__}, {torch.cuda.device_count()} GPU(s)")
EOF

mkdir -p "$out"
if [ "$run_tests" = 1 ]; then
  timeout 180 "$PY" -m pytest -q --rungpu -m gpu tests/llm 2>&1 | tee "$out/gpu_pytest.log"
fi
timeout 480 "$PY" benchmarks/gpu_stage_batching.py --cases "$cases" --out "$out/gpu_stage_batching.json"
echo "gpu_check: done; results in $out"
