"""Synthetic fixtures: the recipe (which studies exist and what each one shows).

Bump :data:`RECIPE_VERSION` whenever anything here or in the rendering changes the output
bytes, so an existing fixture folder is rebuilt instead of reused.
"""

from __future__ import annotations

from dataclasses import dataclass

from chexpercept.synth._phantom import LesionSpec

#: Version of the fixture recipe, recorded in ``answer_key.json``.
RECIPE_VERSION = "1"

#: JPG sizes (width, height) drawn per study: portrait and not square, like MIMIC-CXR-JPG.
IMAGE_SIZES: tuple[tuple[int, int], ...] = ((1400, 1700), (1480, 1760), (1536, 1840))


@dataclass(frozen=True)
class PositiveSpec:
    """A positive finding of a study and the MIMIC-ILS pair types that describe it.

    Attributes:
        spec: The lesion as drawn.
        types: Positive pair types, in pair order: ``("global",)``, ``("global", "basic")`` or
            ``("basic",)`` (a basic-only finding exercises the release's basic fallback).
    """

    spec: LesionSpec
    types: tuple[str, ...] = ("global",)


@dataclass(frozen=True)
class StudySpec:
    """One synthetic study (one frontal dicom).

    Attributes:
        number: Study number; ids are ``pSYN%05d`` / ``sSYN%05d`` / ``synth-dicom-%05d``.
        view: ViewPosition (``PA`` or ``AP``).
        positives: Findings, drawn into the image, each with a lesion mask.
        negatives: Lesions the report states absent (``global`` negative pairs).
        other_negatives: ``(lesion, locations)`` non-global (``basic``) negative pairs; the
            curation must ignore them (docs/curation.md, "Sampling").
    """

    number: int
    view: str
    positives: tuple[PositiveSpec, ...] = ()
    negatives: tuple[str, ...] = ()
    other_negatives: tuple[tuple[str, tuple[str, ...]], ...] = ()

    @property
    def subject_id(self) -> str:
        """``pSYN<number>``."""
        return f"pSYN{self.number:05d}"

    @property
    def study_id(self) -> str:
        """``sSYN<number>``."""
        return f"sSYN{self.number:05d}"

    @property
    def dicom_id(self) -> str:
        """``synth-dicom-<number>``."""
        return f"synth-dicom-{self.number:05d}"


def _p(lesion: str, sides: tuple[str, ...] = (), types: tuple[str, ...] = ("global",),
       **params: float) -> PositiveSpec:
    return PositiveSpec(LesionSpec(lesion, sides, dict(params)), types)


_EFF = {"depth": 0.05, "rise": 0.10}
_EDEMA = {"rx": 0.085, "ry": 0.13, "y": 0.46}

#: Studies with findings (12): every lesion has three positive studies; the real radiograph is
#: the third opacity positive.
POSITIVE_STUDIES: tuple[StudySpec, ...] = (
    StudySpec(1, "PA", (_p("cardiomegaly"), _p("effusion", ("right", "left"), **_EFF)),
              negatives=("pneumonia",)),
    StudySpec(2, "AP", (_p("cardiomegaly"), _p("edema", ("right", "left"), ("global", "basic"),
                                               **_EDEMA)),
              negatives=("consolidation",)),
    StudySpec(3, "PA", (_p("cardiomegaly"),), negatives=("opacity", "atelectasis"),
              other_negatives=(("edema", ("left lung",)),)),
    StudySpec(4, "AP", (_p("edema", ("right", "left"), **_EDEMA),
                        _p("effusion", ("right",), ("global", "basic"), depth=0.06, rise=0.12))),
    StudySpec(5, "PA", (_p("edema", ("right", "left"), rx=0.095, ry=0.14, y=0.47),),
              negatives=("effusion",)),
    StudySpec(6, "PA", (_p("effusion", ("left",), depth=0.05, rise=0.11),
                        _p("atelectasis", ("left",), offset=0.09, thickness=0.03, half=0.08,
                           dx=0.02))),
    StudySpec(7, "PA", (_p("atelectasis", ("right",), ("basic",), wedge=1.0, height=0.13,
                           half=0.075, dx=0.03),),
              other_negatives=(("pneumonia", ("right lung base",)),)),
    StudySpec(8, "AP", (_p("atelectasis", ("right",), offset=0.05, thickness=0.03, half=0.08),),
              negatives=("cardiomegaly",)),
    StudySpec(9, "PA", (_p("consolidation", ("right",), y=0.57, rx=0.08, ry=0.075, dx=0.03),
                        _p("pneumonia", ("right",), y=0.57, rx=0.09, ry=0.085, dx=0.03))),
    StudySpec(10, "AP", (_p("consolidation", ("left",), y=0.27, rx=0.085, ry=0.07, dx=0.02),
                         _p("pneumonia", ("left",), ("global", "basic"), y=0.27, rx=0.09,
                            ry=0.075, dx=0.02))),
    StudySpec(11, "PA", (_p("consolidation", ("right",), y=0.40, rx=0.07, ry=0.06, dx=0.04),
                         _p("opacity", ("left",), left_x0=0.72, left_y0=0.33, left_r0=0.04,
                            left_x1=0.78, left_y1=0.55, left_r1=0.035))),
    StudySpec(12, "PA", (_p("pneumonia", ("left",), y=0.58, rx=0.075, ry=0.07, dx=0.03),
                         _p("opacity", ("right",), right_x0=0.25, right_y0=0.30,
                            right_r0=0.045))),
)

