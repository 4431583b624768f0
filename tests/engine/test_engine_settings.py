"""llama.cpp's engine settings (GPU layers, main GPU, flash attention, KV cache types, mlock/mmap,
thread counts) on the CPU path, and the KV pool's size: the default sizing rule, what reaches
llama.cpp, and every refusal and fallback, with the real model (the tiny one where neither its
size nor its words matter)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.request

import numpy as np
import pytest
from spawn import free_port, running, serve_command

from app.bench import BenchSettings, conversations_for, engine_config
from app.cli import build_parser, engine_overrides, main
from app.engine.errors import ModelLoadError
from app.engine.kv.pool import MIN_POOL, KVShape, default_pool, free_memory_bytes, halvings
from app.engine.llama.context import LlamaBackend
from app.engine.llama.devices import build_info
from app.engine.params import GPU_LAYERS_ALL, CacheType, EngineConfig, FlashAttn

SMOLLM2 = KVShape(n_layer=30, n_embd_k_gqa=3 * 64, n_embd_v_gqa=3 * 64)  # 3 KV heads of 64
F16_CELL = 30 * 2 * 192 * 2  # 23,040 bytes: K and V rows of 192 halves in 30 layers


# -- the pool's size: unit tests on given inputs ---------------------------------------------------


@pytest.mark.unit
def test_bytes_per_cell_follow_the_layers_the_widths_and_the_cache_types():
    assert SMOLLM2.bytes_per_cell(CacheType.F16, CacheType.F16) == F16_CELL
    assert SMOLLM2.bytes_per_cell(CacheType.Q8_0, CacheType.Q8_0) == 30 * 2 * 192 * 34 // 32  # 34 bytes a 32-block
    assert SMOLLM2.bytes_per_cell(CacheType.Q4_0, CacheType.F16) == 30 * (192 * 18 // 32 + 192 * 2)
    assert KVShape(32, 1024, 1024).bytes_per_cell(CacheType.F16, CacheType.F16) == 131072  # a 7B with 8 KV heads


@pytest.mark.unit
def test_default_pool_gives_every_pane_the_training_context_when_memory_allows():
    choice = default_pool(F16_CELL, n_ctx_train=8192, panes=8, free_bytes=24 << 30)
    assert choice.n_ctx == 65536
    assert choice.reason == "8 × the training context 8192"


@pytest.mark.unit
def test_default_pool_takes_a_quarter_of_the_free_memory_at_most():
    choice = default_pool(F16_CELL, n_ctx_train=8192, panes=8, free_bytes=1 << 30)
    assert choice.n_ctx == 11520  # (1 GiB / 4) / 23,040 bytes = 11,650 cells, down to a multiple of 256
    assert choice.n_ctx * F16_CELL <= (1 << 30) // 4
    assert choice.reason == "25% of 1.0 GiB free"
    # a q8_0 cache takes about half as much a cell: about twice the cells in the same memory
    q8 = default_pool(SMOLLM2.bytes_per_cell(CacheType.Q8_0, CacheType.Q8_0), 8192, 8, 1 << 30)
    assert q8.n_ctx == 21760


@pytest.mark.unit
def test_default_pool_on_a_starved_or_unknown_machine():
    assert default_pool(F16_CELL, 8192, 8, free_bytes=1 << 20).n_ctx == MIN_POOL  # never below one chat's worth
    unknown = default_pool(F16_CELL, 8192, 8, free_bytes=None)
    assert unknown.n_ctx == 8192 and "unknown" in unknown.reason
    assert default_pool(F16_CELL, n_ctx_train=2048, panes=1, free_bytes=None).n_ctx == 2048
    assert default_pool(F16_CELL, n_ctx_train=1000, panes=3, free_bytes=24 << 30).n_ctx == 2816  # 3000, to 256s


@pytest.mark.unit
def test_halvings_skip_the_pools_that_cannot_fit_and_stop_at_the_minimum():
    assert list(halvings(4096)) == [2048, 1024, 512, 256]
    assert list(halvings(65536, lambda n: n <= 10000)) == [8192, 4096, 2048, 1024, 512, 256]
    assert list(halvings(MIN_POOL)) == []


@pytest.mark.unit
def test_free_memory_is_read_from_the_machine():
    free = free_memory_bytes()
    assert free is not None and 0 < free <= os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


# -- settings refused before llama.cpp sees them --------------------------------------------------


@pytest.mark.unit
@pytest.mark.parametrize(
    ("changes", "reason"),
    [
        ({"cache_type_v": CacheType.Q8_0, "flash_attn": FlashAttn.OFF}, "a quantized V cache (q8_0) needs flash attention"),
        ({"cache_type_v": CacheType.Q4_0, "flash_attn": FlashAttn.OFF}, "a quantized V cache (q4_0) needs flash attention"),
        ({"cache_type_k": "q5_1"}, "unknown KV cache type 'q5_1' for cache_type_k: use one of f16, q8_0, q4_0"),
        ({"flash_attn": "maybe"}, "flash attention must be on, off or auto"),
        ({"gpu_layers": -3}, "GPU layers must be a number of layers or all"),
        ({"main_gpu": -1}, "the main GPU is a device index"),
        ({"n_ctx": -1}, "the context must be a number of KV cells, or 0 for automatic"),
        ({"n_threads_batch": 0}, "thread counts must be 1 or more"),
    ],
)
def test_settings_no_build_can_honour_are_refused_with_one_line(changes, reason):
    problem = EngineConfig("m.gguf", **changes).problem()
    assert problem is not None and problem.startswith(reason) and "\n" not in problem


@pytest.mark.unit
def test_a_quantized_k_cache_or_flash_attention_alone_is_fine():
    assert EngineConfig("m.gguf", cache_type_k=CacheType.Q8_0, flash_attn=FlashAttn.OFF).problem() is None
    assert EngineConfig("m.gguf", cache_type_v=CacheType.Q8_0, flash_attn=FlashAttn.AUTO).problem() is None
    assert EngineConfig("m.gguf", gpu_layers=GPU_LAYERS_ALL).problem() is None


# -- the command line ------------------------------------------------------------------------------

LLAMA_FLAGS = ["-ngl", "all", "-mg", "0", "-fa", "off", "-ctk", "q8_0", "-ctv", "f16", "--mlock", "--no-mmap"]
LLAMA_FLAGS += ["-t", "2", "-tb", "1", "-c", "1024", "-cram", "512", "-kvu", "off", "--backend-sampling", "on"]
EXPECTED = {
    "gpu_layers": GPU_LAYERS_ALL,
    "main_gpu": 0,
    "flash_attn": FlashAttn.OFF,
    "cache_type_k": CacheType.Q8_0,
    "cache_type_v": CacheType.F16,
    "use_mlock": True,
    "use_mmap": False,
    "n_threads": 2,
    "n_threads_batch": 1,
    "n_ctx": 1024,
    "cache_ram_mib": 512,
    "kv_unified": False,
    "backend_sampling": True,
}


@pytest.mark.unit
@pytest.mark.parametrize("command", [[], ["serve"], ["bench"]])
def test_llama_cpp_flags_parse_into_engine_config_fields(command):
    args = build_parser().parse_args(command + LLAMA_FLAGS)
    changes = engine_overrides(args)
    assert changes == EXPECTED
    config = EngineConfig("m.gguf").with_(**changes)
    assert config.threads_batch == 1 and config.problem() is None


@pytest.mark.unit
def test_long_flag_names_and_layer_counts():
    args = build_parser().parse_args(
        ["serve", "--gpu-layers", "12", "--main-gpu", "1", "--flash-attn", "auto", "--cache-type-k", "q4_0"]
        + ["--cache-type-v", "q8_0", "--threads-batch", "3", "--ctx", "0", "--cache-ram", "0", "--kv-unified", "auto"]
    )
    assert engine_overrides(args) == {
        "gpu_layers": 12,
        "main_gpu": 1,
        "flash_attn": FlashAttn.AUTO,
        "cache_type_k": CacheType.Q4_0,
        "cache_type_v": CacheType.Q8_0,
        "n_threads_batch": 3,
        "n_ctx": 0,
        "cache_ram_mib": 0,
        "kv_unified": None,
    }
    assert engine_overrides(build_parser().parse_args(["serve", "--n-gpu-layers", "0"])) == {"gpu_layers": 0}


@pytest.mark.unit
def test_flags_not_given_leave_the_defaults_and_a_flag_before_the_subcommand_stays():
    assert engine_overrides(build_parser().parse_args([])) == {}
    assert engine_overrides(build_parser().parse_args(["serve"])) == {}
    assert engine_overrides(build_parser().parse_args(["-ctk", "q8_0", "serve"])) == {"cache_type_k": CacheType.Q8_0}


@pytest.mark.unit
@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["-ctk", "q5_1"], "invalid choice: 'q5_1'"),
        (["-ngl", "many"], "expected a number of layers or 'all'"),
        (["-ngl", "-2"], "must be 0 or more, or 'all'"),
        (["-fa", "yes"], "invalid choice: 'yes'"),
    ],
)
def test_bad_flag_values_are_refused_by_the_parser(flags, message, capsys):
    with pytest.raises(SystemExit) as exit_:
        build_parser().parse_args(["serve", *flags])
    assert exit_.value.code == 2 and message in capsys.readouterr().err


@pytest.mark.unit
@pytest.mark.parametrize("command", ["serve", "bench"])
def test_a_quantized_v_cache_without_flash_attention_is_refused_on_the_command_line(command, capsys):
    assert main([command, "-fa", "off", "-ctv", "q8_0"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == (
        "error: a quantized V cache (q8_0) needs flash attention: turn flash attention on (or auto), or use an f16 V cache"
    )


@pytest.mark.unit
def test_bench_flags_reach_the_engine_config_of_every_run():
    args = build_parser().parse_args(["bench", "--parallel", "2", "-fa", "on", "-ctk", "q8_0", "-ctv", "q8_0", "-tb", "1"])
    overrides = engine_overrides(args)
    settings = BenchSettings(model_path="m.gguf", parallel=2, engine_settings=tuple(overrides.items()))
    config = engine_config(settings, conversations_for(settings))
    assert (config.flash_attn, config.cache_type_k, config.cache_type_v) == (FlashAttn.ON, CacheType.Q8_0, CacheType.Q8_0)
    assert config.n_threads_batch == 1 and config.capacity == 2


# -- applied in llama.cpp, on the real model -------------------------------------------------------


def _backend(model_path, **changes) -> LlamaBackend:
    return LlamaBackend(EngineConfig(model_path=model_path, n_ctx=1024, n_batch=128, capacity=2, n_threads=2, **changes))


def _state_after_prompt(backend: LlamaBackend, tokens: list[int]) -> int:
    backend.batch.clear()
    backend.batch.add(0, tokens, 0, logits_last=True)
    assert backend.decode() == 0
    return backend.seq_state_size(0)


@pytest.mark.unit
def test_build_info_says_cpu_only_with_the_cpu_features():
    build = build_info()
    assert build.gpu_offload is False and build.gpus == ()
    assert build.cpu_features  # e.g. AVX2, from llama_print_system_info
    assert build.summary().startswith("CPU only")
    cpus = [d for d in build.devices if d.kind == "CPU"]
    assert cpus and cpus[0].total_bytes > 0  # the ggml device API, reached through llama-cpp-python's library


@pytest.mark.model
def test_by_default_a_shared_prefix_gives_the_logits_of_one_computed_in_place(model_path):
    """Why flash attention stays on by default: with it, the same tokens give the same logits whether
    their prefix was computed in this slot or shared from another slot (seq_cp) past that slot's
    reply, so a seeded reply does not depend on where its cells sit; without it they part (0.54 here)."""

    def first_logits(flash_attn: FlashAttn) -> tuple[float, str]:
        backend = _backend(model_path, flash_attn=flash_attn)
        try:
            tokens = backend.vocab.tokenize("<|im_start|>user\nWrite a word.<|im_end|>\n<|im_start|>assistant\n")
            backend.batch.clear()
            row = backend.batch.add(0, tokens, 0, True)
            assert backend.decode() == 0
            whole = backend.samplers.logits(row)
            token, pos = int(whole.argmax()), len(tokens)
            for _ in range(24):  # slot 0's reply: cells between the prefix and what slot 1 writes next
                backend.batch.clear()
                row = backend.batch.add(0, [token], pos, True)
                assert backend.decode() == 0
                token, pos = int(backend.samplers.logits(row).argmax()), pos + 1
            backend.seq_cp(0, 1, 0, len(tokens) - 1)
            backend.batch.clear()
            row = backend.batch.add(1, tokens[-1:], len(tokens) - 1, True)
            assert backend.decode() == 0
            return float(np.abs(backend.samplers.logits(row) - whole).max()), backend.info.flash_attn
        finally:
            backend.close()

    default_diff, default_fa = first_logits(FlashAttn.AUTO)
    assert default_fa == "on" and default_diff == 0.0
    assert first_logits(FlashAttn.OFF)[0] > 0.01  # what the default avoids


@pytest.mark.model
def test_q8_0_cache_takes_about_half_the_memory_of_f16(model_path):
    f16 = _backend(model_path)
    try:
        tokens = f16.vocab.tokenize("The quick brown fox jumps over the lazy dog. " * 12)
        f16_state, f16_info = _state_after_prompt(f16, tokens), f16.info
    finally:
        f16.close()
    q8 = _backend(model_path, cache_type_k=CacheType.Q8_0, cache_type_v=CacheType.Q8_0, flash_attn=FlashAttn.ON)
    try:
        q8_state, q8_info = _state_after_prompt(q8, tokens), q8.info
    finally:
        q8.close()
    # llama.cpp's own figures: the pool it allocated, and the bytes of one sequence's cells
    assert f16_info.kv_bytes == 1024 * F16_CELL == f16_info.kv_bytes_per_cell * 1024
    assert q8_info.kv_bytes == pytest.approx(34 / 64 * f16_info.kv_bytes, rel=0.01)
    assert 0.50 < q8_state / f16_state < 0.56
    assert (q8_info.cache_type_k, q8_info.cache_type_v, q8_info.flash_attn) == ("q8_0", "q8_0", "on")
    assert "K q8_0, V q8_0, flash attention on" in q8_info.placement()


@pytest.mark.model
def test_flash_attention_on_and_off_agree_up_to_rounding(model_path):
    """Both are applied (llama.cpp says which it ran) and give the same distribution up to rounding; not
    always the same greedy text: llama.cpp's CPU flash attention accumulates V in f16, which moves the
    logits by up to about 1 (measured 0.5-0.9 here), enough to flip a near tie (the prompt below:
    a gap of 0.04 between the first two tokens at the fifth step, and the texts part there)."""

    def greedy(flash_attn: FlashAttn) -> tuple[list[int], np.ndarray, str]:
        backend = _backend(model_path, flash_attn=flash_attn)
        try:
            prompt = backend.vocab.tokenize(
                "<|im_start|>user\nName three colours of the rainbow.<|im_end|>\n<|im_start|>assistant\n"
            )
            tokens, first_logits, pos = [], None, 0
            for _ in range(8):
                backend.batch.clear()
                row = backend.batch.add(0, prompt, pos, logits_last=True)
                assert backend.decode() == 0
                logits = backend.samplers.logits(row)
                first_logits = logits if first_logits is None else first_logits
                pos += len(prompt)
                prompt = [int(np.argmax(logits))]
                tokens.append(prompt[0])
            return tokens, first_logits, backend.info.flash_attn
        finally:
            backend.close()

    (on, on_logits, on_state), (off, off_logits, off_state) = greedy(FlashAttn.ON), greedy(FlashAttn.OFF)
    assert (on_state, off_state) == ("on", "off")
    assert np.corrcoef(on_logits, off_logits)[0, 1] > 0.995
    assert np.abs(on_logits - off_logits).max() < 1.5
    assert on[0] in np.argsort(off_logits)[-3:] and off[0] in np.argsort(on_logits)[-3:]
    assert on[:3] == off[:3]  # the reply starts alike


@pytest.mark.model
def test_gpu_settings_on_a_cpu_only_build_fall_back_with_a_notice(model_path):
    backend = _backend(model_path, gpu_layers=GPU_LAYERS_ALL, main_gpu=1)
    try:
        assert backend.info.gpu_layers == 0
        assert backend.info.notices == (
            "GPU layers all ignored: this llama.cpp build is CPU only (rebuild it for a GPU: see the README)",
            "main GPU 1 ignored: this llama.cpp build is CPU only",
        )
        assert backend.info.placement().startswith("0/31 layers on a GPU")
    finally:
        backend.close()
    backend = _backend(model_path, gpu_layers=12)
    try:
        assert backend.info.notices[0].startswith("GPU layers 12 ignored")
    finally:
        backend.close()


@pytest.mark.tiny
def test_default_gpu_layers_and_threads_need_no_notice(tiny_model_path):
    backend = _backend(tiny_model_path, n_threads_batch=1, use_mlock=False, use_mmap=False)
    try:
        assert backend.n_gpu_layers == 0 and backend.info.notices == ()
        assert backend.info.weights and backend.info.weights[0][0] == "CPU"  # read into memory, not mapped
    finally:
        backend.close()
    backend = _backend(tiny_model_path)
    try:
        assert backend.info.weights[0][0] == "CPU_Mapped"
    finally:
        backend.close()


@pytest.mark.model
def test_the_backend_refuses_a_quantized_v_cache_without_flash_attention(model_path):
    with pytest.raises(ModelLoadError, match=r"^a quantized V cache \(q8_0\) needs flash attention"):
        _backend(model_path, cache_type_v=CacheType.Q8_0, flash_attn=FlashAttn.OFF)


@pytest.mark.model
def test_the_automatic_pool_is_sized_from_the_model_and_the_panes(model_path):
    backend = LlamaBackend(EngineConfig(model_path=model_path, capacity=2, n_threads=2))
    try:
        info = backend.info
        expected = default_pool(F16_CELL, 8192, 2, free_memory_bytes()).n_ctx
        assert info.n_ctx == backend.n_ctx == expected == 16384  # 2 panes × its training context, on this machine
        assert info.pool_reason == "automatic: 2 × the training context 8192"
        assert info.kv_bytes == 16384 * F16_CELL  # what llama.cpp logged it allocated
        # the size counted from the weights, as the library and About say it (llama.cpp's own: "256M")
        assert info.description == "llama 135M Q4_1" and round(info.n_params / 1e6) == 135
    finally:
        backend.close()


@pytest.mark.tiny
def test_an_explicit_pool_wins(tiny_model_path):
    backend = LlamaBackend(EngineConfig(model_path=tiny_model_path, n_ctx=768, capacity=2, n_threads=2))
    try:
        assert backend.n_ctx == 768 and backend.info.pool_reason == "as set" and backend.info.notices == ()
    finally:
        backend.close()


@pytest.mark.model
def test_an_impossibly_large_pool_falls_back_with_a_notice(model_path):
    backend = LlamaBackend(EngineConfig(model_path=model_path, n_ctx=2**31, capacity=1, n_threads=2))
    try:
        assert backend.n_ctx == 8192  # halved to what the machine affords, never above the automatic pool
        (notice,) = backend.info.notices
        assert notice.startswith("could not allocate a KV pool of 2147483648 cells (it needs 46080.0 GiB, more than the")
        assert notice.endswith("free): using 8192 cells (180.0 MiB)")
    finally:
        backend.close()


LIMITED = """
import resource, sys
from app.engine.llama.context import LlamaBackend
from app.engine.llama.devices import build_info
from app.engine.params import EngineConfig
build_info()
used = int(open("/proc/self/statm").read().split()[0]) * resource.getpagesize()
resource.setrlimit(resource.RLIMIT_AS, (used + (700 << 20), resource.RLIM_INFINITY))
backend = LlamaBackend(EngineConfig(model_path=sys.argv[1], n_ctx=65536, capacity=8, n_threads=2))
print(backend.n_ctx)
print(backend.info.notices[0])
"""


@pytest.mark.model
def test_a_pool_llama_cpp_cannot_allocate_is_halved_until_it_can(model_path):
    """llama_init_from_model returns NULL (here: an address-space limit of 700 MiB more than the
    process holds, so 1.4 GiB and 720 MiB pools fail): the pool is halved, with a notice."""
    done = subprocess.run([sys.executable, "-c", LIMITED, model_path], capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    n_ctx, notice = done.stdout.strip().splitlines()
    assert int(n_ctx) in (16384, 8192)
    assert notice == (
        "could not allocate a KV pool of 65536 cells (failed to initialize the context: failed to allocate buffer "
        f"for kv cache): using {n_ctx} cells ({int(n_ctx) * F16_CELL / 2**20:.1f} MiB)"
    )


@pytest.mark.model
def test_models_endpoint_says_where_the_model_went_and_what_the_build_runs_on(model_path):
    port = free_port()
    flags = ["--model", model_path, "--parallel", "2", "-c", "2048", "-t", "2", "-fa", "on", "-ctk", "q8_0", "-ctv", "q8_0"]
    with running(serve_command(port, *flags, "-ngl", "all"), port) as url, urllib.request.urlopen(f"{url}/v1/models") as r:
        meta = json.load(r)["data"][0]["meta"]
    assert meta["n_ctx"] == 2048 and meta["gpu_layers"] == 0 and meta["n_layer"] == 30
    assert (meta["cache_type_k"], meta["cache_type_v"], meta["flash_attn"]) == ("q8_0", "q8_0", "on")
    assert meta["kv_bytes"] == pytest.approx(2048 * F16_CELL * 34 / 64, rel=0.01)
    assert meta["pool"] == "as set"
    assert meta["notices"] == ["GPU layers all ignored: this llama.cpp build is CPU only (rebuild it for a GPU: see the README)"]
    assert meta["build"]["gpu_offload"] is False and meta["build"]["summary"].startswith("CPU only")
    assert any(d["kind"] == "CPU" for d in meta["build"]["devices"])
    assert "KV pool: 2048 cells" in meta["placement"]


@pytest.mark.model
def test_a_kv_stream_per_sequence_decodes_the_same(model_path):
    """llama.cpp's non-unified layout: each sequence has n_ctx / capacity cells, and greedy text is unchanged."""
    from helpers import Started, collect, run, user

    from app.engine.params import EngineConfig
    from app.engine.sampling.params import SamplingParams

    base = EngineConfig(model_path, n_ctx=1024, capacity=4, n_threads=2, kv_reuse=False, kv_unified=True)
    greedy = SamplingParams(temperature=0, repeat_penalty=1.0, max_tokens=24)

    async def go(config):
        async with Started(config) as client:
            return await collect(client.generate(user("Name a fruit."), greedy))

    unified_tokens, _ = run(go(base))
    stream_tokens, stream_final = run(go(base.with_(kv_unified=False)))
    assert [e.token for e in stream_tokens] == [e.token for e in unified_tokens] and stream_final.ok


@pytest.mark.tiny
def test_a_kv_stream_per_sequence_ends_a_reply_that_fills_it_at_its_stream(tiny_model_path):
    """A reply that fills its stream's n_ctx / capacity cells ends with the context-full notice (not a decode failure)."""
    from helpers import Started, run, user

    from app.engine.events import FinishReason
    from app.engine.params import EngineConfig
    from app.engine.sampling.params import SamplingParams

    config = EngineConfig(tiny_model_path, n_ctx=1024, capacity=4, n_threads=2, kv_reuse=False, kv_unified=False)

    async def go():
        async with Started(config) as client:
            greedy = SamplingParams(temperature=0, repeat_penalty=1.0, max_tokens=600, ignore_eos=True)
            long = await client.complete(user("Tell a story."), greedy)
            return long, client.model_info.n_ctx

    long, n_ctx = run(go())
    assert n_ctx == 1024 and long.reason is FinishReason.CONTEXT  # 256 cells a stream: full before 600 tokens
    assert long.stats.prompt_tokens + long.stats.gen_tokens == 256 and "256 tokens is full" in long.notice
