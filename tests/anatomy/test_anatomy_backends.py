"""Stage 01.00 anatomy model backends: registry, runner, CXAS (real architecture), CheXmask-U."""

from __future__ import annotations

import sys
import textwrap

import numpy as np
import pytest
from PIL import Image

from chexpercept.anatomy import backends
from chexpercept.anatomy._chexmasku import (
    ChexmaskUSegmenter,
    create_chexmasku_segmenter,
    landmarks_to_masks,
)
from chexpercept.anatomy._cxas import check_classes, cxas_state_dict
from chexpercept.anatomy.backends import (
    AnatomySegmenter,
    create_anatomy_segmenter,
    resolve_backends,
    run_anatomy_segmenter,
)
from chexpercept.config_schema import AnatomyConfig
from chexpercept.errors import ConfigError, MissingDependencyError
from chexpercept.images import read_mask
from chexpercept.layouts import anatomy_mask_path

N = 1024


def square_landmarks(x0, y0, x1, y1, n):
    """``n`` points along the outline of a rectangle, normalised to [0, 1]."""
    corners = np.array([[x0, y0], [x1, y0], [x1, y1], [x0, y1], [x0, y0]], float)
    t = np.linspace(0, 4, n, endpoint=False)
    i = t.astype(int)
    f = (t - i)[:, None]
    return (corners[i] * (1 - f) + corners[i + 1] * f) / N


LANDMARKS = np.concatenate([square_landmarks(100, 200, 400, 800, 44),
                            square_landmarks(600, 200, 900, 800, 50),
                            square_landmarks(420, 500, 580, 700, 26)])


# ---------------------------------------------------------------------------------- registry


def test_resolve_backends_picks_who_writes_each_layout(caplog):
    assert resolve_backends(["provided"]) == ([], ["chexmask", "cxas"])
    assert resolve_backends(["cxas"]) == (["cxas"], ["chexmask"])
    assert resolve_backends(["provided", "chexmask-u"]) == (["chexmask-u"], ["cxas"])
    assert resolve_backends(["models"]) == (["cxas", "chexmask-u"], [])
    assert backends.layout_of("cxas") == "cxas" and backends.layout_of("chexmask-u") == "chexmask"
    assert "deprecated" in caplog.text
    with pytest.raises(ConfigError, match="unknown value 'sam'"):
        resolve_backends(["sam"])
    with pytest.raises(ConfigError, match="empty"):
        resolve_backends([])


def test_config_accepts_one_name_or_a_list():
    assert AnatomyConfig(backend="cxas").backend == ["cxas"]
    assert AnatomyConfig(backend=["cxas", "chexmask-u"]).backend == ["cxas", "chexmask-u"]
    assert AnatomyConfig().backend == ["provided"]


def test_missing_weights_name_the_config_key(tmp_path):
    cfg = AnatomyConfig(device="cpu")
    with pytest.raises(ConfigError, match="anatomy.cxas_weights"):
        create_anatomy_segmenter("cxas", cfg)
    with pytest.raises(ConfigError, match="anatomy.chexmask_u_weights"):
        create_anatomy_segmenter("chexmask-u", cfg)
    weights = tmp_path / "w.bin"
    weights.write_bytes(b"x")
    cfg = AnatomyConfig(device="cpu", chexmask_u_weights=str(weights),
                        chexmask_u_path=str(tmp_path / "no-clone"))
    with pytest.raises(MissingDependencyError, match="setup.sh"):
        create_anatomy_segmenter("chexmask-u", cfg)


# ------------------------------------------------------------------------------------ runner


class RecordingSegmenter(AnatomySegmenter):
    """Fake backend: a mask per name from the image's brightness; records batch sizes."""

    name = "fake"
    layout = "cxas"
    output_names = ("right lung", "left lung")

    def __init__(self):
        self.batches = []

    def segment_batch(self, images):
        self.batches.append(len(images))
        return [{n: im > 100 for n in self.output_names} for im in images]


