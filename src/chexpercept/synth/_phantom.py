"""Synthetic fixtures: chest phantom geometry, lesion shapes and image rendering.

All shapes are defined in normalised image coordinates (u = x / width, v = y / height, both in
[0, 1], u grows to the image right = the patient's left) so the same phantom can be rasterised
at the JPG size (e.g. 1400 x 1700), at the 1024 x 1024 working frame (anatomy masks) and at
512 x 512 (MIMIC-ILS lesion masks) and stay aligned after a plain (aspect-changing) resize.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import cv2
import numpy as np

#: Patient sides in the order used everywhere (the patient's right lung is on the image left).
SIDES = ("right", "left")


@dataclass(frozen=True)
class Grid:
    """Pixel-centre coordinates of an (H, W) raster in normalised units.

    Attributes:
        u: (1, W) float32, x / W of each column centre, in [0, 1].
        v: (H, 1) float32, y / H of each row centre, in [0, 1].
    """

    u: np.ndarray
    v: np.ndarray

    @classmethod
    def of(cls, width: int, height: int) -> Grid:
        """The grid of a ``width`` x ``height`` raster."""
        u = ((np.arange(width, dtype=np.float32) + 0.5) / width)[None, :]
        v = ((np.arange(height, dtype=np.float32) + 0.5) / height)[:, None]
        return cls(u=u, v=v)

    @property
    def shape(self) -> tuple[int, int]:
        """(H, W)."""
        return self.v.shape[0], self.u.shape[1]


@dataclass(frozen=True)
class Lung:
    """One lung of the phantom (normalised units).

    Attributes:
        side: ``right`` (image left) or ``left`` (image right).
        cx: Horizontal centre.
        hw: Half width at the widest level.
        top: Apex level.
        bottom: Level of the costophrenic angle (lowest lung point, at the lateral edge).
        dome: Height of the diaphragm dome above ``bottom`` at the lung centre.
    """

    side: str
    cx: float
    hw: float
    top: float
    bottom: float
    dome: float

    @property
    def lateral_sign(self) -> float:
        """-1 when the lateral side is towards u = 0 (right lung), +1 otherwise."""
        return -1.0 if self.side == "right" else 1.0

    def diaphragm(self, u: np.ndarray) -> np.ndarray:
        """Diaphragm level under the lung at column ``u`` (lower laterally)."""
        d = np.clip((u - self.cx) / self.hw, -1.0, 1.0)
        return self.bottom - self.dome * (1.0 - d * d)

    def mask(self, g: Grid) -> np.ndarray:
        """(H, W) bool lung silhouette (includes the retrocardiac part)."""
        t = (g.v - self.top) / (self.bottom - self.top)
        width = self.hw * np.sqrt(np.clip(t / 0.35, 0.0, 1.0))
        inside = (t >= 0) & (np.abs(g.u - self.cx) <= width)
        return inside & (g.v <= self.diaphragm(g.u))


@dataclass(frozen=True)
class Phantom:
    """Geometry of one synthetic chest (normalised units).

    Attributes:
        lungs: The right and left lungs.
        heart: (cx, cy, rx, ry) of the heart ellipse.
        rib_spacing: Vertical period of the posterior ribs.
        rib_phase: Phase offset of the ribs in periods.
    """

    lungs: tuple[Lung, Lung]
    heart: tuple[float, float, float, float]
    rib_spacing: float = 0.075
    rib_phase: float = 0.0

    def lung(self, side: str) -> Lung:
        """The lung on ``side`` (``right`` or ``left``)."""
        return self.lungs[SIDES.index(side)]

    def heart_mask(self, g: Grid) -> np.ndarray:
        """(H, W) bool heart ellipse."""
        cx, cy, rx, ry = self.heart
        return ((g.u - cx) / rx) ** 2 + ((g.v - cy) / ry) ** 2 <= 1.0

    def lung_field(self, g: Grid, side: str) -> np.ndarray:
        """(H, W) bool visible lung field of ``side`` (lung silhouette minus heart)."""
        return self.lung(side).mask(g) & ~self.heart_mask(g)


def random_phantom(rng: np.random.Generator, *, cardiomegaly: bool = False) -> Phantom:
    """Draw a phantom with small anatomical jitter.

    Args:
        rng: Generator from ``rng_for(seed, "synth", study_id)``.
        cardiomegaly: Enlarge the heart (cardiothoracic ratio about 0.6 instead of 0.4).

    Returns:
        The phantom.
    """
    def j(scale: float) -> float:
        return float(rng.uniform(-scale, scale))

    right = Lung("right", cx=0.30 + j(0.01), hw=0.155 + j(0.008), top=0.11 + j(0.01),
                 bottom=0.76 + j(0.012), dome=0.08 + j(0.008))
    left = Lung("left", cx=0.70 + j(0.01), hw=0.155 + j(0.008), top=0.115 + j(0.01),
                bottom=0.78 + j(0.012), dome=0.08 + j(0.008))
    if cardiomegaly:
        heart = (0.55 + j(0.008), 0.635 + j(0.008), 0.17 + j(0.006), 0.115 + j(0.005))
    else:
        heart = (0.535 + j(0.008), 0.635 + j(0.008), 0.115 + j(0.006), 0.095 + j(0.005))
    return Phantom(lungs=(right, left), heart=heart, rib_spacing=0.075 + j(0.004),
                   rib_phase=float(rng.uniform(0, 1)))


# --------------------------------------------------------------------------------------
# Lesions
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class LesionSpec:
    """A lesion placed in a phantom.

    Attributes:
        lesion: One of ``chexpercept.lesions.LESIONS``.
        sides: Lungs involved (``right``/``left``); unused for cardiomegaly.
        params: Shape parameters (normalised units), see :func:`lesion_mask`.
    """

    lesion: str
    sides: tuple[str, ...] = ()
    params: dict[str, float] = field(default_factory=dict)


def _ellipse(g: Grid, cx: float, cy: float, rx: float, ry: float) -> np.ndarray:
    return ((g.u - cx) / rx) ** 2 + ((g.v - cy) / ry) ** 2 <= 1.0


def lesion_mask(g: Grid, ph: Phantom, spec: LesionSpec) -> np.ndarray:
    """Rasterise a lesion on grid ``g``.

    Shapes (where each lesion occurs on a radiograph):

    - cardiomegaly: the whole (enlarged) heart;
    - effusion: lung base below a meniscus that rises laterally (blunted costophrenic angle);
      ``depth`` = height above the costophrenic angle at the medial side, ``rise`` = extra
      height at the lateral wall;
    - edema: bilateral perihilar ellipses (``rx``, ``ry``) clipped to the lung fields;
    - consolidation / pneumonia: a dense lobar ellipse (``y``, ``rx``, ``ry``, ``dx``) clipped to
      the lung field;
    - atelectasis: a plate-like band (``offset`` above the diaphragm, ``thickness``, ``half``
      width) or, with ``wedge`` = 1, a basal wedge;
    - opacity: round opacities (``x0,y0,r0``, ``x1,y1,r1``, ...) clipped to the lung fields.

    Args:
        g: Target grid.
        ph: The phantom.
        spec: The lesion.

    Returns:
        (H, W) bool.
    """
    p = spec.params
    if spec.lesion == "cardiomegaly":
        return ph.heart_mask(g)
    out = np.zeros(g.shape, dtype=bool)
    for side in spec.sides:
        lung = ph.lung(side)
        field_ = ph.lung_field(g, side)
        lat = lung.lateral_sign
        if spec.lesion == "effusion":
            frac = np.clip(lat * (g.u - lung.cx) / lung.hw * 0.5 + 0.5, 0.0, 1.0)
            level = lung.bottom - p["depth"] - p["rise"] * frac
            shape = g.v >= level
        elif spec.lesion == "edema":
            cx = lung.cx - lat * 0.06
            shape = _ellipse(g, cx, p.get("y", 0.46), p["rx"], p["ry"])
        elif spec.lesion in ("consolidation", "pneumonia"):
            cx = lung.cx + lat * p.get("dx", 0.0)
            shape = _ellipse(g, cx, p["y"], p["rx"], p["ry"])
        elif spec.lesion == "atelectasis":
            cx = lung.cx + lat * p.get("dx", 0.0)
            base = lung.diaphragm(g.u)
            if p.get("wedge", 0.0):
                # Triangle with its apex towards the hilum and its base on the diaphragm.
                height = p["height"]
                frac = np.clip((base - g.v) / height, 0.0, 1.0)
                shape = (g.v <= base) & (g.v >= base - height) & (
                    np.abs(g.u - cx) <= p["half"] * (1.0 - frac))
            else:
                centre = base - p["offset"]
                shape = (np.abs(g.v - centre) <= p["thickness"] / 2) & (
                    np.abs(g.u - cx) <= p["half"])
        elif spec.lesion == "opacity":
            shape = np.zeros(g.shape, dtype=bool)
            k = 0
            while f"{side}_x{k}" in p:
                shape |= _ellipse(g, p[f"{side}_x{k}"], p[f"{side}_y{k}"],
                                  p[f"{side}_r{k}"], p[f"{side}_r{k}"] * 0.9)
                k += 1
        else:
            raise ValueError(f"unknown lesion {spec.lesion!r}")
        out |= shape & field_
    return out


#: Rendering of each lesion: (added density in [0, 1] units, blur sigma as a fraction of the
#: image width). Edema is a faint wide haze; effusion is as dense as soft tissue.
LESION_LOOK: dict[str, tuple[float, float]] = {
    "effusion": (0.55, 0.006),
    "edema": (0.20, 0.020),
    "consolidation": (0.42, 0.005),
    "pneumonia": (0.36, 0.008),
    "atelectasis": (0.40, 0.003),
    "opacity": (0.34, 0.004),
}

#: Cap of the summed lesion densities (co-located consolidation + pneumonia stay grey, not white).
MAX_LESION_DENSITY = 0.5


def jitter_spec(spec: LesionSpec, rng: np.random.Generator, scale: float = 0.06) -> LesionSpec:
    """Scale every parameter by a random factor in [1 - scale, 1 + scale] (``wedge`` kept)."""
    params = {k: (v if k == "wedge" else float(v * (1 + rng.uniform(-scale, scale))))
              for k, v in sorted(spec.params.items())}
    return replace(spec, params=params)


# --------------------------------------------------------------------------------------
# Rendering
# --------------------------------------------------------------------------------------


def _blur(img: np.ndarray, sigma_px: float) -> np.ndarray:
    if sigma_px <= 0.3:
        return img
    return cv2.GaussianBlur(img, (0, 0), sigmaX=float(sigma_px), borderType=cv2.BORDER_REFLECT)


def render(ph: Phantom, lesions: list[tuple[LesionSpec, float]], width: int, height: int,
           rng: np.random.Generator) -> np.ndarray:
    """Render the phantom as an 8-bit radiograph (bright = dense, as a displayed CXR).

    Args:
        ph: The phantom.
        lesions: Lesions to draw with a per-lesion density factor (1.0 = :data:`LESION_LOOK`).
        width: Image width in pixels.
        height: Image height in pixels.
        rng: Generator for the texture and noise.

    Returns:
        (height, width) uint8.
    """
    g = Grid.of(width, height)
    u, v = g.u, g.v
    body = ((u - 0.5) / 0.47) ** 2 + ((v - 0.56) / 0.60) ** 2 <= 1.0
    img = np.where(body, 0.55, 0.06).astype(np.float32)
    # Abdomen below the diaphragm (liver/spleen), and the shoulders.
    dia = np.where(u < 0.5, ph.lungs[0].diaphragm(u), ph.lungs[1].diaphragm(u))
    img = np.where(body & (v > dia), 0.80, img)
    # Lungs: dark fields with smooth low-frequency texture (vessels).
    lungs = ph.lung_field(g, "right") | ph.lung_field(g, "left")
    tex = cv2.resize(rng.normal(0.0, 1.0, (24, 20)).astype(np.float32), (width, height),
                     interpolation=cv2.INTER_CUBIC)
    lung_val = 0.20 + 0.05 * (v - 0.45) ** 2 * 4 + 0.025 * tex
    img = np.where(lungs, lung_val, img)
    # Mediastinum / spine band and the heart.
    med = (np.abs(u - 0.5) <= 0.055 + 0.03 * v) & (v < 0.95) & body
    img = np.where(med, 0.78, img)
    img = np.where(ph.heart_mask(g), 0.80, img)
    # Ribs (posterior arcs) and clavicles, added on top.
    ribs = np.zeros_like(img)
    for lung in ph.lungs:
        d = (u - lung.cx) / (lung.hw * 1.3)
        phase = (v - 0.08 - 0.12 * d * d) / ph.rib_spacing + ph.rib_phase
        arc = np.clip(np.cos(2 * np.pi * phase), 0.0, 1.0) ** 6
        region = (np.abs(d) <= 1.0) & (v < lung.bottom + 0.02) & (np.abs(u - 0.5) > 0.07)
        ribs += np.where(region, arc, 0.0)
    clav = np.exp(-(((v - 0.14 - 0.10 * np.abs(u - 0.5)) / 0.012) ** 2)) * (
        (np.abs(u - 0.5) > 0.05) & (np.abs(u - 0.5) < 0.33))
    img = img + 0.12 * ribs * body + 0.22 * clav
    # Lesions as soft densities (overlapping findings saturate at MAX_LESION_DENSITY).
    density = np.zeros_like(img)
    for spec, factor in lesions:
        if spec.lesion == "cardiomegaly":
            continue
        amp, sigma = LESION_LOOK[spec.lesion]
        m = lesion_mask(g, ph, spec).astype(np.float32)
        density += amp * factor * _blur(m, sigma * width)
    img = img + np.minimum(density, MAX_LESION_DENSITY)
    img = _blur(img.astype(np.float32), 0.0015 * width)
    img = img + rng.normal(0.0, 0.012, img.shape).astype(np.float32)
    return np.clip(np.round(img * 255.0), 0, 255).astype(np.uint8)
