#!/usr/bin/env bash
# End-to-end smoke run of CheXpercept on bundled fixtures, CPU only, offline.
#
# Usage: bash sample_test.sh [--keep] [--work-dir DIR] [-h|--help]
#
# Sets itself up (bash setup.sh --cpu-only, when it runs on .venv), generates the fixtures
# (synthetic chest phantoms for all seven lesions plus one real radiograph from pydicom-data), then
# runs every stage:
#   00 curation (seeded sampling, image preparation, provided candidate masks in 2 shards + merge,
#      annotation sheets auto-filled, distribution to 2 annotators)
#   01 anatomy masks (provided) + morphological mask deformation
#   02 QA generation, benchmark sampling and export
#   03 evaluation with the oracle, random and dummy providers under oracle settings implicit and none
#   04 analysis: CSVs, plots and the summary table printed below
#   self-check: the oracle rows must read 100 %, the dummy rows what the answer keys give
# Outputs go to --work-dir (default: outputs/sample_test/, git-ignored); the exported benchmark is
# <work-dir>/chexpercept/ (your data/chexpercept/ is never touched).
#   --keep   resume into the existing work dir instead of starting afresh
# Exits non-zero on any failure.
#
# Python environment, first match wins (one line on stderr says which is used):
#   CHEXPERCEPT_PYTHON=/path/to/python   that interpreter
#   ENV=NAME                             the conda env NAME (conda run --no-capture-output -n NAME
#                                        python); exits 2 when conda or the env is missing
#                                        (create it: conda env create -f envs/NAME.yml)
#   conda on PATH                        the conda env 'chexpercept' (envs/chexpercept.yml), when it
#                                        exists
#   otherwise                            .venv (made by bash setup.sh --cpu-only, run for you)
# GPU fix: when that python has the nvidia-nvjitlink package, its nvidia/nvjitlink/lib folder is
# put first on LD_LIBRARY_PATH (avoids "libcusparse.so.12: undefined symbol:
# __nvJitLinkGetErrorLogSize_12_9"); without the package nothing changes.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cd "$ROOT"
# shellcheck source=scripts/lib/pyenv.sh
source "$ROOT/scripts/lib/pyenv.sh"
# shellcheck source=scripts/lib/smoke.sh
source "$ROOT/scripts/lib/smoke.sh"

usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; }
smoke_args sample_test.sh "$ROOT/outputs/sample_test" "$@"

step "setup"
chex_pyenv_select sample_test.sh chexpercept
if [ "$CHEX_PYENV" = venv ]; then bash setup.sh --cpu-only; fi
chex_pyenv_nvjitlink sample_test.sh
export CHEXPERCEPT_WORK_DIR="$WORK" PYTHONUNBUFFERED=1 MPLBACKEND=Agg
CFG="$ROOT/cfg/config_sample_test.yaml"
[ "$keep" = 1 ] || rm -rf "$WORK"
mkdir -p "$WORK"
S00="$WORK/00_source_data_curation"
S03="$WORK/03_eval_vlm_on_chexpercept"
S04="$WORK/04_analyze_eval_result"
BENCH="$WORK/chexpercept"

step "fixtures"
"${PY[@]}" scripts/sample_test/make_fixtures.py --out data/sample_test/generated

step "00 source data curation"
"${PY[@]}" src/00_source_data_curation/00_sample_mimic_ils_case.py --config "$CFG" --no-progress
for part in 0 1; do
  "${PY[@]}" src/00_source_data_curation/01_generate_rosalia_pred.py --config "$CFG" --part "$part" --total-parts 2 --no-progress
done
"${PY[@]}" src/00_source_data_curation/02_prepare_positive_annotation.py --base-out "$S00/rosalia_pred" --total-parts 2
smoke_review "$CFG" "$S00"
smoke_stages_01_to_04 "$CFG" "$WORK"

step "done in $(( $(date +%s) - smoke_start ))s"
echo "benchmark:        $BENCH/chexpercept.json (+ image folders)"
echo "eval results:     $S03/<provider>_<model>/oracle_<setting>/all_results.json"
echo "analysis:         $S04/all_models_oracle_{implicit,none}/ (CSVs and plots)"
echo "case viewer:      $S04/all_models_oracle_{implicit,none}/viewer/index.html (open in a browser)"
