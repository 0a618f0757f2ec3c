"""The viewer's error-class filter (issue 23 item 4) in a real browser: a Stage 04 run writes
each case's error classes into the index, and the filter shows exactly the cases of a class."""

from __future__ import annotations

import json
import shutil

from viewer_runs import load_results

from chexpercept.analysis.api import analyze
from chexpercept.analysis.error_anatomy import ERROR_CLASSES, analyse_errors, load_error_facts

RR_CASE = "effusion_s50000001_positive_0"


def _shown(page):
    return page.page.eval_on_selector_all("#cases-body tr[data-key]",
                                          "rows => rows.map(r => r.dataset.key)")


def test_error_class_filter_shows_only_the_cases_with_that_error(viewer_runs, open_viewer,
                                                                 tmp_path):
    label, run_a = next(iter(viewer_runs["runs"].items()))
    name, setting = label.split(".oracle_")
    copy = tmp_path / "03" / name / f"oracle_{setting}"
    shutil.copytree(run_a, copy)
    results = load_results(copy)
    # the RR case answers "right lesion larger" where the left one is: a laterality swap
    attrs = results[RR_CASE]["attribute_extraction_qa"]
    attrs["ground_truth"]["comparison"] = 2
    attrs["responses"]["comparison"] = "3"
    attrs["comparison"] = {"correct": False, "status": "ok"}
    attrs["correct"] = False
    (copy / "all_results.json").write_text(json.dumps(results), encoding="utf-8")
    # Stage 04 recomputes correctness against the bundle's answer keys: a bundle whose key
    # is the edited one (same images), accepted as another bundle than the run's
    bench = tmp_path / "bench"
    bench.mkdir()
    items = json.loads((viewer_runs["bench"] / "chexpercept.json").read_text(encoding="utf-8"))
    items[RR_CASE]["attribute_extraction_qa"]["comparison"]["answer_index"] = 2
    (bench / "chexpercept.json").write_text(json.dumps(items), encoding="utf-8")
    (bench / "chexpercept").symlink_to((viewer_runs["bench"] / "chexpercept").resolve())

    result = analyze(tmp_path / "03", setting, output_dir=tmp_path / "04",
                     benchmark_dir=bench, bootstrap=0, jobs=1, allow_other_bundle=True)
    anatomy = analyse_errors(results, list(results), load_error_facts(bench))
    page = open_viewer(page_path=result.viewer)
    assert not page.page.is_hidden("#f-error")
    labels = page.page.eval_on_selector_all("#f-error option", "os => os.map(o => o.textContent)")
    assert "error class: laterality swap" in labels
    for j, cls in enumerate(ERROR_CLASSES):
        page.page.select_option("#f-error", value=str(j))
        want = [k for k in results if cls in anatomy.case_classes.get(k, ())]
        assert _shown(page) == want, cls
    page.page.select_option("#f-error", value=str(list(ERROR_CLASSES).index("laterality_swap")))
    assert RR_CASE in _shown(page)
    page.page.click(f"#cases-body tr[data-key='{RR_CASE}']")
    page.page.wait_for_selector(".turn")
    assert "error classes: laterality swap" in page.page.inner_text(".case-summary .error-classes")
    page.page.keyboard.press("Escape")
    page.page.wait_for_selector("#cases-body tr[data-key]")
    page.page.click("#f-reset")
    assert _shown(page) == list(results)


def test_a_viewer_without_error_classes_offers_no_such_filter(open_viewer):
    page = open_viewer()  # written by write_viewer, which counts no error classes
    assert page.page.is_hidden("#f-error")
