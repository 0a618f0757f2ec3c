"""A local OpenAI-compatible Chat Completions server on 127.0.0.1 for tests and benchmarks.

Standard library only (``http.server`` in a thread, HTTP/1.1 keep-alive). It answers
``POST .../chat/completions`` (any prefix, so ``/v1/...`` and Azure's
``/openai/deployments/<name>/chat/completions?api-version=...`` both work), ``GET /stats``
and, with ``metrics`` set, vLLM's ``GET /metrics`` (:func:`vllm_metrics`; 404 otherwise).
Behaviour per request:

- a scripted action, if any is queued (:meth:`LoopbackServer.push`), else the defaults;
- ``latency_s`` (+ ``U(0, jitter_s)``) before answering;
- with probability ``fault_rate`` a fault: 429 with ``Retry-After`` (half) or 500 (half);
- with ``quota_after`` N, the first N requests are answered and every later one gets OpenAI's
  exhausted-quota reply (429 ``insufficient_quota``, :data:`QUOTA_EXHAUSTED`); set
  ``server.quota_after = None`` to answer again;
- the answer text from ``answer(body)`` (default ``Answer: 1``), with usage counts.

``seen`` is the request log: every request in arrival order with its body and the status it was
answered with (``t_answered``: when the reply was decided, ``time.monotonic()``).

Action keys: ``status`` (HTTP status; a JSON error body is sent), ``headers`` (extra response
headers), ``error_code`` (``error.code`` of the body), ``error_message`` (its
``error.message``), ``body`` (a 200 answer with exactly this JSON), ``delay_s`` (sleep first),
``content`` (answer text; None for a null content), ``finish_reason``, ``refusal``,
``logprobs`` (the choice's ``logprobs.content`` list as sent; None: no ``logprobs`` key).

A request with ``"logprobs": true`` gets ``choices[0].logprobs.content`` from ``logprobs(body,
text)`` (default :func:`default_logprobs`), in OpenAI's shape (vLLM's server sends the same).

Run as a script for a separate-process server (benchmarks)::

    python tests/llm/loopback.py --latency 0.2 --fault-rate 0.05   # prints "PORT <n>"

The script serves the same behaviour from one asyncio event loop
(:meth:`LoopbackServer.serve_async`) instead of a thread per connection: with 64 keep-alive
clients each sleeping 200 ms, the threaded server's GIL hand-offs and sleep wake-ups added
~40 ms to every request and capped the benchmark's throughput at ~0.83 of the Little's-law
ceiling with a bare SDK client; the event-loop server serves the same requests at ~0.94
(benchmarks/bench_api_throughput.py). ``--threaded`` keeps the thread-per-connection server.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import numpy as np


@dataclass
class Seen:
    """One request as the server saw it (``body`` parsed, ``raw`` as sent; both only with
    ``keep_bodies``)."""

    method: str
    path: str
    headers: dict[str, str]
    body: dict[str, Any] | None
    t_arrival: float
    status: int = 200
    auth: str = ""
    raw: bytes = b""
    t_answered: float | None = None


@dataclass
class Stats:
    """Counters: requests by status, in flight now and the maximum seen."""

    by_status: collections.Counter = field(default_factory=collections.Counter)
    in_flight: int = 0
    max_in_flight: int = 0
    chat_requests: int = 0


#: OpenAI's reply to a key whose quota is spent (the action of ``quota_after``).
QUOTA_EXHAUSTED: dict[str, Any] = {
    "status": 429, "error_code": "insufficient_quota",
    "error_message": "You exceeded your current quota, please check your plan and billing "
                     "details."}


def vllm_metrics(num_gpu_blocks: object, block_size: object = 16, *, engines: int = 1,
                 prefix_caching: bool = True) -> str:
    """A ``GET /metrics`` text as vLLM 0.32's server writes it, with its cache config gauge.

    ``vllm:cache_config_info`` carries ``CacheConfig`` as labels, each value ``str()``-ed (so
    ``num_gpu_blocks`` is ``"None"`` before the engine has profiled its memory), one line per
    engine of a data-parallel server; counters and other gauges come before and after it.
    """
    lines = ["# HELP vllm:num_requests_running Number of requests in model execution batches.",
             "# TYPE vllm:num_requests_running gauge",
             'vllm:num_requests_running{engine="0",model_name="tiny"} 0.0',
             "# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig",
             "# TYPE vllm:cache_config_info gauge"]
    for engine in range(engines):
        lines.append(
            f'vllm:cache_config_info{{block_size="{block_size}",cache_dtype="auto",'
            f'calculate_kv_scales="False",cpu_kvcache_space_bytes="None",'
            f'enable_prefix_caching="{prefix_caching}",engine="{engine}",'
            f'gpu_memory_utilization="0.9",is_attention_free="False",'
            f'kv_sharing_fast_prefill="False",mamba_cache_dtype="auto",'
            f'num_cpu_blocks="None",num_gpu_blocks="{num_gpu_blocks}",'
            f'num_gpu_blocks_override="None",prefix_caching_hash_algo="sha256",'
            f'sliding_window="None",swap_space="4.0"}} 1.0')
    lines += ["# HELP vllm:prefix_cache_queries_total Prefix cache queries, in terms of number "
              "of queried tokens.",
              "# TYPE vllm:prefix_cache_queries_total counter",
              'vllm:prefix_cache_queries_total{engine="0",model_name="tiny"} 1234.0']
    return "\n".join(lines) + "\n"


def default_answer(body: dict[str, Any]) -> str:
    """``Answer: 1`` (valid for every question of the benchmark)."""
    return "Answer: 1"


def default_logprobs(body: dict[str, Any], text: str) -> list[dict[str, Any]]:
    """OpenAI-shaped ``logprobs.content`` for ``text``: one entry per word, space or digit.

    A digit token's probability is ``0.55 + 0.4 * u`` with ``u`` in [0, 1) from the CRC-32 of
    the last user message (so requests differ, reproducibly); the other digits 1..4 share the
    rest but 5 %, which goes to a non-number token ``"The"``. Up to ``top_logprobs`` candidates.
    """
    import math
    import re
    import zlib

    last = next((m for m in reversed(body.get("messages") or []) if m.get("role") == "user"),
                {})
    content = last.get("content")
    words = content if isinstance(content, str) else json.dumps(content, sort_keys=True)
    u = (zlib.crc32(words.encode("utf-8")) % 1000) / 1000
    k = int(body.get("top_logprobs") or 1)
    out = []
    for token in re.findall(r"\s*(?:\d|[^\d\s]+)|\s+", text):
        if token.strip().isdigit():
            p = 0.55 + 0.4 * u
            others = [d for d in "1234" if d != token.strip()]
            top = [(token, p), *((d, (0.95 - p) / len(others)) for d in others), ("The", 0.05)]
        else:
            top = [(token, 0.99)]
        out.append({"token": token, "logprob": math.log(top[0][1]),
                    "bytes": list(token.encode("utf-8")),
                    "top_logprobs": [{"token": t, "logprob": math.log(q),
                                      "bytes": list(t.encode("utf-8"))} for t, q in top[:k]]})
    return out


class LoopbackServer:
    """The server; use as a context manager or call :meth:`start`/:meth:`stop`.

    Args:
        latency_s: Fixed delay before each answer in seconds.
        jitter_s: Extra uniform delay in [0, jitter_s] seconds.
        fault_rate: Probability of an injected fault (429 or 500) per request.
        retry_after: ``Retry-After`` header value of injected 429s (seconds, as text).
        answer: Text of each answer from the request body.
        seed: Seed of the fault/jitter draws (a numpy Generator of its own).
        keep_bodies: Store request bodies (turn off in benchmarks to save memory).
        models: Served model ids: ``GET /v1/models`` lists them (with ``max_model_len``);
            None answers every GET with the statistics.
        max_model_len: Context reported for each served model.
        port: Port to bind on 127.0.0.1 (0: any free port).
        respond: Chooses the action of a chat request from its parsed body (None: the
            defaults); scripted actions (:meth:`push`) come first. Lets a test fault one
            case's turn whatever the arrival order.
        quota_after: Answer this many chat requests (those given the default behaviour, in
            arrival order), then reply :data:`QUOTA_EXHAUSTED` to every later one; None: no
            quota. An attribute: set it to None to answer again.
        metrics: Text of ``GET /metrics`` (:func:`vllm_metrics`); None answers it 404, as a
            server without metrics does. An attribute.
        logprobs: ``logprobs.content`` of an answer to a request that asks for log-probabilities
            (:func:`default_logprobs`).
    """

    def __init__(self, *, latency_s: float = 0.0, jitter_s: float = 0.0,
                 fault_rate: float = 0.0, retry_after: str = "0.05",
                 answer: Callable[[dict[str, Any]], str] = default_answer, seed: int = 0,
                 keep_bodies: bool = True, models: list[str] | None = None,
                 max_model_len: int = 32768, port: int = 0,
                 respond: Callable[[dict[str, Any]], dict[str, Any] | None] | None = None,
                 quota_after: int | None = None, metrics: str | None = None,
                 logprobs: Callable[[dict[str, Any], str], list[dict[str, Any]]] =
                 default_logprobs) -> None:
        self.logprobs = logprobs
        self.models = models
        self.metrics = metrics
        #: ``GET /metrics`` requests seen.
        self.metrics_requests = 0
        self.respond = respond
        self.quota_after = quota_after
        #: Requests answered under ``quota_after`` so far.
        self.quota_used = 0
        self.max_model_len = max_model_len
        #: ``POST /tokenize`` requests seen (answered 404, as servers other than vLLM do).
        self.tokenize_requests = 0
        self._port = port
        self.latency_s = latency_s
        self.jitter_s = jitter_s
        self.fault_rate = fault_rate
        self.retry_after = retry_after
        self.answer = answer
        self.keep_bodies = keep_bodies
        self.seen: list[Seen] = []
        self.stats = Stats()
        self._script: collections.deque[dict[str, Any]] = collections.deque()
        self._lock = threading.Lock()
        self._rng = np.random.default_rng(seed)
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- control --------------------------------------------------------------------------
    def push(self, *actions: dict[str, Any]) -> None:
        """Queue scripted actions, used by the next requests in arrival order."""
        with self._lock:
            self._script.extend(actions)

    @property
    def port(self) -> int:
        assert self._httpd is not None
        return self._httpd.server_address[1]

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:<port>/v1``."""
        return f"http://127.0.0.1:{self.port}/v1"

    @property
    def root_url(self) -> str:
        """``http://127.0.0.1:<port>`` (Azure endpoint)."""
        return f"http://127.0.0.1:{self.port}"

    def chat_requests(self) -> list[Seen]:
        """The chat-completion requests seen so far."""
        with self._lock:
            return [s for s in self.seen if s.path.split("?")[0].endswith("/chat/completions")]

    def start(self) -> LoopbackServer:
        handler = _make_handler(self)
        self._httpd = _Server(("127.0.0.1", self._port), handler)
        self._thread = threading.Thread(target=self._httpd.serve_forever, args=(0.05,),
                                        daemon=True, name="loopback-server")
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None

    async def serve_async(self, ready: Callable[[int], None] | None = None) -> None:
        """Serve on one asyncio event loop until cancelled (script mode; see the docstring).

        Same behaviour, stats and ``seen`` as the threaded server for the actions of
        :meth:`_next_action` (latency, jitter, injected 429/500, scripted ``status``,
        ``headers``, ``error_code``, ``content``, ``finish_reason``, ``refusal``).

        Args:
            ready: Called with the bound port once listening.
        """
        loop = asyncio.get_running_loop()
        httpd = await loop.create_server(lambda: _AsyncHandler(self), "127.0.0.1", self._port,
                                         backlog=_Server.request_queue_size,
                                         reuse_address=True)
        self._async_port = httpd.sockets[0].getsockname()[1]
        if ready is not None:
            ready(self._async_port)
        async with httpd:
            await httpd.serve_forever()

    def __enter__(self) -> LoopbackServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- behaviour ------------------------------------------------------------------------
    def _next_action(self, body: dict[str, Any] | None = None) -> dict[str, Any]:
        with self._lock:
            if self._script:
                return self._script.popleft()
            if self.respond is not None:
                chosen = self.respond(body or {})
                if chosen is not None:
                    return chosen
            if self.quota_after is not None and self.quota_used >= self.quota_after:
                return dict(QUOTA_EXHAUSTED)
            delay = self.latency_s
            if self.jitter_s:
                delay += float(self._rng.uniform(0, self.jitter_s))
            action: dict[str, Any] = {"delay_s": delay}
            if self.fault_rate and self._rng.random() < self.fault_rate:
                if self._rng.random() < 0.5:
                    action.update(status=429, headers={"Retry-After": self.retry_after})
                else:
                    action.update(status=500)
            elif self.quota_after is not None:
                self.quota_used += 1
            return action


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 512  # listen() backlog: 64+ clients connect at once (default 5)

    def handle_error(self, request: Any, client_address: Any) -> None:
        """Stay quiet when a client disconnects (timeouts, a killed benchmark child)."""
        if not isinstance(sys.exc_info()[1], (ConnectionError, TimeoutError)):
            super().handle_error(request, client_address)


