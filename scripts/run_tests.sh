#!/usr/bin/env bash
# The test command (what CI runs): sets itself up, then runs every check.
#
# Usage: bash scripts/run_tests.sh [--no-engine] [-h|--help]
#   --no-engine   skip the engine venv and the real-engine tests (saves ~6 GB and ~10 min)
#
# Parts, in order (each one's wall time is printed at the end):
#   1. setup       bash setup.sh --cpu-only --tests        (.venv: torch, transformers, sam2, SDKs)
#   2. structure   ruff check src utils; lint-imports      (style and the import contracts)
#   3. suite       .venv/bin/python -m pytest -q           (everything but the engine tests)
#   4. engine env  bash scripts/setup_engine_env.sh        (.venv-engine: vLLM's CPU build)
#   5. engine      .venv-engine/bin/python -m pytest -q -m engine --runengine tests/engine
#                  (the real vLLM engine and a real vLLM OpenAI-compatible server on 127.0.0.1)
# Every part runs even when an earlier check failed (not when a setup failed); the exit code is
# non-zero when any part failed.
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

usage() { sed -n '2,/^set -uo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; }
engine=1
for arg in "$@"; do
  case "$arg" in
    --no-engine) engine=0 ;;
    -h|--help) usage; exit 0 ;;
    *) echo "run_tests.sh: unknown argument '$arg' (see --help)" >&2; exit 2 ;;
  esac
done

failed=0
report=()
part() {  # part NAME COMMAND...: run, time, remember the outcome
  local name="$1"; shift
  local start=$SECONDS rc
  echo "=== run_tests.sh: $name: $*"
  "$@"; rc=$?
  report+=("$(printf '%-11s %5d s  %s' "$name" $((SECONDS - start)) "$([ $rc = 0 ] && echo ok || echo "FAILED (exit $rc)")")")
  [ $rc = 0 ] || failed=1
  return $rc
}
summary() {
  echo "=== run_tests.sh: summary"
  printf '%s\n' "${report[@]}"
}

part setup bash setup.sh --cpu-only --tests || { summary; exit 1; }
part structure bash -c '.venv/bin/ruff check src utils && .venv/bin/lint-imports'
part suite .venv/bin/python -m pytest -q
if [ "$engine" = 1 ]; then
  if part "engine env" bash scripts/setup_engine_env.sh; then
    part engine .venv-engine/bin/python -m pytest -q -m engine --runengine tests/engine
  fi
fi
summary
exit $failed
