"""Synthetic fixtures: build the small MIMIC-shaped source dataset (``data/sample_test/generated``).

Writes (under ``out``): a MIMIC-CXR-JPG tree with metadata and split CSVs, MIMIC-CXR report
files, a MIMIC-ILS ``mimic_ils_instruction_answer.json`` with 512 x 512 lesion masks,
CheXmask-U and CXAS-layout anatomy masks, and ``answer_key.json`` (what was placed where).
The recipe is in ``data/sample_test/README.md``. Same seed => byte-identical files.
"""

from __future__ import annotations

import io
import logging
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import cv2
import numpy as np
from PIL import Image

from chexpercept.errors import ChexperceptError
from chexpercept.files import read_json, write_bytes_atomic, write_csv_atomic, write_json_atomic
from chexpercept.images import WORK_SIZE
from chexpercept.lesions import LESIONS
from chexpercept.rng import rng_for
from chexpercept.synth._anatomy import anatomy_masks, location_names, location_text
from chexpercept.synth._phantom import Grid, jitter_spec, lesion_mask, random_phantom, render
from chexpercept.synth._real import load_real_radiograph, real_anatomy, real_opacity_mask
from chexpercept.synth._recipe import (
    IMAGE_SIZES,
    NEGATIVE_SENTENCES,
    NEGATIVE_STUDIES,
    POSITIVE_SENTENCES,
    POSITIVE_STUDIES,
    REAL_DICOM_ID,
    REAL_NEGATIVES,
    REAL_STUDY_ID,
    REAL_SUBJECT_ID,
    RECIPE_VERSION,
    StudySpec,
)

logger = logging.getLogger(__name__)

#: Side of the MIMIC-ILS lesion masks (the real data's masks are 512 x 512 gray 0/255).
ILS_MASK_SIZE = 512
#: Fixture sanity rules: each lesion component >= 1000 px at 1024 (the Stage 01
#: minimum component size, docs/deformation.md, "Grid points") and, except cardiomegaly,
#: >= 3000 px inside the lungs.
MIN_COMPONENT_PX = 1000
MIN_LUNG_OVERLAP_PX = 3000

METADATA_COLUMNS = ("dicom_id", "subject_id", "study_id", "PerformedProcedureStepDescription",
                    "ViewPosition", "Rows", "Columns", "StudyDate", "StudyTime",
                    "ProcedureCodeSequence_CodeMeaning", "ViewCodeSequence_CodeMeaning",
                    "PatientOrientationCodeSequence_CodeMeaning")
SPLIT_COLUMNS = ("dicom_id", "study_id", "subject_id", "split")

_VIEW_MEANING = {"PA": ("CHEST (PA AND LAT)", "postero-anterior", "Erect"),
                 "AP": ("CHEST (PORTABLE AP)", "antero-posterior", "Recumbent")}


@dataclass(frozen=True)
class FixturePaths:
    """Paths inside a generated fixture folder (what configs point at).

    Attributes:
        root: The fixture folder.
    """

    root: Path

    @property
    def jpg_root(self) -> Path:
        """``mimic-cxr-jpg/`` (config ``path.mimic_cxr_jpg_path``; image paths start ``files/``)."""
        return self.root / "mimic-cxr-jpg"

    @property
    def metadata_csv(self) -> Path:
        """``mimic-cxr-jpg/mimic-cxr-2.0.0-metadata.csv`` (``path.mimic_meta_path``)."""
        return self.jpg_root / "mimic-cxr-2.0.0-metadata.csv"

    @property
    def split_csv(self) -> Path:
        """``mimic-cxr-jpg/mimic-cxr-2.0.0-split.csv`` (``path.mimic_split_meta_path``)."""
        return self.jpg_root / "mimic-cxr-2.0.0-split.csv"

    @property
    def report_root(self) -> Path:
        """``mimic-cxr-reports/files`` (``path.mimic_report_path``)."""
        return self.root / "mimic-cxr-reports" / "files"

    @property
    def mimic_ils_json(self) -> Path:
        """``mimic_ils/mimic_ils_instruction_answer.json`` (``path.mimic_ils_path``)."""
        return self.root / "mimic_ils" / "mimic_ils_instruction_answer.json"

    @property
    def lesion_mask_root(self) -> Path:
        """``mimic_ils/lesion_mask`` (``path.mimic_ils_seg_mask_path``)."""
        return self.root / "mimic_ils" / "lesion_mask"

    @property
    def chexmask_dir(self) -> Path:
        """``anatomy/chexmasku_pred`` (``path.chexmask_path``)."""
        return self.root / "anatomy" / "chexmasku_pred"

    @property
    def cxas_dir(self) -> Path:
        """``anatomy/cxas_pred`` (``path.cxas_mask_path``)."""
        return self.root / "anatomy" / "cxas_pred"

    @property
    def answer_key(self) -> Path:
        """``answer_key.json``."""
        return self.root / "answer_key.json"


