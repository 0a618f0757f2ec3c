"""Shared pieces of the real-engine tests (vLLM's CPU build, in the engine venv).

The tiny random Qwen2-VL of ``tests/llm/tiny_vlm.py`` (size ``gpu``: head_dim 64, peaked
logits, so greedy outputs do not flip between batched and single runs), a generated Stage 03
bundle with every path and the 7-image dialogue, and a vLLM OpenAI-compatible server started on
127.0.0.1 as a subprocess.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import numpy as np
from PIL import Image

TESTS = Path(__file__).resolve().parents[1]
ROOT = TESTS.parent
EVAL_SCRIPT = ROOT / "src" / "03_eval_vlm_on_chexpercept" / "00_eval.py"
#: Served model name of the test server.
SERVED_NAME = "tiny-qwen2-vl"
#: Output-token cap of every engine test run (gibberish answers; short keeps runs fast).
MAX_NEW_TOKENS = 12
#: Fraction of the machine's memory vLLM's CPU build may reserve (the tiny model needs little).
CPU_MEMORY_FRACTION = 0.1
#: Engine dtype of the tests: float32, because bf16 rounding differs between batch shapes and
#: can flip a greedy token of the random model (seen in 12 of 448 turns of the benchmark).
DTYPE = "float32"
#: Environment of engine subprocesses: one OpenMP thread per core and no usage reporting.
ENGINE_ENV = {"VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1", "TOKENIZERS_PARALLELISM": "false",
              "HF_HUB_OFFLINE": "1", "PYTHONUNBUFFERED": "1"}


def load_by_path(name: str, path: Path) -> ModuleType:
    """Import a module from a file (no sys.path change)."""
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


tiny_vlm = load_by_path("_engine_tiny_vlm", TESTS / "llm" / "tiny_vlm.py")
stage03_bundle = load_by_path("_engine_stage03_bundle", TESTS / "evaluation" / "stage03_bundle.py")


def build_model(folder: Path) -> Path:
    """The tiny Qwen2-VL with Qwen3's thinking switch in its chat template."""
    return tiny_vlm.build_tiny_qwen2_vl(folder, size="gpu", seed=0,
                                        chat_template=tiny_vlm.THINKING_CHAT_TEMPLATE)


def write_bundle(root: Path, size: int = 256, seed: int = 0) -> Path:
    """The 7-case Stage 03 bundle (all paths, the 7-image dialogue) with random RGB images."""
    stage03_bundle.write_bundle(root)
    for i, (key_id, item) in enumerate(stage03_bundle.load_items(root).items()):
        rng = np.random.default_rng([seed, i])
        for rel in stage03_bundle.image_relpaths(key_id, item):
            pixels = rng.integers(0, 256, (size, size, 3), dtype=np.uint8)
            Image.fromarray(pixels).save(root / "chexpercept" / key_id / rel)
    return root


def free_port() -> int:
    """A free TCP port on 127.0.0.1."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class VllmServer:
    """``python -m vllm.entrypoints.openai.api_server`` on 127.0.0.1 (start, stop, kill).

    Args:
        model_dir: The model folder.
        log: File the server's output goes to.
        max_model_len: ``--max-model-len``.
        extra_args: Further server flags (e.g. ``--num-gpu-blocks-override N``).
    """

    def __init__(self, model_dir: Path, log: Path, max_model_len: int = 4096,
                 extra_args: tuple[str, ...] = ()) -> None:
        self.model_dir = model_dir
        self.log = log
        self.max_model_len = max_model_len
        self.extra_args = tuple(extra_args)
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def command(self) -> list[str]:
        return [sys.executable, "-m", "vllm.entrypoints.openai.api_server",
                "--model", str(self.model_dir), "--served-model-name", SERVED_NAME,
                "--host", "127.0.0.1", "--port", str(self.port),
                "--max-model-len", str(self.max_model_len),
                "--limit-mm-per-prompt", json.dumps({"image": 7}),
                "--gpu-memory-utilization", str(CPU_MEMORY_FRACTION),
                "--enforce-eager", "--seed", "0", "--dtype", DTYPE, *self.extra_args]

    def start(self) -> None:
        """Start the server (returns at once; it is ready ~30-100 s later)."""
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(self.command(), stdout=out, stderr=subprocess.STDOUT,
                                         env={**os.environ, **ENGINE_ENV},
                                         start_new_session=True)

    def wait_ready(self, timeout_s: float = 300.0) -> None:
        """Block until ``GET /v1/models`` answers (raises TimeoutError with the log's tail)."""
        import httpx2

        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise RuntimeError(f"vLLM server exited ({self.proc.returncode}):\n"
                                   f"{self.tail()}")
            with contextlib.suppress(httpx2.HTTPError):
                if httpx2.get(f"{self.base_url}/models", timeout=5).status_code == 200:
                    return
            time.sleep(1.0)
        raise TimeoutError(f"vLLM server not ready in {timeout_s} s:\n{self.tail()}")

    @property
    def root_url(self) -> str:
        """``http://127.0.0.1:<port>`` (``/metrics``, ``/reset_prefix_cache``)."""
        return f"http://127.0.0.1:{self.port}"

    def chat_requests(self) -> int:
        """``POST /v1/chat/completions`` requests the server logged so far."""
        text = self.log.read_text(encoding="utf-8", errors="replace")
        return text.count("POST /v1/chat/completions")

    def tail(self, lines: int = 40) -> str:
        return "\n".join(self.log.read_text(encoding="utf-8", errors="replace")
                         .splitlines()[-lines:])

    def stop(self, sig: int = signal.SIGTERM) -> None:
        """Stop the server's whole process group (SIGKILL for a crash) and wait for it."""
        if self.proc is None or self.proc.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, sig)
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=30)


def eval_command(bench: Path, out: Path, *extra: str) -> list[str]:
    """``00_eval.py`` with the openai provider against the test server's model name."""
    return [sys.executable, str(EVAL_SCRIPT), "--benchmark-dir", str(bench),
            "--output-path", str(out), "--provider", "openai", "--model", SERVED_NAME,
            "--max-new-tokens", str(MAX_NEW_TOKENS), "--no-progress", *extra]


def run_eval(bench: Path, out: Path, *extra: str, timeout_s: float = 600.0
             ) -> subprocess.CompletedProcess[str]:
    """Run :func:`eval_command` to the end; returns the completed process (text output)."""
    return subprocess.run(eval_command(bench, out, *extra), capture_output=True, text=True,
                          env={**os.environ, **ENGINE_ENV}, timeout=timeout_s, check=False)


def records(run_dir: Path) -> list[dict]:
    """``records.jsonl`` of a run folder ([] when absent)."""
    path = run_dir / "records.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()
            if line.strip()]


def results(run_dir: Path) -> dict:
    """``all_results.json`` of a run folder."""
    return json.loads((run_dir / "all_results.json").read_text(encoding="utf-8"))


def answers(all_results: dict) -> dict:
    """``all_results.json`` without ``token_usage`` (prefix-cache hits depend on batching)."""
    return {key: {k: v for k, v in case.items() if k != "token_usage"}
            for key, case in all_results.items()}


@contextlib.contextmanager
def background(cmd: list[str], log: Path) -> Iterator[subprocess.Popen[bytes]]:
    """Run ``cmd`` in the background (its own process group), output to ``log``."""
    with log.open("wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT,
                                env={**os.environ, **ENGINE_ENV}, start_new_session=True)
    try:
        yield proc
    finally:
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)
