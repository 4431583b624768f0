"""Headless benchmark: N conversations chat at once through the engine; the batching guide's table.

With several models, each gets its N conversations at once, on one engine thread. The same code
serves `python -m app bench` and the in-app benchmark view.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, replace

from .client import EngineClient
from .engine.events import FinishEvent
from .engine.kv.layout import MIN_STREAM
from .engine.params import EngineConfig, Policy, Priority, ServingMode
from .engine.sampling.params import SamplingParams
from .engine.stats import RequestStats, hit_rate, percentile
from .engine.trace import STEP_TRACK, trace_events

SHORT_PROMPT_TOKENS = 256  # the split of the mixed-load figures: short questions vs long documents

QUESTIONS = [
    "Explain how a rainbow forms.",
    "Write a short poem about the sea.",
    "What are the main causes of inflation?",
    "Give me three tips for learning to cook.",
    "Describe the water cycle for a ten-year-old.",
    "Why do cats purr?",
    "Summarise the plot of Romeo and Juliet.",
    "How does a bicycle stay upright?",
    "What is the difference between weather and climate?",
    "Suggest a name for a bakery and explain it.",
    "How do vaccines train the immune system?",
    "List some good habits for better sleep.",
    "What makes a good team leader?",
    "Explain what a black hole is.",
    "How do bees make honey?",
    "Why is the sky blue?",
]
FOLLOW_UPS = [
    "Can you explain that in more detail?",
    "Give me a concrete example.",
    "Now summarise it in one sentence.",
    "What is a common misconception about this?",
    "How would you explain it to an expert?",
]


@dataclass
class Conversation:
    system: str | None
    turns: list[str]
    priority: Priority = Priority.NORMAL  # served first under the priority policy


@dataclass
class BenchSettings:
    model_path: str
    parallel: int = 1  # conversations at once, on each model
    other_models: tuple[str, ...] = ()  # more models loaded beside the first, each with its own `parallel` conversations
    mode: ServingMode = ServingMode.BATCHED
    kv_reuse: bool = True
    max_tokens: int = 128
    ignore_eos: bool = False
    temperature: float = 0.0
    seed: int = 42
    turns: int = 1
    system: str | None = None
    n_threads: int | None = None
    n_ctx: int | None = None  # None: enough for every conversation to keep its cells
    n_batch: int = EngineConfig.n_batch
    prompts: list[Conversation] | None = None
    policy: Policy = Policy.DECODE_FIRST
    itl_target_ms: float | None = None  # set: the adaptive batch keeps the latency under it
    n_probs: int | None = None  # set: every token tells its probability and this many rivals'
    sampling: tuple[tuple[str, object], ...] = ()  # more SamplingParams fields: llama.cpp's other samplers
    engine_settings: tuple[tuple[str, object], ...] = ()  # more EngineConfig fields: llama.cpp's flags

    @property
    def label(self) -> str:
        if self.mode is ServingMode.SEQUENTIAL:
            label = "sequential"
        elif self.mode is ServingMode.STATIC:
            label = "static + KV reuse" if self.kv_reuse else "static, no KV reuse"
        elif self.parallel == 1:
            label = "one sequence"
        else:
            label = "continuous + KV reuse" if self.kv_reuse else "continuous, no KV reuse"
        if self.policy is not Policy.DECODE_FIRST:
            label += f", {self.policy.value}"
        if self.itl_target_ms:
            label += f", adaptive {self.itl_target_ms:.0f} ms"
        if self.n_probs is not None:
            label += f", probabilities (top {self.n_probs})"
        if self.sampling:
            label += ", " + " ".join(f"{name}={value}" for name, value in self.sampling)
        if self.other_models:
            label += f", {1 + len(self.other_models)} models"
        return label


def guide_rows(base: BenchSettings, parallel_counts=(4, 8, 16)) -> list[BenchSettings]:
    """The batching guide's comparison: one sequence; at the first count static batching (its basic
    batching), then continuous batching without and with KV reuse; more parallel, continuous."""
    first, *more = parallel_counts
    continuous = replace(base, mode=ServingMode.BATCHED)
    rows = [
        replace(continuous, parallel=1),
        replace(base, parallel=first, mode=ServingMode.STATIC),
        replace(continuous, parallel=first, kv_reuse=False),
        replace(continuous, parallel=first),
    ]
    return rows + [replace(continuous, parallel=p) for p in more]


def builtin_conversations(count: int, turns: int, system: str | None) -> list[Conversation]:
    return [
        Conversation(system, [QUESTIONS[i % len(QUESTIONS)]] + [FOLLOW_UPS[t % len(FOLLOW_UPS)] for t in range(turns - 1)])
        for i in range(count)
    ]


def load_prompts(path: str) -> list[Conversation]:
    """JSON lines, one conversation a line: {"system": "...", "turns": ["first", "second", ...]},
    optionally with "priority": "high"."""
    conversations = []
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                item = json.loads(line)
                turns = [str(t) for t in item["turns"]]
                priority = Priority[str(item.get("priority", "normal")).upper()]
            except (ValueError, KeyError, TypeError) as e:
                raise ValueError(f'{path}:{number}: expected {{"system": ..., "turns": [...]}}: {e}') from e
            if not turns:
                raise ValueError(f"{path}:{number}: a conversation needs at least one turn")
            conversations.append(Conversation(item.get("system"), turns, priority))
    if not conversations:
        raise ValueError(f"{path}: no conversations")
    return conversations


def conversations_for(s: BenchSettings) -> list[Conversation]:
    """The load: the built-in chats, or the prompt file's, cycled when asked for more than it holds
    (conversations to fill every parallel lane, turns up to --turns; see cycled_note)."""
    if not s.prompts:
        return builtin_conversations(s.parallel, s.turns, s.system)
    count = max(len(s.prompts), s.parallel)
    conversations = []
    for i in range(count):
        c = s.prompts[i % len(s.prompts)]
        turns = [c.turns[t % len(c.turns)] for t in range(max(s.turns, len(c.turns)))]
        conversations.append(Conversation(c.system or s.system, turns, c.priority))
    return conversations


def cycled_note(s: BenchSettings) -> str | None:
    """What the run repeated from a prompt file that held less than was asked for."""
    if not s.prompts:
        return None
    parts = []
    if s.parallel > len(s.prompts):
        parts.append(f"its {len(s.prompts)} conversations cycled to fill {s.parallel} parallel lanes")
    short = sum(1 for c in s.prompts if len(c.turns) < s.turns)
    if short:
        parts.append(f"the turns of {short} conversations cycled to {s.turns}")
    return f"the prompt file held less than asked: {'; '.join(parts)}" if parts else None


def engine_config(s: BenchSettings, conversations: list[Conversation]) -> EngineConfig:
    """The engine a benchmark run builds: by default, cells enough for every conversation to stay,
    in the layout the window runs (a stream per lane, one pool when a chat outgrows its stream)."""
    n_ctx = s.n_ctx
    if n_ctx is None:
        # each lane keeps its conversation: prompt, every turn and every reply; and its stream is no
        # smaller than the automatic layout's least, else a tight pool would be measured, not streams
        longest = max(len(c.system or "") + sum(len(t) for t in c.turns) for c in conversations)
        per_lane = longest // 3 + len(conversations[0].turns) * (s.max_tokens + 48) + 128
        n_ctx = max(2048, 256 * math.ceil(s.parallel * max(per_lane, MIN_STREAM) / 256))
    config = EngineConfig(
        model_path=s.model_path,
        n_ctx=n_ctx,
        n_batch=max(s.n_batch, s.parallel),
        capacity=s.parallel,
        mode=s.mode,
        kv_reuse=s.kv_reuse,
        policy=s.policy,
        itl_target_ms=s.itl_target_ms,
    )
    config = config.with_(**dict(s.engine_settings))
    return config.with_(n_threads=s.n_threads) if s.n_threads else config


async def run_bench(s: BenchSettings, progress: Callable[[str], None] | None = None, trace: list[dict] | None = None) -> dict:
    """Run one configuration to the end and return its figures (one object of the JSON `runs`);
    with `trace`, add the run's steps and requests to it as a process of trace events."""
    conversations = conversations_for(s)
    config = engine_config(s, conversations)
    params = SamplingParams(
        temperature=s.temperature,
        seed=s.seed,
        max_tokens=s.max_tokens,
        ignore_eos=s.ignore_eos,
        repeat_penalty=1.0,
        n_probs=s.n_probs,
    ).with_(**dict(s.sampling))
    client = EngineClient(config)
    await client.start()
    try:
        models = [client.default_model] + [await client.load_model(config.for_other_model(p)) for p in s.other_models]
        for model in models:
            await warm_up(client, model)
        lanes = [(model, k, conversations[k :: s.parallel]) for model in models for k in range(s.parallel)]
        before = [client.snapshot_of(model) for model in models]
        finished = _collect_finished(client) if trace is not None else []
        cpu0, t0 = os.times(), time.perf_counter()
        results = await asyncio.gather(
            *(_run_lane(client, k, lane, s.parallel, params, progress, model, t0) for model, k, lane in lanes)
        )
        wall = time.perf_counter() - t0
        cpu1 = os.times()
        snapshots = [client.snapshot_of(model) for model in models]
        steps = [st for model in models for st in client.recent_steps(wall, model)]
        if trace is not None:
            trace += _run_trace(s, {model: client.recent_steps(wall, model) for model in models}, finished, trace)
        infos = list(client.models.values())
    finally:
        await client.close()
    records = [r for lane in results for r in lane]
    run = _summarise(s, config, records, wall, (cpu1.user + cpu1.system) - (cpu0.user + cpu0.system), snapshots, steps)
    run |= _host_time(run["gen_tokens"], wall, before, snapshots)
    run["kv_pool_bytes"] = sum(info.kv_bytes for info in infos)  # the pools' memory, as llama.cpp allocated it
    run["n_ctx"] = infos[0].n_ctx  # the pool as allocated (the config's 0 means sized by default)
    run |= _layout(infos, before, snapshots) | _speculation(before, snapshots)
    return run


