"""The case viewer in a real browser (system Chromium via Playwright), on the test bundle's runs.

Every test also checks, at teardown, that no request left the file system and that nothing
was logged as an error (``open_viewer`` in conftest.py).
"""

from __future__ import annotations

import json
import shutil

from viewer_runs import load_records, load_results

from chexpercept.analysis import read_case_table
from chexpercept.analysis.case_table import METRIC_INDEX
from chexpercept.analysis.viewer import ViewerRun, write_viewer
from chexpercept.schema import STATUSES

RR_CASE = "effusion_s50000001_positive_0"


def _run(viewer_runs, i):
    label, path = list(viewer_runs["runs"].items())[i]
    return label, path


def _shown(page):
    return page.page.eval_on_selector_all("#cases-body tr[data-key]",
                                          "rows => rows.map(r => r.dataset.key)")


def _count(page):
    return int(page.page.inner_text("#count-shown"))


def _all_right(record):
    blocks = [record[b] for b in ("detection_qa", "contour_evaluation_qa", "contour_revision_qa",
                                  "attribute_extraction_qa") if record.get(b)]
    return all(b["correct"] for b in blocks)


def _wait_text(page, selector, text, limit_s=20.0):
    """Wait until ``selector``'s text is ``text`` (polled from Python: the page's CSP forbids
    the string evaluation ``wait_for_function`` uses)."""
    for _ in range(int(limit_s / 0.05)):
        node = page.page.query_selector(selector)
        if node is not None and node.inner_text() == text:
            return
        page.page.wait_for_timeout(50)
    raise AssertionError(f"{selector} never read {text!r}")


def _select(page, selector, value):
    page.page.select_option(selector, value=str(value))


def test_index_lists_every_case_with_the_right_counts(viewer_runs, open_viewer):
    _, run_a = _run(viewer_runs, 0)
    results = load_results(run_a)
    page = open_viewer()
    assert _shown(page) == list(results)  # bundle order
    assert _count(page) == len(results) == int(page.page.inner_text("#count-total"))
    right = sum(_all_right(r) for r in results.values())
    assert int(page.page.inner_text("#count-a-right")) == right
    # the runs' manifests are shown: model, settings, commit
    card = page.page.inner_text("#run-meta [data-run=A]")
    assert "mixed_custom.oracle_implicit" in card and "commit" in card and "settings" in card


def test_each_filter_narrows_the_list_correctly(viewer_runs, open_viewer):
    label, run_a = _run(viewer_runs, 0)
    results = load_results(run_a)
    records = load_records(run_a)
    table, _ = read_case_table(run_a, label)
    depth = dict(zip(table.key_ids, table.values[:, METRIC_INDEX["depth"]].tolist(),
                     strict=True))
    keys = list(results)
    refused = {r["key_id"] for r in records if r["status"] == "refused"}
    needle = "contour_revision_qa_contraction, the findings"
    with_text = {r["key_id"] for r in records if needle.lower() in r["raw"].lower()}
    assert refused and with_text and any(d == 0 for d in depth.values())
    cases = [
        ("#f-lesion", "effusion", lambda k: k.startswith("effusion_")),
        ("#f-path", "revision_required", lambda k: results[k]["qa_path"] == "revision_required"),
        ("#f-depth", 0, lambda k: depth[k] == 0),
        ("#f-correct", "wrong", lambda k: not _all_right(results[k])),
        ("#f-correct", "right", lambda k: _all_right(results[k])),
        ("#f-correct", "s1w", lambda k: not results[k]["detection_qa"]["correct"]),
        ("#f-status", STATUSES.index("refused"), lambda k: k in refused),
    ]
    page = open_viewer()
    for selector, value, keep in cases:
        page.page.click("#f-reset")
        _select(page, selector, value)
        expected = [k for k in keys if keep(k)]
        assert _shown(page) == expected, (selector, value)
        assert _count(page) == len(expected), (selector, value)
        assert len(expected) < len(keys), f"{selector}={value} does not narrow the test runs"
    # filters combine (intersection)
    page.page.click("#f-reset")
    _select(page, "#f-lesion", "effusion")
    _select(page, "#f-path", "revision_required")
    assert _shown(page) == [k for k in keys if k.startswith("effusion_")
                            and results[k]["qa_path"] == "revision_required"]
    # text search in the raw replies (loads the dialogues on demand)
    page.page.click("#f-reset")
    page.page.fill("#f-text", needle.upper())
    _wait_text(page, "#count-shown", str(len(with_text)))
    assert set(_shown(page)) == with_text
    # sorting by a column header reverses on the second click
    page.page.click("#f-reset")
    page.page.click("th[data-sort=key]")
    assert _shown(page) == sorted(keys)
    page.page.click("th[data-sort=key]")
    assert _shown(page) == sorted(keys, reverse=True)