@dataclass(frozen=True)
class FixtureBuild:
    """Outcome of :func:`make_fixtures`.

    Attributes:
        paths: Where the fixture is.
        built: False when an up-to-date fixture was found and left untouched.
    """

    paths: FixturePaths
    built: bool


def default_fixture_dir() -> Path:
    """``<repo>/data/sample_test/generated`` (git-ignored)."""
    from chexpercept.layouts import repo_root

    return repo_root() / "data" / "sample_test" / "generated"


def fixture_is_current(out: str | Path, seed: int) -> bool:
    """Whether ``out`` holds a complete fixture of this recipe version and ``seed``."""
    key = FixturePaths(Path(out)).answer_key
    if not key.is_file():
        return False
    try:
        data = read_json(key)
    except ChexperceptError:  # unreadable key: rebuild
        return False
    return (isinstance(data, dict) and data.get("recipe_version") == RECIPE_VERSION
            and data.get("seed") == seed)


def make_fixtures(out: str | Path | None = None, seed: int = 0, *,
                  force: bool = False) -> FixtureBuild:
    """Generate the synthetic source dataset (idempotent, atomic).

    If ``out`` already holds a fixture with the same recipe version and seed, nothing is done.
    Otherwise the fixture is built in a temporary sibling folder and renamed onto ``out``, so a
    crash never leaves a half-built fixture.

    Args:
        out: Output folder (default :func:`default_fixture_dir`).
        seed: Seed of every random choice (``rng_for(seed, "synth", study_id)``).
        force: Rebuild even if an up-to-date fixture exists.

    Returns:
        Where the fixture is and whether it was (re)built.

    Raises:
        MissingDependencyError: If pydicom / pydicom-data are missing (the real case needs them).
    """
    out = Path(out) if out is not None else default_fixture_dir()
    paths = FixturePaths(out)
    if not force and fixture_is_current(out, seed):
        logger.info("fixture at %s is up to date (recipe %s, seed %d)", out, RECIPE_VERSION, seed)
        return FixtureBuild(paths, built=False)
    real_image, real_info = load_real_radiograph()  # fail early if pydicom-data is missing
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp-", dir=out.parent))
    try:
        tmp.chmod(0o755)  # mkdtemp makes it private; the fixture is meant to be shared
        _build(FixturePaths(tmp), seed, real_image, real_info)
        if out.exists():
            trash = Path(tempfile.mkdtemp(prefix=f".{out.name}.old-", dir=out.parent))
            out.rename(trash / out.name)
            tmp.rename(out)
            shutil.rmtree(trash)
        else:
            tmp.rename(out)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp)
    logger.info("wrote fixture to %s (recipe %s, seed %d)", out, RECIPE_VERSION, seed)
    return FixtureBuild(paths, built=True)


# --------------------------------------------------------------------------------------
# Building
# --------------------------------------------------------------------------------------