def test_runner_dedupes_batches_records_failures_and_resumes(tmp_path):
    cxr = tmp_path / "cxr"
    cxr.mkdir()
    for i in range(3):
        img = np.zeros((N, N), np.uint8)
        img[:, : 100 * (i + 1)] = 200
        Image.fromarray(img).save(cxr / f"d{i}.png")
    seg = RecordingSegmenter()
    out = tmp_path / "cxas_pred"
    ids = ["d0", "d1", "d0", "missing", "d2"]
    summary = run_anatomy_segmenter(seg, ids, cxr_dir=cxr, out_dir=out, batch_size=2)
    assert seg.batches == [2, 1]  # [d0, d1], [missing -> failed, d2]
    assert summary.processed == 3 and summary.files_written == 6
    assert [f["dicom_id"] for f in summary.failed] == ["missing"]
    assert "missing.png" in summary.failed[0]["reason"]
    assert read_mask(anatomy_mask_path(out, "d1", "left lung")).sum() == 200 * N
    again = run_anatomy_segmenter(seg, ids, cxr_dir=cxr, out_dir=out, batch_size=2)
    assert again.skipped_done == 3 and again.processed == 0 and seg.batches == [2, 1]
    assert [f["dicom_id"] for f in again.failed] == ["missing"]  # retried, still failing


# -------------------------------------------------------------------------------------- CXAS


def test_cxas_state_dict_unwraps_and_aligns_keys():
    sd = cxas_state_dict({"state_dict": {"module.backbone.layer0.w": 1, "head.out.b": 2}}, "f")
    assert sd == {"backbone.backbone.layer0.w": 1, "head.out.b": 2}
    with pytest.raises(ConfigError, match="anatomy.cxas_weights f"):
        cxas_state_dict([1, 2], "f")


def test_cxas_class_names_are_checked_with_suggestions():
    targets = ["right lung", "left lung", "heart"]
    assert check_classes(["heart", "right lung"], targets) == [2, 0]
    with pytest.raises(ConfigError, match="'rigth lung' \\(did you mean \\['right lung'"):
        check_classes(["rigth lung"], targets)


@pytest.fixture(scope="module")
def cxas_weights(tmp_path_factory):
    torch = pytest.importorskip("torch")
    xrv = pytest.importorskip("torchxrayvision")
    torch.manual_seed(0)
    model = xrv.baseline_models.chestx_anatomy.UNetResNet50(weights=False)
    path = tmp_path_factory.mktemp("cxas") / "cxas_random.pth"
    # CXAS-package style: nested, "model." prefix, backbone one level up (all undone on load).
    state = {k.replace("backbone.backbone.", "backbone.", 1): v
             for k, v in model.state_dict().items()}
    torch.save({"model": {f"model.{k}": v for k, v in state.items()}}, path)
    return path, model


def test_cxas_random_model_through_the_real_loading_path(cxas_weights, tmp_path):
    import torch
    import torch.nn.functional as F

    path, reference = cxas_weights
    cfg = AnatomyConfig(device="cpu", cxas_weights=str(path),
                        cxas_classes=["left lung", "heart"])
    seg = create_anatomy_segmenter("cxas", cfg)
    assert (seg.name, seg.layout, seg.output_names) == ("cxas", "cxas", ("left lung", "heart"))
    img = np.tile(np.linspace(0, 255, N, dtype=np.float32), (N, 1)).astype(np.uint8)
    masks = seg.segment(img)
    assert set(masks) == {"left lung", "heart"}
    assert masks["heart"].shape == (N, N) and masks["heart"].dtype == bool
    # Same as the reference network on the [-1024, 1024]-scaled input, upsampled, logit > 0.
    x = torch.from_numpy((2 * (img.astype(np.float32) / 255) - 1) * 1024)[None, None]
    with torch.inference_mode():
        logits = reference(x)[:, [136, 121]]
        want = (F.interpolate(logits, size=(N, N), mode="bilinear") > 0).numpy()[0]
    assert (masks["left lung"] == want[0]).mean() > 0.999
    assert (masks["heart"] == want[1]).mean() > 0.999


