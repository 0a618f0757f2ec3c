"""Documentation ships with the code: citations name docs/ sections that exist, never a file the
repository does not ship."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
#: Files of the original release's reference set, which this repository does not ship.
UNSHIPPED = re.compile(r"original_release_spec|paper_notes\.md|components\.md|harness_anchors"
                       r"|style_anchors|shared/reference|STYLE\.md|spec section \d|defect \d")
#: ``docs/<name>.md, "<Section>"`` (the section may wrap onto the next comment line), or with
#: single quotes inside a message string; a citation split across two string literals is
#: skipped (its section starts the next literal).
CITATION = re.compile(r"docs/([a-z_]+)\.md,?\s*(?:#:\s*)?(?:\"([^\"]+)\"|'([^'\n]+)')")
DIFFERENCE = re.compile(r"differences\.md,?\s+(D\d+)")


def _tracked_text_files() -> list[Path]:
    out = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True,
                         check=True).stdout.split()
    suffixes = {".py", ".md", ".sh", ".yml", ".yaml", ".toml", ".txt", ".cfg"}
    return [ROOT / f for f in out if Path(f).suffix in suffixes and (ROOT / f).is_file()]


def _sections(doc: Path) -> set[str]:
    return {line[3:].strip() for line in doc.read_text(encoding="utf-8").splitlines()
            if line.startswith("## ") or line.startswith("### ")}


def test_no_citation_of_a_file_the_repository_does_not_ship():
    bad = [f"{p.relative_to(ROOT)}:{i}: {line.strip()[:90]}"
           for p in _tracked_text_files() if p.name != Path(__file__).name
           for i, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1)
           if UNSHIPPED.search(line)]
    assert bad == []


def test_every_docs_citation_names_a_section_that_exists():
    docs = {p.stem: _sections(p) for p in (ROOT / "docs").glob("*.md")}
    entries = set(re.findall(r"^\*\*(D\d+)\.", (ROOT / "docs" / "differences.md")
                             .read_text(encoding="utf-8"), re.M))
    assert len(entries) >= 40
    bad = []
    for path in _tracked_text_files():
        text = path.read_text(encoding="utf-8")
        for name, double, single in CITATION.findall(text):
            if double.lstrip().startswith("f") and double.startswith("\n"):
                continue  # the end of one f-string literal and the start of the next
            section = " ".join(w for w in (double or single).split()
                               if w not in ("#", "#:")).strip(" .")
            if name not in docs:
                bad.append(f"{path.relative_to(ROOT)}: docs/{name}.md does not exist")
            elif section not in docs[name] and not any(s.startswith(section)
                                                      for s in docs[name]):
                bad.append(f"{path.relative_to(ROOT)}: docs/{name}.md has no section "
                           f"{section!r}")
        bad += [f"{path.relative_to(ROOT)}: docs/differences.md has no entry {d}"
                for d in DIFFERENCE.findall(text) if d not in entries]
    assert bad == []