def test_revision_required_case_shows_its_7_images_and_9_replies_in_order(viewer_runs,
                                                                          open_viewer):
    _, run_a = _run(viewer_runs, 0)
    record = load_results(run_a)[RR_CASE]
    raws = {r["turn"]: r["raw"] for r in load_records(run_a) if r["key_id"] == RR_CASE}
    order = sorted(record["_chat_history_idx"], key=record["_chat_history_idx"].get)
    assert len(order) == 9
    page = open_viewer(f"#case={RR_CASE}")
    page.page.wait_for_selector(".turn")
    assert page.page.inner_text("#case-key") == RR_CASE
    turns = page.page.eval_on_selector_all(".turn", "ts => ts.map(t => t.dataset.turn)")
    assert turns == order
    cells = "#case-body .turn-cell[data-run='0']"
    replies = page.page.eval_on_selector_all(
        f"{cells} .msg.reply", "ms => ms.map(m => m.childNodes[1].textContent)")
    assert replies == [raws[t] for t in order]
    images = page.page.eval_on_selector_all(
        f"{cells} img", "is => is.map(i => [i.getAttribute('alt'), i.complete && i.naturalWidth])")
    assert len(images) == 7
    assert all(width == 256 for _, width in images), images  # each image file loaded
    assert [a for a, _ in images][-4:] == [f"option_{i}.png" for i in range(1, 5)]
    # the option masks sit side by side (same row)
    tops = page.page.eval_on_selector_all(
        f"{cells} .images.options img", "is => is.map(i => i.getBoundingClientRect().top)")
    assert len(tops) == 4 and len({round(t) for t in tops[:2]}) == 1
    # under each reply: parsed answer, ground truth, status, parser's reason
    verdict = page.page.inner_text("#case-body .turn[data-turn=detection_qa] "
                                   ".turn-cell[data-run='0'] .verdict")
    for label in ("parsed answer", "ground truth", "status", "parser's reason"):
        assert label in verdict
    assert "You are an expert radiologist" in page.page.inner_text(".msg.system")
    # an image opens enlarged on click and closes with Esc
    page.page.click(f"{cells} .images.options img >> nth=2")
    assert page.page.is_visible("#zoom img")
    assert page.page.get_attribute("#zoom img", "alt") == "option_3.png"
    page.page.keyboard.press("Escape")
    assert not page.page.is_visible("#zoom") and page.page.is_visible("#case-view")


def test_implicit_correction_is_shown_where_the_model_saw_it(viewer_runs, open_viewer):
    _, run_a = _run(viewer_runs, 0)
    results = load_results(run_a)
    rec = next(r for r in load_records(run_a) if r["oracle"]["patched"])
    key, turn, patched = rec["key_id"], rec["turn"], rec["oracle"]["patched"][0]
    entry = results[key]["chat_history"][results[key]["_chat_history_idx"][patched]]
    replayed, original = entry[2], entry[3]
    page = open_viewer(f"#case={key}")
    page.page.wait_for_selector(".turn")
    note = page.page.inner_text(f".turn[data-turn={turn}] .turn-cell[data-run='0'] "
                                "[data-oracle=implicit]")
    assert patched in note and replayed in note and "Oracle (implicit)" in note.title() \
        or "ORACLE (IMPLICIT)" in note.upper()
    cell = f".turn[data-turn={patched}] .turn-cell[data-run='0']"
    assert page.page.inner_text(f"{cell} .msg.reply").endswith(original)
    assert replayed in page.page.inner_text(f"{cell} [data-oracle=implicit-replaced]")