async def warm_up(client: EngineClient, model: str | None = None) -> None:
    """One tiny request pages the weights in; then the KV cells are emptied so nothing is reused."""
    await client.complete([{"role": "user", "content": "Hi"}], SamplingParams(temperature=0, max_tokens=4), model=model)
    await client.call(lambda engine: engine.kv.clear(), model)


def _collect_finished(client: EngineClient) -> list[RequestStats]:
    """The stats of every request that ends from now on (for the trace)."""
    finished: list[RequestStats] = []
    client.add_listener(lambda events: finished.extend(ev.stats for ev in events if isinstance(ev, FinishEvent)))
    return finished


def _run_trace(s: BenchSettings, steps: dict, finished: list[RequestStats], trace: list[dict]) -> list[dict]:
    """A run as a process of trace events: a track of steps per model, one per conversation."""
    pid = 1 + sum(1 for ev in trace if ev["ph"] == "M" and ev["name"] == "process_name")
    tracks = {STEP_TRACK if len(steps) == 1 else f"{STEP_TRACK} ({model})": st for model, st in steps.items()}
    return trace_events(tracks, finished, process_name=f"{s.label}, {s.parallel} parallel", pid=pid)


async def _run_lane(client, lane_index, conversations, parallel, params, progress, model, t0) -> list[dict]:
    records = []
    for i, conv in enumerate(conversations):
        conv_index = lane_index + i * parallel
        messages = [{"role": "system", "content": conv.system}] if conv.system else []
        history = None  # cells the conversation's last turn left: its prompt and reply
        for turn, text in enumerate(conv.turns):
            messages.append({"role": "user", "content": text})
            final = await client.complete(
                messages, params, conversation_id=f"bench-{conv_index}", priority=conv.priority, model=model
            )
            if final.error:
                raise RuntimeError(f"{model}: conversation {conv_index}, turn {turn}: {final.error}")
            reply = {"role": "assistant", "content": final.text}
            messages.append(reply | ({"reasoning_content": final.reasoning} if final.reasoning else {}))
            ended = {"model": model, "finished_s": time.perf_counter() - t0}
            records.append(_request_record(conv_index, turn, conv.priority, final, history) | ended)
            # every token but the last sampled one, which was never decoded
            history = final.stats.prompt_tokens + final.stats.gen_tokens - 1
            if progress:
                progress(f"conversation {conv_index} turn {turn}: {final.stats.gen_tokens} tokens")
    return records


