"""Stage 02: attribute-extraction QA (stage 4) from ``geometrical_mask_infos`` of a case.

Ground truth is geometric: the optimal mask's overlap with the lung zones, lung regions and
lungs that Stage 01 recorded (docs/deformation.md, "Lung geometry"). Rules and thresholds are
the release's (docs/qa_generation.md, "Question types" and "Thresholds"), except that a case
with no positive zone cannot be built instead of being answered "4 zones or more"
(docs/differences.md D22).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from chexpercept.qa import _text
from chexpercept.qa._errors import CaseBuildError
from chexpercept.schema import GeometricalMaskInfo, LungOverlap

#: Severity thresholds on the covered fraction of the selected lung: < 1/3, [1/3, 2/3), >= 2/3
#: (docs/qa_generation.md, "Thresholds").
SEVERITY_THRESHOLDS = (1 / 3, 2 / 3)
#: A lung's lesion is "larger" when it is at least this many times the other (release).
COMPARISON_FACTOR = 1.5
#: Regions offered in the location question besides "None of the above" (release).
LOCATION_CHOICES = 3
LUNGS = ("left lung", "right lung")


def region_text_and_zone(name: str, key_id: str) -> tuple[str, str]:
    """Question text and zone label of a Stage 01 lung-region name.

    ``"A & B"`` becomes ``"the intersection of the A and the B'"`` where B' is B with
    ``lung base`` renamed ``lower zone lung`` (zone label B'); ``"<side> costophrenic angle"``
    becomes ``"the <side> costophrenic angle"`` (zone label ``<side> lower zone lung``).
    The release's ``preprocess_anatomy_name`` (docs/qa_generation.md, "Question types").

    Raises:
        CaseBuildError: If the name has neither form or its zone is not one of the six.
    """
    if " & " in name:
        region, zone = name.split(" & ", 1)
        zone = zone.replace("lung base", "lower zone lung")
        text = f"the intersection of the {region} and the {zone}"
    elif name.endswith(" costophrenic angle"):
        side = name.split()[0]
        text, zone = f"the {name}", f"{side} lower zone lung"
    else:
        raise CaseBuildError(f"{key_id}: lung region '{name}' is neither '<region> & <zone>' "
                             f"nor '<side> costophrenic angle'")
    if zone not in _text.ZONE_LABELS:
        raise CaseBuildError(f"{key_id}: lung region '{name}' names zone '{zone}'; expected one "
                             f"of {list(_text.ZONE_LABELS)}")
    return text, zone


def _lung(info: GeometricalMaskInfo, lung: str) -> LungOverlap:
    return info.overlap.left_lung if lung == "left lung" else info.overlap.right_lung


def _mc(stem: str, options: Sequence[str], index: int) -> dict[str, Any]:
    return {"question": _text.with_options(stem, options), "answer_options": list(options),
            "answer": options[index - 1], "answer_index": index}


def distribution_index(n_zones: int) -> int:
    """1-based option of the distribution question: 1, 2, 3 zones, else 4 ("4 zones or more").

    Raises:
        ValueError: For 0 zones (the release mapped it to "4 zones or more";
            docs/differences.md D22).
    """
    if n_zones < 1:
        raise ValueError("no positive zone")
    return min(n_zones, 4)


def severity_index(ratio: float) -> int:
    """1-based severity option for a covered lung fraction in [0, 1].

    < 1/3 -> 1, [1/3, 2/3) -> 2, >= 2/3 -> 3 (docs/qa_generation.md, "Question types").
    """
    if ratio < SEVERITY_THRESHOLDS[0]:
        return 1
    if ratio < SEVERITY_THRESHOLDS[1]:
        return 2
    return 3


def comparison_index(left_size: int, right_size: int, left_has: bool, right_has: bool) -> int:
    """1-based comparison option (docs/qa_generation.md, "Question types").

    One lung or none involved -> 4; both: left >= 1.5 x right -> 2, right >= 1.5 x left -> 3,
    else 1 (similar). Sizes are pixel counts.
    """
    if not (left_has and right_has):
        return 4
    if left_size >= COMPARISON_FACTOR * right_size:
        return 2
    if right_size >= COMPARISON_FACTOR * left_size:
        return 3
    return 1


def build_attribute_qa(key_id: str, lesion: str, infos: Sequence[GeometricalMaskInfo],
                       rng: np.random.Generator) -> dict[str, Any]:
    """``attribute_extraction_qa`` of a lung-lesion case (docs/qa_generation.md, "Question types").

    - distribution: distinct zones of the positive regions (``has_overlap`` in any component).
    - location: k ~ U{0..3} random positive regions, topped up to 3 with random negative
      regions (then with more positives if negatives run short), shuffled, plus
      "None of the above (options 1-3)"; the answer is every positive option, else [4].
    - severity/measurement: the lung is a side shown positive in the location options
      (random if both), else a lung with ``has_overlap`` (random if both), else the left lung;
      the fraction is the sum of that lung's ``overlap_ratio`` over components with
      ``has_overlap``; thresholds 1/3 and 2/3.
    - comparison: summed lung ``size`` (pixels) over components with ``has_overlap``; 1.5x.

    Args:
        key_id: The case (for messages).
        lesion: Its lesion (not cardiomegaly: that has no stage 4).
        infos: ``geometrical_mask_infos`` (one per optimal component).
        rng: The case's generator; used after the contour QA draws.

    Returns:
        ``{"distribution", "location", "severity/measurement", "comparison"}``.

    Raises:
        CaseBuildError: If no lung region overlaps the lesion (0 zones, docs/differences.md
            D22), a region name is malformed, or there are fewer than 3 regions to offer.
    """
    regions: dict[str, tuple[str, str]] = {}
    positives: list[str] = []
    for info in infos:
        for name, overlap in (info.overlap.lung_regions or {}).items():
            if name not in regions:
                regions[name] = region_text_and_zone(name, key_id)
            if overlap.has_overlap and name not in positives:
                positives.append(name)
    zones = {regions[name][1] for name in positives}
    answer_zones = [z for z in _text.ZONE_LABELS if z in zones]
    if not answer_zones:
        raise CaseBuildError(f"{key_id}: no lung region overlaps the {lesion} mask (0 positive "
                             f"zones), so the distribution question has no answer")
    distribution = _mc(_text.distribution_stem(lesion), _text.DISTRIBUTION_OPTIONS,
                       distribution_index(len(answer_zones)))
    distribution["answer_zones"] = answer_zones

    # location
    negatives = [name for name in regions if name not in positives]
    k = min(int(rng.integers(0, LOCATION_CHOICES + 1)), len(positives))
    shown_pos = [positives[int(i)] for i in np.sort(rng.choice(len(positives), k, replace=False))]
    m = min(LOCATION_CHOICES - k, len(negatives))
    shown_neg = ([negatives[int(i)] for i in np.sort(rng.choice(len(negatives), m, replace=False))]
                 if m else [])
    short = LOCATION_CHOICES - k - m
    if short:
        rest = [name for name in positives if name not in shown_pos]
        if len(rest) < short:
            raise CaseBuildError(f"{key_id}: only {len(regions)} lung regions; the location "
                                 f"question needs {LOCATION_CHOICES}")
        shown_pos += [rest[int(i)] for i in np.sort(rng.choice(len(rest), short, replace=False))]
    shown = shown_pos + shown_neg
    shown = [shown[int(i)] for i in rng.permutation(len(shown))]
    texts = [regions[name][0] for name in shown] + [_text.LOCATION_NONE_OPTION]
    positive_index = [i for i, name in enumerate(shown, start=1) if name in positives]
    loc_index = positive_index or [len(texts)]
    location = {
        "question": _text.with_options(_text.location_stem(lesion), texts),
        "answer_options": texts,
        "answer": ", ".join(texts[i - 1] for i in loc_index),
        "answer_index": loc_index,
        "answer_zones": [texts[i - 1] for i in positive_index],
    }

    # severity/measurement
    shown_sides = [lung for lung in LUNGS
                   if any(name.split()[0] == lung.split()[0] for name in shown_pos)]
    overlapping = [lung for lung in LUNGS if any(_lung(i, lung).has_overlap for i in infos)]
    pool = shown_sides or overlapping
    if len(pool) == 2:
        lung = pool[int(rng.integers(0, 2))]
    elif pool:
        lung = pool[0]
    else:
        lung = "left lung"
    ratio = float(sum(_lung(i, lung).overlap_ratio for i in infos if _lung(i, lung).has_overlap))
    severity = _mc(_text.severity_stem(lesion, lung), _text.severity_options(lung),
                   severity_index(ratio))
    severity["overlap_ratio"] = ratio
    severity["selected_lung"] = lung

    # comparison
    left_has = any(i.overlap.left_lung.has_overlap for i in infos)
    right_has = any(i.overlap.right_lung.has_overlap for i in infos)
    left_size = int(sum(i.overlap.left_lung.size for i in infos if i.overlap.left_lung.has_overlap))
    right_size = int(sum(i.overlap.right_lung.size for i in infos
                         if i.overlap.right_lung.has_overlap))
    comparison = _mc(_text.comparison_stem(lesion), _text.COMPARISON_OPTIONS,
                     comparison_index(left_size, right_size, left_has, right_has))
    comparison.update({"left_size": left_size, "right_size": right_size,
                       "left_has_overlap": left_has, "right_has_overlap": right_has})

    return {"distribution": distribution, "location": location,
            "severity/measurement": severity, "comparison": comparison}
