"""A held-out corpus of raw model replies with the answer a careful human reader takes from each.

Unlike ``parser_replies.py`` (which states what the strict parser returns, rule by rule), each
row here states what a careful human reads: ``human`` is the option set (1-based, sorted) that
the reply commits to, or ``None`` where a careful reader would not commit to an answer (a
hedge, a refusal, a reply cut off before its answer, a contradiction, an answer retracted
without a replacement, or prose that never picks an option). The rows were written as the
model families below write (verbose markdown, prose, headings, terse option text, chat-template
tokens, think blocks), over the benchmark's real question kinds and option texts
(``parser_replies.OPTIONS``; the question stems are in ``chexpercept.qa._text``), without
looking at what the parser does with them. Replies a careful reader could take either way are
left out rather than guessed.

``benchmarks/bench_parser_corpus.py`` measures the parser against this corpus and
``test_parser_corpus.py`` checks it.
"""

from __future__ import annotations

from typing import NamedTuple

from parser_replies import OPTIONS

from chexpercept.qa import _text

#: Model families of the corpus, in table order.
FAMILIES = ("gpt-4o", "claude", "gemini", "qwen2.5-vl", "internvl", "llava-med", "medgemma",
            "huatuogpt-vision", "reasoning")

#: Question kinds asked as multi-select (expansion / contraction points, location;
#: ``chexpercept.schema.MULTI_SELECT``). All other kinds are single choice.
MULTI_SELECT_KINDS = frozenset({"points", "location"})

#: Finish reasons the rows use (``None`` when the provider gave none).
FINISH_REASONS = (None, "stop", "length")


class CorpusReply(NamedTuple):
    """One raw reply and the answer a careful human reads from it (``None``: no commitment)."""

    family: str
    kind: str
    multi_select: bool
    raw: str
    human: tuple[int, ...] | None
    finish_reason: str | None = None
    note: str = ""
    #: For ``points`` rows: the question the reply answers (``expansion`` or ``contraction``).
    points_question: str = "expansion"


S, M = False, True  # single choice / multi-select
LEN = "length"


def none_index(kind: str) -> int | None:
    """The 1-based "None" option of a multi-select kind (its text starts with "None"), else None."""
    if kind not in MULTI_SELECT_KINDS:
        return None
    return next((i for i, text in enumerate(OPTIONS[kind], 1) if text.startswith("None")), None)


def question_text(row: CorpusReply) -> str:
    """The question ``row`` answers, as Stage 03 asks it (stem and options; lesion
    consolidation, right lung)."""
    stems = {"yes_no": _text.contour_eval_stem, "masks": _text.revision_result_stem,
             "zones": _text.distribution_stem, "location": _text.location_stem,
             "comparison": _text.comparison_stem,
             "points": (_text.contraction_stem if row.points_question == "contraction"
                        else _text.expansion_stem)}
    stem = (_text.severity_stem("consolidation", "right lung") if row.kind == "severity"
            else stems[row.kind]("consolidation"))
    return _text.with_options(stem, OPTIONS[row.kind])


def call_kwargs(row: CorpusReply) -> dict:
    """Keyword arguments of ``parse_answer`` for ``row`` (as Stage 03 passes them)."""
    options = OPTIONS[row.kind]
    return {"num_options": len(options), "multi_select": row.multi_select,
            "option_texts": options, "none_index": none_index(row.kind),
            "finish_reason": row.finish_reason, "question": question_text(row)}