def test_cxas_weights_that_do_not_fit_are_rejected(tmp_path):
    torch = pytest.importorskip("torch")
    pytest.importorskip("torchxrayvision")
    path = tmp_path / "wrong.pth"
    torch.save({"conv.weight": torch.zeros(1)}, path)
    with pytest.raises(ConfigError, match="does not fit the CXAS UNet-ResNet50"):
        create_anatomy_segmenter("cxas", AnatomyConfig(device="cpu", cxas_weights=str(path)))


# -------------------------------------------------------------------------------- CheXmask-U


def test_landmarks_are_filled_into_the_three_masks():
    masks = landmarks_to_masks(LANDMARKS)
    assert list(masks) == ["right_lung", "left_lung", "heart"]
    right = masks["right_lung"]
    assert right[500, 250] and not right[500, 450] and not right[150, 250]
    assert abs(int(right.sum()) - 301 * 601) < 2000
    assert masks["heart"][600, 500] and not masks["heart"][400, 500]
    with pytest.raises(Exception, match="120, 2"):
        landmarks_to_masks(LANDMARKS[:100])


def test_chexmasku_segmenter_normalises_and_writes_its_layout(tmp_path):
    seen = []

    def predict(x):
        seen.append(x)
        return np.repeat(LANDMARKS[None], x.shape[0], axis=0)

    seg = ChexmaskUSegmenter(predict)
    img = np.full((N, N), 255, np.uint8)
    img[0, 0] = 0
    out = seg.segment_batch([img, img])
    assert seen[0].shape == (2, 1, N, N) and seen[0].dtype == np.float32
    assert seen[0].max() == 1.0 and seen[0].min() == 0.0  # image / 255
    assert set(out[1]) == {"right_lung", "left_lung", "heart"}
    assert seg.layout == "chexmask"


FAKE_MODEL = '''
import torch
from torch import nn
from models.modelUtils import SCALE
from utils.utils import genMatrixesLungsHeart


class Inner(nn.Module):
    def __init__(self, landmarks):
        super().__init__()
        self.lin = nn.Linear(1, 1)
        self.landmarks = landmarks

    def encode(self, x):
        b = x.shape[0]
        return x.mean(dim=(1, 2, 3))[:, None], None, None, None

    def decode(self, mu, conv6, conv5):
        out = self.landmarks[None].repeat(mu.shape[0], 1, 1) * SCALE
        return out + 0 * self.lin.weight.sum(), None, None


class HybridGNetHF(nn.Module):
    def __init__(self, device="cpu", **config):
        super().__init__()
        genMatrixesLungsHeart()
        self.config = config
        self.model = Inner(torch.tensor(config["landmarks"], dtype=torch.float32))
'''


def test_chexmasku_loads_from_a_checkout_without_touching_our_utils(tmp_path, monkeypatch):
    torch = pytest.importorskip("torch")
    clone = tmp_path / "CheXmask-U" / "HybridGNet"
    (clone / "models").mkdir(parents=True)
    (clone / "utils").mkdir()
    (clone / "models" / "HybridGNet2IGSC.py").write_text(textwrap.dedent(FAKE_MODEL))
    (clone / "models" / "modelUtils.py").write_text("SCALE = 1.0\n")
    (clone / "utils" / "utils.py").write_text("def genMatrixesLungsHeart():\n    return 1\n")
    weights = tmp_path / "v1_skip" / "pytorch_model.bin"
    weights.parent.mkdir()
    torch.save({"lin.weight": torch.ones(1, 1), "lin.bias": torch.zeros(1)}, weights)
    (weights.parent / "config.json").write_text(
        '{"latents": 64, "landmarks": ' + str(LANDMARKS.tolist()) + "}")
    import utils.cli  # noqa: F401  - our utils package is loaded
    ours = sys.modules["utils"]
    seg = create_chexmasku_segmenter(AnatomyConfig(
        device="cpu", chexmask_u_path=str(tmp_path / "CheXmask-U"),
        chexmask_u_weights=str(weights)))
    assert sys.modules["utils"] is ours and "utils.utils" not in sys.modules
    assert "models" not in sys.modules and str(clone) not in sys.path
    masks = seg.segment(np.zeros((N, N), np.uint8))
    assert (masks["left_lung"] == landmarks_to_masks(LANDMARKS)["left_lung"]).all()
