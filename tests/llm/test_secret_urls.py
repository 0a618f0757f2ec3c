"""Credentials in a base URL are never stored or printed (issue 29, item 2).

``--base-url 'http://host/v1?api_key=...'`` was written verbatim into ``run_manifest.json``, the
run's log and stderr; only ``user:password@`` was hidden. ``hide_credentials`` is the one
function every base URL goes through before it is logged, recorded or quoted in an error.
"""

from __future__ import annotations

import json
import runpy
import socket

import pytest
from local_provider_helpers import EVAL_SCRIPT, write_marked_bundle
from loopback import LoopbackServer
from test_fault_taxonomy import TARGET, _turn_of

from utils.cli import run_main
from utils.llm.anthropic_provider import AnthropicChatModel
from utils.llm.gemini_provider import GeminiChatModel
from utils.llm.keys import redact
from utils.llm.openai_provider import AzureOpenAIChatModel, OpenAIChatModel
from utils.llm.settings import hide_credentials

SECRET = "SECRET123"


@pytest.mark.parametrize(("url", "shown"), [
    # query-string credentials, any case, any of the usual names
    ("http://h/v1?api_key=SECRET123", "http://h/v1?api_key=***"),
    ("http://h/v1?apikey=s&APIKEY=s&api-key=s&Api_Key=s",
     "http://h/v1?apikey=***&APIKEY=***&api-key=***&Api_Key=***"),
    ("http://h/v1?key=s&token=s&access_token=s&auth=s&x-api-key=s",
     "http://h/v1?key=***&token=***&access_token=***&auth=***&x-api-key=***"),
    ("http://h/v1?sig=s&signature=s&secret=s&password=s&pwd=s&code=s",
     "http://h/v1?sig=***&signature=***&secret=***&password=***&pwd=***&code=***"),
    ("https://h/o?subscription-key=s&hf_token=s&client_secret=s&X-Amz-Signature=s",
     "https://h/o?subscription-key=***&hf_token=***&client_secret=***&X-Amz-Signature=***"),
    # non-secret parameters, order, encoding, port and path are kept as given
    ("https://h:8443/openai/v1?api-version=2024-10-21&api_key=s%2Fx&model=a+b",
     "https://h:8443/openai/v1?api-version=2024-10-21&api_key=***&model=a+b"),
    ("http://h/v1?version=2&limit=10&flag&empty_key=", "http://h/v1?version=2&limit=10&flag"
                                                      "&empty_key="),
    # user:password, alone and with a query; a fragment's parameters too
    ("http://user:s3cret@127.0.0.1:8000/v1", "http://***@127.0.0.1:8000/v1"),
    ("http://u:p@h/v1?token=t&v=1", "http://***@h/v1?token=***&v=1"),
    ("https://h/cb#access_token=t&state=x", "https://h/cb#access_token=***&state=x"),
    # nothing to hide: unchanged
    ("http://127.0.0.1:8000/v1", "http://127.0.0.1:8000/v1"),
    ("http://h/v1?", "http://h/v1?"),
])
def test_hide_credentials_masks_secrets_and_keeps_the_rest(url, shown):
    assert hide_credentials(url) == shown
    assert hide_credentials(shown) == shown


def test_urls_inside_error_texts_are_masked():
    text = "Server error '500' for url 'http://h/v1?api_key=SECRET123&v=2' (see docs)"
    assert redact(text) == "Server error '500' for url 'http://h/v1?api_key=***&v=2' (see docs)"


def _built(name: str, url: str):
    if name == "openai":
        return OpenAIChatModel("srv", base_url=url, env={})
    if name == "azure":
        return AzureOpenAIChatModel("gpt-5.4", base_url=url,
                                    env={"AZURE_OPENAI_API_KEY": "k-azure",
                                         "OPENAI_API_VERSION": "2025-04-01-preview"})
    if name == "anthropic":
        return AnthropicChatModel("claude-sonnet-4-5", base_url=url,
                                  env={"ANTHROPIC_API_KEY": "k-anthropic"})
    return GeminiChatModel("gemini-3.1-pro", base_url=url, env={"GEMINI_API_KEY": "k-gemini"})


@pytest.mark.parametrize("name", ["openai", "azure", "anthropic", "gemini"])
def test_no_provider_records_a_key_of_its_base_url(name):
    """What the manifest gets (``describe``, ``runtime_info``) hides the URL's credentials."""
    model = _built(name, f"https://u:{SECRET}@h:8443/v1?api_key={SECRET}&api-version=2")
    recorded = json.dumps([model.describe(), model.runtime_info()])
    assert SECRET not in recorded
    assert "https://***@h:8443/v1?api_key=***&api-version=2" in recorded


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_a_key_in_the_base_url_reaches_the_server_and_no_file_or_output(tmp_path, capsys,
                                                                       caplog):
    """Stage 03 against the loopback server, one turn failing (a fault is written), then a
    server that never answers (the error line): the key is in no file, log or output."""
    bench = tmp_path / "bench"
    write_marked_bundle(bench)
    out = tmp_path / "out"
    main = runpy.run_path(str(EVAL_SCRIPT), run_name="eval_under_test")["main"]
    argv = ["--benchmark-dir", str(bench), "--output-path", str(out), "--oracle_setting", "none",
            "--provider", "openai", "--model", "srv", "--no-progress", "--max-retries", "0",
            "--concurrency", "2", "--log-level", "DEBUG"]
    is_target = _turn_of(bench, TARGET, 1)
    with LoopbackServer(models=["srv"],
                        respond=lambda b: {"status": 500} if is_target(b) else None) as server:
        served = server.base_url
        url = f"{served}?api_key={SECRET}&api-version=2"
        assert run_main(main, [*argv, "--base-url", url, "--server-wait", "5"]) == 3
        paths = [seen.path for seen in server.seen]
    assert any(f"api_key={SECRET}" in path for path in paths)  # the proxy still gets its key
    dead = f"http://user:{SECRET}@127.0.0.1:{_free_port()}/v1?token={SECRET}"
    assert run_main(main, [*argv, "--base-url", dead, "--server-wait", "0",
                           "--output-path", str(tmp_path / "out_dead")]) == 2
    captured = capsys.readouterr()

    (manifest,) = out.rglob("run_manifest.json")
    runtime = json.loads(manifest.read_text(encoding="utf-8"))["provider_runtime"]
    assert runtime["base_url"] == f"{served}?api_key=***&api-version=2"
    written = [p for p in tmp_path.rglob("*") if p.is_file() and bench not in p.parents]
    assert {p.name for p in written} >= {"run_manifest.json", "records.jsonl", "faults.jsonl",
                                         "all_results.json"}
    assert any(p.suffix == ".log" for p in written)
    assert [p for p in written if SECRET.encode() in p.read_bytes()] == []
    assert SECRET not in captured.out + captured.err + caplog.text
    error = [line for line in captured.err.splitlines() if line.startswith("error:")][-1]
    assert "did not become ready" in error, error
    assert "http://***@127.0.0.1:" in error and "token=***" in error
