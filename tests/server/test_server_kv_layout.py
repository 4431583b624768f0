"""/metrics shows the KV layout the engine runs now (1 for a stream per sequence, 0 for one pool), how
often it changed while chats ran and what the changes took: for every model together and for each."""

from __future__ import annotations

import aiohttp
import pytest
from helpers import run
from serving import Serving, chat

from app.engine.stats import EngineSnapshot
from app.server.prometheus import ModelFigures, ServedTotals, prometheus_text

P = "batch_playground_"


def values_of(text: str) -> dict[str, str]:
    return dict(line.rsplit(" ", 1) for line in text.splitlines() if not line.startswith("#"))


def snapshot(kv_layout: str, changes: int, seconds: float) -> EngineSnapshot:
    return EngineSnapshot(
        cells_used=10, cells_total=2048, slots_used=1, slots_total=2, running=0, waiting=0, evictions=0,
        preemptions=0, steps=3, generated_tokens=4, kv_layout=kv_layout, layout_changes=changes, layout_change_s=seconds,
    )  # fmt: skip


@pytest.mark.unit
def test_each_models_layout_is_a_gauge_and_together_counts_the_models_with_streams():
    models = {
        "a": ModelFigures(snapshot("a stream per sequence, 2 × 1024 cells (automatic: every chat fits …)", 2, 0.25), ()),
        "b": ModelFigures(snapshot("one pool (automatic: a chat of 1500 tokens outgrew its stream of 1024 cells)", 1, 0.5), ()),
        "c": ModelFigures(snapshot("one pool (as set)", 0, 0.0), ()),
    }
    text = prometheus_text(models, ServedTotals())
    values = values_of(text)
    assert [values[f'{P}kv_layout_streams{{model="{m}"}}'] for m in "abc"] == ["1", "0", "0"]
    assert values[f"{P}kv_layout_streams"] == "1"  # one model runs streams
    assert [values[f'{P}kv_layout_changes_total{{model="{m}"}}'] for m in "abc"] == ["2", "1", "0"]
    assert values[f"{P}kv_layout_changes_total"] == "3" and values[f"{P}kv_layout_change_seconds_total"] == "0.75"
    assert values[f"{P}generated_tokens_total"] == "12"  # the other figures still add up
    assert f"# TYPE {P}kv_layout_change_seconds_total counter" in text


@pytest.mark.tiny
def test_a_chat_outgrowing_its_stream_shows_in_metrics_as_one_pool_and_one_change(tiny_config):
    two_streams = tiny_config.with_(n_ctx=2048, capacity=2, kv_unified=None)  # 2 streams of 1,024 cells

    async def main():
        async with Serving(two_streams) as (client, _server, url), aiohttp.ClientSession() as http:
            async with http.get(f"{url}/metrics") as r:
                before = await r.text()
            long = chat("word " * 1100 + "Summarize.", max_tokens=4)
            async with http.post(f"{url}/v1/chat/completions", json=long) as r:
                assert r.status == 200
            async with http.get(f"{url}/metrics") as r:
                return before, await r.text(), client.snapshot, client.default_model

    before, after, snap, model = run(main())
    before, after = values_of(before), values_of(after)
    labelled = f'{{model="{model}"}}'
    assert before[f"{P}kv_layout_streams"] == before[f"{P}kv_layout_streams{labelled}"] == "1"
    assert before[f"{P}kv_layout_changes_total"] == "0"
    assert snap.layout_changes == 1 and snap.kv_layout.startswith("one pool (automatic: a chat of")
    assert after[f"{P}kv_layout_streams"] == after[f"{P}kv_layout_streams{labelled}"] == "0"
    assert after[f"{P}kv_layout_changes_total"] == after[f"{P}kv_layout_changes_total{labelled}"] == "1"
    seconds = float(after[f"{P}kv_layout_change_seconds_total"])
    assert seconds > 0 and seconds == pytest.approx(snap.layout_change_s, rel=1e-5)  # 6 significant digits
