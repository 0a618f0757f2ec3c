"""The README and docs link rather than repeat: every relative markdown link in a tracked page
names a file that exists and, with ``#anchor``, a heading of that file (GitHub's anchor rule)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
#: ``[text](target)``, not an image; the target has no spaces.
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")


def anchor(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _prose_lines(path: Path) -> list[tuple[int, str]]:
    """(line number, line) outside fenced code blocks."""
    out, fenced = [], False
    for i, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if line.lstrip().startswith("```"):
            fenced = not fenced
        elif not fenced:
            out.append((i, line))
    return out


def anchors(path: Path) -> set[str]:
    """Every heading anchor of a markdown file; a repeated heading gets ``-1``, ``-2``, ..."""
    seen: dict[str, int] = {}
    for _, line in _prose_lines(path):
        match = re.match(r"#{1,6}\s+(.+)", line)
        if match:
            slug = anchor(match.group(1))
            seen[slug] = seen.get(slug, -1) + 1
            if seen[slug]:
                seen[f"{slug}-{seen[slug]}"] = 0
    return set(seen)


def _tracked_markdown() -> list[Path]:
    out = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard",
                          "*.md"], cwd=ROOT, capture_output=True, text=True,
                         check=True).stdout.split()
    return [ROOT / f for f in out if (ROOT / f).is_file()]


def test_anchor_follows_github_rules():
    assert anchor("Evaluating a model (Stage 03)") == "evaluating-a-model-stage-03"
    assert anchor("OpenAI-compatible servers (vLLM, SGLang)") == (
        "openai-compatible-servers-vllm-sglang")
    assert anchor("`ApiConfig`") == "apiconfig"
    assert anchor("Building the benchmark (Stages 00-02)") == "building-the-benchmark-stages-00-02"


def test_repeated_headings_get_numbered_anchors(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("# Title\n## Files\n```\n## not a heading\n```\n## Files\n", encoding="utf-8")
    assert anchors(page) == {"title", "files", "files-1"}


def test_every_relative_link_resolves():
    bad = []
    for page in _tracked_markdown():
        for number, line in _prose_lines(page):
            for target in LINK.findall(line):
                if re.match(r"[a-z]+:", target):
                    continue  # https://, mailto:
                path, _, fragment = target.partition("#")
                dest = (page.parent / path).resolve() if path else page
                where = f"{page.relative_to(ROOT)}:{number}: {target}"
                if not dest.exists():
                    bad.append(f"{where} (no such file)")
                elif fragment and (dest.suffix != ".md" or fragment not in anchors(dest)):
                    bad.append(f"{where} (no such heading)")
    assert bad == []


def test_readme_contents_list_every_section():
    readme = ROOT / "README.md"
    lines = _prose_lines(readme)
    sections = [anchor(line[3:]) for _, line in lines if line.startswith("## ")]
    text = "\n".join(line for _, line in lines)
    contents = text[text.index("**Contents**"):text.index("\n## ")]
    assert sections, "README.md has no sections"
    assert [s for s in sections if f"(#{s})" not in contents] == []


def test_readme_stays_a_front_page_of_at_most_300_lines():
    # issue 31 item 5: details live in docs/, the README gives one line and a link each
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 300, f"README.md has {len(lines)} lines; move details to docs/"