def _logprobs_of(server: LoopbackServer, action: dict[str, Any], body: dict[str, Any] | None,
                 text: str | None) -> list[dict[str, Any]] | None:
    """The answer's ``logprobs.content``: the action's, else the server's when asked for."""
    if "logprobs" in action:
        return action["logprobs"]
    if body and body.get("logprobs") and text is not None:
        return server.logprobs(body, text)
    return None


def _completion_body(model: str, text: str | None, finish: str, refusal: str | None,
                     prompt_tokens: int, logprobs: list[dict[str, Any]] | None = None
                     ) -> dict[str, Any]:
    body = {
        "id": "chatcmpl-loopback", "object": "chat.completion", "created": int(time.time()),
        "model": model, "system_fingerprint": "fp_loopback",
        "choices": [{"index": 0, "finish_reason": finish,
                     "message": {"role": "assistant", "content": text, "refusal": refusal}}],
        "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": 7,
                  "total_tokens": prompt_tokens + 7,
                  "prompt_tokens_details": {"cached_tokens": prompt_tokens // 2},
                  "completion_tokens_details": {"reasoning_tokens": 3}},
    }
    if logprobs is not None:
        body["choices"][0]["logprobs"] = {"content": logprobs}
    return body


def _metrics_reply(server: LoopbackServer) -> tuple[int, str]:
    """Status and text of ``GET /metrics`` (404 without ``metrics``)."""
    with server._lock:
        server.metrics_requests += 1
        text = server.metrics
    return (404, '{"detail":"Not Found"}') if text is None else (200, text)