CORPUS: list[CorpusReply] = [
    # ------------------------------------------------------------------ gpt-4o
    CorpusReply("gpt-4o", "yes_no", S,
                "### Findings\n\n"
                "- There is a homogeneous opacity in the right lower zone obscuring the right "
                "hemidiaphragm.\n"
                "- The right costophrenic angle is blunted, with a meniscus extending up to the "
                "level of the 8th posterior rib.\n"
                "- The left lung is clear; no pneumothorax.\n\n"
                "These findings are consistent with a moderate right pleural effusion.\n\n"
                "**Answer: 1**",
                (1,), "stop", "detection; rib number in the findings"),
    CorpusReply("gpt-4o", "masks", S,
                "Comparing the four revised masks:\n\n"
                "1. **1st mask** – still extends past the lateral pleural edge.\n"
                "2. **2nd mask** – grows toward the red point and pulls back from the yellow "
                "point, as required.\n"
                "3. **3rd mask** – expands correctly but keeps the area around the yellow point.\n"
                "4. **4th mask** – contracts at the yellow point but does not expand toward the "
                "red point.\n\n"
                "**Answer: 2** because the other masks each miss one of the two required changes.",
                (2,), "stop", "enumerated walk through all options before the answer"),
    CorpusReply("gpt-4o", "zones", S,
                "**Answer: 3**\n\n"
                "The airspace opacity involves the right upper, right mid and right lower zones; "
                "the left lung is spared, so 3 of the 6 zones are involved.",
                (3,), "stop", "explanation with a zone count out of six"),
    CorpusReply("gpt-4o", "points", M,
                "The mask needs to grow where the consolidation extends beyond the current "
                "overlay.\n\n"
                "- **Red point**: lies on dense opacity lateral to the mask edge → expansion "
                "needed.\n"
                "- **Orange point**: over normally aerated lung at the level of the 6th anterior "
                "rib → no expansion.\n"
                "- **Yellow point**: on the opacity abutting the right heart border → expansion "
                "needed.\n\n"
                "**Answer: 1, 3**",
                (1, 3), "stop", "expansion"),
    CorpusReply("gpt-4o", "severity", S,
                "The effusion occupies the lateral costophrenic recess and the lower portion of "
                "the right hemithorax up to roughly the 10th posterior rib. Excluding the cardiac "
                "silhouette, this is well under a third of the right lung area (roughly 15–20%)."
                "\n\n**Answer: 1** (Less than 1/3 of the right lung area)",
                (1,), "stop", "option text echoed in brackets"),
    CorpusReply("gpt-4o", "comparison", S,
                "Both lungs show patchy opacities. The right-sided opacity spans the mid and lower "
                "zones, while the left-sided opacity is confined to a small area in the left "
                "lower zone. The right lesion is clearly more than 1.5 times the size of the left "
                "one.\n\n"
                "**Answer: 3** – The right lung lesion is larger than the left lung lesion.",
                (3,), "stop"),
    CorpusReply("gpt-4o", "location", M,
                "**Answer: 1 and 2** (the right costophrenic angle and the right lateral mid zone; "
                "option 3 is spared)\n\n"
                "The opacity tracks along the lateral chest wall from the costophrenic angle up "
                "to the mid zone; the left upper zone is clear.",
                (1, 2), "stop", "bracket names an unchosen option as spared"),
    CorpusReply("gpt-4o", "yes_no", S,
                "The cyan overlay follows the opacity closely, with only a minor deviation (a few "
                "millimeters) at the lateral border near the 7th rib. That would not count as a "
                "major revision.\n\n**Answer: (2) No**",
                (2,), "stop", "contour evaluation; number plus option text"),
    CorpusReply("gpt-4o", "masks", S,
                "Both the 2nd and 3rd masks look similar at first glance, but the 3rd mask still "
                "includes the area at the yellow point, which should have been removed.\n\n"
                "**Answer: 2** (not 3)",
                (2,), "stop", "answer with an explicit exclusion"),
    CorpusReply("gpt-4o", "points", M,
                "None of the three points lies on an area that the mask covers but that is not "
                "consolidation: the red and orange points are outside the mask, and the yellow "
                "point sits on true consolidation inside it.\n\n**Answer: 4** (None)",
                (4,), "stop", "contraction; None option by number"),
    CorpusReply("gpt-4o", "masks", S,
                "The 2nd and 3rd masks both appear to apply the expansion toward the red point. "
                "The difference is at the yellow point, where the image resolution makes it hard "
                "to judge whether the contraction was applied.\n\n**Answer: 2 or 3**",
                None, "stop", "hedge"),
    CorpusReply("gpt-4o", "yes_no", S,
                "I'm sorry, but I can't help with interpreting this medical image. For an "
                "accurate assessment, please consult a qualified radiologist.",
                None, "stop", "refusal"),
    CorpusReply("gpt-4o", "zones", S,
                "### Zone-by-zone assessment\n\n"
                "- **Right upper zone**: clear, normal vascular markings.\n"
                "- **Right mid zone**: patchy airspace opacity lateral to the hilum.\n"
                "- **Right lower zone**: confluent opacity obscuring the right hemidiaphragm.\n"
                "- **Left upper zone**: there is a faint hazy density projecting over the 2nd "
                "anterior rib, which could represent",
                None, LEN, "cut off mid-list"),
    CorpusReply("gpt-4o", "masks", S,
                "The mask that best applies both the expansion at the red point and the "
                "contraction at the orange point is the one shown third in the sequence.\n\n"
                "**Answer: 2** (3rd mask)",
                None, "stop", "number and mask name disagree"),
    CorpusReply("gpt-4o", "severity", S,
                "Excluding the heart, the consolidation occupies the right mid and lower zones, "
                "approximately 40–50% of the right lung area.\n\n"
                "**Answer: 2** — 1/3 or more but less than 2/3 of the right lung area",
                (2,), "stop"),
    CorpusReply("gpt-4o", "comparison", S,
                "The left-sided opacity is very faint and may represent overlapping soft tissue "
                "rather than a true lesion. If it is real, the two lesions are of similar size; "
                "if not, the lesion is only in the right lung.\n\n"
                "**Answer: 1 or 4**, depending on whether the left-sided density is a true lesion.",
                None, "stop", "conditional hedge"),
    CorpusReply("gpt-4o", "yes_no", S,
                "**Question:** Does the mask need a major revision?\n\n"
                "**Options:**\n(1) Yes\n(2) No\n\n"
                "The overlay omits the entire lower third of the effusion below the 9th posterior "
                "rib and does not reach the costophrenic angle.\n\n**Answer: 1**",
                (1,), "stop", "option list echoed before the answer"),
    CorpusReply("gpt-4o", "location", M,
                "The opacity is in the left lower zone behind the heart; it doesn't involve the "
                "right costophrenic angle, the right lateral mid zone, or the left upper zone.\n\n"
                "**Answer: 4** – None of the above (options 1-3)",
                (4,), "stop"),
    CorpusReply("gpt-4o", "points", M,
                "**Answer:** The red and yellow points.\n\n"
                "Both lie on consolidated lung outside the current mask boundary; the orange point "
                "is on normal lung.",
                (1, 3), "stop", "colour words joined by and"),
    CorpusReply("gpt-4o", "masks", S,
                "**Answer: 3**\n\n"
                "Actually, I'm no longer sure: the 2nd mask could equally be right, since it also "
                "removes the area at the orange point. I can't decide between them.",
                None, "stop", "retraction without a replacement"),

    # ------------------------------------------------------------------ claude
    CorpusReply("claude", "masks", S,
                "Looking at the four candidate masks, the key requirements are an expansion "
                "toward the red point (the unmasked opacity along the lateral chest wall) and a "
                "contraction away from the orange point (which sits over aerated lung near the "
                "hilum).\n\n"
                "The 1st mask expands correctly but still covers the orange point. The 3rd and "
                "4th masks both leave the lateral opacity uncovered. I would select option 2, "
                "since the second mask is the only one that applies both changes.",
                (2,), "stop", "prose commitment, no Answer line"),
    CorpusReply("claude", "yes_no", S,
                "Looking at this chest X-ray, I can see a blunted left costophrenic angle with a "
                "meniscus sign extending up the lateral chest wall, which is characteristic of a "
                "pleural effusion. The right side appears clear.\n\n"
                "The best choice is **(1) Yes**.",
                (1,), "stop"),
    CorpusReply("claude", "zones", S,
                "The opacity involves the right lower zone and the left lower zone, with the "
                "upper and mid zones clear bilaterally. That gives two of the six zones.\n\n"
                "**Answer: 2**",
                (2,), "stop"),
    CorpusReply("claude", "points", M,
                "The mask should be expanded toward the red and yellow points: both sit on "
                "opacity that the current overlay doesn't cover. The orange point is already "
                "inside the region the mask covers, so it doesn't need expansion.\n\n"
                "Answer: 1, 3",
                (1, 3), "stop"),
    CorpusReply("claude", "points", M,
                "The mask covers two areas that don't look like atelectasis to me: the region at "
                "the red point, which is normal lung overlying the 5th anterior rib, and the "
                "region at the orange point near the hilum, which is vascular shadowing. The "
                "yellow point is on true atelectasis.\n\n"
                "So I would select the red point and the orange point.",
                (1, 2), "stop", "contraction; prose commitment by colour"),
    CorpusReply("claude", "severity", S,
                "Leaving out the cardiac silhouette, the effusion occupies the lower portion of "
                "the right hemithorax, up to about the level of the hilum. I'd estimate that's "
                "roughly half of the right lung area.\n\n"
                "Answer: 2 (1/3 or more but less than 2/3 of the right lung area)",
                (2,), "stop"),
    CorpusReply("claude", "comparison", S,
                "The opacity in the right lung spans the lower zone and part of the mid zone, "
                "while the left-sided opacity is a small focus at the left base. The right lesion "
                "looks at least twice the size of the left, so the 1.5× threshold is clearly "
                "met.\n\n"
                "I would go with option 3: the right lung lesion is larger than the left lung "
                "lesion.",
                (3,), "stop"),
    CorpusReply("claude", "location", M,
                "The consolidation sits at the right costophrenic angle and doesn't extend to the "
                "lateral mid zone or to the left upper zone.\n\n**Answer: 1**",
                (1,), "stop"),
    CorpusReply("claude", "yes_no", S,
                "The cyan mask captures the bulk of the effusion, but it stops short of the "
                "costophrenic angle and misses the lateral meniscus by a substantial margin. "
                "That's more than a minor adjustment.\n\n"
                "Yes, the mask needs a major revision.\n\nAnswer: 1",
                (1,), "stop"),
    CorpusReply("claude", "masks", S,
                "Of the revised masks, Mask #2 is the one that grows toward the red point without "
                "also swallowing the aerated lung at the yellow point. Mask #1 and Mask #4 each "
                "miss the expansion, and Mask #3 over-expands past the pleural line.\n\n"
                "My answer is Mask #2.",
                (2,), "stop", "mask names with #"),
    CorpusReply("claude", "yes_no", S,
                "I'm not able to provide a diagnostic interpretation of medical images. If you're "
                "working with a real patient's chest X-ray, please have it reviewed by a "
                "qualified radiologist who can take the full clinical context into account.",
                None, "stop", "refusal"),
    CorpusReply("claude", "masks", S,
                "This is a difficult call. The 2nd and 3rd masks differ only at the inferior "
                "margin near the costophrenic angle, and at this resolution I can't reliably "
                "tell which one applies the contraction correctly.\n\n"
                "I'm torn between 2 and 3, and I don't want to overstate my confidence here.",
                None, "stop", "hedge between two options"),
    CorpusReply("claude", "zones", S,
                "Answer: 3\n\n"
                "Actually, looking again at the left lower zone, I'm no longer confident the "
                "haziness there is part of the lesion rather than overlying breast tissue. If it "
                "isn't, the answer would be 2. I can't resolve this from the image alone.",
                None, "stop", "retraction with a conditional alternative"),
    CorpusReply("claude", "severity", S,
                "Let me work through this carefully.\n\n"
                "First, I'll identify the extent of the right lung, excluding the heart. The "
                "right hemidiaphragm is at the level of the 10th posterior rib, and the lung apex "
                "is clear.\n\n"
                "The consolidation occupies the right lower zone and extends superiorly into the "
                "mid zone along the lateral aspect. Estimating the fraction, the",
                None, LEN, "cut off mid-reasoning"),
    CorpusReply("claude", "yes_no", S,
                "I don't see convincing evidence of pneumonia here. The lungs are clear "
                "bilaterally, both costophrenic angles are sharp, and the heart size is normal. "
                "The small round density over the left 4th anterior rib looks like a nipple "
                "shadow rather than consolidation.\n\nAnswer: 2",
                (2,), "stop", "detection, negative"),
    CorpusReply("claude", "comparison", S,
                "On balance I'd say the lesions are similar in size, so option 1, although "
                "strictly by the 1.5× rule the left one is larger, so option 2.",
                None, "stop", "two different answers in one sentence"),
    CorpusReply("claude", "points", M,
                "None of the points need contraction. The mask sits entirely on the "
                "consolidation — the red, orange, and yellow points are each on lesion that "
                "should stay in the mask.\n\nAnswer: None",
                (4,), "stop", points_question="contraction"),
    CorpusReply("claude", "zones", S,
                "The effusion is confined to the left lower zone; the meniscus doesn't rise above "
                "the level of the left hilum. I would select option 1, since only one of the six "
                "zones is involved.",
                (1,), "stop", "prose commitment"),
    CorpusReply("claude", "masks", S,
                "**Answer: 4**\n\n"
                "The 4th mask is the only one that both expands laterally toward the red point "
                "and contracts away from the yellow point near the heart border. The 1st and 2nd "
                "masks leave the lateral opacity uncovered, and the 3rd mask keeps the area "
                "around the yellow point.",
                (4,), "stop", "explanation names every other mask"),
    CorpusReply("claude", "location", M,
                "The opacity is clearly at the right costophrenic angle. Whether it also reaches "
                "the intersection of the right lateral lung and the right mid zone is hard to "
                "say — the upper edge fades gradually.\n\nAnswer: 1, possibly 2",
                None, "stop", "hedged second option"),

    # ------------------------------------------------------------------ gemini
    CorpusReply("gemini", "points", M,
                "### Analysis\n\n"
                "*   **Red point:** Located on the consolidation lateral to the current mask edge. "
                "The mask should expand here.\n"
                "*   **Orange point:** In normally aerated lung above the minor fissure. No change "
                "needed.\n"
                "*   **Yellow point:** On the consolidation near the right hemidiaphragm, outside "
                "the mask.\n\n"
                "### Answer\n**1, 3**",
                (1, 3), "stop", "answer under a heading"),
    CorpusReply("gemini", "yes_no", S,
                "### Assessment\n\n"
                "*   **Costophrenic angles:** The right costophrenic angle is blunted.\n"
                "*   **Meniscus sign:** Present on the right.\n"
                "*   **Mediastinum:** No shift.\n\n"
                "### Answer\n**Yes** – there is a finding suggestive of pleural effusion on the "
                "right.",
                (1,), "stop"),
    CorpusReply("gemini", "masks", S,
                "### Comparison of Revised Masks\n\n"
                "| Mask | Expands toward red point | Contracts from orange point |\n"
                "|---|---|---|\n"
                "| 1st mask | No | Yes |\n"
                "| 2nd mask | Yes | No |\n"
                "| 3rd mask | Yes | Yes |\n"
                "| 4th mask | No | No |\n\n"
                "### Answer\n**3** (3rd mask)",
                (3,), "stop", "table with every option before the answer"),
    CorpusReply("gemini", "zones", S,
                "### Zone Assessment\n\n"
                "*   Right upper zone: clear\n"
                "*   Right mid zone: involved\n"
                "*   Right lower zone: involved\n"
                "*   Left upper zone: clear\n"
                "*   Left mid zone: clear\n"
                "*   Left lower zone: involved\n\n"
                "Total involved zones: 3\n\n"
                "### Answer\n**3**",
                (3,), "stop"),
    CorpusReply("gemini", "severity", S,
                "### Severity\n\n"
                "The opacity covers the majority of the right lung, sparing only the apex. "
                "Excluding the heart, this is well above two-thirds.\n\n"
                "**Final Answer: 3**",
                (3,), "stop"),
    CorpusReply("gemini", "comparison", S,
                "### Answer\n"
                "**4: The lesion is present in only one lung (left or right).**\n\n"
                "### Rationale\n"
                "*   The left lung shows a focal opacity in the lower zone.\n"
                "*   The right lung is clear, with no comparable lesion.\n"
                "*   Options 1–3 assume lesions in both lungs.",
                (4,), "stop", "rationale after the answer names the other options"),
    CorpusReply("gemini", "location", M,
                "### Answer\n**2, 3**\n\n"
                "### Explanation\n"
                "*   **Option 1 (right costophrenic angle):** sharp, not involved.\n"
                "*   **Option 2:** the opacity reaches the right lateral lung at the mid zone.\n"
                "*   **Option 3:** a second focus is at the left medial upper zone.\n"
                "*   **Option 4** does not apply since options 2 and 3 are involved.",
                (2, 3), "stop", "per-option explanation after the answer"),
    CorpusReply("gemini", "yes_no", S,
                "### Evaluation of the Cyan Mask\n\n"
                "*   The mask covers the consolidation in the right lower lobe.\n"
                "*   The inferior border is accurate.\n"
                "*   Minor discrepancy at the lateral margin (about 3 mm), which does not require "
                "a major revision.\n\n"
                "### Answer\n**2 (No)**",
                (2,), "stop"),
    CorpusReply("gemini", "points", M,
                "### Answer\n**None**\n\n"
                "The mask already covers all of the atelectasis; the red, orange and yellow "
                "points are all on normal lung that is correctly left outside the mask.",
                (4,), "stop", "expansion; None"),
    CorpusReply("gemini", "points", M,
                "### Answer\nThe red and yellow points.\n\n"
                "Both are located on portions of the effusion that extend beyond the current mask "
                "boundary.",
                (1, 3), "stop"),
    CorpusReply("gemini", "yes_no", S,
                "I can't provide medical interpretations of X-ray images. I'm a large language "
                "model and not a substitute for a qualified healthcare professional. Please "
                "consult a radiologist for an accurate reading.",
                None, "stop", "refusal"),
    CorpusReply("gemini", "masks", S,
                "### Analysis\n\n"
                "*   The 2nd and 3rd masks both expand toward the red point.\n"
                "*   Both appear to contract at the yellow point, but the resolution makes the "
                "difference hard to see.\n\n"
                "### Answer\n**2/3**",
                None, "stop", "slash hedge"),
    CorpusReply("gemini", "comparison", S,
                "### Step 1: Identify the lesions\n\n"
                "*   **Right lung:** A patchy opacity in the right mid zone, roughly 4 cm in "
                "diameter.\n"
                "*   **Left lung:** A smaller opacity in the left lower zone.\n\n"
                "### Step 2: Compare sizes\n\n"
                "*   The right-sided lesion appears larger, but to apply the 1.5× rule we need to",
                None, LEN, "cut off before the answer"),
    CorpusReply("gemini", "yes_no", S,
                "### Answer\n**1 (No)**",
                None, "stop", "number and option text disagree"),
    CorpusReply("gemini", "zones", S,
                "### Answer\n*   **Option 2: 2 zones**\n\n"
                "### Reasoning\n"
                "*   The effusion occupies the left lower zone and extends into the left mid "
                "zone.\n"
                "*   The right lung is clear.",
                (2,), "stop", "answer as a bullet"),
    CorpusReply("gemini", "severity", S,
                "### Answer\n**Less than 1/3 of the right lung area**\n\n"
                "The consolidation is confined to a small region in the right lower zone adjacent "
                "to the costophrenic angle.",
                (1,), "stop", "option text only"),
    CorpusReply("gemini", "location", M,
                "### Answer\n"
                "It is not possible to determine the location reliably from this image alone. A "
                "lateral view would help to localize the opacity.\n\n"
                "*   The opacity may project over the right costophrenic angle, but it could also "
                "be in the posterior lower lobe.",
                None, "stop", "declines to pick"),
    CorpusReply("gemini", "masks", S,
                "### Answer\n**The 3rd mask**\n\n"
                "*   It is the only mask that extends to the lateral pleural margin at the red "
                "point.\n"
                "*   The 1st, 2nd and 4th masks all stop short of it.",
                (3,), "stop", "ordinal mask name"),
    CorpusReply("gemini", "yes_no", S,
                "### Findings\n\n"
                "*   Lungs are clear without focal consolidation.\n"
                "*   No pleural effusion or pneumothorax.\n"
                "*   Heart size is within normal limits.\n\n"
                "### Answer\n**2**",
                (2,), "stop"),
    CorpusReply("gemini", "comparison", S,
                "### Answer\n**3**\n\n"
                "### Note\n"
                "On re-inspection, the left-sided opacity may be larger than it first appears "
                "because part of it is hidden behind the heart. I cannot reliably say which "
                "lesion is larger.",
                None, "stop", "retraction"),

    # ------------------------------------------------------------------ qwen2.5-vl
    CorpusReply("qwen2.5-vl", "yes_no", S, "Answer: 1", (1,), "stop"),
    CorpusReply("qwen2.5-vl", "points", M, "Answer: 1,3", (1, 3), "stop"),
    CorpusReply("qwen2.5-vl", "masks", S, "Answer: 2<|im_end|>", (2,), "stop"),
    CorpusReply("qwen2.5-vl", "zones", S,
                "The lesion involves the right middle and lower zones.\nAnswer: 2",
                (2,), "stop"),
    CorpusReply("qwen2.5-vl", "severity", S,
                "Answer: 1. Less than 1/3 of the right lung area", (1,), "stop"),
    CorpusReply("qwen2.5-vl", "comparison", S, "Answer: 3", (3,), "stop"),
    CorpusReply("qwen2.5-vl", "location", M, "Answer: 1, 2", (1, 2), "stop"),
    CorpusReply("qwen2.5-vl", "yes_no", S, "No", (2,), "stop", "option text alone"),
    CorpusReply("qwen2.5-vl", "points", M, "red point, yellow point", (1, 3), "stop"),
    CorpusReply("qwen2.5-vl", "masks", S, "2nd mask", (2,), "stop"),
    CorpusReply("qwen2.5-vl", "yes_no", S, "Answer: (2) No", (2,), "stop"),
    CorpusReply("qwen2.5-vl", "zones", S, "Answer: 3 zones", (3,), "stop"),
    CorpusReply("qwen2.5-vl", "location", M, "None of the above (options 1-3)", (4,), "stop"),
    CorpusReply("qwen2.5-vl", "yes_no", S,
                "Answer: 1 because the mask misses the 2 lower zones of the effusion.",
                (1,), "stop", "count after because equals the other option's number"),
    CorpusReply("qwen2.5-vl", "masks", S, "Answer: 2 or 3", None, "stop", "hedge"),
    CorpusReply("qwen2.5-vl", "zones", S, "The opacity involves 2 or 3 zones.", None, "stop",
                "hedge"),
    CorpusReply("qwen2.5-vl", "yes_no", S, "I'm sorry, but I can't assist with that request.",
                None, "stop", "refusal"),
    CorpusReply("qwen2.5-vl", "yes_no", S,
                "The image shows a chest X-ray with a cyan segmentation mask overlaid on the right "
                "lower lung. The mask covers the area of the effusion, but the lateral edge of the "
                "mask",
                None, LEN, "cut off"),
    CorpusReply("qwen2.5-vl", "severity", S, "Answer: 1, 2", None, "stop",
                "two options on a single-choice question"),
    CorpusReply("qwen2.5-vl", "masks", S, "Answer: 5", None, "stop",
                "no such option (four masks)"),
    CorpusReply("qwen2.5-vl", "points", M, "Answer: 4", (4,), "stop", "None by number"),
    CorpusReply("qwen2.5-vl", "comparison", S,
                "The right lung lesion is larger than the left lung lesion.", (3,), "stop"),
    CorpusReply("qwen2.5-vl", "yes_no", S, "Options:\n(1) Yes\n(2) No\nAnswer: 2", (2,), "stop",
                "option list echoed before the answer"),

    # ------------------------------------------------------------------ internvl
    CorpusReply("internvl", "yes_no", S, "Yes", (1,), "stop"),
    CorpusReply("internvl", "yes_no", S, "(1) Yes", (1,), "stop"),
    CorpusReply("internvl", "yes_no", S, "(2) No", (2,), "stop"),
    CorpusReply("internvl", "masks", S, "(3) 3rd mask", (3,), "stop"),
    CorpusReply("internvl", "zones", S, "2 zones", (2,), "stop"),
    CorpusReply("internvl", "points", M, "(1) red point, (3) yellow point", (1, 3), "stop"),
    CorpusReply("internvl", "points", M, "None", (4,), "stop"),
    CorpusReply("internvl", "severity", S,
                "(2) 1/3 or more but less than 2/3 of the right lung area", (2,), "stop"),
    CorpusReply("internvl", "comparison", S,
                "(4) The lesion is present in only one lung (left or right).", (4,), "stop"),
    CorpusReply("internvl", "location", M, "(1) the right costophrenic angle", (1,), "stop"),
    CorpusReply("internvl", "masks", S, "Answer: 1st", (1,), "stop", "bare ordinal"),
    CorpusReply("internvl", "yes_no", S, "Answer: (1) Yes<|im_end|>", (1,), "stop"),
    CorpusReply("internvl", "points", M, "1, 2", (1, 2), "stop"),
    CorpusReply("internvl", "zones", S, "The answer is (3) 3 zones.", (3,), "stop"),
    CorpusReply("internvl", "yes_no", S,
                "Yes. The mask ends at the 9th rib while the effusion extends down to the "
                "costophrenic angle.",
                (1,), "stop", "contour evaluation; rib number in the reason"),
    CorpusReply("internvl", "severity", S, "Less than 1/3 of the right lung area", (1,), "stop"),
    CorpusReply("internvl", "masks", S, "(2) or (3)", None, "stop", "hedge"),
    CorpusReply("internvl", "yes_no", S, "I'm sorry, I cannot provide medical diagnoses.", None,
                "stop", "refusal"),
    CorpusReply("internvl", "yes_no", S,
                "The image is a frontal chest radiograph. There is increased opacity in the right "
                "lower lung field with blunting of the right costophrenic angle, and the cyan "
                "mask covers",
                None, LEN, "cut off"),
    CorpusReply("internvl", "yes_no", S, "(1) No", None, "stop",
                "number and option text disagree"),
    CorpusReply("internvl", "yes_no", S,
                "(2) No<|im_end|>\n<|im_start|>user\nWhich coloured point(s) mark consolidation "
                "that the mask does not cover yet?<|im_end|>\n<|im_start|>assistant\n(1) Yes",
                (2,), "stop", "model made up the next turns after its own"),
    CorpusReply("internvl", "location", M,
                "(1) the right costophrenic angle, (4) None of the above (options 1-3)", None,
                "stop", "None of the above together with an option"),

    # ------------------------------------------------------------------ llava-med
    CorpusReply("llava-med", "yes_no", S,
                "Yes, there is a right-sided pleural effusion. The chest X-ray shows blunting of "
                "the right costophrenic angle and a meniscus sign, which are typical findings of "
                "fluid accumulation in the pleural space. The left lung appears clear.",
                (1,), "stop", "option word opens a sentence"),
    CorpusReply("llava-med", "yes_no", S,
                "No. The contour of the cyan mask closely follows the boundaries of the "
                "consolidation in the left lower lobe, and only small adjustments would be needed "
                "at the edges.",
                (2,), "stop", "contour evaluation"),
    CorpusReply("llava-med", "yes_no", S,
                "No, there is no evidence of pneumonia in this chest X-ray. The lungs appear "
                "clear, the heart size is normal, and there are no signs of consolidation or "
                "infiltrates.",
                (2,), "stop"),
    CorpusReply("llava-med", "points", M,
                "The mask should be expanded toward the red point and the yellow point, as these "
                "areas show increased opacity consistent with consolidation that is not yet "
                "covered by the mask.",
                (1, 3), "stop", "prose commitment"),
    CorpusReply("llava-med", "masks", S,
                "The 2nd mask appears to be the most accurate revision, as it covers the area of "
                "the atelectasis in the right lower lobe while excluding the normal lung tissue "
                "near the heart border.",
                (2,), "stop"),
    CorpusReply("llava-med", "zones", S,
                "The lesion is seen in 2 zones, the right mid zone and the right lower zone. The "
                "upper zones and the left lung appear normal.",
                (2,), "stop"),
    CorpusReply("llava-med", "severity", S,
                "The effusion occupies less than 1/3 of the right lung area, mainly in the lower "
                "part near the diaphragm. The rest of the lung appears well aerated.",
                (1,), "stop"),
    CorpusReply("llava-med", "comparison", S,
                "The right lung lesion is larger than the left lung lesion. The opacity in the "
                "right lung involves a larger area in the lower zone, while the left lung shows "
                "only a small patchy opacity.",
                (3,), "stop"),
    CorpusReply("llava-med", "location", M,
                "The consolidation is located in the right costophrenic angle. There is also "
                "involvement of the right lateral lung in the mid zone, which suggests the "
                "infection has spread upward.",
                (1, 2), "stop"),
    CorpusReply("llava-med", "yes_no", S,
                "The chest X-ray shows some opacity in the lower part of the right lung. This "
                "could be due to various causes such as pneumonia, atelectasis, or pleural "
                "effusion. It is important to correlate these findings with the patient's "
                "clinical history and other diagnostic tests to determine the exact cause.",
                None, "stop", "describes without answering"),
    CorpusReply("llava-med", "yes_no", S,
                "Yes, the mask needs a major revision. The current mask covers only a small part "
                "of the opacity and does not include the lower portion of the lesion near the "
                "costophrenic angle.",
                (1,), "stop"),
    CorpusReply("llava-med", "masks", S,
                "Both the 2nd mask and the 3rd mask seem to cover the area of the edema well. It "
                "is difficult to say which one is more accurate without further clinical "
                "information.",
                None, "stop", "hedge"),
    CorpusReply("llava-med", "yes_no", S,
                "As an AI, I cannot provide a definitive medical diagnosis. Please consult a "
                "healthcare professional for an accurate interpretation of the chest X-ray.",
                None, "stop", "refusal"),
    CorpusReply("llava-med", "yes_no", S,
                "In the chest X-ray, there is a cyan mask overlay on the left lung. The mask "
                "seems to cover the area of the consolidation, which appears as a whiter region "
                "compared to the surrounding lung tissue. However, when comparing the mask with "
                "the actual borders of the consolidation, there are some areas where",
                None, LEN, "cut off"),
    CorpusReply("llava-med", "points", M,
                "None of the points need expansion. The mask already covers the entire area of "
                "the effusion, and the points are located on normal lung tissue.",
                (4,), "stop"),
    CorpusReply("llava-med", "zones", S,
                "The pneumonia involves 3 zones: the right lower zone, the left mid zone and the "
                "left lower zone. The upper zones on both sides are clear, and the heart is not "
                "enlarged.",
                (3,), "stop"),
    CorpusReply("llava-med", "severity", S,
                "The consolidation covers about one-third of the right lung area. It could be "
                "slightly less or slightly more than 1/3, depending on how the borders are "
                "defined.",
                None, "stop", "straddles the threshold"),
    CorpusReply("llava-med", "comparison", S,
                "Both lesions are similar in size. The opacities in the left and right lung bases "
                "appear to be of comparable extent, which is often seen in bilateral pulmonary "
                "edema.",
                (1,), "stop"),
    CorpusReply("llava-med", "masks", S,
                "Looking at the revised masks, the 4th mask shows the best fit for the "
                "atelectasis, as it includes the area near the red point and removes the area "
                "near the orange point, which corresponds to normal lung.",
                (4,), "stop"),
    CorpusReply("llava-med", "yes_no", S,
                "The mask covers part of the lesion. There may be some areas that are not "
                "included, and some areas of normal lung tissue may be included. Further "
                "evaluation by a radiologist is recommended.",
                None, "stop", "never says whether a major revision is needed"),

    # ------------------------------------------------------------------ medgemma
    CorpusReply("medgemma", "yes_no", S,
                "<unused94>thought\nThe user asks whether there is a finding suggestive of "
                "effusion. The right costophrenic angle is blunted and there is a meniscus along "
                "the lateral chest wall. This is consistent with a right pleural effusion."
                "<unused95>Answer: 1<end_of_turn>",
                (1,), "stop"),
    CorpusReply("medgemma", "masks", S,
                "<unused94>thought\nI need to compare the four revised masks. The original mask "
                "missed the opacity at the red point (lateral) and included normal lung at the "
                "yellow point (medial, near the heart border). The 1st mask only expands. The "
                "2nd mask only contracts. The 3rd mask does both. The 4th mask does neither."
                "<unused95>Answer: 3\n\nThe 3rd mask is the only one that expands toward the red "
                "point and contracts away from the yellow point.<end_of_turn>",
                (3,), "stop"),
    CorpusReply("medgemma", "points", M,
                "Answer: 1, 3\n\nThe red and yellow points lie on the consolidation outside the "
                "current mask boundary.<end_of_turn>",
                (1, 3), "stop"),
    CorpusReply("medgemma", "zones", S,
                "Based on the image, the opacity involves the left mid and left lower zones.\n\n"
                "Answer: 2<end_of_turn>\n<start_of_turn>user\nLeaving out the area taken by the "
                "heart, how much of the left lung area does the consolidation cover?"
                "<end_of_turn>\n<start_of_turn>model\nAnswer: 1",
                (2,), "stop", "model made up the next turns after its own"),
    CorpusReply("medgemma", "severity", S,
                "**Answer: 2**\n\n**Explanation:** Excluding the heart, the edema occupies the "
                "right mid and lower zones, roughly half of the right lung area.<end_of_turn>",
                (2,), "stop"),
    CorpusReply("medgemma", "comparison", S,
                "<unused94>thought\nRight lung: large opacity in the lower and mid zones. Left "
                "lung: small opacity at the base. Ratio clearly above 1.5.<unused95>"
                "**Answer: 3**<end_of_turn>",
                (3,), "stop"),
    CorpusReply("medgemma", "location", M,
                "Answer: 1\n\nThe opacity is confined to the right costophrenic angle. Options 2 "
                "and 3 are not involved.<end_of_turn>",
                (1,), "stop", "explanation line names the unchosen options"),
    CorpusReply("medgemma", "yes_no", S,
                "Yes. The cyan mask misses the inferior portion of the effusion below the level "
                "of the 9th rib and needs a major revision.<end_of_turn>",
                (1,), "stop"),
    CorpusReply("medgemma", "points", M,
                "<unused94>thought\nLet me look at the points one by one. The red point is on the "
                "lateral edge of the opacity. Is it inside the mask? The mask boundary is close. "
                "The orange point is in the mid zone, on what looks like aerated lung, but there "
                "is some faint haziness that could be",
                None, LEN, "thought block cut off"),
    CorpusReply("medgemma", "yes_no", S,
                "I am an AI assistant and cannot provide medical diagnoses. The interpretation of "
                "chest X-rays should be done by a qualified radiologist.<end_of_turn>",
                None, "stop", "refusal"),
    CorpusReply("medgemma", "severity", S,
                "Answer: 1 or 2\n\nThe lesion is close to the threshold of one-third of the right "
                "lung area.<end_of_turn>",
                None, "stop", "hedge"),
    CorpusReply("medgemma", "points", M,
                "<unused94>thought\nAll three points lie on lesion that the mask already "
                "includes, so no contraction is needed.<unused95>Answer: None<end_of_turn>",
                (4,), "stop", points_question="contraction"),
    CorpusReply("medgemma", "masks", S,
                "The 2nd mask best matches the required revision: it expands toward the red point "
                "and leaves the rest of the contour unchanged.\n\nAnswer: 2<end_of_turn>",
                (2,), "stop"),
    CorpusReply("medgemma", "zones", S,
                "<unused94>thought\nRight lower zone involved. Left lower zone maybe.<unused95>"
                "Answer: 2\n\nOn reflection, the left lower zone density may be the cardiac "
                "shadow rather than consolidation, in which case only one zone would be involved. "
                "I cannot determine this with confidence.<end_of_turn>",
                None, "stop", "retraction"),
    CorpusReply("medgemma", "yes_no", S,
                "<unused94>thought\nLungs clear. No consolidation. Costophrenic angles sharp."
                "<unused95>No, there is no consolidation visible in this chest X-ray."
                "<end_of_turn>",
                (2,), "stop"),
    CorpusReply("medgemma", "comparison", S,
                "Answer: 4 - The lesion is present in only one lung (left or right).\n\nThe "
                "opacity is seen only in the right lower zone; the left lung is clear."
                "<end_of_turn>",
                (4,), "stop"),
    CorpusReply("medgemma", "masks", S,
                "Answer: 2\n\nExplanation: The revised 2nd mask extends to the lateral pleural "
                "margin at the red point and removes the aerated lung at the orange point. The "
                "other masks either",
                (2,), LEN, "answer stated before the cut"),
    CorpusReply("medgemma", "masks", S,
                "The 2nd mask is correct, so the answer is 3.<end_of_turn>",
                None, "stop", "mask name and number disagree in one sentence"),
    CorpusReply("medgemma", "location", M,
                "Answer: 2, 3\n\nThe opacity involves the right lateral mid zone and the left "
                "medial upper zone.<end_of_turn>",
                (2, 3), "stop"),
    CorpusReply("medgemma", "severity", S,
                "<unused94>thought\nThe effusion is large, occupying most of the right hemithorax."
                "<unused95>2/3 or more of the right lung area<end_of_turn>",
                (3,), "stop"),

    # ------------------------------------------------------------------ huatuogpt-vision
    CorpusReply("huatuogpt-vision", "yes_no", S,
                "## Thinking\n\nThe chest X-ray shows a blunted right costophrenic angle with a "
                "fluid meniscus along the lateral chest wall. The left side is clear.\n\n"
                "## Final Response\n\nYes, there is a finding suggestive of pleural effusion on "
                "the right side.\n\nAnswer: 1",
                (1,), "stop"),
    CorpusReply("huatuogpt-vision", "masks", S,
                "## Thinking\n\nI compare each revised mask with the required changes: expansion "
                "toward the red point and contraction at the orange point. The 1st mask expands "
                "but keeps the orange region. The 2nd mask applies both. The 3rd mask contracts "
                "but does not expand. The 4th mask changes nothing at either point.\n\n"
                "## Final Response\n\nThe 2nd mask applies exactly the required expansion and "
                "contraction.\n\nAnswer: 2",
                (2,), "stop"),
    CorpusReply("huatuogpt-vision", "points", M,
                "## Thinking\n\nThe red point is on opacity lateral to the mask. The orange point "
                "is on opacity below the mask's inferior edge. The yellow point is on aerated "
                "lung.\n\n## Final Response\n\nThe mask should be expanded toward the red point "
                "and the orange point.",
                (1, 2), "stop", "prose commitment in the final response"),
    CorpusReply("huatuogpt-vision", "zones", S,
                "## Thinking\n\nRight upper: clear. Right mid: opacity. Right lower: opacity. "
                "Left upper: clear. Left mid: clear. Left lower: opacity.\n\n"
                "## Final Response\n\nThe answer is 3: three zones (right mid, right lower, left "
                "lower) contain the opacity.",
                (3,), "stop"),
    CorpusReply("huatuogpt-vision", "severity", S,
                "## Thinking\n\nThe effusion is small and confined to the right costophrenic "
                "recess, below the level of the 10th posterior rib.\n\n"
                "## Final Response\n\nAnswer: 1 (Less than 1/3 of the right lung area)",
                (1,), "stop"),
    CorpusReply("huatuogpt-vision", "comparison", S,
                "## Thinking\n\nThe left and right basal opacities are of comparable extent; "
                "neither is 1.5 times the other.\n\n"
                "## Final Response\n\nBoth lesions are similar in size.\n\nAnswer: 1",
                (1,), "stop"),
    CorpusReply("huatuogpt-vision", "location", M,
                "## Thinking\n\nThe opacity is in the left upper zone, near the mediastinum.\n\n"
                "## Final Response\n\nAnswer: 3\n\nThe opacity is at the intersection of the left "
                "medial lung and the left upper zone; the right costophrenic angle and the right "
                "lateral mid zone are clear.",
                (3,), "stop"),
    CorpusReply("huatuogpt-vision", "yes_no", S,
                "## Thinking\n\nThe cyan mask follows the edema closely except for a thin rim at "
                "the lateral edge.\n\n## Final Response\n\nNo. The mask outlines the edema well; "
                "only minor refinement at the lateral edge would be needed.",
                (2,), "stop"),
    CorpusReply("huatuogpt-vision", "yes_no", S,
                "## Thinking\n\nFirst, I need to evaluate whether the cyan mask outlines the "
                "consolidation correctly. The consolidation is in the left lower lobe, obscuring "
                "the left hemidiaphragm. The mask covers the upper portion of the consolidation "
                "but",
                None, LEN, "cut off while thinking"),
    CorpusReply("huatuogpt-vision", "yes_no", S,
                "## Thinking\n\nThe user is asking me to interpret a chest X-ray.\n\n"
                "## Final Response\n\nI'm sorry, but I cannot provide a medical diagnosis based "
                "on this image. Please consult a radiologist.",
                None, "stop", "refusal"),
    CorpusReply("huatuogpt-vision", "severity", S,
                "## Thinking\n\nThe opacity covers roughly a third of the right lung.\n\n"
                "## Final Response\n\nThe answer is either 1 or 2: the opacity is borderline in "
                "size relative to a third of the right lung.",
                None, "stop", "hedge"),
    CorpusReply("huatuogpt-vision", "masks", S,
                "## Thinking\n\nThe 3rd mask expands at the red point and removes the yellow "
                "region.\n\n## Final Response\n\nAnswer: 3\n\nHowever, the 4th mask could also be "
                "correct, since it also removes the area at the yellow point. I cannot decide "
                "between the 3rd and 4th masks.",
                None, "stop", "retraction"),
    CorpusReply("huatuogpt-vision", "points", M,
                "## Thinking\n\nEach point lies on atelectasis that belongs inside the mask.\n\n"
                "## Final Response\n\nNone. The mask does not need contraction at any of the "
                "points.",
                (4,), "stop", points_question="contraction"),
    CorpusReply("huatuogpt-vision", "masks", S,
                "## Thinking\n\nOnly one revised mask both grows laterally and pulls back from "
                "the heart border.\n\n## Final Response\n\nThe 4th mask best matches the required "
                "revisions.\n\nAnswer: 4",
                (4,), "stop"),
    CorpusReply("huatuogpt-vision", "zones", S,
                "## Thinking\n\nThe effusion rises from the left base into the left mid zone."
                "\n\n## Final Response\n\n**Answer: 2**\n\nThe effusion spans 2 zones: the left "
                "mid and left lower zones.",
                (2,), "stop"),
    CorpusReply("huatuogpt-vision", "comparison", S,
                "## Thinking\n\nThe left lung opacity looks larger, but part of it is behind the "
                "heart.\n\n## Final Response\n\nThe left lung lesion appears larger, but because "
                "part of it is hidden behind the heart, it may also be similar in size to the "
                "right lung lesion. Answer: 2 or 1.",
                None, "stop", "hedge"),
    CorpusReply("huatuogpt-vision", "yes_no", S,
                "## Thinking\n\nNo focal airspace opacity is seen. The lung fields are clear.\n\n"
                "## Final Response\n\nNo, there is no opacity in this image.",
                (2,), "stop"),
    CorpusReply("huatuogpt-vision", "location", M,
                "## Thinking\n\nThe consolidation occupies the right base laterally and extends "
                "up the lateral chest wall.\n\n## Final Response\n\nThe consolidation involves "
                "the right costophrenic angle and the intersection of the right lateral lung and "
                "the right mid zone lung.\n\nAnswer: 1, 2",
                (1, 2), "stop"),
    CorpusReply("huatuogpt-vision", "masks", S,
                "## Thinking\n\nThe 1st revised mask follows the lesion outline best.\n\n"
                "## Final Response\n\nAnswer: (1) 1st mask",
                (1,), "stop"),
    CorpusReply("huatuogpt-vision", "zones", S,
                "## Thinking\n\nLet me count the zones. The right upper zone is clear. The right "
                "mid zone has a patchy opacity. The right lower zone",
                None, LEN, "cut off while thinking"),

    # ------------------------------------------------------------------ reasoning
    CorpusReply("reasoning", "yes_no", S,
                "<think>\nThe question asks whether the mask needs a major revision. The cyan "
                "overlay stops at the level of the 8th posterior rib, but the effusion continues "
                "down to the costophrenic angle. That leaves the lower third of the effusion "
                "uncovered, which is a major miss.\n</think>\n\nAnswer: 1",
                (1,), "stop"),
    CorpusReply("reasoning", "masks", S,
                "<think>\nRequired: expand at red, contract at yellow. Mask 1 expands only. Mask 2 "
                "does both. Mask 3 contracts only. Mask 4 does neither.\n</think>\n\n"
                "The 2nd mask is the only one that applies both the expansion at the red point and "
                "the contraction at the yellow point.\n\n\\boxed{2}",
                (2,), "stop", "boxed"),
    CorpusReply("reasoning", "masks", S,
                "<think>\nThe 2nd mask looks like it expands toward the red point.\n</think>\n\n"
                "Answer: 2\n\nOn second look, the 2nd mask still includes the aerated lung at the "
                "orange point, which should have been removed. The 3rd mask removes it and also "
                "expands toward the red point, so the answer is 3.",
                (3,), "stop", "self-correction replaces the answer"),
    CorpusReply("reasoning", "points", M,
                "<think>\nRed point: on consolidation outside the mask → expand. Orange: normal "
                "lung. Yellow: on consolidation outside the mask → expand.\n</think>\n\n"
                "Answer: 1, 3",
                (1, 3), "stop"),
    CorpusReply("reasoning", "zones", S,
                "<think>\nRight lower zone: yes. Right mid zone: yes. Left lower zone: yes, the "
                "retrocardiac opacity. Upper zones: clear. So three zones.\n</think>\n\n"
                "**Final Answer**\n\\boxed{3}",
                (3,), "stop"),
    CorpusReply("reasoning", "severity", S,
                "<think>\nThe consolidation is a small focus at the right base, maybe 10% of the "
                "right lung.\n</think>\n\nThe lesion covers well under a third of the right lung "
                "area.\n\n$\\boxed{1}$",
                (1,), "stop"),
    CorpusReply("reasoning", "comparison", S,
                "<think>\nThe right lesion spans two zones; the left is a small nodule-like "
                "opacity. Ratio well above 1.5.\n</think>\n\nThe right lung lesion is at least "
                "1.5 times the size of the left one.\n\nAnswer: 3",
                (3,), "stop"),
    CorpusReply("reasoning", "location", M,
                "<think>\nThe opacity sits at the right costophrenic angle and climbs the lateral "
                "chest wall to the mid zone. The left upper zone is clear.\n</think>\n\n"
                "Answer: 1, 2",
                (1, 2), "stop"),
    CorpusReply("reasoning", "points", M,
                "<think>\nWhich points are inside the mask but not on consolidation? Only the "
                "orange one.\n</think>\n\nAnswer: 2 (orange point), because the mask covers "
                "aerated lung there; the red and yellow points are on true consolidation.",
                (2,), "stop", "contraction; explanation names the unchosen points",
                points_question="contraction"),
    CorpusReply("reasoning", "yes_no", S,
                "<think>\nOkay, let's look at the image. The cyan mask covers the right lower "
                "zone. The question is whether it needs a major revision. Looking at the lateral "
                "border, the mask seems to extend beyond the pleural line. But wait, maybe "
                "that's the",
                None, LEN, "think block cut off"),
    CorpusReply("reasoning", "yes_no", S,
                "<think>\nThe user wants a diagnostic read.\n</think>\n\nI'm sorry, but I can't "
                "provide a diagnostic interpretation of medical images.",
                None, "stop", "refusal"),
    CorpusReply("reasoning", "masks", S,
                "<think>\nMasks 2 and 3 are nearly identical at this resolution.\n</think>\n\n"
                "The answer is either 2 or 3; the image does not allow a definite choice.",
                None, "stop", "hedge"),
    CorpusReply("reasoning", "masks", S,
                "<think>\nThe 3rd mask grows toward the red point and pulls back at the orange "
                "point.\n</think>\n\nAnswer: 3\n\nActually, I'm no longer sure: the 2nd mask could "
                "equally be right, since its lower edge also follows the meniscus. I can't decide "
                "between them.",
                None, "stop", "retraction without a replacement"),
    CorpusReply("reasoning", "points", M,
                "<think>\nThe red point is on aerated lung. The orange point is inside the mask "
                "already. So the answer should be 3? Hmm, wait: the yellow point is also on "
                "normal lung, not on the effusion. So no point needs expansion.\n</think>\n\n"
                "Answer: None",
                (4,), "stop", "answer inside the think block revised after it"),
    CorpusReply("reasoning", "zones", S,
                "Answer: 2\n\nWait, I missed the left lower zone: the retrocardiac opacity there "
                "is also part of the lesion. That makes three zones, so the answer is 3.",
                (3,), "stop", "self-correction without a think block"),
    CorpusReply("reasoning", "zones", S,
                "<think>\nRight lower and right mid are involved. There may be a faint lateral "
                "opacity in the right upper zone too.\n</think>\n\nThe final answer is 2, or 3 if "
                "the faint opacity in the right upper zone is counted.",
                None, "stop", "two answers in one sentence"),
    CorpusReply("reasoning", "yes_no", S,
                "<think>\nThe lungs are clear; no effusion.\n</think>\n\n$\\boxed{\\text{No}}$",
                (2,), "stop", "boxed option text"),
    CorpusReply("reasoning", "comparison", S,
                "<think>\nOnly the left lung has an opacity; the right is clear. Options 1 to 3 "
                "all need a lesion in both lungs.\n</think>\n\nThe lesion is present in the left "
                "lung only.\n\n\\boxed{4}",
                (4,), "stop"),
    CorpusReply("reasoning", "masks", S,
                "<think>\nMask 2 matches.\n</think>\n\nAnswer: 2\n\nThe 2nd mask follows the "
                "meniscus and",
                (2,), LEN, "answer stated before the cut"),
    CorpusReply("reasoning", "points", M,
                "<think>\nNo point is on lesion outside the mask.\n</think>\n\nAnswer: None",
                (4,), "stop"),
    CorpusReply("reasoning", "masks", S,
                "<think>\nMasks 1 and 4 both look plausible.\n</think>\n\nAnswer: 1 or 4, the "
                "image is not clear enough to distinguish them.",
                None, "stop", "hedge"),
    CorpusReply("reasoning", "severity", S,
                "<think>\nThe effusion rises from the costophrenic angle to about the 6th "
                "posterior rib.\n</think>\n\nAnswer: 2 because the effusion rises from the "
                "costophrenic angle to the 6th posterior rib, about half of the right lung.",
                (2,), "stop", "rib number after because"),
]


