"""A local OpenAI-compatible Chat Completions server on 127.0.0.1 for tests and benchmarks.

Standard library only (``http.server`` in a thread, HTTP/1.1 keep-alive). It answers
``POST .../chat/completions`` (any prefix, so ``/v1/...`` and Azure's
``/openai/deployments/<name>/chat/completions?api-version=...`` both work) and
``GET /stats``. Behaviour per request:

- a scripted action, if any is queued (:meth:`LoopbackServer.push`), else the defaults;
- ``latency_s`` (+ ``U(0, jitter_s)``) before answering;
- with probability ``fault_rate`` a fault: 429 with ``Retry-After`` (half) or 500 (half);
- the answer text from ``answer(body)`` (default ``Answer: 1``), with usage counts.

Action keys: ``status`` (HTTP status; a JSON error body is sent), ``headers`` (extra response
headers), ``error_code`` (``error.code`` of the body), ``delay_s`` (sleep first),
``content`` (answer text; None for a null content), ``finish_reason``, ``refusal``.

Run as a script for a separate-process server (benchmarks)::

    python tests/llm/loopback.py --latency 0.2 --fault-rate 0.05   # prints "PORT <n>"
"""

from __future__ import annotations

import argparse
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
    """One request as the server saw it."""

    method: str
    path: str
    headers: dict[str, str]
    body: dict[str, Any] | None
    t_arrival: float
    status: int = 200
    auth: str = ""


@dataclass
class Stats:
    """Counters: requests by status, in flight now and the maximum seen."""

    by_status: collections.Counter = field(default_factory=collections.Counter)
    in_flight: int = 0
    max_in_flight: int = 0
    chat_requests: int = 0


def default_answer(body: dict[str, Any]) -> str:
    """``Answer: 1`` (valid for every question of the benchmark)."""
    return "Answer: 1"


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
    """

    def __init__(self, *, latency_s: float = 0.0, jitter_s: float = 0.0,
                 fault_rate: float = 0.0, retry_after: str = "0.05",
                 answer: Callable[[dict[str, Any]], str] = default_answer, seed: int = 0,
                 keep_bodies: bool = True) -> None:
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
        self._httpd = _Server(("127.0.0.1", 0), handler)
        self._thread = threading.Thread(target=self._httpd.serve_forever, args=(0.05,),
                                        daemon=True, name="loopback-server")
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None

    def __enter__(self) -> LoopbackServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- behaviour ------------------------------------------------------------------------
    def _next_action(self) -> dict[str, Any]:
        with self._lock:
            if self._script:
                return self._script.popleft()
            delay = self.latency_s
            if self.jitter_s:
                delay += float(self._rng.uniform(0, self.jitter_s))
            action: dict[str, Any] = {"delay_s": delay}
            if self.fault_rate and self._rng.random() < self.fault_rate:
                if self._rng.random() < 0.5:
                    action.update(status=429, headers={"Retry-After": self.retry_after})
                else:
                    action.update(status=500)
            return action


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 512  # listen() backlog: 64+ clients connect at once (default 5)

    def handle_error(self, request: Any, client_address: Any) -> None:
        """Stay quiet when a client disconnects (timeouts, a killed benchmark child)."""
        if not isinstance(sys.exc_info()[1], (ConnectionError, TimeoutError)):
            super().handle_error(request, client_address)


def _completion_body(model: str, text: str | None, finish: str, refusal: str | None,
                     prompt_tokens: int) -> dict[str, Any]:
    return {
        "id": "chatcmpl-loopback", "object": "chat.completion", "created": int(time.time()),
        "model": model, "system_fingerprint": "fp_loopback",
        "choices": [{"index": 0, "finish_reason": finish,
                     "message": {"role": "assistant", "content": text, "refusal": refusal}}],
        "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": 7,
                  "total_tokens": prompt_tokens + 7,
                  "prompt_tokens_details": {"cached_tokens": prompt_tokens // 2},
                  "completion_tokens_details": {"reasoning_tokens": 3}},
    }


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
            with server._lock:
                stats = {"by_status": {str(k): v for k, v in server.stats.by_status.items()},
                         "chat_requests": server.stats.chat_requests,
                         "max_in_flight": server.stats.max_in_flight}
            self._send(200, stats)

        def do_POST(self) -> None:  # noqa: N802 - stdlib name
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
                        or self.headers.get("api-key") or "")
            with server._lock:
                server.seen.append(seen)
                server.stats.chat_requests += 1
                server.stats.in_flight += 1
                server.stats.max_in_flight = max(server.stats.max_in_flight,
                                                 server.stats.in_flight)
            try:
                action = server._next_action()
                if action.get("delay_s"):
                    time.sleep(action["delay_s"])
                status = int(action.get("status", 200))
                seen.status = status
                with server._lock:
                    server.stats.by_status[status] += 1
                if status != 200:
                    err = {"error": {"message": f"loopback {status}", "type": "loopback",
                                     "param": None, "code": action.get("error_code")}}
                    self._send(status, err, action.get("headers"))
                    return
                text = action["content"] if "content" in action else server.answer(body or {})
                prompt_tokens = len(raw) // 4
                self._send(200, _completion_body(
                    (body or {}).get("model", "loopback"), text,
                    action.get("finish_reason", "stop"), action.get("refusal"), prompt_tokens),
                    action.get("headers"))
            finally:
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
    args = parser.parse_args(argv)
    server = LoopbackServer(latency_s=args.latency, jitter_s=args.jitter,
                            fault_rate=args.fault_rate, retry_after=args.retry_after,
                            seed=args.seed, keep_bodies=False).start()
    print(f"PORT {server.port}", flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