def _stats_payload(server: LoopbackServer) -> dict[str, Any]:
    with server._lock:
        return {"by_status": {str(k): v for k, v in server.stats.by_status.items()},
                "chat_requests": server.stats.chat_requests,
                "max_in_flight": server.stats.max_in_flight}


class _AsyncHandler(asyncio.Protocol):
    """One keep-alive connection of :meth:`LoopbackServer.serve_async` (one request at a time)."""

    def __init__(self, server: LoopbackServer) -> None:
        self.server = server
        self.transport: asyncio.Transport | None = None
        self.buffer = b""
        self.busy = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        self._next_request()

    def _next_request(self) -> None:
        if self.busy or self.transport is None:
            return
        end = self.buffer.find(b"\r\n\r\n")
        if end < 0:
            return
        lines = self.buffer[:end].decode("latin-1").split("\r\n")
        headers: dict[str, str] = {}
        for line in lines[1:]:
            key, _, value = line.partition(":")
            headers[key.strip().lower()] = value.strip()
        length = int(headers.get("content-length") or 0)
        if len(self.buffer) < end + 4 + length:
            return
        raw = self.buffer[end + 4:end + 4 + length]
        self.buffer = self.buffer[end + 4 + length:]
        method, path, version = (lines[0].split(" ") + ["", "", ""])[:3]
        close = (headers.get("connection", "").lower() == "close"
                 or version.upper() == "HTTP/1.0")
        self.busy = True
        if method == "GET" and path.split("?")[0].rstrip("/").endswith("/metrics"):
            status, text = _metrics_reply(self.server)
            self._send_raw(status, text.encode("utf-8"), "text/plain; version=0.0.4", None,
                           close)
        elif method == "GET":
            self._send(200, _stats_payload(self.server), None, close)
        elif path.split("?")[0].rstrip("/").endswith("/tokenize"):  # vLLM only: not served
            self._send(404, {"detail": "Not Found"}, None, close)
        else:
            self._chat(path, headers, raw, close)

    def _chat(self, path: str, headers: dict[str, str], raw: bytes, close: bool) -> None:
        server = self.server
        arrival = time.monotonic()
        try:
            body = json.loads(raw) if raw else None
        except json.JSONDecodeError:
            body = None
        seen = Seen("POST", path, {k: ("<present>" if k in ("authorization", "api-key") else v)
                                   for k, v in headers.items()},
                    body if server.keep_bodies else None, arrival,
                    auth=headers.get("authorization") or headers.get("api-key") or "",
                    raw=raw if server.keep_bodies else b"")
        with server._lock:
            server.seen.append(seen)
            server.stats.chat_requests += 1
            server.stats.in_flight += 1
            server.stats.max_in_flight = max(server.stats.max_in_flight, server.stats.in_flight)
        action = server._next_action(body)
        asyncio.get_running_loop().call_later(float(action.get("delay_s") or 0.0), self._answer,
                                              seen, action, body, len(raw), close)

    def _answer(self, seen: Seen, action: dict[str, Any], body: dict[str, Any] | None,
                raw_length: int, close: bool) -> None:
        server = self.server
        status = int(action.get("status", 200))
        seen.status, seen.t_answered = status, time.monotonic()
        with server._lock:
            server.stats.by_status[status] += 1
            server.stats.in_flight -= 1
        if status != 200:
            err = {"error": {"message": action.get("error_message", f"loopback {status}"),
                             "type": "loopback", "param": None,
                             "code": action.get("error_code")}}
            self._send(status, err, action.get("headers"), close)
            return
        if "body" in action:  # a scripted 200 body, as it is (malformed-response tests)
            self._send(200, action["body"], action.get("headers"), close)
            return
        text = action["content"] if "content" in action else server.answer(body or {})
        self._send(200, _completion_body(
            (body or {}).get("model", "loopback"), text, action.get("finish_reason", "stop"),
            action.get("refusal"), raw_length // 4, _logprobs_of(server, action, body, text)),
            action.get("headers"), close)

    def _send(self, status: int, payload: dict[str, Any], headers: dict[str, str] | None,
              close: bool) -> None:
        self._send_raw(status, json.dumps(payload).encode("utf-8"), "application/json",
                       headers, close)

    def _send_raw(self, status: int, data: bytes, content_type: str,
                  headers: dict[str, str] | None, close: bool) -> None:
        self.busy = False
        if self.transport is None or self.transport.is_closing():
            return  # the client gave up
        head = [f"HTTP/1.1 {status} {_REASONS.get(status, 'Status')}",
                f"Content-Type: {content_type}", f"Content-Length: {len(data)}"]
        head += [f"{k}: {v}" for k, v in (headers or {}).items()]
        if close:
            head.append("Connection: close")
        self.transport.write(("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + data)
        if close:
            self.transport.close()
            return
        if self.buffer:
            self._next_request()


_REASONS = {200: "OK", 400: "Bad Request", 401: "Unauthorized", 403: "Forbidden",
            404: "Not Found", 422: "Unprocessable Entity", 429: "Too Many Requests",
            500: "Internal Server Error", 503: "Service Unavailable"}


def _make_handler(server: LoopbackServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib name
            return

        def _send(self, status: int, payload: dict[str, Any],
                  headers: dict[str, str] | None = None) -> None:
            data = json.dumps(payload).encode("utf-8")
            try:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(data)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client gave up (timeout test)

        def do_GET(self) -> None:  # noqa: N802 - stdlib name
            if self.path.split("?")[0].rstrip("/").endswith("/metrics"):
                status, text = _metrics_reply(server)
                data = text.encode("utf-8")
                self.send_response(status)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
                return
            if server.models is not None and self.path.rstrip("/").endswith("/models"):
                self._send(200, {"object": "list", "data": [
                    {"id": m, "object": "model", "max_model_len": server.max_model_len}
                    for m in server.models]})
                return
            self._send(200, _stats_payload(server))

        def do_POST(self) -> None:  # noqa: N802 - stdlib name
            if self.path.split("?")[0].rstrip("/").endswith("/tokenize"):  # vLLM only
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                server.tokenize_requests += 1
                self._send(404, {"detail": "Not Found"})
                return
            arrival = time.monotonic()
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            try:
                body = json.loads(raw) if raw else None
            except json.JSONDecodeError:
                body = None
            headers = {k.lower(): ("<present>" if k.lower() in ("authorization", "api-key")
                                   else v) for k, v in self.headers.items()}
            seen = Seen("POST", self.path, headers, body if server.keep_bodies else None,
                        arrival, auth=self.headers.get("Authorization")
                        or self.headers.get("api-key") or "",
                        raw=raw if server.keep_bodies else b"")
            with server._lock:
                server.seen.append(seen)
                server.stats.chat_requests += 1
                server.stats.in_flight += 1
                server.stats.max_in_flight = max(server.stats.max_in_flight,
                                                 server.stats.in_flight)
            counted = True
            try:
                action = server._next_action(body)
                if action.get("delay_s"):
                    time.sleep(action["delay_s"])
                status = int(action.get("status", 200))
                seen.status, seen.t_answered = status, time.monotonic()
                with server._lock:
                    server.stats.by_status[status] += 1
                    # done before the answer is written: a client's next request can only
                    # arrive after it, so the count never shows one request twice
                    server.stats.in_flight -= 1
                    counted = False
                if status != 200:
                    err = {"error": {
                        "message": action.get("error_message", f"loopback {status}"),
                        "type": "loopback", "param": None, "code": action.get("error_code")}}
                    self._send(status, err, action.get("headers"))
                    return
                if "body" in action:  # a scripted 200 body, as it is
                    self._send(200, action["body"], action.get("headers"))
                    return
                text = action["content"] if "content" in action else server.answer(body or {})
                prompt_tokens = len(raw) // 4
                self._send(200, _completion_body(
                    (body or {}).get("model", "loopback"), text,
                    action.get("finish_reason", "stop"), action.get("refusal"), prompt_tokens,
                    _logprobs_of(server, action, body, text)),
                    action.get("headers"))
            finally:
                if counted:
                    with server._lock:
                        server.stats.in_flight -= 1

    return Handler


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Loopback OpenAI-compatible server.")
    parser.add_argument("--latency", type=float, default=0.2)
    parser.add_argument("--jitter", type=float, default=0.0)
    parser.add_argument("--fault-rate", type=float, default=0.0)
    parser.add_argument("--retry-after", default="0.05")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--quota-after", type=int, default=None,
                        help="answer N requests, then reply 429 insufficient_quota")
    parser.add_argument("--port", type=int, default=0, help="port on 127.0.0.1 (0: any free)")
    parser.add_argument("--threaded", action="store_true",
                        help="serve with the threaded http.server instead of asyncio")
    args = parser.parse_args(argv)
    server = LoopbackServer(latency_s=args.latency, jitter_s=args.jitter,
                            fault_rate=args.fault_rate, retry_after=args.retry_after,
                            seed=args.seed, keep_bodies=False, port=args.port,
                            quota_after=args.quota_after)
    try:
        if args.threaded:
            server.start()
            print(f"PORT {server.port}", flush=True)
            while True:
                time.sleep(3600)
        else:
            asyncio.run(server.serve_async(lambda port: print(f"PORT {port}", flush=True)))
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
