from pathlib import Path

import pytest

from chexpercept.config_schema import ChexperceptConfig, load_chexpercept_config
from chexpercept.errors import ConfigError
from utils.config import expand_vars, load_config

ROOT = Path(__file__).resolve().parents[2]


def _write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "c.yaml"
    p.write_text(text)
    return p


def test_shipped_configs_validate():
    for name in ("config_example.yaml", "config_sample_test.yaml"):
        cfg = load_chexpercept_config(ROOT / "cfg" / name)
        assert cfg.path.mimic_ils_path


def test_env_expansion_nested_default_and_root(monkeypatch):
    monkeypatch.delenv("CHX_A", raising=False)
    monkeypatch.setenv("CHX_B", "bee")
    out = expand_vars({"x": "${CHX_A:-${ROOT}/d}", "y": ["${CHX_B}"]}, {"ROOT": "/r"})
    assert out == {"x": "/r/d", "y": ["bee"]}


def test_unset_variable_names_key(monkeypatch):
    monkeypatch.delenv("CHX_NOPE", raising=False)
    with pytest.raises(ConfigError, match=r"path\.mimic_ils_path.*CHX_NOPE"):
        expand_vars({"path": {"mimic_ils_path": "${CHX_NOPE}"}}, {})


def test_unknown_and_missing_keys_are_named_with_file(tmp_path):
    p = _write(tmp_path, "path:\n  mimic_cxr_path: a\nmask_deformaton: {}\n")
    with pytest.raises(ConfigError) as exc:
        load_config(p, ChexperceptConfig)
    msg = str(exc.value)
    assert str(p) in msg
    assert "unknown key 'mask_deformaton'" in msg and "did you mean mask_deformation" in msg
    assert "missing required key 'path.mimic_ils_path'" in msg


def test_bad_value_and_bad_ratio_lesion(tmp_path):
    p = _write(tmp_path, "path: {mimic_cxr_path: a, mimic_ils_path: b}\n"
                         "mask_deformation: {backend: sam9}\n"
                         "qa_generation: {no_deformation_ratio: {pneumonitis: 0.5}}\n")
    with pytest.raises(ConfigError) as exc:
        load_config(p, ChexperceptConfig)
    msg = str(exc.value)
    assert "mask_deformation.backend" in msg and "sam9" in msg
    assert "pneumonitis" in msg


def test_blank_work_dir_means_unset(tmp_path):
    p = _write(tmp_path, "path: {mimic_cxr_path: a, mimic_ils_path: b, work_dir: ''}\n")
    assert load_config(p, ChexperceptConfig).path.work_dir is None


def test_missing_file_and_bad_yaml(tmp_path):
    with pytest.raises(ConfigError, match="not found"):
        load_config(tmp_path / "nope.yaml", ChexperceptConfig)
    p = _write(tmp_path, "path: [unclosed\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(p, ChexperceptConfig)


def test_interrupt_exits_130_and_says_how_to_resume(capsys):
    from utils.cli import run_main

    def main(argv):
        raise KeyboardInterrupt

    assert run_main(main, []) == 130
    assert "re-run the same command to resume" in capsys.readouterr().err
