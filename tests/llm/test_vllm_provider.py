"""The opensource (vLLM) provider against a stub ``vllm`` with the real signatures."""

from __future__ import annotations

import hashlib
import json
import logging
import runpy
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
import vllm_stub
from local_provider_helpers import (
    EVAL_SCRIPT,
    ROOT,
    load_by_path,
    read_manifest,
    read_records,
    run_eval_cli,
    turns_per_case,
    write_marked_bundle,
)

from utils.errors import ConfigError, EngineStartError, MissingDependencyError, ProviderError
from utils.llm import create_model
from utils.llm.base import Message, TurnRequest
from utils.llm.vllm_provider import default_tensor_parallel_size, visible_gpu_count

TEMPLATE = "{% for m in messages %}{{ m['role'] }}{% endfor %}"


def _grey(conversation) -> int:
    """Grey level of the first image of a conversation (identifies the case)."""
    first = vllm_stub.image_parts(conversation)[0]
    return vllm_stub.decode_data_url(first["image_url"]["url"]).getpixel((0, 0))[0]


def _by_case(conversation):
    return f"I see case {_grey(conversation)}.\nAnswer: 1", "stop"


@pytest.fixture()
def stub(monkeypatch):
    """Install a stub vllm answering with the case's grey level; two visible GPUs."""
    module = vllm_stub.make_vllm_module(_by_case)
    monkeypatch.setitem(sys.modules, "vllm", module)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    return module


@pytest.fixture()
def model_dir(tmp_path):
    folder = tmp_path / "local_model"
    folder.mkdir()
    (folder / "config.json").write_text('{"model_type": "qwen3_vl"}', encoding="utf-8")
    (folder / "chat_template.jinja").write_text(TEMPLATE, encoding="utf-8")
    return folder


def _request(text, images=(), request_id="r"):
    return TurnRequest(messages=(Message("system", "sys"), Message("user", text, tuple(images))),
                       request_id=request_id)


def test_cli_run_one_chat_call_per_window_step_mapped_to_the_right_case(stub, model_dir,
                                                                         tmp_path):
    bench = tmp_path / "bench"
    marks = write_marked_bundle(bench)
    out = tmp_path / "out"
    rc = run_eval_cli(["--benchmark-dir", str(bench), "--output-path", str(out),
                       "--provider", "opensource", "--model", "qwen3.6-27b",
                       "--model-path", str(model_dir), "--no-thinking",
                       "--oracle_setting", "none", "--no-progress"])
    assert rc == 0
    (engine,) = stub.LLM.instances
    kwargs = engine.engine_kwargs
    assert kwargs["model"] == str(model_dir)
    assert kwargs["limit_mm_per_prompt"] == {"image": 7}
    assert kwargs["enable_prefix_caching"] is True
    assert kwargs["tensor_parallel_size"] == 2  # from CUDA_VISIBLE_DEVICES
    assert kwargs["max_model_len"] == 65536

    run_dir = out / "opensource_qwen3.6-27b_no_thinking" / "oracle_none"
    records = read_records(run_dir)
    planned = turns_per_case(bench)
    assert Counter(r["key_id"] for r in records) == Counter(planned)
    # one LLM.chat per step of the KV window, each holding one turn of each case in flight:
    # at first the dialogues that fit the cache at the output cap (8192 tokens a reply, each
    # footprint the 65,536-token context), then every case once replies were seen to be short
    cache_tokens = vllm_stub.DEFAULT_BLOCKS * 16
    first = (cache_tokens - 16) // 65536  # block 0 is vLLM's null block
    assert [len(c.messages) for c in engine.calls][:2] == [first, len(planned)]
    assert sum(len(c.messages) for c in engine.calls) == len(records)
    for call in engine.calls:
        sp = call.sampling_params
        assert (sp.temperature, sp.top_p, sp.max_tokens, sp.seed) == (0.0, 1.0, 8192, 0)
        assert call.kwargs == {"use_tqdm": False,
                               "chat_template_kwargs": {"enable_thinking": False}}
        for conversation in call.messages:
            assert conversation[0] == {"role": "system", "content": conversation[0]["content"]}
            assert conversation[-1]["role"] == "user"
    # each answer went back to its own case
    for rec in records:
        assert rec["raw"].startswith(f"I see case {marks[rec['key_id']]}.")
        assert rec["completion_status"] == "ok"
        assert rec["usage"]["input_tokens"] > 0
    # a revision-required dialogue carries all 7 images by its last turns
    assert max(len(vllm_stub.image_parts(c)) for call in engine.calls
               for c in call.messages) == 7

    manifest = read_manifest(run_dir)
    settings = manifest["provider_settings"]
    assert settings["chat_template_sha256"] == hashlib.sha256(TEMPLATE.encode()).hexdigest()
    assert settings["config_sha256"] == hashlib.sha256(
        (model_dir / "config.json").read_bytes()).hexdigest()
    assert settings["limit_mm_per_prompt"] == {"image": 7}
    assert settings["chat_template_kwargs"] == {"enable_thinking": False}
    assert manifest["provider_runtime"]["tensor_parallel_size"] == 2
    assert manifest["provider_runtime"]["model_path"] == str(model_dir)
    assert manifest["provider_runtime"]["kv_cache"] == {
        "blocks": vllm_stub.DEFAULT_BLOCKS, "block_tokens": 16, "tokens": cache_tokens,
        "window_tokens": cache_tokens - 16}