def problems(rows: list[CorpusReply] = CORPUS) -> list[str]:
    """What is malformed in ``rows`` (empty when the corpus is well-formed)."""
    out: list[str] = []
    seen: set[tuple[str, str]] = set()
    for i, row in enumerate(rows):
        where = f"row {i} ({row.family}, {row.kind})"
        if row.family not in FAMILIES:
            out.append(f"{where}: unknown family")
        if row.kind not in OPTIONS:
            out.append(f"{where}: unknown kind")
            continue
        if row.multi_select != (row.kind in MULTI_SELECT_KINDS):
            out.append(f"{where}: multi_select={row.multi_select} is wrong for the kind")
        if row.finish_reason not in FINISH_REASONS:
            out.append(f"{where}: finish reason {row.finish_reason!r}")
        if not row.raw.strip():
            out.append(f"{where}: empty raw text")
        if (row.kind, row.raw) in seen:
            out.append(f"{where}: duplicate raw text")
        seen.add((row.kind, row.raw))
        if row.human is None:
            continue
        n = len(OPTIONS[row.kind])
        if not row.human or tuple(sorted(set(row.human))) != row.human:
            out.append(f"{where}: human answer {row.human} is not sorted and distinct")
        if any(not 1 <= k <= n for k in row.human):
            out.append(f"{where}: human answer {row.human} outside 1..{n}")
        if not row.multi_select and len(row.human) != 1:
            out.append(f"{where}: single choice with {row.human}")
        none = none_index(row.kind)
        if none is not None and none in row.human and len(row.human) > 1:
            out.append(f"{where}: the None option together with others in {row.human}")
    return out
