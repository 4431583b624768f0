"""Fan-out values: lists and ranges of a setting, and what is said when they cannot be read."""

from __future__ import annotations

import csv
import io
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.ui.docks.compare_view import Compared, export_text
from app.ui.window.fan_out import MAX_PANES, SETTINGS, parse_values

pytestmark = pytest.mark.unit

BY_NAME = {s.name: s for s in SETTINGS}


@pytest.mark.parametrize(
    ("name", "text", "values"),
    [
        ("temperature", "0.2, 0.7, 1.2", (0.2, 0.7, 1.2)),
        ("temperature", "0..1.5 step 0.5", (0.0, 0.5, 1.0, 1.5)),
        ("temperature", "0.1 .. 0.3 STEP 0.1", (0.1, 0.2, 0.3)),
        ("top_k", "1 10 40 0", (1, 10, 40, 0)),
        ("seed", "1..4", (1, 2, 3, 4)),
        ("mirostat", "0..2", (0, 1, 2)),  # the Advanced group's knobs too
        ("presence_penalty", "-1..1 step 1", (-1.0, 0.0, 1.0)),
        ("dry_multiplier", "0, 0.8", (0.0, 0.8)),
        ("system_prompt", "Be terse.\n\n(none)\nAnswer as a pirate.", ("Be terse.", "", "Answer as a pirate.")),
    ],
)
def test_lists_and_ranges_are_read(name, text, values):
    assert parse_values(BY_NAME[name], text) == values


@pytest.mark.parametrize(
    ("name", "text", "said"),
    [
        ("temperature", "", "write the values"),
        ("temperature", "hot", "'hot' is not a number"),
        ("temperature", "0.5, 3", "goes from 0 to 2; 3 is outside"),
        ("temperature", "0..1", "say the step"),
        ("temperature", "1..0 step 0.1", "goes up"),
        ("top_k", "2.5", "whole numbers"),
        ("xtc_threshold", "0.2, 1.5", "goes from 0 to 1; 1.5 is outside"),
        ("seed", "1..100", f"at most {MAX_PANES} panes"),
    ],
)
def test_what_cannot_be_read_is_explained(name, text, said):
    with pytest.raises(ValueError, match=said):
        parse_values(BY_NAME[name], text)


@settings(max_examples=200, deadline=None)
@given(setting=st.sampled_from(SETTINGS), text=st.text(max_size=40))
def test_any_text_gives_values_in_range_or_a_reason(setting, text):
    try:
        values = parse_values(setting, text)
    except ValueError as e:
        assert str(e)
        return
    assert 1 <= len(values) <= MAX_PANES
    if setting.kind is not str:
        assert all(isinstance(v, setting.kind) and setting.lo <= v <= setting.hi for v in values)


def test_exports_hold_every_row_and_reply():
    rows = [
        Compared("a", "Temperature 0.2", "stop", 12, 40.5, 120.0, -0.52, "Calm | sea.\nSecond line"),
        Compared("b", "Temperature 1.2"),
    ]
    md = export_text("Fan-out", rows, ".md")
    assert "| Temperature 0.2 | 12 | 40.5 | 120 | -0.520 |" in md and "Calm | sea.\nSecond line" in md
    assert "## Temperature 1.2\n\n(waiting)" in md
    table = list(csv.reader(io.StringIO(export_text("Fan-out", rows, ".csv"))))
    assert table[1][-1] == "Calm | sea.\nSecond line" and len(table) == 3
    data = json.loads(export_text("Fan-out", rows, ".json"))
    assert data["rows"][1]["tok_s"] is None and data["rows"][0]["mean_logprob"] == -0.52