def test_kv_cache_is_the_started_engines_and_kv_blocks_sets_it(stub, model_dir):
    """``kv_blocks`` is vLLM's ``num_gpu_blocks_override``; the window is read after the start."""
    model = create_model("opensource", "qwen3.5", model_path=str(model_dir), kv_blocks=300)
    assert model.engine_kwargs["num_gpu_blocks_override"] == 300
    assert model.kv_cache() is None  # not started: nothing known, no window
    model.start()
    cache = model.kv_cache()
    assert (cache.blocks, cache.block_tokens, cache.tokens) == (300, 16, 4800)
    assert cache.window_tokens == 299 * 16  # block 0 is vLLM's null block
    assert model.runtime_info()["num_gpu_blocks_override"] == 300
    assert "num_gpu_blocks_override" not in model.describe()  # not an identity field
    # without prefix caching there is no history to keep: no window
    plain = create_model("opensource", "qwen3.5", model_path=str(model_dir),
                         engine_kwargs={"enable_prefix_caching": False})
    plain.start()
    assert plain.kv_cache() is None and plain.runtime_info()["kv_cache"] is None
    with pytest.raises(ConfigError, match="kv_blocks"):
        create_model("opensource", "qwen3.5", model_path=str(model_dir), kv_blocks=1)


def test_a_run_resumes_on_another_kv_cache(stub, model_dir, tmp_path):
    """The cache and its window are runtime facts: a run resumes with another ``kv_blocks``."""
    from chexpercept.evaluation.api import evaluate

    bench = tmp_path / "bench"
    write_marked_bundle(bench)

    def run(blocks, **kwargs):
        return evaluate(bench, provider="opensource", output_path=tmp_path / "out",
                        model="qwen3.5", oracle_setting="none",
                        provider_options={"model_path": str(model_dir), "kv_blocks": blocks},
                        **kwargs)

    first = run(300, limit=3)
    second = run(9000)
    assert second.turns_resumed == first.turns_requested > 0
    assert second.cases_finished == len(turns_per_case(bench))
    manifest = read_manifest(second.run_dir)  # the first invocation's, kept on resume
    assert manifest["provider_runtime"]["kv_cache"]["blocks"] == 300


def test_messages_text_then_data_url_images(stub, model_dir, tmp_path):
    image = tmp_path / "x.png"
    vllm_stub.Image.new("RGB", (4, 4), (77, 77, 77)).save(image)
    model = create_model("opensource", "medgemma", model_path=str(model_dir))
    model.generate([_request("q?", [image, image])])
    (conversation,) = stub.LLM.instances[0].calls[0].messages
    assert conversation[0] == {"role": "system", "content": "sys"}
    parts = conversation[1]["content"]
    assert parts[0] == {"type": "text", "text": "q?"}
    assert [p["type"] for p in parts[1:]] == ["image_url", "image_url"]
    assert parts[1]["image_url"]["url"].startswith("data:image/png;base64,")
    assert vllm_stub.decode_data_url(parts[1]["image_url"]["url"]).getpixel((0, 0)) == (77,) * 3
    # medgemma gets the 7-image limit too (the release left it out: docs/differences.md D38)
    assert stub.LLM.instances[0].engine_kwargs["limit_mm_per_prompt"] == {"image": 7}