def _write_jpg(path: Path, img: np.ndarray) -> None:
    buf = io.BytesIO()
    Image.fromarray(img, mode="L").save(buf, format="JPEG", quality=92)
    write_bytes_atomic(path, buf.getvalue())


def _write_bitmask(path: Path, mask: np.ndarray) -> None:
    """1-bit PNG, as CheXmask-U / CXAS outputs (docs/deformation.md, "Anatomy masks")."""
    buf = io.BytesIO()
    Image.fromarray(np.ascontiguousarray(mask, dtype=bool)).save(buf, format="PNG")
    write_bytes_atomic(path, buf.getvalue())


def _write_gray_mask(path: Path, mask: np.ndarray) -> None:
    """8-bit gray 0/255 PNG, as MIMIC-ILS lesion masks."""
    buf = io.BytesIO()
    Image.fromarray(np.where(mask, 255, 0).astype(np.uint8), mode="L").save(buf, format="PNG")
    write_bytes_atomic(path, buf.getvalue())


def _components(mask: np.ndarray) -> list[dict[str, Any]]:
    n, _, stats, _ = cv2.connectedComponentsWithStats(mask.astype(np.uint8), connectivity=8)
    out = []
    for i in range(1, n):
        x, y, w, h, area = (int(s) for s in stats[i])
        out.append({"area_px": area, "bbox_xyxy": [x, y, x + w - 1, y + h - 1]})
    return sorted(out, key=lambda c: (c["bbox_xyxy"][1], c["bbox_xyxy"][0]))


def _drop_small(mask: np.ndarray) -> np.ndarray:
    """Remove slivers (< MIN_COMPONENT_PX) left where a shape is clipped by the heart."""
    n, labels, stats, _ = cv2.connectedComponentsWithStats(mask.astype(np.uint8), connectivity=8)
    keep = np.zeros(n, dtype=bool)
    keep[1:] = stats[1:, cv2.CC_STAT_AREA] >= MIN_COMPONENT_PX
    return keep[labels]


def _downsample(mask: np.ndarray, size: int) -> np.ndarray:
    """Area-average a working-frame mask to ``size`` and threshold at 0.5."""
    small = cv2.resize(mask.astype(np.float32), (size, size), interpolation=cv2.INTER_AREA)
    return small >= 0.5


def _bbox(mask: np.ndarray) -> list[int]:
    ys, xs = np.nonzero(mask)
    return [int(xs.min()), int(ys.min()), int(xs.max()), int(ys.max())]


def _check_lesion(where: str, lesion: str, mask: np.ndarray, lungs: np.ndarray) -> dict[str, Any]:
    comps = _components(mask)
    overlap = int((mask & lungs).sum())
    small = [c["area_px"] for c in comps if c["area_px"] < MIN_COMPONENT_PX]
    if not comps or small or (lesion != "cardiomegaly" and overlap < MIN_LUNG_OVERLAP_PX):
        raise RuntimeError(f"fixture recipe broken at {where} {lesion}: components "
                           f"{[c['area_px'] for c in comps]}, lung overlap {overlap} px")
    return {"area_px": int(mask.sum()), "lung_overlap_px": overlap, "bbox_xyxy": _bbox(mask),
            "components": comps}


