"""Which Python `eval_chexpercept.sh` and `sample_test.sh` run the stages with.

The choice lives in scripts/lib/pyenv.sh, sourced by both drivers.

Each test copies the two drivers and scripts/lib/{pyenv,smoke}.sh (smoke.sh holds the steps
sample_test.sh shares with the public smoke) into a temporary root whose stage scripts
are stubs: a stub records its argv, the interpreter that ran it (VIA) and LD_LIBRARY_PATH, then
exits 0 (or the code STUB_EXIT, a JSON object script -> code, gives it). The interpreters are
stand-ins too: a `conda` on PATH that logs every call, emulates
`conda env list` and `conda run --no-capture-output -n NAME python ARGS` (runs this test's Python,
VIA=conda:NAME); `.venv/bin/python` (VIA=venv) and a CHEXPERCEPT_PYTHON (VIA=custom). `setup.sh`
is a stub that logs its call. The stand-ins run Python with -S so a real nvidia package in the
test's environment cannot leak in. Nothing needs a network, a GPU or conda.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DRIVERS = ("eval_chexpercept.sh", "sample_test.sh")
#: Shell libraries the drivers source.
LIBS = ("scripts/lib/pyenv.sh", "scripts/lib/smoke.sh")
KEEP_LD = "/opt/keep/lib"
EVAL = "src/03_eval_vlm_on_chexpercept/00_eval.py"
ANALYZE = "src/04_analyze_eval_result/01_analyze_model_performance.py"

STUB = """import json, os, sys
with open(os.environ["STAGE_LOG"], "a") as fh:
    fh.write(json.dumps({"script": %r, "argv": sys.argv[1:], "via": os.environ.get("VIA"),
                         "ld": os.environ.get("LD_LIBRARY_PATH")}) + "\\n")
sys.exit(json.loads(os.environ.get("STUB_EXIT", "{}")).get(%r, 0))
"""

FAKE_CONDA = """#!/usr/bin/env bash
printf '%s\\n' "$*" >> "$CONDA_LOG"
if [ "${1:-} ${2:-}" = "env list" ]; then
  printf '# conda environments:\\n#\\nbase        *  /opt/conda\\n'
  for n in ${FAKE_CONDA_ENVS:-}; do printf '%s        /opt/conda/envs/%s\\n' "$n" "$n"; done
  exit 0
fi
if [ "${1:-}" = run ]; then
  shift; name=""
  while [ $# -gt 0 ]; do
    case "$1" in --no-capture-output) shift ;; -n) name="$2"; shift 2 ;; *) break ;; esac
  done
  [ "${1:-}" = python ] || { echo "fake conda: expected python, got '${1:-}'" >&2; exit 99; }
  shift
  VIA="conda:$name" exec "@PY@" -S "$@"
