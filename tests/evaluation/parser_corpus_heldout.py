"""A second held-out corpus of raw replies, written without seeing ``parser_corpus.py``'s rows.

Each row is a ``parser_corpus.CorpusReply``: ``human`` is the option set (1-based, sorted) that a
careful human reads from the reply, or ``None`` where a careful reader would not commit (a
hedge, a retraction, a contradiction, a refusal, a reply cut off before its answer, an echo of
the options, or a finding that does not answer the question). The replies imitate ten model
families other than those of ``parser_corpus.py`` over the benchmark's real question kinds and
option texts (``parser_replies.OPTIONS``; stems in ``chexpercept.qa._text``, lesion
consolidation, right lung). They were written before running the parser on them and their
``human`` readings were not changed after seeing what it returns. Replies that a careful reader
could take either way (a bare letter, a finding that only implies an option) were left out.

``benchmarks/bench_parser_corpus.py --corpus heldout`` measures the parser against this
corpus; ``test_parser_corpus_heldout.py`` pins its figures.
"""

from __future__ import annotations

from parser_corpus import FINISH_REASONS, MULTI_SELECT_KINDS, CorpusReply, none_index
from parser_corpus import problems as _corpus_problems
from parser_replies import OPTIONS

#: Model families of this corpus, in table order.
FAMILIES = ("gpt-4.1", "claude-sonnet", "gemini-2.5", "qwen3-vl", "internvl3", "llava-onevision",
            "medgemma-27b", "lingshu", "radfm", "chexagent")

S, M = False, True  # single choice / multi-select
LEN = "length"
CON = "contraction"

_R = CorpusReply

