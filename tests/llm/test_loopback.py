"""The loopback server's asyncio mode (the benchmark's separate-process server)."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from loopback import LoopbackServer

openai = pytest.importorskip("openai")
httpx2 = pytest.importorskip("httpx2")

LOOPBACK = Path(__file__).with_name("loopback.py")


def _post(client):
    return client.post("/chat/completions", cast_to=httpx2.Response,
                       body={"model": "m", "messages": [{"role": "user", "content": "hi"}]})


def test_async_mode_latency_faults_scripted_actions_and_stats():
    server = LoopbackServer(latency_s=0.05)
    server.push({"status": 429, "headers": {"Retry-After": "0.05"}},
                {"status": 500, "error_code": "boom"}, {"content": "Answer: 3"})

    async def main():
        ready = asyncio.get_running_loop().create_future()
        task = asyncio.create_task(server.serve_async(ready.set_result))
        port = await ready
        client = openai.AsyncOpenAI(api_key="k", base_url=f"http://127.0.0.1:{port}/v1",
                                    max_retries=0)
        out = []
        for _ in range(4):
            started = time.perf_counter()
            try:
                out.append((await _post(client)).json()["choices"][0]["message"]["content"])
            except openai.APIStatusError as exc:
                out.append((exc.status_code, exc.response.headers.get("retry-after")))
            out.append(time.perf_counter() - started)
        many = await asyncio.gather(*[_post(client) for _ in range(8)])
        stats = await asyncio.to_thread(
            lambda: json.loads(urllib.request.urlopen(f"http://127.0.0.1:{port}/stats").read()))
        await client.close()
        task.cancel()
        return out, many, stats

    out, many, stats = asyncio.run(main())
    assert out[0] == (429, "0.05") and out[2] == (500, None)
    assert out[4] == "Answer: 3" and out[6] == "Answer: 1"
    assert min(out[1::2]) >= 0.0  # scripted actions have no delay; defaults wait latency_s
    assert out[7] >= 0.05
    assert all(r.status_code == 200 for r in many)
    assert stats["chat_requests"] == 12 and stats["max_in_flight"] == 8
    assert stats["by_status"] == {"429": 1, "500": 1, "200": 10}
    assert server.chat_requests()[0].body["model"] == "m"


def test_script_mode_serves_until_terminated():
    proc = subprocess.Popen([sys.executable, str(LOOPBACK), "--latency", "0",
                             "--fault-rate", "1", "--seed", "1"], stdout=subprocess.PIPE, text=True)
    try:
        port = int(proc.stdout.readline().split()[1])
        client = openai.OpenAI(api_key="k", base_url=f"http://127.0.0.1:{port}/v1",
                               max_retries=0)
        with pytest.raises(openai.APIStatusError) as info:
            _post(client)
        assert info.value.status_code in (429, 500)
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/stats") as r:
            assert json.loads(r.read())["chat_requests"] == 1
    finally:
        proc.terminate()
        proc.wait(timeout=10)