def _request_record(conversation: int, turn: int, priority: Priority, final: FinishEvent, history: int | None) -> dict:
    """One request's figures; `history` is what its conversation's earlier turns left in the cache
    at best, so the ideal hit rate is that history cached and only the new turn evaluated."""
    st = final.stats
    ideal_cached = None if history is None else min(history, st.prompt_tokens - 1)
    return {
        "conversation": conversation,
        "turn": turn,
        "priority": priority.name.lower(),
        "prompt_tokens": st.prompt_tokens,
        "cached_tokens": st.cached_tokens,
        "restored_tokens": st.restored_tokens,
        "evaluated_tokens": st.evaluated_tokens,
        "gen_tokens": st.gen_tokens,
        "reasoning_tokens": st.reasoning_tokens,  # of those, a thinking model's thoughts
        "queued_s": st.queued_s,
        "ttft_s": st.ttft_s,
        "answer_s": st.answer_s,  # to the answer's first token, after the thoughts (NaN: no thoughts)
        "itl_p50_s": st.itl_p50_s,
        "itl_p95_s": st.itl_p95_s,
        "itl_mean_s": statistics.fmean(st.itl) if st.itl else math.nan,
        "itl": st.itl,
        "kv_hit_rate": st.kv_hit_rate,
        "ideal_cached_tokens": ideal_cached,
        "conversation_hit_rate": st.conversation_hit_rate,
        "preemptions": st.preemptions,
        "finish_reason": final.reason.value,
    }