CORPUS: list[CorpusReply] = [
    # ------------------------------------------------------------------ gpt-4.1
    _R("gpt-4.1", "yes_no", S,
       "**Answer: (1) Yes**\n\nThe cyan overlay misses most of the consolidation in the right "
       "lower "
       "zone and extends over the hilum, so it needs a major revision rather than a touch-up.",
       (1,), "stop", "bold answer with echo"),
    _R("gpt-4.1", "points", M,
       "**Selected points:** red point, yellow point\n\n- Red point: sits on dense consolidation "
       "lateral to the mask edge, not covered.\n- Orange point: already inside the mask.\n- Yellow "
       "point: consolidation along the costophrenic region outside the mask.\n\n**Answer:** 1, 3",
       (1, 3), "stop", "bullets then answer"),
    _R("gpt-4.1", "masks", S,
       "Comparing the four candidates:\n\n1. **1st mask** \u2013 expands laterally but doesn't "
       "trim "
       "the hilar region.\n2. **2nd mask** \u2013 trims the hilum but over-expands into the apex.\n"
       "3. **3rd mask** \u2013 applies both the lateral expansion and the hilar contraction.\n4. "
       "**4th mask** \u2013 unchanged from the original.\n\n**Answer: 3**",
       (3,), "stop", "enumeration of all options then answer"),
    _R("gpt-4.1", "zones", S,
       "The consolidation involves the right mid and right lower zones; the upper zone and the "
       "entire left lung are clear.\n\nAnswer: (2) 2 zones",
       (2,), "stop", "answer line with echo"),
    _R("gpt-4.1", "severity", S,
       "Answer: 1/3 or more but less than 2/3 of the right lung area\n\nExcluding the cardiac "
       "silhouette, the opacity occupies roughly half of the right lung field.",
       (2,), "stop", "option text on answer line"),
    _R("gpt-4.1", "location", M,
       "Answer: 1\n\nThe consolidation blunts the right costophrenic angle. It does not reach the "
       "lateral mid-zone intersection (option 2), and the left lung is clear (option 3).",
       (1,), "stop", "explanation names excluded options"),
    _R("gpt-4.1", "comparison", S,
       "**Final answer:** (3) The right lung lesion is larger than the left lung lesion.\n\nThe "
       "right-sided consolidation is roughly twice the area of the small left basal focus, which "
       "exceeds the 1.5\u00d7 threshold.",
       (3,), "stop", "final answer, number in explanation"),
    _R("gpt-4.1", "yes_no", S,
       "It's difficult to say definitively. The mask captures the core of the consolidation, but "
       "the margins are uncertain at this resolution. If the lateral edge is truly part of the "
       "lesion, it would need a major revision; otherwise minor adjustments might suffice.",
       None, "stop", "conditional, no commitment"),
    _R("gpt-4.1", "points", M,
       "Answer: None\n\nNone of the three points lie on tissue that the mask covers in error; each "
       "marks consolidation correctly included in the mask.",
       (4,), "stop", "contraction none", CON),
    _R("gpt-4.1", "masks", S,
       "I'm sorry, but I can't determine which revised mask is correct from the images provided, "
       "as the overlays are too low-resolution to compare.",
       None, "stop", "refusal"),
    _R("gpt-4.1", "zones", S,
       "Answer: 3 zones\n\nOn closer inspection, the opacity in the right upper zone is likely a "
       "vessel, so only the mid and lower zones are involved \u2014 that would make it 2 zones. "
       "I'm not fully confident either way.",
       None, "stop", "answer undermined, no replacement committed"),
    _R("gpt-4.1", "severity", S,
       "Let me analyze the extent of the consolidation.\n\n1. **Right lung area**: The right lung, "
       "excluding the heart, spans from the apex to the costophrenic angle.\n2. **Consolidation "
       "extent**: The opacity extends from the",
       None, LEN, "cut off before an answer"),
    _R("gpt-4.1", "comparison", S,
       "The left lung lesion is larger than the right lung lesion. The left lower lobe "
       "consolidation is about 1.8 times the size of the right-sided opacity.\n\nAnswer: 2",
       (2,), "stop", "option text sentence and answer line agree"),
    _R("gpt-4.1", "location", M,
       "**Answer:** 1 and 2\n\n- (1) The right costophrenic angle is blunted by consolidation.\n- "
       "(2) The opacity extends to the lateral right mid zone.\n- (3) The left upper zone is "
       "clear.",
       (1, 2), "stop", "answer then bullets naming every option"),
    _R("gpt-4.1", "points", M,
       "Answer: 2\n\nWait \u2014 looking again, the orange point is already inside the cyan "
       "overlay. The uncovered consolidation is at the red point.\n\nFinal answer: 1",
       (1,), "stop", "self-correction, later final answer"),
    _R("gpt-4.1", "yes_no", S,
       "No, the mask does not need a major revision. It outlines the consolidation well, with "
       "only minor boundary discrepancies at the lateral margin.",
       (2,), "stop", "leading No sentence"),
    _R("gpt-4.1", "masks", S,
       "The 2nd mask and the 4th mask both look plausible: the 2nd applies the lateral expansion "
       "while the 4th also trims the hilum. Without a clearer view of the original mask I can't "
       "tell which applies exactly the needed changes.",
       None, "stop", "two options discussed, none chosen"),
    _R("gpt-4.1", "masks", S,
       "The best choice is the second one \u2014 it's the only mask that trims the hilar overlap "
       "while extending to the lateral consolidation. The 1st and 3rd masks only expand, and the "
       "4th is unchanged.",
       (2,), "stop", "word ordinal 'the second one'"),
    _R("gpt-4.1", "yes_no", S,
       "**Answer: Yes**\n\nThe mask needs a major revision because it excludes the dense "
       "consolidation at the right base and includes part of the",
       (1,), LEN, "answer before the cut"),
    # ------------------------------------------------------------------ claude-sonnet
    _R("claude-sonnet", "yes_no", S,
       "Looking at the cyan overlay, it covers only the upper portion of the consolidation and "
       "leaves the dense lower-zone opacity outside the outline. That's a substantial miss, not a "
       "minor edge discrepancy.\n\n**Answer: Yes** \u2014 the mask needs a major revision.",
       (1,), "stop", "prose then bold answer"),
    _R("claude-sonnet", "points", M,
       "Let me go through each point:\n\n- **Red point**: lies on consolidated lung just beyond "
       "the "
       "lateral edge of the mask \u2014 the mask should expand toward it.\n- **Orange point**: "
       "this is on normal-appearing lung, so no expansion is needed there.\n- **Yellow point**: "
       "also on consolidation outside the mask.\n\nSo the mask should be expanded toward the red "
       "and yellow points.\n\nAnswer: 1, 3",
       (1, 3), "stop", "point walk-through then answer"),
    _R("claude-sonnet", "masks", S,
       "I'd choose the 2nd mask. It's the only one that both extends inferiorly to cover the basal "
       "consolidation and pulls back from the mediastinal border; the 1st mask only expands, and "
       "the 3rd and 4th over-correct.",
       (2,), "stop", "I'd choose, others named after"),
    _R("claude-sonnet", "zones", S,
       "The consolidation appears confined to the right lower zone. The mid zone shows normal "
       "lung markings and the left lung is clear.\n\nAnswer: 1 zone",
       (1,), "stop", "answer option text"),
    _R("claude-sonnet", "severity", S,
       "I need to be honest about the limits here: estimating area fractions from a single frontal "
       "view is imprecise. That said, the consolidation spans from the base up to roughly the "
       "level of the hilum, which is a bit under half the lung.\n\nMy answer is option 2: 1/3 or "
       "more but less than 2/3 of the right lung area.",
       (2,), "stop", "'My answer is option 2' after a caveat"),
    _R("claude-sonnet", "location", M,
       "The consolidation sits at the right costophrenic angle and tracks up along the lateral "
       "chest wall into the mid zone. The left upper zone is clear.\n\n**Answer: 1, 2**",
       (1, 2), "stop", "bold answer"),
    _R("claude-sonnet", "comparison", S,
       "Both lungs show consolidation. The right-sided opacity is a bit larger, but I'd estimate "
       "it "
       "at about 1.2\u20131.3 times the left \u2014 below the 1.5\u00d7 threshold the question "
       "specifies. So they count as similar.\n\n**Answer: 1**",
       (1,), "stop", "numbers in reasoning, answer 1"),
    _R("claude-sonnet", "yes_no", S,
       "This is a borderline case. The mask misses a thin rim of consolidation laterally, which "
       "some readers would call a minor revision and others a major one. I don't think I can give "
       "a confident yes or no here.",
       None, "stop", "explicit non-commitment"),
    _R("claude-sonnet", "points", M,
       "Checking each point against the overlay: the red, orange and yellow points all lie on "
       "genuine consolidation inside the mask, so there's nothing the mask should be contracted "
       "away from.\n\nAnswer: None",
       (4,), "stop", "contraction none", CON),
    _R("claude-sonnet", "masks", S,
       "Between the 1st and 3rd masks, I lean toward the 3rd, but the 1st is also a reasonable "
       "reading of the needed changes. I'd want a closer look at the hilar region before "
       "committing.",
       None, "stop", "leaning, explicitly not committing"),
    _R("claude-sonnet", "zones", S,
       "My first impression was 3 zones, since the opacity seems to reach the right upper zone. "
       "Looking more carefully, though, that upper density is the clavicle and first rib "
       "overlapping normal lung. The consolidation occupies the right mid and lower zones only.\n\n"
       "**Answer: 2 zones**",
       (2,), "stop", "first impression revised"),
    _R("claude-sonnet", "severity", S,
       "Answer: 3\n\nActually, I'm not sure about that. The lower part of the opacity may be a "
       "pleural effusion rather than consolidation, which would shrink the consolidated area "
       "considerably. I can't reliably choose between the options.",
       None, "stop", "answer retracted"),
    _R("claude-sonnet", "comparison", S,
       "I'm not able to compare the lesion sizes reliably here \u2014 the image I received doesn't "
       "clearly show a left-sided lesion, and I'd rather not guess.",
       None, "stop", "refusal"),
    _R("claude-sonnet", "location", M,
       "I don't see consolidation at any of the three listed regions: the costophrenic angle is "
       "sharp, the lateral mid zone is clear, and the left upper zone is normal. The opacity is "
       "centred in the right perihilar region instead.\n\nAnswer: 4 (None of the above)",
       (4,), "stop", "none with shortened echo"),
    _R("claude-sonnet", "points", M,
       "Let me examine each coloured point relative to the cyan mask.\n\n**Red point** \u2014 "
       "located at the right lung base, lateral to the mask. The underlying lung looks",
       None, LEN, "cut off mid-walk-through"),
    _R("claude-sonnet", "yes_no", S,
       "**Answer: No**\n\nThe mask traces the consolidation closely. If it had missed the "
       "retrocardiac portion, I'd have said yes, but the heart overlap is excluded by the question "
       "anyway.",
       (2,), "stop", "counterfactual mentions the other option"),
    _R("claude-sonnet", "masks", S,
       "The 4th mask is the best match: it grows toward the lateral consolidation and trims the "
       "part that overlapped the heart border, exactly the two changes needed.",
       (4,), "stop", "'is the best match'"),
    _R("claude-sonnet", "points", M,
       "None of the points need expansion \u2014 each one already falls inside the cyan outline or "
       "on clearly normal lung.\n\n**Answer: None**",
       (4,), "stop", "expansion none"),
    _R("claude-sonnet", "yes_no", S,
       "No \u2014 wait, I misread the overlay. The cyan outline stops at the hilum and leaves the "
       "whole lower-zone consolidation uncovered. So yes, it needs a major revision.\n\n"
       "**Answer: Yes**",
       (1,), "stop", "No, wait, yes, then Answer: Yes"),
    # ------------------------------------------------------------------ gemini-2.5
    _R("gemini-2.5", "yes_no", S,
       "## Analysis\n\n*   **Mask coverage:** The cyan overlay covers the upper part of the "
       "consolidation.\n*   **Missed area:** A large portion of the opacity at the right base is "
       "outside the mask.\n\n## Conclusion\n\nThe mask needs a major revision.\n\n**Final Answer: "
       "(1) Yes**",
       (1,), "stop", "headings and final answer"),
    _R("gemini-2.5", "points", M,
       "### Point-by-point assessment\n\n| Point | Location | Covered by mask? | Consolidation? |\n"
       "|---|---|---|---|\n| Red | Right lateral base | No | Yes |\n| Orange | Right hilum | Yes | "
       "Yes |\n| Yellow | Right apex | No | No |\n\nThe mask should be expanded toward the red "
       "point only.\n\n**Final Answer:** red point",
       (1,), "stop", "markdown table with Yes/No cells"),
    _R("gemini-2.5", "masks", S,
       "The correct option is **(2) 2nd mask**, as it is the only candidate that includes the "
       "inferolateral extension while excluding the region over the cardiac silhouette.",
       (2,), "stop", "correct option is"),
    _R("gemini-2.5", "zones", S,
       "**Zones involved:**\n*   Right upper zone: clear\n*   Right mid zone: consolidation\n*   "
       "Right lower zone: consolidation\n*   Left upper zone: clear\n*   Left mid zone: "
       "consolidation\n*   Left lower zone: clear\n\nTotal: 3 zones.\n\n**Final Answer:** 3 zones",
       (3,), "stop", "zone checklist"),
    _R("gemini-2.5", "severity", S,
       "**Answer:** Less than 1/3 of the right lung area\n\nThe consolidation is limited to a "
       "small "
       "patch at the right base, well under a third of the lung.",
       (1,), "stop", "option text"),
    _R("gemini-2.5", "location", M,
       "Based on the image, the consolidation is present in:\n*   the right costophrenic angle\n*  "
       " "
       "the intersection of the right lateral lung and the right mid zone lung\n\nThe left upper "
       "zone is clear.\n\n**Final Answer:** (1), (2)",
       (1, 2), "stop", "bulleted option texts then final answer"),
    _R("gemini-2.5", "comparison", S,
       "## Comparison\n\nThe left-sided consolidation is extensive, involving most of the left "
       "lower lobe, while the right lung shows only a small focus. The ratio is well above 1.5.\n\n"
       "**Final Answer:** The left lung lesion is larger than the right lung lesion.",
       (2,), "stop", "final answer option text"),
    _R("gemini-2.5", "yes_no", S,
       "## Assessment\n\nThe mask appears to cover the majority of the consolidation, although the "
       "inferior margin is indistinct.\n\n## Conclusion\n\nWhether this requires a *major* "
       "revision depends on how strictly the boundary is judged. Both options are defensible.",
       None, "stop", "both options defensible"),
    _R("gemini-2.5", "points", M,
       "### Contraction analysis\n\n*   **Red point:** lies on the heart border, which the mask "
       "covers but which is not consolidation \u2192 contract.\n*   **Orange point:** genuine "
       "consolidation \u2192 keep.\n*   **Yellow point:** rib shadow inside the mask, not "
       "consolidation \u2192 contract.\n\n**Final Answer:** 1, 3",
       (1, 3), "stop", "contraction two points", CON),
    _R("gemini-2.5", "masks", S,
       "## Evaluating the revised masks\n\n### 1st mask\nExpands laterally toward the chest wall. "
       "Does not remove the hilar overlap.\n\n### 2nd mask\nRemoves the hilar overlap and expands "
       "laterally. This appears to\n",
       None, LEN, "cut off before committing"),
    _R("gemini-2.5", "zones", S,
       "The consolidation clearly involves the right lower zone, and there is possible extension "
       "into the right mid zone.\n\n**Final Answer:** 1 zone or 2 zones",
       None, "stop", "hedged final answer"),
    _R("gemini-2.5", "severity", S,
       "The correct answer is **(3) 2/3 or more of the right lung area**. The right hemithorax is "
       "almost completely opacified, with only a sliver of aerated lung at the apex.",
       (3,), "stop", "correct answer is"),
    _R("gemini-2.5", "comparison", S,
       "The right-sided lesion looks larger, but without precise area measurements it's unclear "
       "whether it meets the 1.5\u00d7 threshold. The answer is therefore either (1) or (3).",
       None, "stop", "either 1 or 3"),
    _R("gemini-2.5", "location", M,
       "**Final Answer:** (4) None of the above (options 1-3)\n\nThe consolidation is located in "
       "the "
       "left lower zone, which does not match any of options 1-3.",
       (4,), "stop", "none option with its parenthetical"),
    _R("gemini-2.5", "points", M,
       "All three points lie within the current mask or on normal lung. No expansion is required."
       "\n\n**Final Answer:** None",
       (4,), "stop", "expansion none"),
    _R("gemini-2.5", "yes_no", S,
       "**No**\n\nThe mask outlines the consolidation accurately; only minor refinements at the "
       "lateral edge would be needed.",
       (2,), "stop", "bold bare No"),
    _R("gemini-2.5", "masks", S,
       "## Observations\n\n*   The 1st mask adds the lateral region.\n*   The 3rd mask removes the "
       "hilar overlap.\n*   The 4th mask does both, but also spills into the costophrenic "
       "angle.\n\n"
       "None of the candidates apply exactly the needed changes.",
       None, "stop", "options discussed, none chosen"),
    _R("gemini-2.5", "zones", S,
       "The consolidation occupies four or more zones: the entire right lung and the left lower "
       "zone.\n\n**Final Answer:** (4) 4 zones or more",
       (4,), "stop", "4 zones or more"),
    # ------------------------------------------------------------------ qwen3-vl
    _R("qwen3-vl", "yes_no", S,
       "<think>\nThe cyan mask covers the right upper zone but the consolidation is mostly in the "
       "lower zone. So the mask misses much of it. That's a major revision. Answer should be 1.\n"
       "</think>\n\nYes. The mask misses most of the consolidation in the right lower zone, so it "
       "needs a major revision.",
       (1,), "stop", "think then leading Yes"),
    _R("qwen3-vl", "points", M,
       "<think>\nRed point: outside mask, on consolidation. Orange point: inside mask. Yellow "
       "point: "
       "outside mask, on consolidation. So red and yellow. Options 1 and 3.\n</think>\n\nThe mask "
       "should be expanded toward the red point and the yellow point.\n\nAnswer: 1, 3",
       (1, 3), "stop", "think then answer"),
    _R("qwen3-vl", "masks", S,
       "<think>\nThe needed changes: expand toward red, contract at yellow. 1st mask: expands "
       "only. "
       "2nd: contracts only. 3rd: both. 4th: neither. So 3rd mask.\n</think>\n\nAnswer: 3",
       (3,), "stop", "think then answer"),
    _R("qwen3-vl", "zones", S,
       "<think>\nLet me count zones. Right upper: no. Right mid: yes. Right lower: yes. Left: "
       "none. "
       "So 2 zones. But wait, is the right mid really involved? The opacity extends up to the "
       "hilum "
       "level... hmm, let me reconsider.\n",
       None, "stop", "unclosed think, stopped"),
    _R("qwen3-vl", "severity", S,
       "<think>\nThe right lung area excluding heart. The consolidation covers the lower half "
       "roughly. That's between 1/3 and 2/3. So option 2. Let me double-check the upper boundary "
       "of "
       "the opacity: it reaches the 4th anterior rib, which is about",
       None, LEN, "unclosed think, length"),
    _R("qwen3-vl", "location", M,
       "<think>\nCostophrenic angle blunted, yes. Lateral mid zone: opacity present. Left upper: "
       "clear.\n</think>\n\nAnswer: 1, 2\n\nThe consolidation occupies the right costophrenic "
       "angle "
       "and extends to the lateral mid zone; the left upper zone is clear.",
       (1, 2), "stop", "think, answer, explanation"),
    _R("qwen3-vl", "comparison", S,
       "<think>\nLeft lesion about 3x2 cm, right lesion about 6x4 cm. Right is 4 times larger by "
       "area. So option 3.\n</think>\n\n**Answer:** (3) The right lung lesion is larger than the "
       "left lung lesion.",
       (3,), "stop", "think with measurements"),
    _R("qwen3-vl", "yes_no", S,
       "<think>\nThe mask seems fine... actually it misses the lower part. So yes, major "
       "revision.\n"
       "</think>\n\nAnswer: No\n\nThe mask adequately outlines the consolidation.",
       (2,), "stop", "final response differs from the think; final response counts"),
    _R("qwen3-vl", "points", M,
       "<think>\nWhich points are covered by the mask but not consolidation? Red: on the heart "
       "border inside mask \u2014 not consolidation. Orange: consolidation. Yellow: "
       "consolidation.\n"
       "</think>\n\nThe mask should be contracted away from the red point.\n\nAnswer: red point",
       (1,), "stop", "contraction red", CON),
    _R("qwen3-vl", "masks", S,
       "<think>\nHmm, 2nd mask or 4th mask. 2nd expands laterally but doesn't contract. 4th "
       "expands "
       "and contracts. The needed changes were expansion toward red and contraction at orange. So "
       "the 4th.\n</think>\n\n\\boxed{4}",
       (4,), "stop", "boxed after think"),
    _R("qwen3-vl", "zones", S,
       "<think>\nOpacity in right lower zone only.\n</think>\n\n\\boxed{1}",
       (1,), "stop", "boxed"),
    _R("qwen3-vl", "severity", S,
       "<think>\nIt covers about a third. Could be option 1 or 2.\n</think>\n\nThe consolidation "
       "covers roughly one third of the right lung area, right at the boundary between options 1 "
       "and 2, so I cannot decide between them.",
       None, "stop", "cannot decide"),
    _R("qwen3-vl", "comparison", S,
       "<think>\nOnly the right lung has consolidation. The left lung is clear.\n</think>\n\nThe "
       "lesion is present in only one lung (left or right).",
       (4,), "stop", "bare option text"),
    _R("qwen3-vl", "location", M,
       "<think>\nLet me look at each region. The right costophrenic angle: there is blunting, "
       "which "
       "could be effusion or consolidation. The intersection of the right lateral lung and right "
       "mid zone: there is",
       None, LEN, "think cut off"),
    _R("qwen3-vl", "points", M,
       "<think>\nAll points inside the mask already. No expansion.\n</think>\n\nAnswer: 4",
       (4,), "stop", "none by number"),
    _R("qwen3-vl", "yes_no", S,
       "<think>\nThe mask looks accurate.\n</think>\n\nNo<|im_end|>\n<|im_start|>user\nAre you "
       "sure?<|im_end|>\n<|im_start|>assistant\nYes",
       (2,), "stop", "hallucinated next turns after im_end"),
    _R("qwen3-vl", "masks", S,
       "<think>\nThe 1st and 3rd masks look identical at this resolution.\n</think>\n\nEither the "
       "1st mask or the 3rd mask; they appear identical.",
       None, "stop", "either/or"),
    _R("qwen3-vl", "zones", S,
       "<think>\nRight upper clear, right mid and lower involved, left lower involved. 3 zones.\n"
       "</think>\n\nAnswer: 3 zones\n\nThe right mid, right lower and left lower zones are "
       "involved; the other 3 zones are clear.",
       (3,), "stop", "explanation repeats the number"),
    # ------------------------------------------------------------------ internvl3
    _R("internvl3", "yes_no", S, "Yes", (1,), "stop", "bare"),
    _R("internvl3", "yes_no", S, "(2) No", (2,), "stop", "echo"),
    _R("internvl3", "points", M, "red point, yellow point", (1, 3), "stop", "option texts"),
    _R("internvl3", "masks", S, "The answer is 2.", (2,), "stop", "answer is"),
    _R("internvl3", "zones", S, "2 zones", (2,), "stop", "bare option text"),
    _R("internvl3", "severity", S, "Less than 1/3 of the right lung area.", (1,), "stop",
       "option text with period"),
    _R("internvl3", "location", M, "1, 2", (1, 2), "stop", "bare list"),
    _R("internvl3", "comparison", S,
       "(3) The right lung lesion is larger than the left lung lesion.", (3,), "stop", "echo"),
    _R("internvl3", "points", M, "None", (4,), "stop", "contraction none", CON),
    _R("internvl3", "masks", S, "2 or 3", None, "stop", "hedge"),
    _R("internvl3", "zones", S, "The consolidation is seen in 3 zones.", (3,), "stop",
       "prose option text"),
    _R("internvl3", "yes_no", S, "Yes. No.", None, "stop", "contradiction"),
    _R("internvl3", "masks", S, "10", None, "stop", "out of range"),
    _R("internvl3", "location", M, "the right costophrenic angle", (1,), "stop", "option text"),
    _R("internvl3", "comparison", S, "Both lesions are similar in size.", (1,), "stop",
       "option text"),
    _R("internvl3", "points", M, "orange", (2,), "stop", "colour word alone"),
    _R("internvl3", "yes_no", S, "Answer: Yes, the mask needs a major revision.", (1,), "stop",
       "answer with explanation"),
    _R("internvl3", "masks", S, "3rd mask", (3,), "stop", "option text"),
    _R("internvl3", "yes_no", S, "I cannot determine the answer from the image.", None, "stop",
       "refusal"),
    # ------------------------------------------------------------------ llava-onevision
    _R("llava-onevision", "yes_no", S,
       "Yes, the mask needs a major revision to outline the consolidation correctly.",
       (1,), "stop", "leading Yes"),
    _R("llava-onevision", "points", M, "The mask should be expanded toward the red point.",
       (1,), "stop", "repeats question verb"),
    _R("llava-onevision", "masks", S,
       "The 3rd mask applies exactly the expansions and contractions that the mask needed.",
       (3,), "stop", "repeats question wording"),
    _R("llava-onevision", "zones", S,
       "The consolidation is present in 2 zones: the right mid zone lung and the right lower zone "
       "lung.", (2,), "stop", "prose option text with zones listed"),
    _R("llava-onevision", "severity", S,
       "The consolidation covers 1/3 or more but less than 2/3 of the right lung area.",
       (2,), "stop", "prose option text"),
    _R("llava-onevision", "location", M,
       "Options:\n(1) the right costophrenic angle\n(2) the intersection of the right lateral lung "
       "and the right mid zone lung\n(3) the intersection of the left medial lung and the left "
       "upper zone lung\n(4) None of the above (options 1-3)",
       None, "stop", "options echoed, nothing chosen"),
    _R("llava-onevision", "comparison", S,
       "The right lung lesion is larger than the left lung lesion.", (3,), "stop", "option text"),
    _R("llava-onevision", "yes_no", S, "The mask is drawn on the image as a cyan overlay.",
       None, "stop", "description, no answer"),
    _R("llava-onevision", "points", M, "None of the points.", (4,), "stop", "contraction none",
       CON),
    _R("llava-onevision", "masks", S, "The 2nd mask.", (2,), "stop", "short option text"),
    _R("llava-onevision", "zones", S, "The consolidation is located in the right lung.",
       None, "stop", "finding, no count"),
    _R("llava-onevision", "severity", S, "The consolidation covers a large part of the right lung.",
       None, "stop", "vague extent"),
    _R("llava-onevision", "location", M,
       "The consolidation is present in the right costophrenic angle.", (1,), "stop",
       "prose option text"),
    _R("llava-onevision", "comparison", S,
       "Compare the size of the consolidation in the left lung with its size in the right lung.",
       None, "stop", "question echoed"),
    _R("llava-onevision", "yes_no", S, "No", (2,), "stop", "bare"),
    _R("llava-onevision", "points", M, "Red and yellow.", (1, 3), "stop", "colour words"),
    _R("llava-onevision", "masks", S, "The mask needs to be revised.", None, "stop",
       "no option"),
    _R("llava-onevision", "points", M, "The mask should be contracted away from the orange point.",
       (2,), "stop", "contraction verb", CON),
    # ------------------------------------------------------------------ medgemma-27b
    _R("medgemma-27b", "yes_no", S,
       "<unused94>thought\nThe user asks whether the cyan mask needs major revision. The mask "
       "misses the lower lobe consolidation. So yes.<unused95>**Answer:** Yes\n\n**Rationale:** "
       "The overlay excludes the dense basal consolidation lateral to the heart border.",
       (1,), "stop", "thought block then answer"),
    _R("medgemma-27b", "points", M,
       "**Assessment of points:**\n\n*   **Red point:** Located over consolidated lung lateral to "
       "the mask margin. Expansion indicated.\n*   **Orange point:** Over normal lung parenchyma. "
       "No expansion.\n*   **Yellow point:** Over consolidated lung inferior to the mask. "
       "Expansion "
       "indicated.\n\n**Answer:** (1) red point, (3) yellow point",
       (1, 3), "stop", "echoes in list"),
    _R("medgemma-27b", "masks", S,
       "<unused94>thought\nNeed to compare four masks. Third mask seems correct.<unused95>The 3rd "
       "mask best represents the required revisions, incorporating the inferior extension while "
       "excluding the cardiac border.\n\n**Answer:** 3rd mask",
       (3,), "stop", "thought, prose and answer agree"),
    _R("medgemma-27b", "zones", S,
       "**Findings:** Patchy consolidation in the right mid and lower zones and the left lower "
       "zone.\n\n**Answer:** 3 zones",
       (3,), "stop", "findings then answer"),
    _R("medgemma-27b", "severity", S,
       "**Answer:** 2/3 or more of the right lung area\n\n**Explanation:** There is near-complete "
       "opacification of the right hemithorax, sparing only the apex.",
       (3,), "stop", "option text"),
    _R("medgemma-27b", "location", M,
       "**Answer:** (1) the right costophrenic angle\n\nThe consolidation obscures the right "
       "costophrenic angle. The lateral mid-zone and left upper zone are clear.",
       (1,), "stop", "echo"),
    _R("medgemma-27b", "comparison", S,
       "**Answer:** The lesion is present in only one lung (left or right).\n\nConsolidation is "
       "seen "
       "only in the right lower lobe; the left lung is clear.",
       (4,), "stop", "option text with parenthetical"),
    _R("medgemma-27b", "yes_no", S,
       "<unused94>thought\nThe user wants to know if the mask requires major revision. Let me look "
       "at the borders. The superior border seems",
       None, LEN, "thought cut off"),
    _R("medgemma-27b", "points", M,
       "**Answer:** None\n\nAll points lie within true consolidation; no contraction is required.",
       (4,), "stop", "contraction none", CON),
    _R("medgemma-27b", "masks", S,
       "**Answer:** The 2nd or 3rd mask\n\nBoth appear to incorporate the needed lateral "
       "expansion; "
       "the difference at the hilum is subtle.",
       None, "stop", "hedged answer"),
    _R("medgemma-27b", "zones", S,
       "Consolidation involves the right lower zone and the left lower zone.\n\n**Answer:** 2 "
       "zones",
       (2,), "stop", "answer option text"),
    _R("medgemma-27b", "severity", S,
       "I cannot provide a precise quantitative estimate of lung involvement from this image. "
       "Clinical correlation and CT are recommended.",
       None, "stop", "refusal"),
    _R("medgemma-27b", "comparison", S,
       "**Answer:** Both lesions are similar in size.\n\nBilateral lower-zone consolidation of "
       "comparable extent; the right-to-left ratio is approximately 1.2, below the 1.5 threshold.",
       (1,), "stop", "numbers in explanation"),
    _R("medgemma-27b", "location", M, "**Answer:** None of the above (options 1-3)", (4,), "stop",
       "none option"),
    _R("medgemma-27b", "points", M,
       "**Answer:** red point\n\nOn reflection, the red point overlies the scapula rather than "
       "consolidation. The consolidation outside the mask is at the yellow point.\n\n**Final "
       "Answer:** yellow point",
       (3,), "stop", "change of mind, final answer"),
    _R("medgemma-27b", "yes_no", S,
       "The candidate mask accurately outlines the consolidation in the right lower lobe. No major "
       "revision is needed.\n\n**Answer:** No",
       (2,), "stop", "prose then answer"),
    _R("medgemma-27b", "masks", S,
       "<unused94>thought\nI need to compare the masks carefully.\n<unused95>Each revised mask has "
       "limitations. The 1st mask over-expands, the 2nd under-expands, the 3rd misses the "
       "contraction and the 4th is unchanged.",
       None, "stop", "every option criticised"),
    _R("medgemma-27b", "zones", S,
       "**Answer:** Cannot be determined\n\nImage quality is insufficient to assess the lateral "
       "extent of the opacity.",
       None, "stop", "answer line without option"),
    # ------------------------------------------------------------------ lingshu
    _R("lingshu", "yes_no", S, "Yes. The mask needs a major revision.<|im_end|>", (1,), "stop",
       "im_end"),
    _R("lingshu", "points", M, "Answer\uff1a1, 3", (1, 3), "stop", "full-width colon"),
    _R("lingshu", "masks", S, "The answer is (3) 3rd mask.", (3,), "stop", "answer is, echo"),
    _R("lingshu", "zones", S,
       "The consolidation involves 2 zones (right mid zone and right lower zone). The answer is "
       "(2) "
       "2 zones.", (2,), "stop", "prose and answer agree"),
    _R("lingshu", "severity", S, "Answer: (1) Less than 1/3 of the right lung area", (1,), "stop",
       "echo"),
    _R("lingshu", "location", M, "Answer: 1\u30012", (1, 2), "stop", "ideographic comma"),
    _R("lingshu", "comparison", S, "The answer is (2).", (2,), "stop", "bracketed number"),
    _R("lingshu", "yes_no", S, "The mask may need a major revision.", None, "stop", "hedge"),
    _R("lingshu", "points", M, "The answer is (4) None.", (4,), "stop", "contraction none", CON),
    _R("lingshu", "masks", S,
       "(4) 4th mask<|im_end|>\n<|im_start|>user\nWhy?<|im_end|>\n<|im_start|>assistant\nBecause "
       "the 4th mask", (4,), "stop", "hallucinated turns"),
    _R("lingshu", "zones", S, "The answer is 2 zones or 3 zones.", None, "stop", "hedge"),
    _R("lingshu", "severity", S, "\u7b54\u6848\uff1a2", (2,), "stop",
       "Chinese 'answer:' (a reader of Chinese reads 2)"),
    _R("lingshu", "comparison", S,
       "The right lung lesion is larger than the left lung lesion.<|im_end|>", (3,), "stop",
       "option text, im_end"),
    _R("lingshu", "location", M,
       "The answer is (1) the right costophrenic angle and (2) the intersection of the right "
       "lateral lung and the right mid zone lung.", (1, 2), "stop", "two echoes"),
    _R("lingshu", "points", M, "The answer is (1) red point.", (1,), "stop", "echo"),
    _R("lingshu", "yes_no", S, "The cyan mask covers the consolidation in the right upper lobe but",
       None, LEN, "cut off"),
    _R("lingshu", "masks", S, "The answer is (1) 1st mask. The answer is (2) 2nd mask.", None,
       "stop", "two answers, no change of mind"),
    _R("lingshu", "masks", S, "Answer: The mask needs revision.", None, "stop",
       "answer line, no option"),
    # ------------------------------------------------------------------ radfm
    _R("radfm", "yes_no", S, "Yes.", (1,), "stop", "bare"),
    _R("radfm", "yes_no", S, "Right lower lobe consolidation.", None, "stop", "finding only"),
    _R("radfm", "points", M, "red point", (1,), "stop", "option text"),
    _R("radfm", "masks", S, "2nd mask", (2,), "stop", "option text"),
    _R("radfm", "zones", S, "2 zones.", (2,), "stop", "option text"),
    _R("radfm", "severity", S, "1/3 or more but less than 2/3 of the right lung area", (2,), "stop",
       "option text"),
    _R("radfm", "location", M, "The right costophrenic angle.", (1,), "stop",
       "option text, capital"),
    _R("radfm", "comparison", S, "Consolidation in both lungs.", None, "stop", "finding only"),
    _R("radfm", "points", M, "None.", (4,), "stop", "contraction none", CON),
    _R("radfm", "masks", S, "Cardiomegaly. No pleural effusion.", None, "stop",
       "unrelated finding with 'No'"),
    _R("radfm", "zones", S, "Bilateral patchy consolidation.", None, "stop", "finding only"),
    _R("radfm", "severity", S, "Less than 1/3.", (1,), "stop", "shortened option text"),
    _R("radfm", "comparison", S, "The right lung lesion is larger.", (3,), "stop",
       "shortened option text"),
    _R("radfm", "location", M, "No.", None, "stop", "not an option"),
    _R("radfm", "yes_no", S, "No major revision needed.", (2,), "stop", "clinical no"),
    _R("radfm", "points", M, "Red and orange points.", (1, 2), "stop", "two colours"),
    _R("radfm", "masks", S, "Normal chest radiograph.", None, "stop", "finding only"),
    _R("radfm", "comparison", S, "Similar in size.", (1,), "stop", "shortened option text"),
    # ------------------------------------------------------------------ chexagent
    _R("chexagent", "yes_no", S, "(1) Yes", (1,), "stop", "echo"),
    _R("chexagent", "points", M, "(1) red point, (3) yellow point", (1, 3), "stop", "echoes"),
    _R("chexagent", "masks", S, "(2) 2nd mask", (2,), "stop", "echo"),
    _R("chexagent", "zones", S, "(3) 3 zones", (3,), "stop", "echo"),
    _R("chexagent", "severity", S, "(3) 2/3 or more of the right lung area", (3,), "stop", "echo"),
    _R("chexagent", "location", M,
       "(2) the intersection of the right lateral lung and the right mid zone lung", (2,), "stop",
       "echo"),
    _R("chexagent", "comparison", S, "(4) The lesion is present in only one lung (left or right).",
       (4,), "stop", "echo"),
    _R("chexagent", "yes_no", S, "(1) Yes (2) No", None, "stop", "both options listed"),
    _R("chexagent", "points", M, "(4) None", (4,), "stop", "contraction none", CON),
    _R("chexagent", "masks", S,
       "There is a right lower lobe consolidation. The heart size is normal.", None, "stop",
       "findings only"),
    _R("chexagent", "zones", S,
       "(2) 2 zones (2) 2 zones (2) 2 zones (2) 2 zones (2) 2 zones (2)", (2,), LEN,
       "degenerate repetition of one answer"),
    _R("chexagent", "severity", S, "Less than 1/3 of the right lung area", (1,), "stop",
       "option text"),
    _R("chexagent", "comparison", S,
       "(1) Both lesions are similar in size. (3) The right lung lesion is larger than the left "
       "lung lesion.", None, "stop", "two single-choice options"),
    _R("chexagent", "location", M,
       "(1) the right costophrenic angle (2) the intersection of the right lateral lung and the "
       "right mid zone lung", (1, 2), "stop", "two of four options listed"),
    _R("chexagent", "yes_no", S, "No, the mask does not need a major revision.", (2,), "stop",
       "leading No"),
    _R("chexagent", "points", M, "The mask should be expanded toward the yellow point.", (3,),
       "stop", "question verb"),
    _R("chexagent", "masks", S, "4th mask", (4,), "stop", "option text"),
    _R("chexagent", "masks", S, "The mask is not accurate.", None, "stop", "no option"),
]


def problems(rows: list[CorpusReply] = CORPUS) -> list[str]:
    """What is malformed in ``rows`` (empty when the corpus is well-formed).

    The checks of ``parser_corpus.problems`` (kind, multi_select, finish reason, duplicates,
    human answer shape), with this corpus's families in place of that one's.
    """
    out = [p for p in _corpus_problems(rows) if not p.endswith(": unknown family")]
    for i, row in enumerate(rows):
        if row.family not in FAMILIES:
            out.append(f"row {i} ({row.family}, {row.kind}): unknown family")
        if row.points_question not in ("expansion", "contraction"):
            out.append(f"row {i} ({row.family}, {row.kind}): points_question "
                       f"{row.points_question!r}")
    return out


__all__ = ["CORPUS", "FAMILIES", "FINISH_REASONS", "MULTI_SELECT_KINDS", "OPTIONS", "problems",
           "none_index"]