def test_explicit_oracle_paragraph_is_marked(viewer_runs, open_viewer):
    _, run_x = _run(viewer_runs, 2)
    rec = next(r for r in load_records(run_x) if r["oracle"]["prefix"])
    page = open_viewer()
    _select(page, "#run-a", 2)
    _select(page, "#run-b", -1)
    page.page.click(f"#cases-body tr[data-key='{rec['key_id']}']")
    page.page.wait_for_selector(".turn")
    cell = f".turn[data-turn={rec['turn']}] .turn-cell[data-run='2']"
    assert rec["oracle"]["prefix"] in page.page.inner_text(f"{cell} [data-oracle=explicit]")
    assert rec["oracle"]["prefix"] not in page.page.inner_text(f"{cell} .msg.user")
    assert page.page.locator("[data-oracle=implicit]").count() == 0


def test_two_runs_side_by_side_pair_the_same_case(viewer_runs, open_viewer):
    _, run_a = _run(viewer_runs, 0)
    label_b, run_b = _run(viewer_runs, 1)
    a, b = load_results(run_a), load_results(run_b)
    page = open_viewer()
    _select(page, "#f-pair", "AwBr")
    expected = [k for k in a if not _all_right(a[k]) and _all_right(b[k])]
    assert expected and _shown(page) == expected
    assert int(page.page.inner_text("#count-awbr")) == len(expected)
    _select(page, "#f-pair", "ArBw")
    assert _shown(page) == [k for k in a if _all_right(a[k]) and not _all_right(b[k])] == []
    _select(page, "#f-pair", "AwBr")
    key = expected[0]
    page.page.click(f"#cases-body tr[data-key='{key}']")
    page.page.wait_for_selector(".turn")
    heads = page.page.eval_on_selector_all(".col-head", "hs => hs.map(h => h.textContent)")
    assert heads == [f"A: {list(viewer_runs['runs'])[0]}", f"B: {label_b}"]
    for r, run in ((0, run_a), (1, run_b)):
        raws = {x["turn"]: x["raw"] for x in load_records(run) if x["key_id"] == key}
        shown = page.page.eval_on_selector_all(
            f".turn-cell[data-run='{r}'] .msg.reply",
            "ms => ms.map(m => [m.closest('.turn').dataset.turn, m.childNodes[1].textContent])")
        assert dict(shown) == raws


def test_keyboard_moves_to_the_next_wrong_case(viewer_runs, open_viewer):
    _, run_a = _run(viewer_runs, 0)
    results = load_results(run_a)
    keys = list(results)
    page = open_viewer(f"#case={keys[0]}")
    page.page.wait_for_selector(".turn")
    page.page.keyboard.press("n")
    wrong = [k for k in keys[1:] if not _all_right(results[k])]
    _wait_text(page, "#case-key", wrong[0])
    page.page.keyboard.press("ArrowRight")
    nxt = keys[keys.index(wrong[0]) + 1]
    _wait_text(page, "#case-key", nxt)
    page.page.keyboard.press("Escape")
    assert page.page.is_visible("#index-view")
    # the browser's Back and Forward buttons move between the pages seen
    page.page.go_back()
    _wait_text(page, "#case-key", nxt)
    assert page.page.is_visible("#case-view") and not page.page.is_visible("#index-view")
    page.page.go_back()
    _wait_text(page, "#case-key", wrong[0])
    page.page.go_forward()
    page.page.go_forward()
    page.page.wait_for_selector("#index-view", state="visible")