def _summarise(s: BenchSettings, config: EngineConfig, records, wall, cpu_s, snapshots, steps) -> dict:
    gen = sum(r["gen_tokens"] for r in records)
    cached = sum(r["cached_tokens"] for r in records)
    evaluated = sum(r["evaluated_tokens"] for r in records)
    n_turns = max(r["turn"] for r in records) + 1
    by_turn = [[r for r in records if r["turn"] == t] for t in range(n_turns)]
    itl_all = [r["itl_mean_s"] for r in records if not math.isnan(r["itl_mean_s"])]
    gaps = [gap for r in records for gap in r["itl"]]
    high = [r["ttft_s"] for r in records if r["priority"] == "high"]
    short = [r["ttft_s"] for r in records if r["prompt_tokens"] <= SHORT_PROMPT_TOKENS]
    long = [r["ttft_s"] for r in records if r["prompt_tokens"] > SHORT_PROMPT_TOKENS]
    return {
        "configuration": s.label,
        "parallel": s.parallel,
        "mode": s.mode.value,
        "kv_reuse": s.kv_reuse,
        "policy": s.policy.value,
        "itl_target_ms": s.itl_target_ms,
        "model": os.path.basename(s.model_path),
        "n_ctx": config.n_ctx,
        "n_batch": config.n_batch,
        "n_threads": config.n_threads,
        "engine_settings": {name: getattr(value, "value", value) for name, value in s.engine_settings},
        "max_tokens": s.max_tokens,
        "turns": n_turns,
        "notes": [note for note in [cycled_note(s)] if note],
        "agg_tok_s": gen / wall,
        "gen_tokens": gen,
        "wall_s": wall,
        "ttft_p50_s": percentile([r["ttft_s"] for r in records], 50),
        "ttft_p95_s": percentile([r["ttft_s"] for r in records], 95),
        "reasoning_tokens": sum(r["reasoning_tokens"] for r in records),
        "answer_p50_s": percentile([r["answer_s"] for r in records if not math.isnan(r["answer_s"])], 50),
        "itl_p50_s": percentile(gaps, 50),  # every gap between two tokens of one stream, pooled
        "itl_p95_s": percentile(gaps, 95),
        "ttft_p95_short_s": percentile(short, 95),
        "ttft_p95_long_s": percentile(long, 95),
        "ttft_p50_high_priority_s": percentile(high, 50),
        "avg_latency_ms": 1000 * statistics.fmean(itl_all) if itl_all else math.nan,
        "prompt_tokens": sum(r["prompt_tokens"] for r in records),
        "cached_tokens": cached,
        "evaluated_tokens": evaluated,
        "kv_hit_rate": hit_rate(cached, evaluated),
        "kv_hit_rate_by_turn": [
            hit_rate(sum(r["cached_tokens"] for r in rs), sum(r["evaluated_tokens"] for r in rs)) for rs in by_turn
        ],
        "kv_hit_rate_ideal_by_turn": [_ideal_hit_rate(rs) for rs in by_turn],
        "ttft_p50_by_turn_s": [percentile([r["ttft_s"] for r in rs], 50) for rs in by_turn],
        "evictions": sum(snap.evictions for snap in snapshots),
        "preemptions": sum(snap.preemptions for snap in snapshots),
        "ram_saves": sum(snap.saves for snap in snapshots),  # the KV cache's RAM tier (--cache-ram)
        "ram_restores": sum(snap.restores for snap in snapshots),
        "ram_restored_tokens": sum(snap.restored_tokens for snap in snapshots),
        "cpu_util": cpu_s / (wall * (os.cpu_count() or 1)),
        "mean_batch_tokens": statistics.fmean(st.n_tokens for st in steps) if steps else math.nan,
        "mean_batch_seqs": statistics.fmean(st.n_seqs for st in steps) if steps else math.nan,
        "mean_batch_limit": statistics.fmean(st.batch_limit for st in steps) if steps else math.nan,
        "by_model": _by_model(records),
        "requests": records,
    }


