"""Stage 02: question wording and option strings of chexpercept.json (no artifacts touched).

The question stems are our own wording with the release's meaning (docs/qa_generation.md,
"Question types"; docs/differences.md D23). Option strings are the release's exactly, because
scoring and analysis match on option indices and some readers show the option text.
"""

from __future__ import annotations

from collections.abc import Sequence

from chexpercept.lesions import DIRECT_DETECTION_LESIONS, NO_ATTRIBUTE_LESIONS

YES_NO = ("Yes", "No")

#: Point colours in assignment order (docs/benchmark_format.md, "Option naming").
POINT_COLORS = ("red", "orange", "yellow", "green", "blue", "purple", "pink", "brown")
#: 8-bit RGB of each point colour (the CSS / matplotlib named colours the release draws with).
POINT_RGB = {
    "red": (255, 0, 0),
    "orange": (255, 165, 0),
    "yellow": (255, 255, 0),
    "green": (0, 128, 0),
    "blue": (0, 0, 255),
    "purple": (128, 0, 128),
    "pink": (255, 192, 203),
    "brown": (165, 42, 42),
}
NONE_OPTION = "None"

ORDINALS = ("1st", "2nd", "3rd", "4th", "5th", "6th", "7th", "8th")

DISTRIBUTION_OPTIONS = ("1 zone", "2 zones", "3 zones", "4 zones or more")
LOCATION_NONE_OPTION = "None of the above (options 1-3)"
COMPARISON_OPTIONS = (
    "Both lesions are similar in size.",
    "The left lung lesion is larger than the right lung lesion.",
    "The right lung lesion is larger than the left lung lesion.",
    "The lesion is present in only one lung (left or right).",
)
#: The six lung zones in the order the distribution question lists them.
ZONE_LABELS = ("right upper zone lung", "right mid zone lung", "right lower zone lung",
               "left upper zone lung", "left mid zone lung", "left lower zone lung")

_HEART_NOTE = "Ignore any part of the finding that overlaps the heart."


def with_options(stem: str, options: Sequence[str]) -> str:
    """Append the options block every question ends with (docs/qa_generation.md, "Question types").

    Returns:
        ``stem`` + a blank line + ``Options:`` + one ``(i) <option>`` line per option (1-based).
    """
    lines = [f"({i}) {opt}" for i, opt in enumerate(options, start=1)]
    return f"{stem}\n\nOptions:\n" + "\n".join(lines)


def _heart_note(lesion: str) -> str:
    return "" if lesion in NO_ATTRIBUTE_LESIONS else f" {_HEART_NOTE}"


def detection_stem(lesion: str) -> str:
    """Stage 1: direct wording for opacity/consolidation, "suggestive of" for the others."""
    if lesion in DIRECT_DETECTION_LESIONS:
        return f"Look at this chest X-ray. Can you see any {lesion} in the image?"
    return (f"Look at this chest X-ray. Can you see any finding in the image that is "
            f"suggestive of {lesion}?")


def contour_eval_stem(lesion: str) -> str:
    """Stage 2: does the cyan candidate mask need a major revision (+ heart note for lungs)."""
    return (f"This chest X-ray has a candidate segmentation mask for {lesion} drawn on it as a "
            f"cyan overlay. Does the mask need a major revision to outline the {lesion} "
            f"correctly?{_heart_note(lesion)}")


def initial_context(lesion: str) -> str:
    """Stage 3 context shown before the point questions."""
    return (f"The {lesion} mask needs to be revised. Coloured points have been placed on the "
            f"image at places where the mask may have to change: the mask may need to grow "
            f"toward a point, to shrink back at a point, or both.{_heart_note(lesion)}")


def expansion_stem(lesion: str) -> str:
    """Stage 3(a): points the mask should grow toward (multi-select, 'None' allowed)."""
    return (f"Which coloured point(s) mark {lesion} that the mask does not cover yet, so that "
            f"the mask should be expanded toward them? Select every point that applies, or "
            f"'None' if the mask needs no expansion.")


def contraction_stem(lesion: str) -> str:
    """Stage 3(b): points the mask should shrink away from (multi-select, 'None' allowed)."""
    return (f"Which coloured point(s) mark areas that the mask covers but that are not "
            f"{lesion}, so that the mask should be contracted away from them? Select every "
            f"point that applies, or 'None' if the mask needs no contraction.")


def revision_result_stem(lesion: str) -> str:
    """Stage 3(c): which revised mask applies the requested changes."""
    return (f"The images that follow show candidate revised {lesion} masks, one per option, in "
            f"the option order. Which revised mask applies exactly the expansions and "
            f"contractions that the mask needed?")


def distribution_stem(lesion: str) -> str:
    """Stage 4 distribution: number of the six lung zones involved."""
    zones = ", ".join(ZONE_LABELS)
    return (f"Each lung is divided into an upper, a mid and a lower zone, giving six zones: "
            f"{zones}. How many of these zones contain {lesion}?")


def location_stem(lesion: str) -> str:
    """Stage 4 location: which listed regions contain the lesion (multi-select)."""
    return (f"Which of the following regions contain {lesion}? Select every option that "
            f"applies.")


def severity_stem(lesion: str, lung: str) -> str:
    """Stage 4 severity/measurement: fraction of ``lung`` (heart excluded) the lesion covers."""
    return (f"Leaving out the area taken by the heart, how much of the {lung} area does the "
            f"{lesion} cover?")


def severity_options(lung: str) -> list[str]:
    """The three severity options for ``lung`` (thresholds 1/3 and 2/3; release)."""
    return [f"Less than 1/3 of the {lung} area",
            f"1/3 or more but less than 2/3 of the {lung} area",
            f"2/3 or more of the {lung} area"]


def comparison_stem(lesion: str) -> str:
    """Stage 4 comparison of left and right lesion sizes (1.5x rule)."""
    return (f"Compare the size of the {lesion} in the left lung with its size in the right lung, "
            f"leaving out the heart area. A lesion counts as larger only when it is at least "
            f"1.5 times the size of the other.")


def point_option_text(color: str) -> str:
    """Option text of a point (``"<color> point"``) or ``"None"``."""
    return NONE_OPTION if color == NONE_OPTION else f"{color} point"


def mask_option_text(index: int) -> str:
    """Option text of the ``index``-th (1-based) revised mask: ``"1st mask"`` .. ``"8th mask"``."""
    return f"{ORDINALS[index - 1]} mask"