def test_length_is_truncated_and_usage_is_counted(monkeypatch, model_dir):
    def respond(conversation):
        text = conversation[-1]["content"]
        return ("cut off mid-sent", "length") if "long" in text else ("Answer: 2", "stop")

    module = vllm_stub.make_vllm_module(respond)
    monkeypatch.setitem(sys.modules, "vllm", module)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    model = create_model("opensource", "lingshu", model_path=str(model_dir), max_new_tokens=64)
    short, long = model.generate([_request("short"), _request("long one")])
    assert (short.status, short.finish_reason, short.text) == ("ok", "stop", "Answer: 2")
    assert (long.status, long.finish_reason) == ("truncated", "length")
    conversation = [{"role": "system", "content": "sys"}, {"role": "user", "content": "short"}]
    assert short.usage.input_tokens == vllm_stub.prompt_length(conversation)
    assert short.usage.cached_input_tokens == vllm_stub.prompt_length(conversation) // 2
    assert short.usage.output_tokens == len("Answer: 2") // 4
    assert module.LLM.instances[0].calls[0].sampling_params.max_tokens == 64


def test_rejected_conversation_is_isolated_as_error(stub, model_dir, tmp_path):
    image = tmp_path / "x.png"
    vllm_stub.Image.new("RGB", (4, 4), (40, 40, 40)).save(image)
    model = create_model("opensource", "huatuo", model_path=str(model_dir), max_model_len=50)

    def later(text):  # a later turn: the history is in the request
        first = _request("first", [image])
        return TurnRequest(first.messages + (Message("assistant", "Answer: 1"),
                                             Message("user", text)), request_id="r2")

    requests = [later("ok"), later("x" * 400), later("fine")]
    out = model.generate(requests)
    assert [c.status for c in out] == ["ok", "error", "ok"]
    assert "longer than the maximum model length" in out[1].error
    assert "outgrew the model's context" in out[1].error
    assert out[0].text.startswith("I see case 40")
    # a first turn that cannot fit: no dialogue can, the run stops
    with pytest.raises(ProviderError, match="even before any answer"):
        model.generate([_request("ok", [image]), _request("x" * 400, [image])])


def test_unreadable_image_is_an_error_completion(stub, model_dir, tmp_path):
    model = create_model("opensource", "qwen3.5", model_path=str(model_dir))
    bad = tmp_path / "bad.png"
    bad.write_bytes(b"not an image")
    good = tmp_path / "good.png"
    vllm_stub.Image.new("RGB", (4, 4), (60, 60, 60)).save(good)
    out = model.generate([_request("a", [bad]), _request("b", [good])])
    assert out[0].status == "error" and "bad.png" in out[0].error
    assert out[1].status == "ok"
    assert len(stub.LLM.instances[0].calls) == 1


@pytest.mark.parametrize(("env", "count"), [("0,1,2", 3), ("", 0), ("-1", 0), ("0,-1,2", 1),
                                            ("GPU-abc,GPU-def", 2)])
def test_visible_gpu_count_from_cuda_visible_devices(monkeypatch, env, count):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", env)
    assert visible_gpu_count() == count


def test_tensor_parallel_size_rules(stub, monkeypatch, model_dir):
    assert default_tensor_parallel_size(8, None) == 8
    assert default_tensor_parallel_size(3, 4) == 2  # largest divisor of gpu_num 4 <= 3
    assert default_tensor_parallel_size(8, 4) == 4
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1,2")
    glm = create_model("opensource", "glm-4v", model_path=str(model_dir))
    assert glm.engine_kwargs["tensor_parallel_size"] == 2
    assert glm.engine_kwargs["trust_remote_code"] is True
    explicit = create_model("opensource", "glm-4v", model_path=str(model_dir),
                            tensor_parallel_size=1)
    assert explicit.engine_kwargs["tensor_parallel_size"] == 1
    with pytest.raises(ConfigError, match="tensor-parallel-size 4"):
        create_model("opensource", "glm-4v", model_path=str(model_dir), tensor_parallel_size=4)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    with pytest.raises(ConfigError, match="needs a CUDA GPU"):
        create_model("opensource", "glm-4v", model_path=str(model_dir))