def _host_time(gen: int, wall: float, before, after) -> dict:
    """Where the run's time went besides the model: wall time minus time in llama_decode, per
    generated token (the engine's own work, the event loop's and any wait between steps), and of
    that what the engine's steps took around their decodes (scheduling, batch, sampling, text)."""
    decode = sum(a.decode_s - b.decode_s for a, b in zip(after, before, strict=True))
    steps = sum(a.step_s - b.step_s for a, b in zip(after, before, strict=True))
    per_token = 1e6 / gen if gen else math.nan
    return {
        "decode_s": decode,
        "host_us_per_token": (wall - decode) * per_token,
        "step_host_us_per_token": (steps - decode) * per_token,
    }


def _layout(infos, before, after) -> dict:
    """The KV layout at the end of the run (the first model's), and why; how often the layouts
    changed during the run while chats ran (every model's) and the seconds those changes took; and
    the layout the first model was loaded with, which a change leaves behind."""
    return {
        "kv_layout": after[0].kv_layout or infos[0].kv_layout,
        "kv_layout_at_load": infos[0].kv_layout,
        "layout_changes": sum(a.layout_changes - b.layout_changes for a, b in zip(after, before, strict=True)),
        "layout_change_s": sum(a.layout_change_s - b.layout_change_s for a, b in zip(after, before, strict=True)),
    }


def _speculation(before, after) -> dict:
    """Speculative decoding during the run: tokens drafted and verified, and of those the right ones."""
    drafted = sum(a.drafted_tokens - b.drafted_tokens for a, b in zip(after, before, strict=True))
    accepted = sum(a.accepted_tokens - b.accepted_tokens for a, b in zip(after, before, strict=True))
    return {"drafted_tokens": drafted, "accepted_tokens": accepted, "acceptance": accepted / drafted if drafted else None}


def _by_model(records: list[dict]) -> dict[str, dict]:
    """Each model's tokens and its own speed: its tokens over the time until its last reply ended."""
    figures = {}
    for model in dict.fromkeys(r["model"] for r in records):
        mine = [r for r in records if r["model"] == model]
        gen = sum(r["gen_tokens"] for r in mine)
        figures[model] = {"gen_tokens": gen, "agg_tok_s": gen / max(r["finished_s"] for r in mine)}
    return figures


def _ideal_hit_rate(records: list[dict]) -> float | None:
    """The hit rate had every earlier turn stayed cached whole (None on first turns: no history)."""
    if any(r["ideal_cached_tokens"] is None for r in records):
        return None
    cached = sum(r["ideal_cached_tokens"] for r in records)
    return hit_rate(cached, sum(r["prompt_tokens"] for r in records) - cached)


def format_table(runs: list[dict]) -> str:
    header = (
        f"{'configuration':<40} {'parallel':>8} {'throughput tok/s':>17} {'avg latency ms':>15} "
        f"{'ITL p95 ms':>11} {'TTFT p50 ms':>12} {'KV hit':>7} {'CPU util':>9} {'host us/tok':>12}"
    )
    lines = [header, "-" * len(header)]
    for r in runs:
        lines.append(
            f"{r['configuration']:<40} {r['parallel']:>8} {r['agg_tok_s']:>17.1f} {r['avg_latency_ms']:>15.1f} "
            f"{1000 * r['itl_p95_s']:>11.0f} {1000 * r['ttft_p50_s']:>12.0f} {_pct(r['kv_hit_rate']):>7} {_pct(r['cpu_util']):>9} {r['host_us_per_token']:>12.0f}"
        )
    return "\n".join(lines)


def _pct(x: float) -> str:
    return "-" if math.isnan(x) else f"{100 * x:.0f}%"
