#!/usr/bin/env bash
# Set up CheXpercept on this machine (no conda needed).
#
# Usage: bash setup.sh [--tests] [--skip-lisa] [--skip-sam3] [--skip-chexmask-u] [--cpu-only] [-h|--help]
#
# 1. Creates .venv with pip (Python >= 3.11; set PYTHON=/path/to/python3 to choose one) and
#    installs this project editable with the CPU pipeline (`pip install -e ".[fixtures]"`) and
#    torchxrayvision's wheel without its dependencies (its NIH tables, for the public smoke).
#    --tests also installs what the test suite needs (`.[fixtures,dev]` + sam2: pytest, the openai and
#    google-genai SDKs, torch + torchvision + transformers for the tiny-VLM tests; several GB)
#    and, when missing, Debian's chromium for the browser tests (apt-get; about 30 s).
#    Re-running is cheap: nothing is reinstalled while pyproject.toml is unchanged.
# 2. Clones the optional third-party code used only by the GPU backends, unless skipped:
#      LISA (ROSALIA)  -> src/00_source_data_curation/LISA      (--skip-lisa)
#      SAM3            -> src/01_mask_deformation/sam3          (--skip-sam3)
#      CheXmask-U      -> src/01_mask_deformation/CheXmask-U    (--skip-chexmask-u)
#    Pin a commit with LISA_REF / SAM3_REF / CHEXMASKU_REF. When the network refuses a clone it
#    is skipped with one line; the CPU pipeline never needs them.
#    --cpu-only skips all three.
# GPU users: see envs/*.yml for the conda environments (vLLM, ROSALIA, Hulu-Med).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"

usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; }

skip_lisa=0; skip_sam3=0; skip_chexmasku=0; extras=fixtures
for arg in "$@"; do
  case "$arg" in
    --tests) extras=fixtures,dev ;;
    --skip-lisa) skip_lisa=1 ;;
    --skip-sam3) skip_sam3=1 ;;
    --skip-chexmask-u) skip_chexmasku=1 ;;
    --cpu-only) skip_lisa=1; skip_sam3=1; skip_chexmasku=1 ;;
    -h|--help) usage; exit 0 ;;
    *) echo "setup.sh: unknown argument '$arg' (see bash setup.sh --help)" >&2; exit 2 ;;
  esac
done

PYTHON="${PYTHON:-python3}"
if ! "$PYTHON" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else 1)' 2>/dev/null; then
  echo "setup.sh: need Python >= 3.11 (found: $("$PYTHON" --version 2>&1 || echo none)); set PYTHON=..." >&2
  exit 1
fi

stamp_of() { echo ".venv/.chexpercept-setup-${1//,/-}"; }
want="$(cat pyproject.toml setup.sh | sha256sum | cut -d' ' -f1)"
check='import chexpercept, utils'
[ "$extras" = fixtures ] || check="$check, pytest"
if [ -x .venv/bin/python ] && { [ "$(cat "$(stamp_of "$extras")" 2>/dev/null)" = "$want" ] \
     || [ "$(cat "$(stamp_of fixtures,dev)" 2>/dev/null)" = "$want" ]; } \
   && .venv/bin/python -c "$check" 2>/dev/null; then
  echo "setup.sh: .venv is up to date"
else
  echo "setup.sh: creating/updating .venv (pip install -e \".[$extras]\") ..."
  [ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
  .venv/bin/python -m pip install --quiet --disable-pip-version-check --upgrade pip
  .venv/bin/python -m pip install --quiet --disable-pip-version-check -e ".[$extras]"
  if [ "$extras" != fixtures ]; then
    # sam2 is an sdist that must build against the installed torch (CPU build of its extension off).
    SAM2_BUILD_CUDA=0 .venv/bin/python -m pip install --quiet --disable-pip-version-check \
      --no-build-isolation "sam2==1.1.0" "hydra-core~=1.3.8" "iopath~=0.1.10"
    # lmms-eval for the lmms-eval task's test (docs/integrations.md, "lmms-eval"): without its
    # dependencies, which would downgrade protobuf and antlr4 here (sam2's hydra needs 4.9);
    # the few it imports are in the dev extra. About 40 MB, a few seconds.
    .venv/bin/python -m pip install --quiet --disable-pip-version-check --no-deps \
      "lmms-eval==0.7.3"
  fi
  # The public smoke (scripts/public_sample_test.sh) reads NIH's box and image tables from
  # torchxrayvision's data/ folder without importing it (docs/public_data.md): the wheel alone,
  # without torch and its CUDA wheels (a no-op where the dev extra already installed it).
  .venv/bin/python -m pip install --quiet --disable-pip-version-check --no-deps \
    "torchxrayvision==1.5.7"
  echo "$want" > "$(stamp_of "$extras")"
  echo "setup.sh: .venv ready ($(.venv/bin/python --version))"
fi

if [ "$extras" != fixtures ] && ! command -v chromium >/dev/null 2>&1 \
   && [ -z "${CHEXPERCEPT_CHROMIUM:-}" ]; then
  # Browser tests (tests/viewer): Debian's chromium, driven by the playwright package of the dev
  # extra (Playwright's own browser download is never used). About 30 s and 460 MB.
  if command -v apt-get >/dev/null 2>&1; then
    SUDO=""; [ "$(id -u)" = 0 ] || SUDO="sudo -n"
    echo "setup.sh: installing Debian's chromium for the browser tests (apt-get) ..."
    apt_install() { $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium \
                      >/dev/null; }
    apt_install || { $SUDO apt-get update -q >/dev/null && apt_install; } || \
      echo "setup.sh: could not install chromium; the browser tests (tests/viewer) will fail" \
           "under CI and be skipped elsewhere" >&2
  else
    echo "setup.sh: no apt-get: install Chromium and set CHEXPERCEPT_CHROMIUM=/path/to/chromium" \
         "for the browser tests (tests/viewer)" >&2
  fi
fi

clone() {  # clone URL DEST REF
  local url="$1" dest="$2" ref="${3:-}"
  if [ -d "$dest" ] && [ -n "$(ls -A "$dest" 2>/dev/null)" ]; then
    echo "setup.sh: $dest exists, not cloning"
    return 0
  fi
  if GIT_TERMINAL_PROMPT=0 timeout 60 git clone --quiet --depth 1 ${ref:+--branch "$ref"} "$url" "$dest" 2>/dev/null; then
    echo "setup.sh: cloned $url -> $dest ($(git -C "$dest" rev-parse --short HEAD))"
  else
    rm -rf "$dest"
    echo "setup.sh: could not clone $url (no network?); skipped - only the GPU backends need it"
  fi
}
[ "$skip_lisa" = 1 ] || clone https://github.com/JIA-Lab-research/LISA.git src/00_source_data_curation/LISA "${LISA_REF:-}"
[ "$skip_sam3" = 1 ] || clone https://github.com/facebookresearch/sam3.git src/01_mask_deformation/sam3 "${SAM3_REF:-}"
[ "$skip_chexmasku" = 1 ] || clone https://github.com/mcosarinsky/CheXmask-U.git src/01_mask_deformation/CheXmask-U "${CHEXMASKU_REF:-}"
exit 0