def test_no_thinking_only_where_the_template_has_the_switch(stub, model_dir, caplog):
    with caplog.at_level(logging.WARNING):
        gemma = create_model("opensource", "gemma4", model_path=str(model_dir), no_thinking=True)
    assert gemma.chat_template_kwargs is None
    assert "no thinking switch" in caplog.text
    qwen = create_model("opensource", "qwen3.5-moe", model_path=str(model_dir),
                        no_thinking=True)
    assert qwen.chat_template_kwargs == {"enable_thinking": False}
    custom = create_model("opensource", str(model_dir), no_thinking=True)
    assert custom.chat_template_kwargs == {"enable_thinking": False}
    assert custom.engine_kwargs["model"] == str(model_dir)
    assert "max_model_len" not in custom.engine_kwargs  # custom: the model's own context
    assert qwen.describe()["chat_template_kwargs"] == {"enable_thinking": False}
    plain = create_model("opensource", "qwen3.5-moe", model_path=str(model_dir))
    assert plain.chat_template_kwargs is None


def test_flags_reach_the_engine(stub, model_dir):
    model = create_model("opensource", "internvl3.5", model_path=str(model_dir),
                         gpu_memory_utilization=0.6, seed=7)
    kwargs = model.engine_kwargs
    assert kwargs["max_model_len"] == 40960
    assert kwargs["gpu_memory_utilization"] == 0.6
    assert kwargs["seed"] == 7
    override = create_model("opensource", "internvl3.5", model_path=str(model_dir),
                            max_model_len=8192)
    assert override.engine_kwargs["max_model_len"] == 8192
    assert override.describe()["max_model_len"] == 8192


def test_missing_vllm_gives_the_install_line(monkeypatch, model_dir):
    monkeypatch.setitem(sys.modules, "vllm", None)
    with pytest.raises(MissingDependencyError, match=r"\.\[gpu\]"):
        create_model("opensource", "medgemma1.5", model_path=str(model_dir))


def test_models_vllm_cannot_run_are_refused(stub):
    with pytest.raises(ConfigError, match="--provider transformers"):
        create_model("opensource", "hulu-med")
    with pytest.raises(ConfigError, match="--provider azure or openai"):
        create_model("opensource", "gpt-5.4")


def test_benchmark_fails_fast_without_vllm(monkeypatch, capsys):
    bench = load_by_path("_bench_gpu", ROOT / "benchmarks" / "gpu_stage_batching.py")
    monkeypatch.setitem(sys.modules, "vllm", None)
    assert bench.main(["--cases", "3"]) == 2
    assert "vllm is not importable" in capsys.readouterr().err


def test_benchmark_plumbing_with_the_stub(monkeypatch, tmp_path, capsys):
    """The GPU benchmark end to end on the stub engine: call counts and output agreement."""
    pytest.importorskip("transformers")
    module = vllm_stub.make_vllm_module(_by_case)
    monkeypatch.setitem(sys.modules, "vllm", module)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    bench = load_by_path("_bench_gpu", ROOT / "benchmarks" / "gpu_stage_batching.py")
    out = tmp_path / "result.json"
    assert bench.main(["--cases", "6", "--sequential-cases", "4", "--skip-gpu-check",
                       "--modes", "sequential,turn_index,batched", "--kv-blocks", "400",
                       "--out", str(out), "--work-dir", str(tmp_path / "work")]) == 0
    result = json.loads(out.read_text())
    (engine,) = module.LLM.instances
    assert engine.llm_engine.vllm_config.cache_config.num_gpu_blocks == 400  # --kv-blocks
    assert result["runtime"]["kv_cache"]["blocks"] == 400 and result["kv_blocks"] == 400
    batched, sequential = result["batched"], result["sequential"]
    turn_index = result["turn_index"]
    assert batched["chat_calls"] == batched["generate_calls"]  # one LLM.chat per window step
    assert turn_index["chat_calls"] == turn_index["generate_calls"] <= 9  # per turn index
    assert sequential["chat_calls"] == sequential["requests"]  # one per conversation
    assert batched["window"] and not turn_index["window"]
    for run in (batched, turn_index):  # the stub caches half of each prompt
        prefix = run["prefix_cache"]
        assert prefix["hit_rate"] == pytest.approx(0.5, abs=0.01)
        assert prefix["computed_tokens"] == prefix["prompt_tokens"] - prefix["cached_tokens"]
        assert 0 < prefix["min_computed_tokens"] < prefix["prompt_tokens"]
    for label in ("sequential", "batched"):  # compared with the path before the window
        agreement = result["agreement"][f"{label}_vs_turn_index"]
        assert agreement["compared"] == result[label]["requests"] and agreement["rate"] == 1.0
    assert result["throughput_ratio_batched_over_sequential"] is not None
    assert Path(tmp_path / "work" / "tiny_qwen2_vl" / "config.json").is_file()


