#!/usr/bin/env bash
# Evaluate a model on the benchmark (Stage 03) and analyse the results (Stage 04).
#
# Usage: bash eval_chexpercept.sh [00_eval.py flags ...] [-h|--help]
#   e.g. bash eval_chexpercept.sh --provider dummy --oracle_setting none
#        bash eval_chexpercept.sh --provider openai --model gpt-5.4-nano --benchmark-dir data/chexpercept
#
# Every argument is passed to src/03_eval_vlm_on_chexpercept/00_eval.py (which rejects unknown
# flags); then src/04_analyze_eval_result/01_analyze_model_performance.py runs on the same
# --oracle_setting and --benchmark-dir and on the output path Stage 03 wrote (--output-path,
# else a --config's eval_vlm_on_chexpercept.output_path, else the default; Stage 03 writes it
# into the file CHEXPERCEPT_OUTPUT_PATH_FILE names) (skipped for --validate-only,
# --estimate-cost and sharded --part runs: merge the parts with 01_merge_parts.py first).
# Exit status: Stage 03's. When Stage 03 exits 3 (cases left unfinished: a turn got no answer),
# Stage 04 still runs (report.md opens with the incomplete run and how many cases are missing,
# counted missing, never wrong) and the script then exits 3; re-run the same command to complete
# the run. Any other Stage 03 failure stops the script at once with its exit status.
#
# Python environment, first match wins (one line on stderr says which is used):
#   CHEXPERCEPT_PYTHON=/path/to/python   that interpreter
#   ENV=NAME                             the conda env NAME (conda run --no-capture-output -n NAME
#                                        python); exits 2 when conda or the env is missing
#                                        (create it: conda env create -f envs/NAME.yml)
#   conda on PATH                        the conda env 'hulumed' with --model hulu-med (its own env,
#                                        envs/hulumed.yml), else 'chexpercept' (envs/chexpercept.yml),
#                                        when that env exists
#   otherwise                            .venv (made by bash setup.sh --cpu-only, run for you)
# GPU fix: when that python has the nvidia-nvjitlink package, its nvidia/nvjitlink/lib folder is
# put first on LD_LIBRARY_PATH (avoids "libcusparse.so.12: undefined symbol:
# __nvJitLinkGetErrorLogSize_12_9"); without the package nothing changes.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cd "$ROOT"
case "${1:-}" in -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; exit 0 ;; esac
# shellcheck source=scripts/lib/pyenv.sh
source "$ROOT/scripts/lib/pyenv.sh"

setting=implicit
results="$ROOT/src/03_eval_vlm_on_chexpercept/outputs"
analysis="$ROOT/src/04_analyze_eval_result"
bench="$ROOT/data/chexpercept"
default_env=chexpercept
prev=""
for arg in "$@"; do
  case "$prev" in
    --oracle_setting|--oracle-setting) setting="$arg" ;;
    --output-path|--output_path) results="$arg"; analysis="$arg" ;;
    --benchmark-dir|--benchmark_dir) bench="$arg" ;;
    --model) [ "$arg" != hulu-med ] || default_env=hulumed ;;
  esac
  case "$arg" in
    --model=hulu-med) default_env=hulumed ;;
    --oracle_setting=*|--oracle-setting=*) setting="${arg#*=}" ;;
    --output-path=*|--output_path=*) results="${arg#*=}"; analysis="${arg#*=}" ;;
    --benchmark-dir=*|--benchmark_dir=*) bench="${arg#*=}" ;;
  esac
  prev="$arg"
done

chex_pyenv_select eval_chexpercept.sh "$default_env"
[ "$CHEX_PYENV" != venv ] || bash setup.sh --cpu-only >/dev/null
chex_pyenv_nvjitlink eval_chexpercept.sh

# Stage 03 exits 3 when cases are left unfinished (a turn got no answer; docs/engines.md,
# "Faults"): Stage 04 still runs, its report.md opens with the incomplete run and the number of
# cases missing, and this script then exits 3. Any other failure stops here with its code.
eval_rc=0
out_file="$(mktemp)"
trap 'rm -f "$out_file"' EXIT
CHEXPERCEPT_OUTPUT_PATH_FILE="$out_file" \
  "${PY[@]}" src/03_eval_vlm_on_chexpercept/00_eval.py "$@" || eval_rc=$?
[ "$eval_rc" -eq 0 ] || [ "$eval_rc" -eq 3 ] || exit "$eval_rc"
for arg in "$@"; do  # no analysis of a check, a cost estimate or one part of a sharded run
  case "$arg" in
    --validate-only|--validate_only|--estimate-cost|--estimate_cost|--part|--part=*) exit "$eval_rc" ;;
  esac
done
if [ "$eval_rc" -eq 3 ]; then
  echo "eval_chexpercept.sh: Stage 03 left cases unfinished (exit 3); running Stage 04 anyway" \
    "(report.md marks the run incomplete, the unfinished cases are missing, not wrong); re-run" \
    "this command to complete them" >&2
fi
# Stage 03's own output path (a --config may set it): the analysis goes next to the results
# when it is not the release's folder (else into the release's analysis folder).
if [ -s "$out_file" ]; then
  effective="$(head -n 1 "$out_file")"
  if ! [ "$effective" -ef "$results" ]; then results="$effective"; analysis="$effective"; fi
fi
"${PY[@]}" src/04_analyze_eval_result/01_analyze_model_performance.py --results-dir "$results" \
  --oracle_setting "$setting" --benchmark-dir "$bench" --output-dir "$analysis"
exit "$eval_rc"
