"""The status bar's engine line: the RAM tier shows once it holds or has held something; what it says
when a KV layout changed, and the engine panel's layout line."""

from __future__ import annotations

import pytest

from app.engine.stats import EngineSnapshot
from app.ui.docks.engine_panel import layout_line
from app.ui.window.status_line import engine_status, layout_message

pytestmark = pytest.mark.unit


def snapshot(**tier) -> EngineSnapshot:
    return EngineSnapshot(
        cells_used=900, cells_total=1024, slots_used=4, slots_total=4, running=3, waiting=2,
        evictions=5, preemptions=1, steps=120, generated_tokens=400, paused=1, **tier,
    )  # fmt: skip


def test_the_status_line_names_the_ram_tier_once_it_was_used():
    whole, *_ = engine_status("continuous", snapshot())
    assert whole == "continuous · running 2 · paused 1 · waiting 2 · KV cells 900/1024 · evictions 5 · steps 120"
    used = snapshot(saved_entries=2, saved_bytes=19 * 2**20, saves=5, restores=3, restored_tokens=900)
    whole, *_ = engine_status("continuous", used)
    assert whole == (
        "continuous · running 2 · paused 1 · waiting 2 · KV cells 900/1024 · evictions 5 · in RAM 2 (19 MiB), 3 restored · steps 120"
    )


POOL = "one pool (automatic: a chat of 5000 tokens outgrew its stream of 4096 cells)"


def test_a_layout_change_is_told_with_its_reason_and_the_model_when_several_are_loaded():
    changed = snapshot(kv_layout=POOL, layout_changes=1, layout_change_s=0.05)
    assert layout_message(changed) == f"The KV layout changed to {POOL}"
    assert layout_message(changed, "q8") == f"q8: the KV layout changed to {POOL}"


def test_the_panels_layout_line_counts_the_changes_and_their_time():
    streams = "a stream per sequence, 8 × 4096 cells (automatic: one pool when a chat outgrows its stream)"
    assert layout_line(snapshot(kv_layout=streams)) == streams  # never changed: the layout and why alone
    once, twice = (snapshot(kv_layout=POOL, layout_changes=n, layout_change_s=t) for n, t in ((1, 0.054), (2, 0.306)))
    # the changes in non-breaking spaces: a wrapped line never splits them
    assert layout_line(once) == f"{POOL} · " + "changed 1 time, 0.05 s".replace(" ", "\u00a0")
    assert layout_line(twice) == f"{POOL} · " + "changed 2 times, 0.31 s".replace(" ", "\u00a0")