def test_gpu_check_script_fails_fast_without_a_gpu():
    if shutil.which("nvidia-smi"):
        pytest.skip("this machine has nvidia-smi")
    script = ROOT / "scripts" / "gpu_check.sh"
    bad = subprocess.run(["bash", str(script), "--bogus"], capture_output=True, text=True,
                         check=False)
    assert bad.returncode == 2 and "unknown flag '--bogus'" in bad.stderr
    run = subprocess.run(["bash", str(script), "--cases", "3"], capture_output=True, text=True,
                         check=False, timeout=60)
    assert run.returncode == 2
    assert "needs a machine with an NVIDIA GPU" in run.stderr


# ------------------------------------------------------------ an engine that cannot start
def _context_2048(folder: Path) -> Path:
    """``model_dir`` whose config.json declares 2,048 positions (the tiny Qwen2-VL's)."""
    (folder / "config.json").write_text(json.dumps(
        {"model_type": "qwen2_vl", "text_config": {"max_position_embeddings": 2048}}),
        encoding="utf-8")
    return folder


def _cli(argv: list[str]) -> int:
    module = runpy.run_path(str(EVAL_SCRIPT), run_name="eval_under_test")
    return module["run_main"](module["main"], argv)


def test_engine_that_cannot_start_stops_the_cli_before_the_run_folder(stub, model_dir,
                                                                       tmp_path, capsys):
    """--max-model-len over the model's context: exit 2 naming the flag, no manifest, no record;
    the corrected command then runs in the same output folder (issue 20, item 1)."""
    _context_2048(model_dir)
    bench = tmp_path / "bench"
    write_marked_bundle(bench)
    out = tmp_path / "out"
    argv = ["--benchmark-dir", str(bench), "--output-path", str(out), "--provider",
            "opensource", "--model", "tiny", "--model-path", str(model_dir),
            "--oracle_setting", "none", "--max-new-tokens", "64", "--no-progress"]
    assert _cli([*argv, "--max-model-len", "4096"]) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]
    assert len(err) == 1
    assert "could not start" in err[0] and "--max-model-len" in err[0]
    assert "User-specified max_model_len (4096)" in err[0]
    assert "VLLM_ALLOW_LONG_MAX_MODEL_LEN" not in err[0]  # vLLM's advice is not ours
    assert stub.LLM.attempts == [str(model_dir)] and not stub.LLM.instances  # tried once
    run_dir = out / "opensource_tiny" / "oracle_none"
    assert not (run_dir / "run_manifest.json").exists()
    assert not (run_dir / "records.jsonl").exists()

    assert _cli([*argv, "--max-model-len", "2048"]) == 0
    assert Counter(r["key_id"] for r in read_records(run_dir)) == Counter(turns_per_case(bench))
    assert read_manifest(run_dir)["provider_settings"]["max_model_len"] == 2048


def test_a_failed_start_is_raised_again_never_tried_again_never_an_answer(stub, model_dir):
    _context_2048(model_dir)
    model = create_model("opensource", "tiny", model_path=str(model_dir), max_model_len=4096)
    with pytest.raises(EngineStartError) as first:
        model.start()
    assert first.value.fix.startswith("lower --max-model-len")
    assert isinstance(first.value.__cause__, ValueError)  # vLLM's own error is kept
    # the next request batch (and its halving retries) neither loads again nor gets answers
    with pytest.raises(EngineStartError) as again:
        model.generate([_request("a"), _request("b")])
    assert again.value is first.value
    (model_dir / "chat_template.jinja").unlink()  # the fingerprint then asks the engine
    with pytest.raises(EngineStartError):
        model.describe()
    assert stub.LLM.attempts == [str(model_dir)]


