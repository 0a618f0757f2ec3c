"""chexpercept.deformation.sam: SAM backends with a fake predictor and a random tiny SAM2."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import SimpleNamespace

import cv2
import numpy as np
import pytest

from chexpercept.anatomy.provided import load_case_anatomy
from chexpercept.deformation import DeformationParams, deform_case, optimal_components
from chexpercept.deformation import pipeline as pipeline_mod
from chexpercept.deformation import points as points_mod
from chexpercept.deformation import sam as sam_mod
from chexpercept.deformation.pipeline import DeformationSettings, DeformationTask, run_case
from chexpercept.errors import ConfigError
from chexpercept.files import read_json
from chexpercept.layouts import DeformationLayout
from chexpercept.rng import rng_for

_spec = importlib.util.spec_from_file_location(
    "stage01_inputs", Path(__file__).with_name("stage01_inputs.py"))
stage01_inputs = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(stage01_inputs)


class EchoPredictor:
    """Fake SAM: mask 1 = the mask input upsampled (best score), mask 0/2 = junk.

    Records every call, so tests can check what the backend sent.
    """

    def __init__(self, empty_on_image: int | None = None):
        self.images = 0
        self.calls: list[dict] = []
        self.empty_on_image = empty_on_image

    def set_image(self, image):
        assert image.shape == (1024, 1024, 3) and image.dtype == np.uint8
        self.images += 1
        self.current = image

    def predict(self, point_coords=None, point_labels=None, box=None, mask_input=None,
                multimask_output=True, return_logits=False):
        self.calls.append({"points": point_coords.copy(), "labels": point_labels.copy(),
                           "mask_input": None if mask_input is None else mask_input.copy()})
        if mask_input is None:  # refinement start: the image itself (a mask image)
            good = self.current[..., 0] > 0
        else:
            good = cv2.resize(mask_input[0], (1024, 1024), interpolation=cv2.INTER_NEAREST) > 0
        if self.empty_on_image is not None and self.images == self.empty_on_image:
            good = np.zeros_like(good)
        junk = np.zeros((1024, 1024), bool)
        junk[:10, :10] = True
        masks = np.stack([junk, good, ~good]).astype(np.float32)
        logits = np.stack([np.full((256, 256), v, np.float32) for v in (-1.0, 0.0, 1.0)])
        logits[1] = np.where(cv2.resize(good.astype(np.uint8), (256, 256),
                                        interpolation=cv2.INTER_AREA) > 0, 5.0, -5.0)
        return masks, np.array([0.1, 0.9, 0.5]), logits


def test_best_prediction_keeps_the_best_masks_logits():
    pred = EchoPredictor()
    pred.set_image(np.zeros((1024, 1024, 3), np.uint8))
    target = stage01_inputs.ellipse(500, 500, 100, 100)
    mask, logits = sam_mod.best_prediction(pred, [[500, 500]], [1], sam_mod.mask_logits(target))
    assert (mask ^ target).sum() < 0.05 * target.sum()  # mask 1 (score 0.9), not mask 0
    # ITS logits (docs/differences.md D17)
    assert logits.shape == (1, 256, 256) and logits.max() == 5.0


def test_grid_points_and_mask_logits():
    m = np.zeros((1024, 1024), bool)
    m[60:200, 100:140] = True
    assert sam_mod.grid_points(m) == [[128, 64], [128, 128], [128, 192]]
    lg = sam_mod.mask_logits(m)
    assert lg.shape == (1, 256, 256) and lg.max() == pytest.approx(18.42)


def test_refinement_drops_empty_components_without_id_gaps():
    comps = [stage01_inputs.ellipse(300, 650, 90, 110), stage01_inputs.ellipse(720, 350, 60, 70)]
    out = sam_mod.refine_components(EchoPredictor(empty_on_image=1), comps, 1000)
    assert len(out) == 1 and (out[0] ^ comps[1]).sum() < 0.05 * comps[1].sum()
    # Refinement accumulates points and feeds the previous best logits back.
    pred = EchoPredictor()
    sam_mod.refine_component(pred, comps[0], 1000)
    assert pred.calls[0]["mask_input"] is None and len(pred.calls[0]["points"]) == 1
    assert all(c["mask_input"] is not None for c in pred.calls[1:])
    assert [len(c["points"]) for c in pred.calls] == list(range(1, len(pred.calls) + 1))


def _anatomy_case(tmp_path, lesion="effusion"):
    paths = stage01_inputs.write_inputs(tmp_path, {"s1_positive_0": lesion})
    mask = stage01_inputs.LESION_MASKS[lesion]()
    comps = optimal_components(mask, 1000)
    layout = DeformationLayout(paths["out01"])
    anatomy = load_case_anatomy("dicom0000", np.logical_or.reduce(comps), with_regions=True,
                                chexmask_dir=layout.chexmask_dir, cxas_dir=layout.cxas_dir)
    return paths, comps, anatomy


def test_sam_realised_deformation_is_stateless_and_seeded(tmp_path):
    """deform_case with the SAM edit step: same seed -> same result; every call self-contained."""
    _, comps, anatomy = _anatomy_case(tmp_path)
    cxr = np.full((1024, 1024), 90, np.uint8)
    results = []
    for _ in range(2):
        pred = EchoPredictor()
        realise = sam_mod.SamRealiser(pred, cxr, 1000)
        case = deform_case("effusion", comps, anatomy, rng_for(3, "deformation", "k"),
                           DeformationParams(), realise=realise)
        results.append((case.result, sorted(case.masks)))
        assert pred.images == 1  # the CXR is embedded once per case
        # Each prediction's prompt comes from that call's target only (no carried state):
        # every positive prompt point lies inside that call's mask input.
        for call in pred.calls:
            up = cv2.resize(call["mask_input"][0], (1024, 1024),
                            interpolation=cv2.INTER_NEAREST) > 0
            pos = call["points"][call["labels"] == 1].astype(int)
            assert len(pos) >= 1
            grid = [p for p in pos if p[0] % 64 == 0 and p[1] % 64 == 0]
            assert all(up[y, x] for x, y in grid)
    assert results[0] == results[1]
    assert results[0][0]["org_deformation_results"]["deformation_results"]


def test_check_sam_settings_lists_missing_keys(tmp_path):
    md = SimpleNamespace(sam2_checkpoint=None, sam2_config="configs/sam2.1/sam2.1_hiera_t.yaml",
                         sam3_checkpoint=None, sam3_bpe_path=None, device="cpu")
    with pytest.raises(ConfigError, match="sam2_checkpoint"):
        sam_mod.check_sam_settings("sam2", md)
    with pytest.raises(ConfigError, match="sam3_checkpoint.*sam3_bpe_path"):
        sam_mod.check_sam_settings("sam3", md)
    md.sam2_checkpoint = str(tmp_path / "none.pt")
    with pytest.raises(ConfigError, match="checkpoint not found"):
        sam_mod.check_sam_settings("sam2", md)
    assert sam_mod.worker_device("cuda", 3, 2) == "cuda:1"
    assert sam_mod.worker_device("cuda", 3, 1) == "cuda"
    assert sam_mod.worker_device("cuda:0", 3, 2) == "cuda:0"


def test_sam2_random_tiny_model_through_the_backend(tmp_path):
    """The real SAM2ImagePredictor (random Hiera-T, saved and reloaded) runs a fixture case."""
    pytest.importorskip("sam2")
    torch = pytest.importorskip("torch")
    from sam2.build_sam import build_sam2

    torch.manual_seed(0)
    torch.set_num_threads(2)
    cfg = "configs/sam2.1/sam2.1_hiera_t.yaml"
    ckpt = tmp_path / "sam2_random_tiny.pt"
    torch.save({"model": build_sam2(cfg, ckpt_path=None, device="cpu").state_dict()}, ckpt)
    paths, _, _ = _anatomy_case(tmp_path)
    settings = DeformationSettings(
        out_dir=str(paths["out01"]), seed=0, params=DeformationParams(max_deformation_retries=1),
        chexmask_dir=str(DeformationLayout(paths["out01"]).chexmask_dir),
        cxas_dir=str(DeformationLayout(paths["out01"]).cxas_dir),
        zone_source="chex_vertical_thirds",
        sam=sam_mod.SamSettings("sam2", str(ckpt), cfg, device="cpu"))
    task = DeformationTask("effusion_s1_positive_0", "dicom0000", "effusion",
                           str(paths["out00"] / "rosalia_pred" / "effusion" / "s1_positive_0"
                               / "pred_mask.png"), str(paths["cxr"] / "dicom0000.png"))
    outcome = run_case(task, settings)
    # Random weights give arbitrary masks: the case either finishes or fails with a recorded
    # reason, never with an unexpected error.
    assert outcome.status in ("done", "failed") and outcome.reason != "unexpected_error"
    if outcome.status == "done":
        item = read_json(DeformationLayout(paths["out01"]).item_json(task.key_id))
        ids = [g["mask_component_id"] for g in item["geometrical_mask_infos"]]
        assert ids == [str(i) for i in range(len(ids))]
    assert settings.sam in sam_mod._PREDICTORS  # loaded once, cached for the process


# ------------------------------------------- prompts (docs/deformation.md, "SAM prompts")
def test_an_empty_component_is_skipped_with_its_reason():
    empty = np.zeros((1024, 1024), bool)
    comp = stage01_inputs.ellipse(720, 350, 60, 70)
    pred = EchoPredictor()
    assert not sam_mod.refine_component(pred, empty, 1000).any()
    assert pred.images == 0 and pred.calls == []  # no prompt at the centroid of no pixels
    skipped = []
    out = sam_mod.refine_components(pred, [empty, comp], 1000, skipped=skipped)
    assert len(out) == 1 and (out[0] ^ comp).sum() < 0.05 * comp.sum()
    assert [(s.component, s.reason) for s in skipped] == [(0, sam_mod.SKIP_EMPTY_COMPONENT)]
    assert skipped[0].to_json()["detail"].startswith("the component has no pixel")
    assert pred.images == 1 and all(np.isfinite(c["points"]).all() for c in pred.calls)


def test_a_component_touching_the_border_prompts_inside_the_image():
    comp = np.zeros((1024, 1024), bool)
    comp[900:, :130] = True  # touches the left and bottom borders
    pred = EchoPredictor()
    sam_mod.refine_component(pred, comp, 1000)
    sent = np.concatenate([c["points"] for c in pred.calls]).astype(int)
    assert sent.min() >= 0 and sent.max() <= 1023
    assert comp[sent[:, 1], sent[:, 0]].all()  # every prompt lies in the component
    assert [0, 960] in sent.tolist()  # a grid point on the border itself is kept
    # Edit points on the last row/column are sent as they are; one pixel further is refused.
    realise = sam_mod.SamRealiser(EchoPredictor(), np.full((1024, 1024), 90, np.uint8), 1000)
    realise(comp, comp, [[129, 1023]], [[0, 899]])
    last = realise.predictor.calls[-1]
    assert last["points"][-2:].tolist() == [[129.0, 1023.0], [0.0, 899.0]]
    assert last["labels"][-2:].tolist() == [1, 0]
    with pytest.raises(points_mod.PromptPointError, match=r"\[129, 1024\]"):
        realise(comp, comp, [[129, 1024]], [])


def test_points_outside_the_image_are_rejected_naming_them():
    pred = EchoPredictor()
    pred.set_image(np.zeros((1024, 1024, 3), np.uint8))
    outside = [[-1, 5], [5, 1024], [float("nan"), 3]]
    with pytest.raises(points_mod.PromptPointError) as info:
        sam_mod.best_prediction(pred, [[500, 500], *outside], [1, 1, 0, 1], None)
    message = str(info.value)
    assert "3 prompt point(s) outside the 1024 x 1024 image" in message
    assert "[-1, 5]" in message and "[5, 1024]" in message and "[nan, 3]" in message
    assert "x must be in [0, 1023] and y in [0, 1023]" in message
    assert pred.calls == []  # nothing reached the predictor
    inside = points_mod.check_points_in_image([[0, 0], [1023, 1023]], (1024, 1024))
    assert inside.dtype == np.float32 and inside.tolist() == [[0, 0], [1023, 1023]]
    with pytest.raises(points_mod.PromptPointError, match=r"\[1023, 600\]"):
        points_mod.check_points_in_image([[1023, 600]], (600, 1024))  # (height, width)


def test_sam_skips_are_recorded_in_the_summary(tmp_path, monkeypatch):
    paths = stage01_inputs.write_inputs(tmp_path, {"s1_positive_0": "consolidation"})
    layout = DeformationLayout(paths["out01"])
    settings = DeformationSettings(
        out_dir=str(paths["out01"]), seed=0, params=DeformationParams(),
        chexmask_dir=str(layout.chexmask_dir), cxas_dir=str(layout.cxas_dir),
        zone_source="chex_vertical_thirds", sam=sam_mod.SamSettings("sam2", "unused.pt"))
    monkeypatch.setattr(pipeline_mod, "load_predictor",
                        lambda settings: EchoPredictor(empty_on_image=1))
    task = DeformationTask("consolidation_s1_positive_0", "dicom0000", "consolidation",
                           str(paths["out00"] / "rosalia_pred" / "consolidation"
                               / "s1_positive_0" / "pred_mask.png"),
                           str(paths["cxr"] / "dicom0000.png"))
    summary = pipeline_mod.run_deformation([task], settings)
    assert summary.processed == 1
    report = read_json(layout.summary_json)
    assert report["skipped_components"] == [
        {"key_id": task.key_id, "component": 0, "reason": sam_mod.SKIP_REFINED_TOO_SMALL,
         "detail": "SAM refinement left no part of >= 1000 px"}]
    item = read_json(layout.item_json(task.key_id))
    assert [g["mask_component_id"] for g in item["geometrical_mask_infos"]] == ["0"]


# -------------------------------- mask inputs (docs/deformation.md, "SAM refinement")
def _square(dtype, fg):
    mask = np.zeros((1024, 1024), dtype)
    mask[300:600, 320:640] = fg
    return mask


ACCEPTED_MASKS = {"bool": (bool, True), "uint8-0/1": (np.uint8, 1),
                  "int64-0/1": (np.int64, 1), "uint8-0/255": (np.uint8, 255)}


@pytest.mark.parametrize("kind", list(ACCEPTED_MASKS))
def test_mask_input_accepts_bool_01_and_0255_masks_of_the_image_size(kind):
    """Before: 0/255 raised IndexError (grid points) or reached SAM raw; 0/1 gave a black image."""
    mask = _square(*ACCEPTED_MASKS[kind])
    want = sam_mod.mask_logits(_square(bool, True))
    pred = EchoPredictor()
    pred.set_image(np.zeros((1024, 1024, 3), np.uint8))
    sam_mod.best_prediction(pred, [[400, 400]], [1], mask)
    assert pred.calls[-1]["mask_input"].dtype == np.float32
    assert np.array_equal(pred.calls[-1]["mask_input"], want)
    assert np.array_equal(sam_mod.mask_logits(mask), want)
    # The edit step (target = the mask input) and refinement take it the same way.
    cxr = np.full((1024, 1024), 90, np.uint8)
    as_bool = sam_mod.SamRealiser(EchoPredictor(), cxr, 1000)(None, _square(bool, True), [], [])
    assert np.array_equal(sam_mod.SamRealiser(EchoPredictor(), cxr, 1000)(None, mask, [], []),
                          as_bool)
    refine = EchoPredictor()
    refined = sam_mod.refine_component(refine, mask, 1000)
    assert refine.current.max() == 255  # the component image is 0/255, not 0/1
    assert np.array_equal(refined, sam_mod.refine_component(EchoPredictor(),
                                                            _square(bool, True), 1000))


@pytest.mark.parametrize(("mask_input", "found"), [
    (_square(np.float32, 0.5), "dtype float32, shape (1024, 1024), values [0.0, 0.5]"),
    (_square(np.uint8, 2), "dtype uint8, shape (1024, 1024), values [0, 2]"),
    (_square(np.uint8, 255) | _square(np.uint8, 1)[::-1], "values [0, 1, 255]"),
    (np.zeros((512, 512), bool), "dtype bool, shape (512, 512), values [False]"),
    (_square(bool, True)[None], "dtype bool, shape (1, 1024, 1024)"),
    (np.full((1, 256, 256), np.nan, np.float32), "dtype float32, shape (1, 256, 256)"),
    (np.zeros((1024,), bool), "shape (1024,)"),
], ids=["float", "0/2", "0/1/255", "512px", "3-D-bool", "nan-logits", "1-D"])
def test_mask_input_refuses_anything_else_by_name(mask_input, found):
    pred = EchoPredictor()
    pred.set_image(np.zeros((1024, 1024, 3), np.uint8))
    with pytest.raises(ValueError, match=r"^mask_input: expected ") as info:
        sam_mod.best_prediction(pred, [[400, 400]], [1], mask_input)
    assert found in str(info.value)
    assert "(1024, 1024)" in str(info.value)
    assert pred.calls == []  # nothing reached SAM
    cxr = np.full((1024, 1024), 90, np.uint8)
    if np.asarray(mask_input).ndim == 2:
        with pytest.raises(ValueError, match=r"^target \(the mask input\): expected"):
            sam_mod.SamRealiser(EchoPredictor(), cxr, 1000)(None, mask_input, [], [])


def test_sam2_random_tiny_model_takes_a_0_255_mask_input():
    """Before: a (1024, 1024) uint8 mask reached SAM2 as it was (torch RuntimeError in conv2d)."""
    pytest.importorskip("sam2")
    torch = pytest.importorskip("torch")
    from sam2.build_sam import build_sam2
    from sam2.sam2_image_predictor import SAM2ImagePredictor

    torch.manual_seed(0)
    torch.set_num_threads(2)
    pred = SAM2ImagePredictor(build_sam2("configs/sam2.1/sam2.1_hiera_t.yaml", ckpt_path=None,
                                         device="cpu"))
    pred.set_image(np.repeat(_square(np.uint8, 255)[..., None], 3, axis=2))
    outs = [sam_mod.best_prediction(pred, [[400, 400]], [1], _square(dtype, fg))
            for dtype, fg in ACCEPTED_MASKS.values()]
    for mask, logits in outs:
        assert mask.shape == (1024, 1024) and mask.dtype == bool
        assert logits.shape == (1, 256, 256) and logits.dtype == np.float32
        assert np.array_equal(logits, outs[0][1])  # same mask input, same answer
    # Its own low-res logits go back in as they came (the refinement loop).
    sam_mod.best_prediction(pred, [[400, 400], [500, 500]], [1, 1], outs[0][1])
    with pytest.raises(ValueError, match="mask_input"):
        sam_mod.best_prediction(pred, [[400, 400]], [1], _square(np.uint8, 7))


@pytest.mark.parametrize("side", [64, 200, 256, 512])
def test_sams_own_low_res_logits_go_back_in_for_an_image_of_any_side(side):
    # issue 29: SAM2 returns (1, 256, 256) logits whatever the image, and an image of side
    # <= 256 px had its own logits refused on the next refinement step
    logits = np.linspace(-3, 3, 256 * 256, dtype=np.float32).reshape(1, 256, 256)
    assert sam_mod.mask_input_logits(logits, (side, side)) is logits
    with pytest.raises(ValueError, match=r"^mask_input: expected .*s = 256"):
        bad = side if side != 256 else 300  # neither SAM's 256 nor below the image's side
        sam_mod.mask_input_logits(np.zeros((1, bad, bad), np.float32), (side, side))


def test_sam2_random_tiny_model_refines_a_component_of_a_small_image():
    pytest.importorskip("sam2")
    torch = pytest.importorskip("torch")
    from sam2.build_sam import build_sam2
    from sam2.sam2_image_predictor import SAM2ImagePredictor

    torch.manual_seed(0)
    torch.set_num_threads(2)
    pred = SAM2ImagePredictor(build_sam2("configs/sam2.1/sam2.1_hiera_t.yaml", ckpt_path=None,
                                         device="cpu"))
    for side in (128, 256):
        component = np.zeros((side, side), bool)
        component[side // 8:side - side // 8, side // 8:side - side // 8] = True  # 2+ grid points
        refined = sam_mod.refine_component(pred, component, 1)
        assert refined.shape == (side, side) and refined.dtype == bool
