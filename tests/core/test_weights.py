"""Model weights are read weights-only: a checkpoint that would run code is refused (issue 29).

``utils.weights.load_weights`` is the one torch checkpoint reader; a file whose pickle names
anything but tensors and plain containers is refused with an error naming the file, and its
code never runs (docs/building.md, "Model weights").
"""

from __future__ import annotations

import pickle
import re
import subprocess
import sys
from pathlib import Path

import pytest

from utils.errors import InputError
from utils.weights import CONVERSION_DOC, load_weights

ROOT = Path(__file__).resolve().parents[2]


class WritesAFile:
    """Unpickling this object writes ``marker`` (what a hostile checkpoint would do)."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (exec, (f"import pathlib; pathlib.Path({str(self.marker)!r}).write_text('ran')",))


def hostile_checkpoint(torch, path: Path, marker: Path) -> Path:
    """A checkpoint with real tensors plus an object that writes ``marker`` when unpickled."""
    torch.save({"model": {"conv.weight": torch.zeros(2)}, "payload": WritesAFile(marker)}, path)
    return path


def test_the_payload_is_live_when_unpickled(tmp_path):
    """Control: the object used below does run its code under plain pickle."""
    marker = tmp_path / "control"
    pickle.loads(pickle.dumps(WritesAFile(marker)))
    assert marker.read_text() == "ran"


def test_a_checkpoint_that_needs_pickle_is_refused_and_runs_nothing(tmp_path):
    torch = pytest.importorskip("torch")
    marker = tmp_path / "pwned"
    path = hostile_checkpoint(torch, tmp_path / "hostile.pth", marker)
    with pytest.raises(InputError) as info:
        load_weights(path, "anatomy.cxas_weights")
    message = str(info.value)
    assert f"anatomy.cxas_weights {path}:" in message
    assert "exec" in message and CONVERSION_DOC in message
    assert not marker.exists()


@pytest.mark.parametrize("data", [b"", b"garbage", b"PK\x03\x04garbage"])
def test_a_file_that_is_no_checkpoint_is_one_error_naming_it(tmp_path, data):
    pytest.importorskip("torch")
    path = tmp_path / "w.pth"
    path.write_bytes(data)
    with pytest.raises(InputError, match=re.escape(f"anatomy.cxas_weights {path}: not a "
                                                   f"readable torch checkpoint")):
        load_weights(path, "anatomy.cxas_weights")


def test_the_documented_conversion_makes_a_weights_only_file(tmp_path):
    """The one-line command of docs/building.md, "Model weights", run on a trusted file."""
    torch = pytest.importorskip("torch")
    import argparse

    old, new = tmp_path / "old.pth", tmp_path / "new.pth"
    torch.save({"args": argparse.Namespace(lr=1.0), "epoch": 3,
                "model": {"module.w": torch.ones(2)}, "net": torch.nn.Linear(2, 1)}, old)
    with pytest.raises(InputError, match="argparse.Namespace"):
        load_weights(old, "anatomy.cxas_weights")
    doc = (ROOT / "docs" / "building.md").read_text(encoding="utf-8")
    section = doc.split("## Model weights", 1)[1]
    (command,) = re.findall(r"^python -c (\".*\") OLD\.pth NEW\.pth$", section, re.M)
    code = command[1:-1]
    subprocess.run([sys.executable, "-c", code, str(old), str(new)], check=True, timeout=120)
    state = load_weights(new, "anatomy.cxas_weights")
    assert set(state) == {"model", "net"}
    assert torch.equal(state["model"]["module.w"], torch.ones(2))
    assert set(state["net"]) == {"weight", "bias"}


#: Code that unpickles what it reads (torch, numpy, joblib, pickle itself).
_UNPICKLING = re.compile(r"weights_only\s*=\s*False|allow_pickle\s*=\s*True|\bjoblib\b"
                         r"|pickle\.loads?\(|\bUnpickler\(")


def test_nothing_in_the_code_unpickles_a_file():
    hits = [f"{path.relative_to(ROOT)}:{number}: {line.strip()}"
            for folder in ("src", "utils", "scripts")
            for path in sorted((ROOT / folder).rglob("*"))
            if path.suffix in (".py", ".sh") and path.is_file()
            for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
            if _UNPICKLING.search(line)]
    assert hits == []


def test_sam2_reads_its_checkpoint_weights_only(tmp_path):
    """SAM2's loader goes through the same reader: a hostile checkpoint never runs."""
    pytest.importorskip("sam2")
    torch = pytest.importorskip("torch")
    from utils.sam2_models import load_sam2_predictor

    marker = tmp_path / "pwned"
    path = hostile_checkpoint(torch, tmp_path / "sam2.pt", marker)
    with pytest.raises(InputError, match=re.escape(f"mask_deformation.sam2_checkpoint {path}:")):
        load_sam2_predictor(str(path), "configs/sam2.1/sam2.1_hiera_t.yaml", "cpu",
                            what="mask_deformation.backend 'sam2'")
    assert not marker.exists()
