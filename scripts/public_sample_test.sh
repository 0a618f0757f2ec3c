#!/usr/bin/env bash
# Public smoke run: the NIH ChestX-ray14 source path, end to end, with no download.
#
# Usage: bash scripts/public_sample_test.sh [--keep] [--work-dir DIR] [-h|--help]
#
# Reads the REAL NIH box and image tables shipped in the installed torchxrayvision package,
# draws a few cases per lesion with the config's seed (cfg/config_public_sample.yaml), and
# writes a SYNTHETIC stand-in image for each sampled NIH image id (a phantom at the real box
# geometry, "SYNTHETIC STAND-IN" burnt into the pixels; not an NIH image) plus its anatomy
# masks. Then:
#   00 curation: nih-cxr14 source, box-anatomy candidates (box x lungs, heart for
#      cardiomegaly), candidate and negative sheets AUTO-APPROVED (smoke only: a real
#      benchmark needs the experts' optimal? review), distribution to 2 annotators
#   01 anatomy masks (provided: the stand-ins') + morphological mask deformation
#   02 QA generation, export (licences recorded in chexpercept.json and data_sources.json)
#   03 evaluation with the oracle, random and dummy providers under oracle settings implicit
#      and none
#   04 analysis, and the self-check: oracle rows 100 %, dummy rows what the answer keys give
# Outputs go to --work-dir (default: outputs/public_sample_test/, git-ignored).
#   --keep   resume into the existing work dir instead of starting afresh
# Exits non-zero on any failure. The Python environment is chosen as in sample_test.sh
# (CHEXPERCEPT_PYTHON, ENV, conda env 'chexpercept', else .venv made by setup.sh --cpu-only).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
# shellcheck source=scripts/lib/pyenv.sh
source "$ROOT/scripts/lib/pyenv.sh"
# shellcheck source=scripts/lib/smoke.sh
source "$ROOT/scripts/lib/smoke.sh"

usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; }
smoke_args public_sample_test.sh "$ROOT/outputs/public_sample_test" "$@"

step "setup"
chex_pyenv_select public_sample_test.sh chexpercept
if [ "$CHEX_PYENV" = venv ] && [ ! -x "$ROOT/.venv/bin/python" ]; then bash setup.sh --cpu-only; fi
export CHEXPERCEPT_WORK_DIR="$WORK" PYTHONUNBUFFERED=1 MPLBACKEND=Agg
CFG="$ROOT/cfg/config_public_sample.yaml"
[ "$keep" = 1 ] || rm -rf "$WORK"
mkdir -p "$WORK"
S00="$WORK/00_source_data_curation"
S04="$WORK/04_analyze_eval_result"
BENCH="$WORK/chexpercept"

step "stand-ins: SYNTHETIC images at the real NIH box geometry (not NIH pixels)"
"${PY[@]}" scripts/public_sample/make_stand_ins.py --config "$CFG" --no-progress

step "00 source data curation (nih-cxr14, box-anatomy)"
"${PY[@]}" src/00_source_data_curation/00_sample_mimic_ils_case.py --config "$CFG" --no-progress
"${PY[@]}" src/00_source_data_curation/01_generate_rosalia_pred.py --config "$CFG" --no-progress
smoke_review "$CFG" "$S00"
smoke_stages_01_to_04 "$CFG" "$WORK" --no-review-figures

step "done in $(( $(date +%s) - smoke_start ))s"
echo "SYNTHETIC stand-ins: $WORK/stand_ins/ (real NIH ids and boxes, synthetic pixels; see its README.txt)"
echo "benchmark:           $BENCH/chexpercept.json (+ image folders; licences in $BENCH/data_sources.json)"
echo "analysis:            $S04/all_models_oracle_{implicit,none}/"
