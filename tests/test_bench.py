"""The headless benchmark's load and its figures."""

from __future__ import annotations

import pytest
from helpers import run

from app.bench import BenchSettings, Conversation, conversations_for, cycled_note, engine_config, run_bench
from app.engine.kv.layout import MIN_STREAM, choose_layout


@pytest.mark.unit
def test_a_prompt_file_holding_less_than_asked_is_cycled_and_the_run_says_so():
    prompts = [Conversation("be brief", ["a", "b"]), Conversation(None, ["c"])]
    settings = BenchSettings("model.gguf", parallel=5, turns=3, prompts=prompts)
    load = conversations_for(settings)
    assert [c.turns for c in load] == [["a", "b", "a"], ["c", "c", "c"]] * 2 + [["a", "b", "a"]]
    assert [c.system for c in load] == ["be brief", None] * 2 + ["be brief"]
    assert cycled_note(settings) == (
        "the prompt file held less than asked: its 2 conversations cycled to fill 5 parallel lanes; "
        "the turns of 2 conversations cycled to 3"
    )
    enough = BenchSettings("model.gguf", parallel=2, turns=1, prompts=prompts)
    assert [c.turns for c in conversations_for(enough)] == [["a", "b"], ["c"]] and cycled_note(enough) is None


@pytest.mark.unit
@pytest.mark.parametrize("parallel", [8, 32])
def test_the_benchmark_measures_the_windows_layout_a_stream_per_lane_whatever_its_load(parallel):
    """Short chats need few cells, but a pool sized to them would give streams too small for the
    automatic layout, which would then measure one pool where the window runs streams."""
    settings = BenchSettings("model.gguf", parallel=parallel, max_tokens=128)
    config = engine_config(settings, conversations_for(settings))
    assert config.n_ctx // config.capacity >= MIN_STREAM
    assert not choose_layout(config.n_ctx, config.capacity, 8192, config.kv_unified, movable=True).unified


@pytest.mark.tiny
@pytest.mark.parametrize("unified", [None, False], ids=["automatic layout", "a stream per sequence"])
def test_later_turns_find_their_whole_history_cached(tiny_model_path, unified):
    """With room for every conversation, each later turn evaluates only its new part: the hit rate by
    turn equals the ideal the benchmark reports beside it, in either KV layout."""
    settings = BenchSettings(
        tiny_model_path,
        parallel=2,
        turns=3,
        max_tokens=24,
        ignore_eos=True,
        n_threads=2,
        engine_settings=(("kv_unified", unified),),
    )
    result = run(run_bench(settings))
    assert result["n_ctx"] == 2048  # room for both conversations: a stream of 1,024 cells each
    reason = "automatic: one pool when a chat outgrows its stream" if unified is None else "as set"
    assert result["kv_layout"] == result["kv_layout_at_load"] == f"a stream per sequence, 2 × 1024 cells ({reason})"
    assert result["layout_changes"] == 0 and result["layout_change_s"] == 0  # every chat fits its stream
    actual, ideal = result["kv_hit_rate_by_turn"], result["kv_hit_rate_ideal_by_turn"]
    assert ideal[0] is None and all(0.5 < rate < 1 for rate in ideal[1:])
    assert actual[1:] == ideal[1:]
    assert [r["cached_tokens"] for r in result["requests"] if r["turn"]] == [
        r["ideal_cached_tokens"] for r in result["requests"] if r["turn"]
    ]
    assert result["notes"] == []
    # the time beside the model's: positive, and what the steps spent of it no more than the whole
    assert 0 < result["decode_s"] < result["wall_s"]
    assert 0 < result["step_host_us_per_token"] <= result["host_us_per_token"]


@pytest.mark.tiny
def test_a_chat_outgrowing_its_stream_moves_the_run_to_one_pool_and_the_json_says_so(tiny_model_path):
    """Two streams of 1,024 cells and a prompt of over 1,100 tokens: the engine changes to one pool
    during the run, and the run's figures name the layout it ended in, why, and what the change cost."""
    long = Conversation(None, ["word " * 1100 + "Summarize."])
    settings = BenchSettings(
        tiny_model_path,
        parallel=2,
        n_ctx=2048,
        max_tokens=8,
        ignore_eos=True,
        n_threads=2,
        prompts=[long, Conversation(None, ["Hi"])],
    )
    result = run(run_bench(settings))
    assert (
        result["kv_layout_at_load"]
        == "a stream per sequence, 2 × 1024 cells (automatic: one pool when a chat outgrows its stream)"
    )
    assert result["kv_layout"].startswith("one pool (automatic: a chat of 11")  # its 1,1xx tokens
    assert result["kv_layout"].endswith("tokens outgrew its stream of 1024 cells)")
    assert result["layout_changes"] == 1 and 0 < result["layout_change_s"] < result["wall_s"]
    assert [r["gen_tokens"] for r in result["requests"]] == [8, 8]


@pytest.mark.unit
def test_a_thinking_replys_thoughts_and_answer_time_are_counted_apart():
    from app.bench import _request_record
    from app.engine.events import FinishEvent, FinishReason
    from app.engine.params import Priority
    from app.engine.stats import RequestStats

    stats = RequestStats("r", gen_tokens=20, reasoning_tokens=12, t_submit=1.0, t_first_token=1.5, t_first_answer=3.0)
    record = _request_record(0, 0, Priority.NORMAL, FinishEvent("r", FinishReason.STOP, "4", stats, reasoning="2+2"), None)
    assert (record["reasoning_tokens"], record["ttft_s"], record["answer_s"]) == (12, 0.5, 2.0)


@pytest.mark.unit
def test_the_bench_takes_any_sampling_knob_by_its_api_name_and_refuses_one_out_of_range(capsys):
    from app.cli import build_parser

    parser = build_parser()
    args = parser.parse_args(
        ["bench", "--sampling", "dry_multiplier=0.8", "--sampling", "samplers=edkt", "--sampling", 'logit_bias={"15": -100}']
    )
    assert args.sampling == [
        ("dry_multiplier", 0.8),
        ("samplers", ("penalties", "dry", "top_k", "temperature")),
        ("logit_bias", ((15, -100.0),)),
    ]
    assert BenchSettings("m.gguf", parallel=8, sampling=(("dry_multiplier", 0.8),)).label.endswith("dry_multiplier=0.8")
    for bad, said in (("xtc_probability=2", "'xtc_probability' must be a number between 0 and 1"), ("warp=1", "NAME one of")):
        with pytest.raises(SystemExit):
            parser.parse_args(["bench", "--sampling", bad])
        assert said in capsys.readouterr().err