#: Studies without findings (14): two per lesion (in ``LESIONS`` order) state it absent; a few
#: also state a later lesion absent, so negative sampling has choices but always stays feasible.
NEGATIVE_STUDIES: tuple[StudySpec, ...] = (
    StudySpec(13, "PA", negatives=("cardiomegaly", "effusion")),
    StudySpec(14, "AP", negatives=("cardiomegaly",),
              other_negatives=(("consolidation", ("left lung base",)),)),
    StudySpec(15, "PA", negatives=("consolidation",)),
    StudySpec(16, "PA", negatives=("consolidation", "edema")),
    StudySpec(17, "AP", negatives=("edema", "opacity")),
    StudySpec(18, "PA", negatives=("edema",)),
    StudySpec(19, "PA", negatives=("atelectasis",)),
    StudySpec(20, "AP", negatives=("atelectasis", "pneumonia")),
    StudySpec(21, "PA", negatives=("pneumonia",)),
    StudySpec(22, "PA", negatives=("pneumonia", "effusion")),
    StudySpec(23, "AP", negatives=("opacity",)),
    StudySpec(24, "PA", negatives=("opacity",),
              other_negatives=(("atelectasis", ("right lung base",)),)),
    StudySpec(25, "PA", negatives=("effusion",)),
    StudySpec(26, "AP", negatives=("effusion",)),
)

#: Ids of the real case (pydicom-data ``RG1_UNCR.dcm``).
REAL_SUBJECT_ID = "pSYNRG1"
REAL_STUDY_ID = "sSYNRG1"
REAL_DICOM_ID = "pydicom-rg1-uncr"
#: The real case is an opacity positive and a cardiomegaly / effusion negative.
REAL_NEGATIVES = ("cardiomegaly", "effusion")

#: Report sentences per finding ({loc} = location text).
POSITIVE_SENTENCES = {
    "cardiomegaly": "The heart is enlarged.",
    "edema": "There is mild pulmonary edema with perihilar haziness in the {loc}.",
    "effusion": "Pleural effusion is present in the {loc} with blunting of the costophrenic "
                "angle.",
    "atelectasis": "There is atelectasis in the {loc}.",
    "consolidation": "There is consolidation in the {loc}.",
    "pneumonia": "Findings in the {loc} are concerning for pneumonia.",
    "opacity": "Rounded opacities are seen in the {loc}.",
}
NEGATIVE_SENTENCES = {
    "cardiomegaly": "Heart size is normal.",
    "edema": "There is no pulmonary edema.",
    "effusion": "There is no pleural effusion.",
    "atelectasis": "There is no atelectasis.",
    "consolidation": "There is no focal consolidation.",
    "pneumonia": "There is no evidence of pneumonia.",
    "opacity": "No focal opacity is seen.",
}
