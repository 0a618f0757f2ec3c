"""Synthetic fixtures: the one real radiograph (pydicom-data ``RG1_UNCR.dcm``) and our annotation.

The DICOM is read at run time from the ``pydicom-data`` package (never committed). It is a PA
chest CR, MONOCHROME1, 15 bit, 1841 x 1955 pixels, showing several round pulmonary opacities.
The annotation below (normalised coordinates u = x / width, v = y / height, so it holds at any
resize) was drawn by looking at the converted image; it is documented in
``data/sample_test/README.md``.
"""

from __future__ import annotations

import cv2
import numpy as np

from chexpercept.errors import MissingDependencyError

#: File name inside pydicom-data.
REAL_DICOM_FILE = "RG1_UNCR.dcm"

#: Round opacities: (cu, cv, ru, rv) ellipses in normalised coordinates. Index 0-2 are in the
#: patient's left lung (image right: upper, mid, lower), 3-5 in the right lung (lower hilar,
#: upper lateral, lower lateral).
REAL_OPACITIES: tuple[tuple[float, float, float, float], ...] = (
    (0.732, 0.342, 0.044, 0.044),
    (0.800, 0.440, 0.035, 0.035),
    (0.786, 0.600, 0.045, 0.040),
    (0.264, 0.566, 0.050, 0.050),
    (0.181, 0.376, 0.035, 0.035),
    (0.166, 0.674, 0.035, 0.035),
)

#: Lung silhouettes as polygons of (u, v) vertices (the patient's right lung is on the left).
REAL_RIGHT_LUNG: tuple[tuple[float, float], ...] = (
    (0.25, 0.10), (0.33, 0.09), (0.40, 0.12), (0.41, 0.30), (0.41, 0.45), (0.38, 0.55),
    (0.36, 0.70), (0.30, 0.72), (0.20, 0.72), (0.12, 0.76), (0.09, 0.70), (0.09, 0.50),
    (0.11, 0.35), (0.15, 0.20),
)
REAL_LEFT_LUNG: tuple[tuple[float, float], ...] = (
    (0.62, 0.10), (0.70, 0.09), (0.78, 0.13), (0.85, 0.22), (0.89, 0.40), (0.91, 0.60),
    (0.91, 0.78), (0.86, 0.79), (0.79, 0.75), (0.72, 0.68), (0.63, 0.52), (0.58, 0.40),
    (0.58, 0.15),
)
#: Heart silhouette polygon (u, v).
REAL_HEART: tuple[tuple[float, float], ...] = (
    (0.40, 0.52), (0.55, 0.50), (0.63, 0.55), (0.69, 0.63), (0.73, 0.72), (0.66, 0.77),
    (0.50, 0.78), (0.39, 0.74), (0.38, 0.62),
)


def load_real_radiograph() -> tuple[np.ndarray, dict[str, object]]:
    """Read ``RG1_UNCR.dcm`` and convert it to a displayable 8-bit image.

    Conversion: modality LUT (RescaleSlope/Intercept, identity when absent); linear VOI window
    from the header's WindowCenter/WindowWidth (DICOM PS3.3 C.11.2.1.2 formula), else the
    0.5/99.5 percentiles; MONOCHROME1 inverted so that dense tissue is bright. The native size
    is kept (the JPG tree holds native sizes, like MIMIC-CXR-JPG).

    Returns:
        ``(image, info)``: (1955, 1841) uint8, and header facts for the answer key
        (photometric interpretation, bits stored, window used, view position).

    Raises:
        MissingDependencyError: If pydicom or pydicom-data is not installed.
    """
    try:
        import pydicom
        from pydicom.data import get_testdata_file
    except ImportError as exc:
        raise MissingDependencyError(
            f"the fixture generator needs pydicom and pydicom-data for {REAL_DICOM_FILE} "
            f"({exc}). Install them with: pip install -e \".[fixtures]\"") from exc
    path = get_testdata_file(REAL_DICOM_FILE)
    if path is None:
        raise MissingDependencyError(
            f"{REAL_DICOM_FILE} was not found in pydicom's test data (pydicom-data missing?). "
            f"Install it with: pip install -e \".[fixtures]\"")
    ds = pydicom.dcmread(path)
    raw = ds.pixel_array.astype(np.float64)
    raw = raw * float(ds.get("RescaleSlope", 1) or 1) + float(ds.get("RescaleIntercept", 0) or 0)
    center, width = ds.get("WindowCenter"), ds.get("WindowWidth")
    if center is not None and width is not None:
        c = float(center[0] if hasattr(center, "__len__") and not isinstance(center, str)
                  else center)
        w = float(width[0] if hasattr(width, "__len__") and not isinstance(width, str)
                  else width)
        scaled = np.clip((raw - (c - 0.5)) / max(w - 1.0, 1.0) + 0.5, 0.0, 1.0)
        window = {"source": "header", "center": c, "width": w}
    else:
        lo, hi = np.percentile(raw, [0.5, 99.5])
        scaled = np.clip((raw - lo) / max(hi - lo, 1e-6), 0.0, 1.0)
        window = {"source": "percentiles 0.5/99.5", "low": float(lo), "high": float(hi)}
    photometric = str(ds.get("PhotometricInterpretation", ""))
    if photometric == "MONOCHROME1":
        scaled = 1.0 - scaled
    img = np.round(scaled * 255.0).astype(np.uint8)
    info = {"file": REAL_DICOM_FILE, "photometric_interpretation": photometric,
            "bits_stored": int(ds.get("BitsStored", 0) or 0), "window": window,
            "view_position": str(ds.get("ViewPosition", "")),
            "native_size": [int(img.shape[1]), int(img.shape[0])]}
    return img, info


def _poly(points: tuple[tuple[float, float], ...], size: int) -> np.ndarray:
    pts = np.round(np.array(points, dtype=np.float64) * size).astype(np.int32)
    out = np.zeros((size, size), dtype=np.uint8)
    cv2.fillPoly(out, [pts], 1)
    return out.astype(bool)


def real_anatomy(size: int = 1024) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Our lung and heart annotation of the real radiograph.

    Args:
        size: Side of the square raster (the working frame by default).

    Returns:
        ``(right_lung, left_lung, heart)``, each (size, size) bool.
    """
    return _poly(REAL_RIGHT_LUNG, size), _poly(REAL_LEFT_LUNG, size), _poly(REAL_HEART, size)


def real_opacity_mask(size: int) -> np.ndarray:
    """Our annotation of the round opacities of the real radiograph.

    Args:
        size: Side of the square raster (512 for the MIMIC-ILS mask, 1024 for the answer key).

    Returns:
        (size, size) bool.
    """
    c = (np.arange(size, dtype=np.float64) + 0.5) / size
    u, v = c[None, :], c[:, None]
    out = np.zeros((size, size), dtype=bool)
    for cu, cv, ru, rv in REAL_OPACITIES:
        out |= ((u - cu) / ru) ** 2 + ((v - cv) / rv) ** 2 <= 1.0
    return out
