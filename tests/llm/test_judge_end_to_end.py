"""The judge model end to end: 00_eval.py with --judge, then Stage 04 (issue 28 item 4).

The commands are the ones docs/parsing.md, "Judge model", prints, run as printed (in-process,
from a folder holding the bundle at ``data/chexpercept``): the evaluated model is the real
``openai`` provider against one loopback server (tests/llm/loopback.py), the judge the real
``openai`` provider against another. The model answers some detection questions in words the
parser cannot read; the judge reads them. Stage 04's report.md must then hold both scores.
"""

from __future__ import annotations

import json
import re
import runpy
import shlex
from pathlib import Path

from local_provider_helpers import EVAL_SCRIPT, write_marked_bundle
from loopback import LoopbackServer

from chexpercept.files import read_jsonl
from chexpercept.layouts import records_path

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "parsing.md"
ANALYZE = ROOT / "src" / "04_analyze_eval_result" / "01_analyze_model_performance.py"


def documented_commands() -> list[list[str]]:
    """The shell commands of the bash block in docs/parsing.md, "Judge model"."""
    section = DOC.read_text(encoding="utf-8").split("## Judge model", 1)[1].split("\n## ", 1)[0]
    block = section.split("```bash\n", 1)[1].split("```", 1)[0]
    return [shlex.split(line) for line in block.replace("\\\n", " ").splitlines()
            if line.strip()]


def model_answer(body: dict) -> str:
    """Detection ("Yes") in words the parser cannot read, every later question ``Answer: 1``."""
    users = [m for m in body["messages"] if m.get("role") == "user"]
    if len(users) == 1:
        return "My pick is the choice numbered one.\nThe finding is visible."
    return "Answer: 1"


def judge_answer(body: dict) -> str:
    prompt = body["messages"][-1]["content"]
    prompt = prompt if isinstance(prompt, str) else " ".join(p.get("text", "") for p in prompt)
    reply = prompt.split("<reply>\n", 1)[1].split("\n</reply>", 1)[0]
    return "Answer: 1" if "numbered one" in reply else "Answer: " + (
        re.search(r"Answer: (\d+)", reply).group(1))


def _server(port: int, **kwargs) -> LoopbackServer:
    """A loopback server on the documented port, or on a free one when that is taken."""
    try:
        return LoopbackServer(port=port, **kwargs).start()
    except OSError:
        return LoopbackServer(**kwargs).start()


def test_the_documented_judge_commands_run_and_report_both_scores(tmp_path, monkeypatch):
    eval_cmd, analyze_cmd = documented_commands()
    assert eval_cmd[:2] == ["python", "src/03_eval_vlm_on_chexpercept/00_eval.py"]
    assert analyze_cmd[:2] == ["python", str(ANALYZE.relative_to(ROOT))]
    args = eval_cmd[2:]
    urls = {flag: args[args.index(flag) + 1] for flag in ("--base-url", "--judge-base-url")}
    model_id = args[args.index("--model") + 1]
    judge_id = args[args.index("--judge") + 1].split(":", 1)[1]
    write_marked_bundle(tmp_path / "data" / "chexpercept")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-loopback")
    monkeypatch.setenv("MPLBACKEND", "Agg")
    model = _server(int(urls["--base-url"].rsplit(":", 1)[1].split("/")[0]),
                    models=[model_id], answer=model_answer)
    judge = _server(int(urls["--judge-base-url"].rsplit(":", 1)[1].split("/")[0]),
                    models=[judge_id], answer=judge_answer)
    try:
        args[args.index("--base-url") + 1] = model.base_url  # the same, unless it was taken
        args[args.index("--judge-base-url") + 1] = judge.base_url
        main = runpy.run_path(str(EVAL_SCRIPT), run_name="eval_under_test")["main"]
        assert main(args) == 0
        judged = judge.chat_requests()
    finally:
        model.stop()
        judge.stop()
    (run_dir,) = [p.parent for p in tmp_path.rglob("run_manifest.json")]
    manifest = json.loads((run_dir / "run_manifest.json").read_text(encoding="utf-8"))
    assert manifest["judge"]["model"] == f"openai:{judge_id}"
    records = list(read_jsonl(records_path(run_dir)))
    statuses = [r["status"] for r in records]
    assert "judged" in statuses and "unparseable" not in statuses
    assert len(judged) == statuses.count("judged") + sum("judge_audit" in r for r in records)
    body = judged[0].body
    assert body["temperature"] == 0.0 and isinstance(body["seed"], int)  # greedy, seeded

    analyze = runpy.run_path(str(ANALYZE), run_name="analyze_under_test")["main"]
    assert analyze(analyze_cmd[2:]) == 0
    setting = analyze_cmd[analyze_cmd.index("--oracle_setting") + 1]
    out = Path(analyze_cmd[analyze_cmd.index("--output-dir") + 1])
    report = (out / f"all_models_oracle_{setting}" / "report.md").read_text(encoding="utf-8")
    section = report.split("## Judge model", 1)[1].split("\n## ", 1)[0]
    assert "strict / judged" in section and f"openai:{judge_id}" in section
    # detection read by the judge: "Yes", right on the lesion-present paths only
    cells = {}
    for line in section.splitlines():
        parts = [c.strip() for c in line.strip("|").split("|")]
        if len(parts) == 9 and parts[3] == "end_to_end":
            cells[parts[2]] = parts[4]
    assert cells == {"revision_required": "0.0 / 100.0", "revision_free": "0.0 / 100.0",
                     "lesion_free": "0.0 / 0.0"}