class _Writer:
    """Accumulates rows/entries while studies are written into one fixture folder."""

    def __init__(self, paths: FixturePaths) -> None:
        self.paths = paths
        self.meta_rows: list[dict[str, Any]] = []
        self.split_rows: list[dict[str, Any]] = []
        self.train: dict[str, Any] = {}
        self.answer: dict[str, Any] = {}

    def image_relpath(self, subject: str, study: str, dicom: str) -> str:
        return f"files/{subject[:3]}/{subject}/{study}/{dicom}.jpg"

    def add_study(self, *, subject: str, study: str, dicom: str, view: str, image: np.ndarray,
                  number: int, right: np.ndarray, left: np.ndarray, heart: np.ndarray,
                  findings: list[tuple[str, tuple[str, ...], np.ndarray, np.ndarray]],
                  negatives: tuple[str, ...],
                  other_negatives: tuple[tuple[str, tuple[str, ...]], ...],
                  source: str, extra: dict[str, Any] | None = None) -> None:
        """Write one study.

        ``findings`` holds ``(lesion, pair types, mask at 1024, mask at 512)``.
        """
        rel = self.image_relpath(subject, study, dicom)
        _write_jpg(self.paths.jpg_root / rel, image)
        height, width = image.shape
        performed, view_meaning, orientation = _VIEW_MEANING[view]
        self.meta_rows.append({
            "dicom_id": dicom, "subject_id": subject[1:], "study_id": study[1:],
            "PerformedProcedureStepDescription": performed, "ViewPosition": view,
            "Rows": height, "Columns": width, "StudyDate": 21800101 + number,
            "StudyTime": f"{100000 + 731 * number}.000", "ProcedureCodeSequence_CodeMeaning":
            performed, "ViewCodeSequence_CodeMeaning": view_meaning,
            "PatientOrientationCodeSequence_CodeMeaning": orientation})
        self.split_rows.append({"dicom_id": dicom, "study_id": study[1:],
                                "subject_id": subject[1:], "split": "train"})
        chexmask, cxas = anatomy_masks(right, left, heart)
        for name, m in chexmask.items():
            _write_bitmask(self.paths.chexmask_dir / dicom / f"{name}.png", m)
        for name, m in cxas.items():
            _write_bitmask(self.paths.cxas_dir / dicom / f"{name}.png", m)
        lungs = chexmask["right_lung"] | chexmask["left_lung"]

        positives, negatives_json, sentences, lesions_key = [], [], [], {}
        for lesion, types, m1024, m512 in findings:
            where = f"{study}"
            facts = _check_lesion(where, lesion, m1024, lungs)
            locs = location_names(lesion, m1024, cxas)
            mask_rel = f"{study}/{study}_{lesion}_0.png"
            _write_gray_mask(self.paths.lesion_mask_root / mask_rel, m512)
            sentences.append(POSITIVE_SENTENCES[lesion].format(loc=location_text(locs)))
            sent_idx = len(sentences)
            pair_ids = []
            for kind in types:
                pair_id = f"{study}_positive_{len(positives)}"
                instruction = (f"Segment the {lesion}." if kind == "global"
                               else f"Segment the {lesion} in the {location_text(locs)}.")
                positives.append({"pair_id": pair_id, "instruction": instruction,
                                  "answer": "[SEG]", "type": kind, "target": lesion,
                                  "location": locs, "sent_idx": sent_idx, "seg": True,
                                  "seg_mask_path": mask_rel})
                pair_ids.append(pair_id)
            lesions_key[lesion] = {"pair_ids": pair_ids, "types": list(types), "location": locs,
                                   "seg_mask_path": mask_rel, **facts}
        for lesion in negatives:
            sentences.append(NEGATIVE_SENTENCES[lesion])
            locs = ["heart"] if lesion == "cardiomegaly" else ["right lung", "left lung"]
            negatives_json.append({
                "pair_id": f"{study}_negative_{len(negatives_json)}",
                "instruction": f"Segment the {lesion}.",
                "answer": f"[SEG] There is no {lesion}.", "type": "global", "target": lesion,
                "location": locs, "seg": False, "seg_mask_path": None})
        for lesion, locs in other_negatives:
            text = location_text(list(locs))
            negatives_json.append({
                "pair_id": f"{study}_negative_{len(negatives_json)}",
                "instruction": f"Segment the {lesion} in the {text}.",
                "answer": f"[SEG] There is no {lesion} in the {text}.", "type": "basic",
                "target": lesion, "location": list(locs), "seg": False, "seg_mask_path": None})
        sentences.append("There is no pneumothorax.")
        content = " ".join(f"{i}. {s}" for i, s in enumerate(sentences, start=1))
        report = (f"SYNTHETIC REPORT (CheXpercept fixture, not a patient record)\n\n"
                  f"FINDINGS: {content}\n")
        write_bytes_atomic(self.paths.report_root / subject[:3] / subject / f"{study}.txt",
                           report.encode("utf-8"))
        self.train[study] = {
            "subject_id": subject, "dicom_id": dicom, "image_path": rel,
            "section_name": "findings", "section_content": content,
            "instruction_answer_pairs": {"positive_pairs": positives,
                                         "negative_pairs": negatives_json}}
        self.answer[dicom] = {
            "subject_id": subject, "study_id": study, "source": source, "view_position": view,
            "image_path": rel, "image_size": [width, height], "lesions": lesions_key,
            "negatives": {"global": list(negatives),
                          "non_global": [lesion for lesion, _ in other_negatives]},
            **(extra or {})}

    def finish(self, seed: int) -> None:
        write_csv_atomic(self.paths.metadata_csv, self.meta_rows, METADATA_COLUMNS)
        write_csv_atomic(self.paths.split_csv, self.split_rows, SPLIT_COLUMNS)
        write_json_atomic(self.paths.mimic_ils_json, {"train": self.train, "val": {}, "test": {}})
        write_json_atomic(self.paths.answer_key, {
            "recipe_version": RECIPE_VERSION, "seed": seed, "generator": "chexpercept.synth",
            "frame": f"masks, bounding boxes (x0, y0, x1, y1 inclusive) and areas in the "
                     f"{WORK_SIZE}x{WORK_SIZE} working frame",
            "lesions": list(LESIONS), "dicoms": self.answer})


