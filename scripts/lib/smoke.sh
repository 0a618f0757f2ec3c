# Shared steps of the two smoke runs (sample_test.sh, scripts/public_sample_test.sh).
# Source it, then call smoke_args; the steps use PY (the python command array, set by
# chex_pyenv_select), run from the repository root and stop the caller on the first failure
# (set -e).

# smoke_args NAME DEFAULT_WORK "$@": the smoke runs' flags (--keep, --work-dir DIR, -h/--help,
# which prints the caller's header through its usage function). Sets keep (0/1) and WORK;
# exits 2 naming NAME on an unknown argument or a missing value.
smoke_args() {
  local name="$1"
  WORK="$2"
  keep=0
  shift 2
  while [ $# -gt 0 ]; do
    case "$1" in
      --keep) keep=1 ;;
      --work-dir) [ $# -ge 2 ] || { echo "$name: --work-dir needs a value" >&2; exit 2; }
                  WORK="$(mkdir -p "$2" && cd "$2" && pwd)"; shift ;;
      -h|--help) usage; exit 0 ;;
      *) echo "$name: unknown argument '$1' (see $name --help)" >&2; exit 2 ;;
    esac
    shift
  done
  smoke_start=$(date +%s)
}

# step TEXT: a timed heading (seconds since smoke_args).
step() { echo; echo "=== [$(( $(date +%s) - smoke_start ))s] $*"; }

# smoke_review CFG S00: AUTO-APPROVE the candidate and negative sheets (smoke runs only: a real
# benchmark needs the experts' optimal? review), then distribute them to 2 annotators.
smoke_review() {
  local cfg="$1" s00="$2"
  echo "AUTO-APPROVING every candidate and negative (smoke test only; a real benchmark needs the experts' optimal? review)"
  "${PY[@]}" scripts/sample_test/autofill_optimal.py "$s00/rosalia_pred/labeling_sheet.csv"
  "${PY[@]}" src/00_source_data_curation/03_prepare_negative_annotation.py --config "$cfg" \
    --positive-csv "$s00/rosalia_pred/labeling_sheet.csv"
  "${PY[@]}" scripts/sample_test/autofill_optimal.py "$s00/negative/labeling_sheet.csv"
  "${PY[@]}" src/00_source_data_curation/04_distribute_labeling.py --config "$cfg" \
    --positive-csv "$s00/rosalia_pred/labeling_sheet.csv" \
    --negative-csv "$s00/negative/labeling_sheet.csv" --num-annotators 2
}

# smoke_stages_01_to_04 CFG WORK [00_generate_qa.py flags...]: Stages 01 to 04 on the reviewed
# sheets in WORK (the oracle, random and dummy baselines under implicit and none), then the
# self-check: oracle rows 100 %, dummy rows what the answer keys give.
smoke_stages_01_to_04() {
  local cfg="$1" work="$2"; shift 2
  local s00="$work/00_source_data_curation" s03="$work/03_eval_vlm_on_chexpercept"
  local s04="$work/04_analyze_eval_result" bench="$work/chexpercept" provider setting
  step "01 anatomy masks + mask deformation"
  "${PY[@]}" src/01_mask_deformation/00_generate_anatomy_mask.py --config "$cfg" \
    --meta-csv "$s00/rosalia_pred/labeling_sheet.csv" --no-progress
  "${PY[@]}" src/01_mask_deformation/01_deform_mask.py --config "$cfg" --num-workers 2 --no-progress

  step "02 QA generation + benchmark export"
  "${PY[@]}" src/02_qa_generation/00_generate_qa.py --config "$cfg" --num-workers 2 --no-progress "$@"
  "${PY[@]}" src/02_qa_generation/01_export_benchmark.py --config "$cfg" --benchmark-dir "$bench"
  "${PY[@]}" src/02_qa_generation/02_validate_bundle.py --benchmark-dir "$bench" --no-progress

  step "03 evaluation"
  "${PY[@]}" src/03_eval_vlm_on_chexpercept/00_eval.py --benchmark-dir "$bench" --validate-only
  for provider in oracle random dummy; do
    for setting in implicit none; do
      "${PY[@]}" src/03_eval_vlm_on_chexpercept/00_eval.py --benchmark-dir "$bench" \
        --output-path "$s03" --provider "$provider" --oracle_setting "$setting" --no-progress
    done
  done

  step "04 analysis"
  for setting in implicit none; do
    "${PY[@]}" src/04_analyze_eval_result/01_analyze_model_performance.py --results-dir "$s03" \
      --oracle_setting "$setting" --output-dir "$s04" --benchmark-dir "$bench"
  done

  step "self-check"
  # exits 1 with one line when an oracle row is below 100 % or a dummy row differs from the
  # value worked out from the answer keys
  "${PY[@]}" scripts/sample_test/check_summary.py --work-dir "$work"
}
