"""The status bar's engine line: the RAM tier shows once it holds or has held something."""

from __future__ import annotations

import pytest

from app.engine.stats import EngineSnapshot
from app.ui.main_window import engine_status

pytestmark = pytest.mark.unit


def snapshot(**tier) -> EngineSnapshot:
    return EngineSnapshot(
        cells_used=900, cells_total=1024, slots_used=4, slots_total=4, running=3, waiting=2,
        evictions=5, preemptions=1, steps=120, generated_tokens=400, paused=1, **tier,
    )  # fmt: skip


def test_the_status_line_names_the_ram_tier_once_it_was_used():
    assert engine_status("batched", snapshot()) == (
        "batched · running 2 · paused 1 · waiting 2 · KV cells 900/1024 · evictions 5 · steps 120"
    )
    used = snapshot(saved_entries=2, saved_bytes=19 * 2**20, saves=5, restores=3, restored_tokens=900)
    assert engine_status("batched", used) == (
        "batched · running 2 · paused 1 · waiting 2 · KV cells 900/1024 · evictions 5 · in RAM 2 (19 MiB), 3 restored · steps 120"
    )