def test_screenshots_of_the_index_and_of_one_case(open_viewer, screenshot_dir):
    page = open_viewer(viewport=(1400, 900))
    index_png = screenshot_dir / "viewer_index.png"
    page.page.screenshot(path=str(index_png))
    page.page.click(f"#cases-body tr[data-key='{RR_CASE}']")
    page.page.wait_for_selector(".turn")
    case_png = screenshot_dir / "viewer_case_revision_required.png"
    page.page.screenshot(path=str(case_png), full_page=True)
    assert index_png.stat().st_size > 10_000 and case_png.stat().st_size > 10_000


def test_an_unfinished_case_is_missing_not_wrong(viewer_runs, open_viewer, tmp_path):
    _, run_a = _run(viewer_runs, 0)
    copy = tmp_path / "run" / "oracle_implicit"
    shutil.copytree(run_a, copy)
    results = load_results(copy)
    key = next(k for k, r in results.items() if not _all_right(r))
    case = results[key]
    for block in ("detection_qa", "contour_evaluation_qa", "contour_revision_qa",
                  "attribute_extraction_qa"):
        case[block] = {}
    case["chat_history"] = case["chat_history"][:1]
    case["_chat_history_idx"] = {"detection_qa": 0}
    case["unfinished"] = {"next_turn": "contour_evaluation_qa", "turns_answered": 1,
                          "reason": "fault: the server timed out"}
    (copy / "all_results.json").write_text(json.dumps(results), encoding="utf-8")
    page_path = write_viewer([ViewerRun("run", "implicit", copy)], tmp_path / "out")
    page = open_viewer(page_path=page_path)
    _select(page, "#f-status", "u")
    assert _shown(page) == [key]
    page.page.click("#f-reset")
    _select(page, "#f-correct", "wrong")
    wrong = [k for k, r in results.items() if k != key and not _all_right(r)]
    assert _shown(page) == wrong  # missing, never wrong (as in Stage 04's tables)
    page.page.click("#f-reset")
    page.page.click(f"#cases-body tr[data-key='{key}']")
    page.page.wait_for_selector(".turn")
    assert "the server timed out" in page.page.inner_text(".case-summary")


def test_an_unfinished_cases_answered_turns_show_as_answered(viewer_runs, open_viewer,
                                                             tmp_path):
    """As Stage 03 writes it: no chat_history, empty blocks; the answered turn is in records."""
    _, run_a = _run(viewer_runs, 0)
    copy = tmp_path / "run" / "oracle_implicit"
    shutil.copytree(run_a, copy)
    results = load_results(copy)
    key = RR_CASE
    results[key] = {"key_id": key, "qa_path": results[key]["qa_path"], "detection_qa": {},
                    "contour_evaluation_qa": {}, "contour_revision_qa": {},
                    "attribute_extraction_qa": {},
                    "unfinished": {"next_turn": "contour_evaluation_qa", "turns_answered": 1,
                                   "reason": "HTTP 500 from the server after 2 attempt(s)"}}
    (copy / "all_results.json").write_text(json.dumps(results), encoding="utf-8")
    records = [r for r in load_records(copy)
               if r["key_id"] != key or r["turn"] == "detection_qa"]
    first = next(r for r in records if r["key_id"] == key)
    (copy / "records.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records),
                                        encoding="utf-8")
    page_path = write_viewer([ViewerRun("run", "implicit", copy)], tmp_path / "out")
    page = open_viewer(page_path=page_path)
    page.page.click(f"#cases-body tr[data-key='{key}']")
    page.page.wait_for_selector(".turn")
    summary = page.page.inner_text(".case-summary")
    assert ("Unfinished case: 1 turn answered; no answer to contour_evaluation_qa (HTTP 500 "
            "from the server after 2 attempt(s)). Stage 04 counts it as missing") in summary
    assert "{" not in summary.split("Unfinished case:")[1]  # a sentence, not JSON
    turns = page.page.query_selector_all(".turn")
    assert [t.get_attribute("data-turn") for t in turns] == ["detection_qa"]
    cell = turns[0].inner_text()
    assert "not asked in this run" not in cell
    assert first["raw"].strip()[:40] in cell and "question text not recorded" in cell
    assert ("correct" if first["correct"] else "wrong") in cell and "not recorded" in cell
