# shellcheck shell=bash
# shellcheck disable=SC2034  # PY and CHEX_PYENV are read by the scripts that source this file
# Sourced (not run) by eval_chexpercept.sh and sample_test.sh: picks the Python they run the stages
# with, the way the original release does.
#
#   chex_pyenv_select WHO DEFAULT_ENV
#       Sets PY (an array: the command that runs python) and CHEX_PYENV (custom | conda | venv),
#       and prints one line on stderr naming the choice. In order:
#         CHEXPERCEPT_PYTHON set  -> that interpreter;
#         ENV=NAME set            -> conda run --no-capture-output -n NAME python (exit 2 with one
#                                    line when conda or the env is missing);
#         conda on PATH and the conda env DEFAULT_ENV exists -> that env;
#         otherwise               -> .venv/bin/python (the caller runs bash setup.sh --cpu-only).
#   chex_pyenv_nvjitlink WHO
#       With one call of that python, finds the bundled nvidia/nvjitlink/lib and, when it exists,
#       prepends it to LD_LIBRARY_PATH (exported). This avoids "libcusparse.so.12: undefined
#       symbol: __nvJitLinkGetErrorLogSize_12_9". When the package is absent it does nothing.

_CHEX_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"

# True when `conda env list` names the env NAME.
_chex_conda_has() {
  local first _rest
  while read -r first _rest; do
    [ "$first" = "$1" ] && return 0
  done < <(conda env list 2>/dev/null || true)
  return 1
}

chex_pyenv_select() {
  local who="$1" default="$2" name hint f shipped=""
  if [ -n "${CHEXPERCEPT_PYTHON:-}" ]; then
    PY=("$CHEXPERCEPT_PYTHON"); CHEX_PYENV=custom
    echo "$who: python from CHEXPERCEPT_PYTHON ($CHEXPERCEPT_PYTHON)" >&2
    return 0
  fi
  if [ -n "${ENV:-}" ]; then
    name="$ENV"
    hint="create it with: conda env create -f envs/$name.yml"
    if [ ! -f "$_CHEX_ROOT/envs/$name.yml" ]; then
      for f in "$_CHEX_ROOT"/envs/*.yml; do f="${f##*/}"; shipped="${shipped:+$shipped, }${f%.yml}"; done
      hint="$hint (envs/ ships: $shipped)"
    fi
    if ! command -v conda >/dev/null 2>&1; then
      echo "$who: ENV=$name asks for conda env '$name' but no conda is on PATH; install conda, then $hint" >&2
      exit 2
    fi
    if ! _chex_conda_has "$name"; then
      echo "$who: conda env '$name' (ENV=$name) does not exist; $hint" >&2
      exit 2
    fi
  elif ! command -v conda >/dev/null 2>&1; then
    PY=("$_CHEX_ROOT/.venv/bin/python"); CHEX_PYENV=venv
    echo "$who: python from .venv (no conda on PATH)" >&2
    return 0
  elif _chex_conda_has "$default"; then
    name="$default"
  else
    PY=("$_CHEX_ROOT/.venv/bin/python"); CHEX_PYENV=venv
    echo "$who: python from .venv (no conda env '$default'; conda env create -f envs/$default.yml makes it)" >&2
    return 0
  fi
  PY=(conda run --no-capture-output -n "$name" python); CHEX_PYENV=conda
  echo "$who: python from conda env '$name'" >&2
}

chex_pyenv_nvjitlink() {
  local who="$1" out lib
  out="$("${PY[@]}" -c 'import os
try:
    import nvidia.nvjitlink as m
    d = os.path.dirname(m.__file__) if getattr(m, "__file__", None) else list(m.__path__)[0]
    print(os.path.join(d, "lib"))
except Exception:
    pass' 2>/dev/null)" || out=""
  lib="${out##*$'\n'}"
  [ -n "$lib" ] && [ -d "$lib" ] || return 0
  case "${LD_LIBRARY_PATH:-}" in
    "$lib"|"$lib":*) return 0 ;;
  esac
  export LD_LIBRARY_PATH="$lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  echo "$who: LD_LIBRARY_PATH starts with $lib (the environment's nvJitLink; see README Troubleshooting)" >&2
}