fi
echo "fake conda: unsupported call: $*" >&2
exit 99
"""


def _exe(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(0o755)
    return path


def _wrapper(via: str) -> str:
    return f'#!/usr/bin/env bash\nVIA={via} exec "{sys.executable}" -S "$@"\n'


class Sandbox:
    """A copy of the drivers with stub stages, stub setup.sh and stand-in interpreters."""

    def __init__(self, tmp: Path):
        self.tmp = tmp
        self.root = tmp / "repo"
        for rel in (*DRIVERS, *LIBS):
            (self.root / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / rel, self.root / rel)
        shutil.copytree(ROOT / "envs", self.root / "envs")
        scripts = set()
        for driver in (*DRIVERS, *LIBS):
            scripts |= set(re.findall(r"(?:src|scripts)/[\w./-]+\.py", (ROOT / driver).read_text()))
        assert EVAL in scripts and ANALYZE in scripts
        for rel in scripts:
            (self.root / rel).parent.mkdir(parents=True, exist_ok=True)
            (self.root / rel).write_text(STUB % (rel, rel))
        self.setup_log = tmp / "setup.log"
        _exe(self.root / "setup.sh",
             f'#!/usr/bin/env bash\necho "setup.sh $*" >> "{self.setup_log}"\n')
        _exe(self.root / ".venv" / "bin" / "python", _wrapper("venv"))
        self.custom_py = _exe(tmp / "custom" / "python", _wrapper("custom"))
        self.bin = tmp / "bin"
        self.bin.mkdir()
        self.conda_log = tmp / "conda.log"
        self.stage_log = tmp / "stages.jsonl"

    def add_conda(self, *envs: str) -> None:
        _exe(self.bin / "conda", FAKE_CONDA.replace("@PY@", sys.executable))
        self.envs = " ".join(envs)

    def run(self, driver: str, *args: str, **extra_env: str | None) -> subprocess.CompletedProcess:
        env = {k: v for k, v in os.environ.items()
               if k not in ("ENV", "CHEXPERCEPT_PYTHON", "PYTHONPATH", "CHEXPERCEPT_WORK_DIR")
               and not k.startswith("CONDA")}
        # No real conda may answer: drop every PATH entry that holds one (bash, sed, ... stay).
        system = [d for d in env.get("PATH", os.defpath).split(os.pathsep)
                  if d and not os.access(os.path.join(d, "conda"), os.X_OK)]
        env.update(PATH=os.pathsep.join([str(self.bin), *system]), CONDA_LOG=str(self.conda_log),
                   STAGE_LOG=str(self.stage_log), FAKE_CONDA_ENVS=getattr(self, "envs", ""),
                   LD_LIBRARY_PATH=KEEP_LD)
        for key, value in extra_env.items():
            if value is None:
                env.pop(key, None)
            else:
                env[key] = value
        return subprocess.run(["bash", str(self.root / driver), *args], cwd=self.tmp, env=env,
                              capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)

    def conda_calls(self) -> list[str]:
        return self.conda_log.read_text().splitlines() if self.conda_log.exists() else []

    def stages(self) -> list[dict]:
        if not self.stage_log.exists():
            return []
        return [json.loads(line) for line in self.stage_log.read_text().splitlines()]

    def setup_calls(self) -> list[str]:
        return self.setup_log.read_text().splitlines() if self.setup_log.exists() else []


@pytest.fixture()
def box(tmp_path):
    return Sandbox(tmp_path)


def _eval_args(box: Sandbox, *extra: str) -> list[str]:
    return ["--provider", "dummy", "--benchmark-dir", str(box.tmp / "bench"),
            "--output-path", str(box.tmp / "out"), *extra]


def _ok(res: subprocess.CompletedProcess) -> None:
    assert res.returncode == 0, f"rc={res.returncode}\n{res.stdout}\n{res.stderr}"


# (a) ENV=foo with conda present: every stage runs through `conda run --no-capture-output -n foo`.
def test_env_selects_named_conda_env(box):
    box.add_conda("chexpercept", "foo")
    args = _eval_args(box)
    res = box.run("eval_chexpercept.sh", *args, ENV="foo")
    _ok(res)
    calls = box.conda_calls()
    assert "run --no-capture-output -n foo python " + " ".join([EVAL, *args]) in calls
    assert any(c.startswith(f"run --no-capture-output -n foo python {ANALYZE} --results-dir ")
               for c in calls)
    assert [(s["script"], s["via"]) for s in box.stages()] == [(EVAL, "conda:foo"),
                                                             (ANALYZE, "conda:foo")]
    assert box.stages()[0]["argv"] == args
    assert "eval_chexpercept.sh: python from conda env 'foo'" in res.stderr
    assert box.setup_calls() == []


@pytest.mark.parametrize("flags", [["--part", "1", "--total-parts", "2"],
                                   ["--part=1", "--total-parts=2"], ["--validate-only"],
                                   ["--validate_only"], ["--estimate-cost"]])
def test_no_analysis_for_one_part_a_check_or_a_cost_estimate(box, flags):
    res = box.run("eval_chexpercept.sh", *_eval_args(box, *flags),
                  CHEXPERCEPT_PYTHON=str(box.custom_py))
    _ok(res)
    assert [s["script"] for s in box.stages()] == [EVAL]


# Stage 03's exit 3 (unfinished cases): Stage 04 still runs on the same folders, then exit 3;
# any other failure of Stage 03 stops the driver with its code, before Stage 04.
@pytest.mark.parametrize("eval_rc, stages, rc", [
    (3, [EVAL, ANALYZE], 3), (1, [EVAL], 1), (2, [EVAL], 2), (0, [EVAL, ANALYZE], 0)])
def test_unfinished_cases_still_analysed_then_exit_3(box, eval_rc, stages, rc):
    res = box.run("eval_chexpercept.sh", *_eval_args(box, "--oracle_setting", "none"),
                  CHEXPERCEPT_PYTHON=str(box.custom_py), STUB_EXIT=json.dumps({EVAL: eval_rc}))
    assert res.returncode == rc, res.stderr
    assert [s["script"] for s in box.stages()] == stages
    if eval_rc == 3:
        analyze = box.stages()[1]["argv"]
        assert analyze[analyze.index("--results-dir") + 1] == str(box.tmp / "out")
        assert analyze[analyze.index("--oracle_setting") + 1] == "none"
        assert "Stage 03 left cases unfinished (exit 3); running Stage 04 anyway" in res.stderr


def test_stage04_failure_after_unfinished_cases_is_its_own_exit_code(box):
    res = box.run("eval_chexpercept.sh", *_eval_args(box), CHEXPERCEPT_PYTHON=str(box.custom_py),
                  STUB_EXIT=json.dumps({EVAL: 3, ANALYZE: 2}))
    assert res.returncode == 2
    assert [s["script"] for s in box.stages()] == [EVAL, ANALYZE]


def test_unfinished_part_run_is_not_analysed_and_exits_3(box):
    res = box.run("eval_chexpercept.sh", *_eval_args(box, "--part", "1", "--total-parts", "2"),
                  CHEXPERCEPT_PYTHON=str(box.custom_py), STUB_EXIT=json.dumps({EVAL: 3}))
    assert res.returncode == 3
    assert [s["script"] for s in box.stages()] == [EVAL]


# (b) --model hulu-med (either spelling) without ENV runs in the hulumed env; other models in
# chexpercept; an explicit ENV still wins.
@pytest.mark.parametrize("model_args, env_var, expected", [
    (["--model", "hulu-med"], None, "hulumed"),
    (["--model=hulu-med"], None, "hulumed"),
    (["--model", "medgemma1.5"], None, "chexpercept"),
    ([], None, "chexpercept"),
    (["--model", "hulu-med"], "foo", "foo"),
])
def test_default_conda_env_and_hulu_med_switch(box, model_args, env_var, expected):
    box.add_conda("chexpercept", "hulumed", "foo")
    res = box.run("eval_chexpercept.sh", *_eval_args(box, *model_args), ENV=env_var)
    _ok(res)
    runs = [c for c in box.conda_calls() if c.startswith("run ")]
    prefix = f"run --no-capture-output -n {expected} python "
    assert runs and all(c.startswith(prefix) for c in runs)
    assert any(f" python {EVAL} " in c for c in runs)
    assert {s["via"] for s in box.stages()} == {f"conda:{expected}"}
    assert f"python from conda env '{expected}'" in res.stderr


# (c) no conda on PATH, or conda without the default env: .venv (after setup.sh --cpu-only);
# CHEXPERCEPT_PYTHON beats everything, conda included, and skips setup.sh.
@pytest.mark.parametrize("conda_envs", [None, ("base-only",)])
def test_falls_back_to_venv(box, conda_envs):
    if conda_envs is not None:
        box.add_conda(*conda_envs)
    res = box.run("eval_chexpercept.sh", *_eval_args(box))
    _ok(res)
    assert box.setup_calls() == ["setup.sh --cpu-only"]
    assert [(s["script"], s["via"]) for s in box.stages()] == [(EVAL, "venv"), (ANALYZE, "venv")]
    assert not any(c.startswith("run ") for c in box.conda_calls())
    reason = "no conda on PATH" if conda_envs is None else "no conda env 'chexpercept'"
    assert f"eval_chexpercept.sh: python from .venv ({reason}" in res.stderr


def test_chexpercept_python_wins_over_conda_and_env(box):
    box.add_conda("chexpercept", "foo")
    res = box.run("eval_chexpercept.sh", *_eval_args(box), CHEXPERCEPT_PYTHON=str(box.custom_py),
                  ENV="foo")
    _ok(res)
    assert {s["via"] for s in box.stages()} == {"custom"}
    assert box.conda_calls() == [] and box.setup_calls() == []
    assert f"eval_chexpercept.sh: python from CHEXPERCEPT_PYTHON ({box.custom_py})" in res.stderr


def test_hulu_med_without_hulumed_env_falls_back_to_venv(box):
    box.add_conda("chexpercept")
    res = box.run("eval_chexpercept.sh", *_eval_args(box, "--model", "hulu-med"))
    _ok(res)
    assert {s["via"] for s in box.stages()} == {"venv"}
    assert "no conda env 'hulumed'" in res.stderr and "envs/hulumed.yml" in res.stderr


# (d) an explicit ENV that cannot be used: exit 2, one line naming it and how to create it.
@pytest.mark.parametrize("driver", DRIVERS)
@pytest.mark.parametrize("with_conda", [True, False])
def test_missing_env_exits_2_with_one_line(box, driver, with_conda):
    if with_conda:
        box.add_conda("chexpercept", "other")
    res = box.run(driver, *(_eval_args(box) if driver == "eval_chexpercept.sh" else
                            ["--work-dir", str(box.tmp / "work")]), ENV="missing")
    assert res.returncode == 2, res.stderr
    lines = [line for line in res.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, res.stderr
    assert "'missing'" in lines[0] or "ENV=missing" in lines[0]
    assert "conda env create -f envs/missing.yml" in lines[0]
    assert box.stages() == [] and box.setup_calls() == []


# (e) the bundled nvidia/nvjitlink/lib goes first on LD_LIBRARY_PATH; absent, nothing changes.
def _nvjitlink(tmp: Path, namespace: bool) -> Path:
    pkg = tmp / "site" / "nvidia" / "nvjitlink"
    (pkg / "lib").mkdir(parents=True)
    if not namespace:  # the wheel ships nvidia/nvjitlink without __init__.py; cover both
        (pkg / "__init__.py").write_text("")
    return pkg / "lib"


@pytest.mark.parametrize("route", ["conda", "custom"])
@pytest.mark.parametrize("namespace", [True, False])
def test_nvjitlink_lib_prepended(box, route, namespace):
    lib = _nvjitlink(box.tmp, namespace)
    extra = {"PYTHONPATH": str(box.tmp / "site")}
    if route == "conda":
        box.add_conda("chexpercept")
    else:
        extra["CHEXPERCEPT_PYTHON"] = str(box.custom_py)
    res = box.run("eval_chexpercept.sh", *_eval_args(box), **extra)
    _ok(res)
    stages = box.stages()
    assert len(stages) == 2
    assert all(s["ld"] == f"{lib}:{KEEP_LD}" for s in stages), stages
    assert f"LD_LIBRARY_PATH starts with {lib}" in res.stderr


@pytest.mark.parametrize("ld", [KEEP_LD, None])
def test_nvjitlink_absent_leaves_ld_library_path_alone(box, ld):
    box.add_conda("chexpercept")
    res = box.run("eval_chexpercept.sh", *_eval_args(box), LD_LIBRARY_PATH=ld)
    _ok(res)
    assert [(s["via"], s["ld"]) for s in box.stages()] == [("conda:chexpercept", ld)] * 2
    assert "LD_LIBRARY_PATH" not in res.stderr


def test_nvjitlink_lib_folder_missing_is_ignored(box):
    lib = _nvjitlink(box.tmp, namespace=True)
    lib.rmdir()
    res = box.run("eval_chexpercept.sh", *_eval_args(box), CHEXPERCEPT_PYTHON=str(box.custom_py),
                  PYTHONPATH=str(box.tmp / "site"))
    _ok(res)
    assert [s["ld"] for s in box.stages()] == [KEEP_LD, KEEP_LD]
    assert "python from CHEXPERCEPT_PYTHON" in res.stderr and "LD_LIBRARY_PATH" not in res.stderr


# sample_test.sh: same choice (no hulu-med switch); setup.sh only on the .venv fallback.
def _sample(box: Sandbox, **env: str | None) -> subprocess.CompletedProcess:
    res = box.run("sample_test.sh", "--work-dir", str(box.tmp / "work"), **env)
    _ok(res)
    assert len(box.stages()) > 10  # every stage ran (stubs)
    return res


def test_sample_test_env_uses_conda_and_skips_setup(box):
    box.add_conda("chexpercept", "foo")
    res = _sample(box, ENV="foo")
    assert {s["via"] for s in box.stages()} == {"conda:foo"}
    assert box.setup_calls() == []
    assert "run --no-capture-output -n foo python scripts/sample_test/make_fixtures.py " \
        "--out data/sample_test/generated" in box.conda_calls()
    assert "sample_test.sh: python from conda env 'foo'" in res.stderr


def test_sample_test_default_conda_env(box):
    box.add_conda("chexpercept", "hulumed")
    _sample(box)
    assert {s["via"] for s in box.stages()} == {"conda:chexpercept"}
    assert box.setup_calls() == []


def test_sample_test_falls_back_to_venv_with_setup(box):
    res = _sample(box)
    assert {s["via"] for s in box.stages()} == {"venv"}
    assert box.setup_calls() == ["setup.sh --cpu-only"]
    assert "sample_test.sh: python from .venv (no conda on PATH)" in res.stderr


def test_sample_test_chexpercept_python_and_nvjitlink(box):
    lib = _nvjitlink(box.tmp, namespace=True)
    _sample(box, CHEXPERCEPT_PYTHON=str(box.custom_py), PYTHONPATH=str(box.tmp / "site"))
    assert {s["via"] for s in box.stages()} == {"custom"}
    assert {s["ld"] for s in box.stages()} == {f"{lib}:{KEEP_LD}"}
    assert box.setup_calls() == []


# One helper, sourced by both drivers; --help describes the choice.
@pytest.mark.parametrize("driver", DRIVERS)
def test_drivers_share_the_helper(driver):
    text = (ROOT / driver).read_text()
    assert 'source "$ROOT/scripts/lib/pyenv.sh"' in text
    assert "conda run" not in "\n".join(x for x in text.splitlines() if not x.startswith("#"))


@pytest.mark.parametrize("driver", DRIVERS)
def test_help_describes_environments(driver):
    res = subprocess.run(["bash", driver, "--help"], cwd=ROOT, capture_output=True, text=True,
                         timeout=30)
    _ok(res)
    for word in ("ENV=NAME", "CHEXPERCEPT_PYTHON", "conda env create -f envs/NAME.yml", ".venv",
                 "LD_LIBRARY_PATH", "nvidia/nvjitlink/lib", "__nvJitLinkGetErrorLogSize_12_9"):
        assert word in res.stdout, (driver, word)
    assert ("hulu-med" in res.stdout) == (driver == "eval_chexpercept.sh")