def _synthetic_study(w: _Writer, spec: StudySpec, seed: int) -> None:
    rng = rng_for(seed, "synth", spec.study_id)
    lesions = [p.spec.lesion for p in spec.positives]
    ph = random_phantom(rng, cardiomegaly="cardiomegaly" in lesions)
    drawn = [(jitter_spec(p.spec, rng), p.types) for p in spec.positives]
    width, height = IMAGE_SIZES[int(rng.integers(len(IMAGE_SIZES)))]
    image = render(ph, [(s, 1.0) for s, _ in drawn], width, height, rng)
    g_work = Grid.of(WORK_SIZE, WORK_SIZE)
    findings = []
    for s, types in drawn:
        m_work = _drop_small(lesion_mask(g_work, ph, s))
        findings.append((s.lesion, types, m_work, _downsample(m_work, ILS_MASK_SIZE)))
    w.add_study(subject=spec.subject_id, study=spec.study_id, dicom=spec.dicom_id,
                view=spec.view, image=image, number=spec.number,
                right=ph.lung("right").mask(g_work), left=ph.lung("left").mask(g_work),
                heart=ph.heart_mask(g_work), findings=findings, negatives=spec.negatives,
                other_negatives=spec.other_negatives, source="synthetic phantom")


def _real_study(w: _Writer, image: np.ndarray, info: dict[str, Any]) -> None:
    right, left, heart = real_anatomy(WORK_SIZE)
    findings = [("opacity", ("global",), real_opacity_mask(WORK_SIZE),
                 real_opacity_mask(ILS_MASK_SIZE))]
    w.add_study(subject=REAL_SUBJECT_ID, study=REAL_STUDY_ID, dicom=REAL_DICOM_ID,
                view=str(info.get("view_position") or "PA"), image=image, number=999,
                right=right, left=left, heart=heart, findings=findings,
                negatives=REAL_NEGATIVES, other_negatives=(),
                source="pydicom-data RG1_UNCR.dcm (real radiograph, our annotation)",
                extra={"real": info})


def _build(paths: FixturePaths, seed: int, real_image: np.ndarray,
           real_info: dict[str, Any]) -> None:
    w = _Writer(paths)
    for spec in POSITIVE_STUDIES + NEGATIVE_STUDIES:
        _synthetic_study(w, spec, seed)
    _real_study(w, real_image, real_info)
    w.finish(seed)