def test_a_request_vllm_rejects_after_the_start_is_still_its_own_error(stub, model_dir,
                                                                       tmp_path):
    """Start and request errors are told apart by when they happen, not by their type:
    a ValueError from ``LLM.chat`` stays that request's ``error``."""
    _context_2048(model_dir)
    image = tmp_path / "x.png"
    vllm_stub.Image.new("RGB", (4, 4), (40, 40, 40)).save(image)
    model = create_model("opensource", "tiny", model_path=str(model_dir), max_model_len=64)
    model.start()
    history = (Message("system", "sys"), Message("user", "first", (image,)),
               Message("assistant", "Answer: 1"))
    out = model.generate([TurnRequest(history + (Message("user", "x" * 400),)),
                          TurnRequest(history + (Message("user", "ok"),))])
    assert [c.status for c in out] == ["error", "ok"]
    assert "longer than the maximum model length" in out[0].error
    assert len(stub.LLM.attempts) == 1


@pytest.mark.parametrize(("failure", "cause", "fixes"), [
    (ValueError("To serve at least one request with the model's max seq len (65536), (6.00 GiB "
                "KV cache is needed, which is larger than the available KV cache memory (1.20 "
                "GiB). Based on the available memory, the estimated maximum model length is "
                "13088. Try increasing `gpu_memory_utilization` (which also controls CPU memory "
                "on the CPU backend) or decreasing `max_model_len` when initializing the "
                "engine."),
     "6.00 GiB KV cache is needed", ("--max-model-len", "--gpu-memory-utilization")),
    (ValueError("No available memory for the cache blocks. Try increasing "
                "`gpu_memory_utilization` when initializing the engine."),
     "No available memory for the cache blocks", ("--gpu-memory-utilization",)),
    (ValueError("Free memory on device cuda:0 (10.1/79.2 GiB) on startup is less than desired "
                "GPU memory utilization (0.85, 67.3 GiB). Decrease GPU memory utilization or "
                "reduce GPU memory used by other processes."),
     "less than desired GPU memory utilization", ("lower --gpu-memory-utilization",)),
    (MemoryError("CUDA out of memory. Tried to allocate 2.00 GiB"), "CUDA out of memory",
     ("--max-model-len", "--tensor-parallel-size")),
    (RuntimeError("CUDA error: no CUDA-capable device is detected"), "no CUDA-capable device",
     ("CUDA setup", "not a flag")),
    (ValueError("Invalid repository ID or local directory specified: '/models/x'.\nPlease "
                "verify the following requirements:"), "Invalid repository ID",
     ("--model-path",)),
    (RuntimeError("Engine core initialization failed. See root cause above. Failed core "
                  "proc(s): {'EngineCore_DP0': 1}"), "Engine core initialization failed",
     ("root cause vLLM printed above", "--gpu-memory-utilization")),
    (RuntimeError("something vLLM never said before\nsecond line"),
     "RuntimeError: something vLLM never said before", ("vLLM's output above",)),
])
def test_start_failures_name_their_cause_and_fix(stub, model_dir, failure, cause, fixes):
    stub.LLM.start_failure = failure
    model = create_model("opensource", "tiny", model_path=str(model_dir))
    with pytest.raises(EngineStartError) as info:
        model.start()
    message = str(info.value)
    assert "\n" not in message and cause in message
    assert all(fix in info.value.fix for fix in fixes)
    assert message.endswith(f"Fix: {info.value.fix}")


def test_a_start_failure_chained_under_another_error_is_found(stub, model_dir):
    """vLLM wraps some causes (a pydantic ValidationError, a RuntimeError ``from`` the cause)."""
    try:
        try:
            raise MemoryError("out of memory while loading the weights")
        except MemoryError as inner:
            raise RuntimeError("1 validation error for ModelConfig") from inner
    except RuntimeError as outer:
        stub.LLM.start_failure = outer
    model = create_model("opensource", "tiny", model_path=str(model_dir))
    with pytest.raises(EngineStartError, match="MemoryError: out of memory") as info:
        model.start()
    assert "--gpu-memory-utilization" in info.value.fix
